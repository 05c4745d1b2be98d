//! The two passes of the backward, each over independent work items so that no output is ever
//! shared between threads:
//!
//! * key pass, one item per (batch, KV head, key tile): for every query head of the group and
//!   every query tile it recomputes P and dS for the tile pair and accumulates
//!   `dV += Pᵀ·dO` and `dK += scale·dSᵀ·Q` into the item's own rows;
//! * query pass, one item per (batch, query head, query tile): for every key tile it recomputes
//!   the same P and dS and accumulates `dQ += scale·dS·K`.
//!
//! P is recomputed from the saved LSE, `P = exp(scale·QKᵀ − LSE)` on admitted keys and exactly 0
//! elsewhere, so no Lq × Lkv matrix is ever held; the price is computing QKᵀ and dO·Vᵀ twice.

use std::ops::Range;

use rayon::prelude::*;

use crate::gemm::{MatMut, MatRef, sgemm};
use crate::sdpa::MaskBand;

use super::blocks::Blocks;
use super::problem::Problem;

/// Staged operands of the whole call.
pub(super) struct Staged {
    pub q: Blocks,
    pub k: Blocks,
    pub v: Blocks,
    pub d_o: Blocks,
    pub lse: Blocks,
    /// `rowsum(dO ∘ O)` per query row, width 1.
    pub delta: Blocks,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    pub scale: f32,
    pub band: MaskBand,
    pub tile: usize,
}

/// One query head against one KV head of one batch.
struct Pair<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    d_o: &'a [f32],
    lse: &'a [f32],
    delta: &'a [f32],
    len_q: usize,
    len_kv: usize,
    dim_qk: usize,
    dim_v: usize,
}

impl<'a> Pair<'a> {
    fn new(p: &Problem, s: &'a Staged, b: usize, h: usize, g: usize) -> Self {
        Pair {
            q: s.q.block(b, h),
            k: s.k.block(b, g),
            v: s.v.block(b, g),
            d_o: s.d_o.block(b, h),
            lse: s.lse.block(b, h),
            delta: s.delta.block(b, h),
            len_q: p.len_q[b],
            len_kv: p.len_kv[b],
            dim_qk: p.dim_qk,
            dim_v: p.dim_v,
        }
    }
}

/// Per-thread tile buffers: P and dS of one (query tile, key tile), row-major.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    p: Vec<f32>,
    ds: Vec<f32>,
    admitted: Vec<Range<usize>>,
}

fn row_major(data: &[f32], rows: usize, cols: usize) -> MatRef<'_> {
    MatRef {
        data,
        rows,
        cols,
        row_stride: cols,
        col_stride: 1,
    }
}

