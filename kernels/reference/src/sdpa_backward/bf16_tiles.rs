//! The bf16 backward on bf16 tiles (`crate::tiles`): all five products on AMX's `tdpbf16ps` or
//! AVX-512 BF16's `vdpbf16ps`, P and dS in f32 between them and rounded to bf16 as the products'
//! operands (as the GPU engines do), accumulation in f32.
//!
//! Each work item (`super::items`) walks its keys in blocks of 32; for each block and each query
//! head of the group:
//! 1. per block of 32 query rows with an admitted pair: S = Q·Kᵀ and dP = dO·Vᵀ as 2 × 2 C tiles,
//!    then P = 2^(S·scale·log2 e − LSE·log2 e) and dS = P ∘ (dP − Δ) on the admitted pairs
//!    (exact zeros elsewhere), and at once dQ += dS·K into the item's f32 dQ rows;
//! 2. over all those query blocks, with the output tiles held in registers: dVᵀ += dOᵀ·P and
//!    dKᵀ += Qᵀ·dS. Computing the transposes lets P and dS enter as B operands (row pairs
//!    interleaved as they are produced) and dO and Q as A operands staged once, so no tile is
//!    transposed per block.
//!
//! The scale multiplies dQ and dK once, when they are written out.

use std::ops::Range;

use half::bf16;

use crate::sdpa::bf16_stage::{self as stage, Blocks, line_aligned};
use crate::sdpa::layout::AttnLayout;
use crate::sdpa::stage::Staged;
use crate::tiles::{A, B, C, TileUnit};
use ragged_core::MaskBand;
use ragged_core::dtype::FloatElement;
use ragged_core::error::{KernelError, Role};

use super::items::{Item, for_each_item};
use super::passes::Gradients;
use super::problem::Problem;

/// Keys per block and query rows per block: two tiles each way.
const BLOCK: usize = 32;

/// The staged operands, per (batch, head).
pub(super) struct Operands {
    /// Q as rows of head-dim pairs: S's A.
    q_rows: Blocks,
    /// dO likewise: dP's A.
    d_o_rows: Blocks,
    /// K as tiles over the head dim: S's B.
    k_dim: Blocks,
    /// V likewise: dP's B.
    v_dim: Blocks,
    /// K as tiles over key pairs: dQ's B.
    k_pairs: Blocks,
    /// dO transposed, over query pairs: dVᵀ's A.
    d_o_t: Blocks,
    /// Q likewise: dKᵀ's A.
    q_t: Blocks,
    /// The forward's LSE times log2 e, one per query row.
    lse2: Staged,
    /// `Δ = rowsum(dO ∘ O)`, one per query row.
    delta: Staged,
    dqk_p: usize,
    dv_p: usize,
}

/// The bf16 sources of the staged operands.
pub(super) struct Sources<'a> {
    pub q: &'a [bf16],
    pub k: &'a [bf16],
    pub v: &'a [bf16],
    pub d_o: &'a [bf16],
}

impl Operands {
    pub(super) fn stage(
        p: &Problem,
        src: &Sources<'_>,
        lse2: Staged,
        delta: Staged,
    ) -> Result<Self, KernelError> {
        let f = &p.fwd;
        let (dqk_p, dv_p) = (pad(f.dim_qk), pad(f.dim_v));
        let (lq, lkv) = (&f.len_q[..], &f.len_kv[..]);
        Ok(Operands {
            q_rows: stage::rows_of_pairs(Role::Q, src.q, &f.q, lq, BLOCK, dqk_p)?,
            d_o_rows: stage::rows_of_pairs(Role::DO, src.d_o, &p.d_o, lq, BLOCK, dv_p)?,
            k_dim: stage::dim_pair_tiles(Role::K, src.k, &f.k, lkv, dqk_p)?,
            v_dim: stage::dim_pair_tiles(Role::V, src.v, &f.v, lkv, dv_p)?,
            k_pairs: stage::row_pair_tiles(Role::K, src.k, &f.k, lkv, dqk_p)?,
            d_o_t: stage::transposed_row_pair_tiles(Role::DO, src.d_o, &p.d_o, lq, dv_p)?,
            q_t: stage::transposed_row_pair_tiles(Role::Q, src.q, &f.q, lq, dqk_p)?,
            lse2,
            delta,
            dqk_p,
            dv_p,
        })
    }
}

/// A head dim padded to whole 2 × 2 tile blocks.
fn pad(dim: usize) -> usize {
    dim.max(1).next_multiple_of(BLOCK)
}

