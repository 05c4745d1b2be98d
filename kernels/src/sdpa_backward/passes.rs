//! The backward in one pass over (batch, KV head, key chunk) work items, FlashAttention-2 style:
//! for each key tile of its chunk and each query tile of every query head of the group, an item
//! recomputes `P = 2^(scale·log2e·QKᵀ − LSE·log2e)` on the admitted keys (exactly 0 elsewhere)
//! and `dS = P ∘ (dO·Vᵀ − Δ)`, then accumulates `dV += Pᵀ·dO` and `dK += scale·dSᵀ·Q` into its
//! own key rows and `dQ += scale·dS·K` into its group's query rows. Each (query, key) tile pair
//! is thus visited once, at the 2.5× forward FLOPs of the math, with no Lq × Lkv matrix held.
//!
//! dQ is shared by the key chunks of one (batch, KV head): the first chunk accumulates into the
//! real dQ rows, every further chunk into a private buffer added in afterwards, so no output is
//! ever written by two threads. Chunks beyond one per (batch, KV head) exist only when there
//! are too few of those to keep every thread busy.
//!
//! Every product but one reads its A operand with unit row stride and its B operand with unit
//! column stride, matrixmultiply's contiguous packing paths: hence Q, K and dO staged both
//! transposed and row-major, V transposed, P and dS row-major. dQ's A operand is dS read
//! row-major (matrixmultiply's strided packing): an explicit transposed copy of dS per tile pair
//! measured 1.5–3 % slower (one thread, D 64 and 128), the copy costing more than the packing
//! it saves.

use std::ops::Range;

use crate::error::{KernelError, Role};
use crate::gemm::{MatMut, MatRef, sgemm};
use crate::sdpa::MaskBand;
use crate::sdpa::softmax::probabilities_rows;
use crate::sdpa::stage::Staged;

use super::problem::Problem;

/// Staged operands of the whole call, per (batch, head) block.
pub(super) struct Operands {
    /// Q, `d·len_q + i`.
    pub q_t: Staged,
    /// Q, `i·D_qk + d`.
    pub q: Staged,
    /// K, `d·len_kv + j`.
    pub k_t: Staged,
    /// K, `j·D_qk + d`.
    pub k: Staged,
    /// V, `d·len_kv + j`.
    pub v_t: Staged,
    /// dO, `d·len_q + i`.
    pub d_o_t: Staged,
    /// dO, `i·D_v + d`.
    pub d_o: Staged,
    /// The forward's LSE times log2 e, one per query row.
    pub lse2: Staged,
    /// `Δ = rowsum(dO ∘ O)`, one per query row.
    pub delta: Staged,
}

/// The gradients, zero-filled and staged row-major like their primals.
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
    /// S, then P: row-major `rows × keys`.
    p: Vec<f32>,
    /// dP, then dS: row-major.
    ds: Vec<f32>,
    /// Admitted keys of each row, relative to the key tile.
    admitted: Vec<Range<usize>>,
}

/// One unit of parallel work.
struct Item<'a> {
    batch: usize,
    kv_head: usize,
    keys: Range<usize>,
    /// dK rows `keys` of the KV head, row-major.
    dk: &'a mut [f32],
    /// dV rows `keys`.
    dv: &'a mut [f32],
    /// dQ of every query head of the group (`group × len_q × D_qk`), real or a partial.
    dq: &'a mut [f32],
}

/// Splits `range` into tiles of at most `tile`.
fn tiles(range: Range<usize>, tile: usize) -> impl Iterator<Item = Range<usize>> {
    let end = range.end;
    range
        .step_by(tile.max(1))
        .map(move |start| start..(start + tile).min(end))
}

fn strided(data: &[f32], rows: usize, cols: usize, rs: usize, cs: usize) -> MatRef<'_> {
    MatRef {
        data,
        rows,
        cols,
        row_stride: rs,
        col_stride: cs,
    }
}

fn row_major_mut(data: &mut [f32], rows: usize, cols: usize) -> MatMut<'_> {
    MatMut {
        data,
        rows,
        cols,
        row_stride: cols,
        col_stride: 1,
    }
}

/// A zero-filled buffer, allocated fallibly (its size follows the graph's dims).
fn zeroed(len: usize) -> Result<Vec<f32>, KernelError> {
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(len)
        .map_err(|_| KernelError::StagingTooLarge {
            role: Role::DQ,
            elements: len.to_string(),
        })?;
    buffer.resize(len, 0.0);
    Ok(buffer)
}

