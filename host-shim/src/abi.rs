//! The engine-plugin C ABI as the *host* sees it (plugin-abi.md §2–§4): status and type values,
//! the two structs, and one function-pointer type per exported symbol.
//!
//! Every enum that crosses the boundary is a plain `i32`: a plugin may return any value, and an
//! out-of-range one must be reportable, never undefined behaviour.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;

/// `hipdnnPluginStatus_t`, kept as the raw `int` the plugin returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Status(pub i32);

impl Status {
    pub const SUCCESS: Status = Status(0);
    pub const BAD_PARAM: Status = Status(1);
    pub const INVALID_VALUE: Status = Status(2);
    pub const INTERNAL_ERROR: Status = Status(3);
    pub const ALLOC_FAILED: Status = Status(4);
    pub const NOT_APPLICABLE: Status = Status(5);
    pub const NOT_INITIALIZED: Status = Status(6);

    pub fn is_success(self) -> bool {
        self == Status::SUCCESS
    }

    /// The enumerator's spelling; the backend's `toString` is not pinned, so the suite matches
    /// on the numeric value and this is for people reading logs.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "HIPDNN_PLUGIN_STATUS_SUCCESS",
            1 => "HIPDNN_PLUGIN_STATUS_BAD_PARAM",
            2 => "HIPDNN_PLUGIN_STATUS_INVALID_VALUE",
            3 => "HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR",
            4 => "HIPDNN_PLUGIN_STATUS_ALLOC_FAILED",
            5 => "HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE",
            6 => "HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED",
            _ => "HIPDNN_PLUGIN_STATUS_UNKNOWN",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// `HIPDNN_PLUGIN_TYPE_ENGINE`.
pub const PLUGIN_TYPE_ENGINE: i32 = 1;

/// `HIPDNN_PLUGIN_ERROR_STRING_MAX_LENGTH`, NUL included.
pub const ERROR_STRING_MAX_LENGTH: usize = 2048;

/// `hipdnnSeverity_t`.
pub const SEV_INFO: c_int = 0;
pub const SEV_WARN: c_int = 1;
pub const SEV_ERROR: c_int = 2;
pub const SEV_FATAL: c_int = 3;
pub const SEV_OFF: c_int = 4;

/// `hipdnnPluginConstData_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ConstData {
    pub ptr: *const c_void,
    pub size: usize,
}

impl ConstData {
    pub fn empty() -> ConstData {
        ConstData {
            ptr: std::ptr::null(),
            size: 0,
        }
    }

    /// Borrows `bytes`; the struct must not outlive them.
    pub fn borrow(bytes: &[u8]) -> ConstData {
        ConstData {
            ptr: bytes.as_ptr().cast(),
            size: bytes.len(),
        }
    }
}

/// `hipdnnPluginDeviceBuffer_t`: one variant-pack entry.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceBuffer {
    pub uid: i64,
    pub ptr: *mut c_void,
}

pub type Handle = *mut c_void;
pub type ExecutionContext = *mut c_void;
pub type LogCallback = unsafe extern "C" fn(severity: c_int, message: *const c_char);

pub type GetStringFn = unsafe extern "C" fn(out: *mut *const c_char) -> i32;
pub type GetTypeFn = unsafe extern "C" fn(out: *mut i32) -> i32;
pub type GetLastErrorStringFn = unsafe extern "C" fn(out: *mut *const c_char);
pub type SetLoggingCallbackFn = unsafe extern "C" fn(cb: Option<LogCallback>) -> i32;
pub type SetLogLevelFn = unsafe extern "C" fn(level: c_int) -> i32;

pub type GetAllEngineIdsFn =
    unsafe extern "C" fn(engine_ids: *mut i64, max_engines: u32, num_engines: *mut u32) -> i32;
pub type CreateFn = unsafe extern "C" fn(handle: *mut Handle) -> i32;
pub type DestroyFn = unsafe extern "C" fn(handle: Handle) -> i32;
pub type SetStreamFn = unsafe extern "C" fn(handle: Handle, stream: *mut c_void) -> i32;
pub type GetApplicableEngineIdsFn = unsafe extern "C" fn(
    handle: Handle,
    op_graph: *const ConstData,
    engine_ids: *mut i64,
    max_engines: u32,
    num_engines: *mut u32,
) -> i32;
pub type GetEngineDetailsFn = unsafe extern "C" fn(
    handle: Handle,
    engine_id: i64,
    op_graph: *const ConstData,
    engine_details: *mut ConstData,
) -> i32;
pub type DestroyEngineDetailsFn =
    unsafe extern "C" fn(handle: Handle, engine_details: *mut ConstData) -> i32;
