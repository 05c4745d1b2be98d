//! Loads the built plugin through its C ABI, as hipDNN does: `dlopen` + typed symbols.
//!
//! Tests never link the crate's Rust API for the ABI: they see exactly what a C++ backend sees.

#![allow(dead_code, non_snake_case)]

pub mod c_host;
pub mod device;
pub mod fake_hip;
pub mod golden;
pub mod log_lines;
pub mod overrides;
pub mod problem;

use std::ffi::{CStr, c_char, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Calls per repeat check: `RAGGED_SDPA_TEST_REPEATS`, or `default` when it is unset or not a
/// number (each check bounds it as its cost allows).
pub fn test_repeats(default: usize) -> usize {
    std::env::var("RAGGED_SDPA_TEST_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A seeded xorshift64 stream, the tests' source of reproducible input values.
pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

pub type Status = i32;
pub const SUCCESS: Status = 0;
pub const BAD_PARAM: Status = 1;
pub const INVALID_VALUE: Status = 2;
pub const INTERNAL_ERROR: Status = 3;
pub const NOT_APPLICABLE: Status = 5;

pub const HOST_REFERENCE_ID: i64 = 8202884889727546333;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConstData {
    pub ptr: *const c_void,
    pub size: usize,
}

impl ConstData {
    pub fn of(bytes: &[u8]) -> ConstData {
        ConstData {
            ptr: bytes.as_ptr().cast(),
            size: bytes.len(),
        }
    }

    pub fn empty() -> ConstData {
        ConstData {
            ptr: std::ptr::null(),
            size: 0,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DeviceBuffer {
    pub uid: i64,
    pub ptr: *mut c_void,
}

pub type Handle = *mut c_void;
pub type Context = *mut c_void;
pub type LogCallback = Option<unsafe extern "C" fn(i32, *const c_char)>;

/// Every exported function, resolved once.
pub struct Plugin {
    _lib: libloading::Library,
    pub GetName: unsafe extern "C" fn(*mut *const c_char) -> Status,
    pub GetVersion: unsafe extern "C" fn(*mut *const c_char) -> Status,
    pub GetApiVersion: unsafe extern "C" fn(*mut *const c_char) -> Status,
    pub GetType: unsafe extern "C" fn(*mut i32) -> Status,
    pub GetLastErrorString: unsafe extern "C" fn(*mut *const c_char),
    pub SetLoggingCallback: unsafe extern "C" fn(LogCallback) -> Status,
    pub SetLogLevel: unsafe extern "C" fn(i32) -> Status,
    pub GetAllEngineIds: unsafe extern "C" fn(*mut i64, u32, *mut u32) -> Status,
    pub Create: unsafe extern "C" fn(*mut Handle) -> Status,
    pub Destroy: unsafe extern "C" fn(Handle) -> Status,
    pub SetStream: unsafe extern "C" fn(Handle, *mut c_void) -> Status,
    pub GetApplicableEngineIds:
        unsafe extern "C" fn(Handle, *const ConstData, *mut i64, u32, *mut u32) -> Status,
    pub GetEngineDetails:
        unsafe extern "C" fn(Handle, i64, *const ConstData, *mut ConstData) -> Status,
    pub DestroyEngineDetails: unsafe extern "C" fn(Handle, *mut ConstData) -> Status,
    pub GetWorkspaceSize:
        unsafe extern "C" fn(Handle, *const ConstData, *const ConstData, *mut usize) -> Status,
    pub CreateExecutionContext:
        unsafe extern "C" fn(Handle, *const ConstData, *const ConstData, *mut Context) -> Status,
    pub DestroyExecutionContext: unsafe extern "C" fn(Handle, Context) -> Status,
    pub GetWorkspaceSizeFromExecutionContext:
        unsafe extern "C" fn(Handle, Context, *mut usize) -> Status,
    pub ExecuteOpGraph:
        unsafe extern "C" fn(Handle, Context, *mut c_void, *const DeviceBuffer, u32) -> Status,
    pub GetEngineName: unsafe extern "C" fn(i64, *mut *const c_char) -> Status,
}

/// The cdylib cargo built for this test run. Cargo writes it to `<target>/<profile>/deps/`, the
/// folder of this test executable, and copies it one level up only for `cargo build`; the copy
/// may be stale, so the `deps/` file wins.
pub fn plugin_path() -> PathBuf {
    const FILE: &str = "libhipdnn_provider_ragged_sdpa.so";
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("test executable has a folder");
    let fresh = deps.join(FILE);
    if fresh.exists() {
        return fresh;
    }
    deps.parent()
        .map_or(fresh.clone(), |profile| profile.join(FILE))
}

pub fn plugin() -> &'static Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        // On a machine with a GPU runtime the host engine is listed only on request; these tests
        // bind host buffers, so they ask for it, as the host shim does.
        // SAFETY: runs once, before this process loads the plugin (the only reader of the
        // variable); other test threads wait on this OnceLock and do not touch the environment.
        unsafe { std::env::set_var("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1") };
        let path = plugin_path();
        // SAFETY: loading the plugin under test; its initialisers are Rust statics only.
        let lib = unsafe { libloading::Library::new(&path) }
            .unwrap_or_else(|e| panic!("cannot load {}: {e}", path.display()));
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field types above are the C signatures of plugin-abi.md §4.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .unwrap_or_else(|e| panic!("symbol {}: {e}", $name))
            };
        }
        Plugin {
            GetName: sym!("hipdnnPluginGetName"),
            GetVersion: sym!("hipdnnPluginGetVersion"),
            GetApiVersion: sym!("hipdnnPluginGetApiVersion"),
            GetType: sym!("hipdnnPluginGetType"),
            GetLastErrorString: sym!("hipdnnPluginGetLastErrorString"),
            SetLoggingCallback: sym!("hipdnnPluginSetLoggingCallback"),
            SetLogLevel: sym!("hipdnnPluginSetLogLevel"),
            GetAllEngineIds: sym!("hipdnnEnginePluginGetAllEngineIds"),
            Create: sym!("hipdnnEnginePluginCreate"),
            Destroy: sym!("hipdnnEnginePluginDestroy"),
            SetStream: sym!("hipdnnEnginePluginSetStream"),
            GetApplicableEngineIds: sym!("hipdnnEnginePluginGetApplicableEngineIds"),
            GetEngineDetails: sym!("hipdnnEnginePluginGetEngineDetails"),
            DestroyEngineDetails: sym!("hipdnnEnginePluginDestroyEngineDetails"),
            GetWorkspaceSize: sym!("hipdnnEnginePluginGetWorkspaceSize"),
            CreateExecutionContext: sym!("hipdnnEnginePluginCreateExecutionContext"),
            DestroyExecutionContext: sym!("hipdnnEnginePluginDestroyExecutionContext"),
            GetWorkspaceSizeFromExecutionContext: sym!(
                "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext"
            ),
            ExecuteOpGraph: sym!("hipdnnEnginePluginExecuteOpGraph"),
            GetEngineName: sym!("hipdnnEnginePluginGetEngineName"),
            _lib: lib,
        }
    })
}

/// This thread's last error text.
pub fn last_error() -> String {
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: valid out-pointer.
    unsafe { (plugin().GetLastErrorString)(&mut text) };
    assert!(!text.is_null(), "GetLastErrorString must never yield NULL");
    // SAFETY: the plugin returns a NUL-terminated string valid until the next failure here.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// A live plugin handle, destroyed on drop.
pub struct OwnedHandle(pub Handle);

impl OwnedHandle {
    pub fn new() -> OwnedHandle {
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let status = unsafe { (plugin().Create)(&mut handle) };
        assert_eq!(status, SUCCESS, "{}", last_error());
        assert!(!handle.is_null());
        OwnedHandle(handle)
    }
}

impl Drop for OwnedHandle {
    fn drop(&mut self) {
        // SAFETY: a handle from Create, destroyed once.
        let status = unsafe { (plugin().Destroy)(self.0) };
        assert_eq!(status, SUCCESS);
    }
}

/// `CreateExecutionContext` that must succeed; panics with the plugin's message otherwise.
pub fn create_context(handle: &OwnedHandle, config: &[u8], graph: &[u8]) -> Context {
    let (c, g) = (ConstData::of(config), ConstData::of(graph));
    let mut context: Context = std::ptr::null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { (plugin().CreateExecutionContext)(handle.0, &c, &g, &mut context) };
    assert_eq!(status, SUCCESS, "{}", last_error());
    context
}

/// `DestroyExecutionContext` of a live context of `handle`, which must succeed.
pub fn destroy_context(handle: &OwnedHandle, context: Context) {
    // SAFETY: the caller passes a live context of this handle, destroyed once.
    let status = unsafe { (plugin().DestroyExecutionContext)(handle.0, context) };
    assert_eq!(status, SUCCESS);
}

/// A context for a graph, destroyed on drop.
pub struct OwnedContext<'h> {
    pub handle: &'h OwnedHandle,
    pub context: Context,
}

impl<'h> OwnedContext<'h> {
    pub fn new(handle: &'h OwnedHandle, config: &[u8], graph: &[u8]) -> Self {
        let context = create_context(handle, config, graph);
        OwnedContext { handle, context }
    }

    /// Executes with no workspace; every pointer in `pack` must be a live buffer of its
    /// tensor's extent (host memory, or device memory the plugin can reach).
    pub fn execute(&self, pack: &[DeviceBuffer]) -> Status {
        // SAFETY: the context is live; the pack's pointers are the caller's promise above.
        unsafe { execute(self.handle.0, self.context, pack) }
    }
}

impl Drop for OwnedContext<'_> {
    fn drop(&mut self) {
        destroy_context(self.handle, self.context);
    }
}

/// `ExecuteOpGraph` with no workspace (the host engine needs none), over a whole pack.
///
/// # Safety
/// `handle` and `context` are live and belong together, and every pointer in `pack` is valid
/// for its tensor's extent.
pub unsafe fn execute(handle: Handle, context: Context, pack: &[DeviceBuffer]) -> Status {
    // SAFETY: the caller's promise; pointer and length describe the one slice.
    unsafe {
        (plugin().ExecuteOpGraph)(
            handle,
            context,
            std::ptr::null_mut(),
            pack.as_ptr(),
            pack.len() as u32,
        )
    }
}

/// `GetApplicableEngineIds` → (status, ids).
pub fn applicable(handle: &OwnedHandle, graph: &[u8]) -> (Status, Vec<i64>) {
    let data = ConstData::of(graph);
    let mut ids = [0i64; 8];
    let mut n = u32::MAX;
    // SAFETY: valid pointers and capacity.
    let status =
        unsafe { (plugin().GetApplicableEngineIds)(handle.0, &data, ids.as_mut_ptr(), 8, &mut n) };
    if status != SUCCESS {
        assert_eq!(n, u32::MAX, "num_engines written on failure");
        return (status, Vec::new());
    }
    (status, ids[..n as usize].to_vec())
}
