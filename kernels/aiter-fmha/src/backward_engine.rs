//! The backward's execute sequence (issue 15 item 6), on the caller's stream with no host
//! synchronisation and no allocation of the engine's own: the forward's pre-pass (token starts,
//! lengths), the LSE pre-pass (stats → AITER's layout), `aiter::mha_bwd` through the shim, the
//! zero-length-batch fix-up. A child of [`super`] so that it shares the engine's loaded parts.

use ragged_core::binding::Call;
use std::sync::Arc;

use super::AiterEngine;
use crate::backward::{AiterBackwardPlan, AiterBackwardProblem, plan_backward};
use crate::backward_mapping::{
    BWD_FIXUP_KERNEL, BWD_FIXUP_SOURCE, BWD_LSE_KERNEL, BWD_LSE_SOURCE, BackwardBuffers,
    bwd_fixup_launch, lse_launch, shim_bwd_args,
};
use crate::device_kernels::prepass_launch;
use crate::engine::check_buffers;
use crate::error::AiterError;
use crate::workspace::aligned_base;
use ragged_core::contract::Decline;
use ragged_core::problem::{Operand, RaggedSdpaProblem};
use ragged_gpu_runtime::hip::{HipFunction, HipModule};

/// The backward's two kernels, compiled for one device.
pub(super) struct BackwardKernels {
    _lse_module: HipModule,
    _fixup_module: HipModule,
    lse: HipFunction,
    fixup: HipFunction,
}

impl AiterEngine {
    /// The backward plan on `device`: the shim's backward availability, the forward's contract
    /// and limits, then the gradients ([`plan_backward`]). `grads` is `[dO, dQ, dK, dV]`.
    pub fn plan_backward(
        &self,
        forward: &RaggedSdpaProblem,
        grads: [&Operand; 4],
        device: i32,
    ) -> Result<(AiterBackwardProblem, AiterBackwardPlan), Decline> {
        let arch = self.plan_arch(device);
        plan_backward(
            forward,
            grads,
            &arch,
            self.shim.gpu_targets(),
            self.shim.backward_available(),
        )
    }

    fn backward_kernels(&self, device: i32) -> Result<Arc<BackwardKernels>, AiterError> {
        if let Some(k) = self.backward_kernels.lock().get(&device) {
            return Ok(Arc::clone(k));
        }
        let arch = self.probed_arch(device)?;
        let lse_code =
            self.hiprtc
                .compile(BWD_LSE_SOURCE, "ragged_aiter_bwd_lse.cu", arch.full())?;
        let fixup_code =
            self.hiprtc
                .compile(BWD_FIXUP_SOURCE, "ragged_aiter_bwd_fixup.cu", arch.full())?;
        let lse_module = self.hip.load_module(&lse_code)?;
        let fixup_module = self.hip.load_module(&fixup_code)?;
        let compiled = Arc::new(BackwardKernels {
            lse: lse_module.function(BWD_LSE_KERNEL)?,
            fixup: fixup_module.function(BWD_FIXUP_KERNEL)?,
            _lse_module: lse_module,
            _fixup_module: fixup_module,
        });
        Ok(Arc::clone(
            self.backward_kernels
                .lock()
                .entry(device)
                .or_insert(compiled),
        ))
    }

    /// [`Self::execute_backward`] on `call`'s stream and workspace.
    pub fn execute_backward_call(
        &self,
        problem: &AiterBackwardProblem,
        plan: &AiterBackwardPlan,
        buffers: &BackwardBuffers,
        call: &Call<'_>,
    ) -> Result<(), AiterError> {
        // SAFETY: every address in `buffers` is one of `call`'s device pointers (device memory
        // of the stream's device for its declared extent until the stream completes the work;
        // the gradients overlap no input) or 0 for a tensor the problem lacks; the workspace is
        // the call's, of the plan's size; the stream is the call's, NULL or live.
        unsafe {
            self.execute_backward(
                problem,
                plan,
                buffers,
                call.workspace().bytes,
                call.stream().raw() as usize,
            )
        }
    }

