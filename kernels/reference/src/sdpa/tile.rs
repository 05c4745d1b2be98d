//! One query tile of one head: flash-attention-style online softmax over key tiles.
//!
//! Scores are produced in base 2 (the scale is pre-multiplied by log2 e) so the softmax needs
//! only `exp2`; the running maximum, sum and output accumulator are rescaled whenever the maximum
//! grows, which bounds memory to one tile whatever the sequence length.
//!
//! Both products run on `crate::gemm::micro_kernel` with no packing per call: the tile's Q rows
//! are loaded from the input once per tile as panels of MR rows ([`Lane`]s, one per head-dim
//! entry, [`load_queries`]), K and V are staged once per work item as NR-wide panels
//! ([`KeyBlock`]) into a per-thread buffer that stays in cache for all the item's tiles,
//! and the score tile and output accumulator are kept as lanes too, so the scores a product
//! writes are already the A operand of the next one, and every softmax statistic is an
//! element-wise update of one lane. matrixmultiply repacked Q and K for every key tile, and its
//! 8-column blocks spent 72 columns on the 65 of V with its column of ones; the softmax sums
//! are now added up in the exp2 loop instead.
//!
//! The whole tile is compiled twice, for AVX2 + FMA and for the baseline target; [`crate::isa`]
//! chooses at run time.

use std::ops::Range;

use crate::gemm::{Blocking, Fused, Lane, MR, MulAdd, NR, Narrow, Separate, Split, Wide, product};
#[cfg(target_arch = "x86_64")]
use crate::isa::{Isa, isa};

use super::layout::{AHEAD, AttnLayout, prefetch_row};
use super::softmax::exp2_nonpositive_with;
use ragged_core::MaskBand;
use ragged_core::dtype::FloatElement;

/// Reusable per-thread buffers, all in lanes of MR rows.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Q·scale·log2e, `panel·dim_qk + d`.
    q: Vec<Lane>,
    /// Scores, then probabilities, of the [`PANEL_GROUP`] panels of a key step in hand,
    /// `panel·keys + j`.
    scores: Vec<Lane>,
    /// Output accumulator, `panel·dim_v' + d` with dim_v' = dim_v rounded up to NR.
    acc: Vec<Lane>,
    /// Running maximum and sum per row, one lane per panel.
    max: Vec<Lane>,
    sum: Vec<Lane>,
    admitted: Vec<Range<usize>>,
}

/// Query panels taken through a key step together: the pair of A panels of the AVX-512 2 × 2
/// register block.
const PANEL_GROUP: usize = 2;

/// Inputs of one tile.
pub(crate) struct TileInput<'a> {
    /// K of the KV head from key `key_base` on, in panels of NR keys: element (key j, d) at
    /// `[((j − key_base) / NR)·dim_qk + d][j % NR]`.
    pub k: &'a [[f32; NR]],
    /// V of the KV head from key `key_base` on, in panels of NR columns: element (key j, d) at
    /// `[(d / NR)·keys + j − key_base][d % NR]`.
    pub v: &'a [[f32; NR]],
    /// The first key staged in `k` and `v`; a multiple of NR.
    pub key_base: usize,
    /// Keys staged in each column panel of `v`.
    pub keys: usize,
    pub first_row: usize,
    pub len_q: usize,
    pub len_kv: usize,
    pub dim_qk: usize,
    pub dim_v: usize,
}

/// K and V of one KV head over a range of keys, in the panels [`TileInput`] reads: filled per
/// work item into a per-thread buffer that stays in cache for every query tile of the item,
/// rather than staged for the whole call and read back from memory.
#[derive(Debug, Default)]
pub(crate) struct KeyBlock {
    k: Vec<[f32; NR]>,
    v: Vec<[f32; NR]>,
    base: usize,
    keys: usize,
    /// Head dims of K and V.
    dims: (usize, usize),
}

