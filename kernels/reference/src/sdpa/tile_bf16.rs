//! The bf16 forward on bf16 tiles (`crate::tiles`): both products on AMX's `tdpbf16ps` or
//! AVX-512 BF16's `vdpbf16ps`, the online softmax in f32.
//!
//! Where the CPU multiplies bf16 natively (`crate::isa::bf16_tiles`), a bf16 forward runs here
//! instead of on the f32 micro-kernels: an AMX tile product does 16 × 16 × 32 multiply-adds per
//! instruction (on the 2-vCPU Xeon dev machine PyTorch's oneDNN path runs bf16 attention about
//! four times faster than the f32 tiles can), a `vdpbf16ps` twice an f32 FMA's. Numerics follow the GPU engines rather than the f32 tiles: Q·Kᵀ
//! multiplies the bf16 inputs exactly and accumulates in f32, the scale is applied to the f32
//! scores, and P is rounded to bf16 before P·V (f32 accumulation again); the row sums use the
//! unrounded P. The spec's bf16 tolerance (1e-2) holds with room to spare.
//!
//! Each work item stages its operands by `super::bf16_stage` into per-thread buffers that stay
//! in cache for all its blocks (no staged copy round-trips through memory): its Q rows as rows
//! of head-dim pairs (rows padded to 32; A tiles of Q·Kᵀ), K as B tiles over the head dim, V as
//! B tiles over key pairs (the head dim padded to 16), each tile 1 KiB of its own.
//!
//! A work item is query rows of one head (whole 128-row spans, see `super::item_rows`), walked
//! 32 rows at a time over steps of up to 512 keys; each product runs as 2 × 2 tiles (two A tiles of rows against two B tiles), so
//! every tile loaded serves two multiplies.

use std::ops::Range;

use half::bf16;

use crate::tiles::{A, B, C, TileUnit};
use ragged_core::MaskBand;

use super::bf16_stage::{self as stage, line_aligned};
use super::problem::Problem;
use super::softmax::exp2_nonpositive;
use super::stage::Staged;
use super::threads;

/// Keys per softmax step, scored 32 at a time (four C tiles with the 32 rows): the output
/// accumulator is rescaled, loaded into tiles and stored back once per step, so longer steps
/// spend less on it, while a causal block's last step computes up to a whole step of masked
/// scores: 512 beat 256 everywhere and 1024 lost on causal rows.
const KEY_STEP: usize = 512;
/// Query rows per work item, before `super::item_rows` joins them, and per pass of `attend`.
const ITEM_ROWS: usize = 128;
/// Query rows per block: two A tiles.
const ROWS: usize = 32;

/// The problem's padded extents.
#[derive(Clone, Copy)]
struct Padded {
    /// Head dim of Q and K, to 32 (one A tile's row).
    dqk: usize,
    /// Head dim of V and O, to 32 (two C tiles' columns).
    dv: usize,
}

/// Runs the bf16 forward into O's rows (in the items' order) and the staged LSE, like
/// `super::compute`.
pub(crate) fn compute<U: TileUnit>(
    problem: &Problem,
    (q, k, v): (&[bf16], &[bf16], &[bf16]),
    scale: f32,
    band: MaskBand,
    rows: Vec<&mut [bf16]>,
    stats: &mut Staged,
) {
    let (dqk, dv) = (problem.dim_qk, problem.dim_v);
    let pad = Padded {
        dqk: dqk.max(1).next_multiple_of(32),
        dv: dv.max(1).next_multiple_of(32),
    };

    let item_rows = super::item_rows(problem, ITEM_ROWS);
    let items = super::work_items(problem, item_rows, rows, stats);

    let group = problem.heads_q / problem.heads_kv;
    let scale_log2 = scale * std::f32::consts::LOG2_E;
    threads::for_each_init(items, ItemScratch::default, |scratch, mut item| {
        let (b, h) = (item.batch, item.head);
        let (g, len_q, len_kv) = (h / group, problem.len_q[b], problem.len_kv[b]);
        let rows = item.first_row..item.first_row + item.lse.len();
        // The item's operands, staged into per-thread buffers that stay in cache for all its
        // blocks: its Q rows (padded to a block), and K and V of every key (padded to 32).
        let keys_p = len_kv.next_multiple_of(32);
        let q_pairs = pad.dqk / 2;
        let q_stage = line_aligned(&mut scratch.q, rows.len().next_multiple_of(ROWS) * q_pairs);
        stage::fill_rows_of_pairs(q, &problem.q, (b, h), rows.clone(), q_pairs, q_stage);
        let k_stage = line_aligned(&mut scratch.k, keys_p * q_pairs);
        stage::fill_dim_pair_tiles(k, &problem.k, (b, g), len_kv, q_pairs, k_stage);
        let v_stage = line_aligned(&mut scratch.v, keys_p / 2 * pad.dv);
        stage::fill_row_pair_blocks(v, &problem.v, (b, g), len_kv, pad.dv, false, v_stage);
        let sink = problem.sinks.as_ref().map(|sinks| sinks[h]);
        // ITEM_ROWS rows at a time, so that the finished rows are written to O from cache.
        let chunks = item
            .out
            .chunks_mut(ITEM_ROWS)
            .zip(item.lse.chunks_mut(ITEM_ROWS));
        for (t, (dst, lse)) in chunks.enumerate() {
            let head = Head {
                q: &q_stage[t * ITEM_ROWS * q_pairs..],
                k: k_stage,
                v: v_stage,
                len_q,
                len_kv,
                pad,
                dv,
                scale_log2,
                band,
            };
            scratch.out.resize(lse.len() * dv, 0.0);
            let first_row = rows.start + t * ITEM_ROWS;
            attend_item::<U>(&head, first_row, &mut scratch.out, lse, &mut scratch.block);
            super::output::finish(&mut scratch.out, lse, dst, dv, sink);
        }
    });
}

