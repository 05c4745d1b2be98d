//! The tensor hierarchy of RFC §3.4 and §4.5–4.7, in Rust.
//!
//! | RFC (C++) | here |
//! |---|---|
//! | `ITensor` | [`Tensor`] (type-erased) and [`TensorMut`] |
//! | `TensorBase<T>::getHostValue/setHostValue` | [`TensorExt::get`], [`TensorMutExt::set`] |
//! | `getIndex` → virtual `getIndexImpl` | [`TensorExt::get_index`] → [`Tensor::index_impl`] |
//! | `Tensor<T>` | [`DenseTensor<T>`] |
//! | `ShallowTensor<T>` | [`ShallowTensor`] / [`ShallowTensorMut`] |
//! | `RaggedTensorBase<T>` | [`RaggedLayout`], composed into [`Ragged`] |
//! | `RaggedTensor<T>` | [`RaggedTensor<T>`] |
//! | `ShallowRaggedTensor<T>` | [`ShallowRaggedTensor`] / [`ShallowRaggedTensorMut`] |
//! | `RaggedCompositeIndex` | [`TensorIndices`] driven by [`RaggedIterationInfo`] |
//!
//! Shallow tensors come in a shared and an exclusive flavour because Rust cannot hand out a
//! `&mut` over memory another input may alias (a packed QKV buffer, say); the RFC's single
//! `ShallowTensor<T>` relies on the caller not to write through inputs.

mod dense;
pub mod extent;
mod fill;
mod iter;
mod ragged;
mod ragged_layout;
mod raw;
mod storage;

pub use dense::{
    Dense, DenseTensor, ShallowTensor, ShallowTensorMut, dense_element_space, packed_strides,
};
pub use fill::TensorMutExt;
pub use iter::TensorIndices;
pub use ragged::{Ragged, RaggedTensor, ShallowRaggedTensor, ShallowRaggedTensorMut};
pub use ragged_layout::{BSHD_SEQ_AXIS, RaggedIterationInfo, RaggedLayout, read_offset};
pub use raw::BorrowedStorage;
pub use storage::{Storage, StorageMut};

use crate::dtype::{DataType, Element, HostData, HostDataMut};
use crate::error::{KernelError, Role};

/// A type-erased tensor: geometry, element type and host data.
///
/// Implementors may override [`Tensor::index_impl`], the single place where a multi-index turns
/// into a buffer position; every typed accessor goes through it, so overriding it makes all of
/// them layout-aware at once (RFC §4.5 item 3).
pub trait Tensor: Send + Sync {
    /// Logical dimensions (for ragged tensors the padded dims, with S_max on the sequence axis).
    fn dims(&self) -> &[i64];
    /// Strides in elements, one per dim.
    fn strides(&self) -> &[i64];
    /// Runtime element type.
    fn data_type(&self) -> DataType;
    /// Size of one element in bytes.
    fn element_size(&self) -> usize {
        self.data_type().size()
    }
    /// Number of addressable elements (`prod(dims)` dense, `ragged_offset[B]` ragged).
    fn element_count(&self) -> usize;
    /// Number of elements the buffer must span.
    fn element_space(&self) -> usize;
    /// Whether the buffer is exactly the dense elements with no gaps (always false when ragged).
    fn is_packed(&self) -> bool;
    /// The host buffer.
    fn host_data(&self) -> HostData<'_>;
    /// Per-batch ranges for ragged tensors, `None` for dense ones.
    fn ragged_iteration_info(&self) -> Option<RaggedIterationInfo> {
        None
    }
    /// Buffer position of a multi-index whose arity the caller has already checked.
    ///
    /// The default is the dense inner product with bounds checks on every axis.
    fn index_impl(&self, index: &[i64]) -> Result<usize, KernelError> {
        dense_index(self.dims(), self.strides(), index)
    }
}

