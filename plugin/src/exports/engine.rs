//! The engine-plugin functions (`EnginePluginApi.h`): the 12 the loader requires plus
//! `GetEngineName` (API 1.4.0). `ExecuteOpGraphWithOverrides` and the serialization trio live
//! in [`super::overrides`] and [`super::serialization`].
//!
//! Each export only checks and converts its arguments, then calls the module that does the work;
//! outputs are written as the last step, so a failing call leaves them untouched.

use std::ffi::{c_char, c_void};

use crate::abi::boundary::ffi_boundary;
use crate::abi::pointers::{self, IdSink, InOut, Out, const_data};
use crate::abi::types::{
    ConstData, DeviceBuffer, ExecutionContextHandle, HipStream, PluginHandle, Status,
};
use crate::error::PluginError;
use crate::execution_context::{CONTEXTS, ExecutionContext};
use crate::handle::{EngineHandle, HANDLES};
use crate::lent::{self, Kind};
use crate::registry::Lease;
use crate::{applicability, engine_config, engine_details, engines};
use ragged_core::tensor::extent::check_workspace;

/// Two-call protocol: `(NULL, 0, &n)` reports the count; `(buf, n, &m)` writes up to `n` ids.
///
/// # Safety
/// `engine_ids` is NULL or valid for `max_engines` writes; `num_engines` is NULL or valid for one
/// write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetAllEngineIds(
    engine_ids: *mut i64,
    max_engines: u32,
    num_engines: *mut u32,
) -> Status {
    ffi_boundary("hipdnnEnginePluginGetAllEngineIds", || {
        // SAFETY: forwarded caller contract.
        let count = unsafe { Out::new(num_engines, "num_engines") }?;
        // SAFETY: forwarded caller contract.
        let sink = unsafe { IdSink::new(engine_ids, max_engines) }?;
        let ids: Vec<i64> = engines::listed().iter().map(|e| e.id).collect();
        write_ids(sink, count, &ids, Report::Written);
        Ok(())
    })
}

/// Creates a new handle (one per hipDNN handle).
///
/// # Safety
/// `handle` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginCreate(handle: *mut PluginHandle) -> Status {
    ffi_boundary("hipdnnEnginePluginCreate", || {
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(handle, "handle") }?;
        let key = HANDLES.insert(EngineHandle::default())?;
        out.write(key as PluginHandle);
        Ok(())
    })
}

/// Destroys a handle once every call still running on it has returned. EngineDetails buffers
/// it lent stay valid until each is returned through `DestroyEngineDetails`. Destroying the last handle stops the worker pool, so that
/// `dlclose` can unmap the library.
///
/// # Safety
/// Always safe: the handle is looked up, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginDestroy(handle: PluginHandle) -> Status {
    ffi_boundary("hipdnnEnginePluginDestroy", || {
        non_null(handle, "handle")?;
        HANDLES.remove(handle as usize)?;
        if HANDLES.is_empty() {
            crate::handle::last_handle_destroyed();
        }
        Ok(())
    })
}

/// Stores the stream later work on this handle is enqueued on.
///
/// # Safety
/// Always safe: the handle is looked up, the stream only stored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginSetStream(
    handle: PluginHandle,
    stream: HipStream,
) -> Status {
    ffi_boundary("hipdnnEnginePluginSetStream", || {
        lookup_handle(handle)?.set_stream(stream);
        Ok(())
    })
}

/// Decides which listed engines run `op_graph`. Unsupported graphs are declined with SUCCESS and
/// 0 engines; a buffer that is not a graph at all is BAD_PARAM (issue 4 overrides schema.md §11).
///
/// # Safety
/// `op_graph` is NULL or a valid `ConstData` describing readable bytes; `engine_ids` is NULL or
/// valid for `max_engines` writes; `num_engines` is NULL or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetApplicableEngineIds(
    handle: PluginHandle,
    op_graph: *const ConstData,
    engine_ids: *mut i64,
    max_engines: u32,
    num_engines: *mut u32,
) -> Status {
    ffi_boundary("hipdnnEnginePluginGetApplicableEngineIds", || {
        let _handle = lookup_handle(handle)?;
        // SAFETY: forwarded caller contract.
        let graph = unsafe { const_data(op_graph, "op_graph") }?;
        // SAFETY: forwarded caller contract.
        let sink = unsafe { IdSink::new(engine_ids, max_engines) }?;
        // SAFETY: forwarded caller contract.
        let count = unsafe { Out::new(num_engines, "num_engines") }?;
        let ids = applicability::applicable_engine_ids(graph)?;
        write_ids(sink, count, &ids, Report::Total);
        Ok(())
    })
}

