//! The FP8 side of a forward SDPA node (kernels/core/fp8-attention.md): which tensors hold its
//! scalars and amax outputs, the values the harness gives scalars nobody supplied, the CPU
//! reference's FP8 forward on a bundle, and the tolerances FP8 outputs are judged by.

use ragged_core::tensor::{TensorMut, TensorMutExt};
use ragged_core::{DataType as KernelType, Fp8Format, HostData};
use ragged_reference::{
    Fp8Attributes, Fp8Scales, Fp8Tensors, SoftmaxQuantization, sdpa_forward_fp8_tensors,
};
use ragged_schema::model::{Graph, SdpaAttributes};

use super::bundle::{Bundle, Entry};
use super::sdpa_op::SdpaRoles;
use super::validate::Tolerance;
use crate::host_error::HostError;

/// The six scalar inputs of an FP8 forward, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarRole {
    DescaleQ,
    DescaleK,
    DescaleV,
    DescaleS,
    ScaleS,
    ScaleO,
}

impl ScalarRole {
    /// The node's scalar uids with their roles, those the node names.
    pub fn of(a: &SdpaAttributes) -> Vec<(ScalarRole, i64)> {
        [
            (ScalarRole::DescaleQ, a.descale_q_tensor_uid),
            (ScalarRole::DescaleK, a.descale_k_tensor_uid),
            (ScalarRole::DescaleV, a.descale_v_tensor_uid),
            (ScalarRole::DescaleS, a.descale_s_tensor_uid),
            (ScalarRole::ScaleS, a.scale_s_tensor_uid),
            (ScalarRole::ScaleO, a.scale_o_tensor_uid),
        ]
        .into_iter()
        .filter_map(|(role, uid)| Some((role, uid?)))
        .collect()
    }
}

/// The FP8 format of Q when the node is an FP8 forward.
pub fn input_format(bundle: &Bundle, a: &SdpaAttributes) -> Result<Option<Fp8Format>, HostError> {
    Ok(match bundle.get(a.q_tensor_uid)?.data_type() {
        KernelType::Fp8(format) => Some(format),
        _ => None,
    })
}

/// Gives the FP8 scalars that are neither pre-supplied nor baked into the graph values in the
/// range the FP8 sources choose, so that a seeded run exercises quantization rather than random
/// signs: descales `2^r` for the seeded `r ∈ [−1, 1)` the bundle already holds (inputs decode to
/// `[−1, 1)`, so scores and O stay in range and a missing descale still shows), `scale_s` the
/// largest finite value of the inputs' format with `descale_s` its inverse (`P ≤ 1` uses the
/// whole range, cuDNN's `448/amax` with `amax_s = 1`), and `scale_o` a quarter of O's largest
/// finite value (cuDNN's tests' headroom, since `|O'| ≤ 2` here).
pub fn initialise_scalars(graph: &Graph, roles: &SdpaRoles, bundle: &mut Bundle) {
    let a = &roles.attrs;
    let Ok(Some(input)) = input_format(bundle, a) else {
        return;
    };
    let output = match bundle.get(a.o_tensor_uid).map(|t| t.data_type()) {
        Ok(KernelType::Fp8(format)) => Some(format),
        _ => None,
    };
    for (role, uid) in ScalarRole::of(a) {
        if graph.tensor(uid).is_some_and(|t| t.value.is_some()) {
            continue;
        }
        let Some(Entry::Owned(t)) = bundle.entries.get_mut(&uid) else {
            continue;
        };
        let value = match role {
            ScalarRole::DescaleQ | ScalarRole::DescaleK | ScalarRole::DescaleV => {
                match first_f64(t.as_ref()) {
                    Some(r) => 2f64.powf(r),
                    None => continue,
                }
            }
            ScalarRole::ScaleS => input.max_finite(),
            ScalarRole::DescaleS => 1.0 / input.max_finite(),
            ScalarRole::ScaleO => match output {
                Some(format) => format.max_finite() / 4.0,
                None => continue,
            },
        };
        t.fill_value(value);
    }
}

