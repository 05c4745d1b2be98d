//! The JSON dialects upstream hipDNN writes, read into one model: the flatbuffers SDK writer's
//! nested node form, and the flat form of its paged integration-test bundles (port uids inside
//! `attributes`, numpy-style data-type names, no `virtual` key). The graphs below are written for
//! this test in those forms.

use ragged_schema::{DataType, Graph, SchemaError};

/// One SDPA node as the SDK writer lays it out: every port nested, unset ones `null`.
const NESTED: &str = r#"{
 "name": "dialect",
 "compute_data_type": "float",
 "io_data_type": "half",
 "intermediate_data_type": "float",
 "nodes": [
  {
   "type": "SdpaAttributes",
   "name": "attn",
   "compute_data_type": "float",
   "inputs": {
    "q_tensor_uid": 10, "k_tensor_uid": 11, "v_tensor_uid": 12,
    "attn_mask_tensor_uid": null, "scale_tensor_uid": null,
    "seq_len_q_tensor_uid": 14, "seq_len_kv_tensor_uid": 15
   },
   "outputs": {"o_tensor_uid": 13, "stats_tensor_uid": null},
   "attributes": {
    "generate_stats": null, "causal_mask": false, "attn_scale_value": 0.25,
    "left_bound": 7, "right_bound": 0, "diagonal_alignment": "BOTTOM_RIGHT",
    "mma_core_mode": "float", "implementation": "AUTO"
   }
  }
 ],
 "tensors": [
  {"uid": 10, "name": "Q", "data_type": "half", "dims": [1, 2, 8, 4], "strides": [64, 4, 8, 1], "virtual": false},
  {"uid": 11, "name": "K", "data_type": "half", "dims": [1, 1, 8, 4], "strides": [32, 4, 4, 1], "virtual": false},
  {"uid": 12, "name": "V", "data_type": "half", "dims": [1, 1, 8, 4], "strides": [32, 4, 4, 1], "virtual": false},
  {"uid": 13, "name": "O", "data_type": "half", "dims": [1, 2, 8, 4], "strides": [64, 4, 8, 1], "virtual": false},
  {"uid": 14, "name": "SEQ_LEN_Q", "data_type": "int32", "dims": [1], "strides": [1], "virtual": false},
  {"uid": 15, "name": "SEQ_LEN_KV", "data_type": "int32", "dims": [1], "strides": [1], "virtual": false}
 ]
}"#;

/// The same graph in the paged bundles' flat form, with keys in another order and names upstream's
/// bundles use.
const FLAT: &str = r#"{
 "nodes": [
  {
   "type": "SdpaAttributes",
   "name": "attn",
   "compute_data_type": "float32",
   "attributes": {
    "q_tensor_uid": 10, "k_tensor_uid": 11, "v_tensor_uid": 12, "o_tensor_uid": 13,
    "seq_len_q_tensor_uid": 14, "seq_len_kv_tensor_uid": 15,
    "generate_stats": null, "alibi_mask": false, "dropout_probability": null,
    "attn_scale_value": 0.25, "left_bound": 7, "right_bound": 0,
    "diagonal_alignment": "BOTTOM_RIGHT", "mma_core_mode": "float", "implementation": "AUTO"
   }
  }
 ],
 "tensors": [
  {"name": "Q", "uid": 10, "dims": [1, 2, 8, 4], "strides": [64, 4, 8, 1], "data_type": "float16"},
  {"name": "K", "uid": 11, "dims": [1, 1, 8, 4], "strides": [32, 4, 4, 1], "data_type": "float16"},
  {"name": "V", "uid": 12, "dims": [1, 1, 8, 4], "strides": [32, 4, 4, 1], "data_type": "float16"},
  {"name": "O", "uid": 13, "dims": [1, 2, 8, 4], "strides": [64, 4, 8, 1], "data_type": "float16"},
  {"name": "SEQ_LEN_Q", "uid": 14, "dims": [1], "strides": [1], "data_type": "int32"},
  {"name": "SEQ_LEN_KV", "uid": 15, "dims": [1], "strides": [1], "data_type": "int32"}
 ],
 "io_data_type": "float16",
 "compute_data_type": "float32",
 "intermediate_data_type": "float",
 "name": "dialect"
}"#;

fn read(text: &str) -> Graph {
    Graph::from_json(text).unwrap_or_else(|e| panic!("{e}"))
}

fn error(text: &str) -> String {
    Graph::from_json(text)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_else(|| panic!("expected an error"))
}

#[test]
fn nested_and_flat_forms_read_to_the_same_graph() {
    let nested = read(NESTED);
    let flat = read(FLAT);
    assert_eq!(nested, flat);
    let sdpa = nested.nodes[0]
        .attributes
        .as_sdpa()
        .unwrap_or_else(|| panic!("an SDPA node"));
    assert_eq!(
        (
            sdpa.q_tensor_uid,
            sdpa.k_tensor_uid,
            sdpa.v_tensor_uid,
            sdpa.o_tensor_uid
        ),
        (10, 11, 12, 13)
    );
    assert_eq!(
        (sdpa.seq_len_q_tensor_uid, sdpa.seq_len_kv_tensor_uid),
        (Some(14), Some(15))
    );
    assert_eq!((sdpa.left_bound, sdpa.right_bound), (Some(7), Some(0)));
    assert_eq!(sdpa.stats_tensor_uid, None);
}

