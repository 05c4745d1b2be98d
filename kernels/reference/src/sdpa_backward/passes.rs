//! The backward in one pass over (batch, KV head, key chunk) work items: for each query tile of
//! every query head of the group and each key tile of its chunk, an item recomputes
//! `P = 2^(scale·log2e·QKᵀ − LSE·log2e)` on the admitted keys (exactly 0 elsewhere) and
//! `dS = P ∘ (dO·Vᵀ − Δ)`, then accumulates `dV += Pᵀ·dO` and `dK += scale·dSᵀ·Q` into its own
//! key rows and `dQ += scale·dS·K` into the query tile's rows. Each (query, key) tile pair is thus
//! visited once, at the 2.5× forward FLOPs of the math, with no Lq × Lkv matrix held.
//!
//! The items and the dQ they share are `super::items`'.
//!
//! Every product runs on `crate::gemm::micro_kernel` with operands in the panel arrangements it
//! reads, so nothing is packed per product (matrixmultiply packed both operands of all five
//! products of every tile pair). Each item stages what it reads into per-thread buffers that
//! stay in cache while they are read: its keys and values once, each query tile's Q and dO rows
//! (with their LSE and Δ) once for all its key tiles, prefetching input rows ahead; the query
//! tile's dQ rows are summed in a tile buffer and written once. Sᵀ and dPᵀ are computed as lanes
//! of 16 keys, which makes them the A operands of dV and dK as they stand; dQ's A operand needs
//! dS as lanes of 16 rows, the one transposed copy per tile pair. The item's loops are compiled
//! for AVX-512, for AVX2 + FMA (chosen at run time) and for the baseline target.

use std::ops::Range;

use crate::gemm::{Blocking, Fused, Lane, MR, MulAdd, NR, Narrow, Separate, Split, Wide, product};
#[cfg(target_arch = "x86_64")]
use crate::isa::{Isa, isa};
use crate::sdpa::MaskBand;
use crate::sdpa::output::write_rows;
use crate::sdpa::stage::Staged;
use ragged_core::dtype::FloatElement;
use ragged_core::error::KernelError;

use super::items::{Item, RowsItem, for_each_item, tiles};
use super::lanes::{p_and_ds, transpose};
use super::problem::Problem;
use super::staging::{grow, read_row, reset, stage_rows};

/// The backward's inputs as typed slices, read where they lie by each work item.
pub(super) struct Sources<'a, T> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub o: &'a [T],
    pub d_o: &'a [T],
    /// The forward's natural-log LSE.
    pub lse: &'a [f32],
}

/// The gradients, staged row-major like their primals; [`backward`] writes every element (each
/// work item zeroes its dK and dV rows before accumulating and overwrites its dQ rows, in
/// parallel and while they are in cache; the rows of batches without items are zeroed by
/// `super::items`), so they are taken unfilled.
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

/// Per-thread buffers: what one work item stages of its keys, what one query tile stages of its
/// rows, and one tile pair's working set. All of it is filled from the inputs by the item that
/// reads it and stays in cache while it is read, instead of whole-call staged copies that are
/// written to memory and read back.
#[derive(Debug, Default)]
struct Scratch {
    /// The item's keys in row panels of MR (`panel·D_qk + d`): Sᵀ's A operand.
    k_lanes: Vec<Lane>,
    /// Its values likewise (`panel·D_v + d`): dPᵀ's A operand.
    v_lanes: Vec<Lane>,
    /// Its keys in column panels of MR (`(d / MR)·keys + j`): dQᵀ's A operand.
    k_cols: Vec<Lane>,
    /// The tile's query rows in row panels of NR (`quad·D_qk + d`): Sᵀ's B operand.
    q_quads: Vec<[f32; NR]>,
    /// Its dO rows likewise: dPᵀ's B operand.
    d_o_quads: Vec<[f32; NR]>,
    /// Its query rows in column panels of MR (`(d / MR)·rows + i`): dKᵀ's A operand.
    q_cols: Vec<Lane>,
    /// Its dO rows likewise: dVᵀ's A operand.
    d_o_cols: Vec<Lane>,
    /// LSE·log2 e and `Δ = rowsum(dO ∘ O)` of the tile's rows.
    lse2: Vec<f32>,
    delta: Vec<f32>,
    /// One input row in f32 (on AVX-512 a row panel's rows, transposed into it together), and
    /// O's beside dO's for Δ.
    row: Vec<f32>,
    o_row: Vec<f32>,
    /// The tile's dQ rows, row-major, summed over the item's keys.
    dq: Vec<f32>,
    /// Sᵀ, then Pᵀ: `key_panel·rows' + i`, rows' = rows rounded up to NR.
    p: Vec<Lane>,
    /// dPᵀ, then dSᵀ, likewise.
    ds: Vec<Lane>,
    /// dS as NR rows per key: `row_quad·keys + j`.
    ds_quads: Vec<[f32; NR]>,
    /// Admitted keys of each row, relative to the key tile.
    admitted: Vec<Range<usize>>,
}

