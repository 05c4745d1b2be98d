//! Staging: operands gathered into contiguous f32 blocks, one per (batch, head), and results
//! scattered back.
//!
//! Gathering once costs O(tokens·D) against the O(Lq·Lkv·D) of attention, and buys the kernel
//! unit-stride f32 tiles whatever the input type and strides; only logical rows are gathered,
//! so padding rows are never read.

use crate::dtype::FloatElement;

use super::layout::AttnLayout;

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
    /// Zeroed blocks of `width` columns for `heads` heads and `lens[b]` rows.
    pub fn zeroed(heads: usize, width: usize, lens: &[usize]) -> Self {
        let mut starts = Vec::with_capacity(lens.len() * heads);
        let mut next = 0;
        for &len in lens {
            for _ in 0..heads {
                starts.push(next);
                next += len * width;
            }
        }
        Staged {
            data: vec![0.0; next],
            heads,
            width,
            starts,
            lens: lens.to_vec(),
        }
    }

    /// Gathers the first `lens[b]` rows of every batch and head of `src`.
    pub fn gather<T: FloatElement>(src: &[T], layout: &AttnLayout, lens: &[usize]) -> Self {
        let mut staged = Staged::zeroed(layout.heads, layout.head_dim, lens);
        let width = layout.head_dim;
        let mut cursor = 0;
        for (b, &len) in lens.iter().enumerate() {
            for h in 0..layout.heads {
                for s in 0..len {
                    let row = &mut staged.data[cursor..cursor + width];
                    let start = layout.position(b, s, h, 0);
                    if layout.stride_d == 1 {
                        for (dst, x) in row.iter_mut().zip(&src[start..start + width]) {
                            *dst = x.to_f32();
                        }
                    } else {
                        for (d, dst) in row.iter_mut().enumerate() {
                            *dst = src[start + d * layout.stride_d].to_f32();
                        }
                    }
                    cursor += width;
                }
            }
        }
        staged
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
                    for (d, &x) in row.iter().enumerate() {
                        dst[layout.position(b, s, h, d)] = T::from_f32(x);
                    }
                }
            }
        }
    }
}
