//! The SDPA backward node: flatc's own encoding and a hand-written hipDNN JSON dump read back to
//! the expected model, round trips binary ↔ model ↔ JSON, schema defaults for absent fields,
//! validation messages naming uid, field and value, and the unchanged minimum-version rule.

use ragged_schema::version::{API_1_3_0, compute_minimum_plugin_api_version};
use ragged_schema::{
    DataType, DiagonalAlignment, Graph, Node, NodeAttributes, SchemaError, SdpaBackwardAttributes,
    TensorAttributes, ValidationError, wire,
};

const FLATC_GRAPH: &[u8] = include_bytes!("flatc/sdpa_backward_graph.bin");
const DUMP: &str = include_str!("golden/sdpa_backward.json");

fn backward(g: &Graph, i: usize) -> &SdpaBackwardAttributes {
    match &g.nodes[i].attributes {
        NodeAttributes::SdpaBackward(s) => s,
        other => panic!("node {i} is not a backward node: {other:?}"),
    }
}

/// What `flatc/sdpa_backward_graph.json` says, written out field by field.
fn flatc_every_field() -> SdpaBackwardAttributes {
    SdpaBackwardAttributes {
        q_tensor_uid: 1,
        k_tensor_uid: 2,
        v_tensor_uid: 3,
        o_tensor_uid: 4,
        do_tensor_uid: 7,
        stats_tensor_uid: 8,
        dq_tensor_uid: 10,
        dk_tensor_uid: 11,
        dv_tensor_uid: 12,
        scale_tensor_uid: Some(20),
        attn_mask_tensor_uid: Some(21),
        seq_len_q_tensor_uid: Some(13),
        seq_len_kv_tensor_uid: Some(14),
        seed_tensor_uid: Some(22),
        offset_tensor_uid: Some(23),
        dropout_mask_tensor_uid: Some(24),
        dropout_scale_tensor_uid: Some(25),
        dropout_scale_inv_tensor_uid: Some(26),
        dbias_tensor_uid: Some(27),
        alibi_mask: true,
        padding_mask: true,
        causal_mask: false,
        causal_mask_bottom_right: true,
        dropout_probability: Some(0.125),
        attn_scale_value: Some(0.25),
        left_bound: Some(3),
        right_bound: Some(0),
        diagonal_alignment: DiagonalAlignment::BottomRight,
    }
}

fn decode_flatc() -> Graph {
    wire::decode_graph(FLATC_GRAPH).unwrap_or_else(|e| panic!("flatc buffer must decode: {e}"))
}

#[test]
fn flatc_written_backward_node_reads_every_field() {
    let g = decode_flatc();
    assert_eq!(g.nodes[0].name, "every_field");
    assert_eq!(backward(&g, 0), &flatc_every_field());
}

#[test]
fn absent_wire_fields_take_the_schema_defaults() {
    let g = decode_flatc();
    assert_eq!(g.nodes[1].name, "required_only");
    assert_eq!(
        backward(&g, 1),
        &SdpaBackwardAttributes::new(1, 2, 3, 4, 7, 8, 10, 11, 12)
    );
}

#[test]
fn binary_model_json_round_trips_are_lossless() {
    let g = decode_flatc();
    let again = wire::decode_graph(&wire::encode_graph_exact(&g)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, g);
    let from_json = Graph::from_json(&g.to_json()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        from_json,
        Graph {
            // The JSON writer always writes the project flag, true for a ragged graph.
            is_ragged_tensor_enabled: true,
            ..g
        }
    );
}

fn dump_expected() -> SdpaBackwardAttributes {
    SdpaBackwardAttributes {
        seq_len_q_tensor_uid: Some(9),
        padding_mask: true,
        attn_scale_value: Some(0.25),
        right_bound: Some(0),
        ..SdpaBackwardAttributes::new(1, 2, 3, 4, 7, 8, 10, 11, 12)
    }
}