    /// Enqueues the backward on `stream` (a `hipStream_t` as an integer; 0 = null stream).
    ///
    /// # Safety
    /// As for [`AiterEngine::execute`], for the forward's buffers (the stats tensor being an
    /// input here) and for dO, dQ, dK, dV, sized as their primals; the workspace must hold
    /// `workspace_bytes` bytes.
    pub unsafe fn execute_backward(
        &self,
        problem: &AiterBackwardProblem,
        plan: &AiterBackwardPlan,
        buffers: &BackwardBuffers,
        workspace_bytes: usize,
        stream: usize,
    ) -> Result<(), AiterError> {
        if workspace_bytes < plan.workspace.size {
            return Err(AiterError::WorkspaceTooSmall {
                given: workspace_bytes,
                needed: plan.workspace.size,
            });
        }
        check_buffers(
            &problem.forward,
            &plan.forward,
            &buffers.forward,
            workspace_bytes,
        )?;
        for (what, uid, address) in [
            ("dO", problem.d_o.uid, buffers.d_o),
            ("dQ", problem.dq.uid, buffers.dq),
            ("dK", problem.dk.uid, buffers.dk),
            ("dV", problem.dv.uid, buffers.dv),
        ] {
            if address == 0 {
                return Err(AiterError::NullPointer { what, uid });
            }
        }
        let device = self.hip.current_device()?;
        let forward_kernels = self.kernels(device)?;
        let kernels = self.backward_kernels(device)?;
        let base = aligned_base(buffers.forward.workspace);
        let ws = &plan.workspace.forward;

        // SAFETY: the status region lies inside the workspace (size checked above, base rounded
        // within the plan's slack); the caller guarantees the workspace and stream.
        unsafe {
            self.hip
                .memset_async(base + ws.status.offset, 0, ws.status.bytes, stream)?;
        }
        let prepass = prepass_launch(&problem.forward, ws, &buffers.forward, base);
        let lse = lse_launch(problem, plan, buffers, base);
        // SAFETY: the argument lists are held against the kernel sources by tests; the pointers
        // are the caller's buffers (guaranteed) and workspace regions (checked above), and the
        // LSE pre-pass reads what the pre-pass writes, on the same stream.
        unsafe {
            self.hip.launch(
                forward_kernels.prepass,
                prepass.config,
                &prepass.values(),
                stream,
            )?;
            self.hip
                .launch(kernels.lse, lse.config, &lse.values(), stream)?;
        }
        let args = shim_bwd_args(problem, plan, buffers, base, stream);
        // SAFETY: the arguments describe the caller's buffers and the workspace regions the
        // pre-passes have been enqueued to fill, on the same stream.
        unsafe { self.shim.mha_bwd(&args)? };
        let fixup = bwd_fixup_launch(problem, plan, buffers, base);
        // SAFETY: as for the pre-passes.
        unsafe {
            self.hip
                .launch(kernels.fixup, fixup.config, &fixup.values(), stream)?
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests::{engine_with, fake_text};
    use crate::fixtures::{self, fake_rocm};
    use crate::mapping::DeviceBuffers;
    use ragged_core::problem::test_support::{dense_stats, packed, ragged};

    /// B = 2, S_q 8 × H_q 4, S_kv 16 × H_kv 4, D 128, dense stats, gradients packed.
    fn backward() -> (RaggedSdpaProblem, [Operand; 4]) {
        let mut forward = packed(2, (8, 4), (16, 4), 128);
        forward.stats = Some(dense_stats(9, [2, 4, 8, 1], [32, 8, 1, 1]));
        (
            forward,
            [
                ragged("do_tensor_uid", 20, [2, 8, 4, 128], 10),
                ragged("dq_tensor_uid", 21, [2, 8, 4, 128], 10),
                ragged("dk_tensor_uid", 22, [2, 16, 4, 128], 11),
                ragged("dv_tensor_uid", 23, [2, 16, 4, 128], 11),
            ],
        )
    }

    fn buffers(workspace: usize) -> BackwardBuffers {
        BackwardBuffers {
            forward: DeviceBuffers {
                seq_len_q: 0,
                seq_len_kv: 0,
                lse_offsets: 0,
                workspace,
                ..fixtures::buffers()
            },
            d_o: 0xb000,
            dq: 0xc000,
            dk: 0xd000,
            dv: 0xe000,
        }
    }

    #[test]
    fn execute_backward_enqueues_prepass_lse_aiter_fixup_in_order_on_one_stream() {
        let engine = engine_with(&fake_rocm().shim_bwd);
        let (forward, g) = backward();
        let (p, plan) = engine
            .plan_backward(&forward, [&g[0], &g[1], &g[2], &g[3]], 0)
            .expect("taken");
        // SAFETY: the fakes never dereference device addresses.
        unsafe {
            engine
                .execute_backward(&p, &plan, &buffers(0x30_0000), plan.workspace.size, 0xbad)
                .expect("fake execute");
        }
        let log = fake_text(&fake_rocm().hip, "fake_hip_log\0");
        let steps: Vec<&str> = log
            .split(';')
            .filter(|s| s.contains("stream=0xbad"))
            .collect();
        assert_eq!(
            steps,
            [
                "memset 0x300400 value=0 bytes=4 stream=0xbad",
                "launch ragged_aiter_prepass grid=1,1,1 block=256,1,1 shm=0 stream=0xbad arg0=0x5000 extra=(nil)",
                // arg0 of both is the seqstart_q region (offset 0 of the aligned workspace)
                "launch ragged_aiter_bwd_lse grid=1,1,1 block=256,1,1 shm=0 stream=0xbad arg0=0x300000 extra=(nil)",
                "launch ragged_aiter_bwd_fixup grid=1,1,1 block=256,1,1 shm=0 stream=0xbad arg0=0x300000 extra=(nil)",
            ]
        );
        let args = fake_text(&fake_rocm().shim_bwd, "fake_shim_last_args\0");
        assert!(
            args.starts_with("dtype=1 batch=2 max=8/16 seqlen=16/32 hdim=128/128 nhead=4/4 "),
            "{args}"
        );
        assert!(
            args.contains("lsed=16 mask=0,-1,-1 scale=0.125 asm=0 a32=0 det=1 "),
            "{args}"
        );
        // AITER's scratch follows D in the aligned workspace (0x300700), 69632 bytes for this
        // problem (backward_tests.rs spells the sum out).
        assert!(args.contains(" aiter_ws=0x300700/69632 "), "{args}");
        assert!(
            args.contains("do=0xb000 lse=0x300500 d=0x300600 dq=0xc000 dk=0xd000 dv=0xe000"),
            "{args}"
        );
        assert!(args.ends_with("stream=0xbad"), "{args}");
    }

    #[test]
    fn null_gradients_and_short_workspaces_are_refused_by_name() {
        let engine = engine_with(&fake_rocm().shim_bwd);
        let (forward, g) = backward();
        let (p, plan) = engine
            .plan_backward(&forward, [&g[0], &g[1], &g[2], &g[3]], 0)
            .expect("taken");
        let mut b = buffers(0x40_0000);
        b.dk = 0;
        // SAFETY: refused before any call.
        let err = unsafe { engine.execute_backward(&p, &plan, &b, plan.workspace.size, 0) }
            .expect_err("null dK");
        assert_eq!(
            err.to_string(),
            "device pointer for dK (tensor uid 22) is null"
        );
        // SAFETY: refused before any call.
        let err = unsafe {
            engine.execute_backward(&p, &plan, &buffers(0x40_0000), plan.workspace.size - 1, 0)
        }
        .expect_err("short");
        assert!(err.to_string().starts_with("workspace of "), "{err}");
    }

    #[test]
    fn a_shim_without_libmha_bwd_declines_every_backward_by_name() {
        let engine = engine_with(&fake_rocm().shim_bwd_missing);
        let (forward, g) = backward();
        let d = engine
            .plan_backward(&forward, [&g[0], &g[1], &g[2], &g[3]], 0)
            .expect_err("declined")
            .to_string();
        assert!(
            d.contains("libmha_bwd.so not found at /fake/libmha_bwd.so"),
            "{d}"
        );
    }
}
