//! One query tile of one head: flash-attention-style online softmax over key tiles.
//!
//! Scores are produced in base 2 (the scale is pre-multiplied by log2 e) so the softmax needs
//! only `exp2`; the running maximum `m`, sum `l` and output accumulator are rescaled whenever
//! the maximum grows, which bounds memory to one tile whatever the sequence length.

use std::ops::Range;

use crate::gemm::{MatMut, MatRef, sgemm};

use super::mask::MaskBand;
use super::softmax::{exp2_shifted_sum, row_max};

/// Reusable per-thread buffers.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    scores: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    admitted: Vec<Range<usize>>,
}

/// Inputs of one tile.
pub(crate) struct TileInput<'a> {
    /// Query rows of the tile, `rows × dim_qk`.
    pub q: &'a [f32],
    /// All logical keys of the KV head, `len_kv × dim_qk`.
    pub k: &'a [f32],
    /// All logical values of the KV head, `len_kv × dim_v`.
    pub v: &'a [f32],
    pub first_row: usize,
    pub len_q: usize,
    pub len_kv: usize,
    pub dim_qk: usize,
    pub dim_v: usize,
}

/// Kernel-wide constants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TileConfig {
    /// Softmax scale times log2(e).
    pub scale_log2: f32,
    pub band: MaskBand,
    pub key_tile: usize,
}

/// Computes the tile's output rows (`rows × dim_v`, overwritten) and natural-log LSE.
pub(crate) fn attend_tile(
    input: &TileInput<'_>,
    config: &TileConfig,
    out: &mut [f32],
    lse: &mut [f32],
    scratch: &mut Scratch,
) {
    let rows = lse.len();
    let (dqk, dv) = (input.dim_qk, input.dim_v);
    scratch.max.clear();
    scratch.max.resize(rows, f32::NEG_INFINITY);
    scratch.sum.clear();
    scratch.sum.resize(rows, 0.0);
    scratch.admitted.clear();
    scratch.admitted.extend((0..rows).map(|r| {
        config
            .band
            .admitted(input.first_row + r, input.len_q, input.len_kv)
    }));
    out.fill(0.0);

    // Keys any row of the tile admits; rows that admit none are left out of the bounds.
    let nonempty = || scratch.admitted.iter().filter(|r| !r.is_empty());
    let key_lo = nonempty().map(|r| r.start).min().unwrap_or(0);
    let key_hi = nonempty().map(|r| r.end).max().unwrap_or(0);

    let mut j0 = key_lo;
    while j0 < key_hi {
        let j1 = (j0 + config.key_tile).min(key_hi);
        let width = j1 - j0;
        scratch.scores.resize(rows * width, 0.0);
        let scores = &mut scratch.scores[..rows * width];
        sgemm(
            config.scale_log2,
            MatRef {
                data: input.q,
                rows,
                cols: dqk,
                row_stride: dqk,
                col_stride: 1,
            },
            MatRef {
                data: &input.k[j0 * dqk..j1 * dqk],
                rows: dqk,
                cols: width,
                row_stride: 1,
                col_stride: dqk,
            },
            0.0,
            MatMut {
                data: scores,
                rows,
                cols: width,
                row_stride: width,
                col_stride: 1,
            },
        );
        for (r, row) in scores.chunks_exact_mut(width).enumerate() {
            let admitted = &scratch.admitted[r];
            let lo = admitted.start.clamp(j0, j1) - j0;
            let hi = admitted.end.clamp(j0, j1) - j0;
            if lo >= hi {
                row.fill(f32::NEG_INFINITY);
            } else {
                row[..lo].fill(f32::NEG_INFINITY);
                row[hi..].fill(f32::NEG_INFINITY);
            }
            let old_max = scratch.max[r];
            let new_max = old_max.max(row_max(row));
            if new_max == f32::NEG_INFINITY {
                // Nothing admitted yet: contribute exact zeros to P·V.
                row.fill(0.0);
                continue;
            }
            let correction = super::softmax::exp2_nonpositive(old_max - new_max);
            let tile_sum = exp2_shifted_sum(row, new_max);
            scratch.sum[r] = scratch.sum[r] * correction + tile_sum;
            scratch.max[r] = new_max;
            if correction != 1.0 {
                out[r * dv..(r + 1) * dv]
                    .iter_mut()
                    .for_each(|x| *x *= correction);
            }
        }
        sgemm(
            1.0,
            MatRef {
                data: scores,
                rows,
                cols: width,
                row_stride: width,
                col_stride: 1,
            },
            MatRef {
                data: &input.v[j0 * dv..j1 * dv],
                rows: width,
                cols: dv,
                row_stride: dv,
                col_stride: 1,
            },
            1.0,
            MatMut {
                data: out,
                rows,
                cols: dv,
                row_stride: dv,
                col_stride: 1,
            },
        );
        j0 = j1;
    }

    for r in 0..rows {
        let sum = scratch.sum[r];
        let row = &mut out[r * dv..(r + 1) * dv];
        if sum > 0.0 {
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|x| *x *= inv);
            lse[r] = scratch.max[r] * std::f32::consts::LN_2 + sum.ln();
        } else if sum.is_nan() {
            row.fill(f32::NAN);
            lse[r] = f32::NAN;
        } else {
            // No admitted key (empty key sequence or fully masked row): O = 0, LSE = −∞.
            row.fill(0.0);
            lse[r] = f32::NEG_INFINITY;
        }
    }
}