/// What one item computes and where: its (batch, KV head) and keys, the f32 rows its dK and dV
/// accumulate in, and where each finished query tile's dQ rows go
/// (`dq(head within the group, rows, tile)`).
struct Work<'w> {
    batch: usize,
    kv_head: usize,
    keys: Range<usize>,
    dk: &'w mut [f32],
    dv: &'w mut [f32],
    dq: &'w mut PutRows<'w>,
}

/// Receives finished f32 rows: (head within the group, rows, the rows `D_qk` apart).
type PutRows<'w> = dyn FnMut(usize, Range<usize>, &[f32]) + 'w;

/// Computes every logical row of dQ, dK and dV into `grads`.
pub(super) fn backward<T: FloatElement>(
    p: &Problem,
    s: &Sources<'_, T>,
    cfg: &Config,
    grads: &mut Gradients,
) -> Result<(), KernelError> {
    let (dqk, len_q) = (p.fwd.dim_qk, &p.fwd.len_q);
    for_each_item(p, cfg.key_tile, grads, |scratch: &mut Scratch, item| {
        let Item {
            batch,
            kv_head,
            keys,
            dk,
            dv,
            dq,
        } = item;
        let per_head = len_q[batch] * dqk;
        let mut put = |within: usize, rows: Range<usize>, tile: &[f32]| {
            dq[within * per_head + rows.start * dqk..within * per_head + rows.end * dqk]
                .copy_from_slice(tile);
        };
        let work = Work {
            batch,
            kv_head,
            keys,
            dk,
            dv,
            dq: &mut put,
        };
        run_item(p, s, cfg, work, scratch)
    })
}

/// Computes every logical row of dQ, dK and dV straight into the caller's rows (one item per
/// (batch, KV head), `super::items::row_items`): each item sums dK and dV in per-thread rows
/// that stay in cache and converts them once it is done, and each query tile's dQ once the
/// tile has seen every key, so no whole-call staged gradient is written and scattered.
pub(super) fn backward_into<T: FloatElement>(
    p: &Problem,
    s: &Sources<'_, T>,
    cfg: &Config,
    items: Vec<RowsItem<'_, T>>,
) {
    let (dqk, dvw, len_q) = (p.fwd.dim_qk, p.fwd.dim_v, &p.fwd.len_q);
    type Buffers = (Scratch, Vec<f32>, Vec<f32>);
    crate::parallel::for_each_init(items, Buffers::default, |buffers, item| {
        let (scratch, dk, dv) = buffers;
        let RowsItem {
            batch,
            kv_head,
            dk: dk_rows,
            dv: dv_rows,
            dq: mut dq_rows,
        } = item;
        let n = dk_rows.len();
        let (dk, dv) = (grow(dk, n * dqk, 0.0), grow(dv, n * dvw, 0.0));
        let per_head = len_q[batch];
        let mut put = |within: usize, rows: Range<usize>, tile: &[f32]| {
            let dst = &mut dq_rows[within * per_head + rows.start..within * per_head + rows.end];
            write_rows(dst.iter_mut().map(|row| &mut **row), tile, dqk);
        };
        let work = Work {
            batch,
            kv_head,
            keys: 0..n,
            dk: &mut *dk,
            dv: &mut *dv,
            dq: &mut put,
        };
        run_item(p, s, cfg, work, scratch);
        write_rows(dk_rows, dk, dqk);
        write_rows(dv_rows, dv, dvw);
    });
}

