//! The symbols every fixture variant exports, plus the bodies of the two optional entry points
//! whose *presence* distinguishes the variants (`hipdnnPluginGetApiVersion`,
//! `hipdnnEnginePluginExecuteOpGraphWithOverrides`).
//!
//! Each variant's crate root includes this file with `#[path]` and decides which optional symbols
//! to export, because the loader under test keys off symbol presence, which no run-time setting
//! can change.
//!
//! The fixture is a *well-behaved* plugin (NULL checks, per-thread last error, the two-call id
//! protocol, a hash-consistent engine name) that declines every graph: the gating suite only needs
//! to observe whether the host *offers* a graph, never to execute one.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// `hipdnnPluginStatus_t` values (plugin-abi.md §3.1).
pub const STATUS_SUCCESS: i32 = 0;
pub const STATUS_BAD_PARAM: i32 = 1;
pub const STATUS_INVALID_VALUE: i32 = 2;
pub const STATUS_INTERNAL_ERROR: i32 = 3;
pub const STATUS_NOT_APPLICABLE: i32 = 5;

/// `HIPDNN_PLUGIN_TYPE_ENGINE`.
pub const PLUGIN_TYPE_ENGINE: i32 = 1;

/// The fixture's single engine. Its id is derived from the name exactly as hipDNN requires, so the
/// host's name/hash check admits it.
pub const ENGINE_NAME: &CStr = c"RAGGED_CONFORMANCE_FIXTURE";
pub const ENGINE_ID: i64 = fnv1a64(ENGINE_NAME.to_bytes());

/// Reported when no sidecar file configures the version: the project's own plugin version, so an
/// unconfigured fixture behaves like a current plugin.
pub const DEFAULT_API_VERSION: &str = "1.4.0";

/// Suffix of the sidecar that overrides the name `GetEngineName` reports (the id stays the hash
/// of [`ENGINE_NAME`]), so the host's name/hash check can be made to fail.
pub const ENGINE_NAME_SIDECAR_SUFFIX: &str = ".engine-name";

/// Suffix appended to the library's own path to find the sidecar holding the API version string.
/// A `.so` file name plus this suffix no longer ends in `.so`, so plugin discovery never picks the
/// sidecar up as a plugin.
pub const API_VERSION_SIDECAR_SUFFIX: &str = ".api-version";

const fn fnv1a64(bytes: &[u8]) -> i64 {
    if bytes.is_empty() {
        return 0;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash as i64
}

#[repr(C)]
pub struct ConstData {
    pub ptr: *const c_void,
    pub size: usize,
}

#[repr(C)]
pub struct DeviceBuffer {
    pub uid: i64,
    pub ptr: *mut c_void,
}

type LogCallback = unsafe extern "C" fn(severity: c_int, message: *const c_char);

static LOG_CALLBACK: AtomicUsize = AtomicUsize::new(0);
static LOG_LEVEL: AtomicI32 = AtomicI32::new(0);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Why an entry point did not succeed: the status C sees and the text of the last error.
pub struct Failure {
    status: i32,
    message: String,
}

fn refuse(status: i32, message: impl Into<String>) -> Failure {
    Failure {
        status,
        message: message.into(),
    }
}

/// What an entry point body returns; only [`boundary`] turns it into a C status.
type Outcome = Result<(), Failure>;

/// The one boundary every export runs inside: the body's failure becomes its status with its
/// message as this thread's last error, and a panic becomes `INTERNAL_ERROR` instead of
/// unwinding into C.
fn boundary(function: &'static str, body: impl FnOnce() -> Outcome) -> i32 {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return STATUS_SUCCESS,
        Ok(Err(failure)) => failure,
        Err(_) => refuse(
            STATUS_INTERNAL_ERROR,
            format!("{function}: fixture plugin panicked"),
        ),
    };
    let text = CString::new(failure.message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = text);
    failure.status
}

#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

unsafe extern "C" {
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
}

