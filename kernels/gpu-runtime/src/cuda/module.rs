//! Loaded kernel modules and typed launches ([`KernelArg`] and [`LaunchConfig`] are shared with
//! HIP, see [`crate::launch`]).

use std::collections::HashMap;
use std::ffi::CString;

use cudarc::driver::sys::{self as cu, CUfunction, CUfunction_attribute, CUmodule, CUstream};
use parking_lot::Mutex;

use super::error::{DriverCall, GpuError};
use crate::launch::parameter_array_of_parts;
pub use crate::launch::{KernelArg, LaunchConfig};

/// Shared memory a block gets without opting in (all architectures since sm_20).
pub const DEFAULT_DYNAMIC_SHARED_LIMIT: u32 = 48 * 1024;

/// A module loaded into one context; functions are looked up once and kept.
pub struct KernelModule {
    module: CUmodule,
    source_name: String,
    functions: Mutex<HashMap<String, FunctionHandle>>,
}

#[derive(Clone, Copy)]
struct FunctionHandle {
    function: CUfunction,
    /// Dynamic shared memory the function has been allowed so far.
    shared_limit: u32,
}

// SAFETY: CUDA driver handles are plain identifiers that the driver allows on any thread; the
// lookup table is behind a mutex.
unsafe impl Send for KernelModule {}
// SAFETY: as above; `&KernelModule` only reads the immutable module handle or takes the mutex.
unsafe impl Sync for KernelModule {}

