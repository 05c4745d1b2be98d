use ragged_core::problem::ScalePlan;
use std::sync::Arc;

use ragged_core::{DiagonalAlignment as Alignment, MaskBand};
use ragged_schema::{
    DataType, DiagonalAlignment, Graph, Node, NodeAttributes, SdpaBackwardAttributes,
    TensorAttributes,
};

use super::*;
use crate::applicability;
use crate::engines::{AITER_FMHA, CUDA_FMHA};
use ragged_core::engine::Problem;

const B: i64 = 2;
const D: i64 = 8;
const SQ: i64 = 4;
const HQ: i64 = 4;
const SKV: i64 = 5;
const HKV: i64 = 2;
const AUX_Q: i64 = 10;
const AUX_KV: i64 = 11;

fn ragged(uid: i64, s: i64, h: i64, aux: i64) -> TensorAttributes {
    TensorAttributes::new()
        .set_uid(uid)
        .set_name(format!("t{uid}"))
        .set_data_type(DataType::Float)
        .set_dims(vec![B, s, h, D])
        .set_strides(vec![s * h * D, h * D, D, 1])
        .set_ragged_offset_uid(aux)
}

fn aux(uid: i64) -> TensorAttributes {
    TensorAttributes::new()
        .set_uid(uid)
        .set_name(format!("aux{uid}"))
        .set_data_type(DataType::Int32)
        .set_dims(vec![B + 1, 1, 1, 1])
        .set_strides(vec![1, 1, 1, 1])
}

/// A ragged GQA backward (Q heads 4, KV heads 2), dense head-major LSE, causal bottom-right,
/// scale 0.5: uids q 1, k 2, v 3, o 4, dO 5, LSE 6, dQ 7, dK 8, dV 9.
pub(crate) fn graph() -> Graph {
    let node = SdpaBackwardAttributes::new(1, 2, 3, 4, 5, 6, 7, 8, 9)
        .set_attn_scale_value(0.5)
        .set_diagonal_band(None, Some(0), DiagonalAlignment::BottomRight);
    let lse = TensorAttributes::new()
        .set_uid(6)
        .set_name("lse")
        .set_data_type(DataType::Float)
        .set_dims(vec![B, HQ, SQ, 1])
        .set_strides(vec![HQ * SQ, SQ, 1, 1]);
    let mut g = Graph::new("backward")
        .set_data_types(DataType::Float, DataType::Float, DataType::Float)
        .add_tensor(lse)
        .add_tensor(aux(AUX_Q))
        .add_tensor(aux(AUX_KV));
    for (uid, s, h, a) in [
        (1, SQ, HQ, AUX_Q),
        (2, SKV, HKV, AUX_KV),
        (3, SKV, HKV, AUX_KV),
        (4, SQ, HQ, AUX_Q),
        (5, SQ, HQ, AUX_Q),
        (7, SQ, HQ, AUX_Q),
        (8, SKV, HKV, AUX_KV),
        (9, SKV, HKV, AUX_KV),
    ] {
        g = g.add_tensor(ragged(uid, s, h, a));
    }
    g.add_node(Node::sdpa_backward("bwd", node))
}

pub(crate) fn node(graph: &Graph) -> &SdpaBackwardAttributes {
    match &graph.nodes[0].attributes {
        NodeAttributes::SdpaBackward(b) => b,
        other => panic!("test node is {other:?}"),
    }
}

fn edit(graph: &mut Graph) -> &mut SdpaBackwardAttributes {
    match &mut graph.nodes[0].attributes {
        NodeAttributes::SdpaBackward(b) => b,
        other => panic!("test node is {other:?}"),
    }
}

fn accepted(graph: &Graph) -> Arc<BackwardProblem> {
    match applicability::accept(graph) {
        Ok(Problem::Backward(p)) => p,
        Ok(other) => panic!("accepted as {other:?}"),
        Err(decline) => panic!("declined: {decline}"),
    }
}

fn declined(graph: &Graph) -> Decline {
    match applicability::accept(graph) {
        Ok(accepted) => panic!("accepted: {accepted:?}"),
        Err(decline) => decline,
    }
}

