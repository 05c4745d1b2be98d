//! bf16 operands staged for the bf16 tiles (`crate::tiles`), per (batch, head), in the three arrangements the tile
//! products read. Every element is a `u32` holding two bf16 values (the low half the first):
//!
//! - [`rows_of_pairs`]: rows of the head dim in pairs, `row·(dim/2) + r` — A tiles whose 32
//!   columns are head-dim entries (Q in Q·Kᵀ; dO in dO·Vᵀ);
//! - [`dim_pair_tiles`]: B tiles of 16 head-dim pairs × 16 rows, 1 KiB each, in order of
//!   (16-row block, pair block) — the operand of a product over the head dim whose columns are
//!   rows (K in Q·Kᵀ, V in dO·Vᵀ);
//! - [`row_pair_tiles`]: B tiles of 16 row pairs × 16 head-dim columns, in order of (32-row
//!   block, column block) — the operand of a product over rows (V in P·V; dO, Q and K in the
//!   backward's Pᵀ·dO, dSᵀ·Q and dS·K).
//!
//! - [`transposed_row_pair_tiles`]: the tiles of `row_pair_tiles` transposed, head-dim rows ×
//!   16 row pairs — A tiles of a product over rows whose output rows are head-dim entries (dO
//!   and Q in the backward's dVᵀ = dOᵀ·P and dKᵀ = Qᵀ·dS).
//!
//! Rows past a sequence's length and head-dim entries past D are zeros, so padded products add
//! nothing; blocks hold whole 64-byte tile rows and the first starts on a cache line, so no tile
//! row straddles two lines (a straddling row costs a tile load a second line).

use half::bf16;

use ragged_core::error::{KernelError, Role};

use super::layout::{AHEAD, AttnLayout, prefetch_row};
use super::pool::{Pool, block_starts};
use super::threads;

/// Bytes per cache line and per tile row.
pub(crate) const LINE: usize = 64;

/// The pair buffers kept between calls: a forward stages three, a backward seven.
static BUFFERS: Pool<u32> = Pool::new(8);

/// Frees the staging buffers kept between calls (`super::release_caches`).
pub(crate) fn release_caches() {
    BUFFERS.release();
}

/// `len` elements of `buffer` starting on a cache line (the buffer grows by a line's slack).
pub(crate) fn line_aligned<T: Copy + Default>(buffer: &mut Vec<T>, len: usize) -> &mut [T] {
    let slack = LINE / std::mem::size_of::<T>();
    buffer.resize(len + slack, T::default());
    let start = buffer.as_ptr().align_offset(LINE).min(slack);
    &mut buffer[start..start + len]
}

/// One operand staged per (batch, head), blocks back to back, batch `b`'s of `rows[b] × width`
/// pairs.
pub(crate) struct Blocks {
    data: Vec<u32>,
    /// Where block 0 starts in `data` (the first cache-line boundary).
    base: usize,
    starts: Vec<usize>,
    heads: usize,
    width: usize,
    rows: Vec<usize>,
}

impl Blocks {
    /// Blocks for every (b, h), filled in parallel by `fill(b, h, block)`, which writes every
    /// element.
    fn gather(
        role: Role,
        heads: usize,
        width: usize,
        rows: Vec<usize>,
        fill: impl Fn(usize, usize, &mut [u32]) + Sync,
    ) -> Result<Self, KernelError> {
        let too_large = |elements: String| KernelError::StagingTooLarge { role, elements };
        let (starts, total) = block_starts(heads, width, &rows)
            .ok_or_else(|| too_large("more than 2^64".to_owned()))?;
        let slack = LINE / 4;
        let padded = total
            .checked_add(slack)
            .ok_or_else(|| too_large("more than 2^64".to_owned()))?;
        let mut data = BUFFERS.buffer(padded, || too_large(total.to_string()))?;
        let base = data.as_ptr().align_offset(LINE).min(slack);
        let mut jobs = Vec::with_capacity(starts.len());
        let mut rest = &mut data[base..base + total];
        for (b, &len) in rows.iter().enumerate() {
            for h in 0..heads {
                let (block, tail) = std::mem::take(&mut rest).split_at_mut(len * width);
                rest = tail;
                jobs.push((b, h, block));
            }
        }
        threads::for_each_init(jobs, || (), |_, (b, h, block)| fill(b, h, block));
        Ok(Blocks {
            data,
            base,
            starts,
            heads,
            width,
            rows,
        })
    }

    /// The block of (b, h).
    pub(crate) fn block(&self, b: usize, h: usize) -> &[u32] {
        let start = self.base + self.starts[b * self.heads + h];
        &self.data[start..start + self.rows[b] * self.width]
    }
}