fn transposed(data: &[f32], rows: usize, cols: usize) -> MatRef<'_> {
    // `data` holds a row-major `cols × rows` matrix; read it as its transpose.
    MatRef {
        data,
        rows,
        cols,
        row_stride: 1,
        col_stride: rows,
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

/// Fills `scratch.p` and `scratch.ds` for query rows `rows` and keys `keys` of `pair`; `false`
/// (and nothing computed) when no row of the tile admits any of the keys.
fn tile(
    cfg: &Config,
    pair: &Pair<'_>,
    rows: Range<usize>,
    keys: Range<usize>,
    scratch: &mut Scratch,
) -> bool {
    scratch.admitted.clear();
    scratch.admitted.extend(rows.clone().map(|i| {
        let a = cfg.band.admitted(i, pair.len_q, pair.len_kv);
        a.start.max(keys.start)..a.end.min(keys.end)
    }));
    if scratch.admitted.iter().all(|a| a.is_empty()) {
        return false;
    }
    let (nr, nk) = (rows.len(), keys.len());
    let (dqk, dv) = (pair.dim_qk, pair.dim_v);
    scratch.p.clear();
    scratch.p.resize(nr * nk, 0.0);
    scratch.ds.clear();
    scratch.ds.resize(nr * nk, 0.0);
    // S = Q·Kᵀ into p, dP = dO·Vᵀ into ds.
    sgemm(
        1.0,
        row_major(&pair.q[rows.start * dqk..rows.end * dqk], nr, dqk),
        transposed(&pair.k[keys.start * dqk..keys.end * dqk], dqk, nk),
        0.0,
        row_major_mut(&mut scratch.p, nr, nk),
    );
    sgemm(
        1.0,
        row_major(&pair.d_o[rows.start * dv..rows.end * dv], nr, dv),
        transposed(&pair.v[keys.start * dv..keys.end * dv], dv, nk),
        0.0,
        row_major_mut(&mut scratch.ds, nr, nk),
    );
    for (r, admitted) in scratch.admitted.iter().enumerate() {
        let i = rows.start + r;
        let (lse, delta) = (pair.lse[i], pair.delta[i]);
        let p_row = &mut scratch.p[r * nk..(r + 1) * nk];
        let ds_row = &mut scratch.ds[r * nk..(r + 1) * nk];
        for (c, (p, ds)) in p_row.iter_mut().zip(ds_row.iter_mut()).enumerate() {
            if admitted.contains(&(keys.start + c)) {
                *p = (cfg.scale * *p - lse).exp();
                *ds = *p * (*ds - delta);
            } else {
                *p = 0.0;
                *ds = 0.0;
            }
        }
    }
    true
}

/// Splits `0..len` into tiles of at most `tile`.
fn tiles(len: usize, tile: usize) -> impl Iterator<Item = Range<usize>> {
    (0..len)
        .step_by(tile.max(1))
        .map(move |start| start..(start + tile).min(len))
}

/// dK and dV of every logical key row, into `dk` / `dv` (zeroed, staged like K / V).
pub(super) fn key_pass(p: &Problem, s: &Staged, cfg: &Config, dk: &mut Blocks, dv: &mut Blocks) {
    let group = p.heads_q / p.heads_kv;
    let (dqk, dvw) = (p.dim_qk, p.dim_v);
    let mut items = Vec::new();
    for ((b, g, dk_block), (_, _, dv_block)) in
        dk.per_block_mut().into_iter().zip(dv.per_block_mut())
    {
        let (mut dk_rest, mut dv_rest) = (dk_block, dv_block);
        for keys in tiles(p.len_kv[b], cfg.tile) {
            let (dk_tile, dk_tail) = std::mem::take(&mut dk_rest).split_at_mut(keys.len() * dqk);
            let (dv_tile, dv_tail) = std::mem::take(&mut dv_rest).split_at_mut(keys.len() * dvw);
            dk_rest = dk_tail;
            dv_rest = dv_tail;
            items.push((b, g, keys, dk_tile, dv_tile));
        }
    }
    items.into_par_iter().for_each_init(
        Scratch::default,
        |scratch, (b, g, keys, dk_tile, dv_tile)| {
            let nk = keys.len();
            for h in g * group..(g + 1) * group {
                let pair = Pair::new(p, s, b, h, g);
                for rows in tiles(pair.len_q, cfg.tile) {
                    if !tile(cfg, &pair, rows.clone(), keys.clone(), scratch) {
                        continue;
                    }
                    let nr = rows.len();
                    sgemm(
                        1.0,
                        transposed(&scratch.p, nk, nr),
                        row_major(&pair.d_o[rows.start * dvw..rows.end * dvw], nr, dvw),
                        1.0,
                        row_major_mut(dv_tile, nk, dvw),
                    );
                    sgemm(
                        cfg.scale,
                        transposed(&scratch.ds, nk, nr),
                        row_major(&pair.q[rows.start * dqk..rows.end * dqk], nr, dqk),
                        1.0,
                        row_major_mut(dk_tile, nk, dqk),
                    );
                }
            }
        },
    );
}

/// dQ of every logical query row, into `dq` (zeroed, staged like Q).
pub(super) fn query_pass(p: &Problem, s: &Staged, cfg: &Config, dq: &mut Blocks) {
    let group = p.heads_q / p.heads_kv;
    let dqk = p.dim_qk;
    let mut items = Vec::new();
    for (b, h, block) in dq.per_block_mut() {
        let mut rest = block;
        for rows in tiles(p.len_q[b], cfg.tile) {
            let (dq_tile, tail) = std::mem::take(&mut rest).split_at_mut(rows.len() * dqk);
            rest = tail;
            items.push((b, h, rows, dq_tile));
        }
    }
    items
        .into_par_iter()
        .for_each_init(Scratch::default, |scratch, (b, h, rows, dq_tile)| {
            let pair = Pair::new(p, s, b, h, h / group);
            let nr = rows.len();
            for keys in tiles(pair.len_kv, cfg.tile) {
                if !tile(cfg, &pair, rows.clone(), keys.clone(), scratch) {
                    continue;
                }
                let nk = keys.len();
                sgemm(
                    cfg.scale,
                    row_major(&scratch.ds, nr, nk),
                    row_major(&pair.k[keys.start * dqk..keys.end * dqk], nk, dqk),
                    1.0,
                    row_major_mut(dq_tile, nr, dqk),
                );
            }
        });
}

/// `delta[b, h, i] = Σ_d dO[b, i, h, d] · O[b, i, h, d]`, in f32 from the staged rows.
pub(super) fn row_dots(d_o: &Blocks, o: &Blocks, delta: &mut Blocks) {
    let width = d_o.width;
    delta
        .per_block_mut()
        .into_par_iter()
        .for_each(|(b, h, out)| {
            let rows = d_o
                .block(b, h)
                .chunks_exact(width)
                .zip(o.block(b, h).chunks_exact(width));
            for (x, (g, y)) in out.iter_mut().zip(rows) {
                *x = g.iter().zip(y).map(|(a, c)| a * c).sum();
            }
        });
}
