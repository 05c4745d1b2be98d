//! The raw HIP runtime and hipRTC function tables, resolved with `libloading` (no link-time
//! ROCm).
//!
//! Every symbol is optional here: ROCm releases differ in what they export (HIP 5 lacks
//! `hipGetDevicePropertiesR0600`, a runtime-only install may lack hipRTC), and a library that
//! loads must be describable even when it cannot be used. The checked layer
//! ([`super::result`]) turns an absent entry into a typed error naming the symbol; nothing here
//! panics or calls anything.

use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::library::{self, NotFound, open_first};

/// `hipError_t`.
pub type HipStatus = i32;
/// `hipStream_t` (0 = the null stream).
pub type HipStream = *mut c_void;

pub type HipInit = unsafe extern "C" fn(u32) -> HipStatus;
pub type HipGetDeviceCount = unsafe extern "C" fn(*mut i32) -> HipStatus;
pub type HipGetDevice = unsafe extern "C" fn(*mut i32) -> HipStatus;
pub type HipRuntimeGetVersion = unsafe extern "C" fn(*mut i32) -> HipStatus;
pub type HipGetDeviceProperties = unsafe extern "C" fn(*mut c_void, i32) -> HipStatus;
pub type HipGetErrorString = unsafe extern "C" fn(HipStatus) -> *const c_char;
pub type HipPointerGetAttributes = unsafe extern "C" fn(*mut c_void, *const c_void) -> HipStatus;
pub type HipMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> HipStatus;
pub type HipFree = unsafe extern "C" fn(*mut c_void) -> HipStatus;
pub type HipMemcpyAsync =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32, HipStream) -> HipStatus;
pub type HipMemsetAsync = unsafe extern "C" fn(*mut c_void, i32, usize, HipStream) -> HipStatus;
pub type HipStreamSynchronize = unsafe extern "C" fn(HipStream) -> HipStatus;
pub type HipModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> HipStatus;
pub type HipModuleUnload = unsafe extern "C" fn(*mut c_void) -> HipStatus;
pub type HipModuleGetFunction =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> HipStatus;
pub type HipModuleLaunchKernel = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    HipStream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> HipStatus;

pub type HiprtcCreateProgram = unsafe extern "C" fn(
    *mut *mut c_void,
    *const c_char,
    *const c_char,
    i32,
    *const *const c_char,
    *const *const c_char,
) -> i32;
pub type HiprtcCompileProgram = unsafe extern "C" fn(*mut c_void, i32, *const *const c_char) -> i32;
pub type HiprtcGetSize = unsafe extern "C" fn(*mut c_void, *mut usize) -> i32;
pub type HiprtcGetBytes = unsafe extern "C" fn(*mut c_void, *mut c_char) -> i32;
pub type HiprtcDestroyProgram = unsafe extern "C" fn(*mut *mut c_void) -> i32;

/// `hipMemcpyKind` values (identical in HIP 5, 6 and 7).
pub const HIP_MEMCPY_HOST_TO_DEVICE: i32 = 1;
/// See [`HIP_MEMCPY_HOST_TO_DEVICE`].
pub const HIP_MEMCPY_DEVICE_TO_HOST: i32 = 2;

/// Human name of the HIP runtime in messages.
pub const HIP_LIBRARY: &str = "HIP runtime (libamdhip64)";
/// Human name of hipRTC in messages.
pub const HIPRTC_LIBRARY: &str = "hipRTC (libhiprtc)";

/// One symbol of a table: its name and the pointer, when the library exports it.
#[derive(Clone, Copy)]
pub struct Entry<T> {
    /// The C name.
    pub name: &'static str,
    /// `None` when the library lacks it.
    pub function: Option<T>,
}

/// Resolves `name`, keeping absence as `None`.
///
/// # Safety
/// `T` must be the exact C signature of `name`.
unsafe fn entry<T: Copy>(lib: &Library, name: &'static str) -> Entry<T> {
    // SAFETY: forwarded contract.
    let function = unsafe { library::symbol::<T>(lib, name) }.ok();
    Entry { name, function }
}

