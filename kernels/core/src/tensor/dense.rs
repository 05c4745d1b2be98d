//! Dense (strided) tensors: the owning `Tensor<T>` and the borrowed `ShallowTensor<T>` of RFC §3.4.

use crate::dtype::{DataType, Element, HostData, HostDataMut};
use crate::error::KernelError;

use super::raw::BorrowedStorage;
use super::storage::{Storage, StorageMut};
use super::{Tensor, TensorMut};

/// A dense tensor over any memory carrier: `prod(dims)` elements at `Σ index·stride`.
#[derive(Debug, Clone)]
pub struct Dense<S> {
    storage: S,
    dims: Vec<i64>,
    strides: Vec<i64>,
    element_count: usize,
    element_space: usize,
    packed: bool,
}

/// Owning dense tensor (RFC `Tensor<T>`).
pub type DenseTensor<T> = Dense<Vec<T>>;
/// Dense tensor over a borrowed, read-only buffer (RFC `ShallowTensor<T>`, input side).
pub type ShallowTensor<'a> = Dense<HostData<'a>>;
/// Dense tensor over a borrowed, writable buffer (RFC `ShallowTensor<T>`, output side).
pub type ShallowTensorMut<'a> = Dense<HostDataMut<'a>>;

/// Row-major packed strides for `dims` (last axis fastest).
pub fn packed_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1; dims.len()];
    for axis in (0..dims.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * dims[axis + 1].max(1);
    }
    strides
}

/// How many elements a buffer needs for a dense geometry (one past the largest position an
/// in-bounds index reaches), after the checks every dense constructor applies: for callers that
/// allocate a carrier of their own before wrapping it with [`Dense::from_storage`].
pub fn dense_element_space(dims: &[i64], strides: &[i64]) -> Result<usize, KernelError> {
    dense_geometry(dims, strides).map(|(_, space)| space)
}

/// Validated (element_count, element_space) of a dense geometry.
fn dense_geometry(dims: &[i64], strides: &[i64]) -> Result<(usize, usize), KernelError> {
    if dims.len() != strides.len() {
        return Err(KernelError::StridesRankMismatch {
            dims: dims.len(),
            strides: strides.len(),
        });
    }
    let overflow = |what| KernelError::Overflow { what };
    let mut count: i64 = 1;
    // One past the largest position any in-bounds index reaches.
    let mut space: i64 = 1;
    for (axis, (&dim, &stride)) in dims.iter().zip(strides).enumerate() {
        if dim < 0 {
            return Err(KernelError::NegativeDim { axis, value: dim });
        }
        if stride < 0 {
            return Err(KernelError::NegativeStride {
                axis,
                value: stride,
            });
        }
        count = count.checked_mul(dim).ok_or(overflow("element count"))?;
        if dim > 0 {
            let reach = (dim - 1)
                .checked_mul(stride)
                .ok_or(overflow("element space"))?;
            space = space.checked_add(reach).ok_or(overflow("element space"))?;
        }
    }
    if count == 0 {
        space = 0;
    }
    let to_usize = |v: i64, what| usize::try_from(v).map_err(|_| overflow(what));
    Ok((
        to_usize(count, "element count")?,
        to_usize(space, "element space")?,
    ))
}

/// Whether the indices map one-to-one onto `0..element_count`: the axes of extent above 1,
/// ordered by stride, must each step over exactly the elements of the axes before them.
///
/// Equal count and space is not enough: dims `[2, 2, 2]` with strides `[1, 1, 5]` span 8
/// positions yet address `1` and `6` twice and `3` and `4` never.
fn gap_free(dims: &[i64], strides: &[i64], element_count: usize) -> bool {
    if element_count == 0 {
        return true;
    }
    let mut axes: Vec<(i64, i64)> = dims
        .iter()
        .zip(strides)
        .filter(|(dim, _)| **dim > 1)
        .map(|(&dim, &stride)| (stride, dim))
        .collect();
    axes.sort_unstable();
    let mut expected = Some(1i64);
    for (stride, dim) in axes {
        if expected != Some(stride) {
            return false;
        }
        expected = stride.checked_mul(dim);
    }
    true
}

