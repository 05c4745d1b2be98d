//! The AITER engine's ragged SDPA backward (issue 15 item 6): which backward problems it takes,
//! with which settings, and its workspace.
//!
//! AITER's `mha_bwd` recomputes P from Q, K and the forward's LSE, so the backward is the
//! forward's problem (same Q/K/V/O layouts, lengths, band and scale, hence the forward's own
//! applicability) plus dO and the three gradients. AITER addresses Q, O, dO and dQ through one
//! token-start array (`seqstart_q`), and K, V, dK and dV through another, so each gradient must
//! yield its primal's token starts; its strides may differ (AITER takes one per tensor).
//!
//! The engine runs AITER's backward deterministically: `is_deterministic = 1`, which makes
//! `mha_bwd` skip its asm `fmha_v3_bwd` (that path accumulates dQ with atomics in whatever order
//! the blocks run) and run CK tile's deterministic group-mode kernels, where each dQ split has
//! one writer and the splits are summed in a fixed order. So the head dims and the workspace are
//! CK's; see [`CkBackwardTile`] and [`BackwardWorkspace`].

use super::applicability::{AiterPlan, GpuArch, INDEX_LIMIT, check_applicability};
use super::problem::{AiterProblem, LseLayout, RaggedOperand};
use super::workspace::{Region, WORKSPACE_ALIGN, WorkspacePlan};
use ragged_core::contract::{self, Decline};
use ragged_core::problem::{Operand, RaggedSdpaProblem, ScalePlan};

/// One ragged SDPA backward as the AITER engine sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AiterBackwardProblem {
    /// The forward it differentiates; its `lse` is the stats the forward wrote (never `None`
    /// for an accepted problem).
    pub forward: AiterProblem,
    /// dO: O's dims and token starts.
    pub d_o: RaggedOperand,
    /// dQ: Q's dims and token starts.
    pub dq: RaggedOperand,
    /// dK: K's dims and token starts.
    pub dk: RaggedOperand,
    /// dV: V's dims and token starts.
    pub dv: RaggedOperand,
}

/// What applicability decided for an accepted backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AiterBackwardPlan {
    /// The forward's plan (its pre-pass regions and LSE scratch are reused as they are).
    pub forward: AiterPlan,
    /// The CK deterministic kernel family AITER will dispatch to; the mapping sends
    /// `is_deterministic = 1` and asm off because this is a CK plan.
    pub ck_tile: CkBackwardTile,
    /// The workspace: the forward's layout, the D (rowsum dO·O) scratch, AITER's own scratch.
    pub workspace: BackwardWorkspace,
}

/// The head-dim bucket of CK tile's group-mode backward that AITER's `libmha_bwd.so`
/// (`generate.py -d bwd --receipt 600`: fp16/bf16, every mode, mask, padding and determinism)
/// dispatches to. CK picks the first bucket that holds both head dims and pads within it, on
/// gfx942 and gfx950 alike; gfx950 adds transposed-load tiles for 64 and 128 whose key tiles are
/// no narrower. `key_tile` (CK's `kN0`) sets how many dQ splits the deterministic kernel may
/// need, hence the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CkBackwardTile {
    /// The bucket's head dim (`F_bhdq` = `F_bhdv` in CK's tile table).
    pub head_dim: i64,
    /// Key rows per block (`kN0`): the narrowest of the bucket's tiles on either architecture.
    pub key_tile: i64,
}

/// CK's group-mode backward buckets for fp16/bf16 on gfx9, in dispatch order, with the key tile
/// of each (`KernelComponentFactoryGfx9::get_dq_dk_dv_tiles` in CK's `codegen/ops/fmha_bwd.py`).
const CK_BWD_TILES: [CkBackwardTile; 5] = [
    CkBackwardTile {
        head_dim: 32,
        key_tile: 128,
    },
    CkBackwardTile {
        head_dim: 64,
        key_tile: 128,
    },
    CkBackwardTile {
        head_dim: 96,
        key_tile: 128,
    },
    CkBackwardTile {
        head_dim: 128,
        key_tile: 128,
    },
    CkBackwardTile {
        head_dim: 256,
        key_tile: 64,
    },
];

