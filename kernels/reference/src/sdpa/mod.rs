//! CPU reference SDPA forward over dense and ragged tensors (ragged-sdpa.md §1–§5).
//!
//! Flow: `problem::validate` checks every operand, `crate::parallel` runs work items of query
//! rows of one head, each staging the keys it reads (`tile::KeyBlock`) and running
//! `tile::attend_tile` per query tile and writing the finished rows straight into O
//! (`output`); the LSE is staged and written last. Everything fallible runs before the first
//! write, so an error leaves O and LSE untouched.

// layout, problem, softmax and stage are shared with the backward (`crate::sdpa_backward`).
pub(crate) mod bf16_stage;
pub(crate) mod layout;
pub(crate) mod output;
mod pool;

pub mod paged;
pub(crate) mod problem;
pub(crate) mod softmax;
pub(crate) mod stage;
mod threads;
mod tile;
mod tile_bf16;

pub use paged::{ForwardExtras, PagedInputs};
pub use ragged_core::mask::{DiagonalAlignment, MaskBand};
pub use ragged_core::params::SdpaParams;
pub use threads::on_calling_thread;

use half::{bf16, f16};

use crate::amx::AmxTiles;
use crate::bf16_dot::DotTiles;
use crate::isa::Bf16Tiles;

use ragged_core::dtype::{DataType, FloatElement};
use ragged_core::error::{KernelError, Role};
use ragged_core::tensor::{Tensor, TensorMut, typed_slice, typed_slice_mut};

use problem::{Operands, Problem};
use stage::Staged;
use tile::{KeyBlock, Scratch, TileConfig, attend_tile, load_queries};

/// Query rows per work item, before the cache cap below. 128-row items still leave hundreds of
/// items for the worker threads on real batches.
const QUERY_TILE: usize = 128;
/// Keys per online-softmax step, before the cache cap. Measured with one thread on this
/// project's 2-core AVX2 machine (CPU time per call): 128 × 128, 128 × 256, 64 × 256 and
/// 256 × 128 within 4 % of each other at D = 64 and D = 128.
const KEY_TILE: usize = 128;
/// Keys per step where the mask admits every key: fewer steps spread each step's softmax pass
/// and rescale of the accumulator over more products (Xeon model 207, one thread: f32 forward
/// +1–2 % at 192, 256 and 384 keys, AVX-512 and AVX2 builds alike), while on masked rows the
/// larger steps put more work on the masked part of the diagonal tiles (−1 %).
const UNMASKED_KEY_TILE: usize = 256;
/// Bytes one step's operands may take: the per-core L2 of this project's machine (512 KiB).
const L2_BYTES: usize = 512 << 10;

/// Whether `band` admits every key of every row (both bounds unbounded), so that no tile is
/// masked.
pub(crate) fn admits_every_key(band: &MaskBand) -> bool {
    let unbounded = |bound: Option<i64>| bound.is_none_or(|b| b < 0);
    unbounded(band.left) && unbounded(band.right)
}

/// Tile sizes for the given head dims and mask, halved (keys first) until one step's Q, K and V
/// tiles, score tile and accumulator fit in L2. The micro-kernel never threads (see
/// [`crate::gemm`]), so only the cache bounds them.
fn tile_sizes(dim_qk: usize, dim_v: usize, band: &MaskBand) -> (usize, usize) {
    let key_tile = if admits_every_key(band) {
        UNMASKED_KEY_TILE
    } else {
        KEY_TILE
    };
    let (mut tq, mut tk) = (QUERY_TILE, key_tile);
    let bytes =
        |tq: usize, tk: usize| 4 * (tq * dim_qk + dim_qk * tk + tq * tk + tk * dim_v + tq * dim_v);
    while bytes(tq, tk) > L2_BYTES && (tq > 8 || tk > 8) {
        if tk >= tq && tk > 8 {
            tk /= 2;
        } else {
            tq /= 2;
        }
    }
    (tq, tk)
}

/// Frees every staging buffer the forward keeps for the next call. The plugin calls it when its
/// last handle is destroyed, so that unloading the library leaves none of this heap behind.
pub fn release_caches() {
    stage::release_caches();
    bf16_stage::release_caches();
}

