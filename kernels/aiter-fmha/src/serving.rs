//! Paged K/V and attention sinks on the AITER engine (`kernels/core/paged-kv-and-sinks.md`).
//!
//! AITER's asm `fmha_v3` kernels, the only ones the vendored subset has, read contiguous group-mode
//! K/V and take no sink argument (`fmha_fwd_v3_args` has none; `mha_fwd_args::sink_ptr` reaches
//! CK only). `mha_batch_prefill`, AITER's paged entry point, exists only under `ENABLE_CK` with
//! CK's `fmha_batch_prefill_args`, which the subset lacks. So both features run as the CUDA
//! engine's gathered route does, around the ordinary forward:
//!
//! 1. paged graphs: `ragged_aiter_paged_starts` writes per-sequence token starts for Q/O and for a
//!    gathered K/V, and `ragged_aiter_paged_gather` copies each sequence's pages (every page id
//!    checked first) into contiguous K and V in the workspace;
//! 2. the forward as for any ragged problem (pre-pass, `aiter::mha_fwd` with AITER's own kernel
//!    choice, fix-up), over a problem built here whose ragged offsets are those token starts;
//! 3. `ragged_aiter_sink_finish` folds the sinks into O and the LSE and writes quiet NaN rows for
//!    sequences with an invalid page id.
//!
//! Everything is decided from graph metadata ([`plan`]): the forward's problem, AITER's own limits
//! on it ([`check_applicability`]), and the workspace, whose gathered K/V is sized for every
//! sequence at the `max_seq_len_kv` bound and capped at [`MAX_GATHER_BYTES`].

use super::applicability::{AiterPlan, GpuArch, check_applicability};
use super::problem::{AiterProblem, LseLayout, RaggedAux, RaggedOperand, SeqLens};
use super::workspace::{Region, WORKSPACE_ALIGN};
use ragged_core::contract::{self, Decline, check_declared_alignment};
use ragged_core::problem::{
    IndexWidth, Operand, PageTableStrides, PagedKv, QueryForm, RaggedSdpaProblem, SINK_ROLE,
    ScalePlan,
};
use ragged_core::{DataType, contract::GPU_ALIGNMENT};

/// `RAGGED_GATHER_ROWS`: keys one gather block copies.
pub const GATHER_ROWS: i64 = 64;
/// The gathered K and V, sized for every sequence at `max_seq_len_kv`, stay within this many
/// bytes (the CUDA engine's bound); a larger graph is declined naming it. Only the keys the
/// lengths cover are copied, so the bound costs workspace, not time.
pub const MAX_GATHER_BYTES: u64 = 4 << 30;
/// The gather grid's y extent is the batch, which HIP caps at 65 535 blocks.
pub const MAX_PAGED_BATCH: i64 = 65_535;

/// A page pool `[P, H_kv, ps, D]` as the gather kernel addresses it (element strides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolArgs {
    /// Graph uid.
    pub uid: i64,
    /// Elements between pages.
    pub page: i64,
    /// Elements between KV heads.
    pub head: i64,
    /// Elements between slots of a page.
    pub slot: i64,
    /// Elements between head-dim entries.
    pub dim: i64,
    /// P.
    pub pages: i32,
    /// ps.
    pub page_size: i32,
}

/// The gathered route of a paged graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedRoute {
    /// K's pool.
    pub k_pool: PoolArgs,
    /// V's pool.
    pub v_pool: PoolArgs,
    /// K's table.
    pub table_k: PageTableStrides,
    /// V's table.
    pub table_v: PageTableStrides,
    /// The graph's `seq_len_q`.
    pub seq_len_q: SeqLens,
    /// The graph's `seq_len_kv`.
    pub seq_len_kv: SeqLens,
    /// Packed Q/O (else padded).
    pub packed: bool,
    /// T_q (packed) or S_q (padded).
    pub q_rows: i64,
    /// The bound every Lkv is clamped to.
    pub max_kv: i64,
    /// H_kv.
    pub heads_kv: i64,
    /// D_qk.
    pub d_qk: i64,
    /// D_v.
    pub d_v: i64,
    /// int32 `[B + 1]`: Q/O token starts (the forward's Q offsets, and a packed LSE's).
    pub q_start: Region,
    /// int32 `[B + 1]`: token starts in the gathered K/V (the forward's K offsets).
    pub kv_start: Region,
    /// int32 `[B]`: 1 for a sequence with a page id outside its pool.
    pub invalid: Region,
    /// The gathered K, 16-bit `[B · max_kv, H_kv, D_qk]`.
    pub k: Region,
    /// The gathered V, 16-bit `[B · max_kv, H_kv, D_v]`.
    pub v: Region,
    /// Blocks of the gather grid along keys: ceil(max_kv / [`GATHER_ROWS`]).
    pub key_blocks: u32,
}

