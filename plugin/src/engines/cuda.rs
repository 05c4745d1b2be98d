//! `RAGGED_SDPA_CUDA_FMHA`: the kernels' CUDA plan (the shared GPU contract, then the CUDA
//! kernels' limits), and one execute on the handle's stream.
//!
//! hipDNN on NVIDIA passes a `cudaStream_t` where the ABI says `hipStream_t` (ragged-sdpa.md §6),
//! so `SetStream`'s value is the stream the kernels are enqueued on; NULL is the legacy default
//! stream. Nothing here synchronizes: offsets are read on the device by the pre-pass, unless
//! `HIPDNN_RAGGED_SDPA_VALIDATE=1` asks for the validating mode (one synchronization after the
//! pre-pass, and invalid offsets become an INVALID_VALUE naming the tensor; on a stream being
//! captured into a CUDA graph, where that synchronisation is forbidden, the execute is refused with
//! BAD_PARAM before anything is enqueued, so the caller's capture stays valid).

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use ragged_core::problem::RaggedSdpaProblem;
use ragged_engine_cuda::backward::{self as bwd, BackwardBuffers, BackwardEngine, BackwardPlan};
use ragged_engine_cuda::forward::{self as fmha, ExecuteMode, FmhaBuffers, FmhaEngine, FmhaPlan};
use ragged_gpu_runtime::cuda::{GpuError, TensorRole, runtime};

use super::{CUDA_FMHA, Listing, Planned, Planner};
use ragged_core::problem::BackwardProblem;
use crate::error::PluginError;
use crate::scale;
use crate::variant_pack::VariantPack;
use ragged_core::Decline;

/// Environment variable selecting [`ExecuteMode::Validate`].
pub const VALIDATE_ENV: &str = "HIPDNN_RAGGED_SDPA_VALIDATE";

/// The engine: the kernels' plan (the shared GPU contract, then the CUDA kernels' limits).
pub struct CudaFmha;

impl Planner for CudaFmha {
    fn listing(&self) -> Listing {
        listing_for(probe())
    }

    fn plan(&self, problem: &RaggedSdpaProblem) -> Result<Box<dyn Planned>, Decline> {
        Ok(Box::new(plan(problem)?))
    }

    fn plan_backward(&self, problem: &Arc<BackwardProblem>) -> Result<Box<dyn Planned>, Decline> {
        Ok(Box::new(plan_backward(problem)?))
    }
}

/// The CUDA backward's plan for one backward node, holding its problem (a backward plan runs
/// without the forward problem the trait's `execute` takes).
#[derive(Debug)]
pub struct CudaBackwardPlan {
    pub problem: Arc<BackwardProblem>,
    pub plan: BackwardPlan,
}

/// The backward kernels' plan; every refusal names uid, field, value and need.
pub fn plan_backward(problem: &Arc<BackwardProblem>) -> Result<CudaBackwardPlan, Decline> {
    let p = &**problem;
    let plan = bwd::plan(
        &p.forward,
        bwd::Gradients {
            d_o: &p.d_o,
            dq: &p.dq,
            dk: &p.dk,
            dv: &p.dv,
        },
    )?;
    Ok(CudaBackwardPlan {
        problem: Arc::clone(problem),
        plan,
    })
}

impl Planned for CudaBackwardPlan {
    fn workspace_size(&self) -> usize {
        usize::try_from(self.plan.workspace_bytes()).unwrap_or(usize::MAX)
    }

    /// Compiles and loads the backward kernels for `stream`'s device now.
    unsafe fn prepare(&self, stream: *mut c_void) -> Result<(), PluginError> {
        // SAFETY: forwarded contract.
        unsafe { BackwardEngine::global().prepare(stream.cast()) }?;
        Ok(())
    }

    fn execute_backward(&self, pack: &VariantPack<'_>) -> Result<(), PluginError> {
        let p = &*self.problem;
        // SAFETY: the pack's contract: a pass-by-value scale's pointer is a host pointer to one
        // element of its type.
        let scale = unsafe { scale::for_device_engine(p.forward.scale, pack) }?;
        let mut plan = self.plan.clone();
        plan.forward.scale = scale;
        let buffers = backward_buffers(p, &plan, pack)?;
        // SAFETY: the pack's contract: every address is device memory of the stream's context
        // sized as the problem describes, the gradients overlap no input, the workspace holds
        // `workspace_bytes()`, the stream is NULL or live, all until the work completes.
        unsafe { BackwardEngine::global().execute(&plan, pack.stream().cast(), &buffers, mode()) }?;
        Ok(())
    }
}