fn first_f64(t: &dyn TensorMut) -> Option<f64> {
    match t.host_data() {
        HostData::F32(s) => s.first().map(|&v| f64::from(v)),
        HostData::F16(s) => s.first().map(|v| v.to_f64()),
        HostData::BF16(s) => s.first().map(|v| v.to_f64()),
        _ => None,
    }
}

/// A scalar as the plugin resolves it (fp8-attention.md §1.2): the graph's baked value, else the
/// one element of its tensor.
pub fn scalar(graph: &Graph, bundle: &Bundle, uid: i64) -> Result<f32, HostError> {
    match graph.tensor(uid).and_then(|t| t.value) {
        Some(value) => Ok(value.as_f64() as f32),
        None => ragged_core::read_scalar_f32(bundle.get(uid)?)
            .map_err(|e| HostError::Harness(format!("reading FP8 scalar uid {uid}: {e}"))),
    }
}

/// The reference's FP8 attributes of the node.
fn attributes(
    graph: &Graph,
    roles: &SdpaRoles,
    bundle: &Bundle,
) -> Result<Fp8Attributes, HostError> {
    let a = &roles.attrs;
    let params = roles.params(graph, bundle)?;
    let read = |uid: Option<i64>, field: &str| -> Result<f32, HostError> {
        let uid =
            uid.ok_or_else(|| HostError::Harness(format!("an FP8 SDPA forward without {field}")))?;
        scalar(graph, bundle, uid)
    };
    let softmax = match (a.scale_s_tensor_uid, a.descale_s_tensor_uid) {
        (None, None) => None,
        (scale_s, descale_s) => Some(SoftmaxQuantization {
            scale_s: read(scale_s, "scale_s_tensor_uid")?,
            descale_s: read(descale_s, "descale_s_tensor_uid")?,
        }),
    };
    Ok(Fp8Attributes {
        attn_scale: params.scale,
        mask: params.band,
        scales: Fp8Scales {
            descale_q: read(a.descale_q_tensor_uid, "descale_q_tensor_uid")?,
            descale_k: read(a.descale_k_tensor_uid, "descale_k_tensor_uid")?,
            descale_v: read(a.descale_v_tensor_uid, "descale_v_tensor_uid")?,
            softmax,
        },
        scale_o: a
            .scale_o_tensor_uid
            .map(|uid| scalar(graph, bundle, uid))
            .transpose()?,
    })
}

/// kernels' FP8 forward on `bundle`: O, the LSE and the amax outputs written in place.
pub fn run_reference(
    graph: &Graph,
    roles: &SdpaRoles,
    bundle: &mut Bundle,
) -> Result<(), HostError> {
    let a = &roles.attrs;
    let attributes = attributes(graph, roles, bundle)?;
    let mut o = bundle.take_owned(a.o_tensor_uid)?;
    let mut lse = match a.stats_tensor_uid.map(|uid| bundle.take_owned(uid)) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            bundle.restore(a.o_tensor_uid, o);
            return Err(e);
        }
    };
    let result = (|| {
        let get = |uid: Option<i64>| uid.map(|u| bundle.get(u)).transpose();
        sdpa_forward_fp8_tensors(
            Fp8Tensors {
                q: bundle.get(a.q_tensor_uid)?,
                k: bundle.get(a.k_tensor_uid)?,
                v: bundle.get(a.v_tensor_uid)?,
                o: o.as_mut(),
                lse: lse.as_mut().map(|t| t.as_mut() as &mut dyn TensorMut),
                seq_len_q: get(a.seq_len_q_tensor_uid)?,
                seq_len_kv: get(a.seq_len_kv_tensor_uid)?,
            },
            &attributes,
        )
        .map_err(|e| HostError::Harness(format!("CPU reference (FP8 forward) failed: {e}")))
    })();
    bundle.restore(a.o_tensor_uid, o);
    if let (Some(uid), Some(t)) = (a.stats_tensor_uid, lse) {
        bundle.restore(uid, t);
    }
    let amaxes = result?;
    for (uid, value) in [
        (a.amax_s_tensor_uid, amaxes.amax_s),
        (a.amax_o_tensor_uid, amaxes.amax_o),
    ] {
        if let Some(uid) = uid {
            write_amax(bundle, uid, value)?;
        }
    }
    Ok(())
}

