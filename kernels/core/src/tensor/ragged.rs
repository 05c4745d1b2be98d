//! Ragged tensors: a memory carrier composed with a [`RaggedLayout`] (RFC §4.6, §4.7).

use std::sync::Arc;

use crate::dtype::{DataType, Element, HostData, HostDataMut};
use crate::error::KernelError;

use super::ragged_layout::{RaggedIterationInfo, RaggedLayout};
use super::raw::BorrowedStorage;
use super::storage::{Storage, StorageMut};
use super::{Tensor, TensorMut};

/// A ragged tensor over any memory carrier.
#[derive(Debug, Clone)]
pub struct Ragged<S> {
    storage: S,
    layout: RaggedLayout,
}

/// Owning ragged tensor, buffer sized to `ragged_offset[B]` (RFC `RaggedTensor<T>`).
pub type RaggedTensor<T> = Ragged<Vec<T>>;
/// Ragged tensor over a borrowed, read-only buffer (RFC `ShallowRaggedTensor<T>`, input side).
pub type ShallowRaggedTensor<'a> = Ragged<HostData<'a>>;
/// Ragged tensor over a borrowed, writable buffer (RFC `ShallowRaggedTensor<T>`, output side).
pub type ShallowRaggedTensorMut<'a> = Ragged<HostDataMut<'a>>;

impl<S: Storage> Ragged<S> {
    /// Wraps `storage` in an already validated layout; fails unless the buffer holds
    /// `ragged_offset[B]` elements.
    pub fn from_layout(storage: S, layout: RaggedLayout) -> Result<Self, KernelError> {
        layout.check_buffer(storage.len())?;
        Ok(Ragged { storage, layout })
    }

    /// The shared ragged core.
    pub fn layout(&self) -> &RaggedLayout {
        &self.layout
    }

    /// The `ragged_offset` aux.
    pub fn ragged_offset(&self) -> &Arc<dyn Tensor> {
        self.layout.ragged_offset()
    }
}

impl<T: Element> RaggedTensor<T> {
    /// Allocates a zeroed ragged tensor of `physical_element_count` elements, or of exactly
    /// `ragged_offset[B]` when `None` (RFC §4.6 forms (a) and (b)).
    pub fn new(
        dims: Vec<i64>,
        strides: Vec<i64>,
        seq_axis: usize,
        ragged_offset: Arc<dyn Tensor>,
        multiplier: i64,
        physical_element_count: Option<usize>,
    ) -> Result<Self, KernelError> {
        let layout = RaggedLayout::new(dims, strides, seq_axis, ragged_offset, multiplier)?;
        let len = match physical_element_count {
            Some(len) => len,
            None => {
                usize::try_from(layout.total_elements()).map_err(|_| KernelError::Overflow {
                    what: "ragged_offset[B]",
                })?
            }
        };
        Self::from_layout(vec![T::default(); len], layout)
    }

    /// The elements as a typed slice.
    pub fn as_slice(&self) -> &[T] {
        &self.storage
    }

    /// The elements as a typed mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.storage
    }
}

impl<'a, S: BorrowedStorage<'a>> Ragged<S> {
    /// A ragged view of a borrowed buffer: read-only over [`HostData`], writable over
    /// [`HostDataMut`].
    pub fn new(
        data: S,
        dims: Vec<i64>,
        strides: Vec<i64>,
        seq_axis: usize,
        ragged_offset: Arc<dyn Tensor>,
        multiplier: i64,
    ) -> Result<Self, KernelError> {
        let layout = RaggedLayout::new(dims, strides, seq_axis, ragged_offset, multiplier)?;
        Self::from_layout(data, layout)
    }

    /// A ragged view of `byte_len` bytes at `ptr`, as they arrive through a C ABI: read-only
    /// from a `*const`, writable from a `*mut`.
    ///
    /// # Safety
    ///
    /// Unless `byte_len` is 0, `ptr` must point to `byte_len` initialised bytes of one allocation
    /// that stay valid for `'a`; nobody writes a read-only view's bytes during `'a`, and nothing
    /// else reads or writes a writable view's bytes during `'a`.
    #[allow(clippy::too_many_arguments)] // mirrors the RFC constructor plus the C pointer triple
    pub unsafe fn from_raw(
        ptr: S::Ptr,
        dtype: DataType,
        byte_len: usize,
        dims: Vec<i64>,
        strides: Vec<i64>,
        seq_axis: usize,
        ragged_offset: Arc<dyn Tensor>,
        multiplier: i64,
    ) -> Result<Self, KernelError> {
        // SAFETY: forwarded from this function's contract.
        let data = unsafe { S::from_raw_parts(ptr, dtype, byte_len)? };
        Self::new(data, dims, strides, seq_axis, ragged_offset, multiplier)
    }
}

impl<S: Storage> Tensor for Ragged<S> {
    fn dims(&self) -> &[i64] {
        self.layout.dims()
    }
    fn strides(&self) -> &[i64] {
        self.layout.strides()
    }
    fn data_type(&self) -> DataType {
        self.storage.data_type()
    }
    fn element_count(&self) -> usize {
        // check_buffer proved this fits the buffer, hence usize.
        self.layout.total_elements() as usize
    }
    fn element_space(&self) -> usize {
        self.storage.len()
    }
    /// Always false: the buffer is neither `prod(dims)` long nor regularly strided (RFC §4.5
    /// item 7), even though element_count equals element_space.
    fn is_packed(&self) -> bool {
        false
    }
    fn host_data(&self) -> HostData<'_> {
        self.storage.view()
    }
    fn ragged_iteration_info(&self) -> Option<RaggedIterationInfo> {
        Some(self.layout.iteration_info())
    }
    fn index_impl(&self, index: &[i64]) -> Result<usize, KernelError> {
        self.layout.index(index)
    }
}

impl<S: StorageMut> TensorMut for Ragged<S> {
    fn host_data_mut(&mut self) -> HostDataMut<'_> {
        self.storage.view_mut()
    }
}