/// Per-thread buffers of one work item: its staged operands and one block's working set.
#[derive(Default)]
struct ItemScratch {
    q: Vec<u32>,
    k: Vec<u32>,
    v: Vec<u32>,
    block: Scratch,
    /// Finished rows of ITEM_ROWS queries, f32.
    out: Vec<f32>,
}

/// One work item's staged operands and constants.
struct Head<'a> {
    /// The query rows, from the first `attend_item` is given on.
    q: &'a [u32],
    k: &'a [u32],
    v: &'a [u32],
    len_q: usize,
    len_kv: usize,
    pad: Padded,
    dv: usize,
    scale_log2: f32,
    band: MaskBand,
}

/// Per-thread buffers of one block of rows.
#[derive(Default)]
struct Scratch {
    /// Scores of one step, ROWS × KEY_STEP f32.
    s: Vec<f32>,
    /// P of one step in bf16, ROWS × KEY_STEP.
    p: Vec<u16>,
    /// Output accumulator, ROWS × padded dv.
    o: Vec<f32>,
    admitted: Vec<Range<usize>>,
}

/// The operands of one block's scores: 32 query rows (two A tiles) against 32 keys (two B
/// tiles), four C tiles, so that each tile loaded serves two products.
struct Scores<'a> {
    q: &'a [u32],
    k: &'a [u32],
    /// The block's first Q pair.
    q_first: usize,
    dqk_p: usize,
}

impl Scores<'_> {
    /// Scores of keys `key0..key0 + 32` (`key0` a multiple of 32) into columns `col..col + 32`
    /// of `s` (rows KEY_STEP apart).
    #[inline(always)]
    fn product<U: TileUnit>(&self, tiles: &mut U, key0: usize, s: &mut [f32], col: usize) {
        tiles.zero_block();
        let pairs = self.dqk_p / 2;
        let (k_top, k_bottom) = (key0 / 16 * pairs * 16, (key0 / 16 + 1) * pairs * 16);
        for step in 0..self.dqk_p / 32 {
            tiles.load_a(A::T4, self.q, self.q_first + 16 * step, pairs);
            tiles.load_b(B::T5, self.k, k_top + 256 * step, 16);
            tiles.load_b(B::T6, self.k, k_bottom + 256 * step, 16);
            tiles.dot_pair([C::T0, C::T1], A::T4);
            tiles.load_a(A::T7, self.q, self.q_first + 16 * pairs + 16 * step, pairs);
            tiles.dot_pair([C::T2, C::T3], A::T7);
        }
        tiles.store_block(s, col, KEY_STEP);
    }
}

/// The operands of O += P·V for one block's 32 rows and `width` keys, 32 output columns at a
/// time (four C tiles).
struct Values<'a> {
    p: &'a [u16],
    v: &'a [u32],
    width: usize,
    /// The step's first pair block.
    pair_block: usize,
    dv_p: usize,
}

