//! Staging of the backward's inputs into the per-thread panels its products read: row panels of
//! W rows per head-dim entry (quads of NR rows, or lanes of MR), optionally column panels of MR
//! as well, each input row read once where it lies (any layout, any element type) and converted
//! to f32, with the rows AHEAD prefetched. On AVX-512 a panel's rows are moved into place by
//! register transposes.

use std::ops::Range;

use crate::gemm::{Blocking, Lane, MR, NR};
use crate::sdpa::layout::{AHEAD, AttnLayout, prefetch_row};
use ragged_core::dtype::FloatElement;

/// Clears `buffer` and fills it with `len` copies of `value`.
pub(super) fn reset<X: Clone>(buffer: &mut Vec<X>, len: usize, value: X) {
    buffer.clear();
    buffer.resize(len, value);
}

/// Grows `buffer` to at least `len` entries; the caller overwrites what it reads.
pub(super) fn grow<X: Clone>(buffer: &mut Vec<X>, len: usize, value: X) -> &mut [X] {
    if buffer.len() < len {
        buffer.resize(len, value);
    }
    &mut buffer[..len]
}

/// A row panel's entry for one head-dim entry: W rows' values.
pub(super) trait Panel: Copy {
    const W: usize;
    const ZERO: Self;
    fn rows(&mut self) -> &mut [f32];
    /// The panels as quads of rows or as lanes, whichever they are.
    fn arranged(panels: &mut [Self]) -> Arranged<'_>;
}

/// Row panels by their width.
pub(super) enum Arranged<'a> {
    Quads(&'a mut [[f32; NR]]),
    Lanes(&'a mut [Lane]),
}

impl Panel for Lane {
    const W: usize = MR;
    const ZERO: Self = Lane::ZERO;
    #[inline(always)]
    fn rows(&mut self) -> &mut [f32] {
        &mut self.0
    }
    fn arranged(panels: &mut [Self]) -> Arranged<'_> {
        Arranged::Lanes(panels)
    }
}

impl Panel for [f32; NR] {
    const W: usize = NR;
    const ZERO: Self = [0.0; NR];
    #[inline(always)]
    fn rows(&mut self) -> &mut [f32] {
        self
    }
    fn arranged(panels: &mut [Self]) -> Arranged<'_> {
        Arranged::Quads(panels)
    }
}

/// Row `s` of head `h` of batch `b` in f32.
#[inline(always)]
pub(super) fn read_row<T: FloatElement>(
    src: &[T],
    layout: &AttnLayout,
    (b, s, h): (usize, usize, usize),
    out: &mut [f32],
) {
    let (start, dim) = (layout.position(b, s, h, 0), out.len());
    if layout.stride_d == 1 {
        for (y, x) in out.iter_mut().zip(&src[start..start + dim]) {
            *y = x.to_f32();
        }
    } else {
        for (d, y) in out.iter_mut().enumerate() {
            *y = src[start + d * layout.stride_d].to_f32();
        }
    }
}

