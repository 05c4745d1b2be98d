//! Staging: operands gathered into contiguous f32 blocks, one per (batch, head), and results
//! scattered back.
//!
//! Gathering once costs O(tokens·D) against the O(Lq·Lkv·D) of attention, and buys the kernel
//! unit-stride f32 tiles whatever the input type and strides; only logical rows are gathered,
//! so padding rows are never read.

use crate::dtype::FloatElement;
use crate::error::{KernelError, Role};

use super::layout::AttnLayout;

/// Recycles staging buffers between calls.
///
/// A fresh buffer of tens of megabytes costs one page fault per 4 KiB on first touch, which
/// measured at a fifth of a whole forward pass on real shapes; reusing the previous call's
/// buffers avoids that. At most a few buffers of at most 256 MiB each are kept.
mod pool {
    use std::sync::Mutex;

    static BUFFERS: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
    /// Buffers kept: a forward stages five (Q, K, V, O, LSE), a backward thirteen.
    const KEEP: usize = 16;
    /// Larger buffers are freed: a one-off huge problem should not pin its memory for good.
    const MAX_KEPT_ELEMENTS: usize = 1 << 26;

    /// The smallest kept buffer that holds `len` elements, else the largest one (it grows less).
    pub(super) fn take(len: usize) -> Vec<f32> {
        let mut buffers = BUFFERS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let fitting = (0..buffers.len())
            .filter(|&i| buffers[i].capacity() >= len)
            .min_by_key(|&i| buffers[i].capacity());
        let largest = (0..buffers.len()).max_by_key(|&i| buffers[i].capacity());
        match fitting.or(largest) {
            Some(i) => buffers.swap_remove(i),
            None => Vec::new(),
        }
    }

    /// Drops every kept buffer and the list itself, so no heap of the pool outlives the call.
    pub(super) fn release() {
        let mut buffers = BUFFERS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *buffers = Vec::new();
    }

    pub(super) fn give(buffer: Vec<f32>) {
        let mut buffers = BUFFERS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if buffers.len() < KEEP && buffer.capacity() <= MAX_KEPT_ELEMENTS {
            buffers.push(buffer);
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        pool::give(std::mem::take(&mut self.data));
    }
}

/// How a gathered (batch, head) block is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrangement {
    /// `s·D + d`: the backward's B operands and accumulators.
    RowMajor,
    /// `d·len + s`.
    Transposed,
    /// Panels of `w` rows, `(s / w)·D·w + d·w + s % w`, the rows padded with zeros to a multiple
    /// of w (4 or 16, `crate::gemm::NR` or `MR`): operands of the micro-kernel whose steps of k
    /// are head-dim entries (the forward's K; the backward's Q, K, V and dO).
    RowPanels(usize),
    /// Panels of `w` columns, `(d / w)·len·w + s·w + d % w`, the columns padded with zeros to a
    /// multiple of w: operands whose steps of k are rows (the forward's V, the backward's Q, K
    /// and dO once more).
    ColumnPanels(usize),
}

