//! The variant pack of one execute, bound once against the problem's [`Signature`].
//!
//! [`bind`] is the single `unsafe` step of an execute: it takes the caller's promise about every
//! pointer, the stream and the workspace, checks what can be checked (every declared uid bound
//! once and non-NULL, each pointer aligned to its element, each host extent fixed by offsets it
//! has read and validated, no output overlapping anything else), and returns a [`Call`] of
//! typed values. Engines, the scale and the multi-node executor read that [`Call`] in safe code.
//!
//! For a plan of [`Reach::Host`] every buffer becomes a host slice of exactly its extent: index
//! tensors (offsets, seq_lens) are bound first, because a ragged tensor's extent is
//! `offsets[B] × multiplier` elements; next to a usable GPU runtime, device-resident buffers are
//! copied to the host first and outputs back after the execute ([`host_memory`]). For a plan of
//! [`Reach::Device`] every buffer becomes a device address the kernels read; a pass-by-value
//! scale is read on the host either way.

pub mod device_memory;
pub mod host_memory;

use std::ffi::c_void;
use std::num::NonZeroU64;
use std::sync::Arc;

use ragged_core::binding::{
    Access, Bound, Call, Declared, DevicePtr, Kind, RaggedSpec, Signature, Stream, Workspace,
};
use ragged_core::engine::Reach;
use ragged_core::problem::ScalarType;
use ragged_core::tensor::extent::{Addressing, DeclaredExtent, byte_extent};
use ragged_core::tensor::{BorrowedStorage, RaggedLayout};
use ragged_core::{DenseTensor, HostData, HostDataMut, KernelError, Tensor};

use crate::abi::types::DeviceBuffer;
use crate::error::PluginError;
use crate::overlap::{self, Span};
use host_memory::{HostMemory, Staged};

/// The caller's bindings of one execute, before they are bound.
#[derive(Debug, Clone, Copy)]
pub struct Pack<'a> {
    pub entries: &'a [DeviceBuffer],
    pub stream: *mut c_void,
    pub workspace: *mut c_void,
}

impl Pack<'_> {
    /// The pointer bound to `declared`'s uid: present, bound once (checked by [`bind`]), and
    /// not NULL.
    fn pointer(&self, declared: &Declared) -> Result<NonZeroU64, PluginError> {
        let (uid, role) = (declared.uid, declared.role);
        let entry = self
            .entries
            .iter()
            .find(|e| e.uid == uid)
            .ok_or(PluginError::MissingBuffer { uid, role })?;
        NonZeroU64::new(entry.ptr as u64).ok_or(PluginError::NullBuffer { uid, role })
    }
}

/// Binds `pack` for a plan of `reach` whose workspace is `workspace_bytes`; host copies of
/// device memory live in `staged` (write them back with [`Staged::write_back`] once the execute
/// has succeeded), and `scratch` lends allocations a context reuses from call to call.
///
/// # Safety
/// For the whole call and until `pack.stream` completes the work it is given: every pointer in
/// `pack.entries` is valid for the extent its buffer in `signature` implies (for a ragged tensor
/// `offsets[B] × multiplier` elements), in memory the plan reaches (host memory, or device
/// memory of the stream's context where the plan is a GPU plan or the binder stages device
/// memory); inputs are not written by anyone meanwhile; a pass-by-value scale's pointer is a
/// host pointer to one element of its type (plugin-abi.md §5.7); `pack.workspace` is NULL or
/// holds `workspace_bytes` bytes; `pack.stream` is NULL or a live stream.
pub unsafe fn bind<'call>(
    signature: &'call Signature,
    reach: Reach,
    pack: Pack<'call>,
    workspace_bytes: usize,
    staged: &'call mut Staged,
    scratch: &mut BindScratch,
) -> Result<Call<'call>, PluginError> {
    if let Some((uid, first, second)) = signature.aliased_output() {
        return Err(PluginError::InvalidValue(format!(
            "tensor uid {uid} is both {first} and {second}, and one of them is written: an output \
             may not overlap another binding"
        )));
    }
    for (i, entry) in pack.entries.iter().enumerate() {
        if pack.entries[..i].iter().any(|e| e.uid == entry.uid) {
            return Err(PluginError::InvalidValue(format!(
                "device_buffers binds tensor uid {} more than once",
                entry.uid
            )));
        }
    }
    // SAFETY: `pack.stream` is NULL or live for the call (this function's contract).
    let stream = unsafe { Stream::new(pack.stream) };
    let workspace = Workspace {
        // SAFETY: the caller's workspace holds `workspace_bytes` device bytes (contract).
        ptr: NonZeroU64::new(pack.workspace as u64).map(|p| unsafe { DevicePtr::new(p) }),
        bytes: workspace_bytes,
    };
    let mut layouts = std::mem::take(&mut scratch.layouts);
    layouts.clear();
    layouts.resize_with(signature.buffers().len(), || None);
    let bound = match reach {
        // SAFETY: forwarded contract.
        Reach::Device => unsafe { bind_device(signature, pack) }?,
        // SAFETY: forwarded contract.
        Reach::Host => unsafe { bind_host(signature, pack, staged, scratch, &mut layouts) }?,
    };
    Call::new(signature, bound, layouts, stream, workspace).map_err(PluginError::from)
}

