//! The HIP runtime and hipRTC, loaded at run time with `libloading` (no link-time ROCm).
//!
//! The plugin must load where ROCm is absent and merely leave the AITER engine unlisted, so
//! nothing here is linked: `libamdhip64` and `libhiprtc` are opened by name, every function the
//! engine uses is resolved up front, and a missing library or symbol becomes an [`AiterError`]
//! naming what was tried. This module and [`shim_library`](crate::aiter::shim_library) are the only
//! ones that call foreign code.
//!
//! Architecture detection reads `gcnArchName` from `hipDeviceProp_tR0600`. HIP has no
//! name-only query for it (`hipDeviceGetAttribute` has no string attribute, and the
//! compute-capability pair does not tell gfx942 from gfx940), so the engine calls
//! `hipGetDevicePropertiesR0600` into an over-sized buffer and reads the name at its offset in
//! the R0600 layout (1160), after checking `hipRuntimeGetVersion() ≥ 6.0`. The offset is held
//! against a field-by-field transcription of the header in this module's tests.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libloading::Library;

use crate::aiter::applicability::GpuArch;
use crate::aiter::device_kernels::{KernelArg, Launch};
use crate::aiter::error::AiterError;

/// Sonames tried for the HIP runtime, newest ABI first.
pub const HIP_LIBRARY_NAMES: [&str; 3] = ["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"];
/// Sonames tried for hipRTC, newest ABI first.
pub const HIPRTC_LIBRARY_NAMES: [&str; 3] = ["libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so"];

/// `sizeof(hipDeviceProp_tR0600)` on LP64 (ROCm 6.0 and later).
pub const DEVICE_PROP_R0600_SIZE: usize = 1472;
/// `offsetof(hipDeviceProp_tR0600, gcnArchName)`.
pub const GCN_ARCH_NAME_OFFSET: usize = 1160;
/// `gcnArchName` is `char[256]`.
pub const GCN_ARCH_NAME_LEN: usize = 256;
/// First `HIP_VERSION` (major·10⁷ + minor·10⁵ + patch) with the R0600 layout.
pub const MIN_HIP_VERSION: i32 = 60_000_000;

const HIP_SUCCESS: i32 = 0;
const HIPRTC_SUCCESS: i32 = 0;

type HipInit = unsafe extern "C" fn(u32) -> i32;
type HipGetDeviceCount = unsafe extern "C" fn(*mut i32) -> i32;
type HipGetDevice = unsafe extern "C" fn(*mut i32) -> i32;
type HipRuntimeGetVersion = unsafe extern "C" fn(*mut i32) -> i32;
type HipGetDeviceProperties = unsafe extern "C" fn(*mut c_void, i32) -> i32;
type HipGetErrorString = unsafe extern "C" fn(i32) -> *const c_char;
type HipModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> i32;
type HipModuleUnload = unsafe extern "C" fn(*mut c_void) -> i32;
type HipModuleGetFunction =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> i32;
type HipModuleLaunchKernel = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> i32;
type HipMemsetAsync = unsafe extern "C" fn(*mut c_void, i32, usize, *mut c_void) -> i32;

type HiprtcCreateProgram = unsafe extern "C" fn(
    *mut *mut c_void,
    *const c_char,
    *const c_char,
    i32,
    *const *const c_char,
    *const *const c_char,
) -> i32;
type HiprtcCompileProgram = unsafe extern "C" fn(*mut c_void, i32, *const *const c_char) -> i32;
type HiprtcGetSize = unsafe extern "C" fn(*mut c_void, *mut usize) -> i32;
type HiprtcGetBytes = unsafe extern "C" fn(*mut c_void, *mut c_char) -> i32;
type HiprtcDestroyProgram = unsafe extern "C" fn(*mut *mut c_void) -> i32;

