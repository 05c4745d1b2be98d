//! The execution-context serialization trio (RFC 0009): `SerializeExecutionContext`,
//! `DestroySerializedExecutionContext` and `CreateExecutionContextFromSerialized`. hipDNN counts
//! them only together; the byte format is [`crate::serialized_context`]'s.

use std::ffi::c_void;

use crate::abi::boundary::ffi_boundary;
use crate::abi::pointers::{InOut, Out, const_data};
use crate::abi::types::{ConstData, ExecutionContextHandle, PluginHandle, Status};
use crate::engines;
use crate::error::PluginError;
use crate::execution_context::{CONTEXTS, ExecutionContext};
use crate::exports::base::PLUGIN_VERSION;
use crate::lent::{self, Kind};
use crate::serialized_context::{self, SerializedContext};

use super::engine::{lookup_context, lookup_handle, non_null};

fn plugin_version() -> &'static str {
    PLUGIN_VERSION.to_str().unwrap_or("<non-utf8 version>")
}

/// Writes plugin-owned bytes from which `CreateExecutionContextFromSerialized` rebuilds the
/// context.
///
/// # Safety
/// `serialized_context` is NULL or valid for one `ConstData` write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginSerializeExecutionContext(
    handle: PluginHandle,
    execution_context: ExecutionContextHandle,
    serialized_context: *mut ConstData,
) -> Status {
    ffi_boundary("hipdnnEnginePluginSerializeExecutionContext", || {
        lookup_handle(handle)?;
        let context = lookup_context(execution_context)?;
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(serialized_context, "serialized_context") }?;
        let bytes = serialized_context::encode(&SerializedContext {
            plugin_version: plugin_version(),
            engine_id: context.engine().id,
            graph: context.graph_bytes(),
        });
        let (ptr, size) = lent::lend(Kind::SerializedContext, handle as usize, bytes);
        out.write(ConstData {
            ptr: ptr.cast::<c_void>(),
            size,
        });
        Ok(())
    })
}

/// Frees bytes from `SerializeExecutionContext` and zeroes the struct; the handle they were lent
/// through may have been destroyed since.
///
/// # Safety
/// `serialized_context` is NULL or valid for reads and writes of one `ConstData`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginDestroySerializedExecutionContext(
    handle: PluginHandle,
    serialized_context: *mut ConstData,
) -> Status {
    ffi_boundary(
        "hipdnnEnginePluginDestroySerializedExecutionContext",
        || {
            // The lending handle may be destroyed already: the bytes stay the caller's until
            // returned here (see lent.rs), so only the buffer is looked up.
            non_null(handle, "handle")?;
            // SAFETY: forwarded caller contract.
            let slot = unsafe { InOut::new(serialized_context, "serialized_context") }?;
            let buffer = *slot.get();
            lent::give_back(
                Kind::SerializedContext,
                handle as usize,
                buffer.ptr as usize,
                buffer.size,
            )?;
            slot.write(ConstData {
                ptr: std::ptr::null(),
                size: 0,
            });
            Ok(())
        },
    )
}

/// Rebuilds a context from serialized bytes through the same checks as
/// `CreateExecutionContext`; foreign, damaged or other-version bytes are BAD_PARAM saying which.
///
/// # Safety
/// `serialized_context` is NULL or a valid `ConstData` describing readable bytes;
/// `execution_context` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnEnginePluginCreateExecutionContextFromSerialized(
    handle: PluginHandle,
    serialized_context: *const ConstData,
    execution_context: *mut ExecutionContextHandle,
) -> Status {
    ffi_boundary(
        "hipdnnEnginePluginCreateExecutionContextFromSerialized",
        || {
            let handle = lookup_handle(handle)?;
            // SAFETY: forwarded caller contract.
            let bytes = unsafe { const_data(serialized_context, "serialized_context") }?;
            // SAFETY: forwarded caller contract.
            let out = unsafe { Out::new(execution_context, "execution_context") }?;
            let stored = serialized_context::decode(bytes, plugin_version())?;
            let engine = engines::find(stored.engine_id).ok_or(PluginError::UnknownEngine {
                engine_id: stored.engine_id,
            })?;
            let context = ExecutionContext::build(engine, stored.graph)?;
            super::engine::checked_workspace(&context)?;
            // SAFETY: the handle's stream is NULL or live (hipDNN's SetStream contract).
            unsafe { context.prepare(handle.stream()) }?;
            out.write(CONTEXTS.insert(context)? as ExecutionContextHandle);
            Ok(())
        },
    )
}
