//! JSON → model. Every error names the key path (`tensors[2].dims[1]`) and the bad value.

use serde_json::Value;

use super::object::{Obj, as_i64, describe, field_error, narrow_f32, read_enum, wire_i8};
use super::sdpa_shared::{read_alignment, read_shared_attributes};
use crate::error::SchemaError;
use crate::model::{
    AttentionImplementation, DEFAULT_ALIGNMENT, DEFAULT_RAGGED_OFFSET_MULTIPLIER, DataType,
    EngineApiVersion, Graph, GraphId, Node, NodeAttributes, OPTIONAL_INPUT_UIDS,
    OPTIONAL_OUTPUT_UIDS, SdpaAttributes, TensorAttributes, TensorValue,
};

pub(super) fn graph_from_str(text: &str) -> Result<Graph, SchemaError> {
    let value: Value = serde_json::from_str(text).map_err(|e| SchemaError::Json {
        detail: e.to_string(),
    })?;
    graph_from_value(&value)
}

pub(super) fn graph_from_value(value: &Value) -> Result<Graph, SchemaError> {
    let g = Obj::new(value, String::new())?;
    let tensors = g
        .array("tensors")?
        .iter()
        .enumerate()
        .map(|(i, v)| read_tensor(&Obj::new(v, format!("tensors[{i}]"))?))
        .collect::<Result<Vec<_>, _>>()?;
    let nodes = g
        .array("nodes")?
        .iter()
        .enumerate()
        .map(|(i, v)| read_node(i, &Obj::new(v, format!("nodes[{i}]"))?))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Graph {
        name: g.required_string("name")?.to_string(),
        compute_data_type: required_data_type(&g, "compute_data_type")?,
        intermediate_data_type: required_data_type(&g, "intermediate_data_type")?,
        io_data_type: required_data_type(&g, "io_data_type")?,
        tensors,
        nodes,
        preferred_engine_id: g.i64("preferred_engine_id")?,
        is_override_shape_enabled: g.boolean("is_override_shape_enabled")?.unwrap_or(false),
        min_required_engine_api_version: read_api_version(&g)?,
        id: read_id(&g)?,
        is_ragged_tensor_enabled: g.boolean("is_ragged_tensor_enabled")?.unwrap_or(false),
    })
}

fn read_id(g: &Obj<'_>) -> Result<Option<GraphId>, SchemaError> {
    g.string("id")?
        .map(|s| {
            GraphId::parse(s).ok_or_else(|| {
                field_error(&g.key_path("id"), format!("{s:?} is not a canonical UUID"))
            })
        })
        .transpose()
}

fn read_api_version(g: &Obj<'_>) -> Result<Option<EngineApiVersion>, SchemaError> {
    let Some(v) = g.sub("min_required_engine_api_version")? else {
        return Ok(None);
    };
    let part = |key: &str| -> Result<u32, SchemaError> {
        let n = v.required_i64(key)?;
        u32::try_from(n).map_err(|_| {
            field_error(
                &v.key_path(key),
                format!("{n} is not an unsigned 32-bit integer"),
            )
        })
    };
    Ok(Some(EngineApiVersion::new(
        part("major")?,
        part("minor")?,
        part("patch")?,
    )))
}

/// The spellings upstream's integration-test bundles use beside the flatbuffers SDK's own names
/// (its paged SDPA bundles write `"float16"`): the numpy/torch names of the same types. Read only;
/// the writer keeps the SDK's names.
fn data_type_alias(name: &str) -> Option<DataType> {
    match name {
        "float16" => Some(DataType::Half),
        "float32" => Some(DataType::Float),
        "float64" => Some(DataType::Double),
        _ => None,
    }
}

/// A DataType string (strict: the SDK's names and the aliases above), or a wire number as the
/// project writer emits for unknown values.
fn data_type_value(v: &Value, path: &str) -> Result<DataType, SchemaError> {
    match v {
        Value::String(s) => DataType::from_json_name(s)
            .or_else(|| data_type_alias(s))
            .ok_or_else(|| SchemaError::UnknownDataTypeString {
                path: path.to_string(),
                value: s.clone(),
            }),
        Value::Number(_) => wire_i8(v, path).map(DataType::from_wire),
        other => Err(field_error(
            path,
            format!("expected a data type string, got {}", describe(other)),
        )),
    }
}

fn required_data_type(o: &Obj<'_>, key: &str) -> Result<DataType, SchemaError> {
    data_type_value(o.required(key)?, &o.key_path(key))
}

fn optional_data_type(o: &Obj<'_>, key: &str) -> Result<Option<DataType>, SchemaError> {
    o.get(key)
        .map(|v| data_type_value(v, &o.key_path(key)))
        .transpose()
}

fn read_tensor(t: &Obj<'_>) -> Result<TensorAttributes, SchemaError> {
    let uid = t.required_i64("uid")?;
    Ok(TensorAttributes {
        uid,
        name: t.required_string("name")?.to_string(),
        data_type: required_data_type(t, "data_type")?,
        strides: t.i64_array("strides")?,
        dims: t.i64_array("dims")?,
        // Upstream's writer always emits it, but its hand-made paged bundles leave it out, and a
        // graph's declared tensors are real buffers unless marked otherwise.
        is_virtual: t.boolean("virtual")?.unwrap_or(false),
        value: read_scalar(t)?,
        is_runtime_pass_by_value: t.boolean("is_runtime_pass_by_value")?.unwrap_or(false),
        ragged_offset_tensor_uid: t.i64("ragged_offset_tensor_uid")?,
        alignment: t.i64("alignment")?.unwrap_or(DEFAULT_ALIGNMENT),
        ragged_offset_multiplier: t
            .i64("ragged_offset_multiplier")?
            .unwrap_or(DEFAULT_RAGGED_OFFSET_MULTIPLIER),
    })
}

