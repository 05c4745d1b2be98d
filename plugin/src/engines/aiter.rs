//! `RAGGED_SDPA_AITER_FMHA`: the SDPA plan in the AMD engine's terms ([`AiterProblem`]), its
//! applicability on the current HIP device, and one execute on the handle's stream.

use std::ffi::c_void;

use ragged_kernels::aiter::{
    AiterEngine, AiterPlan, AiterProblem, DeviceBuffers, IndexWidth, LseLayout, RaggedAux,
    RaggedOperand, SeqLens,
};

use crate::applicability::Decline;
use crate::error::PluginError;
use crate::plan::{IndexPlan, ScalePlan, SdpaPlan, TensorPlan};
use crate::scale;
use crate::variant_pack::VariantPack;

/// The AITER engine's view of the plan; every refusal names the uid and field.
pub fn problem(sdpa: &SdpaPlan) -> Result<AiterProblem, Decline> {
    let scale = match sdpa.scale {
        ScalePlan::Fixed(value) => value,
        ScalePlan::RuntimeHostScalar { .. } => scale::RUNTIME_PLACEHOLDER,
        ScalePlan::DeviceTensor { uid, .. } => {
            return Err(Decline(format!(
                "scale_tensor_uid tensor uid {uid} is a device-resident tensor (no baked value, \
                 not runtime pass-by-value); AITER takes the scale as a host float"
            )));
        }
    };
    let dtype = crate::plan::kernel_type(sdpa.q.data_type).ok_or_else(|| {
        Decline(format!(
            "q_tensor_uid tensor uid {} has data type {}, which no engine stores",
            sdpa.q.uid, sdpa.q.data_type
        ))
    })?;
    let lse = match &sdpa.stats {
        None => LseLayout::None,
        Some(stats) => match stats.ragged {
            Some(_) => LseLayout::Ragged {
                uid: stats.uid,
                seq_stride: stats.strides[1],
                head_stride: stats.strides[2],
                aux: aux(stats)?,
                alignment: stats.alignment,
            },
            None => LseLayout::Dense {
                uid: stats.uid,
                strides: stats.strides,
                alignment: stats.alignment,
            },
        },
    };
    Ok(AiterProblem {
        dtype,
        batch: sdpa.q.dims[0],
        s_q_max: sdpa.q.dims[1],
        s_kv_max: sdpa.k.dims[1],
        q: operand(&sdpa.q)?,
        k: operand(&sdpa.k)?,
        v: operand(&sdpa.v)?,
        o: operand(&sdpa.o)?,
        seq_len_q: sdpa.seq_len_q.map(seq_lens).transpose()?,
        seq_len_kv: sdpa.seq_len_kv.map(seq_lens).transpose()?,
        mask: sdpa.band.mask_band(),
        scale,
        lse,
    })
}

/// Applicability on the calling thread's current HIP device.
pub fn plan(engine: &AiterEngine, sdpa: &SdpaPlan) -> Result<(AiterProblem, AiterPlan), Decline> {
    let problem = problem(sdpa)?;
    let device = engine
        .current_device()
        .map_err(|error| Decline(format!("the current HIP device is unknown: {error}")))?;
    let plan = engine
        .plan(&problem, device)
        .map_err(|decline| Decline(decline.to_string()))?;
    Ok((problem, plan))
}

fn operand(t: &TensorPlan) -> Result<RaggedOperand, Decline> {
    if t.ragged.is_none() {
        return Err(Decline(format!(
            "{} tensor uid {} is dense (dims {:?}); AITER's group mode takes ragged Q, K, V, O",
            t.role, t.uid, t.dims
        )));
    }
    Ok(RaggedOperand::from_bshd(
        t.uid,
        t.dims,
        t.strides,
        aux(t)?,
        t.alignment,
    ))
}

fn aux(t: &TensorPlan) -> Result<RaggedAux, Decline> {
    let r = t.ragged.ok_or_else(|| {
        Decline(format!(
            "{} tensor uid {} has no ragged_offset",
            t.role, t.uid
        ))
    })?;
    Ok(RaggedAux {
        uid: r.aux_uid,
        width: width(r.aux_data_type, r.aux_uid, "ragged_offset_tensor_uid")?,
        multiplier: r.multiplier,
    })
}

