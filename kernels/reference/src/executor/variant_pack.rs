//! The variant pack (uid → host buffer) and the virtual-tensor pass of RFC §4.10.1: every
//! virtual tensor the caller did not bind is allocated by [`create_tensor_from_attribute_in`],
//! filled with the sentinel and patched into the pack, so the node plans find every uid there.

use std::collections::HashMap;
use std::sync::Arc;

use half::{bf16, f16};

use super::ExecutorError;
use ragged_core::dtype::{DataType, HostData, HostDataMut};
use ragged_core::graph::TensorDesc;
use ragged_core::tensor::{DenseTensor, RaggedTensor, Tensor, TensorMut, TensorMutExt};

/// One caller-bound buffer: read-only for inputs, writable for outputs.
pub enum Binding<'a> {
    Input(HostData<'a>),
    Output(HostDataMut<'a>),
}

/// What the caller binds for one execute, keyed by tensor uid (hipDNN's variant pack, with the
/// host pointers already turned into typed slices by the FFI layer).
#[derive(Default)]
pub struct VariantPack<'a> {
    pub(super) slots: HashMap<i64, Slot<'a>>,
}

/// A pack entry: a caller's buffer, or an allocation the virtual-tensor pass patched in.
pub(super) enum Slot<'a> {
    Bound(Binding<'a>),
    Virtual(Box<dyn TensorMut>),
}

impl<'a> VariantPack<'a> {
    pub fn new() -> Self {
        VariantPack::default()
    }

    pub fn bind_input(mut self, uid: i64, data: HostData<'a>) -> Self {
        self.slots.insert(uid, Slot::Bound(Binding::Input(data)));
        self
    }

    pub fn bind_output(mut self, uid: i64, data: HostDataMut<'a>) -> Self {
        self.slots.insert(uid, Slot::Bound(Binding::Output(data)));
        self
    }

    pub fn contains(&self, uid: i64) -> bool {
        self.slots.contains_key(&uid)
    }

    /// The buffer bound (or patched in) for `uid`, read-only.
    pub(super) fn data(&self, uid: i64) -> Option<HostData<'_>> {
        self.slots.get(&uid).map(|slot| match slot {
            Slot::Bound(Binding::Input(d)) => *d,
            Slot::Bound(Binding::Output(d)) => d.as_ref(),
            Slot::Virtual(t) => t.host_data(),
        })
    }
}

/// uid → the graph's description of that tensor (the RFC's `tensorMap`).
pub type TensorMap<'g> = HashMap<i64, &'g TensorDesc>;

/// The single-dispatch overload: a zeroed dense tensor of the attribute's type and geometry.
pub fn create_tensor_from_attribute(
    attr: &TensorDesc,
) -> Result<Box<dyn TensorMut>, ExecutorError> {
    let wrap = |source| ExecutorError::Tensor {
        uid: attr.uid,
        source,
    };
    let (dims, strides) = (attr.dims.clone(), attr.strides.clone());
    Ok(match attr.data_type {
        DataType::F32 => Box::new(DenseTensor::<f32>::new(dims, strides).map_err(wrap)?),
        DataType::F16 => Box::new(DenseTensor::<f16>::new(dims, strides).map_err(wrap)?),
        DataType::BF16 => Box::new(DenseTensor::<bf16>::new(dims, strides).map_err(wrap)?),
        DataType::I32 => Box::new(DenseTensor::<i32>::new(dims, strides).map_err(wrap)?),
        DataType::I64 => Box::new(DenseTensor::<i64>::new(dims, strides).map_err(wrap)?),
        // FP8 has no owning tensor type: a multi-node graph with an FP8 tensor is declined
        // before it is planned, and an intermediate could not hold one either.
        DataType::Fp8(_) => {
            return Err(ExecutorError::DataType {
                uid: attr.uid,
                data_type: attr.data_type,
                expected: "f32, f16, bf16, i32 or i64 (no FP8 intermediates)",
            });
        }
    })
}