impl Drop for Blocks {
    fn drop(&mut self) {
        BUFFERS.give(std::mem::take(&mut self.data));
    }
}

/// A tiles over rows: tile (32-row block `i`, head-dim block `c`) at `(i·width_p/16 + c)·256`,
/// element (head-dim entry d, row pair r) at `+ (d mod 16)·16 + r`, holding rows 2r and 2r + 1
/// at entry d; rows padded to 32, `width_p` a multiple of 16.
pub(crate) fn transposed_row_pair_tiles(
    role: Role,
    src: &[bf16],
    layout: &AttnLayout,
    lens: &[usize],
    width_p: usize,
) -> Result<Blocks, KernelError> {
    row_pair_blocks(role, src, layout, lens, width_p, true)
}

/// Rows of every (b, h) as head-dim pairs, `rows_to` (16 or 32) dividing each batch's padded
/// row count and `dim_p` (a multiple of 32) the padded head dim.
pub(crate) fn rows_of_pairs(
    role: Role,
    src: &[bf16],
    layout: &AttnLayout,
    lens: &[usize],
    rows_to: usize,
    dim_p: usize,
) -> Result<Blocks, KernelError> {
    let pairs = dim_p / 2;
    let rows = lens.iter().map(|l| l.next_multiple_of(rows_to)).collect();
    Blocks::gather(role, layout.heads, pairs, rows, |b, h, block| {
        fill_rows_of_pairs(src, layout, (b, h), 0..lens[b], pairs, block);
    })
}

/// Rows `rows` of (b, h) as `pairs` head-dim pairs each into `block`, one block row per source
/// row from `rows.start` on; the block rows past `rows.end` are zeros.
pub(crate) fn fill_rows_of_pairs(
    src: &[bf16],
    layout: &AttnLayout,
    (b, h): (usize, usize),
    rows: std::ops::Range<usize>,
    pairs: usize,
    block: &mut [u32],
) {
    for (s, row) in (rows.start..).zip(block.chunks_exact_mut(pairs)) {
        if s < rows.end {
            if s + AHEAD < rows.end {
                prefetch_row(src, layout, (b, s + AHEAD, h));
            }
            row_pairs(src, layout, b, s, h, row);
        } else {
            row.fill(0);
        }
    }
}

/// B tiles over the head dim: tile (row block `i`, pair block `p`) at
/// `(i·dim_p/2 + 16·p)·16`, element (pair r, row n) at `+ r·16 + n`; rows padded to 32.
pub(crate) fn dim_pair_tiles(
    role: Role,
    src: &[bf16],
    layout: &AttnLayout,
    lens: &[usize],
    dim_p: usize,
) -> Result<Blocks, KernelError> {
    let pairs = dim_p / 2;
    let rows = lens.iter().map(|l| l.next_multiple_of(32)).collect();
    Blocks::gather(role, layout.heads, pairs, rows, |b, h, block| {
        fill_dim_pair_tiles(src, layout, (b, h), lens[b], pairs, block);
    })
}

/// The tiles of [`dim_pair_tiles`] of (b, h), `len` rows of `pairs` head-dim pairs, into
/// `block` (the rows padded to 32).
pub(crate) fn fill_dim_pair_tiles(
    src: &[bf16],
    layout: &AttnLayout,
    (b, h): (usize, usize),
    len: usize,
    pairs: usize,
    block: &mut [u32],
) {
    let mut tile = vec![0u32; 16 * pairs];
    for (kb, out) in block.chunks_exact_mut(16 * pairs).enumerate() {
        for (i, row) in tile.chunks_exact_mut(pairs).enumerate() {
            let s = 16 * kb + i;
            if s < len {
                if s + AHEAD < len {
                    prefetch_row(src, layout, (b, s + AHEAD, h));
                }
                row_pairs(src, layout, b, s, h, row);
            } else {
                row.fill(0);
            }
        }
        for (r, out_row) in out.chunks_exact_mut(16).enumerate() {
            for (i, x) in out_row.iter_mut().enumerate() {
                *x = tile[i * pairs + r];
            }
        }
    }
}

/// B tiles over rows: element (row pair r, column d) holds rows 2r and 2r + 1 at head-dim
/// entry d; tile (32-row block `i`, column block `c`) at `(i·width_p/16 + c)·256`, element
/// (r, d) at `+ (r mod 16)·16 + d mod 16`; rows padded to 32, `width_p` a multiple of 16.
pub(crate) fn row_pair_tiles(
    role: Role,
    src: &[bf16],
    layout: &AttnLayout,
    lens: &[usize],
    width_p: usize,
) -> Result<Blocks, KernelError> {
    row_pair_blocks(role, src, layout, lens, width_p, false)
}