fn seq_lens(s: IndexPlan) -> Result<SeqLens, Decline> {
    Ok(SeqLens {
        uid: s.uid,
        width: width(s.data_type, s.uid, s.role)?,
    })
}

fn width(data_type: ragged_schema::DataType, uid: i64, role: &str) -> Result<IndexWidth, Decline> {
    match crate::plan::kernel_type(data_type) {
        Some(ragged_kernels::DataType::I32) => Ok(IndexWidth::I32),
        Some(ragged_kernels::DataType::I64) => Ok(IndexWidth::I64),
        _ => Err(Decline(format!(
            "{role} tensor uid {uid} has data type {data_type}; INT32 or INT64 required"
        ))),
    }
}

/// The problem for this execute: the one planned at `CreateExecutionContext` with the scale of
/// this call, which a runtime pass-by-value scalar may change from one execute to the next.
///
/// # Safety
/// A pass-by-value scale's pointer in `pack` is a host pointer valid for one element of its type.
pub unsafe fn problem_for_execute(
    sdpa: &SdpaPlan,
    problem: &AiterProblem,
    pack: &VariantPack<'_>,
) -> Result<AiterProblem, PluginError> {
    // SAFETY: forwarded contract.
    let scale = unsafe { scale::for_device_engine(sdpa.scale, pack) }?;
    Ok(AiterProblem { scale, ..*problem })
}