/// The HIP runtime's function table. The library is kept next to the pointers it owns.
pub struct HipSys {
    pub path: PathBuf,
    pub init: Entry<HipInit>,
    pub get_device_count: Entry<HipGetDeviceCount>,
    pub get_device: Entry<HipGetDevice>,
    pub runtime_get_version: Entry<HipRuntimeGetVersion>,
    pub get_device_properties_r0600: Entry<HipGetDeviceProperties>,
    pub get_error_string: Entry<HipGetErrorString>,
    pub pointer_get_attributes: Entry<HipPointerGetAttributes>,
    pub malloc: Entry<HipMalloc>,
    pub free: Entry<HipFree>,
    pub memcpy_async: Entry<HipMemcpyAsync>,
    pub memset_async: Entry<HipMemsetAsync>,
    pub stream_synchronize: Entry<HipStreamSynchronize>,
    pub module_load_data: Entry<HipModuleLoadData>,
    pub module_unload: Entry<HipModuleUnload>,
    pub module_get_function: Entry<HipModuleGetFunction>,
    pub module_launch_kernel: Entry<HipModuleLaunchKernel>,
    _lib: Library,
}

impl HipSys {
    /// Opens the first loadable candidate and resolves every symbol it has.
    pub fn load(candidates: &[PathBuf]) -> Result<Self, NotFound> {
        let (lib, path) = library::open_first_resident(candidates)?;
        // SAFETY: each type alias above transcribes the prototype in hip_runtime_api.h (ROCm
        // 5, 6 and 7 agree on all of them) for the symbol it is resolved for.
        unsafe {
            Ok(Self {
                init: entry(&lib, "hipInit"),
                get_device_count: entry(&lib, "hipGetDeviceCount"),
                get_device: entry(&lib, "hipGetDevice"),
                runtime_get_version: entry(&lib, "hipRuntimeGetVersion"),
                get_device_properties_r0600: entry(&lib, "hipGetDevicePropertiesR0600"),
                get_error_string: entry(&lib, "hipGetErrorString"),
                pointer_get_attributes: entry(&lib, "hipPointerGetAttributes"),
                malloc: entry(&lib, "hipMalloc"),
                free: entry(&lib, "hipFree"),
                memcpy_async: entry(&lib, "hipMemcpyAsync"),
                memset_async: entry(&lib, "hipMemsetAsync"),
                stream_synchronize: entry(&lib, "hipStreamSynchronize"),
                module_load_data: entry(&lib, "hipModuleLoadData"),
                module_unload: entry(&lib, "hipModuleUnload"),
                module_get_function: entry(&lib, "hipModuleGetFunction"),
                module_launch_kernel: entry(&lib, "hipModuleLaunchKernel"),
                path,
                _lib: lib,
            })
        }
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// hipRTC's function table.
pub struct HiprtcSys {
    pub path: PathBuf,
    pub create_program: Entry<HiprtcCreateProgram>,
    pub compile_program: Entry<HiprtcCompileProgram>,
    pub get_program_log_size: Entry<HiprtcGetSize>,
    pub get_program_log: Entry<HiprtcGetBytes>,
    pub get_code_size: Entry<HiprtcGetSize>,
    pub get_code: Entry<HiprtcGetBytes>,
    pub destroy_program: Entry<HiprtcDestroyProgram>,
    _lib: Library,
}

impl HiprtcSys {
    /// Opens the first loadable candidate and resolves every symbol it has.
    pub fn load(candidates: &[PathBuf]) -> Result<Self, NotFound> {
        let (lib, path) = open_first(candidates)?;
        // SAFETY: each type alias transcribes the prototype in hiprtc.h for its symbol.
        unsafe {
            Ok(Self {
                create_program: entry(&lib, "hiprtcCreateProgram"),
                compile_program: entry(&lib, "hiprtcCompileProgram"),
                get_program_log_size: entry(&lib, "hiprtcGetProgramLogSize"),
                get_program_log: entry(&lib, "hiprtcGetProgramLog"),
                get_code_size: entry(&lib, "hiprtcGetCodeSize"),
                get_code: entry(&lib, "hiprtcGetCode"),
                destroy_program: entry(&lib, "hiprtcDestroyProgram"),
                path,
                _lib: lib,
            })
        }
    }
}
