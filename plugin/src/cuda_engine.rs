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

use ragged_kernels::gpu::fmha::{
    self, ExecuteMode, FmhaBuffers, FmhaEngine, FmhaPlan, FmhaProblem, LseDesc, OffsetsDesc,
    RaggedDesc, SeqLenDesc,
};
use ragged_kernels::gpu::{GpuError, TensorRole};

use crate::applicability::Decline;
use crate::error::PluginError;
use crate::plan::{self, IndexPlan, ScalePlan, SdpaPlan, TensorPlan};
use crate::variant_pack::VariantPack;

/// Environment variable selecting [`ExecuteMode::Validate`].
pub const VALIDATE_ENV: &str = "HIPDNN_RAGGED_SDPA_VALIDATE";

/// The CUDA engine's view of the plan; every refusal names the uid and field.
pub fn problem(sdpa: &SdpaPlan) -> Result<FmhaProblem, Decline> {
    let batch = sdpa.q.dims[0];
    let scale = match sdpa.scale {
        ScalePlan::Fixed(value) => value,
        ScalePlan::Tensor { uid, .. } => {
            return Err(Decline(format!(
                "scale_tensor_uid tensor uid {uid} is read at execute; the CUDA FMHA kernels take \
                 the scale when the plan is made (bake it as a tensor value or attn_scale_value)"
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
    let address = |uid: i64, role: &'static str| -> Result<u64, PluginError> {
        Ok(pack.pointer(uid, role)?.as_ptr() as u64)
    };
    let aux = |t: &TensorPlan| -> Result<u64, PluginError> {
        match t.ragged {
            Some(r) => address(r.aux_uid, "ragged_offset_tensor_uid"),
            None => Ok(0),
        }
    };
    let optional = |index: Option<IndexPlan>| -> Result<u64, PluginError> {
        index.map_or(Ok(0), |s| address(s.uid, s.role))
    };
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

/// Enqueues the forward on `stream`.
///
/// # Safety
/// `stream` is NULL or a live CUDA stream; every pointer in `pack` is device memory of that
/// stream's context sized as `sdpa` describes; `workspace` holds `fmha_plan.workspace_bytes()`
/// bytes of device memory; all stay valid until the stream completes the work.
pub unsafe fn execute(
    sdpa: &SdpaPlan,
    fmha_plan: &FmhaPlan,
    stream: *mut c_void,
    workspace: *mut c_void,
    pack: &VariantPack<'_>,
) -> Result<(), PluginError> {
    let buffers = buffers(sdpa, fmha_plan, pack, workspace)?;
    // SAFETY: forwarded contract; `stream` is hipDNN's stream, a `cudaStream_t` on NVIDIA.
    unsafe { FmhaEngine::global().execute(fmha_plan, stream.cast(), &buffers, mode()) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn only_the_value_1_selects_validation() {
        assert_eq!(mode_for(None), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("0"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("yes"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("1"))), ExecuteMode::Validate);
    }
}
