//! `RAGGED_SDPA_CUDA_FMHA` as the plugin sees it: the listing probe, the plans (the shared GPU
//! contract, then the CUDA kernels' limits) and one execute on the call's stream.
//!
//! hipDNN on NVIDIA passes a `cudaStream_t` where the ABI says `hipStream_t` (ragged-sdpa.md §6),
//! so the call's stream is the stream the kernels are enqueued on; NULL is the legacy default
//! stream. Nothing here synchronizes: offsets are read on the device by the pre-pass, unless
//! `HIPDNN_RAGGED_SDPA_VALIDATE=1` asks for the validating mode (one synchronization after the
//! pre-pass, and invalid offsets become an INVALID_VALUE naming the tensor; on a stream being
//! captured into a CUDA graph, where that synchronisation is forbidden, the execute is refused with
//! BAD_PARAM before anything is enqueued, so the caller's capture stays valid).

use std::sync::{Arc, OnceLock};

use ragged_core::binding::{Call, Stream};
use ragged_core::engine::{self, Listing, Planned, Planner, Problem, Reach};
use ragged_core::problem::{BackwardProblem, Operand, RaggedSdpaProblem};
use ragged_core::{Decline, Fault, KernelError, contract};
use ragged_gpu_runtime::cuda::{GpuError, TensorRole, runtime};

use crate::backward::{self, BackwardBuffers, BackwardEngine, BackwardPlan, DqForm};
use crate::forward::{self, ExecuteMode, FmhaBuffers, FmhaEngine, FmhaPlan};
use crate::paged::{self, PagedBuffers, PagedEngine, PagedPlan};

/// The engine's name as `GetEngineName` reports it.
pub const ENGINE_NAME: &str = "RAGGED_SDPA_CUDA_FMHA";

/// Environment variable selecting [`ExecuteMode::Validate`].
pub const VALIDATE_ENV: &str = "HIPDNN_RAGGED_SDPA_VALIDATE";

/// The engine.
pub struct CudaFmha;

impl Planner for CudaFmha {
    fn listing(&self) -> Listing {
        listing_for(probe())
    }

    fn plan(&self, problem: &Problem) -> Result<Box<dyn Planned>, Decline> {
        if let Problem::Forward(p) = problem {
            if p.paged.is_some() {
                // The paged kernels are 16-bit only.
                contract::check_no_fp8(p)?;
            } else if p.fp8.is_some() {
                check_fp8_device(p, probe_archs())?;
            }
        }
        match problem {
            Problem::Forward(p) if p.paged.is_some() => Ok(Box::new(PagedForwardPlan {
                plan: paged::plan(p)?,
                problem: Arc::clone(p),
            })),
            Problem::Forward(p) => {
                decline_unpaged_sinks(p)?;
                Ok(Box::new(ForwardPlan {
                    plan: forward::plan(p)?,
                    problem: Arc::clone(p),
                }))
            }
            Problem::Backward(p) => Ok(Box::new(plan_backward(p)?)),
            Problem::Graph(g) => Err(engine::multi_node_declined(g)),
        }
    }
}

/// The forward kernels' plan for one problem.
#[derive(Debug)]
pub struct ForwardPlan {
    pub problem: Arc<RaggedSdpaProblem>,
    pub plan: FmhaPlan,
}

impl Planned for ForwardPlan {
    fn reach(&self) -> Reach {
        Reach::Device
    }

    fn workspace_size(&self) -> usize {
        usize::try_from(self.plan.workspace_bytes()).unwrap_or(usize::MAX)
    }

    /// Compiles and loads the kernels for the stream's device now, so the first execute does
    /// not pay for NVRTC.
    fn prepare(&self, stream: Stream<'_>) -> Result<(), KernelError> {
        FmhaEngine::global().prepare_on(stream).map_err(failure)?;
        Ok(())
    }

    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        // The plan made at CreateExecutionContext, with this call's scale (a runtime
        // pass-by-value scalar may change from one execute to the next).
        let mut plan = FmhaPlan {
            scale: call.scale(self.problem.scale)?,
            ..self.plan.clone()
        };
        let mut buffers = forward_buffers(&self.problem, &plan, call)?;
        if let Some(fp8) = plan.fp8.as_mut() {
            bind_fp8(fp8, &mut buffers, call)?;
        }
        FmhaEngine::global()
            .execute_call(&plan, call, &buffers, mode())
            .map_err(failure)
    }
}

