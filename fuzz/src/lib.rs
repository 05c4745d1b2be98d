//! What the fuzz targets share: one long-lived handle, and the calls of every entry point that
//! takes a graph, each checked for INTERNAL_ERROR (which counts as a crash: a caller's bytes are
//! never an internal error).

pub mod context;
pub mod mutate;

use std::ffi::{CStr, c_char};
use std::sync::OnceLock;

use hipdnn_provider_ragged_sdpa::abi::types::{
    ConstData, ExecutionContextHandle, PluginHandle, Status,
};
use hipdnn_provider_ragged_sdpa::exports::{base, engine};

/// `RAGGED_SDPA_HOST_REFERENCE`.
pub const HOST_ENGINE: i64 = 8202884889727546333;

/// The golden engine config (host engine), next to the golden graph.
pub const ENGINE_CONFIG: &[u8] = include_bytes!("../../plugin/tests/golden/engine_config.bin");

/// This thread's last error text.
pub fn last_error() -> String {
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: one pointer write into a local.
    unsafe { base::hipdnnPluginGetLastErrorString(&mut text) };
    if text.is_null() {
        return "(NULL)".into();
    }
    // SAFETY: the plugin returns a NUL-terminated per-thread buffer.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// Panics (a crash for libFuzzer) if `status` is INTERNAL_ERROR.
pub fn no_internal_error(function: &str, status: Status) -> Status {
    assert_ne!(
        status,
        Status::INTERNAL_ERROR,
        "{function} returned INTERNAL_ERROR: {}",
        last_error()
    );
    status
}

/// One handle for the whole run (the worker pool would otherwise restart per input).
pub fn handle() -> PluginHandle {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        let mut handle: PluginHandle = std::ptr::null_mut();
        // SAFETY: one pointer write into a local.
        let status = unsafe { engine::hipdnnEnginePluginCreate(&mut handle) };
        assert_eq!(status, Status::SUCCESS, "Create: {}", last_error());
        handle as usize
    }) as PluginHandle
}

fn const_data(bytes: &[u8]) -> ConstData {
    ConstData {
        ptr: bytes.as_ptr().cast(),
        size: bytes.len(),
    }
}

/// `bytes` as the graph of GetApplicableEngineIds, GetEngineDetails, GetWorkspaceSize and
/// CreateExecutionContext (then the context's workspace query and destroy). The override and
/// serialized-context entry points are not exported by this plugin version. Returns whether the
/// host engine was offered.
pub fn every_graph_entry_point(bytes: &[u8]) -> bool {
    let h = handle();
    let graph = const_data(bytes);
    let config = const_data(ENGINE_CONFIG);
    let mut ids = [0i64; 8];
    let mut count = 0u32;
    // SAFETY: every pointer is to a local valid for the write it gets; `graph` describes `bytes`.
    let status = unsafe {
        engine::hipdnnEnginePluginGetApplicableEngineIds(h, &graph, ids.as_mut_ptr(), 8, &mut count)
    };
    no_internal_error("GetApplicableEngineIds", status);
    let offered = status == Status::SUCCESS && ids[..count.min(8) as usize].contains(&HOST_ENGINE);

    let mut details = ConstData {
        ptr: std::ptr::null(),
        size: 0,
    };
    // SAFETY: as above.
    let status =
        unsafe { engine::hipdnnEnginePluginGetEngineDetails(h, HOST_ENGINE, &graph, &mut details) };
    no_internal_error("GetEngineDetails", status);
    assert_eq!(
        status == Status::SUCCESS,
        offered,
        "GetEngineDetails and GetApplicableEngineIds disagree: {}",
        last_error()
    );
    if status == Status::SUCCESS {
        // SAFETY: `details` is what GetEngineDetails lent.
        let status = unsafe { engine::hipdnnEnginePluginDestroyEngineDetails(h, &mut details) };
        assert_eq!(
            status,
            Status::SUCCESS,
            "DestroyEngineDetails: {}",
            last_error()
        );
    }

    let mut workspace = 0usize;
    // SAFETY: as above.
    let status =
        unsafe { engine::hipdnnEnginePluginGetWorkspaceSize(h, &config, &graph, &mut workspace) };
    no_internal_error("GetWorkspaceSize", status);

    let mut context: ExecutionContextHandle = std::ptr::null_mut();
    // SAFETY: as above.
    let status = unsafe {
        engine::hipdnnEnginePluginCreateExecutionContext(h, &config, &graph, &mut context)
    };
    no_internal_error("CreateExecutionContext", status);
    if status == Status::SUCCESS {
        let mut from_context = 0usize;
        // SAFETY: `context` is live.
        let status = unsafe {
            engine::hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
                h,
                context,
                &mut from_context,
            )
        };
        assert_eq!(status, Status::SUCCESS, "{}", last_error());
        assert_eq!(from_context, workspace, "workspace sizes disagree");
        // SAFETY: `context` is live and destroyed once.
        let status = unsafe { engine::hipdnnEnginePluginDestroyExecutionContext(h, context) };
        assert_eq!(status, Status::SUCCESS, "{}", last_error());
    }
    offered
}