/// The sink logits, one per query head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinkArgs {
    /// Graph uid.
    pub uid: i64,
    /// Elements between heads.
    pub stride: i64,
}

/// What runs around the forward for a paged or sink graph, and the workspace it adds. Offsets
/// are from the aligned workspace base; the forward's own workspace starts at `forward_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServingPlan {
    /// The gathered route, for a paged graph.
    pub paged: Option<PagedRoute>,
    /// The sinks, when the graph has them.
    pub sinks: Option<SinkArgs>,
    /// f32 LSE `[B, S_q_max, H_q]` the forward writes when sinks need one and the graph has none.
    pub lse: Option<Region>,
    /// Offset of the forward's workspace (its regions are relative to it).
    pub forward_at: usize,
    /// Bytes the caller provides: everything above, the forward's workspace and the slack.
    pub size: usize,
}

fn align_up(n: usize) -> usize {
    n.div_ceil(WORKSPACE_ALIGN).saturating_mul(WORKSPACE_ALIGN)
}

fn to_i32(value: i64, uid: i64, field: &str) -> Result<i32, Decline> {
    i32::try_from(value).map_err(|_| {
        Decline::new(
            uid,
            field,
            value,
            "at most 2^31 - 1 (the AITER engine's paged kernels index with int32)",
        )
    })
}

fn check_pool(pool: &Operand) -> Result<PoolArgs, Decline> {
    let [pages, _, page_size, _] = pool.dims;
    if pool.strides.iter().any(|s| *s < 1) {
        return Err(Decline::new(
            pool.uid,
            format!("{} page pool strides (dims {:?})", pool.role, pool.dims),
            format!("{:?}", pool.strides),
            "positive strides",
        ));
    }
    check_declared_alignment(pool.uid, pool.role, pool.alignment, 2)?;
    let [page, head, slot, dim] = pool.strides;
    Ok(PoolArgs {
        uid: pool.uid,
        page,
        head,
        slot,
        dim,
        pages: to_i32(pages, pool.uid, &format!("{} pages (dims[0])", pool.role))?,
        page_size: to_i32(
            page_size,
            pool.uid,
            &format!("{} page size (dims[2])", pool.role),
        )?,
    })
}

/// Q or O of a paged graph as the forward addresses it: token `t` at `t · seqStride`, which for
/// padded Q/O needs each sequence's slice right after the previous one (batch stride = S_q ·
/// seqStride), since the forward knows one token start per sequence.
fn paged_rows(t: &Operand, starts: RaggedAux, padded: bool) -> Result<RaggedOperand, Decline> {
    if let Some(r) = t.ragged {
        return Err(Decline::new(
            t.uid,
            format!("{} ragged_offset_tensor_uid on a paged graph", t.role),
            r.uid,
            "unset: the AITER engine reads packed Q/O ([1, H_q, T_q, D], sequences from \
             seq_len_q) or padded Q/O ([B, H_q, S_q, D]) with paged K/V",
        ));
    }
    if t.seq_stride() < 1 {
        return Err(Decline::new(
            t.uid,
            format!("{} sequence stride (strides {:?})", t.role, t.strides),
            t.seq_stride(),
            "positive",
        ));
    }
    if padded && t.batch_stride() != t.seq_max() * t.seq_stride() {
        return Err(Decline::new(
            t.uid,
            format!(
                "{} batch stride (dims {:?}, strides {:?})",
                t.role, t.dims, t.strides
            ),
            t.batch_stride(),
            format!(
                "S_q · sequence stride = {}: AITER's group mode addresses each sequence by one \
                 token start, so padded sequences must follow each other",
                t.seq_max() * t.seq_stride()
            ),
        ));
    }
    check_declared_alignment(t.uid, t.role, t.alignment, GPU_ALIGNMENT)?;
    let mut rows = RaggedOperand::from_operand(t);
    rows.aux = RaggedAux {
        multiplier: t.seq_stride(),
        ..starts
    };
    Ok(rows)
}