/// Default candidates for one library: each soname through the loader's search path, then under
/// `$ROCM_PATH/lib` and `/opt/rocm/lib` (ROCm does not always register itself with ld.so).
pub fn default_candidates(names: &[&str]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(rocm) = std::env::var_os("ROCM_PATH") {
        dirs.push(PathBuf::from(rocm).join("lib"));
    }
    dirs.push(PathBuf::from("/opt/rocm/lib"));
    let mut out: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
    for dir in &dirs {
        out.extend(names.iter().map(|n| dir.join(n)));
    }
    out
}

/// Opens the first candidate that loads.
pub(crate) fn open_first(
    library: &'static str,
    candidates: &[PathBuf],
) -> Result<(Library, PathBuf), AiterError> {
    let mut last_error = String::from("no candidates");
    for path in candidates {
        // SAFETY: opening a shared library runs its initialisers. The candidates are ROCm's own
        // libraries or the project's shim, whose initialisers have no preconditions on us.
        match unsafe { Library::new(path) } {
            Ok(lib) => return Ok((lib, path.clone())),
            Err(e) => last_error = e.to_string(),
        }
    }
    Err(AiterError::LibraryNotFound {
        library,
        tried: candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        last_error,
    })
}

/// Resolves one symbol to a plain function pointer. The library must outlive every use of the
/// pointer: callers keep it in the same struct.
///
/// # Safety
/// `T` must be the exact C signature of `symbol`.
pub(crate) unsafe fn resolve<T: Copy>(
    lib: &Library,
    library: &'static str,
    path: &Path,
    symbol: &'static str,
) -> Result<T, AiterError> {
    let name = format!("{symbol}\0");
    // SAFETY: the caller guarantees that `T` is the symbol's signature; the pointer is copied
    // out and the library is kept alive next to it by the caller.
    let found = unsafe { lib.get::<T>(name.as_bytes()) };
    match found {
        Ok(sym) => Ok(*sym),
        Err(source) => Err(AiterError::MissingSymbol {
            library,
            path: path.to_path_buf(),
            symbol,
            source,
        }),
    }
}

struct HipApi {
    init: HipInit,
    get_device_count: HipGetDeviceCount,
    get_device: HipGetDevice,
    runtime_get_version: HipRuntimeGetVersion,
    get_device_properties: HipGetDeviceProperties,
    get_error_string: HipGetErrorString,
    module_load_data: HipModuleLoadData,
    module_unload: HipModuleUnload,
    module_get_function: HipModuleGetFunction,
    module_launch_kernel: HipModuleLaunchKernel,
    memset_async: HipMemsetAsync,
}

struct HiprtcApi {
    create_program: HiprtcCreateProgram,
    compile_program: HiprtcCompileProgram,
    get_program_log_size: HiprtcGetSize,
    get_program_log: HiprtcGetBytes,
    get_code_size: HiprtcGetSize,
    get_code: HiprtcGetBytes,
    destroy_program: HiprtcDestroyProgram,
}

/// The loaded HIP runtime (without hipRTC).
pub struct HipRuntime {
    api: HipApi,
    path: PathBuf,
    _lib: Library,
}

/// The loaded hipRTC.
pub struct Hiprtc {
    api: HiprtcApi,
    path: PathBuf,
    _lib: Library,
}

/// A loaded code object; unloaded on drop. Handles are kept as integers so the type is plainly
/// `Send + Sync` (HIP module and function handles may be used from any thread).
pub struct HipModule {
    runtime: Arc<HipRuntime>,
    handle: usize,
}

/// A kernel entry point inside a [`HipModule`].
#[derive(Clone, Copy, Debug)]
pub struct HipFunction {
    handle: usize,
    name: &'static str,
}

impl HipRuntime {
    /// Loads the HIP runtime from the default candidates.
    pub fn load() -> Result<Self, AiterError> {
        Self::load_from(&default_candidates(&HIP_LIBRARY_NAMES))
    }

