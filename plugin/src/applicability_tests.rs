use super::*;
use ragged_core::problem::{IndexWidth, Offsets, ScalarType, ScalePlan};
use ragged_core::{DataType, MaskBand};
use ragged_schema::{EngineApiVersion, TensorAttributes, TensorValue};

use crate::test_graphs::{golden, sdpa};

fn reason(graph: &Graph) -> String {
    match problem(graph) {
        Ok(_) => "accepted".to_owned(),
        Err(reason) => reason.to_string(),
    }
}

/// The golden graph (graph.json in shared/testdata/wire) as the problem must copy it.
#[test]
fn golden_plan_copies_every_field_the_engine_needs() {
    let plan = match problem(&golden()) {
        Ok(plan) => plan,
        Err(reason) => panic!("declined: {reason}"),
    };
    assert_eq!(plan.q.dims, [2, 3, 2, 16]);
    assert_eq!(plan.q.strides, [96, 32, 16, 1]);
    assert_eq!(plan.q.dtype, DataType::BF16);
    assert_eq!(
        (plan.q.role, plan.q.uid, plan.q.alignment),
        ("q_tensor_uid", 1, 16)
    );
    assert_eq!(
        plan.q.ragged,
        Some(Offsets {
            uid: 5,
            width: IndexWidth::I32,
            multiplier: ragged_core::Multiplier::ONE
        })
    );
    assert_eq!(plan.q.bshd(), [2, 3, 2, 16]);
    assert_eq!(plan.q.seq_stride(), 32);
    assert_eq!((plan.k.bshd(), plan.k.dims), ([2, 4, 1, 16], [2, 4, 1, 16]));
    assert_eq!(plan.k.ragged.map(|r| r.uid), Some(6));
    assert_eq!(plan.v.ragged.map(|r| r.uid), Some(6));
    assert_eq!(plan.o.ragged.map(|r| r.uid), Some(5));
    let stats = plan
        .stats
        .as_ref()
        .map(|s| (s.uid, s.dtype, s.dims, s.strides, s.ragged));
    assert_eq!(
        stats,
        Some((9, DataType::F32, [2, 2, 3, 1], [6, 3, 1, 1], None))
    );
    assert_eq!(plan.stats.map(|s| s.bshd()), Some([2, 3, 2, 1]));
    assert_eq!((plan.seq_len_q, plan.seq_len_kv), (None, None));
    assert_eq!(plan.scale, ScalePlan::Fixed(0.25));
    // causal_mask_bottom_right: right bound 0, bottom-right alignment, no left bound.
    assert_eq!(plan.mask, MaskBand::causal_bottom_right());
}

#[test]
fn decline_reasons_name_the_field_and_value() {
    let mut g = golden();
    sdpa(&mut g).attn_mask_tensor_uid = Some(9);
    assert_eq!(
        reason(&g),
        "tensor uid 9: attn_mask_tensor_uid = 9, need unset: that SDPA feature is not supported"
    );

    let mut g = golden();
    g.min_required_engine_api_version = Some(EngineApiVersion::new(1, 5, 0));
    assert_eq!(
        reason(&g),
        "min_required_engine_api_version = 1.5.0, need at most the supported ceiling 1.3.0"
    );

    let mut g = golden();
    g.nodes[0].attributes = NodeAttributes::unsupported(9);
    assert_eq!(
        reason(&g),
        "node \"sdpa\" attributes = MatmulAttributes (union tag 9), need SdpaAttributes"
    );

    let mut g = golden();
    sdpa(&mut g).generate_stats = Some(true);
    sdpa(&mut g).stats_tensor_uid = None;
    assert_eq!(
        reason(&g),
        "generate_stats = true, need stats_tensor_uid set"
    );
}

/// The golden graph with every ragged primary written in cuDNN's `[B, H, S, D]` dims order over
/// the same BSHD memory (upstream's `RaggedSdpaTestUtils.hpp` form).
fn golden_in_bhsd_order() -> Graph {
    let mut g = golden();
    for t in g
        .tensors
        .iter_mut()
        .filter(|t| [1, 2, 3, 4].contains(&t.uid))
    {
        t.dims.swap(1, 2);
        t.strides.swap(1, 2);
    }
    g
}