/// The gathered K or V: dense `[T, H_kv, D]` in the workspace, addressed by the gathered starts.
fn gathered(pool: &Operand, heads_kv: i64, head_dim: i64) -> RaggedOperand {
    RaggedOperand {
        uid: pool.uid,
        heads: heads_kv,
        head_dim,
        seq_stride: heads_kv * head_dim,
        head_stride: head_dim,
        dim_stride: 1,
        aux: RaggedAux {
            uid: pool.uid,
            width: IndexWidth::I32,
            multiplier: heads_kv * head_dim,
        },
        alignment: WORKSPACE_ALIGN as i64,
    }
}

/// The graph's stats on a paged graph: packed, a token-major or head-major `[1, H_q, T_q, 1]`
/// addressed through the Q starts; padded, dense `[B, H_q, S_q, 1]`.
fn paged_stats(
    stats: &Operand,
    q: &Operand,
    starts: RaggedAux,
    padded: bool,
) -> Result<LseLayout, Decline> {
    if stats.dtype != DataType::F32 {
        return Err(Decline::new(
            stats.uid,
            format!("{} data type", stats.role),
            format!("{:?}", stats.dtype),
            "FLOAT",
        ));
    }
    if let Some(r) = stats.ragged {
        return Err(Decline::new(
            stats.uid,
            format!("{} ragged_offset_tensor_uid on a paged graph", stats.role),
            r.uid,
            "unset: a dense LSE in Q's rows ([1, H_q, T_q, 1] packed, [B, H_q, S_q, 1] padded)",
        ));
    }
    let want = [q.batch(), q.seq_max(), q.heads(), 1];
    if stats.bshd() != want {
        return Err(Decline::new(
            stats.uid,
            format!("{} [B, S, H, 1]", stats.role),
            format!("{:?}", stats.bshd()),
            format!("{want:?} (Q's rows and heads)"),
        ));
    }
    if stats.seq_stride() < 1 || stats.head_stride() < 0 || stats.batch_stride() < 0 {
        return Err(Decline::new(
            stats.uid,
            format!("{} strides", stats.role),
            format!("{:?}", stats.strides),
            "a positive sequence stride and non-negative others",
        ));
    }
    check_declared_alignment(stats.uid, stats.role, stats.alignment, 4)?;
    Ok(if !padded {
        LseLayout::Ragged {
            uid: stats.uid,
            seq_stride: stats.seq_stride(),
            head_stride: stats.head_stride(),
            aux: RaggedAux {
                multiplier: stats.seq_stride(),
                ..starts
            },
            alignment: stats.alignment,
        }
    } else {
        LseLayout::Dense {
            uid: stats.uid,
            strides: [
                stats.batch_stride(),
                stats.head_stride(),
                stats.seq_stride(),
                stats.dim_stride(),
            ],
            alignment: stats.alignment,
        }
    })
}

fn no_fp8_or_device_scale(problem: &RaggedSdpaProblem) -> Result<(), Decline> {
    let feature = if problem.paged.is_some() {
        "paged K/V"
    } else {
        "sinks"
    };
    if let Some(fp8) = &problem.fp8 {
        return Err(Decline::new(
            problem.q.uid,
            format!("{} data type with {feature}", problem.q.role),
            format!("FP8 ({})", fp8.input),
            "HALF or BFLOAT16: the AITER engine's paged and sink kernels handle 16-bit tensors",
        ));
    }
    if let ScalePlan::DeviceTensor { uid, .. } = problem.scale {
        return Err(Decline::new(
            uid,
            "scale_tensor_uid residency",
            "a device-resident tensor",
            "a baked value or a runtime pass-by-value host scalar: AITER takes the scale as a \
             host float",
        ));
    }
    Ok(())
}