impl Values<'_> {
    /// Columns `col..col + 32` of the accumulator `o` (rows `dv_p` apart).
    #[inline(always)]
    fn product<U: TileUnit>(&self, tiles: &mut U, o: &mut [f32], col: usize) {
        let dv_p = self.dv_p;
        tiles.load_block(o, col, dv_p);
        for step in 0..self.width / 32 {
            let v = ((self.pair_block + step) * dv_p / 16 + col / 16) * 256;
            tiles.load_a(A::T4, self.p, 32 * step, KEY_STEP);
            tiles.load_b(B::T5, self.v, v, 16);
            tiles.load_b(B::T6, self.v, v + 256, 16);
            tiles.dot_pair([C::T0, C::T1], A::T4);
            tiles.load_a(A::T7, self.p, 16 * KEY_STEP + 32 * step, KEY_STEP);
            tiles.dot_pair([C::T2, C::T3], A::T7);
        }
        tiles.store_block(o, col, dv_p);
    }
}

/// Query rows `first_row..first_row + lse.len()` of one head.
fn attend_item<U: TileUnit>(
    head: &Head<'_>,
    first_row: usize,
    out: &mut [f32],
    lse: &mut [f32],
    scratch: &mut Scratch,
) {
    // SAFETY: `crate::isa::bf16_tiles()` (checked by the caller) names a unit only where
    // `isa()` reported AVX-512 BF16 or AMX, which it does only where the CPU also reports
    // AVX-512 F/BW/VL/BF16, AVX2 and FMA.
    unsafe { attend::<U>(head, first_row, out, lse, scratch) }
}

/// One softmax step's constants.
struct Step {
    key0: usize,
    width: usize,
    scale_log2: f32,
}

/// One query row's scores, P and output accumulator in a step.
struct Row<'a> {
    scores: &'a mut [[f32; 16]],
    p: &'a mut [[u16; 16]],
    o: &'a mut [f32],
}