pub type GetWorkspaceSizeFn = unsafe extern "C" fn(
    handle: Handle,
    engine_config: *const ConstData,
    op_graph: *const ConstData,
    workspace_size: *mut usize,
) -> i32;
pub type CreateExecutionContextFn = unsafe extern "C" fn(
    handle: Handle,
    engine_config: *const ConstData,
    op_graph: *const ConstData,
    execution_context: *mut ExecutionContext,
) -> i32;
pub type DestroyExecutionContextFn =
    unsafe extern "C" fn(handle: Handle, execution_context: ExecutionContext) -> i32;
pub type GetWorkspaceSizeFromExecutionContextFn = unsafe extern "C" fn(
    handle: Handle,
    execution_context: ExecutionContext,
    workspace_size: *mut usize,
) -> i32;
pub type ExecuteOpGraphFn = unsafe extern "C" fn(
    handle: Handle,
    execution_context: ExecutionContext,
    workspace: *mut c_void,
    device_buffers: *const DeviceBuffer,
    num_device_buffers: u32,
) -> i32;
pub type GetEngineNameFn = unsafe extern "C" fn(engine_id: i64, name: *mut *const c_char) -> i32;
pub type ExecuteOpGraphWithOverridesFn = unsafe extern "C" fn(
    handle: Handle,
    execution_context: ExecutionContext,
    workspace: *mut c_void,
    device_buffers: *const DeviceBuffer,
    num_device_buffers: u32,
    num_overrides: u32,
    override_unique_ids: *const i64,
    override_lengths: *const u32,
    override_shapes: *const *const i64,
    override_strides: *const *const i64,
) -> i32;
pub type SerializeExecutionContextFn = unsafe extern "C" fn(
    handle: Handle,
    execution_context: ExecutionContext,
    serialized_context: *mut ConstData,
) -> i32;
pub type DestroySerializedExecutionContextFn =
    unsafe extern "C" fn(handle: Handle, serialized_context: *mut ConstData) -> i32;
pub type CreateExecutionContextFromSerializedFn = unsafe extern "C" fn(
    handle: Handle,
    serialized_context: *const ConstData,
    execution_context: *mut ExecutionContext,
) -> i32;

/// Symbol names, in the order the backend resolves them.
pub mod symbols {
    pub const GET_NAME: &str = "hipdnnPluginGetName";
    pub const GET_VERSION: &str = "hipdnnPluginGetVersion";
    pub const GET_TYPE: &str = "hipdnnPluginGetType";
    pub const GET_LAST_ERROR_STRING: &str = "hipdnnPluginGetLastErrorString";
    pub const GET_API_VERSION: &str = "hipdnnPluginGetApiVersion";
    pub const SET_LOGGING_CALLBACK: &str = "hipdnnPluginSetLoggingCallback";
    pub const SET_LOG_LEVEL: &str = "hipdnnPluginSetLogLevel";

    pub const GET_ALL_ENGINE_IDS: &str = "hipdnnEnginePluginGetAllEngineIds";
    pub const CREATE: &str = "hipdnnEnginePluginCreate";
    pub const DESTROY: &str = "hipdnnEnginePluginDestroy";
    pub const SET_STREAM: &str = "hipdnnEnginePluginSetStream";
    pub const GET_APPLICABLE_ENGINE_IDS: &str = "hipdnnEnginePluginGetApplicableEngineIds";
    pub const GET_ENGINE_DETAILS: &str = "hipdnnEnginePluginGetEngineDetails";
    pub const DESTROY_ENGINE_DETAILS: &str = "hipdnnEnginePluginDestroyEngineDetails";
    pub const GET_WORKSPACE_SIZE: &str = "hipdnnEnginePluginGetWorkspaceSize";
    pub const CREATE_EXECUTION_CONTEXT: &str = "hipdnnEnginePluginCreateExecutionContext";
    pub const DESTROY_EXECUTION_CONTEXT: &str = "hipdnnEnginePluginDestroyExecutionContext";
    pub const GET_WORKSPACE_SIZE_FROM_EXECUTION_CONTEXT: &str =
        "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext";
    pub const EXECUTE_OP_GRAPH: &str = "hipdnnEnginePluginExecuteOpGraph";

    pub const SERIALIZE_EXECUTION_CONTEXT: &str = "hipdnnEnginePluginSerializeExecutionContext";
    pub const DESTROY_SERIALIZED_EXECUTION_CONTEXT: &str =
        "hipdnnEnginePluginDestroySerializedExecutionContext";
    pub const CREATE_EXECUTION_CONTEXT_FROM_SERIALIZED: &str =
        "hipdnnEnginePluginCreateExecutionContextFromSerialized";
    pub const EXECUTE_OP_GRAPH_WITH_OVERRIDES: &str =
        "hipdnnEnginePluginExecuteOpGraphWithOverrides";
    pub const GET_ENGINE_NAME: &str = "hipdnnEnginePluginGetEngineName";