/// The variant pack's device addresses in the backward launcher's form.
pub fn backward_buffers(
    p: &BackwardProblem,
    plan: &BackwardPlan,
    pack: &VariantPack<'_>,
) -> Result<BackwardBuffers, PluginError> {
    let address = |t: &ragged_core::problem::Operand| {
        Ok::<_, PluginError>(pack.address(t.uid, t.role)? as u64)
    };
    // The workspace is the backward plan's (it holds the forward's records and more), checked
    // before any tensor as before; Q, K, V, O, the LSE (`forward.stats`), offsets and seq_lens
    // are bound as the forward binds them.
    let workspace_bytes = plan.workspace_bytes();
    let workspace = workspace_address(pack, workspace_bytes)?;
    let forward = FmhaBuffers {
        workspace,
        workspace_bytes,
        ..buffers(&p.forward, &plan.forward, pack)?
    };
    Ok(BackwardBuffers {
        forward,
        d_o: address(&p.d_o)?,
        dq: address(&p.dq)?,
        dk: address(&p.dk)?,
        dv: address(&p.dv)?,
    })
}

/// Listed when a usable CUDA device, driver and NVRTC are found (`Ok(summary)`).
pub fn listing_for(probe: Result<String, String>) -> Listing {
    let name = CUDA_FMHA.name_str();
    match probe {
        Ok(summary) => Listing {
            listed: true,
            line: Some(format!("{name} listed: {summary}")),
        },
        Err(reason) => Listing {
            listed: false,
            line: Some(format!("{name} not listed: {reason}")),
        },
    }
}

