//! Model → JSON, keys and order as upstream's writer (schema.md §10).

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::sdpa_shared::{diagonal_alignment, write_shared_attributes};

use crate::model::{
    AttentionImplementation, DataType, Graph, Node, NodeAttributes, OPTIONAL_INPUT_UIDS,
    OPTIONAL_OUTPUT_UIDS, SdpaAttributes, TensorAttributes, TensorValue,
};

pub(super) fn graph_to_string(graph: &Graph) -> String {
    let value = graph_value(graph);
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    // Serializing a `Value` into a Vec cannot fail: no I/O errors, no non-string map keys.
    if value.serialize(&mut ser).is_err() {
        return value.to_string();
    }
    String::from_utf8(out).unwrap_or_else(|_| value.to_string())
}

/// DataType as its JSON name; an `Unknown` wire value as its number, which JSON names cannot hold.
fn data_type(dt: DataType) -> Value {
    dt.json_name()
        .map_or_else(|| json!(dt.to_wire()), |name| json!(name))
}

fn implementation(i: AttentionImplementation) -> Value {
    i.json_name()
        .map_or_else(|| json!(i.to_wire()), |n| json!(n))
}

fn graph_value(g: &Graph) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(g.name));
    m.insert("compute_data_type".into(), data_type(g.compute_data_type));
    m.insert("io_data_type".into(), data_type(g.io_data_type));
    m.insert(
        "intermediate_data_type".into(),
        data_type(g.intermediate_data_type),
    );
    m.insert(
        "is_override_shape_enabled".into(),
        json!(g.is_override_shape_enabled),
    );
    // Project writer rule (versioning.md §6): the flag is set whenever any tensor is ragged.
    m.insert("is_ragged_tensor_enabled".into(), json!(g.is_ragged()));
    if let Some(id) = g.preferred_engine_id {
        m.insert("preferred_engine_id".into(), json!(id));
    }
    if let Some(id) = g.id {
        m.insert("id".into(), json!(id.to_string()));
    }
    if let Some(v) = g.min_required_engine_api_version {
        m.insert(
            "min_required_engine_api_version".into(),
            json!({"major": v.major, "minor": v.minor, "patch": v.patch}),
        );
    }
    m.insert(
        "tensors".into(),
        Value::Array(g.tensors.iter().map(tensor_value).collect()),
    );
    m.insert(
        "nodes".into(),
        Value::Array(g.nodes.iter().map(node_value).collect()),
    );
    Value::Object(m)
}

fn tensor_value(t: &TensorAttributes) -> Value {
    let mut m = Map::new();
    m.insert("uid".into(), json!(t.uid));
    m.insert("name".into(), json!(t.name));
    m.insert("data_type".into(), data_type(t.data_type));
    m.insert("dims".into(), json!(t.dims));
    m.insert("strides".into(), json!(t.strides));
    m.insert("virtual".into(), json!(t.is_virtual));
    m.insert("alignment".into(), json!(t.alignment));
    m.insert(
        "is_runtime_pass_by_value".into(),
        json!(t.is_runtime_pass_by_value),
    );
    if let Some(aux) = t.ragged_offset_tensor_uid {
        m.insert("ragged_offset_tensor_uid".into(), json!(aux));
    }
    m.insert(
        "ragged_offset_multiplier".into(),
        json!(t.ragged_offset_multiplier),
    );
    if let Some(v) = t.value {
        m.insert("value_type".into(), json!(v.member_name()));
        m.insert("value".into(), scalar(v));
    }
    Value::Object(m)
}

fn scalar(v: TensorValue) -> Value {
    match v {
        TensorValue::Float32(x) | TensorValue::Float16(x) | TensorValue::BFloat16(x) => {
            json!(f64::from(x))
        }
        TensorValue::Float8(x) => json!(x),
        TensorValue::Int32(x) => json!(x),
        TensorValue::Float64(x) => json!(x),
        TensorValue::Int64(x) => json!(x),
        TensorValue::Bool(x) => json!(x),
    }
}

fn node_value(n: &Node) -> Value {
    let mut m = Map::new();
    let type_name = match &n.attributes {
        NodeAttributes::None => String::new(),
        NodeAttributes::Sdpa(_) => "SdpaAttributes".to_string(),
        NodeAttributes::Pointwise(_) => "PointwiseAttributes".to_string(),
        NodeAttributes::SdpaBackward(_) => "SdpaBackwardAttributes".to_string(),
        NodeAttributes::Unsupported { name, .. } => name.clone(),
    };
    m.insert("type".into(), json!(type_name));
    m.insert("name".into(), json!(n.name));
    m.insert("compute_data_type".into(), data_type(n.compute_data_type));
    if let NodeAttributes::Sdpa(s) = &n.attributes {
        sdpa_objects(s, &mut m);
    }
    if let NodeAttributes::Pointwise(p) = &n.attributes {
        super::pointwise::write(p, &mut m);
    }
    if let NodeAttributes::SdpaBackward(s) = &n.attributes {
        super::sdpa_backward::write(s, &mut m);
    }
    Value::Object(m)
}

fn sdpa_objects(s: &SdpaAttributes, m: &mut Map<String, Value>) {
    let mut inputs = Map::new();
    inputs.insert("q_tensor_uid".into(), json!(s.q_tensor_uid));
    inputs.insert("k_tensor_uid".into(), json!(s.k_tensor_uid));
    inputs.insert("v_tensor_uid".into(), json!(s.v_tensor_uid));
    for f in &OPTIONAL_INPUT_UIDS {
        inputs.insert(f.name.into(), json!((f.get)(s)));
    }
    let mut outputs = Map::new();
    outputs.insert("o_tensor_uid".into(), json!(s.o_tensor_uid));
    for f in &OPTIONAL_OUTPUT_UIDS {
        outputs.insert(f.name.into(), json!((f.get)(s)));
    }
    let mut attributes = Map::new();
    attributes.insert("generate_stats".into(), json!(s.generate_stats));
    write_shared_attributes(s, &mut attributes);
    attributes.insert("max_seq_len_kv".into(), json!(s.max_seq_len_kv));
    attributes.insert(
        "diagonal_alignment".into(),
        diagonal_alignment(s.diagonal_alignment),
    );
    attributes.insert("mma_core_mode".into(), data_type(s.mma_core_mode));
    attributes.insert("implementation".into(), implementation(s.implementation));
    m.insert("inputs".into(), Value::Object(inputs));
    m.insert("outputs".into(), Value::Object(outputs));
    m.insert("attributes".into(), Value::Object(attributes));
}
