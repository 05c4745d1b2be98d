//! SDPA backward node rules: every role is in the graph; Q, K, V, O and the gradients have rank 4
//! with the forward's layout rules; dQ, dK, dV, dO have the dims of Q, K, V, O; O, dO and dQ
//! address their tokens as Q does, dK and dV as K does (the same token starts, whatever their
//! head dims); the stats are a FLOAT `[B, H_q, S_q, 1]`
//! in either of the forward's orders; seq_len tensors and the causal flags as in the forward.

use super::sdpa::{NodeCtx, axes, check_kv_heads, check_seq_lens};
use crate::error::ValidationError;
use crate::model::{DataType, Graph, SdpaBackwardAttributes, TensorAttributes};

pub(super) fn check_node(
    graph: &Graph,
    node_index: usize,
    node_name: &str,
    attrs: &SdpaBackwardAttributes,
) -> Result<(), ValidationError> {
    let ctx = NodeCtx::open(graph, node_index, node_name, attrs, &attrs.tensor_uids())?;
    let role = |field: &'static str, uid: i64| -> Result<Role<'_>, ValidationError> {
        let tensor = ctx.tensor(field, uid)?;
        ctx.heads(field, tensor)?;
        Ok(Role { field, tensor })
    };
    let q = role("q_tensor_uid", attrs.q_tensor_uid)?;
    let k = role("k_tensor_uid", attrs.k_tensor_uid)?;
    let v = role("v_tensor_uid", attrs.v_tensor_uid)?;
    let o = role("o_tensor_uid", attrs.o_tensor_uid)?;
    let d_o = role("do_tensor_uid", attrs.do_tensor_uid)?;
    let dq = role("dq_tensor_uid", attrs.dq_tensor_uid)?;
    let dk = role("dk_tensor_uid", attrs.dk_tensor_uid)?;
    let dv = role("dv_tensor_uid", attrs.dv_tensor_uid)?;

    let h_q = ctx.heads(q.field, q.tensor)?;
    check_kv_heads(&ctx, q.tensor, h_q, k.field, k.tensor.uid)?;
    check_kv_heads(&ctx, q.tensor, h_q, v.field, v.tensor.uid)?;
    for (grad, primal) in [(&dq, &q), (&dk, &k), (&dv, &v), (&d_o, &o)] {
        same_dims(&ctx, grad, primal)?;
    }
    for (member, leader) in [(&o, &q), (&d_o, &q), (&dq, &q), (&dk, &k), (&dv, &k)] {
        same_tokens(&ctx, member, leader)?;
    }
    check_stats(&ctx, attrs.stats_tensor_uid, q.tensor, h_q)?;
    check_seq_lens(&ctx, attrs, q.tensor.dims[0])
}

/// A tensor in the role a field gives it.
struct Role<'a> {
    field: &'static str,
    tensor: &'a TensorAttributes,
}

fn same_dims(ctx: &NodeCtx<'_>, grad: &Role<'_>, primal: &Role<'_>) -> Result<(), ValidationError> {
    if grad.tensor.dims == primal.tensor.dims {
        return Ok(());
    }
    Err(ValidationError::BackwardDims {
        node_index: ctx.node_index,
        node_name: ctx.node_name.to_string(),
        field: grad.field,
        uid: grad.tensor.uid,
        like_field: primal.field,
        expected: primal.tensor.dims.clone(),
        dims: grad.tensor.dims.clone(),
    })
}

/// Same token starts as the leader: both dense, or both ragged over the same aux uid with the
/// same ratio of multiplier to sequence stride (a batch then starts on the same token in both:
/// its start, offset × multiplier elements, is that many elements over the sequence stride in
/// tokens). Where the head dims differ (Q/K 192 with V/O 128) the strides of packed tensors
/// differ, and offsets counted in tokens (multiplier = sequence stride) serve both. Dense tensors
/// may have any strides, as in the forward.
fn same_tokens(
    ctx: &NodeCtx<'_>,
    member: &Role<'_>,
    leader: &Role<'_>,
) -> Result<(), ValidationError> {
    let (m, l) = (member.tensor, leader.tensor);
    let seq_stride = |t: &TensorAttributes| t.strides.get(axes(t).1).copied();
    let describe_ragged =
        |t: &TensorAttributes| if t.is_ragged() { "ragged" } else { "dense" }.to_string();
    let mismatch: Option<(&'static str, String, String)> = if m.is_ragged() != l.is_ragged() {
        Some(("raggedness", describe_ragged(m), describe_ragged(l)))
    } else if !m.is_ragged() {
        None
    } else if m.ragged_offset_tensor_uid != l.ragged_offset_tensor_uid {
        Some((
            "ragged_offset_tensor_uid",
            format!("{:?}", m.ragged_offset_tensor_uid),
            format!("{:?}", l.ragged_offset_tensor_uid),
        ))
    } else {
        match (seq_stride(m), seq_stride(l)) {
            (Some(ms), Some(ls)) if ms == ls => {
                (m.ragged_offset_multiplier != l.ragged_offset_multiplier).then(|| {
                    (
                        "ragged_offset_multiplier",
                        m.ragged_offset_multiplier.to_string(),
                        l.ragged_offset_multiplier.to_string(),
                    )
                })
            }
            (Some(ms), Some(ls)) => (i128::from(m.ragged_offset_multiplier) * i128::from(ls)
                != i128::from(l.ragged_offset_multiplier) * i128::from(ms))
            .then(|| {
                (
                    "ragged_offset_multiplier / sequence stride",
                    format!("{} / {ms}", m.ragged_offset_multiplier),
                    format!(
                        "{} / {ls} or another pair of that ratio (the same token starts)",
                        l.ragged_offset_multiplier
                    ),
                )
            }),
            (ms, ls) => Some(("sequence stride", format!("{ms:?}"), format!("{ls:?}"))),
        }
    };
    match mismatch {
        None => Ok(()),
        Some((what, value, expected)) => Err(ValidationError::BackwardLayout {
            node_index: ctx.node_index,
            node_name: ctx.node_name.to_string(),
            field: member.field,
            uid: m.uid,
            like_field: leader.field,
            like_uid: l.uid,
            mismatch: format!("{what} is {value}, expected {expected}"),
        }),
    }
}

/// The forward's LSE as the backward reads it: FLOAT, `[B, H_q, S_q, 1]` or `[B, S_q, H_q, 1]`
/// with S_q Q's padded length.
fn check_stats(
    ctx: &NodeCtx<'_>,
    uid: i64,
    q: &TensorAttributes,
    h_q: i64,
) -> Result<(), ValidationError> {
    let stats = ctx.tensor("stats_tensor_uid", uid)?;
    let s_q = q.dims[axes(q).1];
    let head_major = vec![q.dims[0], h_q, s_q, 1];
    let token_major = vec![q.dims[0], s_q, h_q, 1];
    if stats.dims != head_major && stats.dims != token_major {
        return Err(ValidationError::BackwardStatsShape {
            node_index: ctx.node_index,
            node_name: ctx.node_name.to_string(),
            uid,
            head_major,
            token_major,
            dims: stats.dims.clone(),
        });
    }
    if stats.data_type != DataType::Float {
        return Err(ValidationError::BackwardStatsDataType {
            node_index: ctx.node_index,
            node_name: ctx.node_name.to_string(),
            uid,
            data_type: stats.data_type,
        });
    }
    Ok(())
}
