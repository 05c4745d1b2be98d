//! Staging: operands gathered into contiguous f32 blocks, one per (batch, head), and results
//! scattered back.
//!
//! Gathering once costs O(tokens·D) against the O(Lq·Lkv·D) of attention, and buys the kernel
//! unit-stride f32 tiles whatever the input type and strides; only logical rows are gathered,
//! so padding rows are never read.

use std::ops::Range;

use ragged_core::dtype::FloatElement;
use ragged_core::error::{KernelError, Role};

use super::layout::AttnLayout;
use super::pool::{Pool, block_starts};

/// The f32 staging buffers kept between calls: the forward's LSE and spilled O, the backward's
/// gradients and, on AMX tiles, its LSE and Δ.
static BUFFERS: Pool<f32> = Pool::new(16);

impl Drop for Staged {
    fn drop(&mut self) {
        BUFFERS.give(std::mem::take(&mut self.data));
    }
}

/// `[b][h][row < len(b)][d]` in f32.
#[derive(Debug)]
pub(crate) struct Staged {
    pub data: Vec<f32>,
    heads: usize,
    width: usize,
    starts: Vec<usize>,
    lens: Vec<usize>,
}

impl Staged {
    /// Blocks of `width` columns for `heads` heads and `lens[b]` rows of `role`, to be
    /// overwritten.
    ///
    /// The size follows the graph's dims, not the buffer (a zero stride broadcasts one element
    /// over any extent), so it is computed checked and reserved fallibly: a failed allocation
    /// would abort the host process, where an error lets the caller decline.
    pub fn for_overwrite(
        role: Role,
        heads: usize,
        width: usize,
        lens: &[usize],
    ) -> Result<Self, KernelError> {
        let too_large = |elements: String| KernelError::StagingTooLarge { role, elements };
        let (starts, total) = block_starts(heads, width, lens)
            .ok_or_else(|| too_large("more than 2^64".to_owned()))?;
        // Every element is overwritten by the gather or the kernel.
        let data = BUFFERS.buffer(total, || too_large(total.to_string()))?;
        Ok(Staged {
            data,
            heads,
            width,
            starts,
            lens: lens.to_vec(),
        })
    }

    /// Every batch's rows (all heads), mutably and disjointly, in storage order.
    pub fn batches_mut(&mut self) -> Vec<&mut [f32]> {
        let mut out = Vec::with_capacity(self.lens.len());
        let mut rest = &mut self.data[..];
        for &len in &self.lens {
            let (batch, tail) =
                std::mem::take(&mut rest).split_at_mut(self.heads * len * self.width);
            rest = tail;
            out.push(batch);
        }
        out
    }

    /// Gathers the first `lens[b]` rows of every batch and head of `src` row-major; blocks in
    /// parallel.
    pub fn gather<T: FloatElement>(
        role: Role,
        src: &[T],
        layout: &AttnLayout,
        lens: &[usize],
    ) -> Result<Self, KernelError> {
        let dim = layout.head_dim;
        let mut staged = Staged::for_overwrite(role, layout.heads, dim, lens)?;
        let mut blocks = Vec::with_capacity(lens.len() * layout.heads);
        let mut rest = &mut staged.data[..];
        for (b, &len) in lens.iter().enumerate() {
            for h in 0..layout.heads {
                let (block, tail) = std::mem::take(&mut rest).split_at_mut(len * dim);
                rest = tail;
                blocks.push((b, h, block));
            }
        }
        super::threads::for_each_init(
            blocks,
            || (),
            |_, (b, h, block)| {
                for (s, row) in block.chunks_exact_mut(dim.max(1)).enumerate() {
                    let start = layout.position(b, s, h, 0);
                    for (d, dst) in row.iter_mut().enumerate() {
                        *dst = src[start + d * layout.stride_d].to_f32();
                    }
                }
            },
        );
        Ok(staged)
    }

    /// The rows of (b, h).
    pub fn block(&self, b: usize, h: usize) -> &[f32] {
        let start = self.starts[b * self.heads + h];
        &self.data[start..start + self.lens[b] * self.width]
    }

