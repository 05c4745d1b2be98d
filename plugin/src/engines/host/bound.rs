//! One call's bindings for the host engine: each Q/K/V/O/LSE pointer with its byte extent and
//! validated ragged layout, and host copies of the index tensors (ragged offsets, seq_lens).
//!
//! An execution context runs call after call with the same graph, so the copies' buffers are
//! kept in a [`Scratch`] and rewritten in place from each call's variant pack: the values are
//! always this call's, only the allocations are reused (issue 14 item 5: allocator calls were
//! the largest part of the dispatch cost).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use ragged_core::problem::{IndexInput, IndexWidth, OFFSETS_ROLE, Operand};
use ragged_core::tensor::{BorrowedStorage, Dense, Ragged, RaggedLayout, Storage, StorageMut};
use ragged_core::{
    DataType as KernelType, DenseTensor, Element, HostData, HostDataMut, KernelError, Tensor,
    TensorMut,
};

use super::internal;
use crate::error::PluginError;
use crate::overlap::Span;
use crate::variant_pack::VariantPack;

/// Host copies of index tensors, kept by an execution context between its calls.
#[derive(Debug, Default)]
pub struct Scratch {
    copies: Vec<IndexCopy>,
}

#[derive(Debug)]
struct IndexCopy {
    uid: i64,
    values: IndexValues,
    /// Rewritten from the current call's pack (reset by [`Scratch::begin_call`]).
    current: bool,
}

#[derive(Debug)]
enum IndexValues {
    I32(Arc<DenseTensor<i32>>),
    I64(Arc<DenseTensor<i64>>),
}

impl IndexValues {
    fn shared(&self) -> Arc<dyn Tensor> {
        match self {
            IndexValues::I32(t) => Arc::clone(t) as Arc<dyn Tensor>,
            IndexValues::I64(t) => Arc::clone(t) as Arc<dyn Tensor>,
        }
    }

    /// Whether these are `n` values of `width`.
    fn holds(&self, width: IndexWidth, n: usize) -> bool {
        match self {
            IndexValues::I32(t) => width == IndexWidth::I32 && t.as_slice().len() == n,
            IndexValues::I64(t) => width == IndexWidth::I64 && t.as_slice().len() == n,
        }
    }

    /// Overwrites the values with `data` in place; false when that is not possible (another
    /// type, another length, or a view of the previous call still holds them).
    fn refill(&mut self, data: &HostData<'_>) -> bool {
        match (self, data) {
            (IndexValues::I32(t), HostData::I32(src)) => overwrite(t, src),
            (IndexValues::I64(t), HostData::I64(src)) => overwrite(t, src),
            _ => false,
        }
    }
}

fn overwrite<T: Element>(tensor: &mut Arc<DenseTensor<T>>, src: &[T]) -> bool {
    match Arc::get_mut(tensor) {
        Some(t) if t.as_slice().len() == src.len() => {
            t.as_mut_slice().copy_from_slice(src);
            true
        }
        _ => false,
    }
}

impl Scratch {
    /// Marks every copy stale: each must be rewritten from the new call's pack before use.
    pub fn begin_call(&mut self) {
        for copy in &mut self.copies {
            copy.current = false;
        }
    }

    /// As [`owned_index_copy`], reusing this scratch's buffer for `index` where it has one; a
    /// uid already copied during this call is shared, not read twice.
    fn index_copy(
        &mut self,
        index: IndexInput,
        n: usize,
        pack: &VariantPack<'_>,
    ) -> Result<Arc<dyn Tensor>, PluginError> {
        let slot = self
            .copies
            .iter()
            .position(|c| c.uid == index.uid && c.values.holds(index.width, n));
        if let Some(i) = slot
            && self.copies[i].current
        {
            return Ok(self.copies[i].values.shared());
        }
        let data = index_data(index, n, pack)?;
        if let Some(i) = slot
            && self.copies[i].values.refill(&data)
        {
            self.copies[i].current = true;
            return Ok(self.copies[i].values.shared());
        }
        let copy = IndexCopy {
            uid: index.uid,
            values: copy_of(index, data)?,
            current: true,
        };
        let shared = copy.values.shared();
        match slot {
            Some(i) => self.copies[i] = copy,
            None => self.copies.push(copy),
        }
        Ok(shared)
    }
}

