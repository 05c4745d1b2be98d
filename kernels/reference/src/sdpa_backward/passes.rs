//! The backward in one pass over (batch, KV head, key chunk) work items, FlashAttention-2 style:
//! for each key tile of its chunk and each query tile of every query head of the group, an item
//! recomputes `P = 2^(scale·log2e·QKᵀ − LSE·log2e)` on the admitted keys (exactly 0 elsewhere)
//! and `dS = P ∘ (dO·Vᵀ − Δ)`, then accumulates `dV += Pᵀ·dO` and `dK += scale·dSᵀ·Q` into its
//! own key rows and `dQ += scale·dS·K` into its group's query rows. Each (query, key) tile pair
//! is thus visited once, at the 2.5× forward FLOPs of the math, with no Lq × Lkv matrix held.
//!
//! The items and the dQ they share are `super::items`'.
//!
//! Every product runs on `crate::gemm::micro_kernel` with operands staged once per (batch,
//! head) in the panel arrangements it reads (`stage::Arrangement::RowPanels` and
//! `ColumnPanels`), so nothing is packed per product (matrixmultiply packed both operands of all
//! five products of every tile pair). Sᵀ and dPᵀ are computed as lanes of 16 keys, which makes
//! them the A operands of dV and dK as they stand; dQ's A operand needs dS as lanes of 16 rows,
//! the one transposed copy per tile pair. The item's loops are compiled for AVX2 + FMA (chosen at
//! run time) and for the baseline target.

use std::ops::Range;

use crate::gemm::{Blocking, Fused, Lane, MR, MulAdd, NR, Narrow, Separate, Wide, product};
#[cfg(target_arch = "x86_64")]
use crate::isa::{Isa, isa};
use crate::sdpa::MaskBand;
use crate::sdpa::layout::AttnLayout;
use crate::sdpa::softmax::exp2_nonpositive;
use crate::sdpa::stage::Staged;
use ragged_core::dtype::FloatElement;
use ragged_core::error::KernelError;

use super::items::{Item, for_each_item, tiles};
use super::problem::Problem;

/// Staged operands of the whole call, per (batch, head) block; `w` panels as in
/// `stage::Arrangement`.
pub(super) struct Operands {
    /// K in row panels of MR: Sᵀ's A operand.
    pub k_lanes: Staged,
    /// V in row panels of MR: dPᵀ's A operand.
    pub v_lanes: Staged,
    /// Q in row panels of NR: Sᵀ's B operand.
    pub q_quads: Staged,
    /// dO in row panels of NR: dPᵀ's B operand.
    pub d_o_quads: Staged,
    /// Q in column panels of MR: dKᵀ's A operand.
    pub q_cols: Staged,
    /// dO in column panels of MR: dVᵀ's A operand.
    pub d_o_cols: Staged,
    /// K in column panels of MR: dQᵀ's A operand.
    pub k_cols: Staged,
    /// The forward's LSE times log2 e, one per query row.
    pub lse2: Staged,
    /// `Δ = rowsum(dO ∘ O)`, one per query row.
    pub delta: Staged,
}

/// The gradients, staged row-major like their primals; [`backward`] writes every element (each
/// work item zeroes its own rows before accumulating, in parallel and while they are in cache;
/// the rows of batches without items are zeroed here), so they are taken unfilled.
pub(super) struct Gradients {
    pub dq: Staged,
    pub dk: Staged,
    pub dv: Staged,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    pub scale: f32,
    pub band: MaskBand,
    pub query_tile: usize,
    pub key_tile: usize,
}

/// Per-thread tile buffers.
#[derive(Debug, Default)]
struct Scratch {
    /// Sᵀ, then Pᵀ: `key_panel·rows' + i`, rows' = rows rounded up to NR.
    p: Vec<Lane>,
    /// dPᵀ, then dSᵀ, likewise.
    ds: Vec<Lane>,
    /// dS as NR rows per key: `row_quad·keys + j`.
    ds_quads: Vec<[f32; NR]>,
    /// Admitted keys of each row, relative to the key tile.
    admitted: Vec<Range<usize>>,
}

