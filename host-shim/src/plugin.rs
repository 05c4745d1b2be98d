//! One engine-plugin shared object: opened with `RTLD_NOW | RTLD_LOCAL`, its symbols resolved into
//! typed function pointers (required ones fail the load, optional ones are `None`), and safe
//! wrappers that turn every non-success status into the backend's `Failed to …` error.
//!
//! The raw pointers stay public ([`BaseApi`], [`EngineApi`]) because the ABI suite must be able to
//! call them with deliberately bad arguments.

use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use crate::abi::{self, ConstData, DeviceBuffer, Status, symbols};
use crate::host_error::HostError;

#[path = "plugin_optional.rs"]
pub mod optional;

/// The base functions of `PluginApi.h`.
#[derive(Clone, Copy)]
pub struct BaseApi {
    pub get_name: abi::GetStringFn,
    pub get_version: abi::GetStringFn,
    pub get_type: abi::GetTypeFn,
    pub get_last_error_string: abi::GetLastErrorStringFn,
    pub get_api_version: Option<abi::GetStringFn>,
    pub set_logging_callback: Option<abi::SetLoggingCallbackFn>,
    pub set_log_level: Option<abi::SetLogLevelFn>,
}

/// The engine functions of `EnginePluginApi.h`.
#[derive(Clone, Copy)]
pub struct EngineApi {
    pub get_all_engine_ids: abi::GetAllEngineIdsFn,
    pub create: abi::CreateFn,
    pub destroy: abi::DestroyFn,
    pub set_stream: abi::SetStreamFn,
    pub get_applicable_engine_ids: abi::GetApplicableEngineIdsFn,
    pub get_engine_details: abi::GetEngineDetailsFn,
    pub destroy_engine_details: abi::DestroyEngineDetailsFn,
    pub get_workspace_size: abi::GetWorkspaceSizeFn,
    pub create_execution_context: abi::CreateExecutionContextFn,
    pub destroy_execution_context: abi::DestroyExecutionContextFn,
    pub get_workspace_size_from_execution_context: abi::GetWorkspaceSizeFromExecutionContextFn,
    pub execute_op_graph: abi::ExecuteOpGraphFn,
    pub get_engine_name: Option<abi::GetEngineNameFn>,
    /// Dispatch rule 2 keys off its presence; [`optional`] calls it for non-empty overrides.
    pub has_execute_with_overrides: bool,
    pub execute_op_graph_with_overrides: Option<abi::ExecuteOpGraphWithOverridesFn>,
    /// True only when all three serialization entry points are exported.
    pub supports_context_serialization: bool,
    pub serialization: Option<SerializationApi>,
}

/// The serialization trio (RFC 0009), resolved only together.
#[derive(Clone, Copy)]
pub struct SerializationApi {
    pub serialize: abi::SerializeExecutionContextFn,
    pub destroy_serialized: abi::DestroySerializedExecutionContextFn,
    pub create_from_serialized: abi::CreateExecutionContextFromSerializedFn,
}

/// An opened library whose base symbols are resolved.
pub struct OpenedLibrary {
    path: PathBuf,
    base: BaseApi,
    library: Library,
}

