//! `RAGGED_SDPA_CUDA_FMHA`: the SDPA plan in the CUDA kernels' terms ([`FmhaProblem`]), and one
//! execute on the handle's stream.
//!
//! hipDNN on NVIDIA passes a `cudaStream_t` where the ABI says `hipStream_t` (ragged-sdpa.md §6),
//! so `SetStream`'s value is the stream the kernels are enqueued on; NULL is the legacy default
//! stream. Nothing here synchronizes: offsets are read on the device by the pre-pass, unless
//! `HIPDNN_RAGGED_SDPA_VALIDATE=1` asks for the validating mode (one synchronization after the
//! pre-pass, and invalid offsets become an INVALID_VALUE naming the tensor).

use std::ffi::c_void;
use std::sync::OnceLock;

use ragged_kernels::cuda_fmha::{
    self as fmha, ExecuteMode, FmhaBuffers, FmhaEngine, FmhaPlan, FmhaProblem, LseDesc,
    OffsetsDesc, RaggedDesc, SeqLenDesc,
};
use ragged_kernels::runtime::cuda::{GpuError, TensorRole};

use crate::applicability::Decline;
use crate::error::PluginError;
use crate::plan::{self, IndexPlan, ScalePlan, SdpaPlan, TensorPlan};
use crate::scale;
use crate::variant_pack::VariantPack;

/// Environment variable selecting [`ExecuteMode::Validate`].
pub const VALIDATE_ENV: &str = "HIPDNN_RAGGED_SDPA_VALIDATE";

/// The CUDA engine's view of the plan; every refusal names the uid and field.
pub fn problem(sdpa: &SdpaPlan) -> Result<FmhaProblem, Decline> {
    let batch = sdpa.q.dims[0];
    let scale = match sdpa.scale {
        ScalePlan::Fixed(value) => value,
        ScalePlan::RuntimeHostScalar { .. } => scale::RUNTIME_PLACEHOLDER,
        ScalePlan::DeviceTensor { uid, .. } => {
            return Err(Decline(format!(
                "scale_tensor_uid tensor uid {uid} is a device-resident tensor (no baked value, \
                 not runtime pass-by-value); the CUDA FMHA kernels take the scale as a host float"
            )));
        }
    };
    let lse = match &sdpa.stats {
        None => None,
        Some(stats) if stats.ragged.is_some() => Some(LseDesc::Ragged(ragged(stats, batch)?)),
        Some(stats) => Some(LseDesc::Dense {
            uid: stats.uid,
            dtype: element(stats.data_type, stats.uid, stats.role)?,
            dims: stats.dims,
            strides: stats.strides,
            alignment: stats.alignment,
        }),
    };
    Ok(FmhaProblem {
        q: ragged(&sdpa.q, batch)?,
        k: ragged(&sdpa.k, batch)?,
        v: ragged(&sdpa.v, batch)?,
        o: ragged(&sdpa.o, batch)?,
        lse,
        seq_len_q: sdpa.seq_len_q.map(|s| seq_len(s, batch)).transpose()?,
        seq_len_kv: sdpa.seq_len_kv.map(|s| seq_len(s, batch)).transpose()?,
        scale,
        mask: sdpa.band.mask_band(),
    })
}

/// The kernels' plan; `Unsupported` (and any other plan-time refusal) is a decline.
pub fn plan(sdpa: &SdpaPlan) -> Result<FmhaPlan, Decline> {
    fmha::plan(&problem(sdpa)?).map_err(|error| Decline(error.to_string()))
}

fn ragged(t: &TensorPlan, batch: i64) -> Result<RaggedDesc, Decline> {
    let Some(r) = t.ragged else {
        return Err(Decline(format!(
            "{} tensor uid {} is dense (dims {:?}); the CUDA FMHA kernels take ragged Q, K, V, O \
             and ragged or dense stats only",
            t.role, t.uid, t.dims
        )));
    };
    Ok(RaggedDesc {
        uid: t.uid,
        dtype: element(t.data_type, t.uid, t.role)?,
        dims: t.dims,
        strides: t.strides,
        alignment: t.alignment,
        offsets: OffsetsDesc {
            uid: r.aux_uid,
            dtype: element(r.aux_data_type, r.aux_uid, "ragged_offset_tensor_uid")?,
            elements: batch + 1,
            multiplier: r.multiplier,
        },
    })
}