#[test]
fn hipdnn_json_dump_reads_and_validates() {
    let g = Graph::from_json(DUMP).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.nodes[0].name, "sdpa_bwd");
    assert_eq!(backward(&g, 0), &dump_expected());
    assert_eq!(g.tensors.len(), 12);
    assert_eq!(g.validate(), Ok(()));
    let bytes = wire::encode_graph(&g);
    let decoded = wire::decode_graph(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(backward(&decoded, 0), &dump_expected());
}

/// The writer emits upstream's keys, in upstream's sections, unset ones as null.
#[test]
fn json_writer_uses_upstreams_sections_and_keys() {
    let g = Graph::from_json(DUMP).unwrap_or_else(|e| panic!("{e}"));
    let value: serde_json::Value =
        serde_json::from_str(&g.to_json()).unwrap_or_else(|e| panic!("{e}"));
    let node = &value["nodes"][0];
    assert_eq!(node["type"], "SdpaBackwardAttributes");
    let keys = |section: &str| -> Vec<String> {
        node[section]
            .as_object()
            .unwrap_or_else(|| panic!("{section} is an object"))
            .keys()
            .cloned()
            .collect()
    };
    assert_eq!(
        keys("inputs"),
        [
            "q_tensor_uid",
            "k_tensor_uid",
            "v_tensor_uid",
            "o_tensor_uid",
            "do_tensor_uid",
            "stats_tensor_uid",
            "scale_tensor_uid",
            "attn_mask_tensor_uid",
            "seq_len_q_tensor_uid",
            "seq_len_kv_tensor_uid",
            "seed_tensor_uid",
            "offset_tensor_uid",
            "dropout_mask_tensor_uid",
            "dropout_scale_tensor_uid",
            "dropout_scale_inv_tensor_uid",
        ]
    );
    assert_eq!(
        keys("outputs"),
        [
            "dq_tensor_uid",
            "dk_tensor_uid",
            "dv_tensor_uid",
            "dbias_tensor_uid"
        ]
    );
    assert_eq!(
        keys("attributes"),
        [
            "alibi_mask",
            "padding_mask",
            "causal_mask",
            "causal_mask_bottom_right",
            "dropout_probability",
            "attn_scale_value",
            "left_bound",
            "right_bound",
            "diagonal_alignment",
        ]
    );
    assert!(node["inputs"]["scale_tensor_uid"].is_null());
    assert_eq!(node["inputs"]["seq_len_q_tensor_uid"], 9);
    assert!(node["outputs"]["dbias_tensor_uid"].is_null());
    assert_eq!(node["attributes"]["diagonal_alignment"], "TOP_LEFT");
}

#[test]
fn json_absent_optional_keys_read_as_defaults_but_required_ones_are_errors() {
    let minimal = r#"{"name": "m", "compute_data_type": "float", "io_data_type": "float",
        "intermediate_data_type": "float", "tensors": [], "nodes": [{
        "type": "SdpaBackwardAttributes", "name": "b",
        "inputs": {"q_tensor_uid": 1, "k_tensor_uid": 2, "v_tensor_uid": 3, "o_tensor_uid": 4,
                   "do_tensor_uid": 5, "stats_tensor_uid": 6},
        "outputs": {"dq_tensor_uid": 7, "dk_tensor_uid": 8, "dv_tensor_uid": 9}}]}"#;
    let g = Graph::from_json(minimal).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        backward(&g, 0),
        &SdpaBackwardAttributes::new(1, 2, 3, 4, 5, 6, 7, 8, 9)
    );
    let without_do = minimal.replace(r#""do_tensor_uid": 5, "#, "");
    let err = Graph::from_json(&without_do).map(|_| ()).unwrap_err();
    assert!(
        err.to_string().contains("nodes[0].inputs.do_tensor_uid"),
        "{err}"
    );
    let bad_alignment = minimal.replace(
        r#""dv_tensor_uid": 9}"#,
        r#""dv_tensor_uid": 9}, "attributes": {"diagonal_alignment": "MIDDLE"}"#,
    );
    let err = Graph::from_json(&bad_alignment).map(|_| ()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("nodes[0].attributes.diagonal_alignment") && text.contains("MIDDLE"),
        "{text}"
    );
}