    /// Every symbol a hipDNN engine plugin may export (plugin-abi.md §4). Anything else in the
    /// dynamic symbol table is a hygiene defect.
    pub const ALL: [&str; 24] = [
        GET_NAME,
        GET_VERSION,
        GET_TYPE,
        GET_LAST_ERROR_STRING,
        GET_API_VERSION,
        SET_LOGGING_CALLBACK,
        SET_LOG_LEVEL,
        GET_ALL_ENGINE_IDS,
        CREATE,
        DESTROY,
        SET_STREAM,
        GET_APPLICABLE_ENGINE_IDS,
        GET_ENGINE_DETAILS,
        DESTROY_ENGINE_DETAILS,
        GET_WORKSPACE_SIZE,
        CREATE_EXECUTION_CONTEXT,
        DESTROY_EXECUTION_CONTEXT,
        GET_WORKSPACE_SIZE_FROM_EXECUTION_CONTEXT,
        EXECUTE_OP_GRAPH,
        SERIALIZE_EXECUTION_CONTEXT,
        DESTROY_SERIALIZED_EXECUTION_CONTEXT,
        CREATE_EXECUTION_CONTEXT_FROM_SERIALIZED,
        EXECUTE_OP_GRAPH_WITH_OVERRIDES,
        GET_ENGINE_NAME,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    mod header {
        const HEADER_DIR_FROM_MANIFEST: &str = "../plugin/include";
        include!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin/tests/c/abi_layout.rs"
        ));
    }

    #[test]
    fn structs_have_the_lp64_layout_of_plugin_abi_3_3() {
        assert_eq!(size_of::<ConstData>(), 16);
        assert_eq!(align_of::<ConstData>(), 8);
        assert_eq!(offset_of!(ConstData, size), 8);
        assert_eq!(size_of::<DeviceBuffer>(), 16);
        assert_eq!(offset_of!(DeviceBuffer, ptr), 8);
    }

    /// Everything the host reads or writes across the boundary, as the C compiler sees it in
    /// plugin/include/hipdnn_engine_plugin.h.
    fn host_facts() -> Vec<header::Fact> {
        use header::{align_of as c_align, offset_of as c_offset, size_of as c_size, value};
        let mut facts = vec![
            c_size("hipdnnPluginConstData_t", size_of::<ConstData>()),
            c_align("hipdnnPluginConstData_t", align_of::<ConstData>()),
            c_offset("hipdnnPluginConstData_t", "ptr", offset_of!(ConstData, ptr)),
            c_offset(
                "hipdnnPluginConstData_t",
                "size",
                offset_of!(ConstData, size),
            ),
            c_size("hipdnnPluginDeviceBuffer_t", size_of::<DeviceBuffer>()),
            c_align("hipdnnPluginDeviceBuffer_t", align_of::<DeviceBuffer>()),
            c_offset(
                "hipdnnPluginDeviceBuffer_t",
                "uid",
                offset_of!(DeviceBuffer, uid),
            ),
            c_offset(
                "hipdnnPluginDeviceBuffer_t",
                "ptr",
                offset_of!(DeviceBuffer, ptr),
            ),
            c_size("hipdnnPluginStatus_t", size_of::<Status>()),
            c_size("hipdnnPluginType_t", size_of::<i32>()),
            c_size("hipdnnSeverity_t", size_of::<c_int>()),
            c_size("hipdnnEnginePluginHandle_t", size_of::<Handle>()),
            c_size(
                "hipdnnEnginePluginExecutionContext_t",
                size_of::<ExecutionContext>(),
            ),
            c_size("hipdnnCallback_t", size_of::<Option<LogCallback>>()),
            value("HIPDNN_PLUGIN_TYPE_ENGINE", PLUGIN_TYPE_ENGINE),
            value(
                "HIPDNN_PLUGIN_ERROR_STRING_MAX_LENGTH",
                ERROR_STRING_MAX_LENGTH,
            ),
            value("HIPDNN_SEV_INFO", SEV_INFO),
            value("HIPDNN_SEV_WARN", SEV_WARN),
            value("HIPDNN_SEV_ERROR", SEV_ERROR),
            value("HIPDNN_SEV_FATAL", SEV_FATAL),
            value("HIPDNN_SEV_OFF", SEV_OFF),
        ];
        for status in 0..=6 {
            facts.push(value(Status(status).name(), status));
        }
        facts
    }

    #[test]
    fn host_types_match_the_c_header() {
        header::assert_matches_header("host-shim-abi", &host_facts());
    }

    #[test]
    fn a_fact_that_disagrees_with_the_header_is_reported_by_name() {
        let wrong = [header::value("HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE", 4)];
        let err = header::check_against_header("host-shim-abi-wrong", &wrong)
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("header and Rust disagree: HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE == 4"),
            "{err}"
        );
    }

    #[test]
    fn status_display_carries_name_and_number() {
        assert_eq!(
            Status::NOT_APPLICABLE.to_string(),
            "HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE(5)"
        );
        assert_eq!(Status(42).to_string(), "HIPDNN_PLUGIN_STATUS_UNKNOWN(42)");
    }
}