/// Computes every logical row of dQ, dK and dV into `grads`.
pub(super) fn backward(
    p: &Problem,
    s: &Operands,
    cfg: &Config,
    grads: &mut Gradients,
) -> Result<(), KernelError> {
    let f = &p.fwd;
    let (dqk, dvw) = (f.dim_qk, f.dim_v);
    let group = f.heads_q / f.heads_kv;
    let pairs = (0..f.batch)
        .filter(|&b| f.len_q[b] > 0 && f.len_kv[b] > 0)
        .count()
        * f.heads_kv;
    let wanted = 4 * crate::parallel::current_threads();
    let chunks_of = |len_kv: usize| {
        let tiles = len_kv.div_ceil(cfg.key_tile);
        if pairs >= wanted {
            1
        } else {
            wanted.div_ceil(pairs.max(1)).min(tiles).max(1)
        }
    };

    // Private dQ buffers for every chunk after the first of each (batch, KV head).
    let mut partials = Vec::new();
    for b in 0..f.batch {
        if f.len_q[b] == 0 || f.len_kv[b] == 0 {
            continue;
        }
        for g in 0..f.heads_kv {
            for _ in 1..chunks_of(f.len_kv[b]) {
                partials.push((b, g, zeroed(group * f.len_q[b] * dqk)?));
            }
        }
    }

    let Gradients { dq, dk, dv } = grads;
    let mut items = Vec::new();
    let mut spare = partials.iter_mut();
    let batches = dq
        .batches_mut()
        .into_iter()
        .zip(dk.batches_mut())
        .zip(dv.batches_mut());
    for (b, ((dq_b, dk_b), dv_b)) in batches.enumerate() {
        let (len_q, len_kv) = (f.len_q[b], f.len_kv[b]);
        if len_q == 0 || len_kv == 0 {
            continue;
        }
        let n = chunks_of(len_kv);
        let key_tiles = len_kv.div_ceil(cfg.key_tile);
        let per_group = dq_b
            .chunks_exact_mut(group * len_q * dqk)
            .zip(dk_b.chunks_exact_mut(len_kv * dqk))
            .zip(dv_b.chunks_exact_mut(len_kv * dvw));
        for (g, ((dq_g, dk_g), dv_g)) in per_group.enumerate() {
            let targets = std::iter::once(dq_g).chain(
                spare
                    .by_ref()
                    .take(n - 1)
                    .map(|(_, _, buffer)| &mut buffer[..]),
            );
            let (mut dk_rest, mut dv_rest) = (dk_g, dv_g);
            for (c, dq_target) in targets.enumerate() {
                let first = (c * key_tiles / n) * cfg.key_tile;
                let last = (((c + 1) * key_tiles / n) * cfg.key_tile).min(len_kv);
                let (dk_item, dk_tail) =
                    std::mem::take(&mut dk_rest).split_at_mut((last - first) * dqk);
                let (dv_item, dv_tail) =
                    std::mem::take(&mut dv_rest).split_at_mut((last - first) * dvw);
                dk_rest = dk_tail;
                dv_rest = dv_tail;
                items.push(Item {
                    batch: b,
                    kv_head: g,
                    keys: first..last,
                    dk: dk_item,
                    dv: dv_item,
                    dq: dq_target,
                });
            }
        }
    }
    // Largest items first, so the tail of the schedule is made of small ones.
    items.sort_by_key(|item| std::cmp::Reverse(f.len_q[item.batch] * item.keys.len()));
    crate::parallel::for_each_init(items, Scratch::default, |scratch, item| {
        run_item(p, s, cfg, item, scratch);
    });

    let mut dq_batches = dq.batches_mut();
    for (b, g, buffer) in &partials {
        let len = group * f.len_q[*b] * dqk;
        for (x, y) in dq_batches[*b][g * len..(g + 1) * len]
            .iter_mut()
            .zip(buffer)
        {
            *x += y;
        }
    }
    Ok(())
}