/// Computes every logical row of dQ, dK and dV into `grads`.
pub(super) fn backward(
    p: &Problem,
    s: &Operands,
    cfg: &Config,
    grads: &mut Gradients,
) -> Result<(), KernelError> {
    for_each_item(p, cfg.key_tile, grads, |scratch: &mut Scratch, item| {
        run_item(p, s, cfg, item, scratch)
    })
}

/// Every (key tile, query head, query tile) of one item.
fn run_item(p: &Problem, s: &Operands, cfg: &Config, item: Item<'_>, scratch: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        fn wide(p: &Problem, s: &Operands, cfg: &Config, item: Item<'_>, scratch: &mut Scratch) {
            item_body::<Fused, Wide>(p, s, cfg, item, scratch);
        }
        #[target_feature(enable = "avx2,fma")]
        fn fused(p: &Problem, s: &Operands, cfg: &Config, item: Item<'_>, scratch: &mut Scratch) {
            item_body::<Fused, Narrow>(p, s, cfg, item, scratch);
        }
        match isa() {
            // SAFETY: `isa()` chose a set the CPU reports (`crate::isa`).
            Isa::Avx512 | Isa::Amx => return unsafe { wide(p, s, cfg, item, scratch) },
            // SAFETY: as above.
            Isa::Avx2Fma => return unsafe { fused(p, s, cfg, item, scratch) },
            Isa::Baseline => {}
        }
    }
    item_body::<Separate, Narrow>(p, s, cfg, item, scratch);
}

/// A staged block as micro-kernel rows of `W` values.
fn panels<const W: usize>(staged: &Staged, b: usize, h: usize) -> &[[f32; W]] {
    staged.block(b, h).as_chunks().0
}

