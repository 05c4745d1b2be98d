//! Owned HIP objects: the loaded runtime, modules (unloaded on drop), device allocations (freed
//! on drop), hipRTC; and the host engine's needs — where a pointer lives and synchronous copies
//! on a caller's stream.

use std::ffi::{CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::result::{self as hip, HipError};
use super::sys::{self, HIP_MEMCPY_DEVICE_TO_HOST, HIP_MEMCPY_HOST_TO_DEVICE, HipSys, HiprtcSys};
use crate::Location;
use crate::launch::{KernelArg, LaunchConfig, parameter_array};

/// First `HIP_VERSION` with `hipMemoryType` numbered as CUDA's (Unregistered 0, Host 1, …).
const HIP_6: i32 = 60_000_000;

/// The loaded HIP runtime and its version.
pub struct HipRuntime {
    sys: HipSys,
    version: i32,
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

/// Device memory from `hipMalloc`, freed on drop.
pub struct HipAllocation {
    runtime: Arc<HipRuntime>,
    address: u64,
    bytes: usize,
}

impl HipRuntime {
    /// Loads the first loadable candidate and reads its version.
    pub fn load_from(candidates: &[PathBuf]) -> Result<Self, HipError> {
        let sys = HipSys::load(candidates).map_err(|e| HipError::not_found(sys::HIP_LIBRARY, e))?;
        let version = hip::runtime_version(&sys)?;
        Ok(Self { sys, version })
    }

    /// The raw table, for the checked calls this type does not wrap.
    pub fn sys(&self) -> &HipSys {
        &self.sys
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        self.sys.path()
    }

    /// `HIP_VERSION` of the loaded runtime.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// Devices HIP can see; 0 where it has none.
    pub fn device_count(&self) -> Result<i32, HipError> {
        hip::device_count(&self.sys)
    }

    /// The calling thread's current device (what the handle's stream belongs to).
    pub fn current_device(&self) -> Result<i32, HipError> {
        hip::current_device(&self.sys)
    }

    /// `gcnArchName` of `device` (see the module doc of [`super`] for why it is read by offset).
    pub fn arch_name(&self, device: i32) -> Result<String, HipError> {
        if self.version < super::MIN_HIP_VERSION {
            return Err(HipError::TooOld {
                found: self.version,
                needed: super::MIN_HIP_VERSION,
                why: "gcnArchName is read from hipDeviceProp_tR0600",
            });
        }
        // Twice the R0600 size, 8-byte aligned: a newer runtime writing a few more bytes into
        // the same symbol cannot run past the buffer.
        let mut props = vec![0u64; super::DEVICE_PROP_R0600_SIZE / 4];
        hip::device_properties_r0600(&self.sys, &mut props, device)?;
        let bytes: Vec<u8> = props.iter().flat_map(|w| w.to_ne_bytes()).collect();
        super::arch_from_props(&bytes, device)
    }

    /// Where `address` lives. Memory HIP never allocated or registered is host memory.
    pub fn location(&self, address: u64) -> Result<Location, HipError> {
        let Some(attributes) = hip::pointer_attributes(&self.sys, address)? else {
            return Ok(Location::Host);
        };
        Ok(location_of(self.version, attributes.memory_type))
    }

    /// Copies each `(device address, host buffer)` pair device → host on `stream`, then waits
    /// for the stream, so every buffer is filled on return.
    ///
    /// # Safety
    /// `stream` is null or a live stream of the current device; each device address is
    /// readable device memory for the length of its buffer.
    pub unsafe fn download(
        &self,
        stream: *mut c_void,
        copies: &mut [(u64, &mut [u8])],
    ) -> Result<(), HipError> {
        for (src, dst) in copies.iter_mut().filter(|(_, dst)| !dst.is_empty()) {
            // SAFETY: `dst` is a live host buffer borrowed until the synchronize below; the
            // caller guarantees the device side and the stream.
            unsafe {
                hip::memcpy_async(
                    &self.sys,
                    dst.as_mut_ptr().cast(),
                    *src as *const c_void,
                    dst.len(),
                    HIP_MEMCPY_DEVICE_TO_HOST,
                    stream,
                )
            }?;
        }
        // SAFETY: forwarded contract.
        unsafe { hip::stream_synchronize(&self.sys, stream) }
    }

    /// Copies each `(device address, host bytes)` pair host → device on `stream` and waits, so
    /// the host buffers may be dropped on return.
    ///
    /// # Safety
    /// `stream` is null or a live stream of the current device; each device address is
    /// writable device memory for the length of its bytes, not used by other work meanwhile.
    pub unsafe fn upload(
        &self,
        stream: *mut c_void,
        copies: &[(u64, &[u8])],
    ) -> Result<(), HipError> {
        for (dst, src) in copies.iter().filter(|(_, src)| !src.is_empty()) {
            // SAFETY: `src` stays borrowed until the synchronize below; the caller guarantees
            // the device side and the stream.
            unsafe {
                hip::memcpy_async(
                    &self.sys,
                    *dst as *mut c_void,
                    src.as_ptr().cast(),
                    src.len(),
                    HIP_MEMCPY_HOST_TO_DEVICE,
                    stream,
                )
            }?;
        }
        // SAFETY: forwarded contract.
        unsafe { hip::stream_synchronize(&self.sys, stream) }
    }

    /// `bytes` (at least one) of device memory on the current device.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<HipAllocation, HipError> {
        let address = hip::malloc(&self.sys, bytes.max(1))?;
        Ok(HipAllocation {
            runtime: Arc::clone(self),
            address,
            bytes,
        })
    }

    /// Loads a code object produced by hipRTC.
    pub fn load_module(self: &Arc<Self>, code: &[u8]) -> Result<HipModule, HipError> {
        let handle = hip::module_load_data(&self.sys, code)?;
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
    ) -> Result<(), HipError> {
        // SAFETY: forwarded contract.
        unsafe {
            hip::memset_async(
                &self.sys,
                dst as *mut c_void,
                value,
                bytes,
                stream as *mut c_void,
            )
        }
    }

    /// Enqueues `function` with `args` (in parameter order) on `stream`.
    ///
    /// # Safety
    /// Every pointer argument must be device memory valid for the kernel's accesses until the
    /// stream reaches it, and `args` must match the kernel's parameter list (held by a test
    /// against the source).
    pub unsafe fn launch(
        &self,
        function: HipFunction,
        config: LaunchConfig,
        args: &[KernelArg],
        stream: usize,
    ) -> Result<(), HipError> {
        let mut params = parameter_array(args);
        // SAFETY: `params` points into `args`, alive until the call returns; the caller
        // guarantees the rest.
        unsafe {
            hip::module_launch_kernel(
                &self.sys,
                function.handle as *mut c_void,
                function.name,
                config,
                stream as *mut c_void,
                params.as_mut_slice(),
            )
        }
    }
}

/// Decodes `hipPointerAttribute_t`'s memory type by the runtime's version: HIP 6 renumbered the
/// enum to match CUDA's and reports plain `malloc` memory as `Unregistered` (0) where HIP 5
/// said "invalid value". Only plain and page-locked host memory may be used in place.
pub fn location_of(version: i32, memory_type: i32) -> Location {
    let host = if version >= HIP_6 {
        // hipMemoryTypeUnregistered, hipMemoryTypeHost
        matches!(memory_type, 0 | 1)
    } else {
        // hipMemoryTypeHost
        memory_type == 0
    };
    if host {
        Location::Host
    } else {
        Location::Device
    }
}

impl HipAllocation {
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

    /// Copies `bytes` (at most the allocation) to the start of the allocation.
    pub fn upload(&self, bytes: &[u8]) -> Result<(), HipError> {
        let len = bytes.len().min(self.bytes);
        // SAFETY: the allocation holds at least `len` bytes and is owned by `self`; the null
        // stream is always valid.
        unsafe {
            self.runtime
                .upload(std::ptr::null_mut(), &[(self.address, &bytes[..len])])
        }
    }

    /// Copies the start of the allocation into `out` (at most the allocation).
    pub fn download(&self, out: &mut [u8]) -> Result<(), HipError> {
        let len = out.len().min(self.bytes);
        // SAFETY: as `upload`.
        unsafe {
            self.runtime
                .download(std::ptr::null_mut(), &mut [(self.address, &mut out[..len])])
        }
    }
}

impl Drop for HipAllocation {
    fn drop(&mut self) {
        // SAFETY: from hipMalloc, freed once. A failure cannot be reported from drop; it would
        // leak the allocation only.
        let _ = unsafe { hip::free(&self.runtime.sys, self.address) };
    }
}

impl HipModule {
    /// Looks up an entry point.
    pub fn function(&self, name: &'static str) -> Result<HipFunction, HipError> {
        let c_name = CString::new(name).map_err(|_| HipError::Call {
            call: format!("hipModuleGetFunction({name:?})"),
            code: hip::HIP_ERROR_INVALID_VALUE,
            message: String::from("kernel name contains NUL"),
        })?;
        // SAFETY: the module handle is live (owned by self).
        let handle = unsafe {
            hip::module_get_function(&self.runtime.sys, self.handle as *mut c_void, &c_name)
        }?;
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
        let _ = unsafe { hip::module_unload(&self.runtime.sys, self.handle as *mut c_void) };
    }
}

/// The loaded hipRTC.
pub struct Hiprtc {
    sys: HiprtcSys,
}

const HIPRTC_SUCCESS: i32 = 0;

impl Hiprtc {
    /// Loads hipRTC from the first loadable candidate; every function the compile path calls
    /// must be present.
    pub fn load_from(candidates: &[PathBuf]) -> Result<Self, HipError> {
        let sys =
            HiprtcSys::load(candidates).map_err(|e| HipError::not_found(sys::HIPRTC_LIBRARY, e))?;
        let lib = sys::HIPRTC_LIBRARY;
        hip::need(lib, &sys.path, sys.create_program)?;
        hip::need(lib, &sys.path, sys.compile_program)?;
        hip::need(lib, &sys.path, sys.get_program_log_size)?;
        hip::need(lib, &sys.path, sys.get_program_log)?;
        hip::need(lib, &sys.path, sys.get_code_size)?;
        hip::need(lib, &sys.path, sys.get_code)?;
        hip::need(lib, &sys.path, sys.destroy_program)?;
        Ok(Self { sys })
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.sys.path
    }

    fn f<T: Copy>(&self, entry: sys::Entry<T>) -> Result<T, HipError> {
        hip::need(sys::HIPRTC_LIBRARY, &self.sys.path, entry)
    }

    /// Compiles one HIP source for the target `arch` (a full `gcnArchName`) and returns the
    /// code object.
    pub fn compile(
        &self,
        source: &str,
        file_name: &'static str,
        arch: &str,
    ) -> Result<Vec<u8>, HipError> {
        let options = vec![format!("--offload-arch={arch}"), String::from("-O3")];
        let fail = |code: i32, log: String| HipError::Compile {
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
        let create = self.f(self.sys.create_program)?;
        let destroy = self.f(self.sys.destroy_program)?;
        let mut program = std::ptr::null_mut();
        // SAFETY: source and name are NUL-terminated and outlive the call; no headers are
        // passed (count 0, null arrays); `program` is a valid out-pointer.
        let code = unsafe {
            create(
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
        let _ = unsafe { destroy(&mut program) };
        result
    }

    fn compile_created(
        &self,
        program: *mut c_void,
        options: &[*const c_char],
        fail: &dyn Fn(i32, String) -> HipError,
    ) -> Result<Vec<u8>, HipError> {
        let compile = self.f(self.sys.compile_program)?;
        let code_size = self.f(self.sys.get_code_size)?;
        let get_code = self.f(self.sys.get_code)?;
        let count = i32::try_from(options.len()).unwrap_or(0);
        // SAFETY: `program` is live; `options` holds `count` NUL-terminated strings that outlive
        // the call.
        let code = unsafe { compile(program, count, options.as_ptr()) };
        if code != HIPRTC_SUCCESS {
            return Err(fail(code, self.log(program)));
        }
        let mut size = 0usize;
        // SAFETY: `program` compiled successfully; `size` is a valid out-pointer.
        let code = unsafe { code_size(program, &mut size) };
        if code != HIPRTC_SUCCESS {
            return Err(fail(code, String::from("hiprtcGetCodeSize failed")));
        }
        let mut bytes = vec![0u8; size];
        // SAFETY: `bytes` has exactly the size hipRTC reported for the code.
        let code = unsafe { get_code(program, bytes.as_mut_ptr().cast()) };
        if code != HIPRTC_SUCCESS {
            return Err(fail(code, String::from("hiprtcGetCode failed")));
        }
        Ok(bytes)
    }

    fn log(&self, program: *mut c_void) -> String {
        let (Ok(log_size), Ok(get_log)) = (
            self.f(self.sys.get_program_log_size),
            self.f(self.sys.get_program_log),
        ) else {
            return String::from("(no log)");
        };
        let mut size = 0usize;
        // SAFETY: `program` is live; `size` is a valid out-pointer.
        if unsafe { log_size(program, &mut size) } != HIPRTC_SUCCESS {
            return String::from("(no log)");
        }
        let mut bytes = vec![0u8; size.max(1)];
        // SAFETY: `bytes` holds at least the size hipRTC reported for the log.
        if unsafe { get_log(program, bytes.as_mut_ptr().cast()) } != HIPRTC_SUCCESS {
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

    #[test]
    fn memory_types_are_decoded_by_version() {
        // HIP 6 numbering: Unregistered 0, Host 1, Device 2, Managed 3, Array 10, Unified 11.
        let hip6 = 60_200_000;
        assert_eq!(location_of(hip6, 0), Location::Host);
        assert_eq!(location_of(hip6, 1), Location::Host);
        for device in [2, 3, 10, 11] {
            assert_eq!(location_of(hip6, device), Location::Device, "{device}");
        }
        // HIP 5 numbering: Host 0, Device 1, Array 2, Unified 3, Managed 4.
        let hip5 = 50_200_000;
        assert_eq!(location_of(hip5, 0), Location::Host);
        for device in [1, 2, 3, 4] {
            assert_eq!(location_of(hip5, device), Location::Device, "{device}");
        }
    }
}