#[test]
fn a_ragged_gqa_backward_keeps_every_role_and_the_forwards_band_and_scale() {
    let p = accepted(&graph());
    let uids: Vec<i64> = p
        .inputs()
        .iter()
        .chain(&p.outputs())
        .map(|t| t.uid)
        .collect();
    assert_eq!(uids, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(p.forward.stats.map(|s| s.uid), Some(6));
    assert_eq!(p.forward.scale, ScalePlan::Fixed(0.5));
    assert_eq!(
        p.forward.mask,
        MaskBand::window(None, Some(0), Alignment::BottomRight)
    );
    assert_eq!(p.dk.bshd(), [B, SKV, HKV, D]);
    assert_eq!(p.dq.ragged.map(|r| r.uid), Some(AUX_Q));
    assert_eq!(p.uid_of(ragged_core::Role::DV), Some(9));
}

#[test]
fn unsupported_features_are_declined_naming_uid_field_and_value() {
    type Edit = fn(&mut SdpaBackwardAttributes);
    let cases: [(Edit, Option<i64>, &str); 5] = [
        (
            |b| b.attn_mask_tensor_uid = Some(10),
            Some(10),
            "attn_mask_tensor_uid",
        ),
        (
            |b| b.dbias_tensor_uid = Some(11),
            Some(11),
            "dbias_tensor_uid",
        ),
        (
            |b| b.seed_tensor_uid = Some(10),
            Some(10),
            "seed_tensor_uid",
        ),
        (|b| b.alibi_mask = true, None, "alibi_mask"),
        (
            |b| b.dropout_probability = Some(0.1),
            None,
            "dropout_probability",
        ),
    ];
    for (change, uid, field) in cases {
        let mut g = graph();
        change(edit(&mut g));
        // Straight to the builder: schema validation would refuse some of these edits first
        // (the uids must name tensors), and the feature rule is what is under test.
        let decline = build(&g, node(&g)).expect_err(field);
        assert_eq!((decline.uid, decline.field.as_str()), (uid, field));
        assert!(decline.need.contains("does not support"), "{decline}");
    }
    let mut zero = graph();
    edit(&mut zero).dropout_probability = Some(0.0);
    assert!(build(&zero, node(&zero)).is_ok(), "p = 0 is no dropout");
}

#[test]
fn fp8_gradients_and_mismatched_types_are_declined_by_uid() {
    let mut g = graph();
    g.tensors.iter_mut().find(|t| t.uid == 7).unwrap().data_type = DataType::Fp8E4m3;
    let decline = build(&g, node(&g)).expect_err("fp8 dQ");
    assert_eq!(decline.uid, Some(7));
    assert!(decline.need.contains("FP8"), "{decline}");

    let mut g = graph();
    g.tensors.iter_mut().find(|t| t.uid == 8).unwrap().data_type = DataType::Half;
    let decline = build(&g, node(&g)).expect_err("half dK");
    assert_eq!(
        (decline.uid, decline.field.as_str()),
        (Some(8), "dk_tensor_uid data type")
    );
}

#[test]
fn the_forward_rules_apply_to_the_backwards_forward_tensors() {
    // A stats tensor of the wrong head count fails schema validation before the builder.
    let mut g = graph();
    g.tensors.iter_mut().find(|t| t.uid == 6).unwrap().dims = vec![B, HQ + 1, SQ, 1];
    assert_eq!(declined(&g).field, "validation");
    // Ragged memory with gaps between heads is not packed BSHD, for a gradient as for Q.
    let mut g = graph();
    let dq = g.tensors.iter_mut().find(|t| t.uid == 7).unwrap();
    dq.strides = vec![SQ * HQ * 2 * D, HQ * 2 * D, 2 * D, 1];
    let decline = build(&g, node(&g)).expect_err("gapped dQ");
    assert_eq!(decline.uid, Some(7));
    assert!(
        decline.field.starts_with("dq_tensor_uid ragged strides"),
        "{decline}"
    );
}

#[test]
fn gpu_engines_decline_this_backward_naming_why_and_the_host_engine_plans_it() {
    let p = Problem::Backward(accepted(&graph()));
    // AITER has a backward (aiter::mha_bwd); without a HIP device here it declines as unlisted.
    let decline = AITER_FMHA.plan(&p).expect_err("no HIP device");
    assert_eq!(
        (decline.field.as_str(), decline.value.as_str()),
        ("RAGGED_SDPA_AITER_FMHA", "not available in this process"),
        "{decline}"
    );
    // The CUDA engine has backward kernels, but not for FLOAT (engines/tests.rs tests the rest).
    let decline = CUDA_FMHA.plan(&p).expect_err("FLOAT");
    assert_eq!(
        (decline.uid, decline.field.as_str()),
        (Some(1), "q_tensor_uid data type")
    );
    let plan = crate::engines::HOST_REFERENCE
        .plan(&p)
        .expect("the host engine runs the backward");
    assert_eq!(plan.workspace_size(), 0);
}

#[test]
fn shape_overrides_of_a_backward_graph_are_declined_naming_why() {
    // `plan_graph` is the overrides path: it re-plans a forward node only.
    let decline = applicability::plan_graph(&crate::engines::HOST_REFERENCE, &graph())
        .map(|_| ())
        .expect_err("overrides re-plan forward nodes only");
    assert!(decline.value.contains("union tag 15"), "{decline}");
    assert!(decline.need.contains("shape overrides"), "{decline}");
}
