//! The execute sequence of `RAGGED_SDPA_AITER_FMHA` (ragged-sdpa.md §7.4): pre-pass kernel,
//! `aiter::mha_fwd` through the shim, fix-up kernel — all enqueued on the caller's stream with
//! no host synchronisation and no allocation.

use ragged_core::binding::Call;
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::applicability::{self, AiterPlan, GpuArch};
use super::asm_kernels;
use super::device_kernels::{
    FIXUP_KERNEL, FIXUP_SOURCE, PREPASS_KERNEL, PREPASS_SOURCE, fixup_launch, prepass_launch,
};
use super::error::AiterError;
pub use super::mapping::DeviceBuffers;
use super::mapping::shim_args;
use super::problem::{AiterProblem, LseLayout};
use super::serving;
use super::shim_library::ShimLibrary;
use super::workspace::aligned_base;
use ragged_core::contract::Decline;
use ragged_core::problem::RaggedSdpaProblem;
use ragged_gpu_runtime::hip::{HipError, HipFunction, HipModule, HipRuntime, Hiprtc};

#[path = "backward_engine.rs"]
mod backward_engine;
#[path = "serving_engine.rs"]
mod serving_engine;
pub use serving_engine::check_serving_buffers;

/// The pre-pass and fix-up, compiled for one device.
struct CompiledKernels {
    _prepass_module: HipModule,
    _fixup_module: HipModule,
    prepass: HipFunction,
    fixup: HipFunction,
}

/// A ready AITER engine: HIP, hipRTC and the shim loaded, device architectures known.
pub struct AiterEngine {
    hip: Arc<HipRuntime>,
    hiprtc: Hiprtc,
    shim: ShimLibrary,
    archs: Vec<GpuArch>,
    kernels: Mutex<HashMap<i32, Arc<CompiledKernels>>>,
    backward_kernels: Mutex<HashMap<i32, Arc<backward_engine::BackwardKernels>>>,
    serving_kernels: Mutex<HashMap<i32, Arc<serving_engine::ServingKernels>>>,
}

impl AiterEngine {
    /// Assembles an engine from loaded parts; [`probe`](super::probe) is the usual way.
    pub fn new(
        hip: Arc<HipRuntime>,
        hiprtc: Hiprtc,
        shim: ShimLibrary,
        archs: Vec<GpuArch>,
    ) -> Self {
        Self {
            hip,
            hiprtc,
            shim,
            archs,
            kernels: Mutex::new(HashMap::new()),
            backward_kernels: Mutex::new(HashMap::new()),
            serving_kernels: Mutex::new(HashMap::new()),
        }
    }

    /// Architecture of every HIP device, by ordinal.
    pub fn archs(&self) -> &[GpuArch] {
        &self.archs
    }

    /// The loaded shim.
    pub fn shim(&self) -> &ShimLibrary {
        &self.shim
    }

    /// The loaded HIP runtime.
    pub fn hip(&self) -> &HipRuntime {
        &self.hip
    }

    /// The loaded hipRTC.
    pub fn hiprtc(&self) -> &Hiprtc {
        &self.hiprtc
    }

    /// The calling thread's current HIP device.
    pub fn current_device(&self) -> Result<i32, AiterError> {
        Ok(self.hip.current_device()?)
    }