/// A tensor whose host buffer can be written.
pub trait TensorMut: Tensor {
    /// The host buffer, mutably.
    fn host_data_mut(&mut self) -> HostDataMut<'_>;
}

/// Typed, checked access for every tensor, routed through [`Tensor::index_impl`].
///
/// A blanket-implemented extension trait rather than provided methods, so that implementors
/// cannot override the arity check the way the RFC keeps `getIndex` non-virtual.
pub trait TensorExt: Tensor {
    /// Buffer position of `index` (arity checked here, bounds by `index_impl`).
    fn get_index(&self, index: &[i64]) -> Result<usize, KernelError> {
        let rank = self.dims().len();
        if index.len() != rank {
            return Err(KernelError::IndexArity {
                got: index.len(),
                rank,
            });
        }
        let position = self.index_impl(index)?;
        let available = self.host_data().len();
        if position >= available {
            return Err(KernelError::BufferTooSmall {
                required: position + 1,
                available,
            });
        }
        Ok(position)
    }

    /// The element at `index`, which must be of type `T`.
    fn get<T: Element>(&self, index: &[i64]) -> Result<T, KernelError> {
        let position = self.get_index(index)?;
        let data = typed_slice::<T>(self.host_data())?;
        Ok(data[position])
    }

    /// Iterates every addressable multi-index: dense tensors over `dims`, ragged tensors batch by
    /// batch over each batch's extent (RFC §4.5 item 4).
    fn indices(&self) -> TensorIndices {
        TensorIndices::new(self.dims(), self.ragged_iteration_info())
    }
}

impl<X: Tensor + ?Sized> TensorExt for X {}

/// The typed slice inside `data`, or a type-mismatch error.
pub fn typed_slice<T: Element>(data: HostData<'_>) -> Result<&[T], KernelError> {
    let actual = data.data_type();
    T::slice(data).ok_or(KernelError::TypeMismatch {
        requested: T::DATA_TYPE,
        actual,
    })
}

/// The typed mutable slice inside `data`, or a type-mismatch error.
pub fn typed_slice_mut<T: Element>(data: HostDataMut<'_>) -> Result<&mut [T], KernelError> {
    let actual = data.data_type();
    T::slice_mut(data).ok_or(KernelError::TypeMismatch {
        requested: T::DATA_TYPE,
        actual,
    })
}

/// Dense inner product of `index` and `strides`, checking each component against its dim.
fn dense_index(dims: &[i64], strides: &[i64], index: &[i64]) -> Result<usize, KernelError> {
    let mut position: i64 = 0;
    for (axis, ((&i, &dim), &stride)) in index.iter().zip(dims).zip(strides).enumerate() {
        if i < 0 || i >= dim {
            return Err(KernelError::IndexOutOfBounds {
                axis,
                index: i,
                extent: dim,
            });
        }
        // Geometry validation bounded the largest offset by the buffer length, so this cannot
        // overflow for in-bounds indices.
        position += i * stride;
    }
    usize::try_from(position).map_err(|_| KernelError::Overflow {
        what: "element position",
    })
}

/// Reads a one-element tensor of any float type as f32, e.g. a pass-by-value attention scale.
pub fn read_scalar_f32(tensor: &dyn Tensor) -> Result<f32, KernelError> {
    let count = tensor.element_count();
    if count != 1 {
        return Err(KernelError::NotScalar {
            role: Role::Scalar,
            count,
        });
    }
    let index = vec![0; tensor.dims().len()];
    let position = tensor.get_index(&index)?;
    match tensor.host_data() {
        HostData::F32(s) => Ok(s[position]),
        HostData::F16(s) => Ok(s[position].to_f32()),
        HostData::BF16(s) => Ok(s[position].to_f32()),
        other => Err(KernelError::SdpaDataType {
            role: Role::Scalar,
            dtype: other.data_type(),
            expected: "f32, f16 or bf16".to_owned(),
        }),
    }
}