/// Every (query head, query tile, key tile) of one item.
fn run_item<T: FloatElement>(
    p: &Problem,
    s: &Sources<'_, T>,
    cfg: &Config,
    item: Work<'_>,
    scratch: &mut Scratch,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        fn wide<T: FloatElement>(
            p: &Problem,
            s: &Sources<'_, T>,
            cfg: &Config,
            item: Work<'_>,
            scratch: &mut Scratch,
        ) {
            item_body::<T, Fused, Wide>(p, s, cfg, item, scratch);
        }
        #[target_feature(enable = "avx2,fma")]
        fn fused<T: FloatElement>(
            p: &Problem,
            s: &Sources<'_, T>,
            cfg: &Config,
            item: Work<'_>,
            scratch: &mut Scratch,
        ) {
            item_body::<T, Fused, Split>(p, s, cfg, item, scratch);
        }
        match isa() {
            Isa::Avx512 | Isa::Avx512Bf16 | Isa::Amx => {
                // SAFETY: `isa()` chose a set the CPU reports (`crate::isa`).
                return unsafe { wide(p, s, cfg, item, scratch) };
            }
            // SAFETY: as above.
            Isa::Avx2Fma => return unsafe { fused(p, s, cfg, item, scratch) },
            Isa::Baseline => {}
        }
    }
    item_body::<T, Separate, Narrow>(p, s, cfg, item, scratch);
}

#[inline(always)]
fn item_body<T: FloatElement, F: MulAdd, K: Blocking>(
    p: &Problem,
    s: &Sources<'_, T>,
    cfg: &Config,
    item: Work<'_>,
    scratch: &mut Scratch,
) {
    let f = &p.fwd;
    let (b, g) = (item.batch, item.kv_head);
    let (len_q, len_kv) = (f.len_q[b], f.len_kv[b]);
    let (dqk, dvw) = (f.dim_qk, f.dim_v);
    let group = f.heads_q / f.heads_kv;
    let scale_log2 = cfg.scale * std::f32::consts::LOG2_E;

    // The item's keys, once for all its query tiles.
    stage_rows::<_, _, K>(
        (s.k, &f.k),
        (b, g),
        item.keys.clone(),
        &mut scratch.row,
        &mut scratch.k_lanes,
        Some(&mut scratch.k_cols),
        |_, _| {},
    );
    stage_rows::<_, _, K>(
        (s.v, &f.v),
        (b, g),
        item.keys.clone(),
        &mut scratch.row,
        &mut scratch.v_lanes,
        None,
        |_, _| {},
    );
    for rows in [&mut *item.dk, &mut *item.dv] {
        rows.fill(0.0);
    }
    for within in 0..group {
        let h = g * group + within;
        for rows in tiles(0..len_q, cfg.query_tile) {
            let nr = rows.len();
            // The tile's rows, once for all the item's key tiles.
            reset(&mut scratch.lse2, nr, 0.0);
            for (r, x) in scratch.lse2.iter_mut().enumerate() {
                *x = s.lse[p.lse.position(b, rows.start + r, h, 0)] * std::f32::consts::LOG2_E;
            }
            stage_rows::<_, _, K>(
                (s.q, &f.q),
                (b, h),
                rows.clone(),
                &mut scratch.row,
                &mut scratch.q_quads,
                Some(&mut scratch.q_cols),
                |_, _| {},
            );
            reset(&mut scratch.delta, nr, 0.0);
            reset(&mut scratch.o_row, dvw, 0.0);
            let (delta, o_row) = (&mut scratch.delta, &mut scratch.o_row);
            stage_rows::<_, _, K>(
                (s.d_o, &p.d_o),
                (b, h),
                rows.clone(),
                &mut scratch.row,
                &mut scratch.d_o_quads,
                Some(&mut scratch.d_o_cols),
                |r, d_o_row| {
                    read_row(s.o, &f.o, (b, rows.start + r, h), o_row);
                    delta[r] = dot(d_o_row, o_row);
                },
            );
            reset(&mut scratch.dq, nr * dqk, 0.0);

            for keys in tiles(item.keys.clone(), cfg.key_tile) {
                tile_pair::<F, K>(
                    cfg,
                    (dqk, dvw, scale_log2),
                    (&rows, len_q),
                    (&keys, &item.keys, len_kv),
                    (&mut *item.dk, &mut *item.dv),
                    scratch,
                );
            }
            (item.dq)(within, rows, &scratch.dq);
        }
    }
}