/// Stages rows `rows` of head `h` of batch `b` of `src` in row panels of `W` (`panel·D + d`,
/// the rows of the last panel past the end zero) and, with `cols`, in column panels of MR as
/// well (`(d / MR)·n + r`, the columns past D zero), prefetching the input rows AHEAD rows on;
/// `each` sees every row in f32.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the operand, its place and its two arrangements
pub(super) fn stage_rows<T: FloatElement, P: Panel, K: Blocking>(
    (src, layout): (&[T], &AttnLayout),
    (b, h): (usize, usize),
    rows: Range<usize>,
    row: &mut Vec<f32>,
    panels: &mut Vec<P>,
    mut cols: Option<&mut Vec<Lane>>,
    mut each: impl FnMut(usize, &[f32]),
) {
    let dim = layout.head_dim;
    #[cfg(target_arch = "x86_64")]
    if K::WIDE && dim.is_multiple_of(MR) {
        let panels = P::arranged(grow(panels, rows.len().div_ceil(P::W) * dim, P::ZERO));
        // SAFETY: the wide blocking is compiled and chosen only where `isa()` reported
        // AVX-512 F/BW/VL, AVX2 and FMA (`run_item`).
        return unsafe { stage_wide((src, layout), (b, h), rows, row, panels, cols, each) };
    }
    let n = rows.len();
    let w = P::W;
    let panels = grow(panels, n.div_ceil(w) * dim, P::ZERO);
    panels[n / w * dim..].fill(P::ZERO);
    if let Some(cols) = cols.as_deref_mut() {
        let len = dim.div_ceil(MR) * n;
        if dim.is_multiple_of(MR) {
            grow(cols, len, Lane::ZERO);
        } else {
            reset(cols, len, Lane::ZERO);
        }
    }
    reset(row, dim, 0.0);
    let end = rows.end;
    for (r, s) in rows.enumerate() {
        if s + AHEAD < end {
            prefetch_row(src, layout, (b, s + AHEAD, h));
        }
        read_row(src, layout, (b, s, h), row);
        let (p, i) = (r / w, r % w);
        for (entry, &x) in panels[p * dim..(p + 1) * dim].iter_mut().zip(row.iter()) {
            entry.rows()[i] = x;
        }
        if let Some(cols) = cols.as_deref_mut() {
            for (q, chunk) in row.chunks(MR).enumerate() {
                for (y, &x) in cols[q * n + r].0.iter_mut().zip(chunk) {
                    *y = x;
                }
            }
        }
        each(r, row);
    }
}

/// [`stage_rows`] on AVX-512 (D a multiple of MR): a panel's rows at a time (4 or 16), each
/// 16 head-dim entries of them put in place by one register transpose, where the element-wise
/// copy had LLVM scatter every row across the panel.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
#[inline]
fn stage_wide<T: FloatElement>(
    (src, layout): (&[T], &AttnLayout),
    (b, h): (usize, usize),
    rows: Range<usize>,
    group: &mut Vec<f32>,
    mut panels: Arranged<'_>,
    mut cols: Option<&mut Vec<Lane>>,
    mut each: impl FnMut(usize, &[f32]),
) {
    use crate::avx512::{transpose_4x16, transpose_16x16};

    let dim = layout.head_dim;
    let n = rows.len();
    let w = match panels {
        Arranged::Quads(_) => NR,
        Arranged::Lanes(_) => MR,
    };
    if let Some(cols) = cols.as_deref_mut() {
        grow(cols, dim / MR * n, Lane::ZERO);
    }
    reset(group, w * dim, 0.0);
    let (start, end) = (rows.start, rows.end);
    /// Head-dim entries `16q..16q + 16` of row `t` of the group.
    fn entries(group: &[f32], dim: usize, t: usize, q: usize) -> &[f32; MR] {
        group[t * dim + q * MR..t * dim + (q + 1) * MR]
            .try_into()
            .expect("MR entries")
    }
    for r in 0..n {
        let s = start + r;
        if s + AHEAD < end {
            prefetch_row(src, layout, (b, s + AHEAD, h));
        }
        let i = r % w;
        let row = &mut group[i * dim..(i + 1) * dim];
        read_row(src, layout, (b, s, h), row);
        if let Some(cols) = cols.as_deref_mut() {
            for (q, chunk) in row.chunks(MR).enumerate() {
                cols[q * n + r].0.copy_from_slice(chunk);
            }
        }
        each(r, row);
        if i + 1 < w && r + 1 < n {
            continue;
        }
        // The rows of a last, partial panel past the end enter as zeros.
        group[(i + 1) * dim..].fill(0.0);
        let panel = r / w * dim..(r / w + 1) * dim;
        for q in 0..dim / MR {
            match &mut panels {
                Arranged::Quads(quads) => {
                    let out = quads[panel.clone()].as_chunks_mut::<MR>().0;
                    let rows = std::array::from_fn(|t| entries(group, dim, t, q));
                    transpose_4x16(rows, &mut out[q]);
                }
                Arranged::Lanes(lanes) => {
                    let out = &mut lanes[panel.clone()][q * MR..(q + 1) * MR];
                    let rows = std::array::from_fn(|t| entries(group, dim, t, q));
                    let mut out = out.iter_mut();
                    let out = std::array::from_fn(|_| &mut out.next().expect("MR lanes").0);
                    transpose_16x16(rows, out);
                }
            }
        }
    }
}
