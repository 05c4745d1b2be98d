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

/// A paged graph whose K is not a page pool (the golden graph's ragged K) is declined naming K's
/// offsets: a pool carries none, its page table delimits the sequences.
#[test]
fn a_paged_graph_with_a_ragged_k_is_declined_naming_its_offsets() {
    let mut g = golden();
    let int32 = |uid, name: &str, dims: Vec<i64>, strides| {
        ragged_schema::TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(ragged_schema::DataType::Int32)
            .set_dims(dims)
            .set_strides(strides)
    };
    g.tensors
        .push(int32(40, "page_table_k", vec![3, 32], vec![32, 1]));
    g.tensors
        .push(int32(42, "page_table_v", vec![3, 32], vec![32, 1]));
    g.tensors.push(int32(41, "seq_len_kv", vec![3], vec![1]));
    let s = sdpa(&mut g);
    s.page_table_k_tensor_uid = Some(40);
    s.page_table_v_tensor_uid = Some(42);
    s.seq_len_kv_tensor_uid = Some(41);
    let why = reason(&g);
    assert!(
        why.starts_with("tensor uid 2: k_tensor_uid ragged_offset_tensor_uid = 6, need unset"),
        "{why}"
    );
    // One table alone: paging is all or nothing.
    sdpa(&mut g).page_table_v_tensor_uid = None;
    let why = reason(&g);
    assert!(
        why.starts_with(
            "tensor uid 40: page_table_v_tensor_uid = unset while page_table_k_tensor_uid = 40"
        ),
        "{why}"
    );
}

/// Upstream's paged bundle is accepted with its pools, tables, lengths and bound as the problem's
/// own parts; every GPU engine's contract declines it naming the page table.
#[test]
fn upstreams_paged_bundle_becomes_a_paged_problem() {
    use ragged_core::problem::{PageTable, PagedKv, QueryForm};
    let g = crate::test_graphs::paged_bundle();
    let p = problem(&g).unwrap_or_else(|why| panic!("declined: {why}"));
    let table = |role, uid| PageTable {
        role,
        uid,
        rows: 3,
        columns: 32,
        row_stride: 32,
        column_stride: 1,
        rank4: false,
        alignment: 16,
    };
    assert_eq!(
        p.paged,
        Some(PagedKv {
            table_k: table("page_table_k_tensor_uid", 5),
            table_v: table("page_table_v_tensor_uid", 6),
            max_seq_len_kv: 512,
            query: QueryForm::Packed,
        })
    );
    assert_eq!(p.batch(), 3);
    assert_eq!(
        (p.k.dims, p.k.strides),
        ([128, 2, 16, 128], [4096, 128, 256, 1])
    );
    assert_eq!((p.q.bshd(), p.sinks), ([1, 64, 16, 128], None));
    assert_eq!(p.role_of(6), Some("page_table_v_tensor_uid"));
    let gpu = ragged_core::contract::check_gpu(&p).map_err(|d| d.to_string());
    assert_eq!(
        gpu,
        Err(
            "tensor uid 5: page_table_k_tensor_uid = a page table (paged K/V: pools uid 2 and 3), \
             need unset: this engine does not read paged K/V caches (the host reference engine \
             does)"
                .to_owned()
        )
    );
}

/// What planning refuses on a paged graph, each naming the field (paged-kv-and-sinks.md §5.1).
#[test]
fn paged_shape_rules_are_checked_at_planning() {
    let base = crate::test_graphs::paged_bundle();
    fn tensor(g: &mut Graph, uid: i64) -> &mut TensorAttributes {
        g.tensors
            .iter_mut()
            .find(|t| t.uid == uid)
            .unwrap_or_else(|| panic!("uid {uid}"))
    }
    type Edit = Box<dyn Fn(&mut Graph)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|g| sdpa(g).max_seq_len_kv = Some(513)),
            "max_seq_len_kv = 513, need 1..=512",
        ),
        (
            Box::new(|g| sdpa(g).max_seq_len_kv = Some(0)),
            "max_seq_len_kv = 0, need 1..=512",
        ),
        (
            Box::new(|g| tensor(g, 5).data_type = ragged_schema::DataType::Int64),
            "tensor uid 5: page_table_k_tensor_uid data type = int64, need INT32",
        ),
        (
            Box::new(|g| {
                let t = tensor(g, 6);
                t.dims = vec![3, 2, 16];
                t.strides = vec![32, 16, 1];
            }),
            "tensor uid 6: page_table_v_tensor_uid dims / strides = [3, 2, 16] / [32, 16, 1]",
        ),
        (
            Box::new(|g| {
                let t = tensor(g, 6);
                t.dims = vec![2, 32];
            }),
            "tensor uid 6: page_table_v_tensor_uid rows (dims[0]) = 2, need 3",
        ),
        (
            Box::new(|g| sdpa(g).seq_len_q_tensor_uid = None),
            "seq_len_q_tensor_uid = unset on a paged graph (page_table_k_tensor_uid = 5)",
        ),
        (
            Box::new(|g| {
                for uid in [1, 4] {
                    let t = tensor(g, uid);
                    t.dims[0] = 2;
                }
            }),
            "tensor uid 1: q_tensor_uid dims[0] on a paged graph = 2, need 1",
        ),
        (
            Box::new(|g| tensor(g, 3).dims[1] = 1),
            "tensor uid 3: v_tensor_uid pool heads (dims[1]) = 1, need 2",
        ),
        (
            Box::new(|g| tensor(g, 2).strides[2] = 0),
            "tensor uid 2: k_tensor_uid page pool dims / strides",
        ),
    ];
    for (edit, want) in cases {
        let mut g = base.clone();
        edit(&mut g);
        let why = reason(&g);
        assert!(why.starts_with(want), "want {want:?}, got {why:?}");
    }
}