#[inline(always)]
fn item_body<F: MulAdd, K: Blocking>(
    p: &Problem,
    s: &Operands,
    cfg: &Config,
    item: Item<'_>,
    scratch: &mut Scratch,
) {
    let f = &p.fwd;
    let (b, g) = (item.batch, item.kv_head);
    let (len_q, len_kv) = (f.len_q[b], f.len_kv[b]);
    let (dqk, dvw) = (f.dim_qk, f.dim_v);
    let group = f.heads_q / f.heads_kv;
    let scale_log2 = cfg.scale * std::f32::consts::LOG2_E;
    let k_lanes = panels::<MR>(&s.k_lanes, b, g);
    let v_lanes = panels::<MR>(&s.v_lanes, b, g);
    let k_cols = panels::<MR>(&s.k_cols, b, g);
    for rows in [&mut *item.dk, &mut *item.dv, &mut *item.dq] {
        rows.fill(0.0);
    }
    for keys in tiles(item.keys.clone(), cfg.key_tile) {
        let nk = keys.len();
        let key_panels = nk.div_ceil(MR);
        let local = keys.start - item.keys.start;
        let dk_c = &mut item.dk[local * dqk..(local + nk) * dqk];
        let dv_c = &mut item.dv[local * dvw..(local + nk) * dvw];
        for within in 0..group {
            let h = g * group + within;
            let q_quads = panels::<NR>(&s.q_quads, b, h);
            let d_o_quads = panels::<NR>(&s.d_o_quads, b, h);
            let q_cols = panels::<MR>(&s.q_cols, b, h);
            let d_o_cols = panels::<MR>(&s.d_o_cols, b, h);
            let (lse2, delta) = (s.lse2.block(b, h), s.delta.block(b, h));
            let dq_h = &mut item.dq[within * len_q * dqk..(within + 1) * len_q * dqk];
            for rows in tiles(0..len_q, cfg.query_tile) {
                let nr = rows.len();
                if !admit(cfg.band, &rows, &keys, len_q, len_kv, scratch) {
                    continue;
                }
                // Row counts padded to NR: the B panels of Q and dO are.
                let nr4 = nr.next_multiple_of(NR);
                for buffer in [&mut scratch.p, &mut scratch.ds] {
                    if buffer.len() < key_panels * nr4 {
                        buffer.resize(key_panels * nr4, Lane::ZERO);
                    }
                }
                let p_t = &mut scratch.p[..key_panels * nr4];
                let ds_t = &mut scratch.ds[..key_panels * nr4];

                // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, 16 keys × NR rows per micro-tile.
                let first_panel = keys.start / MR;
                let row_quads = nr4 / NR;
                let first_quad = rows.start / NR;
                product::<F, K, _, _, _>(
                    key_panels,
                    row_quads,
                    |kp| &k_lanes[(first_panel + kp) * dqk..(first_panel + kp + 1) * dqk],
                    |c| &q_quads[(first_quad + c) * dqk..(first_quad + c + 1) * dqk],
                    |kp, c, block| {
                        for (lane, column) in p_t[kp * nr4 + c * NR..][..NR].iter_mut().zip(block) {
                            lane.0 = *column;
                        }
                    },
                );
                product::<F, K, _, _, _>(
                    key_panels,
                    row_quads,
                    |kp| &v_lanes[(first_panel + kp) * dvw..(first_panel + kp + 1) * dvw],
                    |c| &d_o_quads[(first_quad + c) * dvw..(first_quad + c + 1) * dvw],
                    |kp, c, block| {
                        for (lane, column) in ds_t[kp * nr4 + c * NR..][..NR].iter_mut().zip(block)
                        {
                            lane.0 = *column;
                        }
                    },
                );

                // P = 2^(S·scale·log2e − LSE·log2e) and dS = P ∘ (dP − Δ) on admitted keys,
                // exactly 0 elsewhere (padding rows and keys included).
                for (kp, (p_lanes, ds_lanes)) in p_t
                    .chunks_exact_mut(nr4)
                    .zip(ds_t.chunks_exact_mut(nr4))
                    .enumerate()
                {
                    let rows_of_panel = p_lanes.iter_mut().zip(ds_lanes.iter_mut()).enumerate();
                    for (i, (p_lane, ds_lane)) in rows_of_panel {
                        let (admitted, l, d) = match scratch.admitted.get(i) {
                            Some(a) => (a.clone(), lse2[rows.start + i], delta[rows.start + i]),
                            None => (0..0, 0.0, 0.0),
                        };
                        let first = kp * MR;
                        for (jj, (x, g)) in p_lane.0.iter_mut().zip(&mut ds_lane.0).enumerate() {
                            let inside = admitted.start <= first + jj && first + jj < admitted.end;
                            let prob = exp2_nonpositive(*x * scale_log2 - l);
                            let prob = if inside { prob } else { 0.0 };
                            *g = if inside { prob * (*g - d) } else { 0.0 };
                            *x = prob;
                        }
                    }
                }

                // dVᵀ += dOᵀ·P and dKᵀ += scale·Qᵀ·dS, 16 head-dim entries × NR keys per
                // micro-tile: the B panels are NR keys of each lane of Pᵀ and dSᵀ, and each
                // result column is a contiguous part of one key's row of dV or dK.
                let (p_t, ds_t) = (&*p_t, &*ds_t);
                let key_quads = nk.div_ceil(NR);
                let quads = |t, j| key_quad(t, nr4, nr, j);
                product::<F, K, _, _, _>(
                    dvw.div_ceil(MR),
                    key_quads,
                    |q| &d_o_cols[q * len_q + rows.start..q * len_q + rows.end],
                    |j| quads(p_t, j),
                    |q, j, block| accumulate(dv_c, dvw, j * NR..nk, q * MR, block, 1.0),
                );
                product::<F, K, _, _, _>(
                    dqk.div_ceil(MR),
                    key_quads,
                    |q| &q_cols[q * len_q + rows.start..q * len_q + rows.end],
                    |j| quads(ds_t, j),
                    |q, j, block| accumulate(dk_c, dqk, j * NR..nk, q * MR, block, cfg.scale),
                );

                // dS as NR rows per key (the one transposed copy), then dQᵀ += scale·Kᵀ·dSᵀ.
                // Every entry is written below, so the buffer only grows, never is cleared.
                if scratch.ds_quads.len() < row_quads * nk {
                    scratch.ds_quads.resize(row_quads * nk, [0.0; NR]);
                }
                let ds_quads = &mut scratch.ds_quads[..row_quads * nk];
                for (c, quads) in ds_quads.chunks_exact_mut(nk).enumerate() {
                    for (kp, quads) in quads.chunks_mut(MR).enumerate() {
                        let lanes = &ds_t[kp * nr4 + c * NR..kp * nr4 + c * NR + NR];
                        for (jj, quad) in quads.iter_mut().enumerate() {
                            *quad = std::array::from_fn(|t| lanes[t].0[jj]);
                        }
                    }
                }
                let ds_quads = &*ds_quads;
                product::<F, K, _, _, _>(
                    dqk.div_ceil(MR),
                    row_quads,
                    |q| &k_cols[q * len_kv + keys.start..q * len_kv + keys.end],
                    |c| &ds_quads[c * nk..(c + 1) * nk],
                    |q, c, block| {
                        let first_row = rows.start + c * NR;
                        accumulate(dq_h, dqk, first_row..rows.end, q * MR, block, cfg.scale);
                    },
                );
            }
        }
    }
}