/// Allocations an execution context lends each call's binding, so that a call in a loop
/// allocates as little as the bindings allow; every value in them is rewritten from the call's
/// own pack before it is read.
#[derive(Default)]
pub struct BindScratch {
    places: Vec<Place>,
    layouts: Vec<Option<RaggedLayout>>,
    copies: Vec<IndexCopy>,
}

impl BindScratch {
    /// Gives back a finished call's layout storage.
    pub fn reuse(&mut self, layouts: Vec<Option<RaggedLayout>>) {
        self.layouts = layouts;
    }

    /// An owned copy of index tensor `uid`'s values in this call: the same tensor for every
    /// request of one call, rewritten in place from call to call where nothing still holds it.
    fn index_copy(
        &mut self,
        uid: i64,
        data: HostData<'_>,
        dims: &[i64],
        strides: &[i64],
    ) -> Result<Arc<dyn Tensor>, PluginError> {
        let slot = self.copies.iter().position(|c| c.uid == uid);
        if let Some(i) = slot {
            let copy = &mut self.copies[i];
            if copy.current || copy.values.refill(&data, dims) {
                copy.current = true;
                return Ok(copy.values.shared());
            }
        }
        let in_tensor = |e: KernelError| PluginError::from(e.for_tensor(uid));
        let values = match data {
            HostData::I32(v) => IndexValues::I32(Arc::new(
                DenseTensor::from_vec(v.to_vec(), dims.to_vec(), strides.to_vec())
                    .map_err(in_tensor)?,
            )),
            HostData::I64(v) => IndexValues::I64(Arc::new(
                DenseTensor::from_vec(v.to_vec(), dims.to_vec(), strides.to_vec())
                    .map_err(in_tensor)?,
            )),
            other => {
                return Err(PluginError::InvalidValue(format!(
                    "tensor uid {uid}: a ragged offset aux of type {}, need int32 or int64",
                    other.data_type()
                )));
            }
        };
        let shared = values.shared();
        let copy = IndexCopy {
            uid,
            values,
            current: true,
        };
        match slot {
            Some(i) => self.copies[i] = copy,
            None => self.copies.push(copy),
        }
        Ok(shared)
    }

    /// The copy of `uid` made in this call.
    fn current(&self, uid: i64) -> Option<Arc<dyn Tensor>> {
        self.copies
            .iter()
            .find(|c| c.uid == uid && c.current)
            .map(|c| c.values.shared())
    }
}

struct IndexCopy {
    uid: i64,
    values: IndexValues,
    /// Rewritten from the current call's pack.
    current: bool,
}

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

    /// Overwrites the values with `data` in place; false when that is not possible (another
    /// type or shape, or a tensor of an earlier call still holds them).
    fn refill(&mut self, data: &HostData<'_>, dims: &[i64]) -> bool {
        fn overwrite<T: ragged_core::Element>(
            t: &mut Arc<DenseTensor<T>>,
            src: &[T],
            dims: &[i64],
        ) -> bool {
            match Arc::get_mut(t) {
                Some(t) if t.as_slice().len() == src.len() && t.dims() == dims => {
                    t.as_mut_slice().copy_from_slice(src);
                    true
                }
                _ => false,
            }
        }
        match (self, data) {
            (IndexValues::I32(t), HostData::I32(src)) => overwrite(t, src, dims),
            (IndexValues::I64(t), HostData::I64(src)) => overwrite(t, src, dims),
            _ => false,
        }
    }
}