    /// Loads the HIP runtime from the first loadable candidate.
    pub fn load_from(candidates: &[PathBuf]) -> Result<Self, AiterError> {
        const LIB: &str = "HIP runtime (libamdhip64)";
        let (lib, path) = open_first(LIB, candidates)?;
        // SAFETY: each type alias above transcribes the prototype in hip_runtime_api.h
        // (ROCm 6/7) for the symbol it is resolved for.
        let api = unsafe {
            HipApi {
                init: resolve(&lib, LIB, &path, "hipInit")?,
                get_device_count: resolve(&lib, LIB, &path, "hipGetDeviceCount")?,
                get_device: resolve(&lib, LIB, &path, "hipGetDevice")?,
                runtime_get_version: resolve(&lib, LIB, &path, "hipRuntimeGetVersion")?,
                get_device_properties: resolve(&lib, LIB, &path, "hipGetDevicePropertiesR0600")?,
                get_error_string: resolve(&lib, LIB, &path, "hipGetErrorString")?,
                module_load_data: resolve(&lib, LIB, &path, "hipModuleLoadData")?,
                module_unload: resolve(&lib, LIB, &path, "hipModuleUnload")?,
                module_get_function: resolve(&lib, LIB, &path, "hipModuleGetFunction")?,
                module_launch_kernel: resolve(&lib, LIB, &path, "hipModuleLaunchKernel")?,
                memset_async: resolve(&lib, LIB, &path, "hipMemsetAsync")?,
            }
        };
        Ok(Self {
            api,
            path,
            _lib: lib,
        })
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check(&self, call: impl Into<String>, code: i32) -> Result<(), AiterError> {
        if code == HIP_SUCCESS {
            return Ok(());
        }
        // SAFETY: hipGetErrorString accepts any code and returns a static string (or null).
        let text = unsafe { (self.api.get_error_string)(code) };
        let message = if text.is_null() {
            String::from("no error string")
        } else {
            // SAFETY: non-null results of hipGetErrorString are static NUL-terminated strings.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(AiterError::Hip {
            call: call.into(),
            code,
            message,
        })
    }

    /// Initialises HIP and counts devices. Zero devices is `Ok(0)`, not an error.
    pub fn device_count(&self) -> Result<i32, AiterError> {
        // SAFETY: hipInit takes flags 0 and may be called repeatedly.
        let init = unsafe { (self.api.init)(0) };
        const HIP_ERROR_NO_DEVICE: i32 = 100;
        if init == HIP_ERROR_NO_DEVICE {
            return Ok(0);
        }
        self.check("hipInit(0)", init)?;
        let mut count = 0;
        // SAFETY: `count` is a valid out-pointer for the duration of the call.
        let code = unsafe { (self.api.get_device_count)(&mut count) };
        if code == HIP_ERROR_NO_DEVICE {
            return Ok(0);
        }
        self.check("hipGetDeviceCount", code)?;
        Ok(count)
    }

    /// The calling thread's current device (what the handle's stream belongs to).
    pub fn current_device(&self) -> Result<i32, AiterError> {
        let mut device = 0;
        // SAFETY: `device` is a valid out-pointer for the duration of the call.
        let code = unsafe { (self.api.get_device)(&mut device) };
        self.check("hipGetDevice", code)?;
        Ok(device)
    }

    /// `HIP_VERSION` of the loaded runtime.
    pub fn runtime_version(&self) -> Result<i32, AiterError> {
        let mut version = 0;
        // SAFETY: `version` is a valid out-pointer for the duration of the call.
        let code = unsafe { (self.api.runtime_get_version)(&mut version) };
        self.check("hipRuntimeGetVersion", code)?;
        Ok(version)
    }

    /// `gcnArchName` of `device` (see the module doc for why it is read by offset).
    pub fn arch(&self, device: i32) -> Result<GpuArch, AiterError> {
        let version = self.runtime_version()?;
        if version < MIN_HIP_VERSION {
            return Err(AiterError::HipTooOld { found: version });
        }
        // Twice the R0600 size, 8-byte aligned: a newer runtime writing a few more bytes into
        // the same symbol cannot run past the buffer.
        let mut props = vec![0u64; DEVICE_PROP_R0600_SIZE / 4];
        // SAFETY: `props` is writable, 8-byte aligned and larger than hipDeviceProp_tR0600.
        let code = unsafe { (self.api.get_device_properties)(props.as_mut_ptr().cast(), device) };
        self.check(
            format!("hipGetDevicePropertiesR0600(device {device})"),
            code,
        )?;
        let bytes: Vec<u8> = props.iter().flat_map(|w| w.to_ne_bytes()).collect();
        arch_from_props(&bytes, device)
    }