fn seq_len(s: IndexPlan, batch: i64) -> Result<SeqLenDesc, Decline> {
    Ok(SeqLenDesc {
        uid: s.uid,
        dtype: element(s.data_type, s.uid, s.role)?,
        elements: batch,
    })
}

fn element(
    data_type: ragged_schema::DataType,
    uid: i64,
    role: &str,
) -> Result<ragged_kernels::DataType, Decline> {
    plan::kernel_type(data_type).ok_or_else(|| {
        Decline(format!(
            "{role} tensor uid {uid} has data type {data_type}, which no engine stores"
        ))
    })
}

/// Whether executes synchronize once to check offsets (read once per process).
pub fn mode() -> ExecuteMode {
    static MODE: OnceLock<ExecuteMode> = OnceLock::new();
    *MODE.get_or_init(|| mode_for(std::env::var_os(VALIDATE_ENV).as_deref()))
}

fn mode_for(value: Option<&std::ffi::OsStr>) -> ExecuteMode {
    if value == Some(std::ffi::OsStr::new("1")) {
        ExecuteMode::Validate
    } else {
        ExecuteMode::Enqueue
    }
}

/// The variant pack's device addresses in the launcher's form (0 for absent optional tensors).
pub fn buffers(
    sdpa: &SdpaPlan,
    fmha_plan: &FmhaPlan,
    pack: &VariantPack<'_>,
    workspace: *mut c_void,
) -> Result<FmhaBuffers, PluginError> {
    // The launcher takes u64 device addresses; usize → u64 is lossless on every 64-bit target.
    let address =
        |uid: i64, role: &'static str| Ok::<_, PluginError>(pack.address(uid, role)? as u64);
    let aux = |t: &TensorPlan| Ok::<_, PluginError>(pack.aux_address(t)? as u64);
    let optional =
        |index: Option<IndexPlan>| Ok::<_, PluginError>(pack.optional_address(index)? as u64);
    let (lse, lse_offsets) = match &sdpa.stats {
        Some(stats) => (address(stats.uid, stats.role)?, aux(stats)?),
        None => (0, 0),
    };
    let workspace_bytes = fmha_plan.workspace_bytes();
    if workspace.is_null() && workspace_bytes > 0 {
        return Err(PluginError::Cuda(GpuError::BadPointer {
            uid: -1,
            role: TensorRole::Workspace,
            address: 0,
            problem: "is null but the plan needs workspace",
        }));
    }
    Ok(FmhaBuffers {
        q: address(sdpa.q.uid, sdpa.q.role)?,
        k: address(sdpa.k.uid, sdpa.k.role)?,
        v: address(sdpa.v.uid, sdpa.v.role)?,
        o: address(sdpa.o.uid, sdpa.o.role)?,
        lse,
        q_offsets: aux(&sdpa.q)?,
        kv_offsets: aux(&sdpa.k)?,
        lse_offsets,
        seq_len_q: optional(sdpa.seq_len_q)?,
        seq_len_kv: optional(sdpa.seq_len_kv)?,
        workspace: workspace as u64,
        workspace_bytes,
    })
}

/// The kernels' plan for this execute: the plan made at `CreateExecutionContext` with the scale
/// of this call, which a runtime pass-by-value scalar may change from one execute to the next.
///
/// # Safety
/// A pass-by-value scale's pointer in `pack` is a host pointer valid for one element of its type.
pub unsafe fn plan_for_execute(
    sdpa: &SdpaPlan,
    fmha_plan: &FmhaPlan,
    pack: &VariantPack<'_>,
) -> Result<FmhaPlan, PluginError> {
    // SAFETY: forwarded contract.
    let scale = unsafe { scale::for_device_engine(sdpa.scale, pack) }?;
    Ok(FmhaPlan {
        scale,
        ..fmha_plan.clone()
    })
}