/// What the flat dialect becomes in the writer's form: every key upstream's writer emits.
#[test]
fn flat_form_rewritten_by_the_writer_snapshot() {
    insta::assert_snapshot!("flat_dialect_rewritten", read(FLAT).to_json());
}

#[test]
fn numpy_style_data_type_names_are_read_beside_the_sdk_names() {
    for (name, expected) in [
        ("float16", DataType::Half),
        ("half", DataType::Half),
        ("float32", DataType::Float),
        ("float", DataType::Float),
        ("float64", DataType::Double),
        ("double", DataType::Double),
        ("bfloat16", DataType::BFloat16),
        ("int32", DataType::Int32),
        ("int64", DataType::Int64),
    ] {
        let text = FLAT.replace(
            r#""io_data_type": "float16""#,
            &format!(r#""io_data_type": "{name}""#),
        );
        assert_eq!(read(&text).io_data_type, expected, "{name}");
    }
    let bad = FLAT.replace(
        r#""io_data_type": "float16""#,
        r#""io_data_type": "float17""#,
    );
    assert_eq!(
        Graph::from_json(&bad),
        Err(SchemaError::UnknownDataTypeString {
            path: "io_data_type".into(),
            value: "float17".into()
        })
    );
}

#[test]
fn a_tensor_without_virtual_is_a_real_buffer() {
    assert!(read(FLAT).tensors.iter().all(|t| !t.is_virtual));
    let marked = FLAT.replace(
        r#""uid": 13, "dims""#,
        r#""uid": 13, "virtual": true, "dims""#,
    );
    assert!(read(&marked).tensor(13).is_some_and(|t| t.is_virtual));
}

#[test]
fn unknown_keys_are_ignored_at_every_level() {
    let extra = NESTED
        .replace(
            r#""name": "dialect","#,
            r#""name": "dialect", "generator": {"tool": "x"}, "notes": [1, 2],"#,
        )
        .replace(
            r#""type": "SdpaAttributes","#,
            r#""type": "SdpaAttributes", "engine_hint": 3,"#,
        )
        .replace(
            r#""causal_mask": false,"#,
            r#""causal_mask": false, "softcap": 30.0,"#,
        )
        .replace(
            r#""uid": 10, "name": "Q","#,
            r#""uid": 10, "name": "Q", "layout": "bshd","#,
        )
        .replace(
            r#""q_tensor_uid": 10,"#,
            r#""q_tensor_uid": 10, "future_tensor_uid": 99,"#,
        );
    assert_eq!(read(&extra), read(NESTED));
}

#[test]
fn wrong_types_are_errors_naming_the_key() {
    let cases = [
        (
            FLAT.replace(r#""q_tensor_uid": 10,"#, r#""q_tensor_uid": "10","#),
            "JSON graph: key nodes[0].attributes.q_tensor_uid: expected a 64-bit signed integer, got string \"10\"",
        ),
        (
            NESTED.replace(
                r#""seq_len_q_tensor_uid": 14,"#,
                r#""seq_len_q_tensor_uid": 1.5,"#,
            ),
            "JSON graph: key nodes[0].inputs.seq_len_q_tensor_uid: expected a 64-bit signed integer, got number 1.5",
        ),
        (
            NESTED.replace(r#""inputs": {"#, r#""inputs": [], "unused": {"#),
            "JSON graph: key nodes[0].inputs: expected an object, got an array",
        ),
        (
            FLAT.replace(r#""left_bound": 7,"#, r#""left_bound": true,"#),
            "JSON graph: key nodes[0].attributes.left_bound: expected a 64-bit signed integer, got boolean true",
        ),
        (
            FLAT.replace(
                r#""uid": 14, "dims": [1], "strides": [1], "data_type": "int32""#,
                r#""uid": 14, "dims": [1], "strides": [1], "data_type": "int32", "virtual": "no""#,
            ),
            "JSON graph: key tensors[4].virtual: expected a boolean, got string \"no\"",
        ),
        (
            FLAT.replace(r#""data_type": "float16"}"#, r#""data_type": 2.5}"#),
            "JSON graph: key tensors[0].data_type: expected a 64-bit signed integer, got number 2.5",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(error(&text), expected);
    }
}

#[test]
fn a_port_missing_from_both_places_names_both() {
    let text = FLAT.replace(r#""o_tensor_uid": 13,"#, "");
    assert_eq!(
        error(&text),
        "JSON graph: key nodes[0].outputs.o_tensor_uid: required key is missing (nor is it in nodes[0].attributes)"
    );
}

#[test]
fn a_port_given_twice_with_different_uids_is_an_error() {
    let twice = NESTED.replace(
        r#""generate_stats": null,"#,
        r#""generate_stats": null, "q_tensor_uid": 11,"#,
    );
    assert_eq!(
        error(&twice),
        "JSON graph: key nodes[0].inputs.q_tensor_uid: 10 disagrees with nodes[0].attributes.q_tensor_uid = 11"
    );
    let agreeing = NESTED.replace(
        r#""generate_stats": null,"#,
        r#""generate_stats": null, "q_tensor_uid": 10,"#,
    );
    assert_eq!(read(&agreeing), read(NESTED));
}

#[test]
fn a_parsed_document_reads_like_its_text() {
    let value: serde_json::Value = serde_json::from_str(FLAT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(Graph::from_json_value(&value), Graph::from_json(FLAT));
}