// ---- validation ----------------------------------------------------------------------------

fn validation_error(g: &Graph) -> ValidationError {
    match g.validate() {
        Err(SchemaError::Validation(e)) => e,
        other => panic!("expected a validation error, got {other:?}"),
    }
}

fn valid_dump() -> Graph {
    Graph::from_json(DUMP).unwrap_or_else(|e| panic!("{e}"))
}

fn tensor_mut(g: &mut Graph, uid: i64) -> &mut TensorAttributes {
    g.tensors
        .iter_mut()
        .find(|t| t.uid == uid)
        .unwrap_or_else(|| panic!("uid {uid}"))
}

fn node_mut(g: &mut Graph) -> &mut SdpaBackwardAttributes {
    match &mut g.nodes[0].attributes {
        NodeAttributes::SdpaBackward(s) => s,
        _ => panic!("not backward"),
    }
}

#[test]
fn a_missing_role_names_its_field_and_uid() {
    let mut g = valid_dump();
    node_mut(&mut g).do_tensor_uid = 99;
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("do_tensor_uid") && text.contains("uid 99"),
        "{text}"
    );
}

#[test]
fn gradient_dims_must_equal_the_primal_dims() {
    let mut g = valid_dump();
    tensor_mut(&mut g, 11).dims = vec![2, 5, 2, 32];
    let e = validation_error(&g);
    assert!(
        matches!(
            &e,
            ValidationError::BackwardDims {
                field: "dk_tensor_uid",
                uid: 11,
                like_field: "k_tensor_uid",
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("[2, 5, 2, 32]") && text.contains("[2, 5, 2, 16]"),
        "{text}"
    );
}

#[test]
fn gradients_must_share_their_leaders_token_layout() {
    let mut g = valid_dump();
    tensor_mut(&mut g, 10).ragged_offset_tensor_uid = Some(6);
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("dq_tensor_uid")
            && text.contains("uid 10")
            && text.contains("ragged_offset_tensor_uid is Some(6), expected Some(5)"),
        "{text}"
    );

    let mut g = valid_dump();
    tensor_mut(&mut g, 7).ragged_offset_tensor_uid = None;
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("do_tensor_uid") && text.contains("raggedness is dense, expected ragged"),
        "{text}"
    );

    let mut g = valid_dump();
    tensor_mut(&mut g, 12).ragged_offset_multiplier = 32;
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("dv_tensor_uid")
            && text.contains("k_tensor_uid (uid 2)")
            && text.contains("ragged_offset_multiplier is 32, expected 1"),
        "{text}"
    );
}

/// Token starts are offset × multiplier over the sequence stride: a gradient whose rows are
/// twice as wide (as V/O 128 beside Q/K 64, or 128 beside 192) shares its leader's token starts
/// with twice the multiplier, and not with the same one.
#[test]
fn a_wider_gradient_shares_token_starts_with_a_proportional_multiplier() {
    let mut g = valid_dump();
    let k_multiplier = tensor_mut(&mut g, 2).ragged_offset_multiplier;
    let dv = tensor_mut(&mut g, 12);
    let seq_axis = if dv.strides[1] > dv.strides[2] { 1 } else { 2 };
    dv.strides[0] *= 2;
    dv.strides[seq_axis] *= 2;
    let ratio_kept = 2 * k_multiplier;
    dv.ragged_offset_multiplier = ratio_kept;
    g.validate().unwrap_or_else(|e| panic!("{e}"));

    tensor_mut(&mut g, 12).ragged_offset_multiplier = k_multiplier;
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("dv_tensor_uid")
            && text.contains("k_tensor_uid (uid 2)")
            && text.contains("ragged_offset_multiplier / sequence stride is"),
        "{text}"
    );
}