/// Computes every logical row of dQ, dK and dV into `grads`.
pub(super) fn backward<U: TileUnit>(
    p: &Problem,
    s: &Operands,
    scale: f32,
    band: MaskBand,
    key_tile: usize,
    grads: &mut Gradients,
) -> Result<(), KernelError> {
    for_each_item(p, key_tile, grads, |scratch: &mut Scratch, item| {
        // SAFETY: `crate::isa::bf16_tiles()` (checked by the caller) names a unit only where
        // `isa()` reported AVX-512 BF16 or AMX, which it does only where the CPU also reports
        // AVX-512 F/BW/VL/BF16, AVX2 and FMA.
        unsafe { run_item::<U>(p, s, scale, band, item, scratch) }
    })
}

/// Per-thread buffers.
#[derive(Default)]
struct Scratch {
    /// S of one 32 × 32 block, then dP's.
    s: Vec<f32>,
    dp: Vec<f32>,
    /// dS of the block, row-major bf16: dQ's A.
    ds_rows: Vec<u16>,
    /// P and dS of every query block of the head, as row pairs per key tile: the B operands of
    /// dVᵀ and dKᵀ (`query block · 512 + key tile · 256 + pair · 16 + key`).
    p_pairs: Vec<u32>,
    ds_pairs: Vec<u32>,
    /// dVᵀ and dKᵀ of the key block (head-dim rows × 32 keys).
    dv_t: Vec<f32>,
    dk_t: Vec<f32>,
    /// dQ of the item's group (`within · rows · dqk_p + row · dqk_p + d`).
    dq: Vec<f32>,
    /// Query blocks of the head with an admitted pair in the key block.
    blocks: Vec<usize>,
    admitted: Vec<Range<usize>>,
}

/// The constants of one item.
struct Ctx<'a> {
    s: &'a Operands,
    b: usize,
    g: usize,
    len_q: usize,
    len_kv: usize,
    scale_log2: f32,
    band: MaskBand,
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
fn run_item<U: TileUnit>(
    p: &Problem,
    s: &Operands,
    scale: f32,
    band: MaskBand,
    item: Item<'_>,
    scratch: &mut Scratch,
) {
    let f = &p.fwd;
    let (b, g) = (item.batch, item.kv_head);
    let (len_q, len_kv) = (f.len_q[b], f.len_kv[b]);
    let (dqk, dvw, dqk_p, dv_p) = (f.dim_qk, f.dim_v, s.dqk_p, s.dv_p);
    let group = f.heads_q / f.heads_kv;
    let rows_p = len_q.next_multiple_of(BLOCK);
    let q_blocks = rows_p / BLOCK;
    let ctx = Ctx {
        s,
        b,
        g,
        len_q,
        len_kv,
        scale_log2: scale * std::f32::consts::LOG2_E,
        band,
    };
    let Scratch {
        s: s_buffer,
        dp: dp_buffer,
        ds_rows: ds_rows_buffer,
        p_pairs: p_pairs_buffer,
        ds_pairs: ds_pairs_buffer,
        dv_t: dv_t_buffer,
        dk_t: dk_t_buffer,
        dq: dq_buffer,
        blocks,
        admitted,
    } = scratch;
    let sc = line_aligned(s_buffer, BLOCK * BLOCK);
    let dp = line_aligned(dp_buffer, BLOCK * BLOCK);
    let ds_rows = line_aligned(ds_rows_buffer, BLOCK * BLOCK);
    let p_pairs = line_aligned(p_pairs_buffer, q_blocks * 512);
    let ds_pairs = line_aligned(ds_pairs_buffer, q_blocks * 512);
    let dv_t = line_aligned(dv_t_buffer, dv_p * BLOCK);
    let dk_t = line_aligned(dk_t_buffer, dqk_p * BLOCK);
    let dq = line_aligned(dq_buffer, group * rows_p * dqk_p);
    dq.fill(0.0);
    let mut tiles = U::configure();

    for j0 in item.keys.clone().step_by(BLOCK) {
        let nk = BLOCK.min(item.keys.end - j0);
        dv_t.fill(0.0);
        dk_t.fill(0.0);
        for within in 0..group {
            let h = g * group + within;
            let dq_h = &mut dq[within * rows_p * dqk_p..(within + 1) * rows_p * dqk_p];
            blocks.clear();
            for qb in 0..q_blocks {
                let i0 = qb * BLOCK;
                if !admit(&ctx, i0, j0..j0 + nk, admitted) {
                    continue;
                }
                blocks.push(qb);
                scores(&ctx, &mut tiles, h, i0, j0, sc, dp);
                let pairs = qb * 512..(qb + 1) * 512;
                let rows = (&s.lse2.block(b, h)[i0..], &s.delta.block(b, h)[i0..]);
                let out = Softmax {
                    p_pairs: &mut p_pairs[pairs.clone()],
                    ds_pairs: &mut ds_pairs[pairs],
                    ds_rows,
                };
                probabilities(&ctx, sc, dp, rows, admitted, out);
                query_gradient(&ctx, &mut tiles, i0, j0, ds_rows, dq_h);
            }
            key_gradients(&ctx, &mut tiles, h, blocks, p_pairs, ds_pairs, dv_t, dk_t);
        }
        let local = j0 - item.keys.start;
        for j in 0..nk {
            let dk_row = &mut item.dk[(local + j) * dqk..(local + j + 1) * dqk];
            for (d, x) in dk_row.iter_mut().enumerate() {
                *x = scale * dk_t[d * BLOCK + j];
            }
            let dv_row = &mut item.dv[(local + j) * dvw..(local + j + 1) * dvw];
            for (d, x) in dv_row.iter_mut().enumerate() {
                *x = dv_t[d * BLOCK + j];
            }
        }
    }
    for within in 0..group {
        let target = &mut item.dq[within * len_q * dqk..(within + 1) * len_q * dqk];
        let source = &dq[within * rows_p * dqk_p..];
        for (i, row) in target.chunks_exact_mut(dqk.max(1)).enumerate() {
            for (x, &y) in row.iter_mut().zip(&source[i * dqk_p..]) {
                *x = scale * y;
            }
        }
    }
    drop(tiles);
}