/// # Safety
/// As [`bind`].
unsafe fn bind_device<'call>(
    signature: &'call Signature,
    pack: Pack<'call>,
) -> Result<Vec<Bound<'call>>, PluginError> {
    let mut bound = Vec::with_capacity(signature.buffers().len());
    for declared in signature.buffers() {
        let address = pack.pointer(declared)?;
        bound.push(match declared.kind {
            Kind::Scale {
                dtype,
                host_only: true,
            } => {
                // SAFETY: a pass-by-value scale is a host pointer to one element (contract).
                Bound::Scale(unsafe { read_scalar(address, dtype) })
            }
            _ => {
                aligned(declared, address)?;
                // SAFETY: device memory of the stream's context for the declared extent
                // (contract).
                Bound::Device(unsafe { DevicePtr::new(address) })
            }
        });
    }
    Ok(bound)
}

/// Host slices of every declared buffer; the layouts of the ragged ones go into `layouts`.
///
/// # Safety
/// As [`bind`].
unsafe fn bind_host<'call>(
    signature: &'call Signature,
    pack: Pack<'call>,
    staged: &'call mut Staged,
    scratch: &mut BindScratch,
    layouts: &mut [Option<RaggedLayout>],
) -> Result<Vec<Bound<'call>>, PluginError> {
    let memory = HostMemory::of_process()?;
    let buffers = signature.buffers();
    scratch.copies.iter_mut().for_each(|c| c.current = false);
    // Pass 1: where each buffer's host bytes are (the caller's, or a host copy of device
    // memory) and how many; offsets come before the ragged tensors whose extent they fix.
    let mut places = std::mem::take(&mut scratch.places);
    places.clear();
    for (i, declared) in buffers.iter().enumerate() {
        let address = pack.pointer(declared)?;
        let bytes = match &declared.kind {
            Kind::Scale { dtype, host_only } => {
                if *host_only {
                    places.push(Place::Scalar(address.get(), *dtype));
                    continue;
                }
                dtype.size()
            }
            Kind::Index { width, entries } => index_bytes(declared.uid, *width, *entries)?,
            Kind::Tensor {
                dtype,
                dims,
                strides,
                ragged,
                ..
            } => {
                let elements = match ragged {
                    None => dense_elements(declared.uid, dims, strides)?,
                    Some(spec) => {
                        let aux = aux_copy(spec, buffers, &places, scratch)?;
                        let layout = ragged_layout(declared.uid, dims, strides, spec, aux)?;
                        let total = usize::try_from(layout.total_elements()).map_err(|_| {
                            KernelError::Internal(format!(
                                "{} tensor uid {}: ragged element total {} is negative",
                                declared.role,
                                declared.uid,
                                layout.total_elements()
                            ))
                        })?;
                        layouts[i] = Some(layout);
                        total
                    }
                };
                elements.checked_mul(dtype.size()).ok_or_else(|| {
                    PluginError::InvalidValue(format!(
                        "{} tensor uid {}: {elements} elements of {dtype} overflow the address \
                         space",
                        declared.role, declared.uid
                    ))
                })?
            }
        };
        // SAFETY: the caller's pointer is valid for `bytes` (contract); a device-resident one
        // is copied to the host on the call's stream.
        let place = unsafe { memory.reach(staged, declared, address.get(), bytes, pack.stream) }?;
        places.push(place);
        if let Kind::Index { width, entries } = declared.kind {
            // SAFETY: the place holds the index's bytes, which nobody writes during the call;
            // the slice is dropped at the end of this block, before any exclusive slice exists.
            let data = unsafe { place.host_data(width.data_type()) }
                .map_err(|e| PluginError::from(e.for_tensor(declared.uid)))?;
            let n = i64::try_from(entries).unwrap_or(i64::MAX);
            scratch.index_copy(declared.uid, data, &[n, 1, 1, 1], &[1, 1, 1, 1])?;
        }
    }
    // Pass 2: no output may overlap anything else before any exclusive slice exists.
    let spans = |output: bool| {
        buffers
            .iter()
            .zip(&places)
            .filter(move |(d, _)| d.is_output() == output)
            .filter_map(|(d, p)| p.span(d))
    };
    overlap::check_all(spans(true), spans(false))?;
    // Pass 3: the slices.
    let mut bound = Vec::with_capacity(buffers.len());
    for (declared, place) in buffers.iter().zip(&places) {
        // SAFETY: each place holds its buffer's bytes (the caller's under the contract, or a
        // copy in `staged` that lives for 'call); outputs overlap nothing else (pass 2).
        let slice = unsafe { place.bind(declared) }?;
        bound.push(match (slice, &declared.kind) {
            (Bound::Host(data), Kind::Index { .. }) => match scratch.current(declared.uid) {
                Some(tensor) => Bound::HostIndex { data, tensor },
                None => Bound::Host(data),
            },
            (slice, _) => slice,
        });
    }
    scratch.places = places;
    Ok(bound)
}

