//! The JSON form of an `SdpaBackwardAttributes` node, keyed as upstream's writer keys it: the
//! forward's O, the gradient dO and the stats are *inputs* here, dQ/dK/dV/dBias the outputs, and
//! the flags, scalars and alignment sit under `attributes`. Unset optionals are written as
//! `null`, as upstream writes them.

use serde_json::{Map, Value, json};

use super::object::{Obj, field_error};
use crate::error::SchemaError;
use crate::model::{BACKWARD_OPTIONAL_INPUTS, SdpaBackwardAttributes};

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
    super::sdpa_shared::read_shared_attributes(&a, &mut s)?;
    s.diagonal_alignment = super::sdpa_shared::read_alignment(&a)?;
    Ok(s)
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
    let mut attributes = Map::new();
    super::sdpa_shared::write_shared_attributes(s, &mut attributes);
    attributes.insert(
        "diagonal_alignment".into(),
        super::sdpa_shared::diagonal_alignment(s.diagonal_alignment),
    );
    m.insert("inputs".into(), Value::Object(inputs));
    m.insert("outputs".into(), outputs);
    m.insert("attributes".into(), Value::Object(attributes));
}
