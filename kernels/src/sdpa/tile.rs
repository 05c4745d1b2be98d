//! One query tile of one head: flash-attention-style online softmax over key tiles.
//!
//! Scores are produced in base 2 (the scale is pre-multiplied by log2 e) so the softmax needs
//! only `exp2`; the running maximum, sum and output accumulator are rescaled whenever the maximum
//! grows, which bounds memory to one tile whatever the sequence length.
//!
//! Every matrix is arranged so that matrixmultiply's packing takes its contiguous fast path
//! (its element-by-element path otherwise costs as much as the products): Q and K arrive
//! transposed from staging, and the score tile and output accumulator are column-major, one
//! column per key or head-dim entry. Column-major tiles also make the softmax row statistics
//! plain element-wise vector updates. V carries a trailing column of ones, so the P·V product
//! also accumulates each row's softmax denominator, rescaled along with the output.

use std::ops::Range;

use crate::gemm::{MatMut, MatRef, sgemm};

use super::mask::MaskBand;
use super::softmax::{exp2_columns, exp2_nonpositive, fold_column_max};

/// Reusable per-thread buffers.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    scores: Vec<f32>,
    acc: Vec<f32>,
    max: Vec<f32>,
    tile_max: Vec<f32>,
    shift: Vec<f32>,
    correction: Vec<f32>,
    admitted: Vec<Range<usize>>,
}

/// Inputs of one tile.
pub(crate) struct TileInput<'a> {
    /// Qᵀ of the head from the tile's first row on: element (row r, d) at `d·len_q + r`.
    pub q_t: &'a [f32],
    /// Kᵀ of the KV head: element (key j, d) at `d·len_kv + j`.
    pub k_t: &'a [f32],
    /// V of the KV head with a trailing column of ones, row-major `len_kv × (dim_v + 1)`.
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

fn reset<T: Clone>(buffer: &mut Vec<T>, len: usize, value: T) {
    buffer.clear();
    buffer.resize(len, value);
}

/// Computes the tile's output rows (row-major `rows × dim_v`) and natural-log LSE (`rows`).
pub(crate) fn attend_tile(
    input: &TileInput<'_>,
    config: &TileConfig,
    out: &mut [f32],
    lse: &mut [f32],
    scratch: &mut Scratch,
) {
    let rows = lse.len();
    let (dqk, dv) = (input.dim_qk, input.dim_v);
    // Output columns plus the running denominator in the last one.
    let acc_cols = dv + 1;
    reset(&mut scratch.max, rows, f32::NEG_INFINITY);
    reset(&mut scratch.acc, rows * acc_cols, 0.0);
    scratch.admitted.clear();
    scratch.admitted.extend((0..rows).map(|r| {
        config
            .band
            .admitted(input.first_row + r, input.len_q, input.len_kv)
    }));

    // Keys any row of the tile admits; rows that admit none are left out of the bounds.
    let nonempty = || scratch.admitted.iter().filter(|r| !r.is_empty());
    let key_lo = nonempty().map(|r| r.start).min().unwrap_or(0);
    let key_hi = nonempty().map(|r| r.end).max().unwrap_or(0);
    // Whether every row admits every key of [j0, j1), so the tile needs no masking.
    let fully_admitted = |j0: usize, j1: usize| {
        scratch
            .admitted
            .iter()
            .all(|r| r.start <= j0 && r.end >= j1)
    };

    let mut j0 = key_lo;
    while j0 < key_hi {
        let j1 = (j0 + config.key_tile).min(key_hi);
        let width = j1 - j0;
        let needs_mask = !fully_admitted(j0, j1);
        scratch.scores.resize(rows * width, 0.0);
        let scores = &mut scratch.scores[..rows * width];
        sgemm(
            config.scale_log2,
            MatRef {
                data: input.q_t,
                rows,
                cols: dqk,
                row_stride: 1,
                col_stride: input.len_q,
            },
            MatRef {
                data: &input.k_t[j0..],
                rows: dqk,
                cols: width,
                row_stride: input.len_kv,
                col_stride: 1,
            },
            0.0,
            MatMut {
                data: scores,
                rows,
                cols: width,
                row_stride: 1,
                col_stride: rows,
            },
        );
        if needs_mask {
            for (c, column) in scores.chunks_exact_mut(rows).enumerate() {
                let j = j0 + c;
                for (x, admitted) in column.iter_mut().zip(&scratch.admitted) {
                    if !admitted.contains(&j) {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
        }

        // Online softmax update, element-wise over rows.
        scratch.tile_max.clone_from(&scratch.max);
        fold_column_max(scores, &mut scratch.tile_max);
        reset(&mut scratch.shift, rows, 0.0);
        reset(&mut scratch.correction, rows, 0.0);
        for r in 0..rows {
            let new_max = scratch.tile_max[r];
            // A row with nothing admitted yet shifts by 0, so its −∞ scores become exact zeros.
            let shift = if new_max == f32::NEG_INFINITY {
                0.0
            } else {
                new_max
            };
            scratch.shift[r] = shift;
            scratch.correction[r] = exp2_nonpositive(scratch.max[r] - shift);
            scratch.max[r] = new_max;
        }
        for column in scratch.acc.chunks_exact_mut(rows) {
            for (x, &c) in column.iter_mut().zip(&scratch.correction) {
                *x *= c;
            }
        }
        exp2_columns(scores, &scratch.shift);

        sgemm(
            1.0,
            MatRef {
                data: scores,
                rows,
                cols: width,
                row_stride: 1,
                col_stride: rows,
            },
            MatRef {
                data: &input.v[j0 * acc_cols..j1 * acc_cols],
                rows: width,
                cols: acc_cols,
                row_stride: acc_cols,
                col_stride: 1,
            },
            1.0,
            MatMut {
                data: &mut scratch.acc,
                rows,
                cols: acc_cols,
                row_stride: 1,
                col_stride: rows,
            },
        );
        j0 = j1;
    }

    for (r, (row, lse)) in out.chunks_exact_mut(dv).zip(lse.iter_mut()).enumerate() {
        let sum = scratch.acc[dv * rows + r];
        if sum > 0.0 {
            let inv = 1.0 / sum;
            for (d, x) in row.iter_mut().enumerate() {
                *x = scratch.acc[d * rows + r] * inv;
            }
            *lse = scratch.max[r] * std::f32::consts::LN_2 + sum.ln();
        } else if sum.is_nan() {
            row.fill(f32::NAN);
            *lse = f32::NAN;
        } else {
            // No admitted key (empty key sequence or fully masked row): O = 0, LSE = −∞.
            row.fill(0.0);
            *lse = f32::NEG_INFINITY;
        }
    }
}
