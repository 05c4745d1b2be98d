//! SDPA node rules: referenced tensors exist; Q, K, V, O have rank 4 in the layout their
//! raggedness implies (ragged-sdpa.md §1); GQA head counts divide; seq_len tensors are
//! `[B, 1, 1, 1]` or `[B]`, int32/int64; at most one deprecated causal flag.

use crate::error::ValidationError;
use crate::model::{Graph, SdpaAttributes, SdpaShared, TensorAttributes};

const RAGGED_LAYOUT: &str = "ragged tensors are [B, S, H, D] or [B, H, S, D] over BSHD memory";
const DENSE_LAYOUT: &str = "dense tensors are [B, H, S, D]";

/// The node being checked, for error messages; shared with the backward node's rules.
pub(super) struct NodeCtx<'a> {
    pub(super) graph: &'a Graph,
    pub(super) node_index: usize,
    pub(super) node_name: &'a str,
}

impl<'a> NodeCtx<'a> {
    /// The checks every SDPA node starts with: each uid it names is a tensor of the graph, and
    /// at most one deprecated causal flag is set.
    pub(super) fn open<T: SdpaShared>(
        graph: &'a Graph,
        node_index: usize,
        node_name: &'a str,
        attrs: &T,
        tensor_uids: &[(&'static str, i64)],
    ) -> Result<Self, ValidationError> {
        let ctx = NodeCtx {
            graph,
            node_index,
            node_name,
        };
        for &(field, uid) in tensor_uids {
            ctx.tensor(field, uid)?;
        }
        let [_, _, causal, causal_bottom_right] = &T::FLAGS;
        if (causal.get)(attrs) && (causal_bottom_right.get)(attrs) {
            return Err(ValidationError::BothCausalFlags {
                node_index,
                node_name: node_name.to_string(),
            });
        }
        Ok(ctx)
    }

    pub(super) fn tensor(
        &self,
        field: &'static str,
        uid: i64,
    ) -> Result<&TensorAttributes, ValidationError> {
        self.graph
            .tensor(uid)
            .ok_or_else(|| ValidationError::NodeTensorMissing {
                node_index: self.node_index,
                node_name: self.node_name.to_string(),
                field,
                uid,
            })
    }

    /// Rank-4 check; returns the head count, whose axis depends on raggedness.
    pub(super) fn heads(
        &self,
        field: &'static str,
        t: &TensorAttributes,
    ) -> Result<i64, ValidationError> {
        let layout = if t.is_ragged() {
            RAGGED_LAYOUT
        } else {
            DENSE_LAYOUT
        };
        if t.dims.len() != 4 {
            return Err(ValidationError::SdpaRank {
                node_index: self.node_index,
                node_name: self.node_name.to_string(),
                field,
                uid: t.uid,
                layout,
                dims: t.dims.clone(),
            });
        }
        Ok(t.dims[t.sdpa_head_axis()])
    }
}

/// `(head axis, sequence axis)` of a rank-4 SDPA tensor: the head axis is
/// [`TensorAttributes::sdpa_head_axis`] (ragged: from the strides, either upstream dims order;
/// dense: hipDNN's `[B, H, S, D]`), the sequence axis the other middle one.
pub(super) fn axes(t: &TensorAttributes) -> (usize, usize) {
    let head = t.sdpa_head_axis();
    (head, 3 - head)
}

pub(super) fn check_node(
    graph: &Graph,
    node_index: usize,
    node_name: &str,
    attrs: &SdpaAttributes,
) -> Result<(), ValidationError> {
    let ctx = NodeCtx::open(graph, node_index, node_name, attrs, &attrs.tensor_uids())?;

    let q = ctx.tensor("q_tensor_uid", attrs.q_tensor_uid)?;
    let h_q = ctx.heads("q_tensor_uid", q)?;
    for (field, uid) in [
        ("k_tensor_uid", attrs.k_tensor_uid),
        ("v_tensor_uid", attrs.v_tensor_uid),
    ] {
        check_kv_heads(&ctx, q, h_q, field, uid)?;
    }
    let o = ctx.tensor("o_tensor_uid", attrs.o_tensor_uid)?;
    ctx.heads("o_tensor_uid", o)?;

    // A paged graph's K and V are page pools and its Q may be one packed row of every sequence's
    // tokens, so its batch is the page table's row count (kernels/core/paged-kv-and-sinks.md
    // §2.3, §3.3); otherwise it is Q's dims[0].
    let batch = match attrs.page_table_k_tensor_uid {
        Some(uid) => ctx
            .tensor("page_table_k_tensor_uid", uid)?
            .dims
            .first()
            .copied()
            .unwrap_or(0),
        None => q.dims[0],
    };
    check_seq_lens(&ctx, attrs, batch)
}

/// Both per-batch length tensors that are set.
pub(super) fn check_seq_lens<T: SdpaShared>(
    ctx: &NodeCtx<'_>,
    attrs: &T,
    batch: i64,
) -> Result<(), ValidationError> {
    for f in &T::SEQ_LENS {
        if let Some(uid) = (f.get)(attrs) {
            check_seq_len(ctx, f.name, uid, batch)?;
        }
    }
    Ok(())
}

/// GQA/MQA: the K or V tensor `uid` must have a positive head count dividing H_q.
pub(super) fn check_kv_heads(
    ctx: &NodeCtx<'_>,
    q: &TensorAttributes,
    h_q: i64,
    field: &'static str,
    uid: i64,
) -> Result<(), ValidationError> {
    let kv = ctx.tensor(field, uid)?;
    let h_kv = ctx.heads(field, kv)?;
    if h_kv <= 0 || h_q <= 0 || h_q % h_kv != 0 {
        return Err(ValidationError::SdpaHeadsNotMultiple {
            node_index: ctx.node_index,
            node_name: ctx.node_name.to_string(),
            field,
            q_uid: q.uid,
            h_q,
            kv_uid: uid,
            h_kv,
        });
    }
    Ok(())
}

/// A per-batch length tensor: `[B, 1, 1, 1]`, int32 or int64.
pub(super) fn check_seq_len(
    ctx: &NodeCtx<'_>,
    field: &'static str,
    uid: i64,
    batch: i64,
) -> Result<(), ValidationError> {
    let t = ctx.tensor(field, uid)?;
    if t.dims != [batch, 1, 1, 1] && t.dims != [batch] {
        return Err(ValidationError::SeqLenShape {
            node_index: ctx.node_index,
            node_name: ctx.node_name.to_string(),
            field,
            uid,
            expected: vec![batch, 1, 1, 1],
            dims: t.dims.clone(),
        });
    }
    if !t.data_type.is_index_type() {
        return Err(ValidationError::SeqLenDataType {
            node_index: ctx.node_index,
            node_name: ctx.node_name.to_string(),
            field,
            uid,
            data_type: t.data_type,
        });
    }
    Ok(())
}