/// Writes an amax output: one FLOAT element (fp8-attention.md §1.6).
pub fn write_amax(bundle: &mut Bundle, uid: i64, value: f32) -> Result<(), HostError> {
    let t = bundle.writable(uid)?;
    let index = vec![0; t.dims().len()];
    t.set(&index, value)
        .map_err(|e| HostError::Harness(format!("writing amax uid {uid}: {e}")))
}

/// Whether `uid` is one of the node's amax outputs.
pub fn is_amax(a: &SdpaAttributes, uid: i64) -> bool {
    a.amax_s_tensor_uid == Some(uid) || a.amax_o_tensor_uid == Some(uid)
}

/// How an FP8 forward's outputs are judged, by what produced the expected values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yardstick {
    /// kernels' CPU reference, against any engine: fp8-attention.md §5's bounds, which leave
    /// room for a kernel that quantizes P against a running maximum.
    Reference,
    /// A second evaluation of the definition (the shim's float64 oracle): both compute §3 in
    /// f64, so they differ only where a rounding lands within an f64 ulp of an FP8 midpoint.
    Definition,
}

/// The tolerance of output `uid` of an FP8 forward whose inputs are `input`.
pub fn tolerance(
    graph: &Graph,
    roles: &SdpaRoles,
    bundle: &Bundle,
    input: Fp8Format,
    uid: i64,
    yardstick: Yardstick,
) -> Result<Tolerance, HostError> {
    let a = &roles.attrs;
    let one_f32_ulp = Tolerance {
        atol: 0.0,
        rtol: f64::from(f32::EPSILON),
        neighbour_codes: false,
    };
    if Some(uid) == a.stats_tensor_uid {
        return Ok(Tolerance::for_lse(KernelType::Fp8(input)));
    }
    if Some(uid) == a.amax_s_tensor_uid {
        return Ok(match yardstick {
            Yardstick::Reference => Tolerance::EXACT,
            Yardstick::Definition => one_f32_ulp,
        });
    }
    if Some(uid) == a.amax_o_tensor_uid {
        return Ok(match yardstick {
            Yardstick::Reference => Tolerance {
                rtol: 0.2,
                ..Tolerance::EXACT
            },
            Yardstick::Definition => one_f32_ulp,
        });
    }
    let output = bundle.get(uid)?.data_type();
    Ok(match (yardstick, output) {
        // §5: decoded O times 1/scale_o within atol + rtol·|ref|; scaling both sides by
        // scale_o puts the same bound on the decoded values.
        (Yardstick::Reference, _) => {
            let scale_o = match a.scale_o_tensor_uid {
                Some(uid) => f64::from(scalar(graph, bundle, uid)?).abs(),
                None => 1.0,
            };
            let atol = match input {
                Fp8Format::E4M3 | Fp8Format::E4M3Fnuz => 0.08,
                Fp8Format::E5M2 | Fp8Format::E5M2Fnuz => 0.125,
            };
            Tolerance {
                atol: atol * scale_o,
                rtol: 0.2,
                neighbour_codes: false,
            }
        }
        (Yardstick::Definition, KernelType::Fp8(_)) => Tolerance {
            neighbour_codes: true,
            ..Tolerance::EXACT
        },
        (Yardstick::Definition, other) => Tolerance::for_output(other),
    })
}