/// The overload that handles ragged and dense attributes alike. Dense ones defer to
/// [`create_tensor_from_attribute`]; a ragged one is sized `ragged_offset[B]` from the aux that
/// its attribute names, looked up in `tensor_map` (geometry, type) and `pack` (values). No aux
/// is ever synthesized.
pub fn create_tensor_from_attribute_in(
    attr: &TensorDesc,
    pack: &VariantPack<'_>,
    tensor_map: &TensorMap<'_>,
) -> Result<Box<dyn TensorMut>, ExecutorError> {
    let Some(ragged) = attr.ragged else {
        return create_tensor_from_attribute(attr);
    };
    let aux_uid = ragged.aux_uid;
    let unavailable = |problem| ExecutorError::AuxUnavailable {
        uid: attr.uid,
        aux_uid,
        problem,
    };
    let aux_desc = tensor_map
        .get(&aux_uid)
        .ok_or_else(|| unavailable("not in the graph"))?;
    if aux_desc.is_virtual {
        return Err(unavailable("virtual"));
    }
    let aux_data = pack
        .data(aux_uid)
        .ok_or_else(|| unavailable("not in the variant pack"))?;
    let aux = make_shallow_aux(aux_desc, aux_data)?;
    let wrap = |source| ExecutorError::Tensor {
        uid: attr.uid,
        source,
    };
    let (dims, strides, axis, m) = (
        attr.dims.clone(),
        attr.strides.clone(),
        attr.seq_axis(),
        ragged.multiplier.get(),
    );
    Ok(match attr.data_type {
        DataType::F32 => {
            Box::new(RaggedTensor::<f32>::new(dims, strides, axis, aux, m, None).map_err(wrap)?)
        }
        DataType::F16 => {
            Box::new(RaggedTensor::<f16>::new(dims, strides, axis, aux, m, None).map_err(wrap)?)
        }
        DataType::BF16 => {
            Box::new(RaggedTensor::<bf16>::new(dims, strides, axis, aux, m, None).map_err(wrap)?)
        }
        other => {
            return Err(ExecutorError::DataType {
                uid: attr.uid,
                data_type: other,
                expected: "f32, f16 or bf16 for a ragged tensor",
            });
        }
    })
}

/// The aux as a type-erased tensor (RFC's `makeShallowITensor`). The ragged types hold their
/// aux as `Arc<dyn Tensor>`, which cannot borrow the caller's buffer, so the B + 1 offsets are
/// copied; that also pins them for this execute.
pub(super) fn make_shallow_aux(
    desc: &TensorDesc,
    data: HostData<'_>,
) -> Result<Arc<dyn Tensor>, ExecutorError> {
    let wrap = |source| ExecutorError::Tensor {
        uid: desc.uid,
        source,
    };
    let (dims, strides) = (desc.dims.clone(), desc.strides.clone());
    match data {
        HostData::I32(s) => Ok(Arc::new(
            DenseTensor::from_vec(s.to_vec(), dims, strides).map_err(wrap)?,
        )),
        HostData::I64(s) => Ok(Arc::new(
            DenseTensor::from_vec(s.to_vec(), dims, strides).map_err(wrap)?,
        )),
        other => Err(ExecutorError::DataType {
            uid: desc.uid,
            data_type: other.data_type(),
            expected: "int32 or int64 for a ragged offset aux",
        }),
    }
}

/// RFC §4.10.1's `populateVariantPackWithMissingVirtualTensors`: one loop body for ragged and
/// dense attributes. Returns the uids it allocated, in graph order.
pub(super) fn populate_missing_virtual_tensors(
    pack: &mut VariantPack<'_>,
    tensors: &[TensorDesc],
    tensor_map: &TensorMap<'_>,
) -> Result<Vec<i64>, ExecutorError> {
    let mut allocated = Vec::new();
    for attr in tensors {
        if attr.is_virtual && !pack.contains(attr.uid) {
            let mut tensor = create_tensor_from_attribute_in(attr, pack, tensor_map)?;
            tensor.fill_sentinel();
            pack.slots.insert(attr.uid, Slot::Virtual(tensor));
            allocated.push(attr.uid);
        }
    }
    Ok(allocated)
}