impl KeyBlock {
    /// Stages keys `keys` of KV head `g` of batch `b` from `k` and `v`, starting at the K panel
    /// that holds `keys.start`: the keys before it in that panel are read too (they are masked,
    /// and their V rows, multiplied by a probability of 0, must be finite).
    pub(crate) fn fill<T: FloatElement>(
        &mut self,
        (k, k_layout): (&[T], &AttnLayout),
        (v, v_layout): (&[T], &AttnLayout),
        (b, g): (usize, usize),
        keys: Range<usize>,
    ) {
        let base = keys.start - keys.start % NR;
        let n = keys.end.max(base) - base;
        let (dqk, dv) = (k_layout.head_dim, v_layout.head_dim);
        self.base = base;
        self.keys = n;
        self.dims = (dqk, dv);

        // K: one NR-wide entry per head-dim entry and panel, the padding keys of the last panel
        // zero (their scores are computed and dropped).
        let k_len = n.div_ceil(NR) * dqk;
        if self.k.len() < k_len {
            self.k.resize(k_len, [0.0; NR]);
        }
        for (p, panel) in self.k[..k_len].chunks_exact_mut(dqk.max(1)).enumerate() {
            let j0 = base + p * NR;
            for j in (j0 + AHEAD..j0 + AHEAD + NR).filter(|&j| j < keys.end) {
                prefetch_row(k, k_layout, (b, j, g));
            }
            let starts: [Option<usize>; NR] = std::array::from_fn(|i| {
                (j0 + i < keys.end).then(|| k_layout.position(b, j0 + i, g, 0))
            });
            if let (1, [Some(s0), Some(s1), Some(s2), Some(s3)]) = (k_layout.stride_d, starts) {
                let rows = [
                    &k[s0..s0 + dqk],
                    &k[s1..s1 + dqk],
                    &k[s2..s2 + dqk],
                    &k[s3..s3 + dqk],
                ];
                for (d, x) in panel.iter_mut().enumerate() {
                    *x = std::array::from_fn(|i| rows[i][d].to_f32());
                }
            } else {
                for (d, x) in panel.iter_mut().enumerate() {
                    *x = std::array::from_fn(|i| {
                        starts[i].map_or(0.0, |s| k[s + d * k_layout.stride_d].to_f32())
                    });
                }
            }
        }

        // V: column panels of n keys, the padding columns of the last panel zero.
        let dv_panels = dv.div_ceil(NR);
        let v_len = dv_panels * n;
        if self.v.len() < v_len {
            self.v.resize(v_len, [0.0; NR]);
        }
        let v_out = &mut self.v[..v_len];
        for (r, j) in (base..base + n).enumerate() {
            if j + AHEAD < base + n {
                prefetch_row(v, v_layout, (b, j + AHEAD, g));
            }
            let start = v_layout.position(b, j, g, 0);
            if v_layout.stride_d == 1 && dv.is_multiple_of(NR) {
                for (c, chunk) in v[start..start + dv].chunks_exact(NR).enumerate() {
                    v_out[c * n + r] = std::array::from_fn(|l| chunk[l].to_f32());
                }
                continue;
            }
            for c in 0..dv_panels {
                v_out[c * n + r] = std::array::from_fn(|l| {
                    let d = c * NR + l;
                    if d < dv {
                        v[start + d * v_layout.stride_d].to_f32()
                    } else {
                        0.0
                    }
                });
            }
        }
    }

    /// The tile input over this block's keys for query rows from `first_row` on of a batch
    /// with `len_q` queries and `len_kv` keys.
    pub(crate) fn input(&self, first_row: usize, len_q: usize, len_kv: usize) -> TileInput<'_> {
        TileInput {
            k: &self.k,
            v: &self.v,
            key_base: self.base,
            keys: self.keys,
            first_row,
            len_q,
            len_kv,
            dim_qk: self.dims.0,
            dim_v: self.dims.1,
        }
    }
}

/// Loads query rows `rows` of head `h` of batch `b` into the scratch's Q panels, scaled by
/// `scale_log2`; rows past the last panel's end stay 0.
pub(crate) fn load_queries<T: FloatElement>(
    scratch: &mut Scratch,
    (q, layout): (&[T], &AttnLayout),
    (b, h): (usize, usize),
    rows: Range<usize>,
    scale_log2: f32,
) {
    let dqk = layout.head_dim;
    reset(&mut scratch.q, rows.len().div_ceil(MR) * dqk, Lane::ZERO);
    let end = rows.end;
    for (r, s) in rows.enumerate() {
        if s + AHEAD < end {
            prefetch_row(q, layout, (b, s + AHEAD, h));
        }
        let (p, i) = (r / MR, r % MR);
        let lanes = &mut scratch.q[p * dqk..(p + 1) * dqk];
        let start = layout.position(b, s, h, 0);
        if layout.stride_d == 1 {
            for (lane, x) in lanes.iter_mut().zip(&q[start..start + dqk]) {
                lane.0[i] = x.to_f32() * scale_log2;
            }
        } else {
            for (d, lane) in lanes.iter_mut().enumerate() {
                lane.0[i] = q[start + d * layout.stride_d].to_f32() * scale_log2;
            }
        }
    }
}