impl KernelModule {
    /// Loads a cubin or NUL-terminated PTX image into the current context.
    ///
    /// # Safety
    /// The context the module should live in must be current on this thread (see
    /// `CurrentContext`), and must outlive the module.
    pub unsafe fn load(image: &[u8], source_name: &str) -> Result<Self, GpuError> {
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is a complete cubin or NUL-terminated PTX (the cache guarantees both),
        // alive for the duration of the call; the caller made the target context current.
        unsafe { cu::cuModuleLoadData(&mut module, image.as_ptr().cast()) }
            .result()
            .call("cuModuleLoadData")?;
        Ok(Self {
            module,
            source_name: source_name.to_owned(),
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// The kernel `name`, allowed to use `shared_mem_bytes` of dynamic shared memory. Every
    /// execute asks for its kernels here, so a known function with a large enough limit is
    /// returned without allocating.
    pub fn function(&self, name: &str, shared_mem_bytes: u32) -> Result<CUfunction, GpuError> {
        let mut functions = self.functions.lock();
        if let Some(handle) = functions.get_mut(name) {
            if shared_mem_bytes > handle.shared_limit {
                raise_shared_limit(handle.function, shared_mem_bytes)?;
                handle.shared_limit = shared_mem_bytes;
            }
            return Ok(handle.function);
        }
        let c_name = CString::new(name).map_err(|e| GpuError::MissingKernel {
            kernel: format!("{name} (NUL at {})", e.nul_position()),
            source_name: self.source_name.clone(),
        })?;
        let mut function: CUfunction = std::ptr::null_mut();
        // SAFETY: `self.module` is loaded; `c_name` is NUL-terminated.
        let status =
            unsafe { cu::cuModuleGetFunction(&mut function, self.module, c_name.as_ptr()) };
        if status == cu::CUresult::CUDA_ERROR_NOT_FOUND {
            return Err(GpuError::MissingKernel {
                kernel: name.to_owned(),
                source_name: self.source_name.clone(),
            });
        }
        status.result().call("cuModuleGetFunction")?;
        let mut shared_limit = DEFAULT_DYNAMIC_SHARED_LIMIT;
        if shared_mem_bytes > shared_limit {
            raise_shared_limit(function, shared_mem_bytes)?;
            shared_limit = shared_mem_bytes;
        }
        functions.insert(
            name.to_owned(),
            FunctionHandle {
                function,
                shared_limit,
            },
        );
        Ok(function)
    }
}

/// Allows `function` `bytes` of dynamic shared memory.
fn raise_shared_limit(function: CUfunction, bytes: u32) -> Result<(), GpuError> {
    // SAFETY: a function handle of a loaded module; the value was checked against the device's
    // opt-in limit by the caller's plan, and the driver rejects anything larger anyway.
    unsafe {
        cu::cuFuncSetAttribute(
            function,
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            i32::try_from(bytes).unwrap_or(i32::MAX),
        )
    }
    .result()
    .call("cuFuncSetAttribute")
}

impl KernelModule {
    /// Copies the `N` 32-bit integers of the `__constant__` array `name` to the host.
    ///
    /// Synchronous; meant for the once-per-load tables a kernel file publishes about itself.
    pub fn read_i32_global<const N: usize>(&self, name: &str) -> Result<[i32; N], GpuError> {
        let missing = || GpuError::MissingKernel {
            kernel: format!("__constant__ {name}[{N}]"),
            source_name: self.source_name.clone(),
        };
        let c_name = CString::new(name).map_err(|_| missing())?;
        let mut address = 0;
        let mut bytes = 0usize;
        // SAFETY: `self.module` is loaded; out-parameters are live locals. The module's context
        // must be current, which every caller inside this layer guarantees with CurrentContext.
        let status = unsafe {
            cu::cuModuleGetGlobal_v2(&mut address, &mut bytes, self.module, c_name.as_ptr())
        };
        if status == cu::CUresult::CUDA_ERROR_NOT_FOUND {
            return Err(missing());
        }
        status.result().call("cuModuleGetGlobal")?;
        if bytes != N * 4 {
            return Err(missing());
        }
        let mut values = [0i32; N];
        // SAFETY: the global holds exactly `N * 4` bytes (checked above); `values` is as large.
        unsafe { cu::cuMemcpyDtoH_v2(values.as_mut_ptr().cast(), address, N * 4) }
            .result()
            .call("cuMemcpyDtoH")?;
        Ok(values)
    }
}

impl Drop for KernelModule {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and nothing launched from it may still be
        // referenced after the owner drops it. Errors (context already gone) are moot here.
        let _ = unsafe { cu::cuModuleUnload(self.module) };
    }
}

/// Enqueues `function` on `stream`.
///
/// # Safety
/// `args` must match the kernel's parameter list exactly (count, order, C types), every pointer
/// argument must be valid for the accesses the kernel makes, `stream` must belong to the context
/// the function was loaded in, and that context must be current.
pub unsafe fn launch(
    function: CUfunction,
    config: LaunchConfig,
    stream: CUstream,
    args: &[KernelArg],
) -> Result<(), GpuError> {
    // SAFETY: forwarded from this function's contract.
    unsafe { launch_parts(function, config, stream, &[args]) }
}

/// [`launch`] with the parameter list given in consecutive parts (common parameters, then tensor
/// maps), so that no per-execute list has to be assembled on the heap.
///
/// # Safety
/// As [`launch`], for the concatenation of `parts`.
pub unsafe fn launch_parts(
    function: CUfunction,
    config: LaunchConfig,
    stream: CUstream,
    parts: &[&[KernelArg]],
) -> Result<(), GpuError> {
    let mut params = parameter_array_of_parts(parts);
    let (gx, gy, gz) = config.grid;
    let (bx, by, bz) = config.block;
    // SAFETY: `params` points into `parts`, alive until the call returns (the driver copies the
    // values at launch); the caller guarantees the rest (see `# Safety`).
    unsafe {
        cu::cuLaunchKernel(
            function,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            config.shared_mem_bytes,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .call("cuLaunchKernel")
}

/// [`launch_parts`] with programmatic stream serialization: the kernel may start before the
/// kernel enqueued just before it on `stream` has completed (once that one's blocks have all
/// executed `griddepcontrol.launch_dependents`, or exited), so its blocks are scheduled and set up
/// during the predecessor's run instead of after the launch gap that follows it. Work enqueued
/// before the predecessor is still complete when the kernel starts.
///
/// # Safety
/// As [`launch_parts`]; in addition the kernel must execute `griddepcontrol.wait` before it
/// reads anything the predecessor writes, or writes anything the predecessor reads (the
/// forward's `ragged_grid_dependency_wait`), and the device must be sm_90 or later.
pub unsafe fn launch_parts_programmatic(
    function: CUfunction,
    config: LaunchConfig,
    stream: CUstream,
    parts: &[&[KernelArg]],
) -> Result<(), GpuError> {
    let mut params = parameter_array_of_parts(parts);
    let (gx, gy, gz) = config.grid;
    let (bx, by, bz) = config.block;
    // SAFETY: a plain-old-data union of C integers: all zeroes is a valid value, and the one field
    // the driver reads for this attribute id is set right after.
    let mut value: cu::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attribute = cu::CUlaunchAttribute {
        id: cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let launch_config = cu::CUlaunchConfig {
        gridDimX: gx,
        gridDimY: gy,
        gridDimZ: gz,
        blockDimX: bx,
        blockDimY: by,
        blockDimZ: bz,
        sharedMemBytes: config.shared_mem_bytes,
        hStream: stream,
        attrs: &mut attribute,
        numAttrs: 1,
    };
    // SAFETY: `launch_config` and the attribute it points to are live locals, `params` points into
    // `parts`, alive until the call returns (the driver copies the values at launch); the caller
    // guarantees the rest (see `# Safety`).
    unsafe {
        cu::cuLaunchKernelEx(
            &launch_config,
            function,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .call("cuLaunchKernelEx")
}
