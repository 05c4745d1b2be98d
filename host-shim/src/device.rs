//! Device memory for GPU engines, through the CUDA driver API loaded at run time (no link-time
//! dependency, so the crate builds and runs on machines without a GPU).
//!
//! Why the driver API: it is the one library every CUDA install has (`libcuda.so.1`), and
//! making the device's *primary* context current is what the CUDA runtime (and HIP on NVIDIA)
//! does, so a plugin engine working on the null stream sees the same context and the same
//! allocations.

use std::ffi::{c_int, c_uint, c_void};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use crate::host_error::HostError;

type CuResult = c_int;
type CuDevicePtr = u64;
type CuContext = *mut c_void;

type InitFn = unsafe extern "C" fn(flags: c_uint) -> CuResult;
type DeviceGetFn = unsafe extern "C" fn(device: *mut c_int, ordinal: c_int) -> CuResult;
type PrimaryCtxRetainFn = unsafe extern "C" fn(ctx: *mut CuContext, device: c_int) -> CuResult;
type CtxSetCurrentFn = unsafe extern "C" fn(ctx: CuContext) -> CuResult;
type MemAllocFn = unsafe extern "C" fn(ptr: *mut CuDevicePtr, bytes: usize) -> CuResult;
type MemFreeFn = unsafe extern "C" fn(ptr: CuDevicePtr) -> CuResult;
type MemcpyHtoDFn =
    unsafe extern "C" fn(dst: CuDevicePtr, src: *const c_void, bytes: usize) -> CuResult;
type MemcpyDtoHFn =
    unsafe extern "C" fn(dst: *mut c_void, src: CuDevicePtr, bytes: usize) -> CuResult;
type CtxSynchronizeFn = unsafe extern "C" fn() -> CuResult;

/// The loaded driver with device 0's primary context.
pub struct CudaDevice {
    mem_alloc: MemAllocFn,
    mem_free: MemFreeFn,
    memcpy_htod: MemcpyHtoDFn,
    memcpy_dtoh: MemcpyDtoHFn,
    ctx_synchronize: CtxSynchronizeFn,
    ctx_set_current: CtxSetCurrentFn,
    context: CuContext,
    _library: Library,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaDevice(device 0, primary context {:?})",
            self.context
        )
    }
}

// SAFETY: the struct holds function pointers of a thread-safe C library and an opaque context
// handle that the driver allows any thread to make current.
unsafe impl Send for CudaDevice {}
// SAFETY: as above; no method mutates the struct.
unsafe impl Sync for CudaDevice {}

fn check(what: &str, result: CuResult) -> Result<(), HostError> {
    if result == 0 {
        Ok(())
    } else {
        Err(HostError::Harness(format!(
            "CUDA driver call {what} failed with CUresult {result}"
        )))
    }
}

impl CudaDevice {
    /// Loads `libcuda.so.1`, initialises the driver and retains device 0's primary context.
    pub fn open() -> Result<CudaDevice, HostError> {
        // SAFETY: loading the CUDA driver runs its initialisers, as any CUDA program does.
        let library = unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | RTLD_LOCAL) }
            .map_err(|e| HostError::Harness(format!("loading libcuda.so.1: {e}")))?;
        fn sym<T: Copy>(library: &Library, name: &str) -> Result<T, HostError> {
            let c_name = format!("{name}\0");
            // SAFETY: each call site pairs the symbol with its signature from cuda.h.
            unsafe { library.get::<T>(c_name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| HostError::Harness(format!("libcuda.so.1 lacks {name}: {e}")))
        }
        let init: InitFn = sym(&library, "cuInit")?;
        let device_get: DeviceGetFn = sym(&library, "cuDeviceGet")?;
        let retain: PrimaryCtxRetainFn = sym(&library, "cuDevicePrimaryCtxRetain")?;
        let ctx_set_current: CtxSetCurrentFn = sym(&library, "cuCtxSetCurrent")?;
        let mut device = 0;
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: documented driver initialisation sequence with valid out-pointers.
        unsafe {
            check("cuInit", init(0))?;
            check("cuDeviceGet", device_get(&mut device, 0))?;
            check("cuDevicePrimaryCtxRetain", retain(&mut context, device))?;
        }
        Ok(CudaDevice {
            mem_alloc: sym(&library, "cuMemAlloc_v2")?,
            mem_free: sym(&library, "cuMemFree_v2")?,
            memcpy_htod: sym(&library, "cuMemcpyHtoD_v2")?,
            memcpy_dtoh: sym(&library, "cuMemcpyDtoH_v2")?,
            ctx_synchronize: sym(&library, "cuCtxSynchronize")?,
            ctx_set_current,
            context,
            _library: library,
        })
    }

    /// Makes the primary context current on the calling thread.
    pub fn make_current(&self) -> Result<(), HostError> {
        // SAFETY: a context retained in `open` and never released while `self` lives.
        check("cuCtxSetCurrent", unsafe {
            (self.ctx_set_current)(self.context)
        })
    }

    /// A device copy of `bytes`.
    pub fn upload(&self, bytes: &[u8]) -> Result<DeviceBuffer<'_>, HostError> {
        let buffer = self.alloc(bytes.len())?;
        if !bytes.is_empty() {
            // SAFETY: the allocation holds `bytes.len()` bytes; the source is a live slice.
            check("cuMemcpyHtoD", unsafe {
                (self.memcpy_htod)(buffer.ptr, bytes.as_ptr().cast(), bytes.len())
            })?;
        }
        Ok(buffer)
    }

    /// `len` uninitialised device bytes (at least one, so the pointer is never NULL).
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer<'_>, HostError> {
        self.make_current()?;
        let mut ptr = 0;
        // SAFETY: valid out-pointer; the context is current.
        check("cuMemAlloc", unsafe {
            (self.mem_alloc)(&mut ptr, len.max(1))
        })?;
        Ok(DeviceBuffer {
            device: self,
            ptr,
            len,
        })
    }

    /// Waits for all work on the context.
    pub fn synchronize(&self) -> Result<(), HostError> {
        // SAFETY: no arguments; the context is current on this thread.
        check("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() })
    }
}

/// A device allocation, freed on drop.
pub struct DeviceBuffer<'d> {
    device: &'d CudaDevice,
    ptr: CuDevicePtr,
    len: usize,
}

impl DeviceBuffer<'_> {
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr as *mut c_void
    }

    /// Copies the whole allocation back into `out` (same length).
    pub fn download(&self, out: &mut [u8]) -> Result<(), HostError> {
        if out.len() != self.len {
            return Err(HostError::Harness(format!(
                "download of {} device bytes into a {}-byte host buffer",
                self.len,
                out.len()
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: both regions hold `len` bytes; the host slice is exclusively borrowed.
        check("cuMemcpyDtoH", unsafe {
            (self.device.memcpy_dtoh)(out.as_mut_ptr().cast(), self.ptr, self.len)
        })
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc in `alloc`, freed exactly once.
        let _ = unsafe { (self.device.mem_free)(self.ptr) };
    }
}
