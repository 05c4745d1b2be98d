//! Operands as contiguous f32 blocks, one per (batch, head), row-major `rows × width`.
//!
//! Only the first `lens[b]` rows of each batch are gathered and scattered, which is what keeps
//! padding rows unread and unwritten; the copy costs O(tokens · D) against the passes'
//! O(Lq · Lkv · D) and gives them unit-stride tiles whatever the element type and strides.

use rayon::prelude::*;

use crate::dtype::FloatElement;
use crate::error::{KernelError, Role};

use super::geometry::Geometry;

#[derive(Debug)]
pub(super) struct Blocks {
    pub data: Vec<f32>,
    pub heads: usize,
    pub width: usize,
    /// Start of block (b, h) at `b · heads + h`.
    starts: Vec<usize>,
    pub lens: Vec<usize>,
}

impl Blocks {
    /// Zero-filled blocks: the gradients start from nothing and accumulate.
    ///
    /// The size follows the dims, which need not be backed by the buffer (zero strides), so it
    /// is computed checked and allocated fallibly: an error lets the caller decline where a
    /// failed allocation would abort the host process.
    pub fn zeros(
        role: Role,
        heads: usize,
        width: usize,
        lens: &[usize],
    ) -> Result<Self, KernelError> {
        let too_large = |elements: String| KernelError::StagingTooLarge { role, elements };
        let mut starts = Vec::with_capacity(lens.len().saturating_mul(heads));
        let mut total = 0usize;
        for &len in lens {
            let block = len
                .checked_mul(width)
                .ok_or_else(|| too_large("more than 2^64".to_owned()))?;
            for _ in 0..heads {
                starts.push(total);
                total = total
                    .checked_add(block)
                    .ok_or_else(|| too_large("more than 2^64".to_owned()))?;
            }
        }
        let mut data = Vec::new();
        data.try_reserve_exact(total)
            .map_err(|_| too_large(total.to_string()))?;
        data.resize(total, 0.0);
        Ok(Blocks {
            data,
            heads,
            width,
            starts,
            lens: lens.to_vec(),
        })
    }

    /// The first `lens[b]` rows of every (b, h) of `src`, converted to f32; blocks in parallel.
    pub fn gather<T: FloatElement>(
        role: Role,
        src: &[T],
        g: &Geometry,
        lens: &[usize],
    ) -> Result<Self, KernelError> {
        let mut blocks = Blocks::zeros(role, g.heads, g.width, lens)?;
        let width = g.width;
        blocks
            .per_block_mut()
            .into_par_iter()
            .for_each(|(b, h, block)| {
                for (s, row) in block.chunks_exact_mut(width).enumerate() {
                    let first = g.at(b, s, h, 0);
                    for (d, x) in row.iter_mut().enumerate() {
                        *x = src[first + d * g.stride_d].to_f32();
                    }
                }
            });
        Ok(blocks)
    }

    /// Every block with its (b, h), mutably and disjointly, in storage order.
    pub fn per_block_mut(&mut self) -> Vec<(usize, usize, &mut [f32])> {
        let mut out = Vec::with_capacity(self.starts.len());
        let mut rest = &mut self.data[..];
        for (b, &len) in self.lens.iter().enumerate() {
            for h in 0..self.heads {
                let (block, tail) = std::mem::take(&mut rest).split_at_mut(len * self.width);
                rest = tail;
                out.push((b, h, block));
            }
        }
        out
    }

    /// The rows of (b, h).
    pub fn block(&self, b: usize, h: usize) -> &[f32] {
        let start = self.starts[b * self.heads + h];
        &self.data[start..start + self.lens[b] * self.width]
    }

    /// Writes the staged rows to `dst` at `g`, rounding to `T`; rows beyond `lens[b]` are left
    /// as they were.
    pub fn scatter<T: FloatElement>(&self, dst: &mut [T], g: &Geometry) {
        for (b, &len) in self.lens.iter().enumerate() {
            for h in 0..self.heads {
                for (s, row) in self
                    .block(b, h)
                    .chunks_exact(self.width)
                    .take(len)
                    .enumerate()
                {
                    for (d, &x) in row.iter().enumerate() {
                        dst[g.at(b, s, h, d)] = T::from_f32(x);
                    }
                }
            }
        }
    }
}
