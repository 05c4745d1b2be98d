//! The graph's one `SdpaBackwardAttributes` node → a [`BackwardProblem`], built once per graph
//! (issue 15 item 3).
//!
//! A backward must read its forward's tensors exactly as the forward did, so Q, K, V, O, the LSE
//! (`stats`), the seq_lens, the scale and the mask band go through the forward's own builder
//! ([`crate::problem::build`]) as the forward node the backward implies: every layout rule, GQA
//! check, stats layout and band resolution is the forward's by construction. What is left here is
//! dO and the three gradients (each the type, dims and layout rules of its primal) and the
//! features the CPU reference does not compute, each declined naming uid, field, value and need.

use ragged_core::Decline;
use ragged_core::problem::{BackwardProblem, Operand};
use ragged_schema::{DataType, Graph, SdpaBackwardAttributes};

use crate::{byte_extents, problem};

/// The node's problem, or the first reason to decline. The graph has passed schema validation.
pub fn build(graph: &Graph, node: &SdpaBackwardAttributes) -> Result<BackwardProblem, Decline> {
    check_unsupported_features(node)?;
    check_no_fp8(graph, node)?;
    let forward = problem::build(graph, &node.forward())?;
    byte_extents::check(&forward)?;
    let Some(lse) = forward.stats else {
        return Err(Decline::graph(
            "stats_tensor_uid",
            "unset",
            "the forward's LSE: the backward recomputes P from it",
        ));
    };
    let gradient =
        |role: &'static str, uid: i64, primal: &Operand| gradient_plan(graph, role, uid, primal);
    let p = BackwardProblem {
        d_o: gradient("do_tensor_uid", node.do_tensor_uid, &forward.o)?,
        dq: gradient("dq_tensor_uid", node.dq_tensor_uid, &forward.q)?,
        dk: gradient("dk_tensor_uid", node.dk_tensor_uid, &forward.k)?,
        dv: gradient("dv_tensor_uid", node.dv_tensor_uid, &forward.v)?,
        lse,
        forward,
    };
    byte_extents::check(&p.gradient_carrier())?;
    Ok(p)
}

/// Dropout, an additive bias, ALiBi and dBias: the CPU reference computes none of them
/// (kernels/reference/src/sdpa_backward/README.md §3), and computing the gradient of a different forward
/// silently would be worse than declining.
pub fn check_unsupported_features(node: &SdpaBackwardAttributes) -> Result<(), Decline> {
    let uids = [
        (
            "attn_mask_tensor_uid",
            node.attn_mask_tensor_uid,
            "an attention bias",
        ),
        (
            "dbias_tensor_uid",
            node.dbias_tensor_uid,
            "the bias gradient dBias",
        ),
        ("seed_tensor_uid", node.seed_tensor_uid, "dropout"),
        ("offset_tensor_uid", node.offset_tensor_uid, "dropout"),
        (
            "dropout_mask_tensor_uid",
            node.dropout_mask_tensor_uid,
            "dropout",
        ),
        (
            "dropout_scale_tensor_uid",
            node.dropout_scale_tensor_uid,
            "dropout",
        ),
        (
            "dropout_scale_inv_tensor_uid",
            node.dropout_scale_inv_tensor_uid,
            "dropout",
        ),
    ];
    if let Some((field, Some(uid), feature)) = uids.iter().find(|(_, uid, _)| uid.is_some()) {
        return Err(Decline::new(
            *uid,
            *field,
            uid,
            format!("unset: the SDPA backward does not support {feature}"),
        ));
    }
    if node.alibi_mask {
        return Err(Decline::graph(
            "alibi_mask",
            true,
            "false: the SDPA backward does not support ALiBi",
        ));
    }
    // As in the forward, only an exact 0 is "no dropout" (a NaN is no probability at all).
    if let Some(p) = node.dropout_probability.filter(|p| *p != 0.0) {
        return Err(Decline::graph(
            "dropout_probability",
            p,
            "0 (no dropout): the SDPA backward does not support dropout",
        ));
    }
    Ok(())
}

/// FP8 operands are declined by name before the generic type rules, so the reason says FP8.
fn check_no_fp8(graph: &Graph, node: &SdpaBackwardAttributes) -> Result<(), Decline> {
    let fp8 = [
        DataType::Fp8E4m3,
        DataType::Fp8E5m2,
        DataType::Fp8E8m0,
        DataType::Fp8E4m3Fnuz,
        DataType::Fp8E5m2Fnuz,
    ];
    for (field, uid) in node.tensor_uids() {
        if let Some(t) = graph.tensor(uid).filter(|t| fp8.contains(&t.data_type)) {
            return Err(Decline::new(
                uid,
                format!("{field} data type"),
                t.data_type,
                "FLOAT, HALF or BFLOAT16: the SDPA backward does not support FP8",
            ));
        }
    }
    Ok(())
}

/// A gradient (or dO): its primal's element type, and its primal's B, S, H and D along the axes
/// its own strides resolve.
fn gradient_plan(
    graph: &Graph,
    role: &'static str,
    uid: i64,
    primal: &Operand,
) -> Result<Operand, Decline> {
    let Some(t) = graph.tensor(uid) else {
        return Err(Decline::new(
            uid,
            role,
            "a uid not in the graph",
            "a tensor of the graph",
        ));
    };
    if problem::kernel_type(t.data_type) != Some(primal.dtype) {
        return Err(Decline::new(
            uid,
            format!("{role} data type"),
            t.data_type,
            format!(
                "{}, as {} uid {} (Q, K, V, O, dO and the gradients must match)",
                primal.dtype, primal.role, primal.uid
            ),
        ));
    }
    let plan = problem::tensor_plan(graph, role, t)?;
    if plan.bshd() != primal.bshd() {
        return Err(Decline::new(
            uid,
            format!("{role} [B, S, H, D]"),
            format!("{:?}", plan.bshd()),
            format!("{:?}, as {} uid {}", primal.bshd(), primal.role, primal.uid),
        ));
    }
    Ok(plan)
}

#[cfg(test)]
#[path = "backward_problem_tests.rs"]
pub(crate) mod tests;