/// The bucket CK's backward runs `D_qk × D_v` in, or the decline naming the larger dim. The one
/// place that says which head dims the backward maps (the forward's rule, multiples of 8 up to
/// 256, is checked first and is the same set).
pub fn ck_backward_tile(q: &RaggedOperand, v: &RaggedOperand) -> Result<CkBackwardTile, Decline> {
    CK_BWD_TILES
        .iter()
        .copied()
        .find(|t| q.head_dim <= t.head_dim && v.head_dim <= t.head_dim)
        .ok_or_else(|| {
            let (uid, field, value) = if q.head_dim >= v.head_dim {
                (q.uid, "q_tensor_uid head dim (D_qk)", q.head_dim)
            } else {
                (v.uid, "v_tensor_uid head dim (D_v)", v.head_dim)
            };
            Decline::new(
                uid,
                field,
                value,
                "at most 256: AITER's deterministic backward is CK tile's group-mode \
                 kernels, whose largest head-dim bucket is 256",
            )
        })
}

/// Compute units the workspace allows for: CK packs one 32-byte dispatch record per CU of the
/// device into its workspace (MI300X has 304, MI355X 256). Sized from this bound rather than
/// the device so that the plan depends on graph dims only.
pub const MAX_COMPUTE_UNITS: usize = 1024;

/// The backward's device scratch, all sized from graph dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardWorkspace {
    /// The forward's regions: token starts, lengths, cumulative lengths, status, and the LSE
    /// scratch (here an input: the LSE pre-pass fills it from the stats tensor).
    pub forward: WorkspacePlan,
    /// f32 `[H_q, B·S_q_max]`: AITER's D (`d_ptr`), laid out like the LSE scratch.
    pub d_scratch: Region,
    /// What `mha_bwd` asks its `workspace_alloc` for: [`ck_deterministic_workspace_bytes`].
    /// The shim hands it out from here, so an execution allocates nothing.
    pub aiter_scratch: Region,
    /// Bytes the caller must provide, slack for base alignment included.
    pub size: usize,
}

fn align_to(n: usize, to: usize) -> usize {
    n.div_ceil(to).saturating_mul(to)
}

/// The bytes CK's deterministic group-mode backward asks for (`fmha_bwd_launcher::
/// workspace_size`, which AITER's `mha_bwd` requests in one `workspace_alloc` call): a host-packed
/// part, rounded to 4 KiB — int32 split counts `[B]`, int64 dQ offsets `[B+1]`, 32-byte
/// per-CU records, 16-byte per-batch records, each 16-byte aligned — then f32 dQ accumulators
/// `[H_q, nsplits, total_q, D_qk]` at CK's upper bound `nsplits = ceil(S_kv_max / kN0)`, with
/// `total_q = B·S_q_max` (the `seqlen_q` the engine passes). CK's formula, not the engine's
/// choice: the shim refuses a request beyond it with `RAGGED_AITER_WORKSPACE_TOO_SMALL`.
pub fn ck_deterministic_workspace_bytes(problem: &AiterProblem, tile: CkBackwardTile) -> usize {
    let size = |v: i64| usize::try_from(v).unwrap_or(0);
    let batch = size(problem.batch);
    let host = align_to(batch.saturating_mul(4), 16)
        .saturating_add(align_to(batch.saturating_add(1).saturating_mul(8), 16))
        .saturating_add(align_to(MAX_COMPUTE_UNITS.saturating_mul(32), 16))
        .saturating_add(align_to(batch.saturating_mul(16), 16));
    let splits = size(problem.s_kv_max).div_ceil(size(tile.key_tile).max(1));
    let accumulators = std::mem::size_of::<f32>()
        .saturating_mul(size(problem.q.heads))
        .saturating_mul(splits)
        .saturating_mul(batch.saturating_mul(size(problem.s_q_max)))
        .saturating_mul(size(problem.q.head_dim));
    align_to(host, 4096).saturating_add(accumulators)
}

