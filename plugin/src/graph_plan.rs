//! Multi-node graphs (RFC §4.9, §4.10.1): maps a validated hipDNN graph onto the CPU executor's
//! own [`ExecGraph`], declining in the contract's four-part form (uid, field, value, need)
//! whatever the executor cannot run. Only the host engine runs the result
//! (`ragged_engine_host::graph`); GPU engines decline it.

use ragged_core::SdpaParams;
use ragged_core::graph::{
    ExecGraph, ExecNode, NodeOp, PointwiseNode, PointwiseOp, RaggedDesc, SdpaNode, TensorDesc,
};
use ragged_core::{Decline, Multiplier};
use ragged_schema::{Graph, NodeAttributes, PointwiseAttributes, SdpaAttributes, TensorAttributes};

use crate::problem;

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
pub fn build(graph: &Graph) -> Result<ExecGraph, Decline> {
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
    Ok(ExecGraph { tensors, nodes })
}

const NEED_NODE: &str = "SdpaAttributes (forward) or PointwiseAttributes in a multi-node graph";

fn tensor_desc(t: &TensorAttributes) -> Result<TensorDesc, Decline> {
    let Some(data_type) = problem::kernel_type(t.data_type) else {
        return Err(Decline::new(
            t.uid,
            "data_type",
            format!("{:?}", t.data_type),
            "FLOAT, HALF, BFLOAT16, INT32 or INT64 (FP8 runs in a single SDPA forward node only)",
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
    let ragged = match t.ragged_offset_tensor_uid {
        None => None,
        Some(aux_uid) => Some(RaggedDesc {
            aux_uid,
            multiplier: Multiplier::new(t.ragged_offset_multiplier).ok_or_else(|| {
                Decline::new(
                    t.uid,
                    "ragged_offset_multiplier",
                    t.ragged_offset_multiplier,
                    "at least 1",
                )
            })?,
        }),
    };
    Ok(TensorDesc {
        uid: t.uid,
        data_type,
        dims: t.dims.clone(),
        strides: t.strides.clone(),
        is_virtual: t.is_virtual,
        ragged,
        value,
    })
}

fn sdpa_node(graph: &Graph, sdpa: &SdpaAttributes) -> Result<SdpaNode, Decline> {
    problem::check_unsupported_features(sdpa)?;
    problem::check_no_serving_features(sdpa)?;
    problem::check_no_fp8_fields(
        sdpa,
        "a multi-node graph runs no FP8 attention (a single SDPA forward node does)",
    )?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use ragged_schema::{DataType, Node, PointwiseMode, SdpaBackwardAttributes, TensorValue};

    fn dense(uid: i64) -> TensorAttributes {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("t{uid}"))
            .set_data_type(DataType::Float)
            .set_dims(vec![2, 3, 1, 4])
            .set_strides(vec![12, 4, 4, 1])
    }

    /// `y = x + r`, then `z = exp(y)`: every tensor dense f32.
    fn chain() -> Graph {
        let (x, r, y, z) = (dense(1), dense(2), dense(3).set_is_virtual(true), dense(4));
        let add = PointwiseAttributes::binary(PointwiseMode::ADD, &x, &r, &y);
        let exp = PointwiseAttributes::unary(PointwiseMode::EXP, &y, &z);
        Graph::new("chain")
            .add_tensor(x)
            .add_tensor(r)
            .add_tensor(y)
            .add_tensor(z)
            .add_node(Node::pointwise("add", add))
            .add_node(Node::pointwise("exp", exp))
    }

    fn declined(graph: &Graph) -> String {
        match build(graph) {
            Ok(plan) => panic!("expected a decline, planned {plan:?}"),
            Err(d) => d.to_string(),
        }
    }

    fn pointwise_mut(graph: &mut Graph, index: usize) -> &mut PointwiseAttributes {
        match &mut graph.nodes[index].attributes {
            NodeAttributes::Pointwise(p) => p,
            other => panic!("node {index} is {other:?}"),
        }
    }

    #[test]
    fn a_valid_chain_plans_and_binds_only_real_tensors() {
        let graph = chain();
        assert!(is_graph_path(&graph));
        let plan = build(&graph).unwrap_or_else(|d| panic!("{d}"));
        let signature = ragged_core::binding::Signature::graph(&plan);
        let bound: Vec<i64> = signature.buffers().iter().map(|d| d.uid).collect();
        assert_eq!(bound, vec![1, 2, 4]);
        let written: Vec<i64> = signature
            .buffers()
            .iter()
            .filter(|d| d.is_output())
            .map(|d| d.uid)
            .collect();
        assert_eq!(written, vec![4], "the virtual intermediate 3 is not bound");
    }

    #[test]
    fn a_single_sdpa_node_is_not_the_graph_path() {
        let sdpa = SdpaAttributes::new(1, 2, 3, 4);
        let graph = Graph::new("one").add_node(Node::sdpa("sdpa", sdpa));
        assert!(!is_graph_path(&graph));
    }

    #[test]
    fn node_members_the_executor_does_not_run_are_declined_by_name() {
        let mut graph = chain();
        graph.nodes[1].attributes = NodeAttributes::unsupported(5);
        let m = declined(&graph);
        assert!(m.starts_with("node \"exp\" attributes = "), "{m}");
        assert!(m.ends_with(&format!("need {NEED_NODE}")), "{m}");

        graph.nodes[1].attributes =
            NodeAttributes::SdpaBackward(SdpaBackwardAttributes::new(1, 2, 3, 4, 5, 6, 7, 8, 9));
        assert!(
            declined(&graph).contains("SdpaBackwardAttributes (union tag 15)"),
            "{}",
            declined(&graph)
        );
        graph.nodes[1].attributes = NodeAttributes::None;
        assert!(declined(&graph).contains("none (union tag NONE)"));
    }

    #[test]
    fn pointwise_modes_and_arity_are_checked() {
        let mut graph = chain();
        pointwise_mut(&mut graph, 1).operation = PointwiseMode(47);
        assert_eq!(
            declined(&graph),
            "node \"exp\" operation = TANH_FWD, need IDENTITY, EXP, RELU_FWD, ADD, SUB, MUL, DIV, MAX_OP or MIN_OP"
        );
        pointwise_mut(&mut graph, 1).operation = PointwiseMode(100);
        assert!(
            declined(&graph).starts_with("node \"exp\" operation = <unknown PointwiseMode 100>")
        );

        let mut graph = chain();
        pointwise_mut(&mut graph, 0).in_1_tensor_uid = None;
        assert_eq!(
            declined(&graph),
            "node \"add\" in_1_tensor_uid = unset, need set: ADD takes two inputs"
        );
        let mut graph = chain();
        pointwise_mut(&mut graph, 1).in_1_tensor_uid = Some(2);
        assert_eq!(
            declined(&graph),
            "tensor uid 2: node \"exp\" in_1_tensor_uid = 2, need unset: EXP takes one input"
        );
        let mut graph = chain();
        pointwise_mut(&mut graph, 0).in_2_tensor_uid = Some(2);
        assert_eq!(
            declined(&graph),
            "tensor uid 2: node \"add\" in_2_tensor_uid = 2, need unset for ADD"
        );
    }

    #[test]
    fn relu_clips_reach_the_plan() {
        let mut graph = chain();
        let p = pointwise_mut(&mut graph, 1);
        p.operation = PointwiseMode::RELU_FWD;
        p.relu_lower_clip = Some(-1.0);
        p.relu_upper_clip = Some(6.0);
        p.relu_lower_clip_slope = Some(0.1);
        let plan = build(&graph).unwrap_or_else(|d| panic!("{d}"));
        assert!(matches!(
            &plan.nodes[1].op,
            NodeOp::Pointwise(PointwiseNode {
                op: PointwiseOp::Relu { lower, upper: Some(upper), slope },
                ..
            }) if *lower == -1.0 && *upper == 6.0 && *slope == 0.1
        ));
    }

    #[test]
    fn tensors_the_executor_cannot_hold_are_declined_naming_uid_and_field() {
        let edit = |f: &dyn Fn(&mut TensorAttributes)| {
            let mut graph = chain();
            for t in graph.tensors.iter_mut().filter(|t| t.uid == 2) {
                f(t);
            }
            declined(&graph)
        };
        assert!(
            edit(&|t| t.data_type = DataType::Int8)
                .starts_with("tensor uid 2: data_type = Int8, need FLOAT"),
        );
        assert_eq!(
            edit(&|t| t.is_runtime_pass_by_value = true),
            "tensor uid 2: is_runtime_pass_by_value = true, need false: a multi-node graph reads no runtime scalar"
        );
        assert!(
            edit(&|t| t.strides.pop().map_or((), drop)).starts_with(
                "tensor uid 2: strides = [12, 4, 4], need one stride per dim (4 dims)"
            ),
        );
        assert_eq!(
            edit(&|t| {
                t.ragged_offset_tensor_uid = Some(9);
                t.dims = vec![2, 12];
                t.strides = vec![12, 1];
            }),
            "tensor uid 2: dims = [2, 12], need 4 entries for a ragged tensor"
        );
        assert_eq!(
            edit(&|t| {
                t.ragged_offset_tensor_uid = Some(9);
                t.ragged_offset_multiplier = 0;
            }),
            "tensor uid 2: ragged_offset_multiplier = 0, need at least 1"
        );
        assert!(
            edit(&|t| t.value = Some(TensorValue::Float8(7))).starts_with("tensor uid 2: value = "),
        );
    }

    #[test]
    fn an_sdpa_node_in_a_graph_needs_a_baked_scale_and_its_declared_outputs() {
        let mut sdpa = SdpaAttributes::new(1, 2, 5, 3);
        sdpa.scale_tensor_uid = Some(6);
        let scale = TensorAttributes::new()
            .set_uid(6)
            .set_name("scale")
            .set_data_type(DataType::Float)
            .set_dims(vec![1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1]);
        let mut graph = chain().add_tensor(dense(5)).add_tensor(scale);
        graph.nodes.insert(0, Node::sdpa("sdpa", sdpa.clone()));
        assert_eq!(
            declined(&graph),
            "tensor uid 6: scale_tensor_uid value = unset, need a value baked into the graph: a multi-node graph reads no scale from memory"
        );
        for t in graph.tensors.iter_mut().filter(|t| t.uid == 6) {
            t.value = Some(TensorValue::Float32(0.5));
        }
        let plan = build(&graph).unwrap_or_else(|d| panic!("{d}"));
        assert!(matches!(&plan.nodes[0].op, NodeOp::Sdpa(s) if s.params.scale == 0.5));

        sdpa.scale_tensor_uid = Some(66);
        graph.nodes[0] = Node::sdpa("sdpa", sdpa.clone());
        assert_eq!(
            declined(&graph),
            "tensor uid 66: scale_tensor_uid = a uid not in the graph, need a tensor of the graph"
        );
        sdpa.scale_tensor_uid = None;
        sdpa.generate_stats = Some(true);
        graph.nodes[0] = Node::sdpa("sdpa", sdpa.clone());
        assert_eq!(
            declined(&graph),
            "generate_stats = true, need stats_tensor_uid set"
        );
        sdpa.generate_stats = None;
        sdpa.padding_mask = true;
        graph.nodes[0] = Node::sdpa("sdpa", sdpa.clone());
        assert!(
            declined(&graph).starts_with("padding_mask = true, need both seq_len_q_tensor_uid")
        );
        sdpa.padding_mask = false;
        sdpa.dropout_mask_tensor_uid = Some(2);
        graph.nodes[0] = Node::sdpa("sdpa", sdpa);
        assert!(
            declined(&graph).starts_with("tensor uid 2: dropout_mask_tensor_uid = 2"),
            "{}",
            declined(&graph)
        );
    }
}
