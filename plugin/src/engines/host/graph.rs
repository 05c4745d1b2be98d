//! The host engine's multi-node path: wraps each bound pointer of one call as a typed host
//! slice and hands the graph to [`ragged_reference::executor::execute`], which allocates the
//! virtual intermediates from the real auxes (RFC §4.10.1).
//!
//! As on the single-SDPA path, the offset auxes are read first (they fix every ragged extent),
//! outputs are checked to overlap nothing else, and only then are slices created. Multi-node
//! graphs run in place only: staging device memory is the single-SDPA path's.

use ragged_gpu_runtime::Location;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use half::{bf16, f16};
use ragged_core::tensor::RaggedLayout;
use ragged_core::{DataType, DenseTensor, HostData, HostDataMut, Tensor};
use ragged_reference::executor::{self, TensorDesc, VariantPack as ExecPack};

use super::{HOST_REFERENCE, Planned, staging};
use crate::error::PluginError;
use crate::graph_plan::GraphPlan;
use crate::variant_pack::VariantPack;
use ragged_core::problem::RaggedSdpaProblem;

/// The host engine's plan for a multi-node graph.
#[derive(Debug)]
pub struct HostGraphPlan {
    pub graph: Arc<GraphPlan>,
}

impl Planned for HostGraphPlan {
    fn workspace_size(&self) -> usize {
        0
    }

    /// A graph plan owns its graph; the execution context calls [`Planned::execute_graph`] for
    /// it and never hands it a single-SDPA problem.
    fn execute(
        &self,
        _problem: &RaggedSdpaProblem,
        pack: &VariantPack<'_>,
    ) -> Result<(), PluginError> {
        self.execute_graph(pack)
    }

    fn execute_graph(&self, pack: &VariantPack<'_>) -> Result<(), PluginError> {
        match staging::access() {
            staging::Access::InPlace => run(&self.graph, pack),
            // Next to a GPU runtime the caller may still bind host memory (the conformance
            // harness does): run in place when every bound buffer is host memory.
            staging::Access::Copies(memory) => {
                for entry in pack.entries() {
                    let location = memory.location(entry.ptr as u64)?;
                    if location == Location::Device {
                        return Err(PluginError::NotApplicable {
                            engine: HOST_REFERENCE.name_str(),
                            reason: format!(
                                "tensor uid {}: bound to device memory; a multi-node graph runs \
                                 on host memory only (device tensors are staged for a single \
                                 SDPA node)",
                                entry.uid
                            ),
                        });
                    }
                }
                run(&self.graph, pack)
            }
            staging::Access::Unreachable(reason) => Err(PluginError::NotApplicable {
                engine: HOST_REFERENCE.name_str(),
                reason: reason.clone(),
            }),
        }
    }
}

/// One bound tensor of this call: its pointer and byte extent.
struct Extent<'g> {
    desc: &'g TensorDesc,
    ptr: NonNull<c_void>,
    elements: usize,
}

impl Extent<'_> {
    fn range(&self) -> (usize, usize) {
        let start = self.ptr.as_ptr() as usize;
        let bytes = self.elements.saturating_mul(self.desc.data_type.size());
        (start, start.saturating_add(bytes))
    }
}

/// Runs `graph` over host pointers.
pub fn run(graph: &GraphPlan, pack: &VariantPack<'_>) -> Result<(), PluginError> {
    let mut extents = Vec::new();
    // Dense tensors (the auxes among them) first: ragged extents are read from the auxes.
    for desc in graph.bound_tensors().filter(|t| t.ragged.is_none()) {
        let elements = dense_elements(desc)?;
        extents.push(Extent {
            desc,
            ptr: aligned(pack, desc)?,
            elements,
        });
    }
    for desc in graph.bound_tensors().filter(|t| t.ragged.is_some()) {
        let elements = ragged_elements(desc, &extents)?;
        extents.push(Extent {
            desc,
            ptr: aligned(pack, desc)?,
            elements,
        });
    }
    check_outputs_do_not_overlap(graph, &extents)?;
    let mut exec_pack = ExecPack::new();
    for e in &extents {
        exec_pack = if graph.is_output(e.desc.uid) {
            // SAFETY: the pack's contract: `elements` writable host elements of this type,
            // aligned (checked); outputs overlap no other bound tensor (checked above).
            exec_pack.bind_output(e.desc.uid, unsafe { slice_mut(e) })
        } else {
            // SAFETY: the pack's contract: `elements` readable host elements nobody writes
            // during the call, aligned (checked).
            exec_pack.bind_input(e.desc.uid, unsafe { slice(e) })
        };
    }
    // On the plugin's own pool, as the single-SDPA path: a process-lifetime pool would keep the
    // library mapped after dlclose (issue 13 item 7).
    crate::worker_pool::install(|| executor::execute(&graph.exec, exec_pack))??;
    Ok(())
}

fn aligned(pack: &VariantPack<'_>, desc: &TensorDesc) -> Result<NonNull<c_void>, PluginError> {
    let ptr = pack.pointer(desc.uid, "graph tensor")?;
    let size = desc.data_type.size();
    if !(ptr.as_ptr() as usize).is_multiple_of(size) {
        return Err(PluginError::InvalidValue(format!(
            "tensor uid {}: pointer {:#x} is not aligned to its {size}-byte element",
            desc.uid,
            ptr.as_ptr() as usize
        )));
    }
    Ok(ptr)
}