/// Sinks are computed by the paged kernels; on a graph with contiguous ragged K/V the ragged
/// forward has no sink term, so such a graph is declined naming the field (the host reference
/// engine runs it).
/// An FP8 call's scalars: pass-by-value ones into the plan's values, device tensors into the
/// buffers (baked values are the plan's already); the amax outputs' addresses.
fn bind_fp8(
    fp8: &mut forward::fp8::Fp8Plan,
    buffers: &mut FmhaBuffers,
    call: &Call<'_>,
) -> Result<(), KernelError> {
    use ragged_core::problem::ScalePlan;
    for (i, scalar) in fp8.scalars.iter().enumerate() {
        match *scalar {
            Some(ScalePlan::DeviceTensor { uid, .. }) => {
                buffers.fp8_scalars[i] = call.device(uid)?.address();
            }
            Some(plan @ ScalePlan::RuntimeHostScalar { .. }) => {
                fp8.values[i] = call.scalar(plan)?
            }
            Some(ScalePlan::Fixed(_)) | None => {}
        }
    }
    buffers.amax_o = call.device_address(fp8.amax_o)?;
    buffers.amax_s = call.device_address(fp8.amax_s)?;
    Ok(())
}

/// The CUDA FP8 forward runs on sm_90a modules only: with a CUDA runtime whose devices are all of
/// another architecture, an FP8 graph is declined here, naming Q and the architectures (`archs`:
/// the probe's devices' NVRTC targets, `None` without a runtime: nothing to decide from, and an
/// execute on a device without the FP8 kernels fails naming the kernel).
fn check_fp8_device(p: &RaggedSdpaProblem, archs: Option<Vec<String>>) -> Result<(), Decline> {
    match archs {
        Some(archs) if !archs.is_empty() && !archs.iter().any(|a| a == FP8_ARCH) => {
            Err(Decline::new(
                p.q.uid,
                format!("{} data type", p.q.role),
                format!("FP8 on {}", archs.join(", ")),
                format!(
                    "an {FP8_ARCH} device: this engine's FP8 forward uses Hopper's e4m3 warpgroup                      MMA (the host reference engine runs FP8 anywhere)"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The NVRTC target that compiles the FP8 entry points.
const FP8_ARCH: &str = "sm_90a";

/// The NVRTC targets of the probe's devices, `None` without a CUDA runtime.
fn probe_archs() -> Option<Vec<String>> {
    runtime::probe().ok().map(|cuda| {
        cuda.devices
            .iter()
            .map(|d| d.target.arch().to_owned())
            .collect()
    })
}

fn decline_unpaged_sinks(p: &RaggedSdpaProblem) -> Result<(), Decline> {
    match &p.sinks {
        Some(sinks) => Err(Decline::new(
            sinks.uid,
            ragged_core::problem::SINK_ROLE,
            "per-head sink logits on a graph without page tables",
            "unset, or paged K/V: this engine folds sinks in only in its paged kernels (the host \
             reference engine runs sinks on any graph)",
        )),
        None => Ok(()),
    }
}

/// The paged kernels' plan for one paged forward (kernels/core/paged-kv-and-sinks.md).
#[derive(Debug)]
pub struct PagedForwardPlan {
    pub problem: Arc<RaggedSdpaProblem>,
    pub plan: PagedPlan,
}

impl Planned for PagedForwardPlan {
    fn reach(&self) -> Reach {
        Reach::Device
    }

    fn workspace_size(&self) -> usize {
        usize::try_from(self.plan.workspace_bytes()).unwrap_or(usize::MAX)
    }

    /// Compiles and loads the paged kernels for the stream's device now.
    fn prepare(&self, stream: Stream<'_>) -> Result<(), KernelError> {
        PagedEngine::global()
            .prepare_on(&self.plan, stream)
            .map_err(failure)
    }

    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        let p = &*self.problem;
        let plan = PagedPlan {
            scale: call.scale(p.scale)?,
            ..self.plan.clone()
        };
        let address = |uid: i64| call.device(uid).map(|d| d.address());
        let workspace_bytes = plan.workspace_bytes();
        let buffers = PagedBuffers {
            q: address(p.q.uid)?,
            k: address(p.k.uid)?,
            v: address(p.v.uid)?,
            o: address(p.o.uid)?,
            lse: call.device_address(p.stats.map(|s| s.uid))?,
            table_k: address(plan.table_k.uid)?,
            table_v: address(plan.table_v.uid)?,
            seq_len_q: address(plan.seq_len_q.0)?,
            seq_len_kv: address(plan.seq_len_kv.0)?,
            sinks: call.device_address(p.sinks.map(|s| s.uid))?,
            workspace: workspace_address(call, workspace_bytes)?,
            workspace_bytes,
        };
        PagedEngine::global()
            .execute_call(&plan, call, &buffers)
            .map_err(failure)
    }
}

/// The backward kernels' plan for one backward node.
#[derive(Debug)]
pub struct BackwardKernelsPlan {
    pub problem: Arc<BackwardProblem>,
    pub plan: BackwardPlan,
    /// The engine whose plan this is, named in its execute errors.
    pub engine: &'static str,
}

/// The backward kernels' plan of this engine (deterministic dQ); every refusal names uid, field,
/// value and need.
pub fn plan_backward(problem: &Arc<BackwardProblem>) -> Result<BackwardKernelsPlan, Decline> {
    plan_backward_with(problem, DqForm::Deterministic, ENGINE_NAME)
}

/// The backward kernels' plan with dQ summed in `form`, for `engine`.
pub fn plan_backward_with(
    problem: &Arc<BackwardProblem>,
    form: DqForm,
    engine: &'static str,
) -> Result<BackwardKernelsPlan, Decline> {
    let p = &**problem;
    let plan = backward::plan_with_form(
        &p.forward,
        backward::Gradients {
            d_o: &p.d_o,
            dq: &p.dq,
            dk: &p.dk,
            dv: &p.dv,
        },
        form,
    )?;
    Ok(BackwardKernelsPlan {
        problem: Arc::clone(problem),
        plan,
        engine,
    })
}

impl Planned for BackwardKernelsPlan {
    fn reach(&self) -> Reach {
        Reach::Device
    }

    fn workspace_size(&self) -> usize {
        usize::try_from(self.plan.workspace_bytes()).unwrap_or(usize::MAX)
    }

    /// Compiles and loads the backward kernels for the stream's device now.
    fn prepare(&self, stream: Stream<'_>) -> Result<(), KernelError> {
        let failure = |e| failure_of(self.engine, e);
        BackwardEngine::global().prepare_on(stream).map_err(failure)
    }

    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        let failure = |e| failure_of(self.engine, e);
        let p = &*self.problem;
        let mut plan = self.plan.clone();
        plan.forward.scale = call.scale(p.forward.scale)?;
        // The workspace is the backward plan's (it holds the forward's records and more), checked
        // before any tensor; Q, K, V, O, the LSE, offsets and seq_lens are bound as the forward
        // binds them.
        let workspace_bytes = plan.workspace_bytes();
        // (Checked first, so a missing workspace is reported under this plan's engine.)
        let workspace = engine_workspace_address(self.engine, call, workspace_bytes)?;
        let forward = FmhaBuffers {
            workspace,
            workspace_bytes,
            ..forward_buffers(&p.forward, &plan.forward, call)?
        };
        let address = |t: &Operand| call.device(t.uid).map(|d| d.address());
        let buffers = BackwardBuffers {
            forward,
            d_o: address(&p.d_o)?,
            dq: address(&p.dq)?,
            dk: address(&p.dk)?,
            dv: address(&p.dv)?,
        };
        BackwardEngine::global()
            .execute_call(&plan, call, &buffers, mode())
            .map_err(failure)
    }
}

/// The call's device addresses in the forward launcher's form (0 for absent optional tensors).
fn forward_buffers(
    problem: &RaggedSdpaProblem,
    plan: &FmhaPlan,
    call: &Call<'_>,
) -> Result<FmhaBuffers, KernelError> {
    let address = |t: &Operand| call.device(t.uid).map(|d| d.address());
    let aux = |t: &Operand| call.device_address(t.ragged.map(|r| r.uid));
    let (lse, lse_offsets) = match &problem.stats {
        Some(stats) => (address(stats)?, aux(stats)?),
        None => (0, 0),
    };
    let workspace_bytes = plan.workspace_bytes();
    let workspace = workspace_address(call, workspace_bytes)?;
    Ok(FmhaBuffers {
        q: address(&problem.q)?,
        k: address(&problem.k)?,
        v: address(&problem.v)?,
        o: address(&problem.o)?,
        lse,
        q_offsets: aux(&problem.q)?,
        kv_offsets: aux(&problem.k)?,
        lse_offsets,
        seq_len_q: call.device_address(problem.seq_len_q.map(|s| s.uid))?,
        seq_len_kv: call.device_address(problem.seq_len_kv.map(|s| s.uid))?,
        workspace,
        workspace_bytes,
        ..FmhaBuffers::default()
    })
}

/// The call's workspace address, refused when absent while the plan needs `workspace_bytes`.
fn workspace_address(call: &Call<'_>, workspace_bytes: u64) -> Result<u64, KernelError> {
    engine_workspace_address(ENGINE_NAME, call, workspace_bytes)
}

/// [`workspace_address`] for a plan of `engine`.
fn engine_workspace_address(
    engine: &'static str,
    call: &Call<'_>,
    workspace_bytes: u64,
) -> Result<u64, KernelError> {
    match call.workspace().ptr {
        Some(ptr) => Ok(ptr.address()),
        None if workspace_bytes == 0 => Ok(0),
        None => Err(failure_of(
            engine,
            GpuError::BadPointer {
                uid: -1,
                role: TensorRole::Workspace,
                address: 0,
                problem: "is null but the plan needs workspace",
            },
        )),
    }
}

/// CUDA engine errors by cause: offsets the device pre-pass rejected (validating mode) are the
/// caller's values; unusable pointers, a short workspace or a stream under capture in validating
/// mode are the caller's arguments; driver, compiler and contract failures are ours.
pub fn failure(error: GpuError) -> KernelError {
    failure_of(ENGINE_NAME, error)
}

/// [`failure`] naming `engine` (this crate's engines share the kernels and the rule).
pub fn failure_of(engine: &'static str, error: GpuError) -> KernelError {
    let fault = match &error {
        GpuError::InvalidOffsets { .. } => Fault::CallerValues,
        GpuError::BadPointer { .. }
        | GpuError::WorkspaceTooSmall { .. }
        | GpuError::Unsupported { .. }
        | GpuError::ValidatingUnderCapture { .. } => Fault::CallerArguments,
        _ => Fault::Internal,
    };
    KernelError::engine(engine, fault, error)
}

/// Listed when a usable CUDA device, driver and NVRTC are found (`Ok(summary)`).
pub fn listing_for(probe: Result<String, String>) -> Listing {
    listing_named(ENGINE_NAME, probe)
}

/// [`listing_for`] for any of this crate's engines (all need the same runtime).
pub fn listing_named(engine: &str, probe: Result<String, String>) -> Listing {
    match probe {
        Ok(summary) => Listing {
            listed: true,
            line: Some(format!("{engine} listed: {summary}")),
        },
        Err(reason) => Listing {
            listed: false,
            line: Some(format!("{engine} not listed: {reason}")),
        },
    }
}

/// The CUDA runtime's summary (driver, NVRTC, devices), or why it cannot run kernels.
pub(crate) fn probe() -> Result<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn fp8_forwards_run_unpaged_at_their_head_dims_and_are_declined_elsewhere() {
        use ragged_core::problem::test_support::fp8;
        let unpaged = fp8(2, (4, 2), (4, 2), 128);
        let mut paged = unpaged;
        let table_k = ragged_core::problem::PageTable {
            role: "page_table_k_tensor_uid",
            uid: 40,
            rows: 2,
            columns: 1,
            row_stride: 1,
            column_stride: 1,
            rank4: false,
            alignment: 4,
        };
        paged.paged = Some(ragged_core::problem::PagedKv {
            table_k,
            table_v: ragged_core::problem::PageTable {
                role: "page_table_v_tensor_uid",
                uid: 41,
                ..table_k
            },
            max_seq_len_kv: 4,
            query: ragged_core::problem::QueryForm::Ragged,
        });
        let plan = |p: RaggedSdpaProblem| CudaFmha.plan(&Problem::Forward(Arc::new(p)));
        // The paged kernels are 16-bit only.
        let decline = plan(paged).map(|_| ()).unwrap_err();
        assert_eq!(decline.uid, Some(1));
        let text = decline.to_string();
        assert!(text.contains("FP8 (fp8_e4m3)"), "{text}");
        assert!(text.contains("does not run FP8 attention"), "{text}");
        // Unpaged: the e4m3 entry points' head dims, on an sm_90a device (or with no CUDA runtime
        // to tell; on another architecture the decline names it).
        for p in [
            unpaged,
            fp8(2, (4, 2), (4, 2), 64),
            fp8(2, (4, 2), (4, 2), 256),
        ] {
            match plan(p) {
                Ok(planned) => assert_eq!(planned.reach(), Reach::Device),
                Err(decline) => assert!(decline.to_string().contains("sm_90a"), "{decline}"),
            }
        }
        let decline = plan(fp8(2, (4, 2), (4, 2), 96)).map(|_| ()).unwrap_err();
        let text = decline.to_string();
        assert!(
            text.contains("head dim = 96") || text.contains("sm_90a"),
            "{text}"
        );
    }

    #[test]
    fn fp8_needs_an_sm_90a_device_where_the_runtime_lists_devices() {
        use ragged_core::problem::test_support::fp8;
        let p = fp8(2, (4, 2), (4, 2), 128);
        let archs = |a: &[&str]| Some(a.iter().map(|s| (*s).to_owned()).collect());
        assert!(check_fp8_device(&p, None).is_ok());
        assert!(check_fp8_device(&p, archs(&[])).is_ok());
        assert!(check_fp8_device(&p, archs(&["sm_80", "sm_90a"])).is_ok());
        let decline = check_fp8_device(&p, archs(&["sm_80", "sm_86"])).unwrap_err();
        assert_eq!(decline.uid, Some(1));
        let text = decline.to_string();
        assert!(text.contains("FP8 on sm_80, sm_86"), "{text}");
        assert!(text.contains("an sm_90a device"), "{text}");
    }

    #[test]
    fn only_the_value_1_selects_validation() {
        assert_eq!(mode_for(None), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("0"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("yes"))), ExecuteMode::Enqueue);
        assert_eq!(mode_for(Some(OsStr::new("1"))), ExecuteMode::Validate);
    }

    #[test]
    fn gpu_errors_map_by_cause_and_name_the_engine() {
        let invalid = failure(GpuError::InvalidOffsets {
            flag: 2,
            problems: vec!["Q/O ragged_offset (uid 10): offsets decrease".into()],
        });
        assert_eq!(invalid.fault(), Fault::CallerValues);
        assert_eq!(
            invalid.to_string(),
            "RAGGED_SDPA_CUDA_FMHA: device validation of ragged offsets failed (flag \
             0x00000002): Q/O ragged_offset (uid 10): offsets decrease"
        );
        let pointer = failure(GpuError::BadPointer {
            uid: 4,
            role: TensorRole::O,
            address: 8,
            problem: "is not 16-byte aligned",
        });
        assert_eq!(pointer.fault(), Fault::CallerArguments);
        let driver_missing = failure(GpuError::Unavailable {
            reason: "no device".into(),
        });
        assert_eq!(driver_missing.fault(), Fault::Internal);
    }
}
