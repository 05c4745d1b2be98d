//! Plan-time checks and launch arguments of the paged kernels.
//!
//! A paged forward problem (kernels/core/paged-kv-and-sinks.md) reaches here instead of the
//! ragged forward's plan: its K and V are page pools and its Q is packed or padded, so the shared
//! GPU contract's ragged rules do not apply. What the kernels implement is checked once, each
//! refusal one [`Decline`] naming uid, field, value and need: HALF or BFLOAT16; the forward's head
//! dims; packed or padded Q and O (ragged Q/O with paged K/V is declined); pools and Q/O with unit
//! head-dim stride and the other strides multiples of 8 elements (upstream's token-major NHD pools
//! and cuDNN's head-major HND pools both are); a dense FLOAT LSE; int32 extents. The KV split is
//! chosen here from the graph alone ([`choose_split`]); nothing reads lengths or tables on the host.

use super::device_abi::{self, PagedKernel};
use super::gather::{self, GatherPlan, PagedShape};
use crate::forward::geometry::WORKSPACE_ALIGNMENT;
use ragged_core::contract::{Decline, GPU_ALIGNMENT, check_declared_alignment};
use ragged_core::problem::{
    IndexInput, Operand, PageTableStrides, PagedKv, QueryForm, RaggedSdpaProblem, SINK_ROLE,
    ScalePlan,
};
use ragged_core::{DataType, DiagonalAlignment};

/// Blocks a prefill's row groups aim at: 132 SMs (H100) times four, so that every SM has work
/// and the last round is short.
pub const ROW_GROUP_TARGET_BLOCKS: i64 = 132 * 4;
/// No split is shorter than this many keys (a block's start-up is paid once per split).
pub const MIN_CHUNK: i64 = 256;
/// No split of a long context is longer than this many keys, so that the blocks of a mixed batch
/// end together.
pub const MAX_CHUNK: i64 = 2048;
/// Contexts up to this many keys are split only to fill [`SPLIT_TARGET_BLOCKS`]: cutting a 4k
/// context into two 2048-key splits when the pairs alone already fill the card costs its combine
/// (64 × 4k decode, H100: 388 against 368 µs on one split).
pub const LONG_CONTEXT: i64 = 8192;
/// Blocks the split grid aims at when every sequence reaches the bound: three per SM of an H100
/// (132 SMs; two are resident at once at D 128), below the 512 (sequence, KV head) pairs of a
/// decode batch of 64 sequences over 8 KV heads, which then runs unsplit up to [`LONG_CONTEXT`].
pub const SPLIT_TARGET_BLOCKS: i64 = 132 * 3;
/// The partial results of all splits stay within this many bytes; a problem whose rows would need
/// more (a long prefill) runs as one split, which writes O directly.
pub const PARTIALS_CAP: u64 = 256 << 20;

/// Elements between sequences, tokens and heads of Q, O or the LSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowStrides {
    /// Between sequences (padded form); 0 for packed Q, whose rows are addressed by the packed
    /// row number.
    pub batch: i64,
    /// Between tokens.
    pub seq: i64,
    /// Between heads.
    pub head: i64,
}

/// A page pool `[P, H_kv, ps, D]` as the kernel addresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolArgs {
    /// Graph uid.
    pub uid: i64,
    /// Elements between pages, heads and slots (the head-dim stride is 1).
    pub page: i64,
    /// See `page`.
    pub head: i64,
    /// See `page`.
    pub slot: i64,
    /// P.
    pub pages: i32,
    /// ps.
    pub page_size: i32,
}

/// Byte offsets inside the (aligned-up) workspace; all zero with one split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedWorkspace {
    /// `PagedSeq[B]`.
    pub records: u64,
    /// `float[splits][ws_rows][H_q]`: each split's base-2 LSE.
    pub lse: u64,
    /// `float[splits][ws_rows][H_q][D_v]`: each split's normalised O.
    pub o: u64,
    /// Bytes to request, including slack for aligning the caller's pointer.
    pub total_bytes: u64,
}

