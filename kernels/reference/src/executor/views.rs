//! The plan layer's view of a pack entry (RFC §4.9–4.10): a caller's buffer wrapped in a
//! shallow (ragged) tensor of the graph's geometry, or the executor's own allocation as is.

use std::collections::HashMap;
use std::sync::Arc;

use super::ExecutorError;
use super::variant_pack::{Binding, Slot, VariantPack, make_shallow_aux};
use ragged_core::dtype::{HostData, HostDataMut};
use ragged_core::graph::TensorDesc;
use ragged_core::tensor::{BorrowedStorage, Dense, Ragged, RaggedLayout, Tensor, TensorMut};

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

fn wrap(uid: i64) -> impl Fn(ragged_core::error::KernelError) -> ExecutorError {
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
    view(
        desc,
        data,
        auxes,
        |t| In::View(Box::new(t)),
        |t| In::View(Box::new(t)),
    )
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
    view(
        desc,
        data,
        auxes,
        |t| Out::View(Box::new(t)),
        |t| Out::View(Box::new(t)),
    )
}

/// `data` in the geometry of `desc`: dense, or ragged over its resolved aux; `dense` and
/// `ragged` box the view as the caller's operand kind.
fn view<'s, S: BorrowedStorage<'s>, R>(
    desc: &TensorDesc,
    data: S,
    auxes: &Auxes,
    dense: fn(Dense<S>) -> R,
    ragged: fn(Ragged<S>) -> R,
) -> Result<R, ExecutorError> {
    let (dims, strides) = (desc.dims.clone(), desc.strides.clone());
    Ok(match desc.ragged {
        None => dense(Dense::from_storage(data, dims, strides).map_err(wrap(desc.uid))?),
        Some(r) => {
            let layout = RaggedLayout::new(
                dims,
                strides,
                desc.seq_axis(),
                auxes.get(desc, r.aux_uid)?,
                r.multiplier.get(),
            )
            .map_err(wrap(desc.uid))?;
            ragged(Ragged::from_layout(data, layout).map_err(wrap(desc.uid))?)
        }
    })
}
