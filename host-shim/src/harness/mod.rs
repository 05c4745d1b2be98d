//! The integration-test harness of RFC §4.11: two bundles (reference path and engine path) built
//! from one graph and one pre-supplied input bundle, initialised identically, run through the CPU
//! reference and through a plugin engine, then validated output by output.
//!
//! Engine buffers are host memory for engines that accept host pointers (the host reference
//! engine); a GPU engine gets device copies of them ([`device`], through
//! `ragged_gpu_runtime::cuda`).

pub mod bundle;
pub mod coverage;
pub mod device;
pub mod exec_graph;
pub mod fp8;
pub mod graph;
pub mod overrides;
pub mod sdpa_op;
pub mod validate;

use std::ffi::c_void;
use std::time::{Duration, Instant};

use ragged_core::HostDataMut;
use ragged_core::tensor::{Tensor, TensorMut};
use ragged_reference::{ForwardExtras, PagedInputs, sdpa_forward_with};
use ragged_schema::model::{EngineConfig, Graph};

use crate::abi::DeviceBuffer;
use crate::host_error::HostError;
use crate::plugin::{ExecutionContext, PluginHandle};
use ragged_gpu_runtime::cuda::runtime::CudaRuntime;

pub use bundle::{Bundle, Entry, PreSuppliedInputs, create_tensor_from_attribute};
pub use device::DeviceRun;
pub use fp8::Yardstick;
pub use graph::{GraphHarness, is_multi_node, outputs_of};
pub use sdpa_op::SdpaRoles;
pub use validate::{Comparison, Expectation, Tolerance, ValidationMode};

pub struct Harness {
    pub graph: Graph,
    pub roles: SdpaRoles,
    pub reference: Bundle,
    pub engine: Bundle,
}

impl Harness {
    /// Strict check, allocation and init of both bundles with the same `seed`.
    pub fn new(
        graph: Graph,
        pre_supplied: &PreSuppliedInputs,
        seed: u64,
    ) -> Result<Harness, HostError> {
        let roles = SdpaRoles::of(&graph)?;
        let mut reference = Bundle::allocate(&graph, pre_supplied)?;
        let mut engine = Bundle::allocate(&graph, pre_supplied)?;
        reference.initialise(&roles.outputs, seed);
        engine.initialise(&roles.outputs, seed);
        fp8::initialise_scalars(&graph, &roles, &mut reference);
        fp8::initialise_scalars(&graph, &roles, &mut engine);
        Ok(Harness {
            graph,
            roles,
            reference,
            engine,
        })
    }

    /// The CPU reference (kernels' `sdpa_forward`, or `sdpa_forward_fp8_tensors` for FP8
    /// inputs) on the reference bundle.
    pub fn run_reference(&mut self) -> Result<(), HostError> {
        if fp8::input_format(&self.reference, &self.roles.attrs)?.is_some() {
            return fp8::run_reference(&self.graph, &self.roles, &mut self.reference);
        }
        let params = self.roles.params(&self.graph, &self.reference)?;
        let a = &self.roles.attrs;
        let mut o = self.reference.take_owned(a.o_tensor_uid)?;
        let mut lse = match a.stats_tensor_uid {
            Some(uid) => match self.reference.take_owned(uid) {
                Ok(t) => Some(t),
                Err(e) => {
                    self.reference.restore(a.o_tensor_uid, o);
                    return Err(e);
                }
            },
            None => None,
        };
        let result = (|| {
            let q = self.reference.get(a.q_tensor_uid)?;
            let k = self.reference.get(a.k_tensor_uid)?;
            let v = self.reference.get(a.v_tensor_uid)?;
            let sq = a
                .seq_len_q_tensor_uid
                .map(|u| self.reference.get(u))
                .transpose()?;
            let skv = a
                .seq_len_kv_tensor_uid
                .map(|u| self.reference.get(u))
                .transpose()?;
            let paged = match (a.page_table_k_tensor_uid, a.page_table_v_tensor_uid) {
                (Some(tk), Some(tv)) => Some(PagedInputs {
                    table_k: self.reference.get(tk)?,
                    table_v: self.reference.get(tv)?,
                    max_seq_len_kv: a.max_seq_len_kv.map(i64::from),
                }),
                _ => None,
            };
            let sinks = a
                .sink_token_tensor_uid
                .map(|u| self.reference.get(u))
                .transpose()?;
            sdpa_forward_with(
                q,
                k,
                v,
                o.as_mut(),
                lse.as_mut().map(|t| t.as_mut() as &mut dyn TensorMut),
                sq,
                skv,
                &ForwardExtras { paged, sinks },
                &params,
            )
            .map_err(|e| HostError::Harness(format!("CPU reference failed: {e}")))
        })();
        self.reference.restore(a.o_tensor_uid, o);
        if let (Some(uid), Some(t)) = (a.stats_tensor_uid, lse) {
            self.reference.restore(uid, t);
        }
        result
    }