impl BackwardWorkspace {
    /// The forward's layout, then the D scratch, then AITER's scratch. `forward.size` carries
    /// the forward's alignment slack, which the end offset recovers.
    pub fn for_problem(
        problem: &AiterProblem,
        forward: WorkspacePlan,
        tile: CkBackwardTile,
    ) -> Self {
        let end = forward.size.saturating_sub(WORKSPACE_ALIGN - 1);
        let heads = usize::try_from(problem.q.heads).unwrap_or(0);
        let rows = usize::try_from(WorkspacePlan::scratch_head_stride(problem)).unwrap_or(0);
        let bytes = heads
            .saturating_mul(rows)
            .saturating_mul(std::mem::size_of::<f32>());
        let d_scratch = Region { offset: end, bytes };
        let aiter_scratch = Region {
            offset: align_to(end.saturating_add(bytes), WORKSPACE_ALIGN),
            bytes: ck_deterministic_workspace_bytes(problem, tile),
        };
        let used = align_to(
            aiter_scratch.offset.saturating_add(aiter_scratch.bytes),
            WORKSPACE_ALIGN,
        );
        Self {
            forward,
            d_scratch,
            aiter_scratch,
            size: used.saturating_add(WORKSPACE_ALIGN - 1),
        }
    }
}

impl AiterBackwardProblem {
    /// The AITER view of a backward whose forward meets the GPU contract.
    pub fn from_parts(
        forward: &RaggedSdpaProblem,
        d_o: &Operand,
        dq: &Operand,
        dk: &Operand,
        dv: &Operand,
    ) -> Self {
        Self {
            forward: AiterProblem::from_problem(forward),
            d_o: RaggedOperand::from_operand(d_o),
            dq: RaggedOperand::from_operand(dq),
            dk: RaggedOperand::from_operand(dk),
            dv: RaggedOperand::from_operand(dv),
        }
    }
}

/// The four gradients in a forward problem's slots, so that the GPU contract checks them as it
/// checks Q/K/V/O (ragged, packed, aligned, dQ/dO and dK/dV on shared token starts).
fn gradient_carrier(forward: &RaggedSdpaProblem, grads: [&Operand; 4]) -> RaggedSdpaProblem {
    let [d_o, dq, dk, dv] = grads;
    RaggedSdpaProblem {
        q: *dq,
        k: *dk,
        v: *dv,
        o: *d_o,
        stats: None,
        seq_len_q: None,
        seq_len_kv: None,
        scale: ScalePlan::Fixed(1.0),
        mask: forward.mask,
        paged: None,
        sinks: None,
        fp8: None,
    }
}

/// A gradient must yield its primal's token starts: the same offsets tensor and the same
/// multiplier per sequence stride (AITER has one `seqstart` per side).
fn check_same_token_starts(
    primal: &RaggedOperand,
    primal_role: &str,
    grad: &RaggedOperand,
    grad_role: &str,
) -> Result<(), Decline> {
    if grad.aux.uid != primal.aux.uid {
        return Err(Decline::new(
            grad.uid,
            format!("{grad_role} ragged_offset_tensor_uid"),
            grad.aux.uid,
            format!(
                "{primal_role}'s offsets uid {} (AITER addresses both through one token-start array)",
                primal.aux.uid
            ),
        ));
    }
    if i128::from(grad.aux.multiplier) * i128::from(primal.seq_stride)
        != i128::from(primal.aux.multiplier) * i128::from(grad.seq_stride)
    {
        return Err(Decline::new(
            grad.uid,
            format!("{grad_role} multiplier/seqStride"),
            format!("{}/{}", grad.aux.multiplier, grad.seq_stride),
            format!(
                "{primal_role}'s {}/{} (identical token starts)",
                primal.aux.multiplier, primal.seq_stride
            ),
        ));
    }
    Ok(())
}

/// Whether this process's AITER can run a backward at all: `Err(reason)` names the missing
/// library or symbol (the shim's `ragged_aiter_mha_bwd_available`), and every backward is
/// declined with it.
pub type BackwardAvailability<'a> = Result<&'a str, &'a str>;