/// Builds an EngineDetails buffer the plugin owns until `DestroyEngineDetails`.
///
/// # Safety
/// `op_graph` is NULL or a valid `ConstData` describing readable bytes; `engine_details` is NULL
/// or valid for one `ConstData` write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetEngineDetails(
    handle: PluginHandle,
    engine_id: i64,
    op_graph: *const ConstData,
    engine_details: *mut ConstData,
) -> Status {
    ffi_boundary("hipdnnEnginePluginGetEngineDetails", || {
        let handle_key = handle as usize;
        let _handle = lookup_handle(handle)?;
        // SAFETY: forwarded caller contract.
        let graph = unsafe { const_data(op_graph, "op_graph") }?;
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(engine_details, "engine_details") }?;
        let engine = engines::find(engine_id).ok_or(PluginError::UnknownEngine { engine_id })?;
        applicability::require(engine, graph)?;
        let (ptr, size) = lent::lend(
            Kind::EngineDetails,
            handle_key,
            engine_details::encode(engine),
        );
        out.write(ConstData {
            ptr: ptr.cast::<c_void>(),
            size,
        });
        Ok(())
    })
}

/// Frees a buffer from `GetEngineDetails` and zeroes the struct.
///
/// # Safety
/// `engine_details` is NULL or valid for reads and writes of one `ConstData`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginDestroyEngineDetails(
    handle: PluginHandle,
    engine_details: *mut ConstData,
) -> Status {
    ffi_boundary("hipdnnEnginePluginDestroyEngineDetails", || {
        // The lending handle may be destroyed already: its buffers stay the caller's until
        // returned here (see lent.rs), so only the buffer is looked up.
        non_null(handle, "handle")?;
        // SAFETY: forwarded caller contract.
        let slot = unsafe { InOut::new(engine_details, "engine_details") }?;
        let buffer = *slot.get();
        lent::give_back(
            Kind::EngineDetails,
            handle as usize,
            buffer.ptr as usize,
            buffer.size,
        )?;
        slot.write(ConstData {
            ptr: std::ptr::null(),
            size: 0,
        });
        Ok(())
    })
}

/// Workspace bytes the engine in `engine_config` needs for `op_graph`.
///
/// # Safety
/// `engine_config` and `op_graph` are NULL or valid `ConstData` describing readable bytes;
/// `workspace_size` is NULL or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetWorkspaceSize(
    handle: PluginHandle,
    engine_config: *const ConstData,
    op_graph: *const ConstData,
    workspace_size: *mut usize,
) -> Status {
    ffi_boundary("hipdnnEnginePluginGetWorkspaceSize", || {
        let _handle = lookup_handle(handle)?;
        // SAFETY: forwarded caller contract.
        let config = unsafe { const_data(engine_config, "engine_config") }?;
        // SAFETY: forwarded caller contract.
        let graph = unsafe { const_data(op_graph, "op_graph") }?;
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(workspace_size, "workspace_size") }?;
        let (_, planned) = applicability::require(engine_config::decode(config)?, graph)?;
        out.write(checked_workspace_bytes(planned.workspace_size())?);
        Ok(())
    })
}

/// Builds an execution context that owns copies of everything it needs, so the backend may free
/// the config and graph buffers on return.
///
/// # Safety
/// `engine_config` and `op_graph` are NULL or valid `ConstData` describing readable bytes;
/// `execution_context` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginCreateExecutionContext(
    handle: PluginHandle,
    engine_config: *const ConstData,
    op_graph: *const ConstData,
    execution_context: *mut ExecutionContextHandle,
) -> Status {
    ffi_boundary("hipdnnEnginePluginCreateExecutionContext", || {
        let handle = lookup_handle(handle)?;
        // SAFETY: forwarded caller contract.
        let config = unsafe { const_data(engine_config, "engine_config") }?;
        // SAFETY: forwarded caller contract.
        let graph = unsafe { const_data(op_graph, "op_graph") }?;
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(execution_context, "execution_context") }?;
        let context = ExecutionContext::build(engine_config::decode(config)?, graph)?;
        checked_workspace(&context)?;
        // SAFETY: the handle's stream is NULL or live (hipDNN's SetStream contract).
        unsafe { context.prepare(handle.stream()) }?;
        out.write(CONTEXTS.insert(context)? as ExecutionContextHandle);
        Ok(())
    })
}

/// Destroys an execution context; an execute still running on another thread finishes first.
///
/// # Safety
/// Always safe: both handles are looked up, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginDestroyExecutionContext(
    handle: PluginHandle,
    execution_context: ExecutionContextHandle,
) -> Status {
    ffi_boundary("hipdnnEnginePluginDestroyExecutionContext", || {
        let _handle = lookup_handle(handle)?;
        non_null(execution_context, "execution_context")?;
        CONTEXTS.remove(execution_context as usize)?;
        Ok(())
    })
}