    /// Runs `engine_id` of the plugin behind `handle` on the engine bundle, with a host
    /// workspace of the size the execution context asks for.
    pub fn run_engine(
        &mut self,
        handle: &PluginHandle<'_>,
        engine_id: i64,
    ) -> Result<(), HostError> {
        self.run_engine_repeatedly(handle, engine_id, 1, &mut |_, _| {})
            .map(|_| ())
    }

    /// Creates one execution context and executes it `runs` times, timing each execute call
    /// (host engines synchronise before returning, so the time covers the work). `on_run` sees
    /// each run's index and time as it completes.
    pub fn run_engine_repeatedly(
        &mut self,
        handle: &PluginHandle<'_>,
        engine_id: i64,
        runs: usize,
        on_run: &mut dyn FnMut(usize, Duration),
    ) -> Result<Vec<Duration>, HostError> {
        let graph_bytes = ragged_schema::wire::encode_graph(&self.graph);
        let config = ragged_schema::wire::encode_engine_config(&EngineConfig::new(engine_id));
        let context = handle.create_execution_context(&config, &graph_bytes)?;
        self.execute_in(&context, runs, on_run)
    }

    /// Executes an existing context `runs` times on the engine bundle's host buffers (for callers
    /// that need control over the context's creation, e.g. to free its inputs first).
    pub fn execute_in(
        &mut self,
        context: &ExecutionContext<'_, '_>,
        runs: usize,
        on_run: &mut dyn FnMut(usize, Duration),
    ) -> Result<Vec<Duration>, HostError> {
        let mut workspace = HostWorkspace::for_context(context)?;
        let workspace_ptr = workspace.ptr();
        let pack = self.engine.host_pack();
        check_alignment(&self.graph, &pack)?;
        let mut times = Vec::with_capacity(runs);
        for i in 0..runs {
            let start = Instant::now();
            // SAFETY: every pointer in `pack` addresses a host buffer of this harness, allocated
            // from the graph's own tensor attributes (ragged primaries sized `ragged_offset[B]`),
            // alive and not otherwise borrowed while `pack` is used; the workspace has the size
            // the context reported.
            unsafe { context.execute(workspace_ptr, &pack) }?;
            let t = start.elapsed();
            on_run(i, t);
            times.push(t);
        }
        Ok(times)
    }

    /// Compares every output of the engine bundle with the reference bundle, which holds the
    /// CPU reference's values.
    pub fn validate(&self, mode: ValidationMode) -> Result<Vec<Comparison>, HostError> {
        self.validate_against(mode, Yardstick::Reference)
    }

    /// Compares every output of the engine bundle with the reference bundle, whose values came
    /// from `yardstick` (which sets the FP8 tolerances; 16-bit graphs have one rule).
    pub fn validate_against(
        &self,
        mode: ValidationMode,
        yardstick: Yardstick,
    ) -> Result<Vec<Comparison>, HostError> {
        let a = &self.roles.attrs;
        let input_type = self.reference.get(a.q_tensor_uid)?.data_type();
        let fp8_input = fp8::input_format(&self.reference, a)?;
        let mut out = Vec::new();
        for &uid in &self.roles.outputs {
            let tolerance = match fp8_input {
                Some(input) => fp8::tolerance(
                    &self.graph,
                    &self.roles,
                    &self.reference,
                    input,
                    uid,
                    yardstick,
                )?,
                None if Some(uid) == a.stats_tensor_uid => Tolerance::for_lse(input_type),
                None => Tolerance::for_output(self.reference.get(uid)?.data_type()),
            };
            let written = match mode {
                ValidationMode::Coverage => {
                    Some(self.roles.written_positions(uid, &self.reference)?)
                }
                ValidationMode::SentinelSkip => None,
            };
            let exact_zero = if uid == a.o_tensor_uid {
                Some(self.roles.exact_zero_positions(&self.reference)?)
            } else {
                None
            };
            let expect = Expectation {
                written: written.as_ref(),
                exact_zero: exact_zero.as_ref(),
                undefined: None,
            };
            let (reference, engine) = (&self.reference, &self.engine);
            out.push(validate::compare_bundles(
                uid, reference, engine, expect, mode, tolerance,
            )?);
        }
        Ok(out)
    }
}

impl Bundle {
    /// The variant pack of a bundle on the host: every real uid's host pointer (virtual
    /// tensors stay out: the engine allocates its own intermediates).
    pub fn host_pack(&mut self) -> Vec<DeviceBuffer> {
        self.entries
            .iter_mut()
            .map(|(uid, entry)| {
                let ptr = match entry {
                    // The plugin only reads inputs; the C ABI has no const variant-pack pointer.
                    Entry::Shared(t) => host_ptr(t.as_ref()).cast_mut(),
                    Entry::Owned(t) => host_ptr_mut(t.as_mut()),
                };
                DeviceBuffer { uid: *uid, ptr }
            })
            .collect()
    }
}