    /// The architecture a plan on `device` is judged against: an ordinal the probe did not see
    /// gets a name that no target matches, so the plan declines it by name.
    fn plan_arch(&self, device: i32) -> GpuArch {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.archs.get(d))
            .cloned()
            .unwrap_or_else(|| GpuArch::new(format!("unknown device {device}")))
    }

    /// The architecture kernels for `device` are compiled for; a device the probe did not see
    /// is an error, since nothing can be compiled for it.
    fn probed_arch(&self, device: i32) -> Result<GpuArch, HipError> {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.archs.get(d))
            .cloned()
            .ok_or_else(|| HipError::Call {
                call: String::from("hipGetDevice"),
                code: -1,
                message: format!("device {device} was not present when the engine was probed"),
            })
    }

    /// The plan on `device` (see [`applicability::plan`]; paged and sink graphs go through
    /// [`serving::plan`], whose forward AITER judges the same way).
    pub fn plan(
        &self,
        problem: &RaggedSdpaProblem,
        device: i32,
    ) -> Result<(AiterProblem, AiterPlan), Decline> {
        let arch = self.plan_arch(device);
        let targets = self.shim.gpu_targets();
        let (aiter_problem, plan) = if problem.paged.is_some() || problem.sinks.is_some() {
            serving::plan(problem, &arch, targets)?
        } else {
            applicability::plan(problem, &arch, targets)?
        };
        asm_kernels::preflight(&self.shim, &aiter_problem, &plan)?;
        Ok((aiter_problem, plan))
    }

    /// Asks AITER (through the shim, launching nothing) whether its asm `fmha_v3` kernels
    /// would run this plan on the current device — the probe pitfall 11 calls for.
    pub fn asm_v3_would_run(
        &self,
        problem: &AiterProblem,
        plan: &AiterPlan,
    ) -> Result<bool, AiterError> {
        let buffers = DeviceBuffers::default();
        let mut args = shim_args(problem, plan, &buffers, 0, 0);
        args.v3_api_check = 1;
        // SAFETY: with v3_api_check = 1 the shim contract (ragged_aiter_shim.h) launches
        // nothing and reads no pointer, so the zero addresses are never dereferenced.
        unsafe { self.shim.mha_fwd(&args) }
    }

    fn kernels(&self, device: i32) -> Result<Arc<CompiledKernels>, AiterError> {
        if let Some(k) = self.kernels.lock().get(&device) {
            return Ok(Arc::clone(k));
        }
        let arch = self.probed_arch(device)?;
        let prepass_code =
            self.hiprtc
                .compile(PREPASS_SOURCE, "ragged_aiter_prepass.cu", arch.full())?;
        let fixup_code = self
            .hiprtc
            .compile(FIXUP_SOURCE, "ragged_aiter_fixup.cu", arch.full())?;
        let prepass_module = self.hip.load_module(&prepass_code)?;
        let fixup_module = self.hip.load_module(&fixup_code)?;
        let compiled = Arc::new(CompiledKernels {
            prepass: prepass_module.function(PREPASS_KERNEL)?,
            fixup: fixup_module.function(FIXUP_KERNEL)?,
            _prepass_module: prepass_module,
            _fixup_module: fixup_module,
        });
        // A racing thread may have compiled too; keep whichever landed first.
        Ok(Arc::clone(
            self.kernels.lock().entry(device).or_insert(compiled),
        ))
    }

    /// [`Self::execute`] on `call`'s stream and workspace.
    pub fn execute_call(
        &self,
        problem: &AiterProblem,
        plan: &AiterPlan,
        buffers: &DeviceBuffers,
        call: &Call<'_>,
    ) -> Result<(), AiterError> {
        // SAFETY: every address in `buffers` is one of `call`'s device pointers (device memory
        // of the stream's device for its declared extent until the stream completes the work)
        // or 0 for a tensor the problem lacks; the workspace is the call's, of the plan's size;
        // the stream is the call's, NULL or live.
        unsafe {
            self.execute(
                problem,
                plan,
                buffers,
                call.workspace().bytes,
                call.stream().raw() as usize,
            )
        }
    }

    /// Enqueues the forward on `stream` (a `hipStream_t` as an integer; 0 = null stream).
    ///
    /// # Safety
    /// Every non-zero address in `buffers` must be device memory of the current device, sized
    /// as `problem` describes it (Q/K/V/O up to their last offset, aux `[B+1]`, seq_lens `[B]`,
    /// the stats tensor per its layout), and the workspace must hold `workspace_bytes` bytes;
    /// all of it must stay valid until the stream reaches the last kernel. The offsets must
    /// satisfy ragged-sdpa.md §3 (GPU engines do not read them on the host).
    pub unsafe fn execute(
        &self,
        problem: &AiterProblem,
        plan: &AiterPlan,
        buffers: &DeviceBuffers,
        workspace_bytes: usize,
        stream: usize,
    ) -> Result<(), AiterError> {
        if plan.serving.is_some() {
            return Err(AiterError::ServingPlanOnPlainExecute);
        }
        check_buffers(problem, plan, buffers, workspace_bytes)?;
        let device = self.hip.current_device()?;
        let kernels = self.kernels(device)?;
        let base = aligned_base(buffers.workspace);
        let ws = &plan.workspace;

        // SAFETY: the status region lies inside the workspace (size checked above, base rounded
        // within the plan's slack); the caller guarantees the workspace and stream.
        unsafe {
            self.hip
                .memset_async(base + ws.status.offset, 0, ws.status.bytes, stream)?;
        }
        let prepass = prepass_launch(problem, ws, buffers, base);
        // SAFETY: the argument list is held against the kernel source by a test; the pointers
        // are the caller's buffers (guaranteed) and workspace regions (checked above).
        unsafe {
            self.hip
                .launch(kernels.prepass, prepass.config, &prepass.values(), stream)?
        };

        let args = shim_args(problem, plan, buffers, base, stream);
        // SAFETY: the arguments describe the caller's buffers and the workspace regions the
        // pre-pass has just been enqueued to fill, on the same stream.
        unsafe { self.shim.mha_fwd(&args)? };

        let fixup = fixup_launch(problem, ws, buffers, base);
        // SAFETY: as for the pre-pass.
        unsafe {
            self.hip
                .launch(kernels.fixup, fixup.config, &fixup.values(), stream)?
        };
        Ok(())
    }
}