#[test]
fn both_ragged_dims_orders_give_one_problem() {
    let (a, b) = match (problem(&golden()), problem(&golden_in_bhsd_order())) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => panic!("declined: {:?} / {:?}", a.err(), b.err()),
    };
    for (x, y) in a.primaries().into_iter().zip(b.primaries()) {
        assert_eq!(x.bshd(), y.bshd(), "{}", x.role);
        assert_eq!(
            (x.seq_stride(), x.head_stride(), x.dim_stride()),
            (y.seq_stride(), y.head_stride(), y.dim_stride()),
            "{}",
            x.role
        );
    }
    assert_eq!(b.q.dims, [2, 2, 3, 16]);
}

#[test]
fn token_major_dense_lse_is_held_head_major_over_the_same_memory() {
    let mut g = golden();
    let lse = g.tensors.iter_mut().find(|t| t.uid == 9).unwrap();
    // [B, S, H, 1] with strides {S·H, H, 1, 1}.
    lse.dims = vec![2, 3, 2, 1];
    lse.strides = vec![6, 2, 1, 1];
    let stats = match problem(&g) {
        Ok(p) => p.stats.unwrap(),
        Err(why) => panic!("declined: {why}"),
    };
    assert_eq!((stats.dims, stats.strides), ([2, 2, 3, 1], [6, 1, 2, 1]));
    let lse = g.tensors.iter_mut().find(|t| t.uid == 9).unwrap();
    lse.dims = vec![2, 3, 3, 1];
    let why = reason(&g);
    assert!(why.contains("[2, 2, 3, 1] or [2, 3, 2, 1]"), "{why}");
}

#[test]
fn heads_outermost_memory_and_partial_token_multipliers_are_declined() {
    let mut g = golden_in_bhsd_order();
    // Q [B, H, S, D] = [2, 2, 3, 16] with a head stride wider than a token: not BSHD-packed.
    let q = g.tensors.iter_mut().find(|t| t.uid == 1).unwrap();
    q.strides = vec![96, 64, 32, 1];
    let why = reason(&g);
    assert!(why.contains("tensor uid 1"), "{why}");
    assert!(why.contains("dims [2, 2, 3, 16]"), "{why}");
    assert!(why.contains("[96, 64, 32, 1]"), "{why}");
    assert!(why.contains("BHSD"), "{why}");
    assert!(!why.contains("older"), "{why}");

    // [B, S, H, D] with a head stride wider than packed: tokens outermost, but rows have gaps.
    let mut g = golden();
    let o = g.tensors.iter_mut().find(|t| t.uid == 4).unwrap();
    o.strides = vec![3 * 2 * 32, 2 * 32, 32, 1];
    let why = reason(&g);
    assert!(
        why.starts_with("tensor uid 4: o_tensor_uid ragged strides"),
        "{why}"
    );
    assert!(why.contains("[192, 64, 32, 1]"), "{why}");

    // Upstream's multiplier `strides[1]`: D = 16 in this order, not the token stride 32.
    let mut g = golden_in_bhsd_order();
    let q = g.tensors.iter_mut().find(|t| t.uid == 1).unwrap();
    q.ragged_offset_multiplier = q.strides[1];
    let why = reason(&g);
    assert!(why.contains("tensor uid 1"), "{why}");
    assert!(
        why.contains("ragged_offset_multiplier (sequence stride 32"),
        "{why}"
    );
    assert!(why.contains("= 16, need 1 (element offsets)"), "{why}");
    let q = g.tensors.iter_mut().find(|t| t.uid == 1).unwrap();
    q.ragged_offset_multiplier = 32;
    let o = g.tensors.iter_mut().find(|t| t.uid == 4).unwrap();
    o.ragged_offset_multiplier = 32;
    assert_eq!(reason(&g), "accepted");
}

#[test]
fn any_dropout_probability_but_zero_is_declined() {
    for p in [0.1f32, f32::NAN, -0.5] {
        let mut g = golden();
        sdpa(&mut g).dropout_probability = Some(p);
        assert_eq!(
            reason(&g),
            format!("dropout_probability = {p}, need 0 (no dropout)")
        );
    }
    let mut g = golden();
    sdpa(&mut g).dropout_probability = Some(0.0);
    assert_eq!(reason(&g), "accepted");
}

#[test]
fn a_batch_at_i64_max_is_declined_not_overflowed() {
    let mut g = golden();
    for t in g.tensors.iter_mut().filter(|t| [1, 4, 5].contains(&t.uid)) {
        t.dims[0] = i64::MAX;
    }
    let why = reason(&g);
    assert!(why.contains("dims[0] (the batch B)"), "{why}");
    assert!(why.contains(&i64::MAX.to_string()), "{why}");
}