/// Everything an execute needs, derived from the graph once.
#[derive(Debug, Clone, PartialEq)]
pub struct PagedPlan {
    /// The split and combine entry points.
    pub kernel: PagedKernel,
    /// B.
    pub batch: i32,
    /// H_q.
    pub heads_q: i32,
    /// H_kv.
    pub heads_kv: i32,
    /// Q's rows per sequence at most: T_q (packed) or S_q (padded).
    pub q_rows: i32,
    /// Packed Q (rows of all sequences back to back) rather than padded.
    pub packed: bool,
    /// Q's strides.
    pub q: RowStrides,
    /// O's strides.
    pub o: RowStrides,
    /// The LSE output (uid and strides), if requested.
    pub lse: Option<(i64, RowStrides)>,
    /// K's pool.
    pub k: PoolArgs,
    /// V's pool.
    pub v: PoolArgs,
    /// K's page table.
    pub table_k: PageTableStrides,
    /// V's page table.
    pub table_v: PageTableStrides,
    /// `seq_len_q` (uid, element bytes).
    pub seq_len_q: (i64, i32),
    /// `seq_len_kv` (uid, element bytes).
    pub seq_len_kv: (i64, i32),
    /// The bound every Lkv is clamped to.
    pub max_kv: i32,
    /// Sink logits (uid, stride between heads), if any.
    pub sinks: Option<(i64, i64)>,
    /// uids of Q and O for pointer errors.
    pub uids: [i64; 2],
    /// Softmax scale.
    pub scale: f32,
    /// Band: left, right (−1 unbounded), bottom-right alignment flag.
    pub mask_left: i32,
    /// See `mask_left`.
    pub mask_right: i32,
    /// 1 for BOTTOM_RIGHT, 0 for TOP_LEFT.
    pub bottom_right: i32,
    /// KV splits per (sequence, KV head); 1: the split kernel writes O itself, no combine.
    pub splits: i32,
    /// Blocks per (split, KV head, sequence) over its 16-row tiles (the launch's grid.y): block y
    /// takes tiles y, y + row_groups, …; 1 for decode.
    pub row_groups: i32,
    /// Keys per split (a multiple of 16).
    pub chunk: i32,
    /// Rows of the workspace's partials: T_q (packed) or B · S_q (padded).
    pub ws_rows: i32,
    /// Workspace rows between sequences: 0 (packed) or S_q (padded).
    pub ws_batch: i32,
    /// Workspace layout of the split route.
    pub workspace: PagedWorkspace,
    /// The gathered route, where the plan chose it ([`gather::route`]); the split-route fields
    /// above are then unused.
    pub gather: Option<GatherPlan>,
}

impl PagedPlan {
    /// Bytes of workspace the caller must provide.
    pub fn workspace_bytes(&self) -> u64 {
        match &self.gather {
            Some(g) => g.workspace.total_bytes,
            None => self.workspace.total_bytes,
        }
    }

    /// Blocks of the split launch: splits × H_kv × B.
    pub fn split_blocks(&self) -> u32 {
        (self.splits as u32) * (self.heads_kv as u32) * (self.batch as u32)
    }

    /// The combine launch's grid (workspace rows, head groups).
    pub fn combine_grid(&self) -> (u32, u32) {
        let groups = (i64::from(self.heads_q) + device_abi::COMBINE_HEADS_PER_BLOCK - 1)
            / device_abi::COMBINE_HEADS_PER_BLOCK;
        (self.ws_rows as u32, groups as u32)
    }
}

/// The KV split of a problem whose Lkv are bounded by `bound`, with `pairs` (sequence, KV head)
/// pairs and `partial_bytes` of partial results per split: (splits, keys per split). Enough splits
/// for [`SPLIT_TARGET_BLOCKS`] blocks when every sequence reaches the bound, and none longer than
/// [`MAX_CHUNK`] keys past [`LONG_CONTEXT`], but none shorter than [`MIN_CHUNK`] (so short
/// contexts get one split), and never more partials than [`PARTIALS_CAP`]. The chunk is a
/// multiple of 16 keys.
pub fn choose_split(bound: i64, pairs: i64, partial_bytes: u64) -> (i64, i64) {
    let bound = bound.max(1);
    let tile = device_abi::KEY_TILE;
    let round = |keys: i64| (keys + tile - 1) / tile * tile;
    let fill = (SPLIT_TARGET_BLOCKS + pairs - 1) / pairs.max(1);
    let cut = if bound > LONG_CONTEXT {
        (bound + MAX_CHUNK - 1) / MAX_CHUNK
    } else {
        1
    };
    let want = fill.max(cut);
    let most = ((bound + MIN_CHUNK - 1) / MIN_CHUNK).max(1);
    let affordable = i64::try_from(PARTIALS_CAP / partial_bytes.max(1)).unwrap_or(i64::MAX);
    let splits = want.min(most).min(affordable);
    if splits <= 1 {
        return (1, round(bound));
    }
    let chunk = round((bound + splits - 1) / splits);
    let splits = (bound + chunk - 1) / chunk;
    if splits <= 1 {
        (1, round(bound))
    } else {
        (splits, chunk)
    }
}

