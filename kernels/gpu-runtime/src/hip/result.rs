//! Checked HIP calls: each wrapper takes the function table, refuses a missing symbol by name,
//! and turns a non-success `hipError_t` into [`HipError`] with HIP's own message. Pointers are
//! passed through untouched; owning them is the job of [`super::safe`].

use std::ffi::{CStr, c_void};
use std::path::PathBuf;

use super::sys::{self, Entry, HipStatus, HipStream, HipSys};
use crate::library::NotFound;

const HIP_SUCCESS: HipStatus = 0;
/// `hipErrorInvalidValue`: what HIP 5 answers for memory it never allocated.
pub const HIP_ERROR_INVALID_VALUE: HipStatus = 1;
/// `hipErrorNoDevice`.
pub const HIP_ERROR_NO_DEVICE: HipStatus = 100;

/// What went wrong while loading or calling HIP (or hipRTC).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HipError {
    /// None of the candidate file names could be opened.
    #[error("{library} not found (tried {tried}): {last_error}")]
    LibraryNotFound {
        /// Human name of the library, e.g. "HIP runtime (libamdhip64)".
        library: &'static str,
        /// Every path or soname tried, comma-separated, in order.
        tried: String,
        /// The loader's message for the last candidate.
        last_error: String,
    },
    /// The library opened but does not export a function this call needs.
    #[error("{library} at {path} lacks symbol `{symbol}`")]
    MissingSymbol {
        /// Human name of the library.
        library: &'static str,
        /// The file that was opened.
        path: PathBuf,
        /// The C name.
        symbol: &'static str,
    },
    /// A call returned an error code.
    #[error("{call} failed with hipError_t {code} ({message})")]
    Call {
        /// The function, e.g. "hipModuleLaunchKernel(ragged_aiter_prepass)".
        call: String,
        /// The raw `hipError_t`.
        code: i32,
        /// `hipGetErrorString(code)`, or a placeholder when unavailable.
        message: String,
    },
    /// The runtime is older than a layout or behaviour this layer relies on.
    #[error("HIP runtime version {found} is older than {needed} ({why})")]
    TooOld {
        /// `hipRuntimeGetVersion`, as `HIP_VERSION` (major·10⁷ + minor·10⁵ + patch).
        found: i32,
        /// The first version that works.
        needed: i32,
        /// What needs it.
        why: &'static str,
    },
    /// `gcnArchName` did not hold a NUL-terminated `gfx…` name.
    #[error(
        "device {device}: gcnArchName is not a NUL-terminated gfx name (first bytes {first_bytes:?})"
    )]
    BadArchName {
        /// HIP device ordinal.
        device: i32,
        /// The first bytes read, for the report.
        first_bytes: Vec<u8>,
    },
    /// hipRTC rejected a source; the log is kept whole.
    #[error(
        "hipRTC could not compile {kernel} with options {options:?} (hiprtcResult {code}):\n{log}"
    )]
    Compile {
        /// The source file name given to hipRTC.
        kernel: &'static str,
        /// The exact options passed.
        options: Vec<String>,
        /// The raw `hiprtcResult`.
        code: i32,
        /// The compiler log.
        log: String,
    },
}

impl HipError {
    /// The raw layer's "no candidate opened" for `library` (`sys::HIP_LIBRARY` or
    /// `sys::HIPRTC_LIBRARY`), as the checked error that names it.
    pub fn not_found(library: &'static str, not_found: NotFound) -> Self {
        HipError::LibraryNotFound {
            library,
            tried: not_found.tried,
            last_error: not_found.last_error,
        }
    }
}

/// The function of `entry`, or the error naming it.
pub fn need<T: Copy>(
    library: &'static str,
    path: &std::path::Path,
    entry: Entry<T>,
) -> Result<T, HipError> {
    entry.function.ok_or_else(|| HipError::MissingSymbol {
        library,
        path: path.to_path_buf(),
        symbol: entry.name,
    })
}

fn function<T: Copy>(sys: &HipSys, entry: Entry<T>) -> Result<T, HipError> {
    need(sys::HIP_LIBRARY, &sys.path, entry)
}