/// SDPA forward on the CPU: `O = softmax(scale·Q·Kᵀ + mask)·V`, optionally with the natural-log
/// LSE of each row.
///
/// Q, K, V, O may each be ragged (`[B, S, H, D]`, sequence axis 1) or dense (`[B, H, S, D]`, any
/// strides); LSE is `[B, S, H_q, 1]` ragged or `[B, H_q, S, 1]` dense, f32. Q, K, V and O share
/// one element type (f32, f16 or bf16); accumulation is f32. With `seq_len_q`/`seq_len_kv`, rows
/// at or beyond `seq_lens[b]` are neither read nor written. Rows that admit no key get O = 0 and
/// LSE = −∞.
///
/// Validates everything first: on error nothing has been written.
#[allow(clippy::too_many_arguments)] // the operation's operands, by role
pub fn sdpa_forward(
    q: &dyn Tensor,
    k: &dyn Tensor,
    v: &dyn Tensor,
    o: &mut dyn TensorMut,
    lse: Option<&mut dyn TensorMut>,
    seq_len_q: Option<&dyn Tensor>,
    seq_len_kv: Option<&dyn Tensor>,
    params: &SdpaParams,
) -> Result<(), KernelError> {
    let extras = ForwardExtras::default();
    sdpa_forward_with(q, k, v, o, lse, seq_len_q, seq_len_kv, &extras, params)
}

/// [`sdpa_forward`] with paged K/V and sinks (kernels/core/paged-kv-and-sinks.md).
///
/// Paged: `k` and `v` are pools `[P, H_kv, ps, D]` (any positive strides) read through
/// `extras.paged`'s tables; both lengths are required and give B; Q and O are packed
/// (`[1, H_q, T_q, D]`, sequence b at row `Σ_{c<b} Lq(c)`), padded (`[B, …]`) or ragged. Every
/// length and every table entry a sequence reads is checked before any pool element is read.
/// Sinks: one logit per query head in every row's softmax denominator; the LSE includes it.
#[allow(clippy::too_many_arguments)] // the operation's operands, by role
pub fn sdpa_forward_with(
    q: &dyn Tensor,
    k: &dyn Tensor,
    v: &dyn Tensor,
    o: &mut dyn TensorMut,
    lse: Option<&mut dyn TensorMut>,
    seq_len_q: Option<&dyn Tensor>,
    seq_len_kv: Option<&dyn Tensor>,
    extras: &ForwardExtras<'_>,
    params: &SdpaParams,
) -> Result<(), KernelError> {
    let problem = problem::validate(&Operands {
        q,
        k,
        v,
        o: &*o,
        lse: lse.as_deref().map(|t| t as &dyn Tensor),
        seq_len_q,
        seq_len_kv,
        paged: extras.paged,
        sinks: extras.sinks,
    })?;
    match problem.dtype {
        DataType::F32 => run::<f32>(&problem, q, k, v, o, lse, params),
        DataType::F16 => run::<f16>(&problem, q, k, v, o, lse, params),
        DataType::BF16 => match crate::isa::bf16_tiles() {
            Some(unit) => run_bf16_tiles(unit, &problem, q, k, v, o, lse, params),
            None => run::<bf16>(&problem, q, k, v, o, lse, params),
        },
        other => Err(KernelError::SdpaDataType {
            role: Role::Q,
            dtype: other,
            expected: "f32, f16 or bf16".to_owned(),
        }),
    }
}

/// The typed body: every typed slice is obtained before the first write.
fn run<T: FloatElement>(
    problem: &Problem,
    q: &dyn Tensor,
    k: &dyn Tensor,
    v: &dyn Tensor,
    o: &mut dyn TensorMut,
    lse: Option<&mut dyn TensorMut>,
    params: &SdpaParams,
) -> Result<(), KernelError> {
    let sources = Sources {
        q: typed_slice::<T>(q.host_data())?,
        k: typed_slice::<T>(k.host_data())?,
        v: typed_slice::<T>(v.host_data())?,
    };
    write(problem, o, lse, |rows, stats| {
        compute(problem, &sources, params, rows, stats);
    })
}

/// The bf16 body on bf16 tiles (`tile_bf16`).
#[allow(clippy::too_many_arguments)] // `run`'s operands and the unit
fn run_bf16_tiles(
    unit: crate::isa::Bf16Tiles,
    problem: &Problem,
    q: &dyn Tensor,
    k: &dyn Tensor,
    v: &dyn Tensor,
    o: &mut dyn TensorMut,
    lse: Option<&mut dyn TensorMut>,
    params: &SdpaParams,
) -> Result<(), KernelError> {
    let (q, k, v) = (
        typed_slice::<bf16>(q.host_data())?,
        typed_slice::<bf16>(k.host_data())?,
        typed_slice::<bf16>(v.host_data())?,
    );
    write(problem, o, lse, |rows, stats| {
        let (scale, band) = (params.scale, params.band);
        match unit {
            Bf16Tiles::Amx => {
                tile_bf16::compute::<AmxTiles>(problem, (q, k, v), scale, band, rows, stats)
            }
            Bf16Tiles::Dot => {
                tile_bf16::compute::<DotTiles>(problem, (q, k, v), scale, band, rows, stats)
            }
        }
    })
}