    /// Loads a code object produced by hipRTC.
    pub fn load_module(self: &Arc<Self>, code: &[u8]) -> Result<HipModule, AiterError> {
        let mut handle = std::ptr::null_mut();
        // SAFETY: `code` is a complete code object from hiprtcGetCode and outlives the call;
        // `handle` is a valid out-pointer.
        let status = unsafe { (self.api.module_load_data)(&mut handle, code.as_ptr().cast()) };
        self.check("hipModuleLoadData", status)?;
        Ok(HipModule {
            runtime: Arc::clone(self),
            handle: handle as usize,
        })
    }

    /// Enqueues `bytes` bytes of `value` at device address `dst` on `stream`.
    ///
    /// # Safety
    /// `dst .. dst + bytes` must be device memory that stays valid until the stream reaches the
    /// operation, and `stream` a live stream of the current device (0 = null stream).
    pub unsafe fn memset_async(
        &self,
        dst: usize,
        value: u8,
        bytes: usize,
        stream: usize,
    ) -> Result<(), AiterError> {
        // SAFETY: the caller guarantees the range and the stream.
        let code = unsafe {
            (self.api.memset_async)(
                dst as *mut c_void,
                i32::from(value),
                bytes,
                stream as *mut c_void,
            )
        };
        self.check("hipMemsetAsync", code)
    }

    /// Enqueues `launch` of `function` on `stream`.
    ///
    /// # Safety
    /// Every pointer argument in `launch` must be device memory valid for the kernel's accesses
    /// until the stream reaches it, and `launch.args` must match the kernel's parameter list
    /// (held by a test against the source).
    pub unsafe fn launch(
        &self,
        function: HipFunction,
        launch: &Launch,
        stream: usize,
    ) -> Result<(), AiterError> {
        let mut storage: Vec<[u8; 8]> = launch
            .args
            .iter()
            .map(|(_, arg)| match *arg {
                KernelArg::Ptr(p) => (p as u64).to_ne_bytes(),
                KernelArg::I64(v) => v.to_ne_bytes(),
                KernelArg::I32(v) => {
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&v.to_ne_bytes());
                    b
                }
            })
            .collect();
        let mut params: Vec<*mut c_void> = storage
            .iter_mut()
            .map(|slot| slot.as_mut_ptr().cast())
            .collect();
        // SAFETY: `params[i]` points at an 8-byte slot holding argument i in its leading bytes
        // (HIP reads as many bytes as the parameter's type has); `storage` and `params` outlive
        // the call, which copies the arguments before returning. The caller guarantees the
        // pointers and the parameter list.
        let code = unsafe {
            (self.api.module_launch_kernel)(
                function.handle as *mut c_void,
                launch.grid,
                1,
                1,
                launch.block,
                1,
                1,
                0,
                stream as *mut c_void,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check(format!("hipModuleLaunchKernel({})", function.name), code)
    }
}

impl HipModule {
    /// Looks up an entry point.
    pub fn function(&self, name: &'static str) -> Result<HipFunction, AiterError> {
        let c_name = CString::new(name).map_err(|_| AiterError::Hip {
            call: format!("hipModuleGetFunction({name:?})"),
            code: -1,
            message: String::from("kernel name contains NUL"),
        })?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: the module handle is live (owned by self), `c_name` is NUL-terminated and
        // `handle` is a valid out-pointer.
        let code = unsafe {
            (self.runtime.api.module_get_function)(
                &mut handle,
                self.handle as *mut c_void,
                c_name.as_ptr(),
            )
        };
        self.runtime
            .check(format!("hipModuleGetFunction({name})"), code)?;
        Ok(HipFunction {
            handle: handle as usize,
            name,
        })
    }
}

impl Drop for HipModule {
    fn drop(&mut self) {
        // SAFETY: the handle came from hipModuleLoadData and is unloaded exactly once.
        // Failure here leaves nothing to recover; it is ignored.
        let _ = unsafe { (self.runtime.api.module_unload)(self.handle as *mut c_void) };
    }
}

/// Reads `gcnArchName` out of a `hipDeviceProp_tR0600` image.
pub fn arch_from_props(props: &[u8], device: i32) -> Result<GpuArch, AiterError> {
    let field = props
        .get(GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN)
        .unwrap_or(&[]);
    let name = field
        .iter()
        .position(|&b| b == 0)
        .map(|end| &field[..end])
        .filter(|n| n.starts_with(b"gfx") && n.iter().all(|b| b.is_ascii_graphic()));
    match name {
        Some(n) => Ok(GpuArch::new(String::from_utf8_lossy(n).into_owned())),
        None => Err(AiterError::BadArchName {
            device,
            first_bytes: field.iter().take(16).copied().collect(),
        }),
    }
}

impl Hiprtc {
    /// Loads hipRTC from the default candidates.
    pub fn load() -> Result<Self, AiterError> {
        Self::load_from(&default_candidates(&HIPRTC_LIBRARY_NAMES))
    }

