//! A GPU engine's run on device buffers, for every harness (forward, backward): the engine
//! bundle copied to the device, one execute on device pointers, the outputs copied back. The
//! forward and backward harnesses differ only in which uids are outputs.

use std::collections::BTreeSet;

use ragged_gpu_runtime::cuda::GpuError;
use ragged_gpu_runtime::cuda::memory::DeviceAllocation;
use ragged_gpu_runtime::cuda::runtime::CudaRuntime;
use ragged_schema::model::{EngineConfig, Graph};

use super::{Bundle, Entry, check_alignment, host_bytes, host_bytes_mut, host_ptr};
use crate::abi::DeviceBuffer;
use crate::host_error::HostError;
use crate::plugin::PluginHandle;

/// A harness whose engine bundle a GPU engine can run on: the graph the bundle describes, the
/// outputs to copy back, and the bundle.
pub trait DeviceRun {
    fn device_parts(&mut self) -> (&Graph, &BTreeSet<i64>, &mut Bundle);

    /// Runs a GPU engine on device copies of the engine bundle ([`Bundle::run_on_device`]),
    /// copying the harness's outputs back for validation.
    fn run_engine_on_device(
        &mut self,
        handle: &PluginHandle<'_>,
        engine_id: i64,
        cuda: &CudaRuntime,
    ) -> Result<(), HostError> {
        let (graph, outputs, bundle) = self.device_parts();
        bundle.run_on_device(graph, outputs, handle, engine_id, cuda)
    }
}

impl DeviceRun for super::Harness {
    fn device_parts(&mut self) -> (&Graph, &BTreeSet<i64>, &mut Bundle) {
        (&self.graph, &self.roles.outputs, &mut self.engine)
    }
}

impl DeviceRun for crate::backward::BackwardHarness {
    /// dQ, dK and dV come back.
    fn device_parts(&mut self) -> (&Graph, &BTreeSet<i64>, &mut Bundle) {
        (&self.graph, &self.outputs, &mut self.engine)
    }
}

impl Bundle {
    /// Runs `engine_id` (a GPU engine; `cuda` is the process's CUDA verdict, see
    /// [`super::cuda_device`]) once over device copies of every tensor of this bundle — outputs
    /// too, so their sentinel survives where the engine writes nothing — and copies `outputs`
    /// back. Runtime pass-by-value scalars stay on the host: the variant pack carries them as
    /// host pointers (plugin-abi.md §5.7).
    pub fn run_on_device(
        &mut self,
        graph: &Graph,
        outputs: &BTreeSet<i64>,
        handle: &PluginHandle<'_>,
        engine_id: i64,
        cuda: &CudaRuntime,
    ) -> Result<(), HostError> {
        let gpu =
            |e: GpuError| HostError::Harness(format!("CUDA (driver {}): {e}", cuda.driver_version));
        let graph_bytes = ragged_schema::wire::encode_graph(graph);
        let config = ragged_schema::wire::encode_engine_config(&EngineConfig::new(engine_id));
        let context = handle.create_execution_context(&config, &graph_bytes)?;
        let workspace = DeviceAllocation::new(context.workspace_size()?).map_err(gpu)?;
        let mut buffers = Vec::new();
        let mut pack = Vec::new();
        for (uid, entry) in &self.entries {
            if graph
                .tensor(*uid)
                .is_some_and(|t| t.is_runtime_pass_by_value)
            {
                // The plugin only reads it; the C ABI has no const variant-pack pointer.
                let ptr = host_ptr(entry.tensor()).cast_mut();
                pack.push(DeviceBuffer { uid: *uid, ptr });
                continue;
            }
            let buffer = DeviceAllocation::from_host(host_bytes(entry.tensor())).map_err(gpu)?;
            pack.push(DeviceBuffer {
                uid: *uid,
                ptr: buffer.as_ptr(),
            });
            buffers.push((*uid, buffer));
        }
        check_alignment(graph, &pack)?;
        // SAFETY: every pointer is a live device allocation holding a copy of the tensor's
        // whole buffer (sized from the graph, ragged ones `ragged_offset[B]`), or, for a
        // pass-by-value scalar, this bundle's host buffer, alive and unborrowed during the
        // call; the workspace has the size the context reported.
        unsafe { context.execute(workspace.as_ptr(), &pack) }?;
        // Each download waits for the null stream, where the engine ran.
        for (uid, buffer) in &buffers {
            if outputs.contains(uid)
                && let Some(Entry::Owned(t)) = self.entries.get_mut(uid)
            {
                buffer
                    .download_into(host_bytes_mut(t.as_mut()))
                    .map_err(gpu)?;
            }
        }
        Ok(())
    }
}