/// A host copy of an int32/int64 `[n, 1, 1, 1]` tensor of the pack, from `scratch` when given.
pub fn index_copy(
    index: IndexInput,
    n: usize,
    pack: &VariantPack<'_>,
    scratch: Option<&mut Scratch>,
) -> Result<Arc<dyn Tensor>, PluginError> {
    match scratch {
        Some(scratch) => scratch.index_copy(index, n, pack),
        None => owned_index_copy(index, n, pack),
    }
}

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

/// One Q/K/V/O/LSE tensor of this call: its pointer, its byte extent, and (if ragged) its
/// layout over the offsets copied out of the variant pack.
pub struct Bound<'p> {
    plan: &'p Operand,
    ptr: NonNull<c_void>,
    element: KernelType,
    pub bytes: usize,
    /// Validated over this call's offsets; `None` for a dense tensor, or once taken by a view.
    layout: Option<RaggedLayout>,
}

impl<'p> Bound<'p> {
    /// Reads the offsets (if ragged) to fix the tensor's byte extent.
    pub fn new(plan: &'p Operand, pack: &VariantPack<'_>) -> Result<Self, PluginError> {
        Self::bind(plan, pack, None)
    }

    /// As [`Bound::new`], the offsets copied into `scratch` when given.
    pub fn bind(
        plan: &'p Operand,
        pack: &VariantPack<'_>,
        scratch: Option<&mut Scratch>,
    ) -> Result<Self, PluginError> {
        let ptr = pack.pointer(plan.uid, plan.role)?;
        let element = plan.dtype;
        let (elements, layout) = match plan.ragged {
            None => (
                dense_element_space(&plan.dims, &plan.strides, plan.uid)?,
                None,
            ),
            Some(r) => {
                let aux_plan = IndexInput {
                    uid: r.uid,
                    role: OFFSETS_ROLE,
                    width: r.width,
                };
                let count = plan
                    .batch()
                    .checked_add(1)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        internal(&format!(
                            "{} tensor uid {}: batch B + 1 = {} + 1 is out of range",
                            plan.role,
                            plan.uid,
                            plan.batch()
                        ))
                    })?;
                let aux = index_copy(aux_plan, count, pack, scratch)?;
                let layout = RaggedLayout::new(
                    plan.dims.to_vec(),
                    plan.strides.to_vec(),
                    plan.axes().seq,
                    aux,
                    r.multiplier,
                )
                .map_err(|e| PluginError::from(e.for_tensor(plan.uid)))?;
                let total = usize::try_from(layout.total_elements()).map_err(|_| {
                    internal(&format!(
                        "{} tensor uid {}: ragged element total {} is negative",
                        plan.role,
                        plan.uid,
                        layout.total_elements()
                    ))
                })?;
                (total, Some(layout))
            }
        };
        let bytes = elements.checked_mul(element.size()).ok_or_else(|| {
            internal(&format!(
                "{} tensor uid {}: {elements} elements of {} bytes overflow the address space",
                plan.role,
                plan.uid,
                element.size()
            ))
        })?;
        Ok(Bound {
            plan,
            ptr,
            element,
            bytes,
            layout,
        })
    }

    /// An exclusive view over memory another operand also covers would be undefined behaviour,
    /// so every output's span is checked against all other bindings before any view exists.
    pub fn span(&self) -> Span {
        Span {
            uid: self.plan.uid,
            role: self.plan.role,
            start: self.ptr.as_ptr() as usize,
            bytes: self.bytes,
        }
    }

    /// A shared view; `ptr` is valid for `bytes` host bytes nobody writes during the call (the
    /// pack's contract, with outputs checked not to overlap inputs).
    pub fn view(&self) -> Result<Box<dyn Tensor + '_>, PluginError> {
        // SAFETY: the pack's contract: `bytes` readable host bytes, unwritten during the call.
        let view = unsafe {
            self.raw_view::<HostData<'_>>(self.ptr.as_ptr().cast_const(), self.layout.clone())
        }?;
        Ok(match view {
            View::Dense(t) => Box::new(t),
            View::Ragged(t) => Box::new(t),
        })
    }

    /// An exclusive view; called only for outputs, after the overlap check.
    pub fn view_mut(&self) -> Result<Box<dyn TensorMut + '_>, PluginError> {
        // SAFETY: the pack's contract: `bytes` writable host bytes; outputs overlap no other
        // operand (checked before any view exists), so nothing else touches them.
        let view =
            unsafe { self.raw_view::<HostDataMut<'_>>(self.ptr.as_ptr(), self.layout.clone()) }?;
        Ok(match view {
            View::Dense(t) => Box::new(t),
            View::Ragged(t) => Box::new(t),
        })
    }

    /// As [`Bound::view`], unboxed, moving the layout into the view (one view per binding).
    pub fn take_view(&mut self) -> Result<View<HostData<'_>>, PluginError> {
        let layout = self.take_layout()?;
        // SAFETY: as `view`.
        unsafe { self.raw_view::<HostData<'_>>(self.ptr.as_ptr().cast_const(), layout) }
    }

    /// As [`Bound::view_mut`], unboxed, moving the layout into the view.
    pub fn take_view_mut(&mut self) -> Result<View<HostDataMut<'_>>, PluginError> {
        let layout = self.take_layout()?;
        // SAFETY: as `view_mut`.
        unsafe { self.raw_view::<HostDataMut<'_>>(self.ptr.as_ptr(), layout) }
    }

    fn take_layout(&mut self) -> Result<Option<RaggedLayout>, PluginError> {
        match (self.plan.ragged, self.layout.take()) {
            (Some(_), None) => Err(internal(&format!(
                "{} tensor uid {}: a second view of one binding",
                self.plan.role, self.plan.uid
            ))),
            (_, layout) => Ok(layout),
        }
    }

    /// The operand's dense view over `ptr`, or its ragged view with `layout`.
    ///
    /// # Safety
    ///
    /// `ptr` holds `self.bytes` bytes valid for the view's lifetime, with the access the carrier
    /// `S` claims (unwritten by anyone for a read-only one, untouched by anyone else for a
    /// writable one).
    unsafe fn raw_view<'a, S: BorrowedStorage<'a>>(
        &'a self,
        ptr: S::Ptr,
        layout: Option<RaggedLayout>,
    ) -> Result<View<S>, PluginError> {
        // SAFETY: forwarded from this function's contract.
        let view: Result<View<S>, KernelError> =
            unsafe { S::from_raw_parts(ptr, self.element, self.bytes) }.and_then(
                |data| match layout {
                    None => Dense::from_storage(
                        data,
                        self.plan.dims.to_vec(),
                        self.plan.strides.to_vec(),
                    )
                    .map(View::Dense),
                    Some(layout) => Ragged::from_layout(data, layout).map(View::Ragged),
                },
            );
        view.map_err(|e| e.for_tensor(self.plan.uid).into())
    }
}