/// Kernel-wide constants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TileConfig {
    /// Softmax scale times log2(e).
    pub scale_log2: f32,
    pub band: MaskBand,
    /// Keys per step; a multiple of NR.
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
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        fn wide(
            input: &TileInput<'_>,
            config: &TileConfig,
            out: &mut [f32],
            lse: &mut [f32],
            scratch: &mut Scratch,
        ) {
            attend::<Fused, Wide>(input, config, out, lse, scratch);
        }
        #[target_feature(enable = "avx2,fma")]
        fn fused(
            input: &TileInput<'_>,
            config: &TileConfig,
            out: &mut [f32],
            lse: &mut [f32],
            scratch: &mut Scratch,
        ) {
            attend::<Fused, Split>(input, config, out, lse, scratch);
        }
        match isa() {
            Isa::Avx512 | Isa::Avx512Bf16 | Isa::Amx => {
                // SAFETY: `isa()` chose a set the CPU reports (`crate::isa`).
                return unsafe { wide(input, config, out, lse, scratch) };
            }
            // SAFETY: as above.
            Isa::Avx2Fma => return unsafe { fused(input, config, out, lse, scratch) },
            Isa::Baseline => {}
        }
    }
    attend::<Separate, Narrow>(input, config, out, lse, scratch);
}

/// Sets the scores of keys a row does not admit to −∞: lane `i` of panel `r / MR`, column `c`,
/// is row `r`'s key `j0 + c` (`admitted` from the panels' first row on, `width` lanes a panel).
#[inline(always)]
fn mask_scores(tile: &mut [Lane], width: usize, admitted: &[Range<usize>], j0: usize) {
    for (r, admitted) in admitted.iter().enumerate() {
        let (p, i) = (r / MR, r % MR);
        for (c, lane) in tile[p * width..(p + 1) * width].iter_mut().enumerate() {
            if !admitted.contains(&(j0 + c)) {
                lane.0[i] = f32::NEG_INFINITY;
            }
        }
    }
}

/// The online softmax update of one panel (16 rows) over a step's score lanes, element-wise
/// over the rows: the running maximum moves to the step's, the scores become their weights
/// against it, and the running sum and the output accumulator are rescaled by the correction.
#[inline(always)]
fn softmax_panel<F: MulAdd>(scores: &mut [Lane], max: &mut Lane, sum: &mut Lane, acc: &mut [Lane]) {
    let mut new_max = max.0;
    for lane in scores.iter() {
        for (m, &x) in new_max.iter_mut().zip(&lane.0) {
            *m = if x > *m { x } else { *m };
        }
    }
    // A row with nothing admitted yet shifts by 0, so its −∞ scores become exact zeros.
    let shift = new_max.map(|m| if m == f32::NEG_INFINITY { 0.0 } else { m });
    let correction: [f32; MR] =
        std::array::from_fn(|i| exp2_nonpositive_with::<F>(max.0[i] - shift[i]));
    max.0 = new_max;
    let mut total: [f32; MR] = std::array::from_fn(|i| sum.0[i] * correction[i]);
    for lane in scores.iter_mut() {
        for ((x, t), &s) in lane.0.iter_mut().zip(&mut total).zip(&shift) {
            *x = exp2_nonpositive_with::<F>(*x - s);
            *t += *x;
        }
    }
    sum.0 = total;
    for lane in acc.iter_mut() {
        for (x, &c) in lane.0.iter_mut().zip(&correction) {
            *x *= c;
        }
    }
}

/// [`softmax_panel`] on AVX-512 registers: the same operations, with the running maximum and
/// sum held in registers (LLVM kept the portable loop's in memory).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
fn softmax_panel_wide(scores: &mut [Lane], max: &mut Lane, sum: &mut Lane, acc: &mut [Lane]) {
    use std::arch::x86_64::*;

    use crate::avx512;

    let old_max = avx512::load(&max.0);
    // `max_ps` returns its second operand when either is NaN: a NaN score leaves the maximum
    // alone and reaches the sum through its exponential, as in the portable loop.
    let new_max = scores
        .iter()
        .fold(old_max, |m, lane| _mm512_max_ps(avx512::load(&lane.0), m));
    // A row with nothing admitted yet shifts by 0, so its −∞ scores become exact zeros.
    let empty = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(new_max, _mm512_set1_ps(f32::NEG_INFINITY));
    let shift = _mm512_mask_blend_ps(empty, new_max, _mm512_setzero_ps());
    let correction = avx512::exp2_nonpositive(_mm512_sub_ps(old_max, shift));
    avx512::store(new_max, &mut max.0);
    let mut total = _mm512_mul_ps(avx512::load(&sum.0), correction);
    for lane in scores.iter_mut() {
        let e = avx512::exp2_nonpositive(_mm512_sub_ps(avx512::load(&lane.0), shift));
        total = _mm512_add_ps(total, e);
        avx512::store(e, &mut lane.0);
    }
    avx512::store(total, &mut sum.0);
    for lane in acc.iter_mut() {
        avx512::store(
            _mm512_mul_ps(avx512::load(&lane.0), correction),
            &mut lane.0,
        );
    }
}

