//! Turning pointers that arrive from C into borrowed host buffers.
//!
//! This is the crate's FFI edge: the only place a raw pointer becomes a slice. Everything built
//! on the result is safe code.

use std::ffi::c_void;

use half::{bf16, f16};

use crate::dtype::{DataType, Element, HostData, HostDataMut};
use crate::error::KernelError;

use super::storage::Storage;

/// Checks what can be checked about a pointer and returns its element count.
fn element_len(address: usize, dtype: DataType, byte_len: usize) -> Result<usize, KernelError> {
    let size = dtype.size();
    if !byte_len.is_multiple_of(size) {
        return Err(KernelError::ByteLengthNotWhole {
            byte_len,
            dtype,
            size,
        });
    }
    if byte_len > 0 && address == 0 {
        return Err(KernelError::NullPointer { byte_len });
    }
    // A slice may span at most isize::MAX bytes; building one over more is undefined behaviour
    // even if nothing is read. Planning refuses such graphs; this keeps the edge sound anyway.
    if byte_len > isize::MAX as usize {
        return Err(KernelError::ExtentAboveIsizeMax { byte_len });
    }
    // Every supported type is aligned to its size.
    if !address.is_multiple_of(size) {
        return Err(KernelError::Misaligned {
            address,
            align: size,
            dtype,
        });
    }
    Ok(byte_len / size)
}

/// Borrows `byte_len` bytes at `ptr` as elements of `dtype`, for reading.
///
/// # Safety
///
/// Unless `byte_len` is 0, `ptr` must point to `byte_len` initialised bytes of one allocation that
/// stay valid and are not written by anyone for the lifetime `'a`.
pub(crate) unsafe fn host_data_from_raw<'a>(
    ptr: *const c_void,
    dtype: DataType,
    byte_len: usize,
) -> Result<HostData<'a>, KernelError> {
    let len = element_len(ptr as usize, dtype, byte_len)?;
    if len == 0 {
        return Ok(empty(dtype));
    }
    // SAFETY: the pointer is non-null and aligned for the element type (checked above), and the
    // caller guarantees `len * size == byte_len` readable bytes that nobody writes during 'a.
    Ok(unsafe {
        match dtype {
            DataType::F32 => borrow::<f32>(ptr, len),
            DataType::F16 => borrow::<f16>(ptr, len),
            DataType::BF16 => borrow::<bf16>(ptr, len),
            DataType::I32 => borrow::<i32>(ptr, len),
            DataType::I64 => borrow::<i64>(ptr, len),
            DataType::Fp8(format) => {
                HostData::Fp8(format, std::slice::from_raw_parts(ptr.cast::<u8>(), len))
            }
        }
    })
}

/// Borrows `byte_len` bytes at `ptr` as elements of `dtype`, for reading and writing.
///
/// # Safety
///
/// Unless `byte_len` is 0, `ptr` must point to `byte_len` initialised, writable bytes of one
/// allocation that stay valid for `'a` and that nothing else reads or writes during `'a`.
pub(crate) unsafe fn host_data_mut_from_raw<'a>(
    ptr: *mut c_void,
    dtype: DataType,
    byte_len: usize,
) -> Result<HostDataMut<'a>, KernelError> {
    let len = element_len(ptr as usize, dtype, byte_len)?;
    if len == 0 {
        return Ok(empty_mut(dtype));
    }
    // SAFETY: non-null and aligned (checked above); the caller guarantees exclusive, valid,
    // writable access to `byte_len` bytes for 'a.
    Ok(unsafe {
        match dtype {
            DataType::F32 => borrow_mut::<f32>(ptr, len),
            DataType::F16 => borrow_mut::<f16>(ptr, len),
            DataType::BF16 => borrow_mut::<bf16>(ptr, len),
            DataType::I32 => borrow_mut::<i32>(ptr, len),
            DataType::I64 => borrow_mut::<i64>(ptr, len),
            DataType::Fp8(format) => HostDataMut::Fp8(
                format,
                std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len),
            ),
        }
    })
}

/// A borrowed carrier built from the pointer triple a C caller passes: [`HostData`] from a
/// `*const` (read-only), [`HostDataMut`] from a `*mut` (exclusive), so the dense and ragged
/// views write their `from_raw` once for both. Sealed: the two carriers are the only ones.
pub trait BorrowedStorage<'a>: Storage + Sized + sealed::Sealed {
    /// The pointer type a C caller passes for this carrier.
    type Ptr;

    /// # Safety
    ///
    /// Unless `byte_len` is 0, `ptr` must point to `byte_len` initialised bytes of one
    /// allocation that stay valid for `'a`: not written by anyone for a read-only carrier, not
    /// read or written by anyone else for a writable one.
    unsafe fn from_raw_parts(
        ptr: Self::Ptr,
        dtype: DataType,
        byte_len: usize,
    ) -> Result<Self, KernelError>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::dtype::HostData<'_> {}
    impl Sealed for crate::dtype::HostDataMut<'_> {}
}