fn dense_elements(desc: &TensorDesc) -> Result<usize, PluginError> {
    let mut last = 0i64;
    for (&d, &s) in desc.dims.iter().zip(&desc.strides) {
        if d < 0 || s < 0 {
            return Err(PluginError::InvalidValue(format!(
                "tensor uid {}: dims {:?} / strides {:?} hold a negative entry",
                desc.uid, desc.dims, desc.strides
            )));
        }
        if d == 0 {
            return Ok(0);
        }
        last = (d - 1)
            .checked_mul(s)
            .and_then(|x| last.checked_add(x))
            .ok_or_else(|| overflow(desc))?;
    }
    last.checked_add(1)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| overflow(desc))
}

fn overflow(desc: &TensorDesc) -> PluginError {
    PluginError::InvalidValue(format!(
        "tensor uid {}: dims {:?} with strides {:?} overflow the address space",
        desc.uid, desc.dims, desc.strides
    ))
}

/// `ragged_offset[B] × multiplier`-based extent, through the aux already bound.
fn ragged_elements(desc: &TensorDesc, dense: &[Extent<'_>]) -> Result<usize, PluginError> {
    let Some(ragged) = desc.ragged else {
        return dense_elements(desc);
    };
    let Some(aux) = dense.iter().find(|e| e.desc.uid == ragged.aux_uid) else {
        return Err(PluginError::InvalidValue(format!(
            "tensor uid {}: ragged offset aux uid {} is not a bound tensor of the graph",
            desc.uid, ragged.aux_uid
        )));
    };
    let aux_tensor = aux_copy(aux)?;
    let layout = RaggedLayout::new(
        desc.dims.clone(),
        desc.strides.clone(),
        desc.seq_axis(),
        aux_tensor,
        ragged.multiplier,
    )
    .map_err(|e| PluginError::from(e.for_tensor(desc.uid)))?;
    usize::try_from(layout.total_elements()).map_err(|_| {
        PluginError::InvalidValue(format!(
            "tensor uid {}: ragged element total {} is negative",
            desc.uid,
            layout.total_elements()
        ))
    })
}

fn aux_copy(aux: &Extent<'_>) -> Result<Arc<dyn Tensor>, PluginError> {
    let (dims, strides) = (aux.desc.dims.clone(), aux.desc.strides.clone());
    // SAFETY: the pack's contract: the aux's elements are readable host memory, unwritten
    // during the call, aligned (checked).
    let data = unsafe { slice(aux) };
    let tensor: Result<Arc<dyn Tensor>, _> =
        match data {
            HostData::I32(v) => DenseTensor::from_vec(v.to_vec(), dims, strides)
                .map(|t| Arc::new(t) as Arc<dyn Tensor>),
            HostData::I64(v) => DenseTensor::from_vec(v.to_vec(), dims, strides)
                .map(|t| Arc::new(t) as Arc<dyn Tensor>),
            other => {
                return Err(PluginError::InvalidValue(format!(
                    "tensor uid {}: a ragged offset aux of type {}, need int32 or int64",
                    aux.desc.uid,
                    other.data_type()
                )));
            }
        };
    tensor.map_err(|e| PluginError::from(e.for_tensor(aux.desc.uid)))
}

fn check_outputs_do_not_overlap(graph: &GraphPlan, all: &[Extent<'_>]) -> Result<(), PluginError> {
    for (i, out) in all.iter().enumerate() {
        if !graph.is_output(out.desc.uid) {
            continue;
        }
        let (start, end) = out.range();
        for (j, other) in all.iter().enumerate() {
            let (o_start, o_end) = other.range();
            if i != j && start < end && o_start < o_end && start < o_end && o_start < end {
                return Err(PluginError::InvalidValue(format!(
                    "output tensor uid {} at {start:#x}..{end:#x} overlaps tensor uid {} at \
                     {o_start:#x}..{o_end:#x}",
                    out.desc.uid, other.desc.uid
                )));
            }
        }
    }
    Ok(())
}

/// # Safety
/// `e.ptr` is valid for reads of `e.elements` aligned elements of `e.desc.data_type`, not
/// written while the slice lives.
unsafe fn slice<'a>(e: &Extent<'_>) -> HostData<'a> {
    let (p, n) = (e.ptr.as_ptr().cast_const(), e.elements);
    // SAFETY: forwarded contract.
    unsafe {
        match e.desc.data_type {
            DataType::F32 => HostData::F32(std::slice::from_raw_parts(p.cast::<f32>(), n)),
            DataType::F16 => HostData::F16(std::slice::from_raw_parts(p.cast::<f16>(), n)),
            DataType::BF16 => HostData::BF16(std::slice::from_raw_parts(p.cast::<bf16>(), n)),
            DataType::I32 => HostData::I32(std::slice::from_raw_parts(p.cast::<i32>(), n)),
            DataType::I64 => HostData::I64(std::slice::from_raw_parts(p.cast::<i64>(), n)),
        }
    }
}

/// # Safety
/// `e.ptr` is valid for reads and writes of `e.elements` aligned elements of
/// `e.desc.data_type`, touched by nothing else while the slice lives.
unsafe fn slice_mut<'a>(e: &Extent<'_>) -> HostDataMut<'a> {
    let (p, n) = (e.ptr.as_ptr(), e.elements);
    // SAFETY: forwarded contract.
    unsafe {
        match e.desc.data_type {
            DataType::F32 => HostDataMut::F32(std::slice::from_raw_parts_mut(p.cast::<f32>(), n)),
            DataType::F16 => HostDataMut::F16(std::slice::from_raw_parts_mut(p.cast::<f16>(), n)),
            DataType::BF16 => {
                HostDataMut::BF16(std::slice::from_raw_parts_mut(p.cast::<bf16>(), n))
            }
            DataType::I32 => HostDataMut::I32(std::slice::from_raw_parts_mut(p.cast::<i32>(), n)),
            DataType::I64 => HostDataMut::I64(std::slice::from_raw_parts_mut(p.cast::<i64>(), n)),
        }
    }
}
