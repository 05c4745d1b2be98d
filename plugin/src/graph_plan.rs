//! Multi-node graphs (RFC §4.9, §4.10.1): maps a validated hipDNN graph onto the CPU executor's
//! own [`ExecGraph`], declining in the contract's four-part form (uid, field, value, need)
//! whatever the executor cannot run. Only the host engine runs the result
//! ([`crate::engines::host::graph`]); GPU engines decline it by the default of
//! [`crate::engines::Planner::plan_graph`].

use ragged_kernels::Decline;
use ragged_kernels::SdpaParams;
use ragged_kernels::executor::{
    ExecGraph, ExecNode, NodeOp, PointwiseNode, PointwiseOp, RaggedDesc, SdpaNode, TensorDesc,
};
use ragged_schema::{Graph, NodeAttributes, PointwiseAttributes, SdpaAttributes, TensorAttributes};

use crate::{applicability, problem};

/// A graph the host engine can run: the executor's description of it, built once per context.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphPlan {
    pub exec: ExecGraph,
}

impl GraphPlan {
    /// Tensors the caller binds: every non-virtual tensor without a baked-in value.
    pub fn bound_tensors(&self) -> impl Iterator<Item = &TensorDesc> {
        self.exec
            .tensors
            .iter()
            .filter(|t| !t.is_virtual && t.value.is_none())
    }

    /// Non-virtual tensors some node writes (the caller's outputs).
    pub fn is_output(&self, uid: i64) -> bool {
        self.exec
            .nodes
            .iter()
            .any(|n| n.op.outputs().contains(&uid))
    }
}

/// Whether `graph` takes the multi-node path: more than one node, or a pointwise node (which
/// the single-SDPA problem cannot describe).
pub fn is_graph_path(graph: &Graph) -> bool {
    graph.nodes.len() > 1
        || graph
            .nodes
            .iter()
            .any(|n| matches!(n.attributes, NodeAttributes::Pointwise(_)))
}

/// The executor's graph for a graph that passed schema validation (order, connectivity, real
/// auxes), or the first reason to decline.
pub fn build(graph: &Graph) -> Result<GraphPlan, Decline> {
    let tensors = graph
        .tensors
        .iter()
        .map(tensor_desc)
        .collect::<Result<Vec<_>, _>>()?;
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        let field = || format!("node {:?} attributes", node.name);
        let op = match &node.attributes {
            NodeAttributes::Sdpa(sdpa) => NodeOp::Sdpa(sdpa_node(graph, sdpa)?),
            NodeAttributes::Pointwise(p) => NodeOp::Pointwise(pointwise_node(&node.name, p)?),
            NodeAttributes::None => {
                return Err(Decline::graph(field(), "none (union tag NONE)", NEED_NODE));
            }
            NodeAttributes::SdpaBackward(_) => {
                return Err(Decline::graph(
                    field(),
                    "SdpaBackwardAttributes (union tag 15)",
                    NEED_NODE,
                ));
            }
            NodeAttributes::Unsupported { tag, name } => {
                return Err(Decline::graph(
                    field(),
                    format!("{name} (union tag {tag})"),
                    NEED_NODE,
                ));
            }
        };
        nodes.push(ExecNode {
            name: node.name.clone(),
            op,
        });
    }
    Ok(GraphPlan {
        exec: ExecGraph { tensors, nodes },
    })
}

const NEED_NODE: &str = "SdpaAttributes (forward) or PointwiseAttributes in a multi-node graph";

fn tensor_desc(t: &TensorAttributes) -> Result<TensorDesc, Decline> {
    let Some(data_type) = problem::kernel_type(t.data_type) else {
        return Err(Decline::new(
            t.uid,
            "data_type",
            format!("{:?}", t.data_type),
            "FLOAT, HALF, BFLOAT16, INT32 or INT64",
        ));
    };
    if t.is_runtime_pass_by_value {
        return Err(Decline::new(
            t.uid,
            "is_runtime_pass_by_value",
            true,
            "false: a multi-node graph reads no runtime scalar",
        ));
    }
    if t.dims.len() != t.strides.len() {
        return Err(Decline::new(
            t.uid,
            "strides",
            format!("{:?}", t.strides),
            format!("one stride per dim ({} dims)", t.dims.len()),
        ));
    }
    if t.ragged_offset_tensor_uid.is_some() && t.dims.len() != 4 {
        return Err(Decline::new(
            t.uid,
            "dims",
            format!("{:?}", t.dims),
            "4 entries for a ragged tensor",
        ));
    }
    if t.ragged_offset_tensor_uid.is_some() && t.ragged_offset_multiplier < 1 {
        return Err(Decline::new(
            t.uid,
            "ragged_offset_multiplier",
            t.ragged_offset_multiplier,
            "at least 1",
        ));
    }
    let value = match t.value {
        None => None,
        Some(v @ ragged_schema::TensorValue::Float8(_)) => {
            return Err(Decline::new(
                t.uid,
                "value",
                format!("{v:?}"),
                "a value that is not fp8-encoded (an fp8 value's format is unknown)",
            ));
        }
        Some(v) => Some(v.as_f64()),
    };
    Ok(TensorDesc {
        uid: t.uid,
        data_type,
        dims: t.dims.clone(),
        strides: t.strides.clone(),
        is_virtual: t.is_virtual,
        ragged: t.ragged_offset_tensor_uid.map(|aux_uid| RaggedDesc {
            aux_uid,
            multiplier: t.ragged_offset_multiplier,
        }),
        value,
    })
}

