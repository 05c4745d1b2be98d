//! NULL-checking conversions from the raw pointers of the C ABI.
//!
//! No other module dereferences a pointer received from C (variant-pack data pointers excepted:
//! those go to the kernels' shallow tensors). Each helper is `unsafe` with the contract the C
//! header states, and each NULL becomes a [`PluginError`] naming the argument.

use std::ptr::NonNull;

use crate::abi::types::{ConstData, DeviceBuffer};
use crate::error::PluginError;

/// A checked out-parameter. Consuming `write` makes "write once, as the last step" the natural
/// shape of an export, which is how outputs stay untouched on failure.
pub struct Out<T> {
    target: NonNull<T>,
}

impl<T> Out<T> {
    /// # Safety
    /// `ptr` is NULL or valid and aligned for one write of `T` for the rest of the call.
    pub unsafe fn new(ptr: *mut T, argument: &'static str) -> Result<Self, PluginError> {
        NonNull::new(ptr)
            .map(|target| Out { target })
            .ok_or(PluginError::NullArgument { argument })
    }

    pub fn write(self, value: T) {
        // SAFETY: `new`'s contract: the pointer is non-NULL, aligned and writable.
        unsafe { self.target.as_ptr().write(value) }
    }
}

/// A checked in/out `ConstData` (the EngineDetails slot): read and later overwritten in place.
pub struct InOut<'a, T> {
    target: &'a mut T,
}

impl<'a, T> InOut<'a, T> {
    /// # Safety
    /// `ptr` is NULL or valid for reads and writes of `T` for `'a`, with no other live reference.
    pub unsafe fn new(ptr: *mut T, argument: &'static str) -> Result<Self, PluginError> {
        // SAFETY: the caller guarantees validity and exclusivity for `'a` when non-NULL.
        unsafe { ptr.as_mut() }
            .map(|target| InOut { target })
            .ok_or(PluginError::NullArgument { argument })
    }

    pub fn get(&self) -> &T {
        self.target
    }

    pub fn write(self, value: T) {
        *self.target = value;
    }
}

/// The bytes of a `const hipdnnPluginConstData_t*` argument. NULL struct, NULL data or size 0 are
/// all BAD_PARAM: no serialized object is empty.
///
/// # Safety
/// `data` is NULL or points to a `ConstData` whose `ptr` is NULL or valid for `size` bytes of
/// reads for `'a`, not mutated meanwhile.
pub unsafe fn const_data<'a>(
    data: *const ConstData,
    argument: &'static str,
) -> Result<&'a [u8], PluginError> {
    // SAFETY: caller contract; NULL maps to None.
    let data = unsafe { data.as_ref() }.ok_or(PluginError::NullArgument { argument })?;
    if data.ptr.is_null() || data.size == 0 {
        return Err(PluginError::EmptyBuffer {
            argument,
            ptr: data.ptr as usize,
            size: data.size,
        });
    }
    // SAFETY: non-NULL and, by the caller's contract, valid for `size` bytes for `'a`.
    Ok(unsafe { std::slice::from_raw_parts(data.ptr.cast::<u8>(), data.size) })
}

/// The variant pack. An empty pack may come as NULL with count 0.
///
/// # Safety
/// `buffers` is NULL or valid for reads of `count` entries for `'a`.
pub unsafe fn device_buffers<'a>(
    buffers: *const DeviceBuffer,
    count: u32,
) -> Result<&'a [DeviceBuffer], PluginError> {
    if count == 0 {
        return Ok(&[]);
    }
    if buffers.is_null() {
        return Err(PluginError::NullArgument {
            argument: "device_buffers",
        });
    }
    // SAFETY: non-NULL and, by the caller's contract, valid for `count` entries for `'a`.
    Ok(unsafe { std::slice::from_raw_parts(buffers, count as usize) })
}

/// The `int64_t* engine_ids, uint32_t max_engines` pair of the id-listing functions. NULL with
/// `max_engines == 0` is the counting call of the two-call protocol.
pub struct IdSink {
    target: Option<NonNull<i64>>,
    capacity: usize,
}

impl IdSink {
    /// # Safety
    /// `ids` is NULL or valid for `max_engines` writes of `i64` for the rest of the call.
    pub unsafe fn new(ids: *mut i64, max_engines: u32) -> Result<Self, PluginError> {
        let target = NonNull::new(ids);
        if target.is_none() && max_engines > 0 {
            return Err(PluginError::NullIdBuffer { max_engines });
        }
        Ok(IdSink {
            target,
            capacity: max_engines as usize,
        })
    }

    /// True for the counting call (`engine_ids == NULL`, `max_engines == 0`).
    pub fn is_count_query(&self) -> bool {
        self.target.is_none()
    }

    /// Writes as many ids as fit; returns how many were written.
    pub fn write(self, ids: &[i64]) -> usize {
        let Some(target) = self.target else {
            return 0;
        };
        let n = ids.len().min(self.capacity);
        // SAFETY: `new`'s contract: `target` is valid for `capacity` ≥ n writes, and `ids` is a
        // Rust slice that cannot overlap memory the caller handed us for writing.
        unsafe { std::ptr::copy_nonoverlapping(ids.as_ptr(), target.as_ptr(), n) };
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::c_void;

    #[test]
    fn null_out_names_the_argument() {
        // SAFETY: NULL is allowed by `new`'s contract.
        let err = unsafe { Out::<u32>::new(std::ptr::null_mut(), "num_engines") };
        assert!(matches!(
            err,
            Err(PluginError::NullArgument {
                argument: "num_engines"
            })
        ));
    }

    #[test]
    fn const_data_rejects_null_and_empty() {
        // SAFETY: NULL is allowed.
        let null = unsafe { const_data(std::ptr::null(), "op_graph") };
        assert!(matches!(null, Err(PluginError::NullArgument { .. })));
        let bytes = [1u8, 2, 3];
        let empty = ConstData {
            ptr: bytes.as_ptr().cast::<c_void>(),
            size: 0,
        };
        // SAFETY: `empty` is a valid ConstData.
        let err = unsafe { const_data(&empty, "op_graph") };
        assert!(matches!(err, Err(PluginError::EmptyBuffer { size: 0, .. })));
        let full = ConstData {
            ptr: bytes.as_ptr().cast::<c_void>(),
            size: 3,
        };
        // SAFETY: `full` describes `bytes`, alive for the call.
        let ok = unsafe { const_data(&full, "op_graph") };
        assert_eq!(ok.ok(), Some(&bytes[..]));
    }

    #[test]
    fn id_sink_counts_and_truncates() {
        // SAFETY: NULL with capacity 0 is the counting call.
        let query = unsafe { IdSink::new(std::ptr::null_mut(), 0) };
        assert!(query.as_ref().is_ok_and(IdSink::is_count_query));
        // SAFETY: NULL with capacity 2 is allowed by the contract (and rejected).
        let bad = unsafe { IdSink::new(std::ptr::null_mut(), 2) };
        assert!(matches!(
            bad,
            Err(PluginError::NullIdBuffer { max_engines: 2 })
        ));
        let mut out = [0i64; 2];
        // SAFETY: `out` has room for 2.
        let sink = unsafe { IdSink::new(out.as_mut_ptr(), 2) };
        let written = sink.map(|s| s.write(&[7, 8, 9])).unwrap_or(usize::MAX);
        assert_eq!(written, 2);
        assert_eq!(out, [7, 8]);
    }
}