/// `hipGetErrorString(code)`, or a placeholder where the runtime has none.
pub fn error_string(sys: &HipSys, code: HipStatus) -> String {
    let Some(get) = sys.get_error_string.function else {
        return String::from("no hipGetErrorString");
    };
    // SAFETY: hipGetErrorString accepts any code and returns a static string (or null).
    let text = unsafe { get(code) };
    if text.is_null() {
        return String::from("no error string");
    }
    // SAFETY: non-null results of hipGetErrorString are static NUL-terminated strings.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// `Ok` for `hipSuccess`, else the error for `call`.
pub fn check(sys: &HipSys, call: impl Into<String>, code: HipStatus) -> Result<(), HipError> {
    if code == HIP_SUCCESS {
        return Ok(());
    }
    Err(HipError::Call {
        call: call.into(),
        code,
        message: error_string(sys, code),
    })
}

/// `hipInit(0)` then `hipGetDeviceCount`. "No device" is `Ok(0)`, not an error.
pub fn device_count(sys: &HipSys) -> Result<i32, HipError> {
    let init = function(sys, sys.init)?;
    let count_fn = function(sys, sys.get_device_count)?;
    // SAFETY: hipInit takes flags 0 and may be called repeatedly.
    let code = unsafe { init(0) };
    if code == HIP_ERROR_NO_DEVICE {
        return Ok(0);
    }
    check(sys, "hipInit(0)", code)?;
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer for the duration of the call.
    let code = unsafe { count_fn(&mut count) };
    if code == HIP_ERROR_NO_DEVICE {
        return Ok(0);
    }
    check(sys, "hipGetDeviceCount", code)?;
    Ok(count)
}

/// `hipGetDevice`: the calling thread's current device.
pub fn current_device(sys: &HipSys) -> Result<i32, HipError> {
    let get = function(sys, sys.get_device)?;
    let mut device = 0;
    // SAFETY: `device` is a valid out-pointer for the duration of the call.
    check(sys, "hipGetDevice", unsafe { get(&mut device) })?;
    Ok(device)
}

/// `hipRuntimeGetVersion`, as `HIP_VERSION`.
pub fn runtime_version(sys: &HipSys) -> Result<i32, HipError> {
    let get = function(sys, sys.runtime_get_version)?;
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer for the duration of the call.
    check(sys, "hipRuntimeGetVersion", unsafe { get(&mut version) })?;
    Ok(version)
}

/// `hipGetDevicePropertiesR0600` into `props`.
pub fn device_properties_r0600(
    sys: &HipSys,
    props: &mut [u64],
    device: i32,
) -> Result<(), HipError> {
    let get = function(sys, sys.get_device_properties_r0600)?;
    if props.len() * 8 < super::DEVICE_PROP_R0600_SIZE {
        return Err(HipError::Call {
            call: format!("hipGetDevicePropertiesR0600(device {device})"),
            code: HIP_ERROR_INVALID_VALUE,
            message: format!("a {}-byte buffer is too small", props.len() * 8),
        });
    }
    // SAFETY: `props` is writable, 8-byte aligned and at least sizeof(hipDeviceProp_tR0600).
    let code = unsafe { get(props.as_mut_ptr().cast(), device) };
    check(
        sys,
        format!("hipGetDevicePropertiesR0600(device {device})"),
        code,
    )
}

/// `hipPointerAttribute_t`: the same layout in HIP 5, 6 and 7 (the first field was renamed from
/// `memoryType` to `type` in 6.0 and its enum renumbered; see [`super::safe`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PointerAttributes {
    pub memory_type: i32,
    pub device: i32,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
    pub is_managed: i32,
    pub allocation_flags: u32,
}

/// `hipPointerGetAttributes` for `address`; `Ok(None)` is HIP 5's `hipErrorInvalidValue` for
/// memory the runtime never saw.
pub fn pointer_attributes(
    sys: &HipSys,
    address: u64,
) -> Result<Option<PointerAttributes>, HipError> {
    let get = function(sys, sys.pointer_get_attributes)?;
    let mut attributes = PointerAttributes {
        memory_type: 0,
        device: -1,
        device_pointer: std::ptr::null_mut(),
        host_pointer: std::ptr::null_mut(),
        is_managed: 0,
        allocation_flags: 0,
    };
    // SAFETY: `attributes` is a writable hipPointerAttribute_t; HIP only looks the address up,
    // it never dereferences it.
    let code = unsafe { get((&raw mut attributes).cast(), address as *const c_void) };
    if code == HIP_ERROR_INVALID_VALUE {
        return Ok(None);
    }
    check(sys, "hipPointerGetAttributes", code)?;
    Ok(Some(attributes))
}