impl Arrangement {
    /// Staged (rows, columns) of a block of `len` rows of `dim` values.
    fn block_shape(self, len: usize, dim: usize) -> (usize, usize) {
        match self {
            Arrangement::RowMajor | Arrangement::Transposed => (len, dim),
            Arrangement::RowPanels(w) => (len.next_multiple_of(w), dim),
            Arrangement::ColumnPanels(w) => (len, dim.next_multiple_of(w)),
        }
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
        let mut starts = Vec::with_capacity(lens.len().saturating_mul(heads));
        let mut next = Some(0usize);
        for &len in lens {
            let block = len.checked_mul(width);
            for _ in 0..heads {
                if let Some(start) = next {
                    starts.push(start);
                }
                next = next.zip(block).and_then(|(n, b)| n.checked_add(b));
            }
        }
        let too_large = || KernelError::StagingTooLarge {
            role,
            elements: next.map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string()),
        };
        let next = next.ok_or_else(too_large)?;
        // Every element is overwritten by the gather or the kernel, so a recycled buffer keeps its
        // stale contents rather than paying for a memset; only growth is zero-filled.
        let mut data = pool::take(next);
        data.try_reserve_exact(next.saturating_sub(data.len()))
            .map_err(|_| too_large())?;
        data.resize(next, 0.0);
        Ok(Staged {
            data,
            heads,
            width,
            starts,
            lens: lens.to_vec(),
        })
    }

    /// Zero-filled blocks, for outputs that accumulate (the backward's gradients). A recycled
    /// buffer costs one memset instead of a page fault per 4 KiB.
    pub fn zeros(
        role: Role,
        heads: usize,
        width: usize,
        lens: &[usize],
    ) -> Result<Self, KernelError> {
        let mut staged = Staged::for_overwrite(role, heads, width, lens)?;
        staged.data.fill(0.0);
        Ok(staged)
    }

    /// Columns per row.
    pub fn width(&self) -> usize {
        self.width
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

    /// Gathers the first `lens[b]` rows of every batch and head of `src` into blocks arranged
    /// as `arrangement` says; blocks in parallel.
    pub fn gather<T: FloatElement>(
        role: Role,
        src: &[T],
        layout: &AttnLayout,
        lens: &[usize],
        arrangement: Arrangement,
    ) -> Result<Self, KernelError> {
        let dim = layout.head_dim;
        let width = arrangement.block_shape(0, dim).1;
        let staged_lens: Vec<usize> = lens
            .iter()
            .map(|&len| arrangement.block_shape(len, dim).0)
            .collect();
        let mut staged = Staged::for_overwrite(role, layout.heads, width, &staged_lens)?;
        let mut blocks = Vec::with_capacity(lens.len() * layout.heads);
        let mut rest = &mut staged.data[..];
        for (b, (&len, &staged_len)) in lens.iter().zip(&staged_lens).enumerate() {
            for h in 0..layout.heads {
                let (block, tail) = std::mem::take(&mut rest).split_at_mut(staged_len * width);
                rest = tail;
                blocks.push((b, h, len, block));
            }
        }
        super::threads::for_each_init(
            blocks,
            || (),
            |_, (b, h, len, block)| {
                // Rows go through a small row-major tile so that a transposed block is written
                // ROWS contiguous values per column: writing it element by element strides by
                // `len` floats, which at power-of-two lengths thrashes one cache set.
                const ROWS: usize = 16;
                let mut tile = vec![0.0f32; ROWS * dim];
                if let Arrangement::RowPanels(w) | Arrangement::ColumnPanels(w) = arrangement {
                    assert!(w > 0 && ROWS.is_multiple_of(w), "panel width {w}");
                    // The padding of a recycled buffer must read as zeros.
                    block.fill(0.0);
                }
                for s0 in (0..len).step_by(ROWS) {
                    let rows = ROWS.min(len - s0);
                    for (r, row) in tile.chunks_exact_mut(dim).take(rows).enumerate() {
                        let start = layout.position(b, s0 + r, h, 0);
                        if layout.stride_d == 1 {
                            for (dst, x) in row.iter_mut().zip(&src[start..start + dim]) {
                                *dst = x.to_f32();
                            }
                        } else {
                            for (d, dst) in row.iter_mut().enumerate() {
                                *dst = src[start + d * layout.stride_d].to_f32();
                            }
                        }
                    }
                    match arrangement {
                        Arrangement::Transposed => {
                            for d in 0..dim {
                                let column = &mut block[d * len + s0..d * len + s0 + rows];
                                for (r, x) in column.iter_mut().enumerate() {
                                    *x = tile[r * dim + d];
                                }
                            }
                        }
                        Arrangement::RowMajor => {
                            block[s0 * width..(s0 + rows) * width]
                                .copy_from_slice(&tile[..rows * dim]);
                        }
                        Arrangement::RowPanels(w) => {
                            // ROWS is a multiple of w, so the tile starts a panel.
                            for (r, row) in tile.chunks_exact(dim).take(rows).enumerate() {
                                let (panel, lane) = ((s0 + r) / w, (s0 + r) % w);
                                let out = &mut block[panel * dim * w..(panel + 1) * dim * w];
                                for (d, &x) in row.iter().enumerate() {
                                    out[d * w + lane] = x;
                                }
                            }
                        }
                        Arrangement::ColumnPanels(w) => {
                            for (q, panel) in block.chunks_exact_mut(len * w).enumerate() {
                                let columns = q * w..(q * w + w).min(dim);
                                let out = panel[s0 * w..(s0 + rows) * w].chunks_exact_mut(w);
                                for (dst, row) in out.zip(tile.chunks_exact(dim)) {
                                    dst[..columns.len()].copy_from_slice(&row[columns.clone()]);
                                }
                            }
                        }
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

    /// Writes every staged row to `dst` at `layout`, converting to `T`.
    pub fn scatter<T: FloatElement>(&self, dst: &mut [T], layout: &AttnLayout) {
        let mut rows = self.data.chunks_exact(self.width.max(1));
        for (b, &len) in self.lens.iter().enumerate() {
            for h in 0..self.heads {
                for s in 0..len {
                    let Some(row) = rows.next() else { return };
                    let start = layout.position(b, s, h, 0);
                    if layout.stride_d == 1 {
                        for (y, &x) in dst[start..start + row.len()].iter_mut().zip(row) {
                            *y = T::from_f32(x);
                        }
                    } else {
                        for (d, &x) in row.iter().enumerate() {
                            dst[start + d * layout.stride_d] = T::from_f32(x);
                        }
                    }
                }
            }
        }
    }
}

/// Frees every staging buffer the pool keeps. The plugin calls it when its last handle is
/// destroyed, so that unloading the library leaves none of this heap behind (issue 13).
pub fn release_caches() {
    pool::release();
}