/// Whether the per-thread copies of one head's K and V (every key of the longest batch, as a
/// work item stages them) can be allocated: checked with a fallible reservation before anything
/// is written, so that a problem too large for this host is an error, not an aborted process
/// (zero strides can make a tiny buffer describe 2^40 keys).
fn key_staging_fits(problem: &Problem) -> Result<(), KernelError> {
    let keys = problem.len_kv.iter().copied().max().unwrap_or(0);
    for (role, dim) in [(Role::K, problem.dim_qk), (Role::V, problem.dim_v)] {
        let elements = keys.checked_mul(dim);
        let too_large = || KernelError::StagingTooLarge {
            role,
            elements: elements.map_or("more than 2^64".to_owned(), |n| n.to_string()),
        };
        let n = elements.ok_or_else(too_large)?;
        Vec::<f32>::new()
            .try_reserve_exact(n)
            .map_err(|_| too_large())?;
    }
    Ok(())
}

/// Runs `kernels` on O's rows (in the items' order) and the staged LSE, then writes the LSE:
/// the only writes of a forward, all after every fallible step.
fn write<T: FloatElement>(
    problem: &Problem,
    o: &mut dyn TensorMut,
    lse: Option<&mut dyn TensorMut>,
    kernels: impl FnOnce(Vec<&mut [T]>, &mut Staged),
) -> Result<(), KernelError> {
    let o_data = typed_slice_mut::<T>(o.host_data_mut())?;
    let lse_data = match lse {
        Some(t) => Some(typed_slice_mut::<f32>(t.host_data_mut())?),
        None => None,
    };
    key_staging_fits(problem)?;
    let mut stats = Staged::for_overwrite(Role::Lse, problem.heads_q, 1, &problem.len_q)?;
    let dv = problem.dim_v;
    match output::row_starts(problem) {
        Some(starts) => kernels(output::carve(o_data, &starts, dv), &mut stats),
        None => {
            let mut spill = output::spill::<T>(problem)?;
            let rows = stats.data.len();
            kernels(output::spill_rows(&mut spill, dv, rows), &mut stats);
            output::write_spill(problem, &spill, o_data);
        }
    }
    if let (Some(lse_data), Some(layout)) = (lse_data, &problem.lse) {
        stats.scatter(lse_data, layout);
    }
    Ok(())
}

/// One unit of parallel work: query rows of one head of one batch, O's rows among them.
struct WorkItem<'a, T> {
    batch: usize,
    head: usize,
    first_row: usize,
    out: Vec<&'a mut [T]>,
    lse: &'a mut [f32],
}

/// O's rows and the staged LSE carved into per-item parts, one item per (batch, head, span of
/// up to `item_rows` query rows), the most (rows × keys) first so that the tail of the
/// schedule is made of short items.
fn work_items<'a, T>(
    problem: &Problem,
    item_rows: usize,
    out: Vec<&'a mut [T]>,
    stats: &'a mut Staged,
) -> Vec<WorkItem<'a, T>> {
    let mut items = Vec::new();
    let mut out_rest = out.into_iter();
    let mut lse_rest = &mut stats.data[..];
    for batch in 0..problem.batch {
        let len_q = problem.len_q[batch];
        for head in 0..problem.heads_q {
            for first_row in (0..len_q).step_by(item_rows) {
                let rows = item_rows.min(len_q - first_row);
                let (l_item, l_tail) = std::mem::take(&mut lse_rest).split_at_mut(rows);
                lse_rest = l_tail;
                items.push(WorkItem {
                    batch,
                    head,
                    first_row,
                    out: out_rest.by_ref().take(rows).collect(),
                    lse: l_item,
                });
            }
        }
    }
    items.sort_by_key(|item| std::cmp::Reverse(item.lse.len() * problem.len_kv[item.batch]));
    items
}

/// The forward's inputs as typed slices.
struct Sources<'a, T> {
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
}

/// Work items wanted per thread, so that the longest-first schedule ends evenly.
const ITEMS_PER_THREAD: usize = 8;