impl<S: Storage> Dense<S> {
    /// Wraps `storage`, checking that it covers every position the geometry addresses.
    pub fn from_storage(
        storage: S,
        dims: Vec<i64>,
        strides: Vec<i64>,
    ) -> Result<Self, KernelError> {
        let (element_count, element_space) = dense_geometry(&dims, &strides)?;
        if storage.len() < element_space {
            return Err(KernelError::BufferTooSmall {
                required: element_space,
                available: storage.len(),
            });
        }
        let packed = gap_free(&dims, &strides, element_count);
        Ok(Dense {
            storage,
            dims,
            strides,
            element_count,
            element_space,
            packed,
        })
    }

    /// Gives the memory carrier back.
    pub fn into_storage(self) -> S {
        self.storage
    }
}

impl<T: Element> DenseTensor<T> {
    /// A zero-initialised tensor with the given dims and strides.
    pub fn new(dims: Vec<i64>, strides: Vec<i64>) -> Result<Self, KernelError> {
        let (_, space) = dense_geometry(&dims, &strides)?;
        Self::from_storage(vec![T::default(); space], dims, strides)
    }

    /// A zero-initialised tensor with packed row-major strides.
    pub fn packed(dims: Vec<i64>) -> Result<Self, KernelError> {
        let strides = packed_strides(&dims);
        Self::new(dims, strides)
    }

    /// A tensor over `data` (which may be longer than the geometry needs).
    pub fn from_vec(data: Vec<T>, dims: Vec<i64>, strides: Vec<i64>) -> Result<Self, KernelError> {
        Self::from_storage(data, dims, strides)
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

impl<'a, S: BorrowedStorage<'a>> Dense<S> {
    /// Wraps a borrowed host buffer of `byte_len` bytes at `ptr`, as it arrives through a C ABI:
    /// read-only from a `*const` ([`ShallowTensor`]), writable from a `*mut`
    /// ([`ShallowTensorMut`]).
    ///
    /// # Safety
    ///
    /// Unless `byte_len` is 0, `ptr` must point to `byte_len` initialised bytes of one allocation
    /// that stay valid for `'a`; nobody writes a read-only view's bytes during `'a`, and nothing
    /// else reads or writes a writable view's bytes during `'a`.
    pub unsafe fn from_raw(
        ptr: S::Ptr,
        dtype: DataType,
        byte_len: usize,
        dims: Vec<i64>,
        strides: Vec<i64>,
    ) -> Result<Self, KernelError> {
        // SAFETY: forwarded from this function's contract.
        let data = unsafe { S::from_raw_parts(ptr, dtype, byte_len)? };
        Self::from_storage(data, dims, strides)
    }
}

impl<S: Storage> Tensor for Dense<S> {
    fn dims(&self) -> &[i64] {
        &self.dims
    }
    fn strides(&self) -> &[i64] {
        &self.strides
    }
    fn data_type(&self) -> DataType {
        self.storage.data_type()
    }
    fn element_count(&self) -> usize {
        self.element_count
    }
    fn element_space(&self) -> usize {
        self.element_space
    }
    fn is_packed(&self) -> bool {
        self.packed
    }
    fn host_data(&self) -> HostData<'_> {
        self.storage.view()
    }
}

impl<S: StorageMut> TensorMut for Dense<S> {
    fn host_data_mut(&mut self) -> HostDataMut<'_> {
        self.storage.view_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{TensorExt, TensorMutExt};

    #[test]
    fn packed_strides_are_row_major() {
        assert_eq!(packed_strides(&[2, 3, 4, 5]), vec![60, 20, 5, 1]);
        assert_eq!(packed_strides(&[]), Vec::<i64>::new());
    }