/// Path of the shared object this code was loaded from. Several copies of the fixture can be loaded
/// at once from different paths, and each must find its own sidecar.
fn own_library_path() -> Option<String> {
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let probe = own_library_path as fn() -> Option<String>;
    // SAFETY: `dladdr` only reads the address and writes into `info`, which lives on this stack
    // frame; the address is a function of this very library.
    let found = unsafe { dladdr(probe as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: on success `dli_fname` points to the NUL-terminated path of the loaded object,
    // owned by the dynamic linker for as long as the object stays loaded.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(path.to_string_lossy().into_owned())
}

fn plugin_name() -> &'static CStr {
    static NAME: OnceLock<CString> = OnceLock::new();
    NAME.get_or_init(|| {
        let stem = own_library_path()
            .and_then(|p| {
                std::path::Path::new(&p)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        CString::new(format!("fixture:{stem}")).unwrap_or_default()
    })
}

/// The API version string this copy reports: the sidecar's first line verbatim (so malformed
/// strings such as `v1.3.0` or an empty line can be tested), else [`DEFAULT_API_VERSION`].
pub fn configured_api_version() -> &'static CStr {
    static VERSION: OnceLock<CString> = OnceLock::new();
    VERSION.get_or_init(|| {
        let from_sidecar = own_library_path()
            .map(|p| format!("{p}{API_VERSION_SIDECAR_SUFFIX}"))
            .and_then(|sidecar| std::fs::read_to_string(sidecar).ok())
            .map(|text| text.lines().next().unwrap_or("").to_owned());
        let text = from_sidecar.unwrap_or_else(|| DEFAULT_API_VERSION.to_owned());
        CString::new(text).unwrap_or_default()
    })
}

/// The name `GetEngineName` reports: the `.engine-name` sidecar's first line, else
/// [`ENGINE_NAME`].
fn reported_engine_name() -> &'static CStr {
    static NAME: OnceLock<CString> = OnceLock::new();
    NAME.get_or_init(|| {
        own_library_path()
            .map(|p| format!("{p}{ENGINE_NAME_SIDECAR_SUFFIX}"))
            .and_then(|sidecar| std::fs::read_to_string(sidecar).ok())
            .and_then(|text| CString::new(text.lines().next().unwrap_or("")).ok())
            .unwrap_or_else(|| ENGINE_NAME.to_owned())
    })
}

/// Writes `value` through an out-pointer after the NULL check every entry point needs.
///
/// # Safety
/// `out` must be NULL or valid for one write of `T`.
unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> Outcome {
    if out.is_null() {
        return Err(refuse(STATUS_BAD_PARAM, format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and, per this function's contract, valid for a write.
    unsafe { out.write(value) };
    Ok(())
}

/// # Safety
/// `version` must be NULL or valid for one pointer write.
pub unsafe fn get_api_version(version: *mut *const c_char) -> i32 {
    // SAFETY: forwarded contract.
    boundary("hipdnnPluginGetApiVersion", || unsafe {
        write_out(version, configured_api_version().as_ptr(), "version")
    })
}

/// # Safety
/// Pointer arguments must be NULL or valid as in hipDNN's `EnginePluginApi.h`.
pub unsafe fn execute_with_overrides(handle: *mut c_void, context: *mut c_void) -> i32 {
    boundary("hipdnnEnginePluginExecuteOpGraphWithOverrides", || {
        no_context_exists(handle, context)
    })
}

/// # Safety
/// `name` must be NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetName(name: *mut *const c_char) -> i32 {
    // SAFETY: caller contract.
    boundary("hipdnnPluginGetName", || unsafe {
        write_out(name, plugin_name().as_ptr(), "name")
    })
}

/// # Safety
/// `version` must be NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetVersion(version: *mut *const c_char) -> i32 {
    // SAFETY: caller contract.
    boundary("hipdnnPluginGetVersion", || unsafe {
        write_out(version, c"0.1.0-fixture".as_ptr(), "version")
    })
}

/// # Safety
/// `plugin_type` must be NULL or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetType(plugin_type: *mut i32) -> i32 {
    // SAFETY: caller contract.
    boundary("hipdnnPluginGetType", || unsafe {
        write_out(plugin_type, PLUGIN_TYPE_ENGINE, "type")
    })
}

/// # Safety
/// `error_str` must be NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetLastErrorString(error_str: *mut *const c_char) {
    // The C function returns nothing, so the status is dropped; the boundary still keeps a panic
    // from unwinding into C. NULL is ignored, as the ABI asks, and sets no error.
    let _ = boundary("hipdnnPluginGetLastErrorString", || {
        if error_str.is_null() {
            return Ok(());
        }
        let ptr = LAST_ERROR.with(|slot| slot.borrow().as_ptr());
        // SAFETY: non-NULL, valid per the caller contract. The pointed-to buffer lives in this
        // thread's slot until the next failure on this thread replaces it.
        unsafe { error_str.write(ptr) };
        Ok(())
    });
}