/// The AITER engine's plan for a backward on a device of architecture `arch`: AITER's backward
/// library first, then the forward's contract and limits, then the gradients.
pub fn plan_backward(
    forward: &RaggedSdpaProblem,
    grads: [&Operand; 4],
    arch: &GpuArch,
    shim_targets: &str,
    available: BackwardAvailability<'_>,
) -> Result<(AiterBackwardProblem, AiterBackwardPlan), Decline> {
    if let Err(reason) = available {
        return Err(Decline::graph(
            "AITER backward (aiter::mha_bwd in libmha_bwd.so)",
            reason,
            "AITER's libmha_bwd.so exporting aiter::mha_bwd next to the shim (or \
             $RAGGED_SDPA_AITER_MHA_BWD)",
        ));
    }
    contract::check_gpu(forward)?;
    contract::check_gpu(&gradient_carrier(forward, grads))?;
    let [d_o, dq, dk, dv] = grads;
    let problem = AiterBackwardProblem::from_parts(forward, d_o, dq, dk, dv);
    check_backward(&problem, arch, shim_targets).map(|plan| (problem, plan))
}

/// This engine's limits on a backward whose tensors meet the GPU contract.
pub fn check_backward(
    problem: &AiterBackwardProblem,
    arch: &GpuArch,
    shim_targets: &str,
) -> Result<AiterBackwardPlan, Decline> {
    let f = &problem.forward;
    if matches!(f.lse, LseLayout::None) {
        return Err(Decline::new(
            f.q.uid,
            "stats_tensor_uid",
            "absent",
            "the forward's LSE (AITER recomputes P from it)",
        ));
    }
    let forward = check_applicability(f, arch, shim_targets)?;
    let ck_tile = ck_backward_tile(&f.q, &f.v)?;
    if f.k.heads != f.q.heads {
        // CK's backward (like AITER's asm one) writes dK and dV once per query head, at the
        // query head's index: AITER's own callers pass H_q-head buffers and sum each group.
        return Err(Decline::new(
            problem.dk.uid,
            "dk_tensor_uid heads (H_kv)",
            f.k.heads,
            format!(
                "H_q = {}: AITER's mha_bwd writes dK/dV per query head; the per-group sum \
                 for GQA/MQA is not implemented",
                f.q.heads
            ),
        ));
    }
    for (primal, primal_role, grad, grad_role, s_max) in [
        (
            &f.o,
            "o_tensor_uid",
            &problem.d_o,
            "do_tensor_uid",
            f.s_q_max,
        ),
        (
            &f.q,
            "q_tensor_uid",
            &problem.dq,
            "dq_tensor_uid",
            f.s_q_max,
        ),
        (
            &f.k,
            "k_tensor_uid",
            &problem.dk,
            "dk_tensor_uid",
            f.s_kv_max,
        ),
        (
            &f.v,
            "v_tensor_uid",
            &problem.dv,
            "dv_tensor_uid",
            f.s_kv_max,
        ),
    ] {
        if (grad.heads, grad.head_dim) != (primal.heads, primal.head_dim) {
            return Err(Decline::new(
                grad.uid,
                format!("{grad_role} heads × head dim"),
                format!("{} × {}", grad.heads, grad.head_dim),
                format!("{primal_role}'s {} × {}", primal.heads, primal.head_dim),
            ));
        }
        check_same_token_starts(primal, primal_role, grad, grad_role)?;
        let elements = i128::from(f.batch) * i128::from(s_max) * i128::from(grad.seq_stride);
        if elements >= i128::from(INDEX_LIMIT) {
            return Err(Decline::new(
                grad.uid,
                "B · S_max · seqStride",
                elements,
                "below 2^31 elements (AITER indexes with int32)",
            ));
        }
    }
    Ok(AiterBackwardPlan {
        forward,
        ck_tile,
        workspace: BackwardWorkspace::for_problem(f, forward.workspace, ck_tile),
    })
}

#[cfg(test)]
#[path = "backward_tests.rs"]
mod tests;