/// Sinks on a non-paged graph: FLOAT, one logit per query head, `[H_q]` or `[1, H_q, 1, 1]`.
#[test]
fn sinks_are_a_problem_part_on_any_graph() {
    use ragged_core::problem::Sinks;
    let mut g = golden();
    let sink = |dims: Vec<i64>, strides| {
        TensorAttributes::new()
            .set_uid(50)
            .set_name("sink")
            .set_data_type(ragged_schema::DataType::Float)
            .set_dims(dims)
            .set_strides(strides)
    };
    g.tensors.push(sink(vec![1, 2, 1, 1], vec![2, 1, 1, 1]));
    sdpa(&mut g).sink_token_tensor_uid = Some(50);
    let p = problem(&g).unwrap_or_else(|why| panic!("declined: {why}"));
    assert_eq!(
        p.sinks,
        Some(Sinks {
            uid: 50,
            heads: 2,
            stride: 1,
            rank4: true,
            alignment: 16
        })
    );
    let gpu = ragged_core::contract::check_gpu(&p).map_err(|d| d.to_string());
    assert!(
        gpu.as_ref()
            .is_err_and(|e| e.starts_with("tensor uid 50: sink_token_tensor_uid = per-head")),
        "{gpu:?}"
    );
    g.tensors.pop();
    g.tensors.push(sink(vec![3], vec![1]));
    assert!(
        reason(&g).starts_with("tensor uid 50: sink_token_tensor_uid dims / strides = [3] / [1]"),
        "{}",
        reason(&g)
    );
}

/// The minimum plugin API version of a paged or sink graph (paged-kv-and-sinks.md §7): page
/// tables, `max_seq_len_kv` and sinks require nothing of their own, so upstream's packed paged
/// bundle needs 1.0.0 and the same graph with ragged Q/O 1.3.0, by the ragged rule alone.
#[test]
fn paging_and_sinks_add_no_api_version_requirement() {
    use ragged_schema::version::{API_1_0_0, API_1_3_0, compute_minimum_plugin_api_version};
    let mut g = crate::test_graphs::paged_bundle();
    let need = compute_minimum_plugin_api_version(&g);
    assert_eq!((need.version, need.reasons.len()), (API_1_0_0, 0));
    g.tensors.push(
        TensorAttributes::new()
            .set_uid(9)
            .set_name("sink")
            .set_data_type(ragged_schema::DataType::Float)
            .set_dims(vec![16])
            .set_strides(vec![1]),
    );
    sdpa(&mut g).sink_token_tensor_uid = Some(9);
    assert_eq!(compute_minimum_plugin_api_version(&g).version, API_1_0_0);
    assert!(problem(&g).is_ok_and(|p| p.sinks.is_some()));
    // Ragged Q and O over one offsets tensor: the ragged rule, and only it, raises the need.
    g.tensors.push(
        TensorAttributes::new()
            .set_uid(10)
            .set_name("q_offsets")
            .set_data_type(ragged_schema::DataType::Int32)
            .set_dims(vec![4, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1]),
    );
    for uid in [1, 4] {
        let t = g
            .tensors
            .iter_mut()
            .find(|t| t.uid == uid)
            .unwrap_or_else(|| panic!("{uid}"));
        t.dims = vec![3, 64, 16, 128];
        t.strides = vec![64 * 2048, 2048, 128, 1];
        t.ragged_offset_tensor_uid = Some(10);
    }
    let need = compute_minimum_plugin_api_version(&g);
    assert_eq!(need.version, API_1_3_0);
    assert_eq!(need.reasons.len(), 2, "{:?}", need.reasons);
    let p = problem(&g).unwrap_or_else(|why| panic!("declined: {why}"));
    assert_eq!(
        p.paged.map(|p| p.query),
        Some(ragged_core::problem::QueryForm::Ragged)
    );
}

/// A multi-node graph's SDPA node with a page table or sinks is declined naming the field (the
/// graph executor runs neither).
#[test]
fn multi_node_sdpa_nodes_decline_paging_and_sinks_naming_the_field() {
    let mut g = golden();
    assert_eq!(problem::check_no_serving_features(sdpa(&mut g)), Ok(()));
    sdpa(&mut g).sink_token_tensor_uid = Some(50);
    let why = problem::check_no_serving_features(sdpa(&mut g)).map_err(|d| d.to_string());
    assert_eq!(
        why,
        Err(
            "tensor uid 50: sink_token_tensor_uid = 50, need unset in a multi-node graph: paged \
             K/V and sinks run in a single SDPA forward node"
                .to_owned()
        )
    );
    sdpa(&mut g).page_table_v_tensor_uid = Some(51);
    let why = problem::check_no_serving_features(sdpa(&mut g)).map_err(|d| d.to_string());
    assert!(why.is_err_and(|w| w.starts_with("tensor uid 51: page_table_v_tensor_uid")));
}