/// Each row's admitted keys of `keys`, as lanes `0..32` of the block (rows past the batch's last
/// admit none); whether any is.
fn admit(ctx: &Ctx<'_>, i0: usize, keys: Range<usize>, admitted: &mut Vec<Range<usize>>) -> bool {
    let rows = i0..(i0 + BLOCK).min(ctx.len_q);
    let any = super::passes::admit(ctx.band, &rows, &keys, ctx.len_q, ctx.len_kv, admitted);
    admitted.resize(BLOCK, 0..0);
    any
}

/// S and dP of query rows `i0..i0 + 32` and keys `j0..j0 + 32`, row-major 32 × 32 in f32.
#[inline(always)]
fn scores<U: TileUnit>(
    ctx: &Ctx<'_>,
    tiles: &mut U,
    h: usize,
    i0: usize,
    j0: usize,
    s_out: &mut [f32],
    dp_out: &mut [f32],
) {
    let s = ctx.s;
    let (b, g) = (ctx.b, ctx.g);
    let pairs = [
        (s.q_rows.block(b, h), s.k_dim.block(b, g), s.dqk_p, s_out),
        (s.d_o_rows.block(b, h), s.v_dim.block(b, g), s.dv_p, dp_out),
    ];
    for (a_rows, b_tiles, dim_p, out) in pairs {
        let width = dim_p / 2;
        tiles.zero_block();
        for step in 0..dim_p / 32 {
            tiles.load_a(A::T4, a_rows, i0 * width + 16 * step, width);
            tiles.load_a(A::T7, a_rows, (i0 + 16) * width + 16 * step, width);
            tiles.load_b(B::T5, b_tiles, (j0 / 16 * width + 16 * step) * 16, 16);
            tiles.load_b(B::T6, b_tiles, ((j0 / 16 + 1) * width + 16 * step) * 16, 16);
            tiles.dot_pair([C::T0, C::T1], A::T4);
            tiles.dot_pair([C::T2, C::T3], A::T7);
        }
        tiles.store_block(out, 0, BLOCK);
    }
}

/// Where one block's P and dS go.
struct Softmax<'a> {
    /// P as row pairs per key tile (512 pairs).
    p_pairs: &'a mut [u32],
    /// dS likewise.
    ds_pairs: &'a mut [u32],
    /// dS row-major, 32 × 32.
    ds_rows: &'a mut [u16],
}

