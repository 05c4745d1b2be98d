//! The plan layer's view of a pack entry (RFC §4.9–4.10): a caller's buffer wrapped in a
//! shallow (ragged) tensor of the graph's geometry, or the executor's own allocation as is.

use std::collections::HashMap;
use std::sync::Arc;

use super::ExecutorError;
use super::graph::TensorDesc;
use super::variant_pack::{Binding, Slot, VariantPack, make_shallow_aux};
use crate::dtype::{HostData, HostDataMut};
use crate::tensor::{
    ShallowRaggedTensor, ShallowRaggedTensorMut, ShallowTensor, ShallowTensorMut, Tensor, TensorMut,
};

/// Offset auxes resolved once per execute, shared by every view of every ragged tensor.
pub(super) struct Auxes(HashMap<i64, Arc<dyn Tensor>>);

impl Auxes {
    /// Resolves the aux of every ragged tensor whose aux is bound (virtual tensors' auxes were
    /// checked when they were allocated; a bound ragged tensor with no aux fails at its view).
    pub(super) fn resolve(
        tensors: &[TensorDesc],
        pack: &VariantPack<'_>,
    ) -> Result<Auxes, ExecutorError> {
        let mut map = HashMap::new();
        for t in tensors {
            let Some(r) = t.ragged else { continue };
            if map.contains_key(&r.aux_uid) {
                continue;
            }
            let (Some(desc), Some(data)) = (
                tensors.iter().find(|a| a.uid == r.aux_uid),
                pack.data(r.aux_uid),
            ) else {
                continue;
            };
            map.insert(r.aux_uid, make_shallow_aux(desc, data)?);
        }
        Ok(Auxes(map))
    }

    fn get(&self, desc: &TensorDesc, aux_uid: i64) -> Result<Arc<dyn Tensor>, ExecutorError> {
        self.0
            .get(&aux_uid)
            .cloned()
            .ok_or(ExecutorError::AuxUnavailable {
                uid: desc.uid,
                aux_uid,
                problem: "not in the variant pack",
            })
    }
}

/// A readable operand.
pub(super) enum In<'s> {
    Own(&'s dyn Tensor),
    View(Box<dyn Tensor + 's>),
}

impl In<'_> {
    pub(super) fn tensor(&self) -> &dyn Tensor {
        match self {
            In::Own(t) => *t,
            In::View(t) => t.as_ref(),
        }
    }
}

/// A writable operand.
pub(super) enum Out<'s> {
    Own(&'s mut dyn TensorMut),
    View(Box<dyn TensorMut + 's>),
}

impl Out<'_> {
    pub(super) fn tensor(&mut self) -> &mut dyn TensorMut {
        match self {
            Out::Own(t) => &mut **t,
            Out::View(t) => t.as_mut(),
        }
    }
}

fn wrap(uid: i64) -> impl Fn(crate::error::KernelError) -> ExecutorError {
    move |source| ExecutorError::Tensor { uid, source }
}

pub(super) fn input<'s>(
    desc: &TensorDesc,
    slot: &'s Slot<'_>,
    auxes: &Auxes,
) -> Result<In<'s>, ExecutorError> {
    let data: HostData<'s> = match slot {
        Slot::Virtual(t) => return Ok(In::Own(t.as_ref())),
        Slot::Bound(Binding::Input(d)) => *d,
        Slot::Bound(Binding::Output(d)) => d.as_ref(),
    };
    let (dims, strides) = (desc.dims.clone(), desc.strides.clone());
    Ok(In::View(match desc.ragged {
        None => Box::new(ShallowTensor::from_storage(data, dims, strides).map_err(wrap(desc.uid))?),
        Some(r) => Box::new(
            ShallowRaggedTensor::new(
                data,
                dims,
                strides,
                desc.seq_axis(),
                auxes.get(desc, r.aux_uid)?,
                r.multiplier,
            )
            .map_err(wrap(desc.uid))?,
        ),
    }))
}

pub(super) fn output<'s>(
    desc: &TensorDesc,
    slot: &'s mut Slot<'_>,
    auxes: &Auxes,
) -> Result<Out<'s>, ExecutorError> {
    let data: HostDataMut<'s> = match slot {
        Slot::Virtual(t) => return Ok(Out::Own(t.as_mut())),
        Slot::Bound(Binding::Output(d)) => d.reborrow(),
        Slot::Bound(Binding::Input(_)) => {
            return Err(ExecutorError::Unbound { uid: desc.uid });
        }
    };
    let (dims, strides) = (desc.dims.clone(), desc.strides.clone());
    Ok(Out::View(match desc.ragged {
        None => {
            Box::new(ShallowTensorMut::from_storage(data, dims, strides).map_err(wrap(desc.uid))?)
        }
        Some(r) => Box::new(
            ShallowRaggedTensorMut::new(
                data,
                dims,
                strides,
                desc.seq_axis(),
                auxes.get(desc, r.aux_uid)?,
                r.multiplier,
            )
            .map_err(wrap(desc.uid))?,
        ),
    }))
}