#[test]
fn a_scale_tensor_needs_every_dim_1() {
    for dims in [vec![-1, -1], vec![i64::MAX, 2], vec![2]] {
        let mut g = golden();
        g.tensors.push(
            TensorAttributes::new()
                .set_uid(20)
                .set_data_type(ragged_schema::DataType::Float)
                .set_dims(dims.clone())
                .set_strides(vec![1; dims.len()])
                .set_is_runtime_pass_by_value(true),
        );
        sdpa(&mut g).scale_tensor_uid = Some(20);
        assert_eq!(
            reason(&g),
            format!("tensor uid 20: scale_tensor_uid dims = {dims:?}, need every dim 1 (a scalar)")
        );
    }
}

#[test]
fn scale_resolution_order_is_tensor_value_then_attribute_then_one() {
    let mut g = golden();
    sdpa(&mut g).attn_scale_value = None;
    assert_eq!(problem(&g).map(|p| p.scale), Ok(ScalePlan::Fixed(1.0)));

    g.tensors.push(
        TensorAttributes::new()
            .set_uid(20)
            .set_data_type(ragged_schema::DataType::Float)
            .set_dims(vec![1])
            .set_strides(vec![1])
            .set_value(TensorValue::Float32(0.5)),
    );
    sdpa(&mut g).scale_tensor_uid = Some(20);
    sdpa(&mut g).attn_scale_value = Some(0.25);
    assert_eq!(problem(&g).map(|p| p.scale), Ok(ScalePlan::Fixed(0.5)));
}

#[test]
fn an_fp8_encoded_scale_value_is_declined_not_read_as_its_byte() {
    let mut g = golden();
    g.tensors.push(
        TensorAttributes::new()
            .set_uid(20)
            .set_data_type(ragged_schema::DataType::Fp8E4m3)
            .set_dims(vec![1])
            .set_strides(vec![1])
            .set_value(TensorValue::Float8(0x38)),
    );
    sdpa(&mut g).scale_tensor_uid = Some(20);
    assert_eq!(
        reason(&g),
        "tensor uid 20: scale_tensor_uid value = a Float8Value (encoding 0x38), need a value \
         that is not fp8-encoded (an fp8 scale's format is unknown)"
    );
}

#[test]
fn a_scale_tensor_without_value_is_a_host_scalar_only_when_passed_by_value() {
    for (pass_by_value, expected) in [
        (
            true,
            ScalePlan::RuntimeHostScalar {
                uid: 20,
                data_type: ScalarType::Double,
            },
        ),
        (
            false,
            ScalePlan::DeviceTensor {
                uid: 20,
                data_type: ScalarType::Double,
            },
        ),
    ] {
        let mut g = golden();
        g.tensors.push(
            TensorAttributes::new()
                .set_uid(20)
                .set_data_type(ragged_schema::DataType::Double)
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_is_runtime_pass_by_value(pass_by_value),
        );
        sdpa(&mut g).scale_tensor_uid = Some(20);
        assert_eq!(problem(&g).map(|p| p.scale), Ok(expected));
    }
}

/// Upstream's paged bundles write Q as one packed row and per-sequence lengths `[B]` with B the
/// page table's rows: such a graph passes schema validation and is declined naming the page
/// table (paging is not supported yet), not a length-shape rule that does not apply to it.
#[test]
fn a_paged_graph_is_declined_naming_its_page_table() {
    let mut g = golden();
    let int32 = |uid, name: &str, dims: Vec<i64>, strides| {
        ragged_schema::TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(ragged_schema::DataType::Int32)
            .set_dims(dims)
            .set_strides(strides)
    };
    // Three sequences by the page table and the lengths, against Q's dims[0] of 2.
    g.tensors
        .push(int32(40, "page_table_k", vec![3, 32], vec![32, 1]));
    g.tensors.push(int32(41, "seq_len_kv", vec![3], vec![1]));
    let s = sdpa(&mut g);
    s.page_table_k_tensor_uid = Some(40);
    s.seq_len_kv_tensor_uid = Some(41);
    let why = reason(&g);
    assert!(
        why.starts_with("tensor uid 40: page_table_k_tensor_uid = 40, need unset"),
        "{why}"
    );
}