/// Enqueues the forward on `stream`.
///
/// # Safety
/// `stream` is NULL or a live CUDA stream; every pointer in `pack` is device memory of that
/// stream's context sized as `sdpa` describes, except a pass-by-value scale's, which is a host
/// pointer to one element (plugin-abi.md §5.7); `workspace` holds `fmha_plan.workspace_bytes()`
/// bytes of device memory; all stay valid until the stream completes the work.
pub unsafe fn execute(
    sdpa: &SdpaPlan,
    fmha_plan: &FmhaPlan,
    stream: *mut c_void,
    workspace: *mut c_void,
    pack: &VariantPack<'_>,
) -> Result<(), PluginError> {
    // SAFETY: forwarded contract.
    let fmha_plan = unsafe { plan_for_execute(sdpa, fmha_plan, pack) }?;
    let buffers = buffers(sdpa, &fmha_plan, pack, workspace)?;
    // SAFETY: forwarded contract; `stream` is hipDNN's stream, a `cudaStream_t` on NVIDIA.
    unsafe { FmhaEngine::global().execute(&fmha_plan, stream.cast(), &buffers, mode()) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability;
    use ragged_kernels::{DataType as K, DiagonalAlignment, MaskBand};
    use ragged_schema::Graph;
    use std::ffi::OsStr;

    use crate::test_graphs::{golden, sdpa};

    fn sdpa_plan(graph: &Graph) -> SdpaPlan {
        applicability::plan(graph).expect("the plugin accepts the graph")
    }

    fn declined(graph: &Graph) -> String {
        match plan(&sdpa_plan(graph)) {
            Ok(_) => "accepted".to_owned(),
            Err(Decline(reason)) => reason,
        }
    }

    #[test]
    fn the_golden_graph_maps_field_by_field() {
        let p = problem(&sdpa_plan(&golden())).expect("maps");
        let offsets = |uid| OffsetsDesc {
            uid,
            dtype: K::I32,
            elements: 3,
            multiplier: 1,
        };
        assert_eq!(
            p.q,
            RaggedDesc {
                uid: 1,
                dtype: K::BF16,
                dims: [2, 3, 2, 16],
                strides: [96, 32, 16, 1],
                alignment: 16,
                offsets: offsets(5),
            }
        );
        assert_eq!(
            (p.k.uid, p.k.dims, p.k.offsets),
            (2, [2, 4, 1, 16], offsets(6))
        );
        assert_eq!((p.v.uid, p.v.offsets), (3, offsets(6)));
        assert_eq!((p.o.uid, p.o.offsets), (4, offsets(5)));
        assert_eq!(
            p.lse,
            Some(LseDesc::Dense {
                uid: 9,
                dtype: K::F32,
                dims: [2, 2, 3, 1],
                strides: [6, 3, 1, 1],
                alignment: 16,
            })
        );
        assert_eq!((p.seq_len_q, p.seq_len_kv), (None, None));
        assert_eq!(p.scale, 0.25);
        assert_eq!(p.mask, MaskBand::causal_bottom_right());
    }

    #[test]
    fn head_dim_16_has_no_compiled_kernel_and_d64_plans() {
        let g = golden();
        let why = declined(&g);
        assert_eq!(why, "tensor uid 1 (Q): dims[3] (head dim) = 16: 64 or 128");

        let mut g = golden();
        for t in g.tensors.iter_mut() {
            match t.uid {
                1 | 4 => t.strides = vec![3 * 2 * 64, 2 * 64, 64, 1],
                2 | 3 => t.strides = vec![4 * 64, 64, 64, 1],
                _ => continue,
            }
            t.dims[3] = 64;
        }
        let fmha = plan(&sdpa_plan(&g)).expect("bf16 D = 64 is compiled");
        assert!(fmha.workspace_bytes() > 0);
        assert_eq!(fmha.kernel, "ragged_fmha_fwd_bf16_d64");
    }

    #[test]
    fn dense_operands_and_device_scale_tensors_are_declined_by_uid() {
        let mut g = golden();
        let k = g.tensors.iter_mut().find(|t| t.uid == 2).expect("K");
        k.ragged_offset_tensor_uid = None;
        k.dims = vec![2, 1, 4, 16];
        let v = g.tensors.iter_mut().find(|t| t.uid == 3).expect("V");
        v.ragged_offset_tensor_uid = None;
        v.dims = vec![2, 1, 4, 16];
        let why = declined(&g);
        assert!(
            why.starts_with("k_tensor_uid tensor uid 2 is dense"),
            "{why}"
        );

        let mut g = golden();
        g.tensors.push(
            ragged_schema::TensorAttributes::new()
                .set_uid(30)
                .set_data_type(ragged_schema::DataType::Float)
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_is_runtime_pass_by_value(false),
        );
        sdpa(&mut g).scale_tensor_uid = Some(30);
        let why = declined(&g);
        assert!(
            why.starts_with("scale_tensor_uid tensor uid 30 is a device-resident tensor"),
            "{why}"
        );
    }

    /// The golden graph at D = 64 (a compiled head dim), its scale a pass-by-value scalar uid 30.
    fn d64_with_runtime_scale() -> Graph {
        let mut g = golden();
        for t in g.tensors.iter_mut() {
            match t.uid {
                1 | 4 => t.strides = vec![3 * 2 * 64, 2 * 64, 64, 1],
                2 | 3 => t.strides = vec![4 * 64, 64, 64, 1],
                _ => continue,
            }
            t.dims[3] = 64;
        }
        g.tensors.push(
            ragged_schema::TensorAttributes::new()
                .set_uid(30)
                .set_data_type(ragged_schema::DataType::Float)
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_is_runtime_pass_by_value(true),
        );
        sdpa(&mut g).scale_tensor_uid = Some(30);
        g
    }

    #[test]
    fn a_runtime_pass_by_value_scale_is_planned_and_read_at_each_execute() {
        let sdpa_plan = sdpa_plan(&d64_with_runtime_scale());
        let fmha = plan(&sdpa_plan).expect("a pass-by-value scale no longer declines");
        for value in [0.0625f32, -3.5] {
            let mut scalar = value;
            let entries = [crate::abi::types::DeviceBuffer {
                uid: 30,
                ptr: (&raw mut scalar).cast(),
            }];
            let pack = VariantPack::new(&entries).expect("one binding");
            // SAFETY: uid 30 is bound to a live host f32.
            let resolved = unsafe { plan_for_execute(&sdpa_plan, &fmha, &pack) }.expect("read");
            assert_eq!(resolved.scale.to_bits(), value.to_bits());
            assert_eq!(
                FmhaPlan {
                    scale: fmha.scale,
                    ..resolved
                },
                fmha
            );
        }
    }

    #[test]
    fn an_execute_without_the_scale_binding_is_bad_param_naming_it() {
        let sdpa_plan = sdpa_plan(&d64_with_runtime_scale());
        let fmha = plan(&sdpa_plan).expect("plans");
        let pack = VariantPack::new(&[]).expect("empty pack");
        // SAFETY: nothing is bound, so nothing is read.
        let error = unsafe { plan_for_execute(&sdpa_plan, &fmha, &pack) }.err();
        assert_eq!(
            error.as_ref().map(PluginError::status),
            Some(crate::abi::types::Status::BAD_PARAM)
        );
        assert!(
            error
                .map(|e| e.to_string())
                .is_some_and(|e| e.contains("tensor uid 30 (scale_tensor_uid)")),
        );
    }

    #[test]
    fn the_top_left_band_keeps_its_alignment() {
        let mut g = golden();
        let s = sdpa(&mut g);
        s.causal_mask_bottom_right = false;
        s.causal_mask = false;
        s.right_bound = Some(0);
        s.diagonal_alignment = ragged_schema::DiagonalAlignment::TopLeft;
        let p = problem(&sdpa_plan(&g)).expect("maps");
        assert_eq!(p.mask.alignment, DiagonalAlignment::TopLeft);
        assert_eq!((p.mask.left, p.mask.right), (None, Some(0)));
    }

    #[test]
    fn only_the_value_1_selects_validation() {
        assert_eq!(mode_for(None), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("0"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("yes"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("1"))), ExecuteMode::Validate);
    }
}
