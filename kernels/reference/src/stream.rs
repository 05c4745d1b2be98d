//! The walk over a row that both instruction sets' non-temporal row writers share
//! (`crate::avx512::stream_row`, `crate::avx2::stream_row`); each supplies only its store of one
//! cache line.

use ragged_core::dtype::FloatElement;

/// Bytes of a cache line, the unit a non-temporal store writes whole.
const LINE: usize = 64;

/// `dst[i] = T::from_f32(src[i])` (as long as the shorter). The elements before `dst`'s first
/// 64-byte boundary and after its last whole line get ordinary stores; each whole line is
/// converted into a buffer and handed to `store_line(to, from)`, `to` the line's `64 / size_of::<T>()`
/// elements starting on a 64-byte boundary, `from` at least as many converted elements (64
/// readable bytes). Always inlined into the callers' `#[target_feature]` functions, so the
/// conversion loop is compiled with their instruction set.
#[inline(always)]
pub(crate) fn convert_lines<T: FloatElement>(
    dst: &mut [T],
    src: &[f32],
    mut store_line: impl FnMut(&mut [T], &[T]),
) {
    let per = LINE / std::mem::size_of::<T>();
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    let head = dst.as_ptr().align_offset(LINE).min(len);
    let (dst_head, dst_body) = dst.split_at_mut(head);
    let (src_head, src_body) = src.split_at(head);
    for (y, &x) in dst_head.iter_mut().zip(src_head) {
        *y = T::from_f32(x);
    }
    let mut dst_lines = dst_body.chunks_exact_mut(per);
    let mut src_lines = src_body.chunks_exact(per);
    let mut line = [T::from_f32(0.0); 16];
    for (to, from) in dst_lines.by_ref().zip(src_lines.by_ref()) {
        // Two lines' worth for 16-bit types: one conversion loop LLVM vectorises, one store.
        let mut wide = [T::from_f32(0.0); 32];
        let buffer: &mut [T] = if per <= 16 { &mut line } else { &mut wide };
        for (y, &x) in buffer.iter_mut().zip(from) {
            *y = T::from_f32(x);
        }
        store_line(to, buffer);
    }
    for (y, &x) in dst_lines
        .into_remainder()
        .iter_mut()
        .zip(src_lines.remainder())
    {
        *y = T::from_f32(x);
    }
}