/// P and dS of one 32 × 32 block from S and dP, in bf16; `rows` = (LSE·log2 e, Δ) from the
/// block's first row on.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
fn probabilities(
    ctx: &Ctx<'_>,
    s: &[f32],
    dp: &[f32],
    rows: (&[f32], &[f32]),
    admitted: &[Range<usize>],
    out: Softmax<'_>,
) {
    use std::arch::x86_64::*;

    use crate::avx512;

    let scale = _mm512_set1_ps(ctx.scale_log2);
    let s = s.as_chunks::<16>().0;
    let dp = dp.as_chunks::<16>().0;
    let ds_rows = out.ds_rows.as_chunks_mut::<16>().0;
    let p_pairs = out.p_pairs.as_chunks_mut::<16>().0;
    let ds_pairs = out.ds_pairs.as_chunks_mut::<16>().0;
    for pair in 0..BLOCK / 2 {
        for half in 0..2 {
            let mut bits = [(_mm512_setzero_si512(), _mm512_setzero_si512()); 2];
            for (slot, r) in [2 * pair, 2 * pair + 1].into_iter().enumerate() {
                let a = &admitted[r];
                if a.is_empty() {
                    ds_rows[2 * r + half] = [0; 16];
                    continue;
                }
                let inside = avx512::lanes_between(16 * half as i32, a.start as i32, a.end as i32);
                let (lse2, delta) = (_mm512_set1_ps(rows.0[r]), _mm512_set1_ps(rows.1[r]));
                let x = _mm512_fmsub_ps(avx512::load(&s[2 * r + half]), scale, lse2);
                let prob = _mm512_maskz_mov_ps(inside, avx512::exp2_nonpositive(x));
                let grad = _mm512_sub_ps(avx512::load(&dp[2 * r + half]), delta);
                let ds = _mm512_maskz_mul_ps(inside, prob, grad);
                let ds16 = avx512::to_bf16_bits(ds);
                let mut row = [0u16; 16];
                avx512::store_u16(ds16, &mut row);
                ds_rows[2 * r + half] = row;
                bits[slot] = (
                    _mm512_cvtepu16_epi32(avx512::to_bf16_bits(prob)),
                    _mm512_cvtepu16_epi32(ds16),
                );
            }
            let interleave =
                |lo: __m512i, hi: __m512i| _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi));
            avx512::store_u32(
                interleave(bits[0].0, bits[1].0),
                &mut p_pairs[half * 16 + pair],
            );
            avx512::store_u32(
                interleave(bits[0].1, bits[1].1),
                &mut ds_pairs[half * 16 + pair],
            );
        }
    }
}

/// dQ rows `i0..i0 + 32` (f32, `dqk_p` apart) += dS · K of keys `j0..j0 + 32`.
#[inline(always)]
fn query_gradient<U: TileUnit>(
    ctx: &Ctx<'_>,
    tiles: &mut U,
    i0: usize,
    j0: usize,
    ds_rows: &[u16],
    dq: &mut [f32],
) {
    let dqk_p = ctx.s.dqk_p;
    let k_pairs = ctx.s.k_pairs.block(ctx.b, ctx.g);
    tiles.load_a(A::T4, ds_rows, 0, BLOCK);
    tiles.load_a(A::T7, ds_rows, 16 * BLOCK, BLOCK);
    let first = j0 / BLOCK * dqk_p / 16;
    let top = i0 * dqk_p;
    for c0 in (0..dqk_p).step_by(32) {
        tiles.load_block(dq, top + c0, dqk_p);
        tiles.load_b(B::T5, k_pairs, (first + c0 / 16) * 256, 16);
        tiles.load_b(B::T6, k_pairs, (first + c0 / 16 + 1) * 256, 16);
        tiles.dot_pair([C::T0, C::T1], A::T4);
        tiles.dot_pair([C::T2, C::T3], A::T7);
        tiles.store_block(dq, top + c0, dqk_p);
    }
}

/// dVᵀ += dOᵀ·P and dKᵀ += Qᵀ·dS over the query blocks `blocks` of head `h`, each 32
/// head-dim rows × 32 keys held in four C tiles while the blocks are walked.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn key_gradients<U: TileUnit>(
    ctx: &Ctx<'_>,
    tiles: &mut U,
    h: usize,
    blocks: &[usize],
    p_pairs: &[u32],
    ds_pairs: &[u32],
    dv_t: &mut [f32],
    dk_t: &mut [f32],
) {
    if blocks.is_empty() {
        return;
    }
    let s = ctx.s;
    let products = [
        (s.d_o_t.block(ctx.b, h), p_pairs, s.dv_p, dv_t),
        (s.q_t.block(ctx.b, h), ds_pairs, s.dqk_p, dk_t),
    ];
    for (a_tiles, b_pairs, dim_p, out) in products {
        for d0 in (0..dim_p).step_by(32) {
            tiles.load_block(out, d0 * BLOCK, BLOCK);
            for &qb in blocks {
                let a = (qb * dim_p / 16 + d0 / 16) * 256;
                tiles.load_a(A::T4, a_tiles, a, 16);
                tiles.load_a(A::T7, a_tiles, a + 256, 16);
                tiles.load_b(B::T5, b_pairs, qb * 512, 16);
                tiles.load_b(B::T6, b_pairs, qb * 512 + 256, 16);
                tiles.dot_pair([C::T0, C::T1], A::T4);
                tiles.dot_pair([C::T2, C::T3], A::T7);
            }
            tiles.store_block(out, d0 * BLOCK, BLOCK);
        }
    }
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