    /// Writes every staged row to `dst` at `layout`, converting to `T`; batches in parallel
    /// when their rows occupy disjoint ranges of `dst` (every layout the graph side builds), so
    /// that the conversion does not run on one thread after a parallel kernel.
    pub fn scatter<T: FloatElement>(&self, dst: &mut [T], layout: &AttnLayout) {
        let Some(ranges) = self.batch_ranges(layout) else {
            for b in 0..self.lens.len() {
                self.scatter_batch(b, dst, 0, layout);
            }
            return;
        };
        let mut parts = Vec::with_capacity(ranges.len());
        let mut rest = dst;
        let mut consumed = 0;
        for (b, range) in ranges {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(range.start - consumed);
            let (part, tail) = tail.split_at_mut(range.len());
            rest = tail;
            consumed = range.end;
            parts.push((b, range.start, part));
        }
        // Largest batches first: the schedule's tail is made of small ones.
        parts.sort_by_key(|&(b, _, _)| std::cmp::Reverse(self.lens[b]));
        super::threads::for_each_init(
            parts,
            || (),
            |_, (b, origin, part)| {
                self.scatter_batch(b, part, origin, layout);
            },
        );
    }

    /// The element range of `dst` each non-empty batch writes, in increasing order, or `None`
    /// when two of them overlap.
    fn batch_ranges(&self, layout: &AttnLayout) -> Option<Vec<(usize, Range<usize>)>> {
        if self.width == 0 || self.heads == 0 {
            return Some(Vec::new());
        }
        let mut ranges: Vec<(usize, Range<usize>)> = (0..self.lens.len())
            .filter(|&b| self.lens[b] > 0)
            .map(|b| {
                let last = layout.position(b, self.lens[b] - 1, self.heads - 1, self.width - 1);
                (b, layout.base[b]..last + 1)
            })
            .collect();
        ranges.sort_by_key(|(_, range)| range.start);
        let disjoint = ranges.windows(2).all(|w| w[0].1.end <= w[1].1.start);
        disjoint.then_some(ranges)
    }

    /// Writes batch `b`'s rows into `dst`, which holds `layout`'s elements from `origin` on.
    fn scatter_batch<T: FloatElement>(
        &self,
        b: usize,
        dst: &mut [T],
        origin: usize,
        layout: &AttnLayout,
    ) {
        let (len, width) = (self.lens[b], self.width);
        if len == 0 || width == 0 || self.heads == 0 {
            return;
        }
        let start = self.starts[b * self.heads];
        let rows = self.data[start..start + self.heads * len * width].chunks_exact(width);
        for (i, row) in rows.enumerate() {
            let (h, s) = (i / len, i % len);
            let first = layout.position(b, s, h, 0) - origin;
            if layout.stride_d == 1 {
                convert_row(&mut dst[first..first + width], row);
            } else {
                for (d, &x) in row.iter().enumerate() {
                    dst[first + d * layout.stride_d] = T::from_f32(x);
                }
            }
        }
    }
}