impl<'a> BorrowedStorage<'a> for HostData<'a> {
    type Ptr = *const c_void;

    unsafe fn from_raw_parts(
        ptr: *const c_void,
        dtype: DataType,
        byte_len: usize,
    ) -> Result<Self, KernelError> {
        // SAFETY: forwarded from this function's contract (the read-only case).
        unsafe { host_data_from_raw(ptr, dtype, byte_len) }
    }
}

impl<'a> BorrowedStorage<'a> for HostDataMut<'a> {
    type Ptr = *mut c_void;

    unsafe fn from_raw_parts(
        ptr: *mut c_void,
        dtype: DataType,
        byte_len: usize,
    ) -> Result<Self, KernelError> {
        // SAFETY: forwarded from this function's contract (the exclusive case).
        unsafe { host_data_mut_from_raw(ptr, dtype, byte_len) }
    }
}

/// # Safety
///
/// `ptr` is non-null, aligned for `T` and valid for reads of `len` elements during `'a`, with no
/// writer in that time. Every bit pattern is a valid `T` for the SDK's numeric element types.
unsafe fn borrow<'a, T: Element>(ptr: *const c_void, len: usize) -> HostData<'a> {
    // SAFETY: forwarded from this function's contract.
    T::host_data(unsafe { std::slice::from_raw_parts(ptr.cast::<T>(), len) })
}

/// # Safety
///
/// As [`borrow`], plus exclusive write access during `'a`.
unsafe fn borrow_mut<'a, T: Element>(ptr: *mut c_void, len: usize) -> HostDataMut<'a> {
    // SAFETY: forwarded from this function's contract.
    T::host_data_mut(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<T>(), len) })
}

fn empty<'a>(dtype: DataType) -> HostData<'a> {
    match dtype {
        DataType::F32 => HostData::F32(&[]),
        DataType::F16 => HostData::F16(&[]),
        DataType::BF16 => HostData::BF16(&[]),
        DataType::I32 => HostData::I32(&[]),
        DataType::I64 => HostData::I64(&[]),
        DataType::Fp8(format) => HostData::Fp8(format, &[]),
    }
}

fn empty_mut<'a>(dtype: DataType) -> HostDataMut<'a> {
    match dtype {
        DataType::F32 => HostDataMut::F32(&mut []),
        DataType::F16 => HostDataMut::F16(&mut []),
        DataType::BF16 => HostDataMut::BF16(&mut []),
        DataType::I32 => HostDataMut::I32(&mut []),
        DataType::I64 => HostDataMut::I64(&mut []),
        DataType::Fp8(format) => HostDataMut::Fp8(format, &mut []),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_null_misaligned_and_partial_elements() {
        // SAFETY: every call here fails validation before any memory is touched.
        unsafe {
            assert_eq!(
                host_data_from_raw(std::ptr::null(), DataType::F32, 8).unwrap_err(),
                KernelError::NullPointer { byte_len: 8 }
            );
            let words = [0u32; 4];
            let odd = words.as_ptr().cast::<u8>().wrapping_add(2).cast::<c_void>();
            assert!(matches!(
                host_data_from_raw(odd, DataType::F32, 4).unwrap_err(),
                KernelError::Misaligned { align: 4, .. }
            ));
            assert_eq!(
                host_data_from_raw(words.as_ptr().cast(), DataType::I64, 12).unwrap_err(),
                KernelError::ByteLengthNotWhole {
                    byte_len: 12,
                    dtype: DataType::I64,
                    size: 8
                }
            );
        }
    }

    /// Issue 13 item 1: a byte length past isize::MAX is refused before a slice exists.
    #[test]
    fn rejects_a_buffer_beyond_isize_max() {
        let words = [0u32; 4];
        let too_long = isize::MAX as usize + 1;
        // SAFETY: the call fails validation before any memory is touched.
        let result = unsafe { host_data_from_raw(words.as_ptr().cast(), DataType::F32, too_long) };
        assert_eq!(
            result.err(),
            Some(KernelError::ExtentAboveIsizeMax { byte_len: too_long })
        );
    }

    #[test]
    fn borrows_exactly_the_given_bytes() {
        let mut values = [1.5f32, -2.0, 3.25];
        // SAFETY: `values` is a live, exclusively borrowed array of 12 bytes.
        let data = unsafe { host_data_mut_from_raw(values.as_mut_ptr().cast(), DataType::F32, 12) };
        match data {
            Ok(HostDataMut::F32(s)) => {
                s[1] = 7.0;
                assert_eq!(s.len(), 3);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(values, [1.5, 7.0, 3.25]);
        // SAFETY: a zero-length borrow never dereferences the pointer.
        let empty = unsafe { host_data_from_raw(std::ptr::null(), DataType::I32, 0) };
        assert!(matches!(empty, Ok(HostData::I32(s)) if s.is_empty()));
    }
}