fn sdpa_node(graph: &Graph, sdpa: &SdpaAttributes) -> Result<SdpaNode, Decline> {
    applicability::check_unsupported_features(sdpa)?;
    if sdpa.padding_mask
        && (sdpa.seq_len_q_tensor_uid.is_none() || sdpa.seq_len_kv_tensor_uid.is_none())
    {
        return Err(Decline::graph(
            "padding_mask",
            true,
            "both seq_len_q_tensor_uid and seq_len_kv_tensor_uid set",
        ));
    }
    if sdpa.stats_tensor_uid.is_none() && sdpa.generate_stats == Some(true) {
        return Err(Decline::graph(
            "generate_stats",
            true,
            "stats_tensor_uid set",
        ));
    }
    Ok(SdpaNode {
        q: sdpa.q_tensor_uid,
        k: sdpa.k_tensor_uid,
        v: sdpa.v_tensor_uid,
        o: sdpa.o_tensor_uid,
        stats: sdpa.stats_tensor_uid,
        seq_len_q: sdpa.seq_len_q_tensor_uid,
        seq_len_kv: sdpa.seq_len_kv_tensor_uid,
        params: SdpaParams {
            scale: fixed_scale(graph, sdpa)?,
            band: problem::band(sdpa)?,
        },
    })
}

/// A multi-node graph's scale is baked in: a scale tensor's value, else `attn_scale_value`,
/// else 1.
fn fixed_scale(graph: &Graph, sdpa: &SdpaAttributes) -> Result<f32, Decline> {
    let Some(uid) = sdpa.scale_tensor_uid else {
        return Ok(sdpa.attn_scale_value.unwrap_or(1.0));
    };
    let Some(t) = graph.tensor(uid) else {
        return Err(Decline::new(
            uid,
            "scale_tensor_uid",
            "a uid not in the graph",
            "a tensor of the graph",
        ));
    };
    match t.value {
        Some(v @ ragged_schema::TensorValue::Float8(_)) => Err(Decline::new(
            uid,
            "scale_tensor_uid value",
            format!("{v:?}"),
            "a value that is not fp8-encoded (an fp8 scale's format is unknown)",
        )),
        Some(v) => Ok(v.as_f64() as f32),
        None => Err(Decline::new(
            uid,
            "scale_tensor_uid value",
            "unset",
            "a value baked into the graph: a multi-node graph reads no scale from memory",
        )),
    }
}

fn pointwise_node(node: &str, p: &PointwiseAttributes) -> Result<PointwiseNode, Decline> {
    let field = |f: &str| format!("node {node:?} {f}");
    let Some(name) = p.operation.name() else {
        return Err(Decline::graph(
            field("operation"),
            p.operation,
            "a PointwiseMode this schema knows",
        ));
    };
    let mut op = PointwiseOp::from_mode_name(name).map_err(|_| {
        Decline::graph(
            field("operation"),
            name,
            "IDENTITY, EXP, RELU_FWD, ADD, SUB, MUL, DIV, MAX_OP or MIN_OP",
        )
    })?;
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
    for (f, uid) in [
        ("in_2_tensor_uid", p.in_2_tensor_uid),
        ("axis_tensor_uid", p.axis_tensor_uid),
    ] {
        if let Some(uid) = uid {
            return Err(Decline::new(
                uid,
                field(f),
                uid,
                format!("unset for {name}"),
            ));
        }
    }
    match (op.is_binary(), p.in_1_tensor_uid) {
        (true, None) => Err(Decline::graph(
            field("in_1_tensor_uid"),
            "unset",
            format!("set: {name} takes two inputs"),
        )),
        (false, Some(uid)) => Err(Decline::new(
            uid,
            field("in_1_tensor_uid"),
            uid,
            format!("unset: {name} takes one input"),
        )),
        (_, in_1) => Ok(PointwiseNode {
            op,
            in_0: p.in_0_tensor_uid,
            in_1,
            out_0: p.out_0_tensor_uid,
        }),
    }
}
