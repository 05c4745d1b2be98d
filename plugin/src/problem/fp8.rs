//! The FP8 side of the graph's SDPA forward node → the problem's [`Fp8Forward`]
//! (kernels/core/fp8-attention.md §1, §6): Q/K/V/O types, the six FLOAT scalars and the two amax
//! outputs, each decline naming the uid or field and its value.

use ragged_core::Fp8Format;
use ragged_core::problem::{
    Amax, Fp8Forward, Fp8OutputPlan, Fp8Scalar, Fp8Softmax, ScalarType, ScalePlan,
};
use ragged_schema::{DataType, Graph, SdpaAttributes, TensorAttributes, TensorValue};

use ragged_core::contract::Decline;

use super::{IO_TYPES, refuse, refuse_attribute, tensor_attributes};

/// The FP8 format of a graph data type; `None` for every other type (FP8_E8M0 included: it is
/// a scale format, declined by [`check_types`]).
pub(super) fn fp8_format(data_type: DataType) -> Option<Fp8Format> {
    match data_type {
        DataType::Fp8E4m3 => Some(Fp8Format::E4M3),
        DataType::Fp8E5m2 => Some(Fp8Format::E5M2),
        DataType::Fp8E4m3Fnuz => Some(Fp8Format::E4M3Fnuz),
        DataType::Fp8E5m2Fnuz => Some(Fp8Format::E5M2Fnuz),
        _ => None,
    }
}