/// The tiles of [`row_pair_tiles`], or with `transposed` those of [`transposed_row_pair_tiles`]:
/// 16 row pairs are interleaved once per block, then cut into 16 × 16 tiles as they stand or
/// transposed.
fn row_pair_blocks(
    role: Role,
    src: &[bf16],
    layout: &AttnLayout,
    lens: &[usize],
    width_p: usize,
    transposed: bool,
) -> Result<Blocks, KernelError> {
    let rows = lens.iter().map(|l| l.next_multiple_of(32) / 2).collect();
    Blocks::gather(role, layout.heads, width_p, rows, |b, h, block| {
        fill_row_pair_blocks(src, layout, (b, h), lens[b], width_p, transposed, block);
    })
}

/// The tiles of [`row_pair_tiles`] (or, `transposed`, of [`transposed_row_pair_tiles`]) of
/// (b, h), `len` rows of `width_p` columns, into `block` (the rows padded to 32).
pub(crate) fn fill_row_pair_blocks(
    src: &[bf16],
    layout: &AttnLayout,
    (b, h): (usize, usize),
    len: usize,
    width_p: usize,
    transposed: bool,
    block: &mut [u32],
) {
    let mut rows = vec![0u32; 16 * width_p];
    for (rb, out) in block.chunks_exact_mut(16 * width_p).enumerate() {
        for (i, row) in rows.chunks_exact_mut(width_p).enumerate() {
            let pair = 16 * rb + i;
            for s in [2 * (pair + AHEAD / 2), 2 * (pair + AHEAD / 2) + 1] {
                if s < len {
                    prefetch_row(src, layout, (b, s, h));
                }
            }
            key_pair(src, layout, b, pair, h, len, row);
        }
        for (db, tile) in out.chunks_exact_mut(256).enumerate() {
            for (i, tile_row) in tile.chunks_exact_mut(16).enumerate() {
                if transposed {
                    for (r, x) in tile_row.iter_mut().enumerate() {
                        *x = rows[r * width_p + 16 * db + i];
                    }
                } else {
                    tile_row.copy_from_slice(&rows[i * width_p + 16 * db..][..16]);
                }
            }
        }
    }
}

/// Row `s` of (b, h) as bf16 pairs into `dst` (`dst.len()` pairs; entries past the head dim 0).
#[inline(always)]
fn row_pairs(src: &[bf16], layout: &AttnLayout, b: usize, s: usize, h: usize, dst: &mut [u32]) {
    let (start, step, dim) = (
        layout.position(b, s, h, 0),
        layout.stride_d,
        layout.head_dim,
    );
    let pair = |lo: bf16, hi: bf16| lo.to_bits() as u32 | (hi.to_bits() as u32) << 16;
    if step == 1 {
        let (pairs, rest) = src[start..start + dim].as_chunks::<2>();
        for (x, p) in dst.iter_mut().zip(pairs) {
            *x = pair(p[0], p[1]);
        }
        let tail = &mut dst[pairs.len()..];
        if let ([last], [x, ..]) = (rest, &mut *tail) {
            *x = pair(*last, bf16::ZERO);
        }
        tail[rest.len()..].fill(0);
    } else {
        let at = |d: usize| {
            if d < dim {
                src[start + d * step]
            } else {
                bf16::ZERO
            }
        };
        for (r, x) in dst.iter_mut().enumerate() {
            *x = pair(at(2 * r), at(2 * r + 1));
        }
    }
}

/// Rows `2r` and `2r + 1` of (b, h) interleaved into `dst` (element d holds both keys' entry d;
/// a row at or past `len`, and entries past the head dim, read as 0).
#[inline(always)]
fn key_pair(
    src: &[bf16],
    layout: &AttnLayout,
    b: usize,
    r: usize,
    h: usize,
    len: usize,
    dst: &mut [u32],
) {
    let (step, dim) = (layout.stride_d, layout.head_dim);
    let row = |j: usize| (j < len).then(|| layout.position(b, j, h, 0));
    match (row(2 * r), row(2 * r + 1)) {
        (Some(lo), Some(hi)) if step == 1 => {
            let (lo, hi) = (&src[lo..lo + dim], &src[hi..hi + dim]);
            for ((x, a), c) in dst.iter_mut().zip(lo).zip(hi) {
                *x = a.to_bits() as u32 | (c.to_bits() as u32) << 16;
            }
            dst[dim..].fill(0);
        }
        (lo, hi) => {
            let at = |start: Option<usize>, d: usize| match start {
                Some(start) if d < dim => src[start + d * step].to_bits() as u32,
                _ => 0,
            };
            for (d, x) in dst.iter_mut().enumerate() {
                *x = at(lo, d) | at(hi, d) << 16;
            }
        }
    }
}