/// Refuses a null pointer for any buffer the problem uses, and a short workspace.
pub fn check_buffers(
    problem: &AiterProblem,
    plan: &AiterPlan,
    buffers: &DeviceBuffers,
    workspace_bytes: usize,
) -> Result<(), AiterError> {
    if workspace_bytes < plan.workspace.size {
        return Err(AiterError::WorkspaceTooSmall {
            given: workspace_bytes,
            needed: plan.workspace.size,
        });
    }
    let mut required = vec![
        ("Q", problem.q.uid, buffers.q),
        ("K", problem.k.uid, buffers.k),
        ("V", problem.v.uid, buffers.v),
        ("O", problem.o.uid, buffers.o),
        ("Q/O ragged offsets", problem.q.aux.uid, buffers.q_offsets),
        ("K/V ragged offsets", problem.k.aux.uid, buffers.k_offsets),
        ("workspace", -1, buffers.workspace),
    ];
    if let Some(s) = problem.seq_len_q {
        required.push(("seq_len_q", s.uid, buffers.seq_len_q));
    }
    if let Some(s) = problem.seq_len_kv {
        required.push(("seq_len_kv", s.uid, buffers.seq_len_kv));
    }
    match problem.lse {
        LseLayout::None => {}
        LseLayout::Dense { uid, .. } => required.push(("stats", uid, buffers.lse)),
        LseLayout::Ragged { uid, aux, .. } => {
            required.push(("stats", uid, buffers.lse));
            required.push(("stats ragged offsets", aux.uid, buffers.lse_offsets));
        }
    }
    if let Some(fp8) = &plan.fp8 {
        let [q, k, v] = fp8.descale_uids;
        required.push(("descale_q", q, buffers.q_descale));
        required.push(("descale_k", k, buffers.k_descale));
        required.push(("descale_v", v, buffers.v_descale));
    }
    match required.into_iter().find(|(_, _, addr)| *addr == 0) {
        Some((what, uid, _)) => Err(AiterError::NullPointer { what, uid }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability::check_applicability;
    use crate::detection::{ProbeConfig, probe};
    use crate::fixtures::{self, base_problem, base_ragged, fake_rocm};
    use crate::problem::{IndexWidth, SeqLens};
    use crate::shim_library::ShimSearch;
    use std::ffi::{CStr, c_char};

    fn buffers(workspace: usize) -> DeviceBuffers {
        DeviceBuffers {
            seq_len_q: 0,
            seq_len_kv: 0,
            lse: 0,
            lse_offsets: 0,
            workspace,
            ..fixtures::buffers()
        }
    }

    #[test]
    fn the_engine_can_live_in_a_shared_registry() {
        fn shared<T: Send + Sync>() {}
        shared::<AiterEngine>();
    }

    #[test]
    fn an_fp8_plan_needs_its_three_descales() {
        let p = fixtures::fp8_problem();
        let plan = check_applicability(&p, &GpuArch::new("gfx942"), "gfx942").expect("taken");
        let size = plan.workspace.size;
        let b = DeviceBuffers {
            lse: 0,
            ..buffers(0x10_0000)
        };
        assert!(check_buffers(&p, &plan, &b, size).is_ok());
        let err = check_buffers(&p, &plan, &DeviceBuffers { k_descale: 0, ..b }, size)
            .expect_err("descale_k null");
        assert_eq!(
            err.to_string(),
            "device pointer for descale_k (tensor uid 41) is null"
        );
        let bf16 =
            check_applicability(&base_problem(), &GpuArch::new("gfx942"), "gfx942").expect("taken");
        let none = DeviceBuffers {
            q_descale: 0,
            k_descale: 0,
            v_descale: 0,
            ..b
        };
        assert!(check_buffers(&base_problem(), &bf16, &none, size).is_ok());
    }

    #[test]
    fn null_buffers_and_short_workspaces_are_refused_by_name() {
        let mut p = base_problem();
        p.seq_len_kv = Some(SeqLens {
            uid: 21,
            width: IndexWidth::I64,
        });
        let plan = check_applicability(&p, &GpuArch::new("gfx942"), "gfx942").expect("taken");
        let size = plan.workspace.size;
        let err = check_buffers(&p, &plan, &buffers(0x10_0000), size).expect_err("seq_len_kv null");
        assert_eq!(
            err.to_string(),
            "device pointer for seq_len_kv (tensor uid 21) is null"
        );
        let mut b = buffers(0x10_0000);
        b.seq_len_kv = 0x7000;
        assert!(check_buffers(&p, &plan, &b, size).is_ok());
        let err = check_buffers(&p, &plan, &b, size - 1).expect_err("short");
        assert_eq!(
            err.to_string(),
            format!(
                "workspace of {} bytes is smaller than the {size} bytes this plan needs",
                size - 1
            )
        );
        b.o = 0;
        assert_eq!(
            check_buffers(&p, &plan, &b, size)
                .expect_err("O null")
                .to_string(),
            "device pointer for O (tensor uid 4) is null"
        );
    }

    fn fake_engine() -> AiterEngine {
        engine_with(&fake_rocm().shim)
    }

    /// An engine probed from the fake HIP and hipRTC with the shim at `shim`.
    pub(super) fn engine_with(shim: &std::path::Path) -> AiterEngine {
        let f = fake_rocm();
        let c = ProbeConfig {
            hip_candidates: vec![f.hip.clone()],
            hiprtc_candidates: vec![f.hiprtc.clone()],
            shim: ShimSearch {
                env_override: Some(shim.to_path_buf()),
                plugin_dir: None,
            },
        };
        probe(&c).engine().expect("fakes are complete")
    }

    /// The text a fake's `const char* symbol(void)` returns (its call log, its last arguments).
    pub(super) fn fake_text(path: &std::path::Path, symbol: &str) -> String {
        // SAFETY: test-only: opens a fake compiled by this crate's fixtures, whose `symbol`
        // is `const char* (void)` returning a static buffer.
        unsafe {
            let lib = libloading::Library::new(path).expect("fake loads");
            let f = lib
                .get::<unsafe extern "C" fn() -> *const c_char>(symbol.as_bytes())
                .expect("fake symbol");
            CStr::from_ptr(f()).to_string_lossy().into_owned()
        }
    }

    #[test]
    fn execute_enqueues_memset_prepass_aiter_fixup_in_order_on_one_stream() {
        let engine = fake_engine();
        let (p, plan) = engine.plan(&base_ragged(), 0).expect("taken");
        assert_eq!(p, base_problem());
        assert_eq!(engine.asm_v3_would_run(&p, &plan).ok(), Some(true));
        let workspace = 0x10_0010; // not 256-aligned: rounded up to 0x100100
        // SAFETY: the fakes never dereference device addresses.
        unsafe {
            engine
                .execute(&p, &plan, &buffers(workspace), plan.workspace.size, 0xabc)
                .expect("fake execute");
        }
        let log = fake_text(&fake_rocm().hip, "fake_hip_log\0");
        // Other tests share the fake runtime: keep this test's stream only.
        let steps: Vec<&str> = log
            .split(';')
            .filter(|s| s.contains("stream=0xabc"))
            .collect();
        let status = 0x10_0100 + plan.workspace.status.offset;
        assert_eq!(
            steps,
            [
                &format!("memset {status:#x} value=0 bytes=4 stream=0xabc"),
                "launch ragged_aiter_prepass grid=1,1,1 block=256,1,1 shm=0 stream=0xabc arg0=0x5000 extra=(nil)",
                // 2 · 8 · 4 rows → one block; arg0 is the seqstart_q region (offset 0)
                "launch ragged_aiter_fixup grid=1,1,1 block=256,1,1 shm=0 stream=0xabc arg0=0x100100 extra=(nil)",
            ]
        );
        let args = fake_text(&fake_rocm().shim, "fake_shim_last_args\0");
        assert!(args.contains("check=0"), "{args}");
        assert!(args.contains("seqstart=0x100100/0x100200"), "{args}");
        assert!(args.contains("stream=0xabc"), "{args}");
    }

    #[test]
    fn shim_failures_carry_the_shim_message() {
        let engine = fake_engine();
        let mut graph = base_ragged();
        for t in [&mut graph.q, &mut graph.k, &mut graph.v, &mut graph.o] {
            t.dims[0] = 13;
        }
        let (p, plan) = engine.plan(&graph, 0).expect("taken");
        assert_eq!(p.batch, 13);
        // SAFETY: the fakes never dereference device addresses.
        let err = unsafe { engine.execute(&p, &plan, &buffers(0x20_0000), plan.workspace.size, 0) }
            .expect_err("fake shim fails batch 13");
        assert_eq!(
            err.to_string(),
            "AITER shim returned status 3 (RAGGED_AITER_EXCEPTION): unlucky batch"
        );
    }
}