/// Moves one row's running maximum and sum over the step's scores, writes P rounded to bf16 and
/// rescales the row's output accumulator when the maximum moved.
///
/// Two passes over the raw scores and none written back: the first takes the maximum of the
/// admitted ones (for a positive scale, the maximum of the scaled scores is the scaled
/// maximum), the second forms `2^(s·scale − max)` with one fused multiply-add per 16 keys, sums
/// it in four independent chains and stores P. A scale that is not positive takes the same
/// arithmetic on scores it scales first.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
fn softmax_row(step: &Step, row: Row<'_>, admitted: &Range<usize>, max: &mut f32, sum: &mut f32) {
    use std::arch::x86_64::*;

    use crate::avx512;

    // Admitted keys as lanes of the step: [lo, hi) within 0..width.
    let clip = |key: usize| key.saturating_sub(step.key0).min(step.width) as i32;
    let (lo, hi) = if admitted.is_empty() {
        (0, 0)
    } else {
        (clip(admitted.start), clip(admitted.end))
    };
    let everywhere = lo == 0 && hi == step.width as i32;
    let minus_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let scale_log2 = if step.scale_log2 > 0.0 {
        step.scale_log2
    } else {
        let scale = _mm512_set1_ps(step.scale_log2);
        for chunk in row.scores.iter_mut() {
            avx512::store(_mm512_mul_ps(avx512::load(chunk), scale), chunk);
        }
        1.0
    };
    let admit = |c: usize, x: __m512| {
        if everywhere {
            x
        } else {
            _mm512_mask_blend_ps(avx512::lanes_between(16 * c as i32, lo, hi), minus_inf, x)
        }
    };
    let mut maxima = minus_inf;
    for (c, chunk) in row.scores.iter().enumerate() {
        // `max_ps` returns its second operand when either is NaN: a NaN score leaves the
        // maximum alone and reaches the sum through its exponential.
        maxima = _mm512_max_ps(admit(c, avx512::load(chunk)), maxima);
    }
    let new_max = _mm512_reduce_max_ps(maxima) * scale_log2;
    let new_max = if new_max > *max { new_max } else { *max };
    // A row with nothing admitted yet shifts by 0, so its −∞ scores become zeros.
    let shift = if new_max == f32::NEG_INFINITY {
        0.0
    } else {
        new_max
    };
    let correction = exp2_nonpositive(*max - shift);
    *max = new_max;
    let scale = _mm512_set1_ps(scale_log2);
    let minus_shift = _mm512_set1_ps(-shift);
    let mut totals = [_mm512_setzero_ps(); 4];
    for (c, (chunk, p)) in row.scores.iter().zip(row.p).enumerate() {
        let x = _mm512_fmadd_ps(avx512::load(chunk), scale, minus_shift);
        let e = avx512::exp2_nonpositive(admit(c, x));
        totals[c % 4] = _mm512_add_ps(totals[c % 4], e);
        avx512::store_u16(avx512::to_bf16_bits(e), p);
    }
    let total = _mm512_add_ps(
        _mm512_add_ps(totals[0], totals[1]),
        _mm512_add_ps(totals[2], totals[3]),
    );
    *sum = *sum * correction + _mm512_reduce_add_ps(total);
    if correction != 1.0 {
        for x in row.o.iter_mut() {
            *x *= correction;
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
fn attend<U: TileUnit>(
    head: &Head<'_>,
    first_row: usize,
    out: &mut [f32],
    lse: &mut [f32],
    scratch: &mut Scratch,
) {
    let mut tiles = U::configure();
    let (dv, dv_p, dqk_p) = (head.dv, head.pad.dv, head.pad.dqk);
    let Scratch {
        s: s_buffer,
        p: p_buffer,
        o: o_buffer,
        admitted,
    } = scratch;
    let s = line_aligned(s_buffer, ROWS * KEY_STEP);
    let p = line_aligned(p_buffer, ROWS * KEY_STEP);
    let o = line_aligned(o_buffer, ROWS * dv_p);
    let rows = lse.len();
    for block0 in (0..rows).step_by(ROWS) {
        let block_rows = ROWS.min(rows - block0);
        let row0 = first_row + block0;
        admitted.clear();
        admitted.extend((0..ROWS).map(|r| {
            if r < block_rows {
                head.band.admitted(row0 + r, head.len_q, head.len_kv)
            } else {
                0..0
            }
        }));
        let nonempty = || admitted.iter().filter(|r| !r.is_empty());
        let key_lo = nonempty().map(|r| r.start).min().unwrap_or(0);
        let key_hi = nonempty().map(|r| r.end).max().unwrap_or(0);
        let mut max = [f32::NEG_INFINITY; ROWS];
        let mut sum = [0.0f32; ROWS];
        o.fill(0.0);

        let mut key0 = key_lo - key_lo % 32;
        while key0 < key_hi {
            // Whole pairs of C tiles, inside the keys staged (padded to 32).
            let width = (key_hi - key0).min(KEY_STEP).next_multiple_of(32);

            // S = Q·Kᵀ over the padded head dim, 32 entries per product, 32 keys at a time.
            let operands = Scores {
                q: head.q,
                k: head.k,
                q_first: block0 * dqk_p / 2,
                dqk_p,
            };
            for k0 in (0..width).step_by(32) {
                operands.product(&mut tiles, key0 + k0, s, k0);
            }

            // Online softmax over the step's scores; P in bf16 for the tiles.
            let step = Step {
                key0,
                width,
                scale_log2: head.scale_log2,
            };
            for r in 0..ROWS {
                let row = Row {
                    scores: s[r * KEY_STEP..][..width].as_chunks_mut::<16>().0,
                    p: p[r * KEY_STEP..][..width].as_chunks_mut::<16>().0,
                    o: &mut o[r * dv_p..(r + 1) * dv_p],
                };
                softmax_row(&step, row, &admitted[r], &mut max[r], &mut sum[r]);
            }

            // O += P·V, 32 output columns per pass.
            let operands = Values {
                p,
                v: head.v,
                width,
                pair_block: key0 / 32,
                dv_p,
            };
            for d0 in (0..dv_p).step_by(32) {
                operands.product(&mut tiles, o, d0);
            }
            key0 += width;
        }

        for r in 0..block_rows {
            let row = &mut out[(block0 + r) * dv..(block0 + r + 1) * dv];
            let acc = &o[r * dv_p..r * dv_p + dv];
            let l = &mut lse[block0 + r];
            if sum[r] > 0.0 {
                let inv = 1.0 / sum[r];
                for (x, &y) in row.iter_mut().zip(acc) {
                    *x = y * inv;
                }
                *l = max[r] * std::f32::consts::LN_2 + sum[r].ln();
            } else if sum[r].is_nan() {
                row.fill(f32::NAN);
                *l = f32::NAN;
            } else {
                row.fill(0.0);
                *l = f32::NEG_INFINITY;
            }
        }
    }
    drop(tiles);
}
