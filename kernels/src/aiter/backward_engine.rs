//! The backward's execute sequence (issue 15 item 6), on the caller's stream with no host
//! synchronisation and no allocation of the engine's own: the forward's pre-pass (token starts,
//! lengths), the LSE pre-pass (stats → AITER's layout), `aiter::mha_bwd` through the shim, the
//! zero-length-batch fix-up. A child of [`super`] so that it shares the engine's loaded parts.

use std::sync::Arc;

use super::AiterEngine;
use crate::aiter::applicability::GpuArch;
use crate::aiter::backward::{AiterBackwardPlan, AiterBackwardProblem, plan_backward};
use crate::aiter::backward_mapping::{
    BWD_FIXUP_KERNEL, BWD_FIXUP_SOURCE, BWD_LSE_KERNEL, BWD_LSE_SOURCE, BackwardBuffers,
    bwd_fixup_launch, lse_launch, shim_bwd_args,
};
use crate::aiter::device_kernels::prepass_launch;
use crate::aiter::engine::check_buffers;
use crate::aiter::error::AiterError;
use crate::aiter::workspace::aligned_base;
use crate::contract::Decline;
use crate::problem::{Operand, RaggedSdpaProblem};
use crate::runtime::hip::{HipError, HipFunction, HipModule};

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
        let arch = usize::try_from(device)
            .ok()
            .and_then(|d| self.archs.get(d))
            .cloned()
            .unwrap_or_else(|| GpuArch::new(format!("unknown device {device}")));
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
        let arch = usize::try_from(device)
            .ok()
            .and_then(|d| self.archs.get(d))
            .cloned()
            .ok_or_else(|| HipError::Call {
                call: String::from("hipGetDevice"),
                code: -1,
                message: format!("device {device} was not present when the engine was probed"),
            })?;
        let lse_code = self
            .hiprtc
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
