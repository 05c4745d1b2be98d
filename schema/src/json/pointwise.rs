//! The JSON form of a `PointwiseAttributes` node, laid out as upstream's writer lays it out:
//! every attribute, `operation` included, under `inputs`, and `out_0_tensor_uid` under
//! `outputs`. `operation` is the lower-case mode name (`"add"`); a mode without a name is
//! written as its wire number, which the reader accepts back.

use serde_json::{Map, Value, json};

use super::object::{Obj, describe, field_error};
use crate::error::SchemaError;
use crate::model::{PointwiseAttributes, PointwiseMode};

/// in_0 and out_0 have no meaningful default (uid 0 would silently alias a tensor), and
/// `operation` none either (UNSET computes nothing), so those three are required.
pub(super) fn read(n: &Obj<'_>) -> Result<PointwiseAttributes, SchemaError> {
    let inputs = n
        .sub("inputs")?
        .ok_or_else(|| field_error(&n.key_path("inputs"), "required key is missing"))?;
    let outputs = n
        .sub("outputs")?
        .ok_or_else(|| field_error(&n.key_path("outputs"), "required key is missing"))?;
    Ok(PointwiseAttributes {
        operation: read_mode(&inputs)?,
        relu_lower_clip: inputs.f32("relu_lower_clip")?,
        relu_upper_clip: inputs.f32("relu_upper_clip")?,
        relu_lower_clip_slope: inputs.f32("relu_lower_clip_slope")?,
        axis_tensor_uid: inputs.i64("axis_tensor_uid")?,
        in_0_tensor_uid: inputs.required_i64("in_0_tensor_uid")?,
        in_1_tensor_uid: inputs.i64("in_1_tensor_uid")?,
        in_2_tensor_uid: inputs.i64("in_2_tensor_uid")?,
        out_0_tensor_uid: outputs.required_i64("out_0_tensor_uid")?,
        swish_beta: inputs.f32("swish_beta")?,
        elu_alpha: inputs.f32("elu_alpha")?,
        softplus_beta: inputs.f32("softplus_beta")?,
    })
}

fn read_mode(inputs: &Obj<'_>) -> Result<PointwiseMode, SchemaError> {
    let path = inputs.key_path("operation");
    match inputs.required("operation")? {
        Value::String(s) => {
            PointwiseMode::from_json_name(s).ok_or_else(|| SchemaError::UnknownEnumString {
                path,
                value: s.clone(),
            })
        }
        v @ Value::Number(_) => v
            .as_i64()
            .and_then(|x| i8::try_from(x).ok())
            .map(PointwiseMode)
            .ok_or_else(|| field_error(&path, format!("{} does not fit a byte", describe(v)))),
        other => Err(field_error(
            &path,
            format!("expected a string, got {}", describe(other)),
        )),
    }
}

pub(super) fn write(p: &PointwiseAttributes, m: &mut Map<String, Value>) {
    let operation = p
        .operation
        .json_name()
        .map_or_else(|| json!(p.operation.0), |n| json!(n));
    let inputs = json!({
        "operation": operation,
        "relu_lower_clip": p.relu_lower_clip.map(f64::from),
        "relu_upper_clip": p.relu_upper_clip.map(f64::from),
        "relu_lower_clip_slope": p.relu_lower_clip_slope.map(f64::from),
        "axis_tensor_uid": p.axis_tensor_uid,
        "in_0_tensor_uid": p.in_0_tensor_uid,
        "in_1_tensor_uid": p.in_1_tensor_uid,
        "in_2_tensor_uid": p.in_2_tensor_uid,
        "swish_beta": p.swish_beta.map(f64::from),
        "elu_alpha": p.elu_alpha.map(f64::from),
        "softplus_beta": p.softplus_beta.map(f64::from),
    });
    m.insert("inputs".into(), inputs);
    m.insert(
        "outputs".into(),
        json!({ "out_0_tensor_uid": p.out_0_tensor_uid }),
    );
}
