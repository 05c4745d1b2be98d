//! Tensor views over one call's host slices, and uids for the reference's role-named errors.

use std::sync::Arc;

use ragged_core::binding::Call;
use ragged_core::problem::{IndexInput, Operand};
use ragged_core::tensor::{Dense, Ragged, RaggedLayout, Storage, StorageMut};
use ragged_core::{HostData, HostDataMut, KernelError, Role, Tensor, TensorMut};

/// A dense or ragged view of one bound tensor, unboxed.
pub enum View<S> {
    Dense(Dense<S>),
    Ragged(Ragged<S>),
}

impl<S: Storage> View<S> {
    pub fn tensor(&self) -> &dyn Tensor {
        match self {
            View::Dense(t) => t,
            View::Ragged(t) => t,
        }
    }
}

impl<S: StorageMut> View<S> {
    pub fn tensor_mut(&mut self) -> &mut dyn TensorMut {
        match self {
            View::Dense(t) => t,
            View::Ragged(t) => t,
        }
    }
}

/// `t` as the call binds it for reading: over its ragged layout, or its dims and strides.
pub fn input<'call>(
    call: &mut Call<'call>,
    t: &Operand,
) -> Result<View<HostData<'call>>, KernelError> {
    let data = call.host(t.uid)?;
    view(call, t, data)
}

/// `t` as the call binds it for writing (once per call).
pub fn output<'call>(
    call: &mut Call<'call>,
    t: &Operand,
) -> Result<View<HostDataMut<'call>>, KernelError> {
    let data = call.take_output(t.uid)?;
    view(call, t, data)
}

fn view<S: Storage>(call: &mut Call<'_>, t: &Operand, data: S) -> Result<View<S>, KernelError> {
    let layout = match (call.take_layout(t.uid), t.ragged) {
        (Some(layout), _) => Ok(Some(layout)),
        // One buffer in two roles (K and V bound to one uid): the binder validated its layout
        // once, for the first view; the second builds its own over the same offsets.
        (None, Some(r)) => call.index_tensor(r.uid).and_then(|offsets| {
            RaggedLayout::new(
                t.dims.to_vec(),
                t.strides.to_vec(),
                t.axes().seq,
                offsets,
                r.multiplier.get(),
            )
            .map(Some)
        }),
        (None, None) => Ok(None),
    };
    let view = layout.and_then(|layout| match layout {
        Some(layout) => Ragged::from_layout(data, layout).map(View::Ragged),
        None => Dense::from_storage(data, t.dims.to_vec(), t.strides.to_vec()).map(View::Dense),
    });
    view.map_err(|e| e.for_tensor(t.uid))
}

/// Dense input `uid` over the graph's own dims and strides (page tables, sinks).
pub fn dense<'call>(
    call: &Call<'call>,
    uid: i64,
    dims: Vec<i64>,
    strides: Vec<i64>,
) -> Result<Dense<HostData<'call>>, KernelError> {
    let data = call.host(uid)?;
    Dense::from_storage(data, dims, strides).map_err(|e| e.for_tensor(uid))
}

/// A seq_len tensor (`B` entries) as the `[B, 1, 1, 1]` tensor the reference reads.
pub fn index(call: &Call<'_>, index: IndexInput) -> Result<Arc<dyn Tensor>, KernelError> {
    call.index_tensor(index.uid)
}

/// Attaches to a CPU reference error the uid `uid_of` gives for the role it is about; an error
/// about no role, or a role the problem lacks, stays as it is.
pub fn name_role(error: KernelError, uid_of: impl FnOnce(Role) -> Option<i64>) -> KernelError {
    let role = match &error {
        KernelError::SdpaRank { role, .. }
        | KernelError::SdpaDataType { role, .. }
        | KernelError::SdpaDim { role, .. }
        | KernelError::SdpaSeqAxis { role, .. }
        | KernelError::RowsOutsideBatch { role, .. }
        | KernelError::ExtentMismatch { role, .. }
        | KernelError::RowsBeyondExtent { role, .. }
        | KernelError::SeqLenOutOfRange { role, .. }
        | KernelError::PageIdOutOfRange { role, .. }
        | KernelError::PagedLengthAboveMax { role, .. }
        | KernelError::PackedRowsBeyondExtent { role, .. }
        | KernelError::NotScalar { role, .. }
        | KernelError::BackwardSeqAxis { role, .. } => Some(*role),
        _ => None,
    };
    match role.and_then(uid_of) {
        Some(uid) => error.for_tensor(uid),
        None => error,
    }
}