fn read_scalar(t: &Obj<'_>) -> Result<Option<TensorValue>, SchemaError> {
    let Some(member) = t.string("value_type")? else {
        return Ok(None);
    };
    let path = t.key_path("value");
    let v = t.required("value")?;
    let number = || {
        v.as_f64()
            .ok_or_else(|| field_error(&path, format!("expected a number, got {}", describe(v))))
    };
    let integer = || as_i64(v, &path);
    let narrow = |what: &str| field_error(&path, format!("{} does not fit {what}", describe(v)));
    // The wire stores Float16/BFloat16 as f32; JSON numbers narrow the same way.
    let value = match member {
        "Float32Value" => TensorValue::Float32(narrow_f32(number()?, &path)?),
        "Float16Value" => TensorValue::Float16(narrow_f32(number()?, &path)?),
        "BFloat16Value" => TensorValue::BFloat16(narrow_f32(number()?, &path)?),
        "Float8Value" => {
            TensorValue::Float8(u8::try_from(integer()?).map_err(|_| narrow("an unsigned byte"))?)
        }
        "Int32Value" => {
            TensorValue::Int32(i32::try_from(integer()?).map_err(|_| narrow("a 32-bit integer"))?)
        }
        "Float64Value" => TensorValue::Float64(number()?),
        "Int64Value" => TensorValue::Int64(integer()?),
        "BoolValue" => TensorValue::Bool(v.as_bool().ok_or_else(|| {
            field_error(&path, format!("expected a boolean, got {}", describe(v)))
        })?),
        other => {
            return Err(SchemaError::UnknownEnumString {
                path: t.key_path("value_type"),
                value: other.to_string(),
            });
        }
    };
    Ok(Some(value))
}

fn read_node(index: usize, n: &Obj<'_>) -> Result<Node, SchemaError> {
    let type_name = n.required_string("type")?;
    let attributes = match type_name {
        "" => NodeAttributes::None,
        "SdpaAttributes" => NodeAttributes::Sdpa(read_sdpa(n)?),
        "PointwiseAttributes" => NodeAttributes::Pointwise(super::pointwise::read(n)?),
        "SdpaBackwardAttributes" => NodeAttributes::SdpaBackward(super::sdpa_backward::read(n)?),
        other => {
            return Err(SchemaError::UnsupportedJsonNodeType {
                node_index: index,
                type_name: other.to_string(),
            });
        }
    };
    Ok(Node {
        name: n.string("name")?.unwrap_or_default().to_string(),
        compute_data_type: optional_data_type(n, "compute_data_type")?.unwrap_or_default(),
        attributes,
    })
}

/// A port's tensor uid. Upstream's writer nests it in `inputs` / `outputs`; its paged test bundles
/// write it flat inside `attributes`. Either place is read; both with different values is an
/// error naming both keys.
fn port_uid(
    port: Option<&Obj<'_>>,
    attributes: Option<&Obj<'_>>,
    key: &str,
) -> Result<Option<i64>, SchemaError> {
    let nested = port.map(|p| p.i64(key)).transpose()?.flatten();
    let flat = attributes.map(|a| a.i64(key)).transpose()?.flatten();
    match (nested, flat, port, attributes) {
        (Some(n), Some(f), Some(p), Some(a)) if n != f => Err(field_error(
            &p.key_path(key),
            format!("{n} disagrees with {} = {f}", a.key_path(key)),
        )),
        _ => Ok(nested.or(flat)),
    }
}

/// q, k, v and o have no meaningful default (uid 0 would silently alias a tensor), so they are
/// required; every other key may be absent and reads as unset or its schema default.
fn read_sdpa(n: &Obj<'_>) -> Result<SdpaAttributes, SchemaError> {
    let inputs = n.sub("inputs")?;
    let outputs = n.sub("outputs")?;
    let attributes = n.sub("attributes")?;
    let required = |port: &Option<Obj<'_>>, port_key: &str, key: &str| {
        port_uid(port.as_ref(), attributes.as_ref(), key)?.ok_or_else(|| {
            field_error(
                &format!("{}.{key}", n.key_path(port_key)),
                format!(
                    "required key is missing (nor is it in {})",
                    n.key_path("attributes")
                ),
            )
        })
    };
    let mut s = SdpaAttributes::new(
        required(&inputs, "inputs", "q_tensor_uid")?,
        required(&inputs, "inputs", "k_tensor_uid")?,
        required(&inputs, "inputs", "v_tensor_uid")?,
        required(&outputs, "outputs", "o_tensor_uid")?,
    );
    for f in &OPTIONAL_INPUT_UIDS {
        *(f.slot)(&mut s) = port_uid(inputs.as_ref(), attributes.as_ref(), f.name)?;
    }
    for f in &OPTIONAL_OUTPUT_UIDS {
        *(f.slot)(&mut s) = port_uid(outputs.as_ref(), attributes.as_ref(), f.name)?;
    }
    let Some(a) = attributes else {
        return Ok(s);
    };
    s.generate_stats = a.boolean("generate_stats")?;
    read_shared_attributes(&a, &mut s)?;
    s.max_seq_len_kv = a.i32("max_seq_len_kv")?;
    s.diagonal_alignment = read_alignment(&a)?;
    s.mma_core_mode = optional_data_type(&a, "mma_core_mode")?.unwrap_or_default();
    s.implementation = read_enum(
        &a,
        "implementation",
        AttentionImplementation::from_json_name,
        AttentionImplementation::from_wire,
    )?
    .unwrap_or_default();
    Ok(s)
}