/// The forward AITER runs for a paged graph and the gathered route around it (no workspace
/// offsets yet).
fn paged_forward(
    problem: &RaggedSdpaProblem,
    paged: &PagedKv,
) -> Result<(AiterProblem, PagedRoute), Decline> {
    let RaggedSdpaProblem { q, k, v, o, .. } = problem;
    let dtype = q.dtype;
    if !matches!(dtype, DataType::F16 | DataType::BF16) {
        return Err(Decline::new(
            q.uid,
            format!("{} data type", q.role),
            format!("{dtype:?}"),
            "HALF or BFLOAT16 (AITER has no FLOAT FMHA)",
        ));
    }
    for t in [k, v, o] {
        if t.dtype != dtype {
            return Err(Decline::new(
                t.uid,
                format!("{} data type", t.role),
                format!("{:?}", t.dtype),
                format!("Q's {dtype:?}"),
            ));
        }
    }
    let padded = match paged.query {
        QueryForm::Packed => false,
        QueryForm::Padded => true,
        QueryForm::Ragged => {
            return Err(Decline::new(
                q.uid,
                format!("{} ragged_offset_tensor_uid on a paged graph", q.role),
                q.ragged.map_or(0, |r| r.uid),
                "unset: the AITER engine reads packed Q/O ([1, H_q, T_q, D], sequences from \
                 seq_len_q) or padded Q/O ([B, H_q, S_q, D]) with paged K/V",
            ));
        }
    };
    let lengths = |s: Option<ragged_core::problem::IndexInput>, role: &str| {
        s.map(|s| SeqLens {
            uid: s.uid,
            width: s.width,
        })
        .ok_or_else(|| {
            Decline::new(
                q.uid,
                role,
                "unset",
                "set: a paged graph delimits its sequences by lengths",
            )
        })
    };
    let seq_len_q = lengths(problem.seq_len_q, "seq_len_q_tensor_uid")?;
    let seq_len_kv = lengths(problem.seq_len_kv, "seq_len_kv_tensor_uid")?;
    let batch = paged.table_k.rows;
    if batch > MAX_PAGED_BATCH {
        return Err(Decline::new(
            paged.table_k.uid,
            format!("{} rows (B)", paged.table_k.role),
            batch,
            format!("at most {MAX_PAGED_BATCH} (the gather grid's y extent)"),
        ));
    }
    // The starts kernel's records stand in for ragged offsets: int32 token starts, so each
    // tensor's multiplier is its own sequence stride.
    let starts = RaggedAux {
        uid: paged.table_k.uid,
        width: IndexWidth::I32,
        multiplier: 1,
    };
    let (heads_kv, d_qk, d_v) = (k.dims[1], k.dims[3], v.dims[3]);
    let lse = match &problem.stats {
        None => LseLayout::None,
        Some(stats) => paged_stats(stats, q, starts, padded)?,
    };
    let forward = AiterProblem {
        dtype,
        o_dtype: o.dtype,
        batch,
        s_q_max: q.seq_max(),
        s_kv_max: paged.max_seq_len_kv,
        // Packed sequences share T_q rows: the forward's row totals are T_q, not B · T_q.
        packed_q_rows: (!padded).then(|| q.seq_max()),
        q: paged_rows(q, starts, padded)?,
        k: gathered(k, heads_kv, d_qk),
        v: gathered(v, heads_kv, d_v),
        o: paged_rows(o, starts, padded)?,
        // Packed: each sequence's extent is its clamped length. Padded: the slices are S_q rows
        // and the pre-pass clamps the graph's lengths into them.
        seq_len_q: padded.then_some(seq_len_q),
        seq_len_kv: None,
        mask: problem.mask,
        scale: problem.scale.plan_value(),
        lse,
        fp8: None,
    };
    let route = PagedRoute {
        k_pool: check_pool(k)?,
        v_pool: check_pool(v)?,
        table_k: paged.table_k.int32_strides()?,
        table_v: paged.table_v.int32_strides()?,
        seq_len_q,
        seq_len_kv,
        packed: !padded,
        q_rows: q.seq_max(),
        max_kv: paged.max_seq_len_kv,
        heads_kv,
        d_qk,
        d_v,
        q_start: Region::default(),
        kv_start: Region::default(),
        invalid: Region::default(),
        k: Region::default(),
        v: Region::default(),
        key_blocks: u32::try_from((paged.max_seq_len_kv + GATHER_ROWS - 1) / GATHER_ROWS)
            .map_err(|_| {
                Decline::new(
                    k.uid,
                    "max_seq_len_kv",
                    paged.max_seq_len_kv,
                    "a gather grid of at most 2^32 - 1 blocks",
                )
            })?
            .max(1),
    };
    Ok((forward, route))
}

