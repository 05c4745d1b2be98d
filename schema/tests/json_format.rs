//! The JSON graph-dump format: snapshot of a ragged SDPA graph, defaults, strictness.

mod common;

use ragged_schema::{DataType, Graph, SchemaError, TensorValue};

#[test]
fn ragged_sdpa_graph_json_snapshot() {
    insta::assert_snapshot!(
        "ragged_sdpa_gqa_json",
        common::ragged_sdpa_graph().to_json()
    );
}

#[test]
fn json_round_trips_the_ragged_graph() {
    let g = common::ragged_sdpa_graph();
    let expected = Graph {
        is_ragged_tensor_enabled: true,
        ..g.clone()
    };
    assert_eq!(Graph::from_json(&g.to_json()), Ok(expected));
}

const MINIMAL: &str = r#"{
 "name": "minimal",
 "compute_data_type": "float",
 "io_data_type": "half",
 "intermediate_data_type": "float",
 "tensors": [
  {"uid": 1, "name": "x", "data_type": "half", "dims": [2], "strides": [1], "virtual": false,
   "ragged_offset_tensor_uid": 2}
 ],
 "nodes": []
}"#;

#[test]
fn absent_keys_take_defaults() {
    let g = Graph::from_json(MINIMAL).unwrap_or_else(|e| panic!("{e}"));
    assert!(!g.is_ragged_tensor_enabled);
    assert!(!g.is_override_shape_enabled);
    assert_eq!(g.min_required_engine_api_version, None);
    assert_eq!(g.tensors[0].alignment, 16);
    assert_eq!(g.tensors[0].ragged_offset_multiplier, 1);
    assert!(!g.tensors[0].is_runtime_pass_by_value);
    assert_eq!(g.tensors[0].ragged_offset_tensor_uid, Some(2));
    assert_eq!(g.io_data_type, DataType::Half);
}

#[test]
fn unknown_data_type_string_is_an_error_naming_the_key() {
    let text = MINIMAL.replace(r#""data_type": "half""#, r#""data_type": "bf16""#);
    assert_eq!(
        Graph::from_json(&text),
        Err(SchemaError::UnknownDataTypeString {
            path: "tensors[0].data_type".into(),
            value: "bf16".into()
        })
    );
}

#[test]
fn wrong_json_types_name_the_path() {
    let text = MINIMAL.replace(r#""dims": [2]"#, r#""dims": [2, "x"]"#);
    let err = Graph::from_json(&text).err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "JSON graph: key tensors[0].dims[1]: expected a 64-bit signed integer, got string \"x\""
        )
    );
    let missing = MINIMAL.replace(r#""name": "minimal","#, "");
    assert_eq!(
        Graph::from_json(&missing)
            .err()
            .map(|e| e.to_string())
            .as_deref(),
        Some("JSON graph: key name: required key is missing")
    );
}

#[test]
fn non_sdpa_node_types_are_rejected_by_name() {
    let text = MINIMAL.replace(
        r#""nodes": []"#,
        r#""nodes": [{"type": "MatmulAttributes", "name": "mm", "compute_data_type": "float"}]"#,
    );
    assert_eq!(
        Graph::from_json(&text),
        Err(SchemaError::UnsupportedJsonNodeType {
            node_index: 0,
            type_name: "MatmulAttributes".into()
        })
    );
}

#[test]
fn not_json_is_an_error() {
    assert!(matches!(
        Graph::from_json("{"),
        Err(SchemaError::Json { .. })
    ));
    assert!(matches!(
        Graph::from_json("[]"),
        Err(SchemaError::JsonField { .. })
    ));
}

/// The wire's float fields are 32-bit: a finite JSON number beyond f32's range must not turn
/// into an infinite scale or value on the way in.
#[test]
fn floats_beyond_f32_range_are_errors_naming_the_key() {
    let scale = MINIMAL.replace(
        r#""virtual": false,"#,
        r#""virtual": false, "value_type": "Float32Value", "value": 1e39,"#,
    );
    assert_eq!(
        Graph::from_json(&scale).err().map(|e| e.to_string()),
        Some(
            "JSON graph: key tensors[0].value: 1000000000000000000000000000000000000000 is \
             beyond the range of a 32-bit float"
                .to_string()
        )
    );
    let in_range = MINIMAL.replace(
        r#""virtual": false,"#,
        r#""virtual": false, "value_type": "Float32Value", "value": 0.125,"#,
    );
    let g = Graph::from_json(&in_range).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.tensors[0].value, Some(TensorValue::Float32(0.125)));
}