/// Which optional base symbols were absent, for the INFO lines the backend prints.
pub struct MissingOptional(pub Vec<&'static str>);

impl OpenedLibrary {
    /// Load step 2 (`dlopen` with `RTLD_NOW`) and step 4 (base symbols).
    pub fn open(path: &Path) -> Result<(OpenedLibrary, MissingOptional), HostError> {
        // SAFETY: loading a library runs its initialisers; that is the whole point of a plugin
        // host, and the caller chose the path. RTLD_NOW makes unresolved references fail here
        // instead of at first call.
        let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
            HostError::Open {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        })?;
        let mut missing = Vec::new();
        let base = {
            let req = Resolver {
                library: &library,
                path,
            };
            BaseApi {
                get_name: req.required(symbols::GET_NAME)?,
                get_version: req.required(symbols::GET_VERSION)?,
                get_type: req.required(symbols::GET_TYPE)?,
                get_last_error_string: req.required(symbols::GET_LAST_ERROR_STRING)?,
                get_api_version: req.optional(symbols::GET_API_VERSION, &mut missing),
                set_logging_callback: req.optional(symbols::SET_LOGGING_CALLBACK, &mut missing),
                set_log_level: req.optional(symbols::SET_LOG_LEVEL, &mut missing),
            }
        };
        Ok((
            OpenedLibrary {
                path: path.to_path_buf(),
                base,
                library,
            },
            MissingOptional(missing),
        ))
    }

    pub fn base(&self) -> &BaseApi {
        &self.base
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the dynamic symbol table holds `symbol` (used by the ABI suite's hygiene check).
    pub fn exports(&self, symbol: &str) -> bool {
        let name = format!("{symbol}\0");
        // SAFETY: only the address is looked up; it is never called through this type.
        unsafe { self.library.get::<*const c_void>(name.as_bytes()) }.is_ok()
    }

    /// Load step 5: resolve the engine symbols.
    pub fn resolve_engine(self) -> Result<Plugin, HostError> {
        let engine = {
            let req = Resolver {
                library: &self.library,
                path: &self.path,
            };
            let mut ignored = Vec::new();
            let serialization = [
                symbols::SERIALIZE_EXECUTION_CONTEXT,
                symbols::DESTROY_SERIALIZED_EXECUTION_CONTEXT,
                symbols::CREATE_EXECUTION_CONTEXT_FROM_SERIALIZED,
            ];
            EngineApi {
                get_all_engine_ids: req.required(symbols::GET_ALL_ENGINE_IDS)?,
                create: req.required(symbols::CREATE)?,
                destroy: req.required(symbols::DESTROY)?,
                set_stream: req.required(symbols::SET_STREAM)?,
                get_applicable_engine_ids: req.required(symbols::GET_APPLICABLE_ENGINE_IDS)?,
                get_engine_details: req.required(symbols::GET_ENGINE_DETAILS)?,
                destroy_engine_details: req.required(symbols::DESTROY_ENGINE_DETAILS)?,
                get_workspace_size: req.required(symbols::GET_WORKSPACE_SIZE)?,
                create_execution_context: req.required(symbols::CREATE_EXECUTION_CONTEXT)?,
                destroy_execution_context: req.required(symbols::DESTROY_EXECUTION_CONTEXT)?,
                get_workspace_size_from_execution_context: req
                    .required(symbols::GET_WORKSPACE_SIZE_FROM_EXECUTION_CONTEXT)?,
                execute_op_graph: req.required(symbols::EXECUTE_OP_GRAPH)?,
                get_engine_name: req.optional(symbols::GET_ENGINE_NAME, &mut ignored),
                has_execute_with_overrides: self.exports(symbols::EXECUTE_OP_GRAPH_WITH_OVERRIDES),
                execute_op_graph_with_overrides: req
                    .lookup(symbols::EXECUTE_OP_GRAPH_WITH_OVERRIDES),
                supports_context_serialization: serialization.iter().all(|s| self.exports(s)),
                serialization: match (
                    req.lookup(symbols::SERIALIZE_EXECUTION_CONTEXT),
                    req.lookup(symbols::DESTROY_SERIALIZED_EXECUTION_CONTEXT),
                    req.lookup(symbols::CREATE_EXECUTION_CONTEXT_FROM_SERIALIZED),
                ) {
                    (Some(serialize), Some(destroy_serialized), Some(create_from_serialized)) => {
                        Some(SerializationApi {
                            serialize,
                            destroy_serialized,
                            create_from_serialized,
                        })
                    }
                    _ => None,
                },
            }
        };
        Ok(Plugin {
            opened: self,
            engine,
        })
    }
}

struct Resolver<'a> {
    library: &'a Library,
    path: &'a Path,
}

impl Resolver<'_> {
    fn required<T: Copy>(&self, symbol: &'static str) -> Result<T, HostError> {
        self.lookup(symbol).ok_or_else(|| HostError::MissingSymbol {
            path: self.path.to_path_buf(),
            symbol,
        })
    }

    fn optional<T: Copy>(
        &self,
        symbol: &'static str,
        missing: &mut Vec<&'static str>,
    ) -> Option<T> {
        let found = self.lookup(symbol);
        if found.is_none() {
            missing.push(symbol);
        }
        found
    }

    /// `T` is always one of the `abi::*Fn` types, whose signature is the one hipDNN's headers give
    /// the symbol of the same name.
    fn lookup<T: Copy>(&self, symbol: &'static str) -> Option<T> {
        let name = format!("{symbol}\0");
        // SAFETY: the caller pairs each symbol name with its C signature from plugin-abi.md §4;
        // the copied function pointer is only used while `Plugin` keeps the library loaded.
        unsafe { self.library.get::<T>(name.as_bytes()) }
            .ok()
            .map(|s| *s)
    }
}