/// Enqueues the forward on `stream` (a `hipStream_t`; NULL is the null stream).
///
/// # Safety
/// As [`AiterEngine::execute`]: every pointer in `pack` is device memory of the current HIP
/// device sized as `problem` describes, except a pass-by-value scale's, which is a host pointer
/// to one element (plugin-abi.md §5.7); `workspace` holds `plan.workspace.size` bytes, and all
/// stay valid until the stream reaches the last kernel.
pub unsafe fn execute(
    engine: &AiterEngine,
    sdpa: &SdpaPlan,
    problem: &AiterProblem,
    plan: &AiterPlan,
    stream: *mut c_void,
    workspace: *mut c_void,
    pack: &VariantPack<'_>,
) -> Result<(), PluginError> {
    // SAFETY: forwarded contract.
    let problem = &unsafe { problem_for_execute(sdpa, problem, pack) }?;
    let (lse, lse_offsets) = match &sdpa.stats {
        Some(stats) => (
            pack.address(stats.uid, stats.role)?,
            pack.aux_address(stats)?,
        ),
        None => (0, 0),
    };
    let buffers = DeviceBuffers {
        q: pack.address(sdpa.q.uid, sdpa.q.role)?,
        k: pack.address(sdpa.k.uid, sdpa.k.role)?,
        v: pack.address(sdpa.v.uid, sdpa.v.role)?,
        o: pack.address(sdpa.o.uid, sdpa.o.role)?,
        q_offsets: pack.aux_address(&sdpa.q)?,
        k_offsets: pack.aux_address(&sdpa.k)?,
        seq_len_q: pack.optional_address(sdpa.seq_len_q)?,
        seq_len_kv: pack.optional_address(sdpa.seq_len_kv)?,
        lse,
        lse_offsets,
        workspace: workspace as usize,
    };
    // SAFETY: forwarded contract.
    unsafe {
        engine.execute(
            problem,
            plan,
            &buffers,
            plan.workspace.size,
            stream as usize,
        )
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability;
    use ragged_kernels::aiter::{GpuArch, check_applicability};
    use ragged_kernels::{DataType as K, MaskBand};
    use ragged_schema::Graph;

    use crate::test_graphs::golden;

    #[test]
    fn the_golden_graph_maps_field_by_field() {
        let sdpa = applicability::plan(&golden()).expect("accepted");
        let p = problem(&sdpa).expect("maps");
        let aux = |uid| RaggedAux {
            uid,
            width: IndexWidth::I32,
            multiplier: 1,
        };
        assert_eq!(p.dtype, K::BF16);
        assert_eq!((p.batch, p.s_q_max, p.s_kv_max), (2, 3, 4));
        assert_eq!(
            p.q,
            RaggedOperand {
                uid: 1,
                heads: 2,
                head_dim: 16,
                seq_stride: 32,
                head_stride: 16,
                dim_stride: 1,
                aux: aux(5),
                alignment: 16,
            }
        );
        assert_eq!(
            (p.k.uid, p.k.heads, p.k.seq_stride, p.k.aux),
            (2, 1, 16, aux(6))
        );
        assert_eq!((p.v.uid, p.v.aux), (3, aux(6)));
        assert_eq!((p.o.uid, p.o.aux), (4, aux(5)));
        assert_eq!(
            p.lse,
            LseLayout::Dense {
                uid: 9,
                strides: [6, 3, 1, 1],
                alignment: 16
            }
        );
        assert_eq!(p.mask, MaskBand::causal_bottom_right());
        assert_eq!(p.scale, 0.25);
    }

    #[test]
    fn the_mapped_golden_graph_is_applicable_on_gfx942_and_declined_elsewhere() {
        let sdpa = applicability::plan(&golden()).expect("accepted");
        let p = problem(&sdpa).expect("maps");
        let plan =
            check_applicability(&p, &GpuArch::new("gfx942:sramecc+:xnack-"), "gfx942;gfx950");
        assert!(plan.is_ok_and(|plan| plan.workspace.size > 0));
        let other = check_applicability(&p, &GpuArch::new("gfx1100"), "gfx942;gfx950")
            .err()
            .map(|d| d.to_string());
        assert!(other.is_some_and(|d| d.contains("gfx1100")));
    }

    fn with_scale_tensor(pass_by_value: bool) -> Graph {
        let mut g = golden();
        g.tensors.push(
            ragged_schema::TensorAttributes::new()
                .set_uid(30)
                .set_data_type(ragged_schema::DataType::Half)
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_is_runtime_pass_by_value(pass_by_value),
        );
        match &mut g.nodes[0].attributes {
            ragged_schema::NodeAttributes::Sdpa(s) => s.scale_tensor_uid = Some(30),
            other => panic!("golden node is {other:?}"),
        }
        g
    }

    #[test]
    fn a_pass_by_value_scale_is_applicable_and_replaced_at_each_execute() {
        let sdpa = applicability::plan(&with_scale_tensor(true)).expect("accepted");
        let planned = problem(&sdpa).expect("a pass-by-value scale maps");
        let arch = GpuArch::new("gfx942");
        assert!(check_applicability(&planned, &arch, "gfx942").is_ok());

        let mut scalar = half::f16::from_f32(0.125);
        let entries = [crate::abi::types::DeviceBuffer {
            uid: 30,
            ptr: (&raw mut scalar).cast(),
        }];
        let pack = VariantPack::new(&entries).expect("one binding");
        // SAFETY: uid 30 is bound to a live host f16.
        let resolved = unsafe { problem_for_execute(&sdpa, &planned, &pack) }.expect("read");
        assert_eq!(resolved.scale, 0.125);
        assert_eq!(
            AiterProblem {
                scale: planned.scale,
                ..resolved
            },
            planned
        );

        let empty = VariantPack::new(&[]).expect("empty pack");
        // SAFETY: nothing is bound, so nothing is read.
        let missing = unsafe { problem_for_execute(&sdpa, &planned, &empty) }
            .err()
            .map(|e| (e.status(), e.to_string()));
        assert_eq!(
            missing,
            Some((
                crate::abi::types::Status::BAD_PARAM,
                "tensor uid 30 (scale_tensor_uid) has no entry in device_buffers".to_owned()
            ))
        );
    }

    #[test]
    fn a_device_resident_scale_tensor_is_declined_by_uid() {
        let sdpa = applicability::plan(&with_scale_tensor(false)).expect("accepted");
        let why = problem(&sdpa).err().map(|Decline(why)| why);
        assert!(
            why.as_deref().is_some_and(
                |w| w.starts_with("scale_tensor_uid tensor uid 30 is a device-resident tensor")
            ),
            "{why:?}"
        );
    }

    #[test]
    fn fp32_graphs_map_and_are_declined_by_aiter_naming_q() {
        let mut g = golden();
        for t in g.tensors.iter_mut().filter(|t| (1..=4).contains(&t.uid)) {
            t.data_type = ragged_schema::DataType::Float;
        }
        let sdpa = applicability::plan(&g).expect("accepted by the plugin");
        let p = problem(&sdpa).expect("maps");
        let why = check_applicability(&p, &GpuArch::new("gfx942"), "gfx942")
            .err()
            .map(|d| d.to_string())
            .unwrap_or_default();
        assert!(why.starts_with("tensor uid 1: data type FLOAT"), "{why}");
    }
}
