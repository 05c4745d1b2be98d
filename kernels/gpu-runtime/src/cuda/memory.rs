//! Host ↔ device copies on a caller's stream, for the host reference engine running next to a
//! CUDA runtime (issue 4, ragged-sdpa.md §6: "copies to host, synchronizes").
//!
//! Where the CUDA runtime is loaded, hipDNN hands out device pointers, but a host process (the
//! host shim, a test) may still bind ordinary host memory. The driver can tell the two apart
//! ([`location`]), so the caller copies only what lives on the device and uses the rest in place.

use cudarc::driver::sys::{self as cu, CUstream};

use super::context::{CurrentContext, StreamContext, context_of_stream};
use super::error::{DriverCall, GpuError};
use super::runtime;

pub use crate::Location;

/// Asks the driver what `address` is. Memory the driver has never seen (plain `malloc`) makes
/// `cuPointerGetAttribute` fail with `CUDA_ERROR_INVALID_VALUE`; that is the host answer, not an
/// error.
pub fn location(address: u64) -> Result<Location, GpuError> {
    runtime::probe()?;
    let mut memory_type: u32 = 0;
    // SAFETY: out-parameter call writing one `unsigned int` (the attribute's documented type);
    // the driver only inspects the address, it never dereferences it.
    let status = unsafe {
        cu::cuPointerGetAttribute(
            (&raw mut memory_type).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            address,
        )
    };
    match status {
        cu::CUresult::CUDA_SUCCESS => {
            if memory_type == cu::CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
                Ok(Location::Host)
            } else {
                Ok(Location::Device)
            }
        }
        cu::CUresult::CUDA_ERROR_INVALID_VALUE => Ok(Location::Host),
        other => other
            .result()
            .call("cuPointerGetAttribute")
            .map(|()| Location::Host),
    }
}

/// Copies each `(device address, host buffer)` pair device → host on `stream`, then waits for
/// the stream, so every buffer is filled on return (and everything enqueued before it is done).
///
/// # Safety
/// `stream` is null or a live stream; each device address is readable device memory of the
/// stream's context for the length of its buffer.
pub unsafe fn download(stream: CUstream, copies: &mut [(u64, &mut [u8])]) -> Result<(), GpuError> {
    // SAFETY: forwarded contract.
    let ctx = unsafe { context_of_stream(stream) }?;
    let _current = CurrentContext::push(ctx.handle)?;
    for (src, dst) in copies.iter_mut().filter(|(_, dst)| !dst.is_empty()) {
        // SAFETY: `dst` is a live host buffer of the given length that stays borrowed until the
        // synchronize below; the caller guarantees the device side.
        unsafe { cu::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), *src, dst.len(), stream) }
            .result()
            .call("cuMemcpyDtoHAsync")?;
    }
    synchronize(stream)
}

/// Copies each `(device address, host bytes)` pair host → device on `stream` and waits for the
/// copies, so the host buffers may be dropped on return.
///
/// # Safety
/// `stream` is null or a live stream; each device address is writable device memory of the
/// stream's context for the length of its bytes, not used by other work meanwhile.
pub unsafe fn upload(stream: CUstream, copies: &[(u64, &[u8])]) -> Result<(), GpuError> {
    // SAFETY: forwarded contract.
    let ctx = unsafe { context_of_stream(stream) }?;
    let _current = CurrentContext::push(ctx.handle)?;
    for (dst, src) in copies.iter().filter(|(_, src)| !src.is_empty()) {
        // SAFETY: `src` stays borrowed until the synchronize below; the caller guarantees the
        // device side.
        unsafe { cu::cuMemcpyHtoDAsync_v2(*dst, src.as_ptr().cast(), src.len(), stream) }
            .result()
            .call("cuMemcpyHtoDAsync")?;
    }
    synchronize(stream)
}

/// Device memory owned by the caller, freed on drop: scratch for the device checks, and what a
/// host process without the CUDA runtime API needs to hand the plugin device tensors.
pub struct DeviceAllocation {
    address: u64,
    bytes: usize,
    context: StreamContext,
}