/// A loaded engine plugin: both symbol tables resolved, library kept open for as long as the
/// value lives.
pub struct Plugin {
    opened: OpenedLibrary,
    engine: EngineApi,
}

impl Plugin {
    pub fn path(&self) -> &Path {
        &self.opened.path
    }

    pub fn base(&self) -> &BaseApi {
        &self.opened.base
    }

    pub fn engine(&self) -> &EngineApi {
        &self.engine
    }

    pub fn exports(&self, symbol: &str) -> bool {
        self.opened.exports(symbol)
    }

    pub fn base_calls(&self) -> BaseCalls<'_> {
        BaseCalls(&self.opened.base)
    }

    /// `GetAllEngineIds`, first call: the count only.
    pub fn engine_count(&self) -> Result<u32, HostError> {
        let mut n = 0u32;
        // SAFETY: NULL buffer with max 0 is the documented count query; `n` is a valid out-pointer.
        let status = unsafe { (self.engine.get_all_engine_ids)(std::ptr::null_mut(), 0, &mut n) };
        self.base_calls().check("get number of engines", status)?;
        Ok(n)
    }

    /// `GetAllEngineIds`, second call with a buffer of `capacity`; returns the ids written.
    pub fn engine_ids(&self, capacity: u32) -> Result<Vec<i64>, HostError> {
        let mut ids = vec![0i64; capacity as usize];
        let mut written = 0u32;
        // SAFETY: `ids` has `capacity` slots; `written` is a valid out-pointer.
        let status =
            unsafe { (self.engine.get_all_engine_ids)(ids.as_mut_ptr(), capacity, &mut written) };
        self.base_calls().check("get all engine IDs", status)?;
        if written != capacity {
            return Err(HostError::EngineCountMismatch {
                reported: capacity,
                returned: written,
            });
        }
        ids.truncate(written as usize);
        Ok(ids)
    }

    /// `GetEngineName`: `Ok(Some)` on SUCCESS with a non-empty name, `Ok(None)` for
    /// NOT_APPLICABLE or an empty/NULL name; any other status is an error.
    pub fn engine_name(&self, engine_id: i64) -> Option<Result<Option<String>, HostError>> {
        let get = self.engine.get_engine_name?;
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: `name` is a valid out-pointer; the function takes no handle.
        let status = Status(unsafe { get(engine_id, &mut name) });
        Some(match status {
            Status::SUCCESS => Ok(copy_c_string(name).filter(|s| !s.is_empty())),
            Status::NOT_APPLICABLE => Ok(None),
            other => Err(self.base_calls().error("get engine name", other)),
        })
    }

    /// `Create`: a handle that is destroyed when dropped.
    pub fn create_handle(&self) -> Result<PluginHandle<'_>, HostError> {
        let mut raw: abi::Handle = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let status = unsafe { (self.engine.create)(&mut raw) };
        self.base_calls()
            .check("create engine plugin handle", status)?;
        if raw.is_null() {
            return Err(HostError::NullHandle {
                description: "hipdnnEnginePluginCreate",
            });
        }
        Ok(PluginHandle { plugin: self, raw })
    }
}

/// The base functions, usable before the engine symbols are resolved.
#[derive(Clone, Copy)]
pub struct BaseCalls<'a>(&'a BaseApi);

impl<'a> BaseCalls<'a> {
    pub fn from_api(api: &'a BaseApi) -> BaseCalls<'a> {
        BaseCalls(api)
    }

    /// The plugin's last-error text for this thread (`"(NULL)"` if it violates the never-NULL rule).
    pub fn last_error(&self) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `text` is a valid out-pointer.
        unsafe { (self.0.get_last_error_string)(&mut text) };
        copy_c_string(text).unwrap_or_else(|| "(NULL)".to_owned())
    }

    pub fn error(&self, description: &'static str, status: Status) -> HostError {
        HostError::PluginCall {
            description,
            status,
            last_error: self.last_error(),
        }
    }

    pub fn check(&self, description: &'static str, status: i32) -> Result<(), HostError> {
        let status = Status(status);
        if status.is_success() {
            Ok(())
        } else {
            Err(self.error(description, status))
        }
    }