/// # Safety
/// `callback` must be NULL or a function callable for the life of the library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginSetLoggingCallback(callback: Option<LogCallback>) -> i32 {
    boundary("hipdnnPluginSetLoggingCallback", || match callback {
        None => Err(refuse(STATUS_BAD_PARAM, "callback is NULL")),
        Some(cb) => {
            LOG_CALLBACK.store(cb as usize, Ordering::Release);
            Ok(())
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn hipdnnPluginSetLogLevel(level: c_int) -> i32 {
    boundary("hipdnnPluginSetLogLevel", || {
        LOG_LEVEL.store(level, Ordering::Relaxed);
        Ok(())
    })
}

/// # Safety
/// As `hipdnnEnginePluginGetAllEngineIds` in `EnginePluginApi.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetAllEngineIds(
    engine_ids: *mut i64,
    max_engines: u32,
    num_engines: *mut u32,
) -> i32 {
    boundary("hipdnnEnginePluginGetAllEngineIds", || {
        if num_engines.is_null() {
            return Err(refuse(STATUS_BAD_PARAM, "num_engines is NULL"));
        }
        if max_engines == 0 {
            // SAFETY: checked non-NULL; caller provides a writable u32.
            unsafe { num_engines.write(1) };
            return Ok(());
        }
        if engine_ids.is_null() {
            return Err(refuse(
                STATUS_BAD_PARAM,
                "engine_ids is NULL with max_engines > 0",
            ));
        }
        // SAFETY: both non-NULL; `engine_ids` holds at least `max_engines` >= 1 slots.
        unsafe {
            engine_ids.write(ENGINE_ID);
            num_engines.write(1);
        }
        Ok(())
    })
}

struct Handle {
    _stream: *mut c_void,
}

/// # Safety
/// `handle` must be NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginCreate(handle: *mut *mut c_void) -> i32 {
    boundary("hipdnnEnginePluginCreate", || {
        if handle.is_null() {
            return Err(refuse(STATUS_BAD_PARAM, "handle is NULL"));
        }
        let fresh = Box::into_raw(Box::new(Handle {
            _stream: std::ptr::null_mut(),
        }));
        // SAFETY: non-NULL and writable per the caller contract.
        unsafe { handle.write(fresh.cast()) };
        Ok(())
    })
}

/// # Safety
/// `handle` must be NULL or a handle from `hipdnnEnginePluginCreate` not yet destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginDestroy(handle: *mut c_void) -> i32 {
    boundary("hipdnnEnginePluginDestroy", || {
        if handle.is_null() {
            return Err(refuse(STATUS_BAD_PARAM, "handle is NULL"));
        }
        // SAFETY: the handle came from `Box::into_raw` in `Create` and is destroyed once.
        drop(unsafe { Box::from_raw(handle.cast::<Handle>()) });
        Ok(())
    })
}

/// # Safety
/// `handle` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginSetStream(
    handle: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    boundary("hipdnnEnginePluginSetStream", || {
        if handle.is_null() {
            return Err(refuse(STATUS_BAD_PARAM, "handle is NULL"));
        }
        // SAFETY: a live handle from `Create`; no other thread mutates it during this call per
        // the ABI's handle threading rules.
        unsafe { (*handle.cast::<Handle>())._stream = stream };
        Ok(())
    })
}

/// Declines every graph: `SUCCESS` with zero engines.
///
/// # Safety
/// As `hipdnnEnginePluginGetApplicableEngineIds` in `EnginePluginApi.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetApplicableEngineIds(
    handle: *mut c_void,
    op_graph: *const ConstData,
    _engine_ids: *mut i64,
    _max_engines: u32,
    num_engines: *mut u32,
) -> i32 {
    boundary("hipdnnEnginePluginGetApplicableEngineIds", || {
        if handle.is_null() || op_graph.is_null() {
            return Err(refuse(STATUS_BAD_PARAM, "handle or op_graph is NULL"));
        }
        // SAFETY: caller contract.
        unsafe { write_out(num_engines, 0, "num_engines") }
    })
}

fn no_graph_applies() -> Outcome {
    Err(refuse(
        STATUS_INVALID_VALUE,
        "engine RAGGED_CONFORMANCE_FIXTURE applies to no graph",
    ))
}