#[test]
fn stats_must_be_a_float_lse_in_either_order() {
    let mut g = valid_dump();
    // Q is [2, S_q = 4, H_q = 4, 16]: only [2, 4, 4, 1] fits either order.
    tensor_mut(&mut g, 8).dims = vec![2, 4, 2, 1];
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("stats_tensor_uid tensor uid 8") && text.contains("got [2, 4, 2, 1]"),
        "{text}"
    );
    let mut g = valid_dump();
    tensor_mut(&mut g, 8).data_type = DataType::Half;
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("uid 8") && text.contains("must be float, got half"),
        "{text}"
    );
}

#[test]
fn gqa_heads_and_seq_len_shapes_follow_the_forward_rules() {
    let mut g = valid_dump();
    for uid in [2, 3, 11, 12] {
        tensor_mut(&mut g, uid).dims = vec![2, 5, 3, 16];
    }
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("H_q = 4") && text.contains("H_kv = 3"),
        "{text}"
    );

    let mut g = valid_dump();
    tensor_mut(&mut g, 9).dims = vec![3, 1, 1, 1];
    let text = validation_error(&g).to_string();
    assert!(
        text.contains("seq_len_q_tensor_uid tensor uid 9") && text.contains("got [3, 1, 1, 1]"),
        "{text}"
    );

    let mut g = valid_dump();
    let node = node_mut(&mut g);
    node.causal_mask = true;
    node.causal_mask_bottom_right = true;
    assert!(matches!(
        validation_error(&g),
        ValidationError::BothCausalFlags { .. }
    ));
}

#[test]
fn minimum_api_version_rule_is_unchanged_for_backward_graphs() {
    let ragged = valid_dump();
    assert_eq!(
        compute_minimum_plugin_api_version(&ragged).version,
        API_1_3_0
    );
    let mut dense = valid_dump();
    for t in &mut dense.tensors {
        t.ragged_offset_tensor_uid = None;
    }
    assert_eq!(
        compute_minimum_plugin_api_version(&dense).version,
        semver::Version::new(1, 0, 0)
    );
}

#[test]
fn builder_writes_a_graph_that_validates_and_round_trips() {
    let t = |uid, dims: Vec<i64>, dt| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("t{uid}"))
            .set_data_type(dt)
            .set_strides(ragged_schema_packed(&dims))
            .set_dims(dims)
    };
    let qd = vec![1, 2, 3, 8];
    let kd = vec![1, 2, 5, 8];
    let g = Graph::new("dense_backward")
        .add_tensor(t(1, qd.clone(), DataType::Float))
        .add_tensor(t(2, kd.clone(), DataType::Float))
        .add_tensor(t(3, kd.clone(), DataType::Float))
        .add_tensor(t(4, qd.clone(), DataType::Float))
        .add_tensor(t(5, qd.clone(), DataType::Float))
        .add_tensor(t(6, vec![1, 2, 3, 1], DataType::Float))
        .add_tensor(t(7, qd, DataType::Float))
        .add_tensor(t(8, kd.clone(), DataType::Float))
        .add_tensor(t(9, kd, DataType::Float))
        .add_node(Node::sdpa_backward(
            "bwd",
            SdpaBackwardAttributes::new(1, 2, 3, 4, 5, 6, 7, 8, 9)
                .set_attn_scale_value(0.5)
                .set_diagonal_band(None, Some(0), DiagonalAlignment::BottomRight),
        ));
    assert_eq!(g.validate(), Ok(()));
    let decoded = wire::decode_graph(&wire::encode_graph(&g)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(backward(&decoded, 0), backward(&g, 0));
    assert_eq!(decoded.nodes[0].attributes.tag(), 15);
}

fn ragged_schema_packed(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}