/// Every (key tile, query head, query tile) of one item.
fn run_item(p: &Problem, s: &Operands, cfg: &Config, item: Item<'_>, scratch: &mut Scratch) {
    let f = &p.fwd;
    let (b, g) = (item.batch, item.kv_head);
    let (len_q, len_kv) = (f.len_q[b], f.len_kv[b]);
    let (dqk, dvw) = (f.dim_qk, f.dim_v);
    let group = f.heads_q / f.heads_kv;
    let scale_log2 = cfg.scale * std::f32::consts::LOG2_E;
    let (k_t, k, v_t) = (s.k_t.block(b, g), s.k.block(b, g), s.v_t.block(b, g));
    for keys in tiles(item.keys.clone(), cfg.key_tile) {
        let nk = keys.len();
        let local = keys.start - item.keys.start;
        let dk_c = &mut item.dk[local * dqk..(local + nk) * dqk];
        let dv_c = &mut item.dv[local * dvw..(local + nk) * dvw];
        for within in 0..group {
            let h = g * group + within;
            let (q_t, q) = (s.q_t.block(b, h), s.q.block(b, h));
            let (d_o_t, d_o) = (s.d_o_t.block(b, h), s.d_o.block(b, h));
            let (lse2, delta) = (s.lse2.block(b, h), s.delta.block(b, h));
            let dq_h = &mut item.dq[within * len_q * dqk..(within + 1) * len_q * dqk];
            for rows in tiles(0..len_q, cfg.query_tile) {
                let nr = rows.len();
                if !admit(cfg.band, &rows, &keys, len_q, len_kv, scratch) {
                    continue;
                }
                scratch.p.resize(nr * nk, 0.0);
                scratch.ds.resize(nr * nk, 0.0);
                let (p_tile, ds) = (&mut scratch.p[..nr * nk], &mut scratch.ds[..nr * nk]);
                // S·log2e = Q·Kᵀ into P's buffer, dP = dO·Vᵀ into dS's.
                sgemm(
                    scale_log2,
                    strided(&q_t[rows.start..], nr, dqk, 1, len_q),
                    strided(&k_t[keys.start..], dqk, nk, len_kv, 1),
                    0.0,
                    row_major_mut(p_tile, nr, nk),
                );
                sgemm(
                    1.0,
                    strided(&d_o_t[rows.start..], nr, dvw, 1, len_q),
                    strided(&v_t[keys.start..], dvw, nk, len_kv, 1),
                    0.0,
                    row_major_mut(ds, nr, nk),
                );
                probabilities_rows(
                    p_tile,
                    ds,
                    nk,
                    &scratch.admitted,
                    &lse2[rows.clone()],
                    &delta[rows.clone()],
                );
                // dV += Pᵀ·dO, dK += scale·dSᵀ·Q, dQ += scale·dS·K.
                sgemm(
                    1.0,
                    strided(p_tile, nk, nr, 1, nk),
                    strided(&d_o[rows.start * dvw..], nr, dvw, dvw, 1),
                    1.0,
                    row_major_mut(dv_c, nk, dvw),
                );
                sgemm(
                    cfg.scale,
                    strided(ds, nk, nr, 1, nk),
                    strided(&q[rows.start * dqk..], nr, dqk, dqk, 1),
                    1.0,
                    row_major_mut(dk_c, nk, dqk),
                );
                sgemm(
                    cfg.scale,
                    strided(ds, nr, nk, nk, 1),
                    strided(&k[keys.start * dqk..], nk, dqk, dqk, 1),
                    1.0,
                    row_major_mut(&mut dq_h[rows.start * dqk..rows.end * dqk], nr, dqk),
                );
            }
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

/// `Δ = rowsum(dO ∘ O)` for every staged row; `d_o` and `o` row-major with the same rows as
/// `delta` (one value each), in the same order.
pub(super) fn row_dots(d_o: &Staged, o: &Staged, delta: &mut Staged) {
    const ROWS: usize = 256;
    let width = d_o.width().max(1);
    let blocks: Vec<_> = delta
        .data
        .chunks_mut(ROWS)
        .zip(d_o.data.chunks(ROWS * width))
        .zip(o.data.chunks(ROWS * width))
        .collect();
    crate::parallel::for_each_init(
        blocks,
        || (),
        |_, ((out, g), y)| {
            let rows = g.chunks_exact(width).zip(y.chunks_exact(width));
            for (x, (g, y)) in out.iter_mut().zip(rows) {
                *x = g.iter().zip(y).map(|(a, c)| a * c).sum();
            }
        },
    );
}
