//! The JSON form of an `SdpaBackwardAttributes` node, keyed as upstream's writer keys it: the
//! forward's O, the gradient dO and the stats are *inputs* here, dQ/dK/dV/dBias the outputs, and
//! the flags, scalars and alignment sit under `attributes`. Unset optionals are written as
//! `null`, as upstream writes them.

use serde_json::{Map, Value, json};

use super::object::{Obj, describe, field_error};
use crate::error::SchemaError;
use crate::model::{BACKWARD_OPTIONAL_INPUTS, DiagonalAlignment, SdpaBackwardAttributes};

/// The nine required uids have no meaningful default (uid 0 would silently alias a tensor);
/// every other key may be absent and reads as unset or its schema default.
pub(super) fn read(n: &Obj<'_>) -> Result<SdpaBackwardAttributes, SchemaError> {
    let section = |key: &str| {
        n.sub(key)?
            .ok_or_else(|| field_error(&n.key_path(key), "required key is missing"))
    };
    let inputs = section("inputs")?;
    let outputs = section("outputs")?;
    let mut s = SdpaBackwardAttributes::new(
        inputs.required_i64("q_tensor_uid")?,
        inputs.required_i64("k_tensor_uid")?,
        inputs.required_i64("v_tensor_uid")?,
        inputs.required_i64("o_tensor_uid")?,
        inputs.required_i64("do_tensor_uid")?,
        inputs.required_i64("stats_tensor_uid")?,
        outputs.required_i64("dq_tensor_uid")?,
        outputs.required_i64("dk_tensor_uid")?,
        outputs.required_i64("dv_tensor_uid")?,
    );
    for f in &BACKWARD_OPTIONAL_INPUTS {
        *(f.slot)(&mut s) = inputs.i64(f.name)?;
    }
    s.dbias_tensor_uid = outputs.i64("dbias_tensor_uid")?;
    let Some(a) = n.sub("attributes")? else {
        return Ok(s);
    };
    s.alibi_mask = a.boolean("alibi_mask")?.unwrap_or(false);
    s.padding_mask = a.boolean("padding_mask")?.unwrap_or(false);
    s.causal_mask = a.boolean("causal_mask")?.unwrap_or(false);
    s.causal_mask_bottom_right = a.boolean("causal_mask_bottom_right")?.unwrap_or(false);
    s.dropout_probability = a.f32("dropout_probability")?;
    s.attn_scale_value = a.f32("attn_scale_value")?;
    s.left_bound = a.i64("left_bound")?;
    s.right_bound = a.i64("right_bound")?;
    s.diagonal_alignment = alignment(&a)?;
    Ok(s)
}

/// `"TOP_LEFT"` / `"BOTTOM_RIGHT"`, or the wire number the writer uses for a value it has no
/// name for; absent means the schema default.
fn alignment(a: &Obj<'_>) -> Result<DiagonalAlignment, SchemaError> {
    let key = "diagonal_alignment";
    let path = a.key_path(key);
    match a.get(key) {
        None => Ok(DiagonalAlignment::default()),
        Some(Value::String(name)) => {
            DiagonalAlignment::from_json_name(name).ok_or_else(|| SchemaError::UnknownEnumString {
                path,
                value: name.clone(),
            })
        }
        Some(v @ Value::Number(_)) => v
            .as_i64()
            .and_then(|x| i8::try_from(x).ok())
            .map(DiagonalAlignment::from_wire)
            .ok_or_else(|| field_error(&path, format!("{} does not fit a byte", describe(v)))),
        Some(other) => Err(field_error(
            &path,
            format!("expected a string, got {}", describe(other)),
        )),
    }
}

pub(super) fn write(s: &SdpaBackwardAttributes, m: &mut Map<String, Value>) {
    let mut inputs = Map::new();
    for (key, uid) in [
        ("q_tensor_uid", s.q_tensor_uid),
        ("k_tensor_uid", s.k_tensor_uid),
        ("v_tensor_uid", s.v_tensor_uid),
        ("o_tensor_uid", s.o_tensor_uid),
        ("do_tensor_uid", s.do_tensor_uid),
        ("stats_tensor_uid", s.stats_tensor_uid),
    ] {
        inputs.insert(key.into(), json!(uid));
    }
    for f in &BACKWARD_OPTIONAL_INPUTS {
        inputs.insert(f.name.into(), json!((f.get)(s)));
    }
    let outputs = json!({
        "dq_tensor_uid": s.dq_tensor_uid,
        "dk_tensor_uid": s.dk_tensor_uid,
        "dv_tensor_uid": s.dv_tensor_uid,
        "dbias_tensor_uid": s.dbias_tensor_uid,
    });
    let alignment = s
        .diagonal_alignment
        .json_name()
        .map_or_else(|| json!(s.diagonal_alignment.to_wire()), |n| json!(n));
    let attributes = json!({
        "alibi_mask": s.alibi_mask,
        "padding_mask": s.padding_mask,
        "causal_mask": s.causal_mask,
        "causal_mask_bottom_right": s.causal_mask_bottom_right,
        "dropout_probability": s.dropout_probability.map(f64::from),
        "attn_scale_value": s.attn_scale_value.map(f64::from),
        "left_bound": s.left_bound,
        "right_bound": s.right_bound,
        "diagonal_alignment": alignment,
    });
    m.insert("inputs".into(), Value::Object(inputs));
    m.insert("outputs".into(), outputs);
    m.insert("attributes".into(), attributes);
}