/// The plan of a paged or sink graph on `arch`: the forward's problem and AITER's plan for it,
/// whose [`AiterPlan::serving`] holds the route and the workspace around it.
pub fn plan(
    problem: &RaggedSdpaProblem,
    arch: &GpuArch,
    shim_targets: &str,
) -> Result<(AiterProblem, AiterPlan), Decline> {
    no_fp8_or_device_scale(problem)?;
    let sinks = match &problem.sinks {
        None => None,
        Some(s) => {
            check_declared_alignment(s.uid, SINK_ROLE, s.alignment, 4)?;
            Some(SinkArgs {
                uid: s.uid,
                stride: s.stride,
            })
        }
    };
    let (mut forward, mut route) = match &problem.paged {
        Some(paged) => {
            let (forward, route) = paged_forward(problem, paged)?;
            (forward, Some(route))
        }
        None => {
            // Sinks on a ragged graph: the shared GPU contract holds for everything else.
            let plain = RaggedSdpaProblem {
                sinks: None,
                ..*problem
            };
            contract::check_gpu_admitting_fp8(&plain)?;
            (AiterProblem::from_problem(&plain), None)
        }
    };

    // Workspace: the route's regions, the sink LSE, then the forward's own.
    let mut at = 0usize;
    let mut take = |bytes: u64| -> Region {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        let region = Region { offset: at, bytes };
        at = align_up(at.saturating_add(bytes));
        region
    };
    if let Some(route) = route.as_mut() {
        let keys = (forward.batch as u64).saturating_mul(route.max_kv as u64);
        let bytes = |d: i64| keys.saturating_mul(route.heads_kv as u64 * d as u64 * 2);
        let total = bytes(route.d_qk).saturating_add(bytes(route.d_v));
        if total > MAX_GATHER_BYTES {
            return Err(Decline::new(
                route.table_k.uid,
                "gathered K/V bytes (B · max_seq_len_kv · H_kv · (D_qk + D_v) · 2)",
                total,
                format!(
                    "at most {MAX_GATHER_BYTES} (4 GiB): the AITER engine gathers paged K/V \
                     into the workspace, sized at the max_seq_len_kv bound"
                ),
            ));
        }
        let ints = |n: i64| (n as u64) * 4;
        route.q_start = take(ints(forward.batch + 1));
        route.kv_start = take(ints(forward.batch + 1));
        route.invalid = take(ints(forward.batch));
        route.k = take(bytes(route.d_qk));
        route.v = take(bytes(route.d_v));
    }
    let lse = match (sinks, forward.lse) {
        (Some(s), LseLayout::None) => {
            // Token-major f32 rows: through the Q starts for packed paged Q (T_q rows in all),
            // else dense [B, S_q_max, H_q].
            let (rows, heads) = (forward.s_q_max, forward.q.heads);
            let alignment = WORKSPACE_ALIGN as i64;
            forward.lse = match (forward.packed_q_rows, route.as_ref()) {
                (Some(_), Some(_)) => LseLayout::Ragged {
                    uid: s.uid,
                    seq_stride: heads,
                    head_stride: 1,
                    aux: RaggedAux {
                        multiplier: heads,
                        ..forward.q.aux
                    },
                    alignment,
                },
                _ => LseLayout::Dense {
                    uid: s.uid,
                    strides: [rows * heads, 1, heads, 1],
                    alignment,
                },
            };
            Some(take(
                (forward.q_rows_total() as u64).saturating_mul(heads as u64 * 4),
            ))
        }
        _ => None,
    };
    let forward_at = at;
    let mut aiter = check_applicability(&forward, arch, shim_targets)?;
    aiter.serving = Some(ServingPlan {
        paged: route,
        sinks,
        lse,
        forward_at,
        size: forward_at.saturating_add(aiter.workspace.size),
    });
    Ok((forward, aiter))
}

#[cfg(test)]
#[path = "serving_tests.rs"]
mod tests;