/// `dst[i] = T::from_f32(src[i])`, on the widest vectors `crate::isa` allows: a 16-bit
/// conversion is a dozen integer operations per element, which the baseline build runs four at a
/// time.
pub(crate) fn convert_row<T: FloatElement>(dst: &mut [T], src: &[f32]) {
    fn plain<T: FloatElement>(dst: &mut [T], src: &[f32]) {
        for (y, &x) in dst.iter_mut().zip(src) {
            *y = T::from_f32(x);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        use crate::isa::{Isa, isa};
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        fn wide<T: FloatElement>(dst: &mut [T], src: &[f32]) {
            plain(dst, src);
        }
        #[target_feature(enable = "avx2,fma")]
        fn narrow<T: FloatElement>(dst: &mut [T], src: &[f32]) {
            plain(dst, src);
        }
        match isa() {
            // SAFETY: `isa()` chose a set the CPU reports (`crate::isa`).
            Isa::Avx512 | Isa::Avx512Bf16 | Isa::Amx => return unsafe { wide(dst, src) },
            // SAFETY: as above.
            Isa::Avx2Fma => return unsafe { narrow(dst, src) },
            Isa::Baseline => {}
        }
    }
    plain(dst, src);
}

/// Frees every staging buffer the pool keeps. The plugin calls it when its last handle is
/// destroyed, so that unloading the library leaves none of this heap behind (issue 13).
pub fn release_caches() {
    BUFFERS.release();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converted_rows_round_like_the_half_crate() {
        // Random bit patterns (denormals, NaN and infinities among them), a length that leaves
        // a partial chunk, on whatever path this CPU takes.
        let src: Vec<f32> = (0..100_003u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)))
            .chain([1e-40, -1e-42, f32::MIN_POSITIVE, 0.5, f32::NAN])
            .collect();
        let mut dst = vec![half::bf16::ZERO; src.len()];
        convert_row(&mut dst, &src);
        for (&x, &y) in src.iter().zip(&dst) {
            let want = half::bf16::from_f32(x);
            if x.is_nan() {
                assert!(y.is_nan(), "{x}");
            } else {
                assert_eq!(y.to_bits(), want.to_bits(), "{x:e} ({:#x})", x.to_bits());
            }
        }
    }

    /// Token-major ragged `[T, H, D]` (batches at row offsets) or dense `[B, H, S, D]`.
    fn layout(ragged: bool, offsets: &[usize], heads: usize, dim: usize, seq: usize) -> AttnLayout {
        let batch = offsets.len() - 1;
        let (base, stride_s, stride_h) = if ragged {
            let base = offsets[..batch].iter().map(|&o| o * heads * dim).collect();
            (base, heads * dim, dim)
        } else {
            (
                (0..batch).map(|b| b * heads * seq * dim).collect(),
                dim,
                seq * dim,
            )
        };
        AttnLayout {
            ragged,
            batch,
            heads,
            head_dim: dim,
            base,
            extent: offsets.windows(2).map(|w| w[1] - w[0]).collect(),
            stride_s,
            stride_h,
            stride_d: 1,
            pages: None,
        }
    }

    /// Staged rows numbered so that every (b, h, s, d) has its own value.
    fn numbered(heads: usize, dim: usize, lens: &[usize]) -> Staged {
        let mut staged = Staged::for_overwrite(Role::O, heads, dim, lens).unwrap();
        for (i, x) in staged.data.iter_mut().enumerate() {
            *x = i as f32 + 1.0;
        }
        staged
    }

    fn check_scatter(ragged: bool) {
        let (heads, dim, seq) = (3, 5, 7);
        let lens = [4, 0, 7, 1];
        let offsets = [0, 4, 4, 11, 12];
        let layout = layout(ragged, &offsets, heads, dim, seq);
        let staged = numbered(heads, dim, &lens);
        let size = if ragged { 12 } else { 4 * seq } * heads * dim;
        let mut dst = vec![-1.0f32; size];
        staged.scatter(&mut dst, &layout);
        let mut expected = vec![-1.0f32; size];
        let mut value = 1.0;
        for (b, &len) in lens.iter().enumerate() {
            for h in 0..heads {
                for s in 0..len {
                    for d in 0..dim {
                        expected[layout.position(b, s, h, d)] = value;
                        value += 1.0;
                    }
                }
            }
        }
        assert_eq!(dst, expected, "ragged {ragged}");
    }

    #[test]
    fn scatter_writes_every_logical_row_and_nothing_else() {
        check_scatter(true);
        check_scatter(false);
    }

    #[test]
    fn overlapping_batches_are_scattered_serially_in_batch_order() {
        // Two batches based at the same element: the later one's rows win, as in a serial loop.
        let mut layout = layout(true, &[0, 2, 4], 1, 2, 0);
        layout.base = vec![0, 0];
        let staged = numbered(1, 2, &[2, 2]);
        assert!(staged.batch_ranges(&layout).is_none());
        let mut dst = vec![0.0f32; 4];
        staged.scatter(&mut dst, &layout);
        assert_eq!(dst, [5.0, 6.0, 7.0, 8.0]);
        let disjoint = super::tests::layout(true, &[0, 2, 4], 1, 2, 0);
        assert_eq!(
            staged.batch_ranges(&disjoint),
            Some(vec![(0, 0..4), (1, 4..8)])
        );
    }
}
