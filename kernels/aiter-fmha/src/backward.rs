//! The AITER engine's ragged SDPA backward (issue 15 item 6): which backward problems it takes,
//! with which settings, and its workspace.
//!
//! AITER's `mha_bwd` recomputes P from Q, K and the forward's LSE, so the backward is the
//! forward's problem (same Q/K/V/O layouts, lengths, band and scale, hence the forward's own
//! applicability) plus dO and the three gradients. AITER addresses Q, O, dO and dQ through one
//! token-start array (`seqstart_q`), and K, V, dK and dV through another, so each gradient must
//! yield its primal's token starts; its strides may differ (AITER takes one per tensor).

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
    /// `use_asm_v3` for `mha_bwd`.
    pub use_asm_v3: bool,
    /// The workspace: the forward's layout, then the D (rowsum dO·O) scratch.
    pub workspace: BackwardWorkspace,
}

/// The backward's device scratch, all sized from graph dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardWorkspace {
    /// The forward's regions: token starts, lengths, cumulative lengths, status, and the LSE
    /// scratch (here an input: the LSE pre-pass fills it from the stats tensor).
    pub forward: WorkspacePlan,
    /// f32 `[H_q, B·S_q_max]`: AITER's D (`d_ptr`), laid out like the LSE scratch.
    pub d_scratch: Region,
    /// Bytes the caller must provide, slack for base alignment included.
    pub size: usize,
}

impl BackwardWorkspace {
    /// The forward's layout with the D scratch after its last region. `forward.size` carries
    /// the forward's alignment slack, which the end offset recovers.
    pub fn for_problem(problem: &AiterProblem, forward: WorkspacePlan) -> Self {
        let end = forward.size.saturating_sub(WORKSPACE_ALIGN - 1);
        let heads = usize::try_from(problem.q.heads).unwrap_or(0);
        let rows = usize::try_from(WorkspacePlan::scratch_head_stride(problem)).unwrap_or(0);
        let bytes = heads
            .saturating_mul(rows)
            .saturating_mul(std::mem::size_of::<f32>());
        let d_scratch = Region { offset: end, bytes };
        let used = end
            .saturating_add(bytes)
            .div_ceil(WORKSPACE_ALIGN)
            .saturating_mul(WORKSPACE_ALIGN);
        Self {
            forward,
            d_scratch,
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
        // The forward's rule: no asm for top-left bands (AITER's asm keys causal on the
        // totals, pitfall 2), for D 192/128 on gfx942, or for padded queries (how asm indexes
        // the LSE there is unpinned). The same questions are open for the asm backward, whose
        // LSE and D share the forward's layout; a hardware run decides.
        use_asm_v3: forward.use_asm_v3,
        workspace: BackwardWorkspace::for_problem(f, forward.workspace),
    })
}

#[cfg(test)]
#[path = "backward_tests.rs"]
mod tests;