    #[test]
    fn element_space_follows_strides_and_packing_follows_space() {
        let t = DenseTensor::<f32>::packed(vec![2, 3]).unwrap();
        assert_eq!(
            (t.element_count(), t.element_space(), t.is_packed()),
            (6, 6, true)
        );
        // Column-major with a gap of one element after each column.
        let t = DenseTensor::<f32>::new(vec![2, 3], vec![1, 3]).unwrap();
        assert_eq!(
            (t.element_count(), t.element_space(), t.is_packed()),
            (6, 8, false)
        );
        let empty = DenseTensor::<f32>::packed(vec![2, 0, 3]).unwrap();
        assert_eq!((empty.element_count(), empty.element_space()), (0, 0));
        assert!(empty.is_packed());
        // Gap-free in another axis order still counts; unit dims never matter.
        let t = DenseTensor::<f32>::new(vec![2, 1, 3], vec![1, 7, 2]).unwrap();
        assert!(t.is_packed());
    }

    #[test]
    fn aliasing_strides_are_not_packed_even_when_count_equals_space() {
        let t = DenseTensor::<f32>::new(vec![2, 2, 2], vec![1, 1, 5]).unwrap();
        assert_eq!(
            (t.element_count(), t.element_space(), t.is_packed()),
            (8, 8, false)
        );
        let broadcast = DenseTensor::<f32>::new(vec![2, 2], vec![1, 0]).unwrap();
        assert!(!broadcast.is_packed());
    }

    #[test]
    fn typed_access_uses_strides_and_checks_bounds_and_type() {
        let mut t = DenseTensor::<i32>::new(vec![2, 3], vec![1, 2]).unwrap();
        t.set(&[1, 2], 42).unwrap();
        assert_eq!(t.as_slice()[5], 42);
        assert_eq!(t.get::<i32>(&[1, 2]).unwrap(), 42);
        assert_eq!(
            t.get::<i32>(&[2, 0]).unwrap_err(),
            KernelError::IndexOutOfBounds {
                axis: 0,
                index: 2,
                extent: 2
            }
        );
        assert_eq!(
            t.get::<i32>(&[0]).unwrap_err(),
            KernelError::IndexArity { got: 1, rank: 2 }
        );
        assert_eq!(
            t.get::<f32>(&[0, 0]).unwrap_err(),
            KernelError::TypeMismatch {
                requested: DataType::F32,
                actual: DataType::I32
            }
        );
    }

    #[test]
    fn construction_rejects_bad_geometry() {
        let err = |dims: Vec<i64>, strides: Vec<i64>, len: usize| {
            DenseTensor::<f32>::from_vec(vec![0.0; len], dims, strides).unwrap_err()
        };
        assert_eq!(
            err(vec![2, 2], vec![2], 4),
            KernelError::StridesRankMismatch {
                dims: 2,
                strides: 1
            }
        );
        assert_eq!(
            err(vec![2, -1], vec![1, 1], 4),
            KernelError::NegativeDim { axis: 1, value: -1 }
        );
        assert_eq!(
            err(vec![2, 2], vec![-2, 1], 4),
            KernelError::NegativeStride { axis: 0, value: -2 }
        );
        assert_eq!(
            err(vec![2, 2], vec![2, 1], 3),
            KernelError::BufferTooSmall {
                required: 4,
                available: 3
            }
        );
        assert_eq!(
            err(vec![i64::MAX, 4], vec![1, 1], 0),
            KernelError::Overflow {
                what: "element count"
            }
        );
    }

    #[test]
    fn shallow_tensor_reads_and_writes_the_borrowed_buffer() {
        let mut buffer = vec![0.0f32; 6];
        {
            // SAFETY: `buffer` is exclusively borrowed for this block and holds 24 bytes.
            let mut shallow = unsafe {
                ShallowTensorMut::from_raw(
                    buffer.as_mut_ptr().cast(),
                    DataType::F32,
                    24,
                    vec![2, 3],
                    vec![3, 1],
                )
            }
            .unwrap();
            shallow.set(&[1, 0], 5.0f32).unwrap();
        }
        assert_eq!(buffer[3], 5.0);
        // SAFETY: `buffer` outlives the shallow tensor and is only read meanwhile.
        let shallow = unsafe {
            ShallowTensor::from_raw(
                buffer.as_ptr().cast(),
                DataType::F32,
                20,
                vec![2, 3],
                vec![3, 1],
            )
        };
        assert_eq!(
            shallow.unwrap_err(),
            KernelError::BufferTooSmall {
                required: 6,
                available: 5
            }
        );
    }
}
