//! Eight f32 lanes in one AVX2 register: the AVX2 build's forms of what `crate::avx512` does
//! with sixteen, for the loops LLVM does not vectorise well on its own.
//!
//! The arithmetic is `std::arch` intrinsics, safe to call inside functions compiled with the
//! same target features; only the memory moves need `unsafe`. Callers reach these functions
//! from their own `#[target_feature]` code, after `crate::isa` has reported AVX2 and FMA.

use std::arch::x86_64::*;

use ragged_core::dtype::FloatElement;

/// `dst[i] = T::from_f32(src[i])` (as long as the shorter), the 64-byte-aligned runs stored
/// with non-temporal stores, as `crate::avx512::stream_row` does (two 32-byte stores a line).
/// The caller orders them with [`fence`].
#[target_feature(enable = "avx2,fma")]
pub(crate) fn stream_row<T: FloatElement>(dst: &mut [T], src: &[f32]) {
    const LINE: usize = 64;
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
        let mut wide = [T::from_f32(0.0); 32];
        let buffer: &mut [T] = if per <= 16 { &mut line } else { &mut wide };
        for (y, &x) in buffer.iter_mut().zip(from) {
            *y = T::from_f32(x);
        }
        let (to, from) = (
            to.as_mut_ptr().cast::<__m256i>(),
            buffer.as_ptr().cast::<__m256i>(),
        );
        // SAFETY: `buffer` holds at least `per` initialised elements, 64 bytes; `to` is `per`
        // elements, 64 writable bytes borrowed exclusively, on a 64-byte boundary (the lines
        // start at an aligned element), so both halves are 32-byte aligned.
        unsafe {
            _mm256_stream_si256(to, _mm256_loadu_si256(from));
            _mm256_stream_si256(to.add(1), _mm256_loadu_si256(from.add(1)));
        }
    }
    for (y, &x) in dst_lines
        .into_remainder()
        .iter_mut()
        .zip(src_lines.remainder())
    {
        *y = T::from_f32(x);
    }
}

/// Orders the non-temporal stores of [`stream_row`] before every later store.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn fence() {
    _mm_sfence();
}

#[cfg(test)]
mod tests {
    use super::*;
    fn avx2() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }

    #[test]
    fn streamed_rows_match_the_element_wise_conversion() {
        if !avx2() {
            println!("skipped: this CPU has no AVX2 and FMA");
            return;
        }
        let src: Vec<f32> = (0..300u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)))
            .collect();
        for start in 0..40 {
            for len in [0, 1, 15, 16, 17, 33, 64, 100, 250] {
                let src = &src[start..start + len];
                let mut wide = vec![0.0f32; len + 16];
                let mut narrow = vec![half::f16::ZERO; len + 40];
                let (wide, narrow) = (&mut wide[start % 16..][..len], &mut narrow[start..][..len]);
                // SAFETY: AVX2 and FMA were detected above.
                unsafe {
                    stream_row(wide, src);
                    stream_row(narrow, src);
                    fence();
                }
                for ((&x, &y), &z) in src.iter().zip(wide.iter()).zip(narrow.iter()) {
                    assert_eq!(x.to_bits(), y.to_bits(), "f32 {x}");
                    let want = half::f16::from_f32(x);
                    assert!(
                        z.to_bits() == want.to_bits() || z.is_nan() && want.is_nan(),
                        "{x}"
                    );
                }
            }
        }
    }
}