/// Copies an int32/int64 `[n, 1, 1, 1]` tensor (ragged offsets, seq_lens) out of the variant
/// pack. The copy is what lets it travel as `Arc<dyn Tensor>` (no borrowed lifetime) and pins
/// the values for this call.
pub fn owned_index_copy(
    index: IndexInput,
    n: usize,
    pack: &VariantPack<'_>,
) -> Result<Arc<dyn Tensor>, PluginError> {
    let data = index_data(index, n, pack)?;
    Ok(copy_of(index, data)?.shared())
}

fn copy_of(index: IndexInput, data: HostData<'_>) -> Result<IndexValues, PluginError> {
    let (dims, strides) = index_shape(data.len());
    let owned = match data {
        HostData::I32(values) => DenseTensor::from_vec(values.to_vec(), dims, strides)
            .map(|t| IndexValues::I32(t.into())),
        HostData::I64(values) => DenseTensor::from_vec(values.to_vec(), dims, strides)
            .map(|t| IndexValues::I64(t.into())),
        _ => {
            return Err(internal(&format!(
                "{} tensor uid {} is not int32/int64",
                index.role, index.uid
            )));
        }
    };
    owned.map_err(|e| e.for_tensor(index.uid).into())
}

/// The `n` entries of an index tensor in the pack, borrowed for this call.
fn index_data<'a>(
    index: IndexInput,
    n: usize,
    pack: &VariantPack<'a>,
) -> Result<HostData<'a>, PluginError> {
    let ptr = pack.pointer(index.uid, index.role)?;
    let element = index.width.data_type();
    let bytes = index_tensor_bytes(index.uid, index.width, n)?;
    // SAFETY: the pack's contract: `n` elements of `element` at `ptr`, in host memory.
    unsafe { HostData::from_raw_parts(ptr.as_ptr().cast_const(), element, bytes) }
        .map_err(|e| e.for_tensor(index.uid).into())
}

/// Bytes of an `n`-entry int32/int64 tensor (offsets: B + 1, seq_lens: B). `n` comes from the
/// graph's dims, so the product is checked rather than trusted to fit.
pub fn index_tensor_bytes(uid: i64, width: IndexWidth, n: usize) -> Result<usize, PluginError> {
    width.data_type().size().checked_mul(n).ok_or_else(|| {
        PluginError::InvalidValue(format!(
            "tensor uid {uid}: {n} entries of {width} overflow the address space"
        ))
    })
}