/// Where one buffer's host bytes are.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// `bytes` bytes of host memory at `address` (the caller's, or a staged copy's).
    Host { address: u64, bytes: usize },
    /// A pass-by-value scale at a host address.
    Scalar(u64, ScalarType),
}

impl Place {
    /// The place's bytes as elements of `dtype`, for reading.
    ///
    /// # Safety
    /// As [`Place::bind`], for reading.
    unsafe fn host_data<'a>(
        &self,
        dtype: ragged_core::DataType,
    ) -> Result<HostData<'a>, KernelError> {
        match *self {
            // SAFETY: forwarded contract.
            Place::Host { address, bytes } => unsafe {
                HostData::from_raw_parts(address as usize as *const c_void, dtype, bytes)
            },
            Place::Scalar(..) => Err(KernelError::Internal(
                "a scale place read as a tensor".to_owned(),
            )),
        }
    }

    fn span(&self, declared: &Declared) -> Option<Span> {
        match *self {
            Place::Host { address, bytes } => Some(Span {
                uid: declared.uid,
                role: declared.role,
                start: usize::try_from(address).ok()?,
                bytes,
            }),
            Place::Scalar(address, dtype) => Some(Span {
                uid: declared.uid,
                role: declared.role,
                start: usize::try_from(address).ok()?,
                bytes: dtype.size(),
            }),
        }
    }

    /// # Safety
    /// The place holds its buffer's bytes for 'call, readable (and, for an output, writable
    /// and untouched by anyone else).
    unsafe fn bind<'call>(&self, declared: &Declared) -> Result<Bound<'call>, PluginError> {
        let (address, bytes) = match *self {
            Place::Scalar(address, dtype) => {
                let address = NonZeroU64::new(address).ok_or(PluginError::NullBuffer {
                    uid: declared.uid,
                    role: declared.role,
                })?;
                // SAFETY: a host pointer to one element (contract).
                return Ok(Bound::Scale(unsafe { read_scalar(address, dtype) }));
            }
            Place::Host { address, bytes } => (address as usize as *mut c_void, bytes),
        };
        let in_tensor = |e: KernelError| PluginError::from(e.for_tensor(declared.uid));
        Ok(match &declared.kind {
            Kind::Scale { dtype, .. } => {
                let address = NonZeroU64::new(address as u64).ok_or(PluginError::NullBuffer {
                    uid: declared.uid,
                    role: declared.role,
                })?;
                // SAFETY: one element of host memory (a staged copy or the caller's).
                Bound::Scale(unsafe { read_scalar(address, *dtype) })
            }
            Kind::Index { width, .. } => Bound::Host(
                // SAFETY: forwarded contract.
                unsafe { HostData::from_raw_parts(address.cast_const(), width.data_type(), bytes) }
                    .map_err(in_tensor)?,
            ),
            Kind::Tensor {
                dtype,
                access: Access::Read,
                ..
            } => Bound::Host(
                // SAFETY: forwarded contract.
                unsafe { HostData::from_raw_parts(address.cast_const(), *dtype, bytes) }
                    .map_err(in_tensor)?,
            ),
            Kind::Tensor {
                dtype,
                access: Access::Write,
                ..
            } => Bound::Output(Some(
                // SAFETY: forwarded contract; no other binding overlaps it.
                unsafe { HostDataMut::from_raw_parts(address, *dtype, bytes) }
                    .map_err(in_tensor)?,
            )),
        })
    }
}