/// Blocks per (sequence, KV head) over their 16-row tiles when a sequence has `row_tiles` of them
/// (on average) and there are `pairs` (sequence, KV head) pairs: enough for
/// [`ROW_GROUP_TARGET_BLOCKS`] blocks, never more than the tiles (so decode, one tile, keeps 1).
/// Row groups come before KV splits: they need no combine and no partials.
pub fn choose_row_groups(row_tiles: i64, pairs: i64) -> i64 {
    let want = (ROW_GROUP_TARGET_BLOCKS + pairs - 1) / pairs.max(1);
    want.min(row_tiles).max(1)
}

fn decline<T>(
    uid: i64,
    field: impl Into<String>,
    value: impl std::fmt::Display,
    need: impl Into<String>,
) -> Result<T, Decline> {
    Err(Decline::new(uid, field, value, need))
}

fn to_i32(value: i64, uid: i64, field: &str) -> Result<i32, Decline> {
    i32::try_from(value).map_err(|_| {
        Decline::new(
            uid,
            field,
            value,
            "at most 2^31 - 1 (the paged kernels index with int32)",
        )
    })
}

/// Q, O: dense, unit head-dim stride, the other strides multiples of 8 elements (16-byte rows),
/// 16-byte alignment.
fn check_rows(t: &Operand, padded: bool) -> Result<RowStrides, Decline> {
    if let Some(r) = t.ragged {
        return decline(
            t.uid,
            format!("{} ragged_offset_tensor_uid on a paged graph", t.role),
            r.uid,
            "unset: the CUDA paged kernels read packed Q/O ([1, H_q, T_q, D], sequences from \
             seq_len_q) or padded Q/O ([B, H_q, S_q, D])",
        );
    }
    if t.dim_stride() != 1 {
        return decline(
            t.uid,
            format!("{} head-dim stride (strides {:?})", t.role, t.strides),
            t.dim_stride(),
            "1 (16-byte row loads)",
        );
    }
    let batch = if padded { t.batch_stride() } else { 0 };
    for (name, value) in [
        ("sequence stride", t.seq_stride()),
        ("head stride", t.head_stride()),
        ("batch stride", batch),
    ] {
        if value < 0 || value % 8 != 0 {
            return decline(
                t.uid,
                format!("{} {name} (strides {:?})", t.role, t.strides),
                value,
                "a non-negative multiple of 8 elements (16-byte rows)",
            );
        }
    }
    check_declared_alignment(t.uid, t.role, t.alignment, GPU_ALIGNMENT)?;
    Ok(RowStrides {
        batch,
        seq: t.seq_stride(),
        head: t.head_stride(),
    })
}

/// A pool `[P, H_kv, ps, D]`: unit head-dim stride, page, head and slot strides multiples of 8
/// elements (token-major NHD `{ps·H·D, D, H·D, 1}` and head-major HND `{H·ps·D, ps·D, D, 1}` both).
fn check_pool(pool: &Operand) -> Result<PoolArgs, Decline> {
    let [pages, _, page_size, _] = pool.dims;
    let [page, head, slot, dim] = pool.strides;
    if dim != 1 || [page, head, slot].iter().any(|s| *s < 1 || s % 8 != 0) {
        return decline(
            pool.uid,
            format!("{} page pool strides (dims {:?})", pool.role, pool.dims),
            format!("{:?}", pool.strides),
            "head-dim stride 1 and page, head and slot strides positive multiples of 8 elements \
             (token-major NHD or head-major HND pools)",
        );
    }
    check_declared_alignment(pool.uid, pool.role, pool.alignment, GPU_ALIGNMENT)?;
    Ok(PoolArgs {
        uid: pool.uid,
        page,
        head,
        slot,
        pages: to_i32(pages, pool.uid, &format!("{} pages (dims[0])", pool.role))?,
        page_size: to_i32(
            page_size,
            pool.uid,
            &format!("{} page size (dims[2])", pool.role),
        )?,
    })
}

fn length(s: Option<IndexInput>, role: &str, uid: i64) -> Result<(i64, i32), Decline> {
    match s {
        Some(s) => Ok((s.uid, s.width.bytes())),
        None => decline(
            uid,
            role,
            "unset",
            "set: a paged graph delimits its sequences by lengths",
        ),
    }
}