/// Same byte count as `GetWorkspaceSize` for the same configuration.
///
/// # Safety
/// `workspace_size` is NULL or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    handle: PluginHandle,
    execution_context: ExecutionContextHandle,
    workspace_size: *mut usize,
) -> Status {
    ffi_boundary(
        "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext",
        || {
            let _handle = lookup_handle(handle)?;
            let context = lookup_context(execution_context)?;
            // SAFETY: forwarded caller contract.
            let out = unsafe { Out::new(workspace_size, "workspace_size") }?;
            out.write(context.workspace_size());
            Ok(())
        },
    )
}

/// Runs the context's engine on the variant pack. Every pointer is wrapped afresh per call, so
/// each execute may bind different buffers and different ragged offsets.
///
/// # Safety
/// `device_buffers` is NULL (only with `num_device_buffers == 0`) or valid for reads of
/// `num_device_buffers` entries; each entry's pointer is valid for its tensor's extent, in memory
/// the context's engine can access; `workspace` is NULL or valid for the reported size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginExecuteOpGraph(
    handle: PluginHandle,
    execution_context: ExecutionContextHandle,
    workspace: *mut c_void,
    device_buffers: *const DeviceBuffer,
    num_device_buffers: u32,
) -> Status {
    ffi_boundary("hipdnnEnginePluginExecuteOpGraph", || {
        let handle = lookup_handle(handle)?;
        let context = lookup_context(execution_context)?;
        // SAFETY: forwarded caller contract.
        let buffers = unsafe { pointers::device_buffers(device_buffers, num_device_buffers) }?;
        // SAFETY: forwarded caller contract: pointers are valid for their tensors.
        unsafe { context.execute(handle.stream(), workspace, buffers) }
    })
}

/// The static name of a listed engine; NOT_APPLICABLE for any other id.
///
/// # Safety
/// `name` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginGetEngineName(
    engine_id: i64,
    name: *mut *const c_char,
) -> Status {
    ffi_boundary("hipdnnEnginePluginGetEngineName", || {
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(name, "name") }?;
        let engine = engines::find(engine_id).ok_or(PluginError::NoEngineName { engine_id })?;
        out.write(engine.name.as_ptr());
        Ok(())
    })
}

/// What `*num_engines` reports after a filling call: the two protocols differ.
#[derive(Clone, Copy)]
enum Report {
    /// `GetAllEngineIds` (plugin-abi.md §5.2 step 3): the number of ids written.
    Written,
    /// `GetApplicableEngineIds` (§5.4, header contract): the total applicable count, which may
    /// exceed `max_engines`, so a caller with a short buffer learns how large it must be.
    Total,
}

fn write_ids(sink: IdSink, count: Out<u32>, ids: &[i64], report: Report) {
    let reported = match (sink.is_count_query(), report) {
        (true, _) => ids.len(),
        (false, Report::Written) => sink.write(ids),
        (false, Report::Total) => {
            sink.write(ids);
            ids.len()
        }
    };
    // At most a handful of engines exist; the count always fits.
    count.write(u32::try_from(reported).unwrap_or(u32::MAX));
}

pub(super) fn non_null<T>(ptr: *mut T, argument: &'static str) -> Result<(), PluginError> {
    if ptr.is_null() {
        Err(PluginError::NullArgument { argument })
    } else {
        Ok(())
    }
}

/// The context's workspace size, refused (INVALID_VALUE naming the engine and bytes) beyond the
/// `isize::MAX` bytes one buffer may span.
pub(super) fn checked_workspace(context: &ExecutionContext) -> Result<usize, PluginError> {
    let bytes = context.workspace_size();
    check_workspace(context.engine().name_str(), bytes as u128)
        .map_err(|e| PluginError::InvalidValue(e.to_string()))?;
    Ok(bytes)
}

/// As [`checked_workspace`], for a plan that has no context yet.
fn checked_workspace_bytes(bytes: usize) -> Result<usize, PluginError> {
    check_workspace("the engine's workspace", bytes as u128)
        .map_err(|e| PluginError::InvalidValue(e.to_string()))?;
    Ok(bytes)
}

pub(super) fn lookup_handle(handle: PluginHandle) -> Result<Lease<EngineHandle>, PluginError> {
    non_null(handle, "handle")?;
    HANDLES.get(handle as usize)
}

pub(super) fn lookup_context(
    context: ExecutionContextHandle,
) -> Result<Lease<ExecutionContext>, PluginError> {
    non_null(context, "execution_context")?;
    CONTEXTS.get(context as usize)
}