/// One (query tile, key tile) pair: recomputes P and dS, accumulates dV and dK into the item's
/// key rows and dQ into the tile's rows (`scratch.dq`).
#[inline(always)]
fn tile_pair<F: MulAdd, K: Blocking>(
    cfg: &Config,
    (dqk, dvw, scale_log2): (usize, usize, f32),
    (rows, len_q): (&Range<usize>, usize),
    (keys, item_keys, len_kv): (&Range<usize>, &Range<usize>, usize),
    (dk, dv): (&mut [f32], &mut [f32]),
    scratch: &mut Scratch,
) {
    let nr = rows.len();
    let nk = keys.len();
    if !admit(cfg.band, rows, keys, len_q, len_kv, &mut scratch.admitted) {
        return;
    }
    let local = keys.start - item_keys.start;
    let n_item = item_keys.len();
    let dk_c = &mut dk[local * dqk..(local + nk) * dqk];
    let dv_c = &mut dv[local * dvw..(local + nk) * dvw];
    let key_panels = nk.div_ceil(MR);
    // Row counts padded to NR: the B panels of Q and dO are.
    let nr4 = nr.next_multiple_of(NR);
    let p_t = grow(&mut scratch.p, key_panels * nr4, Lane::ZERO);
    let ds_t = grow(&mut scratch.ds, key_panels * nr4, Lane::ZERO);
    let (k_lanes, v_lanes, k_cols) = (&scratch.k_lanes, &scratch.v_lanes, &scratch.k_cols);
    let (q_quads, d_o_quads) = (&scratch.q_quads, &scratch.d_o_quads);
    let (q_cols, d_o_cols) = (&scratch.q_cols, &scratch.d_o_cols);
    let (lse2, delta) = (&scratch.lse2, &scratch.delta);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, 16 keys × NR rows per micro-tile.
    let first_panel = local / MR;
    let row_quads = nr4 / NR;
    product::<F, K, _, _, _>(
        key_panels,
        row_quads,
        |kp| &k_lanes[(first_panel + kp) * dqk..(first_panel + kp + 1) * dqk],
        |c| &q_quads[c * dqk..(c + 1) * dqk],
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
        |c| &d_o_quads[c * dvw..(c + 1) * dvw],
        |kp, c, block| {
            for (lane, column) in ds_t[kp * nr4 + c * NR..][..NR].iter_mut().zip(block) {
                lane.0 = *column;
            }
        },
    );

    // P = 2^(S·scale·log2e − LSE·log2e) and dS = P ∘ (dP − Δ) on admitted keys, exactly 0
    // elsewhere (padding rows and keys included).
    for (kp, (p_lanes, ds_lanes)) in p_t
        .chunks_exact_mut(nr4)
        .zip(ds_t.chunks_exact_mut(nr4))
        .enumerate()
    {
        let rows_of_panel = p_lanes.iter_mut().zip(ds_lanes.iter_mut()).enumerate();
        for (i, (p_lane, ds_lane)) in rows_of_panel {
            let (admitted, l, d) = match scratch.admitted.get(i) {
                Some(a) => (a.clone(), lse2[i], delta[i]),
                None => (0..0, 0.0, 0.0),
            };
            let first = kp * MR;
            p_and_ds::<F, K>((p_lane, ds_lane), &admitted, first, (scale_log2, l, d));
        }
    }

    // dVᵀ += dOᵀ·P and dKᵀ += scale·Qᵀ·dS, 16 head-dim entries × NR keys per micro-tile: the B
    // panels are NR keys of each lane of Pᵀ and dSᵀ, and each result column is a contiguous
    // part of one key's row of dV or dK.
    let (p_t, ds_t) = (&*p_t, &*ds_t);
    let key_quads = nk.div_ceil(NR);
    let quads = |t, j| key_quad(t, nr4, nr, j);
    product::<F, K, _, _, _>(
        dvw.div_ceil(MR),
        key_quads,
        |q| &d_o_cols[q * nr..(q + 1) * nr],
        |j| quads(p_t, j),
        |q, j, block| {
            accumulate(dv_c, dvw, j * NR..nk, q * MR, block, 1.0);
            prefetch_ahead(dv_c, dvw, j, q * MR);
        },
    );
    product::<F, K, _, _, _>(
        dqk.div_ceil(MR),
        key_quads,
        |q| &q_cols[q * nr..(q + 1) * nr],
        |j| quads(ds_t, j),
        |q, j, block| {
            accumulate(dk_c, dqk, j * NR..nk, q * MR, block, cfg.scale);
            prefetch_ahead(dk_c, dqk, j, q * MR);
        },
    );

    // dS as NR rows per key (the one transposed copy), then dQᵀ += scale·Kᵀ·dSᵀ. Every entry
    // is written below, so the buffer only grows, never is cleared.
    let ds_quads = grow(&mut scratch.ds_quads, row_quads * nk, [0.0; NR]);
    for (c, quads) in ds_quads.chunks_exact_mut(nk).enumerate() {
        for (kp, quads) in quads.chunks_mut(MR).enumerate() {
            let lanes = &ds_t[kp * nr4 + c * NR..kp * nr4 + c * NR + NR];
            transpose::<K>(lanes, quads);
        }
    }
    let ds_quads = &*ds_quads;
    let dq = &mut scratch.dq;
    product::<F, K, _, _, _>(
        dqk.div_ceil(MR),
        row_quads,
        |q| &k_cols[q * n_item + local..q * n_item + local + nk],
        |c| &ds_quads[c * nk..(c + 1) * nk],
        |q, c, block| accumulate(dq, dqk, c * NR..nr, q * MR, block, cfg.scale),
    );
}