fn probe() -> Result<String, String> {
    match runtime::probe() {
        Ok(cuda) => Ok(format!(
            "CUDA driver {}, NVRTC {}.{}, devices [{}]",
            runtime::format_cuda_version(cuda.driver_version),
            cuda.nvrtc_version.0,
            cuda.nvrtc_version.1,
            cuda.devices
                .iter()
                .map(|d| format!("{} {} ({})", d.ordinal, d.name, d.target.arch()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Err(error) => Err(error.to_string()),
    }
}

/// The kernels' plan; every refusal names uid, field, value and need.
pub fn plan(problem: &RaggedSdpaProblem) -> Result<FmhaPlan, Decline> {
    fmha::plan(problem)
}

impl Planned for FmhaPlan {
    fn workspace_size(&self) -> usize {
        usize::try_from(self.workspace_bytes()).unwrap_or(usize::MAX)
    }

    /// Compiles and loads the kernels for `stream`'s device now, so the first execute does not
    /// pay for NVRTC.
    unsafe fn prepare(&self, stream: *mut c_void) -> Result<(), PluginError> {
        // SAFETY: forwarded contract.
        unsafe { FmhaEngine::global().prepare(stream.cast()) }?;
        Ok(())
    }

    fn execute(
        &self,
        problem: &RaggedSdpaProblem,
        pack: &VariantPack<'_>,
    ) -> Result<(), PluginError> {
        let fmha_plan = plan_for_execute(problem, self, pack)?;
        let buffers = buffers(problem, &fmha_plan, pack)?;
        // SAFETY: the pack's contract: every address is device memory of the stream's context
        // sized as `problem` describes, the workspace holds `workspace_bytes()`, the stream is
        // NULL or live (hipDNN's stream, a `cudaStream_t` on NVIDIA), all until it completes.
        unsafe {
            FmhaEngine::global().execute(&fmha_plan, pack.stream().cast(), &buffers, mode())
        }?;
        Ok(())
    }
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
    problem: &RaggedSdpaProblem,
    fmha_plan: &FmhaPlan,
    pack: &VariantPack<'_>,
) -> Result<FmhaBuffers, PluginError> {
    // The launcher takes u64 device addresses; usize → u64 is lossless on every 64-bit target.
    let address = |t: &ragged_core::problem::Operand| {
        Ok::<_, PluginError>(pack.address(t.uid, t.role)? as u64)
    };
    let aux = |t: &ragged_core::problem::Operand| Ok::<_, PluginError>(pack.aux_address(t)? as u64);
    let optional = |index| Ok::<_, PluginError>(pack.optional_address(index)? as u64);
    let (lse, lse_offsets) = match &problem.stats {
        Some(stats) => (address(stats)?, aux(stats)?),
        None => (0, 0),
    };
    let workspace_bytes = fmha_plan.workspace_bytes();
    let workspace = workspace_address(pack, workspace_bytes)?;
    Ok(FmhaBuffers {
        q: address(&problem.q)?,
        k: address(&problem.k)?,
        v: address(&problem.v)?,
        o: address(&problem.o)?,
        lse,
        q_offsets: aux(&problem.q)?,
        kv_offsets: aux(&problem.k)?,
        lse_offsets,
        seq_len_q: optional(problem.seq_len_q)?,
        seq_len_kv: optional(problem.seq_len_kv)?,
        workspace,
        workspace_bytes,
    })
}

/// The pack's workspace address, refused when null while the plan needs `workspace_bytes`.
fn workspace_address(pack: &VariantPack<'_>, workspace_bytes: u64) -> Result<u64, PluginError> {
    let workspace = pack.workspace();
    if workspace.is_null() && workspace_bytes > 0 {
        return Err(PluginError::Cuda(GpuError::BadPointer {
            uid: -1,
            role: TensorRole::Workspace,
            address: 0,
            problem: "is null but the plan needs workspace",
        }));
    }
    Ok(workspace as u64)
}

/// The kernels' plan for this execute: the plan made at `CreateExecutionContext` with the scale
/// of this call, which a runtime pass-by-value scalar may change from one execute to the next.
pub fn plan_for_execute(
    problem: &RaggedSdpaProblem,
    fmha_plan: &FmhaPlan,
    pack: &VariantPack<'_>,
) -> Result<FmhaPlan, PluginError> {
    // SAFETY: the pack's contract: a pass-by-value scale's pointer is a host pointer to one
    // element of its type.
    let scale = unsafe { scale::for_device_engine(problem.scale, pack) }?;
    Ok(FmhaPlan {
        scale,
        ..fmha_plan.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability;
    use ragged_core::DiagonalAlignment;
    use ragged_schema::Graph;
    use std::ffi::OsStr;
    use std::ptr::null_mut;

    use crate::test_graphs::{golden, sdpa};

    fn sdpa_plan(graph: &Graph) -> RaggedSdpaProblem {
        applicability::problem(graph).expect("the plugin accepts the graph")
    }

    fn declined(graph: &Graph) -> String {
        match plan(&sdpa_plan(graph)) {
            Ok(_) => "accepted".to_owned(),
            Err(reason) => reason.to_string(),
        }
    }

    #[test]
    fn head_dim_16_has_no_compiled_kernel_and_d64_plans() {
        let g = golden();
        let why = declined(&g);
        assert_eq!(
            why,
            "tensor uid 1: q_tensor_uid head dim = 16, need 64, 96, 128, 192 or 256 (the compiled \
             CUDA FMHA kernels)"
        );

        let g = golden_d64();
        let fmha = plan(&sdpa_plan(&g)).expect("bf16 D = 64 is compiled");
        assert!(fmha.workspace_bytes() > 0);
        assert_eq!(fmha.kernel.name(), "ragged_fmha_fwd_bf16_d64");
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
            why.starts_with("tensor uid 2: k_tensor_uid layout = dense (dims [2, 1, 4, 16])"),
            "{why}"
        );

        let mut g = golden();
        g.tensors.push(scale_scalar(false));
        sdpa(&mut g).scale_tensor_uid = Some(30);
        let why = declined(&g);
        assert!(
            why.starts_with(
                "tensor uid 30: scale_tensor_uid residency = a device-resident tensor (no baked \
                 value, not runtime pass-by-value)"
            ),
            "{why}"
        );
    }

    /// A float scalar uid 30 for `scale_tensor_uid`: runtime pass-by-value, or a device tensor.
    fn scale_scalar(pass_by_value: bool) -> ragged_schema::TensorAttributes {
        ragged_schema::TensorAttributes::new()
            .set_uid(30)
            .set_data_type(ragged_schema::DataType::Float)
            .set_dims(vec![1])
            .set_strides(vec![1])
            .set_is_runtime_pass_by_value(pass_by_value)
    }

    /// The golden graph at D = 64, a head dim the CUDA kernels are compiled for.
    fn golden_d64() -> Graph {
        let mut g = golden();
        for t in g.tensors.iter_mut() {
            match t.uid {
                1 | 4 => t.strides = vec![3 * 2 * 64, 2 * 64, 64, 1],
                2 | 3 => t.strides = vec![4 * 64, 64, 64, 1],
                _ => continue,
            }
            t.dims[3] = 64;
        }
        g
    }

    /// The golden graph at D = 64 (a compiled head dim), its scale a pass-by-value scalar uid 30.
    fn d64_with_runtime_scale() -> Graph {
        let mut g = golden_d64();
        g.tensors.push(scale_scalar(true));
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
            // SAFETY: uid 30 is bound to a live host f32; nothing else is dereferenced.
            let pack =
                unsafe { VariantPack::new(&entries, null_mut(), null_mut()) }.expect("one binding");
            let resolved = plan_for_execute(&sdpa_plan, &fmha, &pack).expect("read");
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
        // SAFETY: nothing is bound, so nothing is read.
        let pack = unsafe { VariantPack::new(&[], null_mut(), null_mut()) }.expect("empty pack");
        let error = plan_for_execute(&sdpa_plan, &fmha, &pack).err();
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
        let p = sdpa_plan(&g);
        assert_eq!(p.mask.alignment, DiagonalAlignment::TopLeft);
        assert_eq!((p.mask.left, p.mask.right), (None, Some(0)));
    }

    /// The backward test graph (GQA, causal bottom-right, dense LSE) at `dtype` and head dim `d`.
    fn backward_graph(dtype: ragged_schema::DataType, d: i64) -> Graph {
        let mut g = crate::backward_problem::tests::graph();
        for t in g.tensors.iter_mut() {
            if t.ragged_offset_tensor_uid.is_some() {
                let [_, s, h, _] = [t.dims[0], t.dims[1], t.dims[2], t.dims[3]];
                t.dims[3] = d;
                t.strides = vec![s * h * d, h * d, d, 1];
                t.data_type = dtype;
            }
        }
        g
    }

    fn backward_plan(g: &Graph) -> Result<CudaBackwardPlan, Decline> {
        match applicability::accept(g).expect("the plugin accepts the graph") {
            applicability::Accepted::Backward(p) => plan_backward(&p),
            other => panic!("not a backward: {other:?}"),
        }
    }

    #[test]
    fn a_bf16_d64_backward_plans_with_workspace_and_other_head_dims_decline_by_uid() {
        let plan = backward_plan(&backward_graph(ragged_schema::DataType::BFloat16, 64))
            .expect("bf16 D 64 has backward kernels");
        assert_eq!(plan.plan.kernels.dq, "ragged_fmha_bwd_dq_bf16_d64");
        assert_eq!(plan.plan.gradient_uids, [5, 7, 8, 9]);
        assert_eq!(plan.workspace_size() as u64, plan.plan.workspace_bytes());
        assert!(plan.workspace_size() > 2 * 4 * 4 * 4, "holds Di");
        let f16 = backward_plan(&backward_graph(ragged_schema::DataType::Half, 128)).expect("f16");
        assert_eq!(f16.plan.kernels.dkdv, "ragged_fmha_bwd_dkdv_f16_d128");

        let why = backward_plan(&backward_graph(ragged_schema::DataType::BFloat16, 96))
            .expect_err("no D 96 backward")
            .to_string();
        assert!(
            why.starts_with("tensor uid 1: q_tensor_uid head dim = 96, need 64 or 128"),
            "{why}"
        );
    }

    #[test]
    fn a_backward_plan_does_not_run_a_forward_and_needs_its_workspace() {
        let plan = backward_plan(&backward_graph(ragged_schema::DataType::Half, 64)).expect("f16");
        let g = golden_d64();
        // SAFETY: nothing is bound, so nothing is read.
        let pack = unsafe { VariantPack::new(&[], null_mut(), null_mut()) }.expect("empty pack");
        assert!(plan.execute(&sdpa_plan(&g), &pack).is_err());
        let error = plan
            .execute_backward(&pack)
            .expect_err("nothing bound")
            .to_string();
        assert!(
            error.contains("(workspace)") && error.contains("is null"),
            "{error}"
        );
    }

    #[test]
    fn only_the_value_1_selects_validation() {
        assert_eq!(mode_for(None), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("0"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("yes"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("1"))), ExecuteMode::Validate);
    }
}