/// Query rows per work item: whole query tiles, as many as leave [`ITEMS_PER_THREAD`] items
/// per thread. An item stages the keys it reads once for all its tiles, so fewer, longer items
/// stage less; an item never spans two heads, so at most one item per (batch, head) is the
/// usual case.
fn item_rows(problem: &Problem, query_tile: usize) -> usize {
    let tiles: usize = problem
        .len_q
        .iter()
        .map(|&len| len.div_ceil(query_tile) * problem.heads_q)
        .sum();
    let wanted = ITEMS_PER_THREAD * threads::current_threads();
    query_tile * (tiles / wanted).max(1)
}

/// Keys any of query rows `rows` admits, or an empty range.
fn admitted_keys(
    band: &MaskBand,
    rows: std::ops::Range<usize>,
    len_q: usize,
    len_kv: usize,
) -> std::ops::Range<usize> {
    rows.map(|r| band.admitted(r, len_q, len_kv))
        .filter(|keys| !keys.is_empty())
        .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
        .unwrap_or(0..0)
}

/// Per-thread buffers: the item's staged keys, one tile's working set and its finished rows.
#[derive(Default)]
struct ItemScratch {
    keys: KeyBlock,
    tile: Scratch,
    out: Vec<f32>,
}

/// Runs attention for every work item (query rows of one head) in parallel into O's rows and
/// the staged LSE. Each item stages the keys its rows admit and loads each query tile from the
/// inputs itself, so that no staged copy of Q, K or V round-trips through memory.
fn compute<T: FloatElement>(
    problem: &Problem,
    sources: &Sources<'_, T>,
    params: &SdpaParams,
    rows: Vec<&mut [T]>,
    stats: &mut Staged,
) {
    let (dqk, dv) = (problem.dim_qk, problem.dim_v);
    let (query_tile, key_tile) = tile_sizes(dqk, dv, &params.band);
    let config = TileConfig {
        scale_log2: params.scale * std::f32::consts::LOG2_E,
        band: params.band,
        key_tile,
    };

    let items = work_items(problem, item_rows(problem, query_tile), rows, stats);
    let group = problem.heads_q / problem.heads_kv;
    threads::for_each_init(items, ItemScratch::default, |scratch, mut item| {
        let (b, h) = (item.batch, item.head);
        let (len_q, len_kv) = (problem.len_q[b], problem.len_kv[b]);
        let first = item.first_row;
        let keys = admitted_keys(&params.band, first..first + item.lse.len(), len_q, len_kv);
        scratch.keys.fill(
            (sources.k, &problem.k),
            (sources.v, &problem.v),
            (b, h / group),
            keys,
        );
        let sink = problem.sinks.as_ref().map(|sinks| sinks[h]);
        let tiles = item
            .out
            .chunks_mut(query_tile)
            .zip(item.lse.chunks_mut(query_tile));
        for (t, (dst, lse)) in tiles.enumerate() {
            let r0 = first + t * query_tile;
            load_queries(
                &mut scratch.tile,
                (sources.q, &problem.q),
                (b, h),
                r0..r0 + lse.len(),
                config.scale_log2,
            );
            let input = scratch.keys.input(r0, len_q, len_kv);
            scratch.out.resize(lse.len() * dv, 0.0);
            attend_tile(&input, &config, &mut scratch.out, lse, &mut scratch.tile);
            output::finish(&mut scratch.out, lse, dst, dv, sink);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_fit_in_l2() {
        for (dqk, dv) in [
            (16, 16),
            (64, 64),
            (128, 128),
            (256, 256),
            (128, 512),
            (1024, 64),
        ] {
            let (tq, tk) = tile_sizes(dqk, dv, &MaskBand::none());
            let bytes = 4 * (tq * dqk + dqk * tk + tq * tk + tk * dv + tq * dv);
            assert!(
                bytes <= L2_BYTES || (tq, tk) == (8, 8),
                "{dqk}/{dv}: {tq}x{tk}"
            );
        }
        let causal = MaskBand::causal_top_left();
        assert_eq!(tile_sizes(64, 64, &causal), (QUERY_TILE, KEY_TILE));
        assert_eq!(tile_sizes(128, 128, &causal), (QUERY_TILE, KEY_TILE));
        let none = MaskBand::none();
        assert_eq!(tile_sizes(64, 64, &none), (QUERY_TILE, UNMASKED_KEY_TILE));
        assert_eq!(tile_sizes(128, 128, &none), (QUERY_TILE, UNMASKED_KEY_TILE));
    }
}