impl DeviceAllocation {
    /// Allocates `bytes` (at least one) in the context the null stream runs in: the thread's
    /// current context, else the first device's primary context, as the plugin's engines see it.
    pub fn new(bytes: usize) -> Result<Self, GpuError> {
        // SAFETY: the null stream is always valid.
        let context = unsafe { context_of_stream(std::ptr::null_mut()) }?;
        let _current = CurrentContext::push(context.handle)?;
        let mut address = 0;
        // SAFETY: out-parameter call with the context current.
        unsafe { cu::cuMemAlloc_v2(&mut address, bytes.max(1)) }
            .result()
            .call("cuMemAlloc")?;
        Ok(Self {
            address,
            bytes,
            context,
        })
    }

    /// A new allocation holding a copy of `bytes`, copied on the null stream.
    pub fn from_host(bytes: &[u8]) -> Result<Self, GpuError> {
        let allocation = Self::new(bytes.len())?;
        // SAFETY: the allocation holds `bytes.len()` bytes and is owned here; the null stream
        // is always valid.
        unsafe { upload(std::ptr::null_mut(), &[(allocation.address, bytes)]) }?;
        Ok(allocation)
    }

    /// Copies the whole allocation into `out` on the null stream, after all work enqueued on it
    /// (the engines' launches on the null stream included).
    pub fn download_into(&self, out: &mut [u8]) -> Result<(), GpuError> {
        if out.len() != self.bytes {
            return Err(GpuError::HostBufferSize {
                device: self.bytes,
                host: out.len(),
            });
        }
        // SAFETY: the allocation holds `out.len()` bytes and is owned here; `out` is exclusively
        // borrowed; the null stream is always valid.
        unsafe { download(std::ptr::null_mut(), &mut [(self.address, out)]) }
    }

    /// The device address as the pointer a variant pack carries.
    pub fn as_ptr(&self) -> *mut std::ffi::c_void {
        self.address as *mut std::ffi::c_void
    }

    /// The device address.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Bytes requested.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether zero bytes were requested.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for DeviceAllocation {
    fn drop(&mut self) {
        if let Ok(_current) = CurrentContext::push(self.context.handle) {
            // SAFETY: `address` came from `cuMemAlloc` in this context and is freed once. A
            // failure cannot be reported from `drop`; it would leak the allocation only.
            let _ = unsafe { cu::cuMemFree_v2(self.address) };
        }
    }
}

/// Waits for `stream`, whose context the caller has made current.
fn synchronize(stream: CUstream) -> Result<(), GpuError> {
    // SAFETY: `stream` is null or live (the callers' contract).
    unsafe { cu::cuStreamSynchronize(stream) }
        .result()
        .call("cuStreamSynchronize")
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn host_memory_stays_host_memory() {
        if runtime::runtime_or_skip("host_memory_stays_host_memory").is_none() {
            return;
        }
        let buffer = [0u8; 64];
        assert_eq!(
            location(buffer.as_ptr() as u64).ok(),
            Some(Location::Host),
            "malloc'ed memory must be used in place"
        );
    }

    #[test]
    fn device_memory_round_trips_through_the_host() {
        if runtime::runtime_or_skip("device_memory_round_trips_through_the_host").is_none() {
            return;
        }
        let device = DeviceAllocation::new(5).unwrap();
        assert_eq!(location(device.address()).ok(), Some(Location::Device));
        let stream = std::ptr::null_mut();
        // SAFETY: a 5-byte allocation, copied in full, on the null stream.
        unsafe { upload(stream, &[(device.address(), &[1, 2, 3, 4, 5])]) }.unwrap();
        let mut back = [0u8; 5];
        // SAFETY: as above.
        unsafe { download(stream, &mut [(device.address(), &mut back[..])]) }.unwrap();
        assert_eq!(back, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn without_cuda_location_reports_why() {
        if runtime::probe().is_ok() {
            // Straight to stderr, past libtest's capture, so the skip is visible.
            let _ = writeln!(
                std::io::stderr(),
                "test without_cuda_location_reports_why: skipped: CUDA is present"
            );
            return;
        }
        let error = location(0x1000).err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.starts_with("CUDA is unavailable")),
            "{error:?}"
        );
    }
}