#[inline(always)]
fn attend<F: MulAdd, K: Blocking>(
    input: &TileInput<'_>,
    config: &TileConfig,
    out: &mut [f32],
    lse: &mut [f32],
    scratch: &mut Scratch,
) {
    let rows = lse.len();
    let panels = rows.div_ceil(MR);
    let (dqk, dv) = (input.dim_qk, input.dim_v);
    let dv_panels = dv.div_ceil(NR);
    let acc_width = dv_panels * NR;

    debug_assert_eq!(scratch.q.len(), panels * dqk, "load_queries first");
    reset(&mut scratch.max, panels, Lane([f32::NEG_INFINITY; MR]));
    reset(&mut scratch.sum, panels, Lane::ZERO);
    reset(&mut scratch.acc, panels * acc_width, Lane::ZERO);
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

    // Steps start on a K panel; the keys before key_lo in the first one are masked.
    let mut j0 = key_lo - key_lo % NR;
    while j0 < key_hi {
        let j1 = (j0 + config.key_tile).min(key_hi);
        let width = j1 - j0;
        let needs_mask = !fully_admitted(j0, j1);
        // Every lane is written below, so only growth is filled.
        if scratch.scores.len() < PANEL_GROUP * width {
            scratch.scores.resize(PANEL_GROUP * width, Lane::ZERO);
        }
        // PANEL_GROUP query panels at a time through the Q·Kᵀ product, the softmax and the P·V
        // product: their scores (32 KiB at 256 keys) stay in L1 from the product's store to
        // P·V's read, where the whole tile's (128 KiB) went through L2 for each of the passes.
        // K and V are walked once per pair of panels, as before (once per panel in the builds
        // whose register blocks take one A panel).
        for g in (0..panels).step_by(PANEL_GROUP) {
            let group = PANEL_GROUP.min(panels - g);
            let tile = &mut scratch.scores[..group * width];

            // S·log2e = (Q·scale·log2e)·Kᵀ, NR keys per micro-tile.
            let q = &scratch.q[g * dqk..(g + group) * dqk];
            product::<F, K, _, _, _>(
                group,
                width.div_ceil(NR),
                |p| &q[p * dqk..(p + 1) * dqk],
                |c| {
                    let first = ((j0 - input.key_base) / NR + c) * dqk;
                    &input.k[first..first + dqk]
                },
                |p, c, block| {
                    let lanes = &mut tile[p * width + c * NR..(p + 1) * width];
                    for (lane, column) in lanes.iter_mut().take(NR).zip(block) {
                        lane.0 = *column;
                    }
                },
            );
            if needs_mask {
                let group_rows = g * MR..((g + group) * MR).min(rows);
                mask_scores(tile, width, &scratch.admitted[group_rows], j0);
            }

            let per_panel = tile
                .chunks_exact_mut(width)
                .zip(&mut scratch.max[g..g + group])
                .zip(&mut scratch.sum[g..g + group])
                .enumerate();
            for (p, ((scores, max), sum)) in per_panel {
                let p = g + p;
                let acc = &mut scratch.acc[p * acc_width..(p + 1) * acc_width];
                #[cfg(target_arch = "x86_64")]
                if K::WIDE {
                    // SAFETY: the wide blocking is compiled and chosen only where `isa()`
                    // reported AVX-512 F/BW/VL, AVX2 and FMA (`attend_tile`).
                    unsafe { softmax_panel_wide(scores, max, sum, acc) };
                    continue;
                }
                softmax_panel::<F>(scores, max, sum, acc);
            }
            // acc += P·V, NR output columns per micro-tile.
            let tile = &*tile;
            let acc = &mut scratch.acc[g * acc_width..(g + group) * acc_width];
            product::<F, K, _, _, _>(
                group,
                dv_panels,
                |p| &tile[p * width..(p + 1) * width],
                |q| {
                    // Keys j0..j1 are absolute and at least key_base, where the staged panel
                    // starts.
                    let first = q * input.keys;
                    &input.v[first + j0 - input.key_base..first + j1 - input.key_base]
                },
                |p, q, block| {
                    let lanes = &mut acc[p * acc_width + q * NR..][..NR];
                    for (lane, column) in lanes.iter_mut().zip(block) {
                        for (x, y) in lane.0.iter_mut().zip(column) {
                            *x += y;
                        }
                    }
                },
            );
        }
        j0 = j1;
    }

    for (r, (row, lse)) in out.chunks_exact_mut(dv).zip(lse.iter_mut()).enumerate() {
        let (p, i) = (r / MR, r % MR);
        let sum = scratch.sum[p].0[i];
        if sum > 0.0 {
            let inv = 1.0 / sum;
            for (x, lane) in row.iter_mut().zip(&scratch.acc[p * acc_width..]) {
                *x = lane.0[i] * inv;
            }
            *lse = scratch.max[p].0[i] * std::f32::consts::LN_2 + sum.ln();
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