    /// Loads hipRTC from the first loadable candidate.
    pub fn load_from(candidates: &[PathBuf]) -> Result<Self, AiterError> {
        const LIB: &str = "hipRTC (libhiprtc)";
        let (lib, path) = open_first(LIB, candidates)?;
        // SAFETY: each type alias transcribes the prototype in hiprtc.h for its symbol.
        let api = unsafe {
            HiprtcApi {
                create_program: resolve(&lib, LIB, &path, "hiprtcCreateProgram")?,
                compile_program: resolve(&lib, LIB, &path, "hiprtcCompileProgram")?,
                get_program_log_size: resolve(&lib, LIB, &path, "hiprtcGetProgramLogSize")?,
                get_program_log: resolve(&lib, LIB, &path, "hiprtcGetProgramLog")?,
                get_code_size: resolve(&lib, LIB, &path, "hiprtcGetCodeSize")?,
                get_code: resolve(&lib, LIB, &path, "hiprtcGetCode")?,
                destroy_program: resolve(&lib, LIB, &path, "hiprtcDestroyProgram")?,
            }
        };
        Ok(Self {
            api,
            path,
            _lib: lib,
        })
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Compiles one HIP source for `arch` and returns the code object.
    pub fn compile(
        &self,
        source: &str,
        file_name: &'static str,
        arch: &GpuArch,
    ) -> Result<Vec<u8>, AiterError> {
        let options = vec![
            format!("--offload-arch={}", arch.full()),
            String::from("-O3"),
        ];
        let fail = |code: i32, log: String| AiterError::Compile {
            kernel: file_name,
            options: options.clone(),
            code,
            log,
        };
        let c_source = CString::new(source).map_err(|_| fail(-1, "source contains NUL".into()))?;
        let c_name = CString::new(file_name).map_err(|_| fail(-1, "name contains NUL".into()))?;
        let c_options: Vec<CString> = options
            .iter()
            .filter_map(|o| CString::new(o.as_str()).ok())
            .collect();
        let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();
        let mut program = std::ptr::null_mut();
        // SAFETY: source and name are NUL-terminated and outlive the call; no headers are
        // passed (count 0, null arrays); `program` is a valid out-pointer.
        let code = unsafe {
            (self.api.create_program)(
                &mut program,
                c_source.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if code != HIPRTC_SUCCESS {
            return Err(fail(code, String::from("hiprtcCreateProgram failed")));
        }
        let result = self.compile_created(program, &option_ptrs, &fail);
        // SAFETY: `program` was created above and is destroyed exactly once.
        let _ = unsafe { (self.api.destroy_program)(&mut program) };
        result
    }

    fn compile_created(
        &self,
        program: *mut c_void,
        options: &[*const c_char],
        fail: &dyn Fn(i32, String) -> AiterError,
    ) -> Result<Vec<u8>, AiterError> {
        let count = i32::try_from(options.len()).unwrap_or(0);
        // SAFETY: `program` is live; `options` holds `count` NUL-terminated strings that outlive
        // the call.
        let code = unsafe { (self.api.compile_program)(program, count, options.as_ptr()) };
        if code != HIPRTC_SUCCESS {
            return Err(fail(code, self.log(program)));
        }
        let mut size = 0usize;
        // SAFETY: `program` compiled successfully; `size` is a valid out-pointer.
        let code = unsafe { (self.api.get_code_size)(program, &mut size) };
        if code != HIPRTC_SUCCESS {
            return Err(fail(code, String::from("hiprtcGetCodeSize failed")));
        }
        let mut bytes = vec![0u8; size];
        // SAFETY: `bytes` has exactly the size hipRTC reported for the code.
        let code = unsafe { (self.api.get_code)(program, bytes.as_mut_ptr().cast()) };
        if code != HIPRTC_SUCCESS {
            return Err(fail(code, String::from("hiprtcGetCode failed")));
        }
        Ok(bytes)
    }

    fn log(&self, program: *mut c_void) -> String {
        let mut size = 0usize;
        // SAFETY: `program` is live; `size` is a valid out-pointer.
        if unsafe { (self.api.get_program_log_size)(program, &mut size) } != HIPRTC_SUCCESS {
            return String::from("(no log)");
        }
        let mut bytes = vec![0u8; size.max(1)];
        // SAFETY: `bytes` holds at least the size hipRTC reported for the log.
        if unsafe { (self.api.get_program_log)(program, bytes.as_mut_ptr().cast()) }
            != HIPRTC_SUCCESS
        {
            return String::from("(no log)");
        }
        String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `hipDeviceProp_tR0600` transcribed field by field from ROCm's hip_runtime_api.h
    /// (projects/hip/include/hip/hip_runtime_api.h in ROCm/rocm-systems); runs of fields with
    /// one type are written as arrays, which changes no offset. Only used to hold the two
    /// constants above against the header.
    #[repr(C)]
    #[allow(dead_code)]
    struct DevicePropR0600 {
        name: [u8; 256],
        uuid: [u8; 16],
        luid: [u8; 8],
        luid_device_node_mask: u32,
        total_global_mem: usize,
        shared_mem_per_block: usize,
        regs_per_block: i32,
        warp_size: i32,
        mem_pitch: usize,
        max_threads_per_block: i32,
        max_threads_dim: [i32; 3],
        max_grid_size: [i32; 3],
        clock_rate: i32,
        total_const_mem: usize,
        major: i32,
        minor: i32,
        texture_alignment: usize,
        texture_pitch_alignment: usize,
        // deviceOverlap … maxTexture1DLinear (9 ints)
        ints_a: [i32; 9],
        max_texture_2d: [i32; 2],
        max_texture_2d_mipmap: [i32; 2],
        max_texture_2d_linear: [i32; 3],
        max_texture_2d_gather: [i32; 2],
        max_texture_3d: [i32; 3],
        max_texture_3d_alt: [i32; 3],
        max_texture_cubemap: i32,
        max_texture_1d_layered: [i32; 2],
        max_texture_2d_layered: [i32; 3],
        max_texture_cubemap_layered: [i32; 2],
        max_surface_1d: i32,
        max_surface_2d: [i32; 2],
        max_surface_3d: [i32; 3],
        max_surface_1d_layered: [i32; 2],
        max_surface_2d_layered: [i32; 3],
        max_surface_cubemap: i32,
        max_surface_cubemap_layered: [i32; 2],
        surface_alignment: usize,
        // concurrentKernels … localL1CacheSupported (16 ints)
        ints_b: [i32; 16],
        shared_mem_per_multiprocessor: usize,
        // regsPerMultiprocessor … cooperativeMultiDeviceLaunch (12 ints)
        ints_c: [i32; 12],
        shared_mem_per_block_optin: usize,
        // pageableMemoryAccessUsesHostPageTables … accessPolicyMaxWindowSize (4 ints)
        ints_d: [i32; 4],
        reserved_shared_mem_per_block: usize,
        // hostRegisterSupported … unifiedFunctionPointers (13 ints / unsigned ints)
        ints_e: [i32; 13],
        reserved: [i32; 63],
        hip_reserved: [i32; 32],
        gcn_arch_name: [u8; 256],
        max_shared_memory_per_multi_processor: usize,
        clock_instruction_rate: i32,
        arch: u32,
        hdp_mem_flush_cntl: *mut u32,
        hdp_reg_flush_cntl: *mut u32,
        // cooperativeMultiDeviceUnmatchedFunc … asicRevision (6 ints)
        ints_f: [i32; 6],
    }

    #[test]
    fn gcn_arch_name_offset_matches_the_header_transcription() {
        assert_eq!(
            std::mem::offset_of!(DevicePropR0600, gcn_arch_name),
            GCN_ARCH_NAME_OFFSET
        );
        assert_eq!(
            std::mem::size_of::<DevicePropR0600>(),
            DEVICE_PROP_R0600_SIZE
        );
    }

    fn props_with_name(name: &[u8]) -> Vec<u8> {
        let mut props = vec![0xAAu8; DEVICE_PROP_R0600_SIZE];
        props[GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN].fill(0);
        props[GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + name.len()].copy_from_slice(name);
        props
    }

    #[test]
    fn arch_is_read_at_the_r0600_offset_with_target_features() {
        let arch =
            arch_from_props(&props_with_name(b"gfx942:sramecc+:xnack-"), 0).expect("valid name");
        assert_eq!(arch.full(), "gfx942:sramecc+:xnack-");
        assert_eq!(arch.processor(), "gfx942");
    }

    #[test]
    fn garbage_at_the_offset_is_an_error_naming_the_device() {
        let err = arch_from_props(&props_with_name(b"MI300X"), 3).expect_err("not a gfx name");
        assert!(err.to_string().contains("device 3"), "{err}");
        let mut unterminated = props_with_name(b"");
        unterminated[GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN].fill(b'g');
        assert!(arch_from_props(&unterminated, 0).is_err());
        assert!(arch_from_props(&[0u8; 100], 0).is_err(), "short buffer");
    }

    #[test]
    fn default_candidates_try_sonames_then_rocm_dirs() {
        let c = default_candidates(&HIP_LIBRARY_NAMES);
        assert_eq!(c[0], PathBuf::from("libamdhip64.so.7"));
        assert_eq!(c[2], PathBuf::from("libamdhip64.so"));
        assert!(c.contains(&PathBuf::from("/opt/rocm/lib/libamdhip64.so.6")));
    }

    #[test]
    fn missing_hip_runtime_names_every_candidate() {
        let tried = vec![
            PathBuf::from("/nonexistent/libamdhip64.so.7"),
            PathBuf::from("libamdhip64-not-here.so"),
        ];
        let err = HipRuntime::load_from(&tried).err().expect("cannot load");
        let text = err.to_string();
        assert!(
            text.starts_with("HIP runtime (libamdhip64) not found"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent/libamdhip64.so.7, libamdhip64-not-here.so"),
            "{text}"
        );
        let err = Hiprtc::load_from(&tried[..1]).err().expect("cannot load");
        assert!(
            err.to_string().starts_with("hipRTC (libhiprtc) not found"),
            "{err}"
        );
    }

    #[test]
    fn a_library_without_hip_symbols_is_reported_by_symbol() {
        // libc loads everywhere and has no HIP symbol: the first one is reported.
        let err = HipRuntime::load_from(&[PathBuf::from("libc.so.6")])
            .err()
            .expect("libc is not HIP");
        let text = err.to_string();
        assert!(text.contains("lacks symbol `hipInit`"), "{text}");
    }
}