fn index_shape(n: usize) -> (Vec<i64>, Vec<i64>) {
    (vec![n as i64, 1, 1, 1], vec![1, 1, 1, 1])
}

/// Elements a dense tensor spans: `1 + Σ (dims[i] − 1)·strides[i]`, 0 if any dim is 0.
fn dense_element_space(
    dims: &[i64; 4],
    strides: &[i64; 4],
    uid: i64,
) -> Result<usize, PluginError> {
    if dims.contains(&0) {
        return Ok(0);
    }
    let last = dims.iter().zip(strides).try_fold(0i64, |acc, (d, s)| {
        (d - 1).checked_mul(*s).and_then(|x| acc.checked_add(x))
    });
    last.and_then(|l| l.checked_add(1))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            PluginError::InvalidValue(format!(
                "tensor uid {uid}: dims {dims:?} with strides {strides:?} overflow the address space"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_tensor_sizes_are_checked_and_name_the_uid() {
        assert_eq!(index_tensor_bytes(5, IndexWidth::I32, 3).ok(), Some(12));
        assert_eq!(index_tensor_bytes(5, IndexWidth::I64, 3).ok(), Some(24));
        let error = index_tensor_bytes(6, IndexWidth::I64, usize::MAX / 4)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error,
            Some(format!(
                "invalid value: tensor uid 6: {} entries of int64 overflow the address space",
                usize::MAX / 4
            ))
        );
    }

    fn offsets_of(tensor: &Arc<dyn Tensor>) -> Vec<i32> {
        match tensor.host_data() {
            HostData::I32(values) => values.to_vec(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn scratch_copies_are_each_calls_values_in_reused_buffers() {
        use crate::abi::types::DeviceBuffer;
        use std::ptr::null_mut as null;

        let mut offsets = [0i32, 4, 4, 10];
        let index = IndexInput {
            uid: 10,
            role: OFFSETS_ROLE,
            width: IndexWidth::I32,
        };
        let mut scratch = Scratch::default();
        let mut call = |offsets: &mut [i32; 4]| {
            let entries = [DeviceBuffer {
                uid: 10,
                ptr: offsets.as_mut_ptr().cast(),
            }];
            // SAFETY: the one pointer is a live host array of 4 int32, read-only here.
            let pack = unsafe { VariantPack::new(&entries, null(), null()) }.ok();
            let pack = pack.as_ref();
            scratch.begin_call();
            let first = pack.map(|p| scratch.index_copy(index, 4, p));
            let again = pack.map(|p| scratch.index_copy(index, 4, p));
            match (first, again) {
                (Some(Ok(a)), Some(Ok(b))) => {
                    assert!(Arc::ptr_eq(&a, &b), "one copy per uid within a call");
                    (offsets_of(&a), Arc::as_ptr(&a).cast::<u8>() as usize)
                }
                _ => panic!("the copy failed"),
            }
        };
        let (values, buffer) = call(&mut offsets);
        assert_eq!(values, [0, 4, 4, 10]);
        offsets[2] = 7;
        let (values, again) = call(&mut offsets);
        assert_eq!(values, [0, 4, 7, 10], "a later call reads its own offsets");
        assert_eq!(buffer, again, "into the same buffer");
    }

    #[test]
    fn a_copy_still_held_is_never_overwritten() {
        use crate::abi::types::DeviceBuffer;
        use std::ptr::null_mut as null;

        let mut offsets = [0i32, 2, 5];
        let index = IndexInput {
            uid: 3,
            role: OFFSETS_ROLE,
            width: IndexWidth::I32,
        };
        let mut scratch = Scratch::default();
        let mut copy = |offsets: &mut [i32; 3]| {
            let entries = [DeviceBuffer {
                uid: 3,
                ptr: offsets.as_mut_ptr().cast(),
            }];
            // SAFETY: the one pointer is a live host array of 3 int32, read-only here.
            let pack = unsafe { VariantPack::new(&entries, null(), null()) }.ok();
            scratch.begin_call();
            pack.and_then(|p| scratch.index_copy(index, 3, &p).ok())
        };
        let held = copy(&mut offsets);
        offsets[1] = 1;
        let next = copy(&mut offsets);
        assert_eq!(held.as_ref().map(offsets_of), Some(vec![0, 2, 5]));
        assert_eq!(next.as_ref().map(offsets_of), Some(vec![0, 1, 5]));
    }
}