/// Checks a paged forward problem against what the paged kernels implement and derives the
/// launch arguments. `problem.paged` must be set.
pub fn plan(problem: &RaggedSdpaProblem) -> Result<PagedPlan, Decline> {
    let RaggedSdpaProblem { q, k, v, o, .. } = problem;
    let Some(paged) = problem.paged else {
        return decline(
            q.uid,
            "page_table_k_tensor_uid",
            "unset",
            "a paged graph (the CUDA paged kernels)",
        );
    };
    let PagedKv {
        table_k,
        table_v,
        max_seq_len_kv,
        query,
    } = paged;
    if let ScalePlan::DeviceTensor { uid, .. } = problem.scale {
        return decline(
            uid,
            "scale_tensor_uid residency",
            "a device-resident tensor",
            "a baked value or a runtime pass-by-value host scalar: the CUDA kernels take the scale as a host float",
        );
    }
    let dtype = q.dtype;
    if !matches!(dtype, DataType::F16 | DataType::BF16) {
        return decline(
            q.uid,
            format!("{} data type", q.role),
            format!("{dtype:?}"),
            "HALF or BFLOAT16 (the CUDA paged kernels)",
        );
    }
    for t in [k, v, o] {
        if t.dtype != dtype {
            return decline(
                t.uid,
                format!("{} data type", t.role),
                format!("{:?}", t.dtype),
                format!("Q's {dtype:?}"),
            );
        }
    }
    let padded = match query {
        QueryForm::Packed => false,
        QueryForm::Padded => true,
        QueryForm::Ragged => {
            return decline(
                q.uid,
                format!("{} ragged_offset_tensor_uid on a paged graph", q.role),
                q.ragged.map_or(0, |r| r.uid),
                "unset: the CUDA paged kernels read packed Q/O ([1, H_q, T_q, D], sequences from \
                 seq_len_q) or padded Q/O ([B, H_q, S_q, D])",
            );
        }
    };
    let [_, s_q, h_q, d_qk] = q.bshd();
    let (h_kv, d_v) = (k.dims[1], v.dims[3]);
    let kernel = PagedKernel::select(dtype, d_qk, d_v).ok_or_else(|| {
        let pairs: Vec<String> = device_abi::HEAD_DIMS
            .iter()
            .map(|(a, b)| format!("{a}/{b}"))
            .collect();
        Decline::new(
            q.uid,
            format!("{} / {} head dims (Q/K / V/O)", q.role, v.role),
            format!("{d_qk}/{d_v}"),
            format!(
                "one of {} (the compiled CUDA paged kernels)",
                pairs.join(", ")
            ),
        )
    })?;
    let q_strides = check_rows(q, padded)?;
    let o_strides = check_rows(o, padded)?;
    let k_pool = check_pool(k)?;
    let v_pool = check_pool(v)?;
    let lse = match &problem.stats {
        None => None,
        Some(stats) => {
            if stats.dtype != DataType::F32 {
                return decline(
                    stats.uid,
                    format!("{} data type", stats.role),
                    format!("{:?}", stats.dtype),
                    "FLOAT",
                );
            }
            if let Some(r) = stats.ragged {
                return decline(
                    stats.uid,
                    format!("{} ragged_offset_tensor_uid on a paged graph", stats.role),
                    r.uid,
                    "unset: a dense LSE in Q's rows ([1, H_q, T_q, 1] packed, [B, H_q, S_q, 1] padded)",
                );
            }
            let want = [q.batch(), s_q, h_q, 1];
            if stats.bshd() != want {
                return decline(
                    stats.uid,
                    format!("{} [B, S, H, 1]", stats.role),
                    format!("{:?}", stats.bshd()),
                    format!("{want:?} (Q's rows and heads)"),
                );
            }
            if let Some(s) = stats.strides.iter().find(|s| **s < 0) {
                return decline(
                    stats.uid,
                    format!("{} stride (strides {:?})", stats.role, stats.strides),
                    s,
                    "non-negative",
                );
            }
            check_declared_alignment(stats.uid, stats.role, stats.alignment, 4)?;
            Some((
                stats.uid,
                RowStrides {
                    batch: if padded { stats.batch_stride() } else { 0 },
                    seq: stats.seq_stride(),
                    head: stats.head_stride(),
                },
            ))
        }
    };
    let sinks = match &problem.sinks {
        None => None,
        Some(s) => {
            check_declared_alignment(s.uid, SINK_ROLE, s.alignment, 4)?;
            Some((s.uid, s.stride))
        }
    };
    let tk = table_k.int32_strides()?;
    let tv = table_v.int32_strides()?;
    let seq_len_q = length(problem.seq_len_q, "seq_len_q_tensor_uid", q.uid)?;
    let seq_len_kv = length(problem.seq_len_kv, "seq_len_kv_tensor_uid", q.uid)?;
    let batch = table_k.rows;
    for (name, bound) in [("left", problem.mask.left), ("right", problem.mask.right)] {
        if let Some(value) = bound.filter(|v| *v > i64::from(i32::MAX)) {
            return decline(
                q.uid,
                format!("mask {name} bound"),
                value,
                "at most 2^31 - 1 (the kernels take int32 bounds)",
            );
        }
    }
    let band = |value: Option<i64>| match value {
        Some(bound) if bound >= 0 => bound as i32,
        _ => -1,
    };

    // Rows of one (sequence, KV head) block and of the workspace, the grid: all int32.
    let group = h_q / h_kv;
    to_i32(
        group.saturating_mul(s_q),
        q.uid,
        "q_tensor_uid rows of a GQA group (H_q / H_kv × rows)",
    )?;
    let (ws_rows, ws_batch) = if padded {
        (batch.saturating_mul(s_q), s_q)
    } else {
        (s_q, 0)
    };
    let ws_rows32 = to_i32(ws_rows, q.uid, "q_tensor_uid rows of all sequences")?;
    let partial_bytes = (ws_rows as u64)
        .saturating_mul(h_q as u64)
        .saturating_mul(d_v as u64 + 1)
        .saturating_mul(4);
    // Row tiles of an average sequence: packed rows are shared by the batch.
    let rows_per_sequence = if padded {
        s_q
    } else {
        (s_q + batch - 1) / batch.max(1)
    };
    let row_tiles = (group.saturating_mul(rows_per_sequence) + 15) / 16;
    let row_groups = choose_row_groups(row_tiles, batch.saturating_mul(h_kv));
    let (splits, chunk) = choose_split(
        max_seq_len_kv,
        batch.saturating_mul(h_kv).saturating_mul(row_groups),
        partial_bytes,
    );
    to_i32(
        splits.saturating_mul(h_kv).saturating_mul(batch),
        q.uid,
        "split grid (splits × H_kv × B blocks)",
    )?;
    let workspace = if splits > 1 {
        let align = |x: u64| x.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
        let records = 0;
        let lse_at = align(batch as u64 * device_abi::RECORD_BYTES);
        let entries = splits as u64 * ws_rows as u64 * h_q as u64;
        let o_at = lse_at + align(entries * 4);
        let end = o_at + entries * d_v as u64 * 4;
        PagedWorkspace {
            records,
            lse: lse_at,
            o: o_at,
            total_bytes: end + WORKSPACE_ALIGNMENT,
        }
    } else {
        PagedWorkspace {
            records: 0,
            lse: 0,
            o: 0,
            total_bytes: 0,
        }
    };
    let mask_left = band(problem.mask.left);
    let mask_right = band(problem.mask.right);
    let bottom_right = i32::from(problem.mask.alignment == DiagonalAlignment::BottomRight);
    let scale = problem.scale.plan_value();
    let shape = PagedShape {
        dtype,
        query,
        batch,
        q_rows: s_q,
        heads_q: h_q,
        heads_kv: h_kv,
        d_qk,
        d_v,
        max_kv: max_seq_len_kv,
        q: q_strides,
        o: o_strides,
        lse,
        has_sinks: sinks.is_some(),
        uids: [q.uid, k.uid, v.uid, o.uid, seq_len_q.0],
        scale,
        mask_left,
        mask_right,
        bottom_right,
    };
    let gather = if gather::enabled() {
        gather::route(&shape)
    } else {
        None
    };
    Ok(PagedPlan {
        kernel,
        batch: to_i32(batch, table_k.uid, "page_table_k_tensor_uid rows (B)")?,
        heads_q: to_i32(h_q, q.uid, "q_tensor_uid heads")?,
        heads_kv: to_i32(h_kv, k.uid, "k_tensor_uid pool heads")?,
        q_rows: to_i32(s_q, q.uid, "q_tensor_uid rows")?,
        packed: !padded,
        q: q_strides,
        o: o_strides,
        lse,
        k: k_pool,
        v: v_pool,
        table_k: tk,
        table_v: tv,
        seq_len_q,
        seq_len_kv,
        max_kv: to_i32(max_seq_len_kv, k.uid, "max_seq_len_kv")?,
        sinks,
        uids: [q.uid, o.uid],
        scale,
        mask_left,
        mask_right,
        bottom_right,
        splits: splits as i32,
        row_groups: to_i32(row_groups, q.uid, "row groups")?,
        chunk: to_i32(chunk, k.uid, "keys per split")?,
        ws_rows: ws_rows32,
        ws_batch: ws_batch as i32,
        workspace,
        gather,
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