    fn string(&self, f: abi::GetStringFn, description: &'static str) -> Result<String, HostError> {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `text` is a valid out-pointer; on success the plugin stores a static string.
        let status = unsafe { f(&mut text) };
        self.check(description, status)?;
        copy_c_string(text).ok_or(HostError::NullString { description })
    }

    pub fn name(&self) -> Result<String, HostError> {
        self.string(self.0.get_name, "get plugin name")
    }

    pub fn version(&self) -> Result<String, HostError> {
        self.string(self.0.get_version, "get plugin version")
    }

    /// `None` when the symbol is not exported.
    pub fn api_version(&self) -> Option<Result<String, HostError>> {
        let f = self.0.get_api_version?;
        Some(self.string(f, "get plugin api version"))
    }

    pub fn plugin_type(&self) -> Result<i32, HostError> {
        let mut t = 0i32;
        // SAFETY: `t` is a valid out-pointer.
        let status = unsafe { (self.0.get_type)(&mut t) };
        self.check("get plugin type", status)?;
        Ok(t)
    }

    /// Registers the host's callback; the status is ignored as the backend ignores it.
    pub fn set_logging_callback(&self, callback: abi::LogCallback) {
        if let Some(f) = self.0.set_logging_callback {
            // SAFETY: the callback is a `'static` function that tolerates any input.
            let _ignored = unsafe { f(Some(callback)) };
        }
    }

    pub fn set_log_level(&self, level: i32) {
        if let Some(f) = self.0.set_log_level {
            // SAFETY: plain integer argument.
            let _ignored = unsafe { f(level) };
        }
    }
}

/// A handle from `hipdnnEnginePluginCreate`, destroyed on drop.
pub struct PluginHandle<'p> {
    plugin: &'p Plugin,
    raw: abi::Handle,
}

impl<'p> PluginHandle<'p> {
    pub fn raw(&self) -> abi::Handle {
        self.raw
    }

    pub fn plugin(&self) -> &'p Plugin {
        self.plugin
    }

    fn api(&self) -> &EngineApi {
        &self.plugin.engine
    }

    fn check(&self, description: &'static str, status: i32) -> Result<(), HostError> {
        self.plugin.base_calls().check(description, status)
    }

    /// # Safety
    /// `stream` must be NULL (the default stream) or a stream of the platform's runtime that stays
    /// valid while work is enqueued on this handle.
    pub unsafe fn set_stream(&self, stream: *mut c_void) -> Result<(), HostError> {
        // SAFETY: a live handle; the stream's validity is this function's contract.
        let status = unsafe { (self.api().set_stream)(self.raw, stream) };
        self.check("set stream for engine plugin handle", status)
    }

    /// `GetApplicableEngineIds` with a buffer of `max_engines`, returning the reported count and
    /// the ids written (the backend checks both).
    pub fn applicable_engine_ids(
        &self,
        op_graph: &[u8],
        max_engines: u32,
    ) -> Result<(u32, Vec<i64>), HostError> {
        let graph = ConstData::borrow(op_graph);
        let mut ids = vec![0i64; max_engines as usize];
        let mut n = 0u32;
        let buffer = if max_engines == 0 {
            std::ptr::null_mut()
        } else {
            ids.as_mut_ptr()
        };
        // SAFETY: live handle; `graph` borrows `op_graph` for the call; `ids` has `max_engines`
        // slots; `n` is a valid out-pointer.
        let status = unsafe {
            (self.api().get_applicable_engine_ids)(self.raw, &graph, buffer, max_engines, &mut n)
        };
        self.check("get applicable engine IDs", status)?;
        ids.truncate(n.min(max_engines) as usize);
        Ok((n, ids))
    }

    /// `GetEngineDetails`, copied out, then `DestroyEngineDetails`; also returns the struct the
    /// destroy call left behind (both fields must be zero).
    pub fn engine_details(
        &self,
        engine_id: i64,
        op_graph: &[u8],
    ) -> Result<(Vec<u8>, ConstData), HostError> {
        let graph = ConstData::borrow(op_graph);
        let mut details = ConstData::empty();
        // SAFETY: live handle, borrowed graph, valid out-struct.
        let status =
            unsafe { (self.api().get_engine_details)(self.raw, engine_id, &graph, &mut details) };
        self.check("get engine details", status)?;
        if details.ptr.is_null() || details.size == 0 {
            return Err(HostError::EmptyBuffer {
                description: "hipdnnEnginePluginGetEngineDetails",
            });
        }
        // SAFETY: the plugin owns `size` readable bytes at `ptr` until DestroyEngineDetails.
        let bytes =
            unsafe { std::slice::from_raw_parts(details.ptr.cast::<u8>(), details.size) }.to_vec();
        // SAFETY: the same struct the plugin filled, handed back once.
        let status = unsafe { (self.api().destroy_engine_details)(self.raw, &mut details) };
        self.check("destroy engine details", status)?;
        Ok((bytes, details))
    }

    pub fn workspace_size(
        &self,
        engine_config: &[u8],
        op_graph: &[u8],
    ) -> Result<usize, HostError> {
        let config = ConstData::borrow(engine_config);
        let graph = ConstData::borrow(op_graph);
        let mut size = 0usize;
        // SAFETY: live handle, borrowed buffers, valid out-pointer.
        let status =
            unsafe { (self.api().get_workspace_size)(self.raw, &config, &graph, &mut size) };
        self.check("get workspace size", status)?;
        Ok(size)
    }

    /// `CreateExecutionContext`; the context is destroyed when dropped. The buffers may be
    /// freed as soon as this returns (the plugin must have copied what it needs).
    pub fn create_execution_context(
        &self,
        engine_config: &[u8],
        op_graph: &[u8],
    ) -> Result<ExecutionContext<'_, 'p>, HostError> {
        let config = ConstData::borrow(engine_config);
        let graph = ConstData::borrow(op_graph);
        let mut raw: abi::ExecutionContext = std::ptr::null_mut();
        // SAFETY: live handle, borrowed buffers, valid out-pointer.
        let status =
            unsafe { (self.api().create_execution_context)(self.raw, &config, &graph, &mut raw) };
        self.check("create execution context", status)?;
        if raw.is_null() {
            return Err(HostError::NullHandle {
                description: "hipdnnEnginePluginCreateExecutionContext",
            });
        }
        Ok(ExecutionContext { handle: self, raw })
    }
}