/// # Safety
/// As `hipdnnEnginePluginGetEngineDetails` in `EnginePluginApi.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetEngineDetails(
    handle: *mut c_void,
    _engine_id: i64,
    op_graph: *const ConstData,
    engine_details: *mut ConstData,
) -> i32 {
    boundary("hipdnnEnginePluginGetEngineDetails", || {
        if handle.is_null() || op_graph.is_null() || engine_details.is_null() {
            return Err(refuse(
                STATUS_BAD_PARAM,
                "handle, op_graph or engine_details is NULL",
            ));
        }
        no_graph_applies()
    })
}

/// # Safety
/// As `hipdnnEnginePluginDestroyEngineDetails` in `EnginePluginApi.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginDestroyEngineDetails(
    handle: *mut c_void,
    engine_details: *mut ConstData,
) -> i32 {
    boundary("hipdnnEnginePluginDestroyEngineDetails", || {
        if handle.is_null() || engine_details.is_null() {
            return Err(refuse(STATUS_BAD_PARAM, "handle or engine_details is NULL"));
        }
        Err(refuse(
            STATUS_INVALID_VALUE,
            "the fixture never hands out engine details",
        ))
    })
}

/// # Safety
/// As `hipdnnEnginePluginGetWorkspaceSize` in `EnginePluginApi.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetWorkspaceSize(
    handle: *mut c_void,
    engine_config: *const ConstData,
    op_graph: *const ConstData,
    workspace_size: *mut usize,
) -> i32 {
    boundary("hipdnnEnginePluginGetWorkspaceSize", || {
        if handle.is_null()
            || engine_config.is_null()
            || op_graph.is_null()
            || workspace_size.is_null()
        {
            return Err(refuse(STATUS_BAD_PARAM, "a pointer argument is NULL"));
        }
        no_graph_applies()
    })
}

/// # Safety
/// As `hipdnnEnginePluginCreateExecutionContext` in `EnginePluginApi.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginCreateExecutionContext(
    handle: *mut c_void,
    engine_config: *const ConstData,
    op_graph: *const ConstData,
    execution_context: *mut *mut c_void,
) -> i32 {
    boundary("hipdnnEnginePluginCreateExecutionContext", || {
        if handle.is_null()
            || engine_config.is_null()
            || op_graph.is_null()
            || execution_context.is_null()
        {
            return Err(refuse(STATUS_BAD_PARAM, "a pointer argument is NULL"));
        }
        no_graph_applies()
    })
}

fn no_context_exists(handle: *mut c_void, context: *mut c_void) -> Outcome {
    if handle.is_null() || context.is_null() {
        return Err(refuse(
            STATUS_BAD_PARAM,
            "handle or execution_context is NULL",
        ));
    }
    Err(refuse(
        STATUS_INVALID_VALUE,
        "the fixture never creates execution contexts",
    ))
}

#[unsafe(no_mangle)]
pub extern "C" fn hipdnnEnginePluginDestroyExecutionContext(
    handle: *mut c_void,
    execution_context: *mut c_void,
) -> i32 {
    boundary("hipdnnEnginePluginDestroyExecutionContext", || {
        no_context_exists(handle, execution_context)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    handle: *mut c_void,
    execution_context: *mut c_void,
    _workspace_size: *mut usize,
) -> i32 {
    boundary(
        "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext",
        || no_context_exists(handle, execution_context),
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn hipdnnEnginePluginExecuteOpGraph(
    handle: *mut c_void,
    execution_context: *mut c_void,
    _workspace: *mut c_void,
    _device_buffers: *const DeviceBuffer,
    _num_device_buffers: u32,
) -> i32 {
    boundary("hipdnnEnginePluginExecuteOpGraph", || {
        no_context_exists(handle, execution_context)
    })
}

/// # Safety
/// `name` must be NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetEngineName(
    engine_id: i64,
    name: *mut *const c_char,
) -> i32 {
    boundary("hipdnnEnginePluginGetEngineName", || {
        if name.is_null() {
            return Err(refuse(STATUS_BAD_PARAM, "name is NULL"));
        }
        if engine_id != ENGINE_ID {
            return Err(refuse(
                STATUS_NOT_APPLICABLE,
                format!("engine id {engine_id} is not the fixture's"),
            ));
        }
        // SAFETY: checked non-NULL; caller contract makes it writable.
        unsafe { name.write(reported_engine_name().as_ptr()) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_id_matches_the_worked_fnv_values() {
        // plugin-abi.md §7 worked values.
        assert_eq!(fnv1a64(b"a"), -5808556873153909620);
        assert_eq!(fnv1a64(b"RAGGED_SDPA_HOST_REFERENCE"), 8202884889727546333);
        assert_eq!(fnv1a64(b""), 0);
    }
}