/// The eight FP8 fields of a forward node, inputs first.
fn fields(sdpa: &SdpaAttributes) -> [(&'static str, Option<i64>); 8] {
    [
        ("descale_q_tensor_uid", sdpa.descale_q_tensor_uid),
        ("descale_k_tensor_uid", sdpa.descale_k_tensor_uid),
        ("descale_v_tensor_uid", sdpa.descale_v_tensor_uid),
        ("descale_s_tensor_uid", sdpa.descale_s_tensor_uid),
        ("scale_s_tensor_uid", sdpa.scale_s_tensor_uid),
        ("scale_o_tensor_uid", sdpa.scale_o_tensor_uid),
        ("amax_s_tensor_uid", sdpa.amax_s_tensor_uid),
        ("amax_o_tensor_uid", sdpa.amax_o_tensor_uid),
    ]
}

/// Q, K, V and O's types (fp8-attention.md §1.1, §1.4): Q, K, V one FP8 format and O FP8 of
/// the same family or FLOAT/HALF/BFLOAT16; or all four one of FLOAT/HALF/BFLOAT16 as before.
/// Returns Q's FP8 format, `None` for a 16-bit graph.
pub(super) fn check_types(
    tensors: &[(&'static str, &TensorAttributes); 4],
) -> Result<Option<Fp8Format>, Decline> {
    if let Some((role, t)) = tensors
        .iter()
        .find(|(_, t)| t.data_type == DataType::Fp8E8m0)
    {
        return refuse(
            t.uid,
            format!("{role} data type"),
            t.data_type,
            "a data format: FP8_E8M0 is a scale format (fp8-attention.md §1.1)",
        );
    }
    let [(q_role, q), qkv @ .., (o_role, o)] = tensors;
    let Some(input) = fp8_format(q.data_type) else {
        if let Some((role, t)) = tensors
            .iter()
            .find(|(_, t)| fp8_format(t.data_type).is_some())
        {
            return refuse(
                t.uid,
                format!("{role} data type"),
                t.data_type,
                format!(
                    "{}, as {q_role} uid {}: FP8 and 16-bit types do not mix among Q, K, V \
                     (fp8-attention.md §1.1)",
                    q.data_type, q.uid
                ),
            );
        }
        return Ok(None);
    };
    for (role, t) in qkv {
        if t.data_type != q.data_type {
            return refuse(
                t.uid,
                format!("{role} data type"),
                t.data_type,
                format!(
                    "{}, as {q_role} uid {}: Q, K and V share one FP8 format \
                     (fp8-attention.md §1.1)",
                    q.data_type, q.uid
                ),
            );
        }
    }
    let wide = matches!(
        o.data_type,
        DataType::Float | DataType::Half | DataType::BFloat16
    );
    let same_family = fp8_format(o.data_type).is_some_and(|f| f.is_fnuz() == input.is_fnuz());
    if !wide && !same_family {
        let family = if input.is_fnuz() { "FNUZ" } else { "OCP" };
        return refuse(
            o.uid,
            format!("{o_role} data type"),
            o.data_type,
            format!(
                "an {family} FP8 format like {q_role}'s {} or {IO_TYPES} \
                 (fp8-attention.md §1.4)",
                q.data_type
            ),
        );
    }
    Ok(Some(input))
}

/// A 16-bit graph sets none of the eight fields (fp8-attention.md §1.3); nor does a multi-node
/// graph, whose executor has no FP8 forward.
pub fn check_no_fp8_fields(sdpa: &SdpaAttributes, why: &str) -> Result<(), Decline> {
    if let Some((field, Some(uid))) = fields(sdpa).into_iter().find(|(_, uid)| uid.is_some()) {
        return refuse(uid, field, uid, format!("unset: {why}"));
    }
    Ok(())
}

/// The FP8 forward's scalars and outputs, for Q, K, V of `input` and O of `o_type`.
pub(super) fn fp8_plan(
    graph: &Graph,
    sdpa: &SdpaAttributes,
    input: Fp8Format,
    o_type: DataType,
) -> Result<Fp8Forward, Decline> {
    // Project choice for now (fp8-attention.md §6): the reference's paged path is 16-bit.
    let serving = [
        ("page_table_k_tensor_uid", sdpa.page_table_k_tensor_uid),
        ("page_table_v_tensor_uid", sdpa.page_table_v_tensor_uid),
        ("sink_token_tensor_uid", sdpa.sink_token_tensor_uid),
    ];
    if let Some((field, Some(uid))) = serving.into_iter().find(|(_, uid)| uid.is_some()) {
        return refuse(
            uid,
            field,
            uid,
            format!(
                "unset on an FP8 graph (Q is {input}): paged K/V and sinks run on 16-bit graphs \
                 only (fp8-attention.md §6)"
            ),
        );
    }
    let required = |field: &'static str, uid: Option<i64>| match uid {
        Some(uid) => scalar(graph, field, uid),
        None => refuse_attribute(
            field,
            "unset",
            format!(
                "a one-element FLOAT tensor: an FP8 graph (Q is {input}) carries descale_q, \
                 descale_k and descale_v (fp8-attention.md §1.3)"
            ),
        ),
    };
    let descale_q = required("descale_q_tensor_uid", sdpa.descale_q_tensor_uid)?;
    let descale_k = required("descale_k_tensor_uid", sdpa.descale_k_tensor_uid)?;
    let descale_v = required("descale_v_tensor_uid", sdpa.descale_v_tensor_uid)?;
    let softmax = match (sdpa.scale_s_tensor_uid, sdpa.descale_s_tensor_uid) {
        (None, None) => None,
        (Some(s), Some(d)) => Some(Fp8Softmax {
            scale_s: scalar(graph, "scale_s_tensor_uid", s)?,
            descale_s: scalar(graph, "descale_s_tensor_uid", d)?,
        }),
        (Some(uid), None) | (None, Some(uid)) => {
            let (set, missing) = if sdpa.scale_s_tensor_uid.is_some() {
                ("scale_s_tensor_uid", "descale_s_tensor_uid")
            } else {
                ("descale_s_tensor_uid", "scale_s_tensor_uid")
            };
            return refuse_attribute(
                missing,
                format!("unset while {set} = {uid}"),
                "both scale_s and descale_s or neither: they quantize P together \
                 (fp8-attention.md §1.3)",
            );
        }
    };
    let output = match (fp8_format(o_type), sdpa.scale_o_tensor_uid) {
        (Some(format), Some(uid)) => Fp8OutputPlan::Fp8 {
            format,
            scale_o: scalar(graph, "scale_o_tensor_uid", uid)?,
        },
        (Some(format), None) => {
            return refuse_attribute(
                "scale_o_tensor_uid",
                format!(
                    "unset with an {format} O (o_tensor_uid = {})",
                    sdpa.o_tensor_uid
                ),
                "a one-element FLOAT tensor: an FP8 O is scaled before rounding \
                 (fp8-attention.md §1.3)",
            );
        }
        (None, Some(uid)) => {
            return refuse(
                uid,
                "scale_o_tensor_uid",
                format!(
                    "{uid} with a {o_type} O (o_tensor_uid = {})",
                    sdpa.o_tensor_uid
                ),
                "unset: only an FP8 O takes an output scale (fp8-attention.md §1.3)",
            );
        }
        (None, None) => Fp8OutputPlan::Wide,
    };
    Ok(Fp8Forward {
        input,
        descale_q,
        descale_k,
        descale_v,
        softmax,
        output,
        amax_s: sdpa
            .amax_s_tensor_uid
            .map(|uid| amax(graph, "amax_s_tensor_uid", uid))
            .transpose()?,
        amax_o: sdpa
            .amax_o_tensor_uid
            .map(|uid| amax(graph, "amax_o_tensor_uid", uid))
            .transpose()?,
    })
}

/// FLOAT, one element written `[1]` or `[1, 1, 1, 1]` (fp8-attention.md §1.2, §1.6).
fn check_one_float(role: &str, t: &TensorAttributes) -> Result<bool, Decline> {
    let uid = t.uid;
    if t.data_type != DataType::Float {
        return refuse(uid, format!("{role} data type"), t.data_type, "FLOAT");
    }
    match t.dims[..] {
        [1] => Ok(false),
        [1, 1, 1, 1] => Ok(true),
        _ => refuse(
            uid,
            format!("{role} dims"),
            format!("{:?}", t.dims),
            "[1] or [1, 1, 1, 1]: one per-tensor value (per-head or per-block scaling is not \
             defined, fp8-attention.md §6)",
        ),
    }
}

/// A scalar input, read like the attention scale: a baked value, a pass-by-value host scalar or
/// a one-element tensor.
fn scalar(graph: &Graph, role: &'static str, uid: i64) -> Result<Fp8Scalar, Decline> {
    let t = tensor_attributes(graph, role, uid)?;
    check_one_float(role, t)?;
    let plan = match t.value {
        // The format of a Float8Value's byte is not stated (see `scale_plan`).
        Some(TensorValue::Float8(bits)) => {
            return refuse(
                uid,
                format!("{role} value"),
                format!("a Float8Value (encoding {bits:#04x})"),
                "a value that is not fp8-encoded (an fp8 scalar's format is unknown)",
            );
        }
        Some(value) => ScalePlan::Fixed(value.as_f64() as f32),
        None if t.is_virtual => {
            return refuse(uid, format!("{role} is_virtual"), true, "false");
        }
        None if t.is_runtime_pass_by_value => ScalePlan::RuntimeHostScalar {
            uid,
            data_type: ScalarType::Float,
        },
        None => ScalePlan::DeviceTensor {
            uid,
            data_type: ScalarType::Float,
        },
    };
    Ok(Fp8Scalar { role, plan })
}

/// An amax output: a bound FLOAT element the engine writes.
fn amax(graph: &Graph, role: &'static str, uid: i64) -> Result<Amax, Decline> {
    let t = tensor_attributes(graph, role, uid)?;
    let rank4 = check_one_float(role, t)?;
    if t.is_virtual {
        return refuse(uid, format!("{role} is_virtual"), true, "false");
    }
    if t.value.is_some() || t.is_runtime_pass_by_value {
        return refuse(
            uid,
            role,
            "a baked or pass-by-value tensor",
            "a bound output tensor",
        );
    }
    if t.alignment < 1 {
        return refuse(uid, format!("{role} alignment"), t.alignment, "at least 1");
    }
    Ok(Amax {
        role,
        uid,
        rank4,
        alignment: t.alignment,
    })
}