impl Drop for PluginHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from Create and is destroyed exactly once, here.
        let _status = unsafe { (self.api().destroy)(self.raw) };
    }
}

/// An execution context, destroyed on drop.
pub struct ExecutionContext<'h, 'p> {
    handle: &'h PluginHandle<'p>,
    raw: abi::ExecutionContext,
}

impl ExecutionContext<'_, '_> {
    pub fn raw(&self) -> abi::ExecutionContext {
        self.raw
    }

    pub fn workspace_size(&self) -> Result<usize, HostError> {
        let mut size = 0usize;
        // SAFETY: live handle and context, valid out-pointer.
        let status = unsafe {
            (self.handle.api().get_workspace_size_from_execution_context)(
                self.handle.raw,
                self.raw,
                &mut size,
            )
        };
        self.handle
            .check("get workspace size from execution context", status)?;
        Ok(size)
    }

    /// `ExecuteOpGraph`.
    ///
    /// # Safety
    /// Every pointer in `buffers` (and `workspace`, if non-NULL) must address memory the
    /// selected engine may read and write, sized as the graph's tensors require: host memory for
    /// the host engine, device memory for GPU engines.
    pub unsafe fn execute(
        &self,
        workspace: *mut c_void,
        buffers: &[DeviceBuffer],
    ) -> Result<(), HostError> {
        let count = u32::try_from(buffers.len()).map_err(|_| {
            HostError::Harness(format!(
                "variant pack of {} entries exceeds u32",
                buffers.len()
            ))
        })?;
        // SAFETY: live handle and context; pointer validity is this function's contract.
        let status = unsafe {
            (self.handle.api().execute_op_graph)(
                self.handle.raw,
                self.raw,
                workspace,
                buffers.as_ptr(),
                count,
            )
        };
        self.handle.check("execute op graph", status)
    }
}

impl Drop for ExecutionContext<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: created by CreateExecutionContext on this handle; destroyed exactly once.
        let _status =
            unsafe { (self.handle.api().destroy_execution_context)(self.handle.raw, self.raw) };
    }
}

/// Copies a plugin-owned C string; `None` for NULL.
fn copy_c_string(ptr: *const c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the ABI promises NUL-terminated strings that stay valid at least until the next
    // call into the plugin on this thread; we copy immediately.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}