/// A host workspace of the size an execution context asks for.
pub(crate) struct HostWorkspace(Vec<u8>);

impl HostWorkspace {
    pub(crate) fn for_context(context: &ExecutionContext<'_, '_>) -> Result<Self, HostError> {
        Ok(HostWorkspace(vec![0u8; context.workspace_size()?]))
    }

    /// NULL for an empty workspace, as the backend passes it.
    pub(crate) fn ptr(&mut self) -> *mut c_void {
        if self.0.is_empty() {
            std::ptr::null_mut()
        } else {
            self.0.as_mut_ptr().cast::<c_void>()
        }
    }
}

/// The process's CUDA verdict (`runtime::probe`), for `--cuda`: the devices a GPU engine's
/// buffers are allocated on, or why there are none.
pub fn cuda_device() -> Result<&'static CudaRuntime, HostError> {
    ragged_gpu_runtime::probe::cuda().map_err(|e| HostError::Harness(e.to_string()))
}

/// The backend's check before every execute (plugin-abi.md §5.7): a non-NULL pointer whose
/// tensor declares `alignment > 0` must be aligned to it.
pub fn check_alignment(graph: &Graph, pack: &[DeviceBuffer]) -> Result<(), HostError> {
    for entry in pack {
        let Some(t) = graph.tensor(entry.uid) else {
            continue;
        };
        if !entry.ptr.is_null()
            && t.alignment > 0
            && !(entry.ptr as usize).is_multiple_of(t.alignment as usize)
        {
            return Err(HostError::Harness(format!(
                "Tensor uid {} device pointer is not aligned to the required {} bytes",
                entry.uid, t.alignment
            )));
        }
    }
    Ok(())
}

/// The tensor's host buffer as bytes (all element types are plain old data).
fn host_bytes(t: &dyn Tensor) -> &[u8] {
    use ragged_core::HostData;
    let (ptr, bytes) = match t.host_data() {
        HostData::F32(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostData::F16(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostData::BF16(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostData::I32(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostData::I64(s) => (s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostData::Fp8(_, s) => (s.as_ptr(), s.len()),
    };
    // SAFETY: the region is the tensor's own initialised slice of a plain-old-data element type,
    // borrowed for the lifetime of `t`.
    unsafe { std::slice::from_raw_parts(ptr, bytes) }
}

fn host_bytes_mut(t: &mut dyn TensorMut) -> &mut [u8] {
    let (ptr, bytes) = match t.host_data_mut() {
        HostDataMut::F32(s) => (s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostDataMut::F16(s) => (s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostDataMut::BF16(s) => (s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostDataMut::I32(s) => (s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostDataMut::I64(s) => (s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)),
        HostDataMut::Fp8(_, s) => (s.as_mut_ptr(), s.len()),
    };
    // SAFETY: as in `host_bytes`, exclusively borrowed; every bit pattern is a valid value of
    // these element types.
    unsafe { std::slice::from_raw_parts_mut(ptr, bytes) }
}

fn host_ptr(t: &dyn Tensor) -> *const c_void {
    use ragged_core::HostData;
    match t.host_data() {
        HostData::F32(s) => s.as_ptr().cast(),
        HostData::F16(s) => s.as_ptr().cast(),
        HostData::BF16(s) => s.as_ptr().cast(),
        HostData::I32(s) => s.as_ptr().cast(),
        HostData::I64(s) => s.as_ptr().cast(),
        HostData::Fp8(_, s) => s.as_ptr().cast(),
    }
}

fn host_ptr_mut(t: &mut dyn TensorMut) -> *mut c_void {
    match t.host_data_mut() {
        HostDataMut::F32(s) => s.as_mut_ptr().cast(),
        HostDataMut::F16(s) => s.as_mut_ptr().cast(),
        HostDataMut::BF16(s) => s.as_mut_ptr().cast(),
        HostDataMut::I32(s) => s.as_mut_ptr().cast(),
        HostDataMut::I64(s) => s.as_mut_ptr().cast(),
        HostDataMut::Fp8(_, s) => s.as_mut_ptr().cast(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphs::RaggedSdpaSpec;

    #[test]
    fn misaligned_pointers_get_the_backends_message() {
        let mut graph = RaggedSdpaSpec::packed("a", &[1], &[1]).graph();
        graph.tensors.iter_mut().for_each(|t| t.alignment = 32);
        let q = crate::graphs::uid::Q;
        let at = |addr: usize| {
            [DeviceBuffer {
                uid: q,
                ptr: addr as *mut c_void,
            }]
        };
        assert!(check_alignment(&graph, &at(0x1000)).is_ok());
        assert!(
            check_alignment(&graph, &at(0)).is_ok(),
            "NULL is not checked"
        );
        let err = check_alignment(&graph, &at(0x1010))
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("Tensor uid 1 device pointer is not aligned to the required 32 bytes")
        );
    }
}