/// Key quad `j`'s entries of rows `0..rows` of a transposed tile (`rows_padded` lanes per key
/// panel).
#[inline(always)]
fn key_quad(
    t: &[Lane],
    rows_padded: usize,
    rows: usize,
    j: usize,
) -> impl Iterator<Item = [f32; NR]> + '_ {
    let (kp, c) = (j / (MR / NR), j % (MR / NR));
    let lanes = &t[kp * rows_padded..kp * rows_padded + rows];
    lanes.iter().map(move |lane| lane.0.as_chunks::<NR>().0[c])
}

/// Adds `scale ·` column t of `block` (MR head-dim entries from `d0`) to row `rows.start + t` of
/// the row-major `out` (`width` columns), for the rows of `rows` and the columns below `width`.
#[inline(always)]
fn accumulate(
    out: &mut [f32],
    width: usize,
    rows: Range<usize>,
    d0: usize,
    block: &[[f32; MR]; NR],
    scale: f32,
) {
    let columns = MR.min(width - d0);
    for (row, column) in rows.zip(block) {
        let dst = &mut out[row * width + d0..row * width + d0 + columns];
        for (y, &x) in dst.iter_mut().zip(column) {
            *y += scale * x;
        }
    }
}

/// Fills `scratch.admitted` with each row's admitted keys relative to `keys`; `false` when no
/// row of the tile admits any of them.
fn admit(
    band: MaskBand,
    rows: &Range<usize>,
    keys: &Range<usize>,
    len_q: usize,
    len_kv: usize,
    scratch: &mut Scratch,
) -> bool {
    scratch.admitted.clear();
    scratch.admitted.extend(rows.clone().map(|i| {
        let a = band.admitted(i, len_q, len_kv);
        let (lo, hi) = (a.start.max(keys.start), a.end.min(keys.end));
        if lo < hi {
            lo - keys.start..hi - keys.start
        } else {
            0..0
        }
    }));
    scratch.admitted.iter().any(|a| !a.is_empty())
}

/// `Δ = rowsum(dO ∘ O)` of every logical query row, read where the tensors lie (converted to
/// f32 and summed over the head dim in order), into `delta` (one value per staged row).
pub(super) fn row_dots<T: FloatElement>(
    d_o: (&[T], &AttnLayout),
    o: (&[T], &AttnLayout),
    lens: &[usize],
    delta: &mut Staged,
) {
    let heads = d_o.1.heads;
    let mut jobs = Vec::new();
    for (b, rows) in delta.batches_mut().into_iter().enumerate() {
        for (h, out) in rows.chunks_mut(lens[b].max(1)).enumerate().take(heads) {
            jobs.push((b, h, out));
        }
    }
    crate::parallel::for_each_init(
        jobs,
        || (),
        |_, (b, h, out)| {
            let (g_step, y_step) = (d_o.1.stride_d, o.1.stride_d);
            for (i, x) in out.iter_mut().enumerate() {
                let (g0, y0) = (d_o.1.position(b, i, h, 0), o.1.position(b, i, h, 0));
                *x = (0..d_o.1.head_dim)
                    .map(|d| d_o.0[g0 + d * g_step].to_f32() * o.0[y0 + d * y_step].to_f32())
                    .sum();
            }
        },
    );
}