/// `Σ x·y` over 16 running sums, so that it vectorises.
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut sums = [0.0f32; MR];
    let (xc, xr) = x.as_chunks::<MR>();
    let (yc, yr) = y.as_chunks::<MR>();
    for (a, c) in xc.iter().zip(yc) {
        for ((s, &a), &c) in sums.iter_mut().zip(a).zip(c) {
            *s += a * c;
        }
    }
    let tail: f32 = xr.iter().zip(yr).map(|(a, c)| a * c).sum();
    sums.iter().sum::<f32>() + tail
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

/// Prefetches the MR columns from `d0` of the NR rows that the block two key quads after `j`
/// accumulates into: an item's dK and dV rows leave L2 between two query tiles (the sweep over
/// its keys reads K in three arrangements besides them), and a block's products give the
/// lines time to arrive.
#[inline(always)]
fn prefetch_ahead(out: &[f32], width: usize, j: usize, d0: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let first = (j + 2) * NR;
        for row in first..first + NR {
            let at = row * width + d0;
            for x in [at, at + MR - 1] {
                // SAFETY: SSE is part of the x86_64 baseline, and a prefetch never faults,
                // whatever the address.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(out.as_ptr().wrapping_add(x).cast::<i8>()) };
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (out, width, j, d0);
}

/// Fills `admitted` with each row's admitted keys relative to `keys`; `false` when no
/// row of the tile admits any of them. Also the bf16 tiles' (`super::bf16_tiles`).
pub(super) fn admit(
    band: MaskBand,
    rows: &Range<usize>,
    keys: &Range<usize>,
    len_q: usize,
    len_kv: usize,
    admitted: &mut Vec<Range<usize>>,
) -> bool {
    admitted.clear();
    admitted.extend(rows.clone().map(|i| {
        let a = band.admitted(i, len_q, len_kv);
        let (lo, hi) = (a.start.max(keys.start), a.end.min(keys.end));
        if lo < hi {
            lo - keys.start..hi - keys.start
        } else {
            0..0
        }
    }));
    admitted.iter().any(|a| !a.is_empty())
}