/// The offsets `spec` names, bound earlier in the host pass, as an owned tensor: one per uid
/// per call, shared by every tensor it delimits.
fn aux_copy(
    spec: &RaggedSpec,
    buffers: &[Declared],
    places: &[Place],
    scratch: &mut BindScratch,
) -> Result<Arc<dyn Tensor>, PluginError> {
    if let Some(copy) = scratch.current(spec.offsets) {
        return Ok(copy);
    }
    let position = buffers.iter().position(|d| d.uid == spec.offsets);
    let (Some(i), Some(place)) = (position, position.and_then(|i| places.get(i))) else {
        return Err(PluginError::InvalidValue(format!(
            "ragged offset aux uid {} is not a bound tensor of the graph",
            spec.offsets
        )));
    };
    // Index kinds were copied when they were placed; a graph's aux is one of its tensors.
    let Kind::Tensor {
        dtype,
        dims,
        strides,
        ..
    } = &buffers[i].kind
    else {
        return Err(PluginError::InvalidValue(format!(
            "ragged offset aux uid {} is bound as a scale",
            spec.offsets
        )));
    };
    // SAFETY: the aux's bytes are readable host memory nobody writes during the call (the
    // contract, or a staged copy); the slice is dropped before any exclusive slice exists.
    let data = unsafe { place.host_data(*dtype) }
        .map_err(|e| PluginError::from(e.for_tensor(spec.offsets)))?;
    scratch.index_copy(spec.offsets, data, dims, strides)
}

fn ragged_layout(
    uid: i64,
    dims: &[i64],
    strides: &[i64],
    spec: &RaggedSpec,
    aux: Arc<dyn Tensor>,
) -> Result<RaggedLayout, PluginError> {
    RaggedLayout::new(
        dims.to_vec(),
        strides.to_vec(),
        spec.seq_axis,
        aux,
        spec.multiplier.get(),
    )
    .map_err(|e| PluginError::from(e.for_tensor(uid)))
}

/// Elements a dense tensor spans (`1 + Σ (dims[i] − 1)·strides[i]`, 0 if any dim is 0), computed
/// by the same rule planning checks extents with.
fn dense_elements(uid: i64, dims: &[i64], strides: &[i64]) -> Result<usize, PluginError> {
    if dims.iter().chain(strides).any(|&x| x < 0) {
        return Err(PluginError::InvalidValue(format!(
            "tensor uid {uid}: dims {dims:?} / strides {strides:?} hold a negative entry"
        )));
    }
    let extent = DeclaredExtent {
        uid,
        role: "tensor",
        dims,
        strides,
        element_size: 1,
        addressing: Addressing::Strided,
    };
    byte_extent(&extent)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            PluginError::InvalidValue(format!(
                "tensor uid {uid}: dims {dims:?} with strides {strides:?} overflow the address \
                 space"
            ))
        })
}

/// Bytes of an `n`-entry int32/int64 tensor (offsets: B + 1, seq_lens: B). `n` comes from the
/// graph's dims, so the product is checked rather than trusted to fit.
pub fn index_bytes(
    uid: i64,
    width: ragged_core::IndexWidth,
    n: usize,
) -> Result<usize, PluginError> {
    width.data_type().size().checked_mul(n).ok_or_else(|| {
        PluginError::InvalidValue(format!(
            "tensor uid {uid}: {n} entries of {width} overflow the address space"
        ))
    })
}

/// A device buffer is aligned to its element, as the kernels' loads assume at the least.
fn aligned(declared: &Declared, address: NonZeroU64) -> Result<(), PluginError> {
    let dtype = match &declared.kind {
        Kind::Tensor { dtype, .. } => *dtype,
        Kind::Index { width, .. } => width.data_type(),
        Kind::Scale { dtype, .. } => match dtype.element() {
            Some(element) => element,
            None => return Ok(()),
        },
    };
    let align = dtype.size();
    if address.get().is_multiple_of(align as u64) {
        return Ok(());
    }
    Err(KernelError::Misaligned {
        address: address.get() as usize,
        align,
        dtype,
    }
    .for_tensor(declared.uid)
    .into())
}

/// One scale element at a host address, in f64; unaligned reads, since a host scalar carries no
/// alignment promise.
///
/// # Safety
/// `address` is a host pointer to one element of `dtype`.
unsafe fn read_scalar(address: NonZeroU64, dtype: ScalarType) -> f64 {
    let p = address.get() as usize as *const u8;
    // SAFETY: one element of `dtype` at `p` (contract); every read is unaligned.
    unsafe {
        match dtype {
            ScalarType::Double => p.cast::<f64>().read_unaligned(),
            ScalarType::Float => f64::from(p.cast::<f32>().read_unaligned()),
            ScalarType::Half => f64::from(p.cast::<half::f16>().read_unaligned().to_f32()),
            ScalarType::BFloat16 => f64::from(p.cast::<half::bf16>().read_unaligned().to_f32()),
        }
    }
}

#[cfg(test)]
mod tests;
