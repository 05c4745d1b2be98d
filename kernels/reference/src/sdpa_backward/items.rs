//! Work items of the backward: (batch, KV head, key chunk), each owning its dK and dV rows and
//! a dQ target for its group's query rows.
//!
//! dQ is shared by the key chunks of one (batch, KV head): the first chunk accumulates into the
//! real dQ rows, every further chunk into a private buffer added in afterwards, so no output is
//! ever written by two threads. Chunks beyond one per (batch, KV head) exist only when there
//! are too few of those to keep every thread busy. The f32 tiles (`passes`) and the AMX tiles
//! (`amx`) share this split.

use std::ops::Range;

use ragged_core::dtype::FloatElement;
use ragged_core::error::{KernelError, Role};

use super::passes::Gradients;
use super::problem::Problem;

/// One unit of parallel work.
pub(super) struct Item<'a> {
    pub batch: usize,
    pub kv_head: usize,
    pub keys: Range<usize>,
    /// dK rows `keys` of the KV head, row-major.
    pub dk: &'a mut [f32],
    /// dV rows `keys`.
    pub dv: &'a mut [f32],
    /// dQ of every query head of the group (`group × len_q × D_qk`), real or a partial.
    pub dq: &'a mut [f32],
}

/// One item that writes its gradients into the caller's tensors itself, each row converted
/// once; used when every (batch, KV head) is one item, so that no row is shared.
pub(super) struct RowsItem<'a, T> {
    pub batch: usize,
    pub kv_head: usize,
    /// dK rows `0..Lkv(b)` of the KV head.
    pub dk: Vec<&'a mut [T]>,
    /// dV rows likewise.
    pub dv: Vec<&'a mut [T]>,
    /// dQ rows `0..Lq(b)` of every query head of the group, head by head.
    pub dq: Vec<&'a mut [T]>,
}

/// How many key chunks each (batch, KV head) of a batch with `len_kv` keys is split into:
/// one, unless there are fewer (batch, KV head) pairs with work than four per thread.
fn chunk_counts(p: &Problem, key_tile: usize) -> impl Fn(usize) -> usize {
    let f = &p.fwd;
    let pairs = (0..f.batch)
        .filter(|&b| f.len_q[b] > 0 && f.len_kv[b] > 0)
        .count()
        * f.heads_kv;
    let wanted = 4 * crate::parallel::current_threads();
    move |len_kv: usize| {
        let tiles = len_kv.div_ceil(key_tile);
        if pairs >= wanted {
            1
        } else {
            wanted.div_ceil(pairs.max(1)).min(tiles).max(1)
        }
    }
}

/// Whether [`for_each_item`] would make one item per (batch, KV head).
pub(super) fn one_item_each(p: &Problem, key_tile: usize) -> bool {
    let chunks_of = chunk_counts(p, key_tile);
    p.fwd.len_kv.iter().all(|&len_kv| chunks_of(len_kv) == 1)
}

/// The caller's gradient rows, carved in (batch, head, row) order, as one item per (batch, KV
/// head), largest first; the rows of batches without items are zeroed here (dQ of a batch
/// without keys, dK and dV of one without queries).
pub(super) fn row_items<'a, T: FloatElement>(
    p: &Problem,
    dq: Vec<&'a mut [T]>,
    dk: Vec<&'a mut [T]>,
    dv: Vec<&'a mut [T]>,
) -> Vec<RowsItem<'a, T>> {
    let f = &p.fwd;
    let group = f.heads_q / f.heads_kv;
    let (mut dq, mut dk, mut dv) = (dq.into_iter(), dk.into_iter(), dv.into_iter());
    let mut items = Vec::new();
    for b in 0..f.batch {
        let (len_q, len_kv) = (f.len_q[b], f.len_kv[b]);
        let mut dq_b = dq
            .by_ref()
            .take(f.heads_q * len_q)
            .collect::<Vec<_>>()
            .into_iter();
        let mut dk_b = dk
            .by_ref()
            .take(f.heads_kv * len_kv)
            .collect::<Vec<_>>()
            .into_iter();
        let mut dv_b = dv
            .by_ref()
            .take(f.heads_kv * len_kv)
            .collect::<Vec<_>>()
            .into_iter();
        if len_q == 0 || len_kv == 0 {
            for row in dq_b.chain(dk_b).chain(dv_b) {
                row.fill(T::from_f32(0.0));
            }
            continue;
        }
        for g in 0..f.heads_kv {
            items.push(RowsItem {
                batch: b,
                kv_head: g,
                dk: dk_b.by_ref().take(len_kv).collect(),
                dv: dv_b.by_ref().take(len_kv).collect(),
                dq: dq_b.by_ref().take(group * len_q).collect(),
            });
        }
    }
    items.sort_by_key(|item| std::cmp::Reverse(f.len_q[item.batch] * f.len_kv[item.batch]));
    items
}

/// Splits `range` into tiles of at most `tile`.
pub(super) fn tiles(range: Range<usize>, tile: usize) -> impl Iterator<Item = Range<usize>> {
    let end = range.end;
    range
        .step_by(tile.max(1))
        .map(move |start| start..(start + tile).min(end))
}

/// A zero-filled buffer for a partial dQ, allocated fallibly (its size follows the graph's dims).
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

/// Splits the work into items, runs `run` on each (largest first, in parallel, each thread
/// with its own `S`) and adds the partial dQ buffers in: every logical row of dQ, dK and dV is
/// written, as long as `run` overwrites its item's rows.
pub(super) fn for_each_item<S: Default>(
    p: &Problem,
    key_tile: usize,
    grads: &mut Gradients,
    run: impl Fn(&mut S, Item<'_>) + Sync,
) -> Result<(), KernelError> {
    let f = &p.fwd;
    let (dqk, dvw) = (f.dim_qk, f.dim_v);
    let group = f.heads_q / f.heads_kv;
    let chunks_of = chunk_counts(p, key_tile);

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
            // No item covers them: dQ of a batch without keys, dK and dV of one without
            // queries are exactly zero.
            for rows in [dq_b, dk_b, dv_b] {
                rows.fill(0.0);
            }
            continue;
        }
        let n = chunks_of(len_kv);
        let key_tiles = len_kv.div_ceil(key_tile);
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
                let first = (c * key_tiles / n) * key_tile;
                let last = (((c + 1) * key_tiles / n) * key_tile).min(len_kv);
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
    crate::parallel::for_each_init(items, S::default, run);

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
