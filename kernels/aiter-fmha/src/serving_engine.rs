//! The execute sequence of a paged or sink graph ([`crate::serving`]), on the caller's stream with
//! no host synchronisation and no allocation: for a paged graph the starts and gather kernels,
//! then the forward exactly as for a ragged graph (status memset, pre-pass, `aiter::mha_fwd`,
//! fix-up) over the gathered K/V, then the finish kernel. A child of [`super`] so that it shares
//! the engine's loaded parts.

use ragged_core::binding::Call;
use std::sync::Arc;

use super::AiterEngine;
use crate::applicability::AiterPlan;
use crate::error::AiterError;
use crate::mapping::DeviceBuffers;
use crate::problem::AiterProblem;
use crate::serving::ServingPlan;
use crate::serving_kernels::{
    FINISH_KERNEL, FINISH_SOURCE, GATHER_KERNEL, GATHER_SOURCE, STARTS_KERNEL, STARTS_SOURCE,
    ServingBuffers, finish_launch, forward_buffers, gather_launch, starts_launch,
};
use ragged_gpu_runtime::hip::{HipFunction, HipModule};

/// The paged and sink kernels, compiled for one device.
pub(super) struct ServingKernels {
    _modules: [HipModule; 3],
    starts: HipFunction,
    gather: HipFunction,
    finish: HipFunction,
}

impl AiterEngine {
    fn serving_kernels(&self, device: i32) -> Result<Arc<ServingKernels>, AiterError> {
        if let Some(k) = self.serving_kernels.lock().get(&device) {
            return Ok(Arc::clone(k));
        }
        let arch = self.probed_arch(device)?;
        let load = |source: &str, name: &'static str| -> Result<HipModule, AiterError> {
            let code = self.hiprtc.compile(source, name, arch.full())?;
            Ok(self.hip.load_module(&code)?)
        };
        let starts = load(STARTS_SOURCE, "ragged_aiter_paged_starts.cu")?;
        let gather = load(GATHER_SOURCE, "ragged_aiter_paged_gather.cu")?;
        let finish = load(FINISH_SOURCE, "ragged_aiter_sink_finish.cu")?;
        let compiled = Arc::new(ServingKernels {
            starts: starts.function(STARTS_KERNEL)?,
            gather: gather.function(GATHER_KERNEL)?,
            finish: finish.function(FINISH_KERNEL)?,
            _modules: [starts, gather, finish],
        });
        Ok(Arc::clone(
            self.serving_kernels
                .lock()
                .entry(device)
                .or_insert(compiled),
        ))
    }

    /// [`Self::execute_serving`] on `call`'s stream and workspace.
    pub fn execute_serving_call(
        &self,
        problem: &AiterProblem,
        plan: &AiterPlan,
        buffers: &DeviceBuffers,
        tables: &ServingBuffers,
        call: &Call<'_>,
    ) -> Result<(), AiterError> {
        // SAFETY: as for `execute_call`; the page tables and sinks are the call's device
        // pointers too (or 0 where the graph has none).
        unsafe {
            self.execute_serving(
                problem,
                plan,
                buffers,
                tables,
                call.workspace().bytes,
                call.stream().raw() as usize,
            )
        }
    }

    /// Enqueues a paged or sink forward on `stream`. `buffers` are the caller's tensors (for a
    /// paged graph K and V are the page pools), `tables` its page tables and sinks.
    ///
    /// # Safety
    /// As for [`AiterEngine::execute`]; in addition the pools, the page tables (`[B, MP]` with
    /// the graph's strides), the length tensors and the sinks must be device memory of their
    /// declared extents, valid until the stream reaches the last kernel.
    pub unsafe fn execute_serving(
        &self,
        problem: &AiterProblem,
        plan: &AiterPlan,
        buffers: &DeviceBuffers,
        tables: &ServingBuffers,
        workspace_bytes: usize,
        stream: usize,
    ) -> Result<(), AiterError> {
        let Some(serving) = plan.serving.as_ref() else {
            // SAFETY: forwarded unchanged.
            return unsafe { self.execute(problem, plan, buffers, workspace_bytes, stream) };
        };
        check_serving_buffers(serving, buffers, tables, workspace_bytes)?;
        let device = self.hip.current_device()?;
        let kernels = self.serving_kernels(device)?;
        let fwd = forward_buffers(problem, serving, buffers);
        if let (Some(starts), Some(gather)) = (
            starts_launch(problem, serving, buffers),
            gather_launch(problem, serving, buffers, tables),
        ) {
            // SAFETY: the argument lists are held against the kernel sources by a test; the
            // pointers are the caller's buffers (guaranteed) and workspace regions (size checked
            // above, base rounded within the plan's slack).
            unsafe {
                self.hip
                    .launch(kernels.starts, starts.config, &starts.values(), stream)?;
                self.hip
                    .launch(kernels.gather, gather.config, &gather.values(), stream)?;
            }
        }
        // The forward's own plan: its workspace, without the route around it.
        let forward = AiterPlan {
            serving: None,
            ..*plan
        };
        // SAFETY: `fwd` is the caller's buffers with K/V, the offsets and the LSE replaced by
        // workspace regions the kernels above were enqueued to fill, on the same stream; the
        // forward's workspace is the rest of the caller's (`forward_at` onwards).
        unsafe {
            self.execute(
                problem,
                &forward,
                &fwd,
                serving.size - serving.forward_at,
                stream,
            )?
        };
        let finish = finish_launch(
            problem,
            &plan.workspace,
            serving,
            &fwd,
            buffers.workspace,
            tables,
        );
        // SAFETY: as for the starts and gather kernels.
        unsafe {
            self.hip
                .launch(kernels.finish, finish.config, &finish.values(), stream)?
        };
        Ok(())
    }
}

/// Refuses a short workspace and a null page table or sink pointer (the forward's own check
/// covers the rest).
pub fn check_serving_buffers(
    serving: &ServingPlan,
    buffers: &DeviceBuffers,
    tables: &ServingBuffers,
    workspace_bytes: usize,
) -> Result<(), AiterError> {
    if workspace_bytes < serving.size {
        return Err(AiterError::WorkspaceTooSmall {
            given: workspace_bytes,
            needed: serving.size,
        });
    }
    let mut required = vec![("workspace", -1, buffers.workspace)];
    if let Some(route) = &serving.paged {
        required.push(("page_table_k", route.table_k.uid, tables.table_k));
        required.push(("page_table_v", route.table_v.uid, tables.table_v));
        required.push(("seq_len_q", route.seq_len_q.uid, buffers.seq_len_q));
        required.push(("seq_len_kv", route.seq_len_kv.uid, buffers.seq_len_kv));
        required.push(("K page pool", route.k_pool.uid, buffers.k));
        required.push(("V page pool", route.v_pool.uid, buffers.v));
    }
    if let Some(s) = &serving.sinks {
        required.push(("sinks", s.uid, tables.sinks));
    }
    match required.into_iter().find(|(_, _, addr)| *addr == 0) {
        Some((what, uid, _)) => Err(AiterError::NullPointer { what, uid }),
        None => Ok(()),
    }
}
