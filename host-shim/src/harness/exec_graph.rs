//! The reference path of a multi-node graph: hipDNN's graph described for kernels' CPU executor
//! (RFC §4.10.1), which walks it in order, running SDPA and pointwise plans.
//!
//! The harness writes this mapping itself rather than borrowing the plugin's, so the plugin's
//! reading of a graph is checked against a second reading, not against itself.

use ragged_core::Multiplier;
use ragged_reference::executor::{
    ExecGraph, ExecNode, NodeOp, PointwiseNode, PointwiseOp, RaggedDesc, SdpaNode, TensorDesc,
};
use ragged_schema::model::{Graph, NodeAttributes, PointwiseAttributes, TensorValue};

use super::bundle::{Bundle, kernel_type};
use super::sdpa_op::SdpaRoles;
use crate::host_error::HostError;

/// The executor's graph for `graph`; `bundle` resolves an SDPA node's scale tensor.
pub fn exec_graph(graph: &Graph, bundle: &Bundle) -> Result<ExecGraph, HostError> {
    let mut tensors = Vec::with_capacity(graph.tensors.len());
    for t in &graph.tensors {
        let value = match t.value {
            None => None,
            Some(TensorValue::Float8(_)) => {
                return Err(HostError::Harness(format!(
                    "tensor uid {} holds an fp8-encoded value, which the harness cannot read",
                    t.uid
                )));
            }
            Some(v) => Some(v.as_f64()),
        };
        let ragged = match t.ragged_offset_tensor_uid {
            None => None,
            Some(aux_uid) => Some(RaggedDesc {
                aux_uid,
                multiplier: Multiplier::new(t.ragged_offset_multiplier).ok_or_else(|| {
                    HostError::Harness(format!(
                        "tensor uid {}: ragged_offset_multiplier = {} is below 1",
                        t.uid, t.ragged_offset_multiplier
                    ))
                })?,
            }),
        };
        tensors.push(TensorDesc {
            uid: t.uid,
            data_type: kernel_type(t)?,
            dims: t.dims.clone(),
            strides: t.strides.clone(),
            is_virtual: t.is_virtual,
            ragged,
            value,
        });
    }
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        let op = match &node.attributes {
            NodeAttributes::Sdpa(a) => {
                let roles = SdpaRoles::of_node(a);
                NodeOp::Sdpa(SdpaNode {
                    q: a.q_tensor_uid,
                    k: a.k_tensor_uid,
                    v: a.v_tensor_uid,
                    o: a.o_tensor_uid,
                    stats: a.stats_tensor_uid,
                    seq_len_q: a.seq_len_q_tensor_uid,
                    seq_len_kv: a.seq_len_kv_tensor_uid,
                    params: roles.params(graph, bundle)?,
                })
            }
            NodeAttributes::Pointwise(p) => NodeOp::Pointwise(pointwise(&node.name, p)?),
            other => {
                return Err(HostError::Harness(format!(
                    "node '{}' has union tag {}; the multi-node harness runs SDPA forward and pointwise nodes",
                    node.name,
                    other.tag()
                )));
            }
        };
        nodes.push(ExecNode {
            name: node.name.clone(),
            op,
        });
    }
    Ok(ExecGraph { tensors, nodes })
}

fn pointwise(node: &str, p: &PointwiseAttributes) -> Result<PointwiseNode, HostError> {
    if let Some(uid) = p.in_2_tensor_uid.or(p.axis_tensor_uid) {
        return Err(HostError::Harness(format!(
            "node '{node}': tensor uid {uid} is an in_2 or axis input, which no mode the harness runs reads"
        )));
    }
    let name = p.operation.name().unwrap_or("an unknown PointwiseMode");
    let mut op = PointwiseOp::from_mode_name(name)
        .map_err(|e| HostError::Harness(format!("node '{node}': {e}")))?;
    if let PointwiseOp::Relu {
        lower,
        upper,
        slope,
    } = &mut op
    {
        *lower = p.relu_lower_clip.unwrap_or(0.0);
        *upper = p.relu_upper_clip;
        *slope = p.relu_lower_clip_slope.unwrap_or(0.0);
    }
    Ok(PointwiseNode {
        op,
        in_0: p.in_0_tensor_uid,
        in_1: p.in_1_tensor_uid,
        out_0: p.out_0_tensor_uid,
    })
}