/// `hipMalloc`.
pub fn malloc(sys: &HipSys, bytes: usize) -> Result<u64, HipError> {
    let alloc = function(sys, sys.malloc)?;
    let mut address = std::ptr::null_mut();
    // SAFETY: `address` is a valid out-pointer.
    check(sys, format!("hipMalloc({bytes})"), unsafe {
        alloc(&mut address, bytes)
    })?;
    Ok(address as u64)
}

/// `hipFree`.
///
/// # Safety
/// `address` came from `hipMalloc` and is not used afterwards.
pub unsafe fn free(sys: &HipSys, address: u64) -> Result<(), HipError> {
    let free = function(sys, sys.free)?;
    // SAFETY: forwarded contract.
    check(sys, "hipFree", unsafe { free(address as *mut c_void) })
}

/// `hipMemcpyAsync(dst, src, bytes, kind, stream)`.
///
/// # Safety
/// Both ranges are valid for `bytes` in the memory `kind` says, until the stream reaches the
/// copy; `stream` is null or live.
pub unsafe fn memcpy_async(
    sys: &HipSys,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: i32,
    stream: HipStream,
) -> Result<(), HipError> {
    let copy = function(sys, sys.memcpy_async)?;
    // SAFETY: forwarded contract.
    check(sys, "hipMemcpyAsync", unsafe {
        copy(dst, src, bytes, kind, stream)
    })
}

/// `hipMemsetAsync`.
///
/// # Safety
/// `dst .. dst + bytes` is device memory valid until the stream reaches the operation;
/// `stream` is null or live.
pub unsafe fn memset_async(
    sys: &HipSys,
    dst: *mut c_void,
    value: u8,
    bytes: usize,
    stream: HipStream,
) -> Result<(), HipError> {
    let set = function(sys, sys.memset_async)?;
    // SAFETY: forwarded contract.
    check(sys, "hipMemsetAsync", unsafe {
        set(dst, i32::from(value), bytes, stream)
    })
}

/// `hipStreamSynchronize`.
///
/// # Safety
/// `stream` is null or live.
pub unsafe fn stream_synchronize(sys: &HipSys, stream: HipStream) -> Result<(), HipError> {
    let sync = function(sys, sys.stream_synchronize)?;
    // SAFETY: forwarded contract.
    check(sys, "hipStreamSynchronize", unsafe { sync(stream) })
}

/// `hipModuleLoadData`.
pub fn module_load_data(sys: &HipSys, code: &[u8]) -> Result<*mut c_void, HipError> {
    let load = function(sys, sys.module_load_data)?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: `code` is a complete code object that outlives the call; `handle` is a valid
    // out-pointer.
    check(sys, "hipModuleLoadData", unsafe {
        load(&mut handle, code.as_ptr().cast())
    })?;
    Ok(handle)
}

/// `hipModuleUnload`.
///
/// # Safety
/// `module` came from `hipModuleLoadData` and is unloaded once.
pub unsafe fn module_unload(sys: &HipSys, module: *mut c_void) -> Result<(), HipError> {
    let unload = function(sys, sys.module_unload)?;
    // SAFETY: forwarded contract.
    check(sys, "hipModuleUnload", unsafe { unload(module) })
}

/// `hipModuleGetFunction`.
///
/// # Safety
/// `module` is a live module handle.
pub unsafe fn module_get_function(
    sys: &HipSys,
    module: *mut c_void,
    name: &CStr,
) -> Result<*mut c_void, HipError> {
    let get = function(sys, sys.module_get_function)?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: the caller guarantees the module; `name` is NUL-terminated and `handle` a valid
    // out-pointer.
    let code = unsafe { get(&mut handle, module, name.as_ptr()) };
    check(
        sys,
        format!("hipModuleGetFunction({})", name.to_string_lossy()),
        code,
    )?;
    Ok(handle)
}

/// `hipModuleLaunchKernel` with a parameter array.
///
/// # Safety
/// `params` matches the kernel's parameter list and every pointer it carries is valid for the
/// kernel's accesses until the stream reaches it; `function` and `stream` are live.
pub unsafe fn module_launch_kernel(
    sys: &HipSys,
    function_handle: *mut c_void,
    name: &str,
    config: crate::launch::LaunchConfig,
    stream: HipStream,
    params: &mut [*mut c_void],
) -> Result<(), HipError> {
    let launch = function(sys, sys.module_launch_kernel)?;
    let (gx, gy, gz) = config.grid;
    let (bx, by, bz) = config.block;
    // SAFETY: forwarded contract; HIP copies the arguments before returning.
    let code = unsafe {
        launch(
            function_handle,
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
    };
    check(sys, format!("hipModuleLaunchKernel({name})"), code)
}
