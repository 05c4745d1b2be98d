//! The optional engine entry points the backend calls when a plugin exports them:
//! `ExecuteOpGraphWithOverrides` (RFC 0008) and the serialization trio (RFC 0009). Which of them
//! a call needs, and when the backend refuses instead, is [`crate::execute`]'s rule; these are
//! the plain calls, each checked with the backend's `Failed to …` message.

use std::ffi::c_void;

use super::{ExecutionContext, PluginHandle, SerializationApi};
use crate::abi::{self, ConstData, DeviceBuffer};
use crate::host_error::HostError;

/// New dims and strides for one tensor uid, for one execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeOverride {
    pub uid: i64,
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
}

fn count(n: usize, what: &str) -> Result<u32, HostError> {
    u32::try_from(n).map_err(|_| HostError::Harness(format!("{n} {what} exceed u32")))
}

impl ExecutionContext<'_, '_> {
    /// `ExecuteOpGraphWithOverrides` with `overrides` as C's four parallel arrays.
    ///
    /// # Safety
    /// As [`ExecutionContext::execute`], with every pointer sized for the overridden shapes.
    pub unsafe fn execute_with_overrides(
        &self,
        workspace: *mut c_void,
        buffers: &[DeviceBuffer],
        overrides: &[ShapeOverride],
    ) -> Result<(), HostError> {
        let Some(f) = self.handle.api().execute_op_graph_with_overrides else {
            return Err(HostError::Harness(format!(
                "{} does not export hipdnnEnginePluginExecuteOpGraphWithOverrides",
                self.handle.plugin.path().display()
            )));
        };
        if let Some(o) = overrides.iter().find(|o| o.dims.len() != o.strides.len()) {
            return Err(HostError::Harness(format!(
                "override of tensor uid {}: {} dims but {} strides",
                o.uid,
                o.dims.len(),
                o.strides.len()
            )));
        }
        let uids: Vec<i64> = overrides.iter().map(|o| o.uid).collect();
        let lengths = overrides
            .iter()
            .map(|o| count(o.dims.len(), "override dims"))
            .collect::<Result<Vec<u32>, _>>()?;
        let shapes: Vec<*const i64> = overrides.iter().map(|o| o.dims.as_ptr()).collect();
        let strides: Vec<*const i64> = overrides.iter().map(|o| o.strides.as_ptr()).collect();
        // SAFETY: live handle and context; the four arrays hold `overrides.len()` entries and
        // each shape/stride array its length, all alive for the call; data pointers are this
        // function's contract.
        let status = unsafe {
            f(
                self.handle.raw,
                self.raw,
                workspace,
                buffers.as_ptr(),
                count(buffers.len(), "variant-pack entries")?,
                count(overrides.len(), "overrides")?,
                uids.as_ptr(),
                lengths.as_ptr(),
                shapes.as_ptr(),
                strides.as_ptr(),
            )
        };
        self.handle.check("execute op graph with overrides", status)
    }

    /// `SerializeExecutionContext`, a copy of the bytes, then `DestroySerializedExecutionContext`
    /// (which must zero the struct, as `DestroyEngineDetails` must).
    pub fn serialize(&self) -> Result<Vec<u8>, HostError> {
        let api = serialization(self.handle)?;
        let mut data = ConstData {
            ptr: std::ptr::null(),
            size: 0,
        };
        // SAFETY: live handle and context, valid out-pointer.
        let status = unsafe { (api.serialize)(self.handle.raw, self.raw, &mut data) };
        self.handle.check("serialize execution context", status)?;
        if data.ptr.is_null() || data.size == 0 {
            return Err(HostError::EmptyBuffer {
                description: "hipdnnEnginePluginSerializeExecutionContext",
            });
        }
        // SAFETY: the plugin lends `size` readable bytes until DestroySerialized.
        let bytes = unsafe { std::slice::from_raw_parts(data.ptr.cast::<u8>(), data.size) };
        let bytes = bytes.to_vec();
        // SAFETY: the struct the plugin filled, returned once.
        let status = unsafe { (api.destroy_serialized)(self.handle.raw, &mut data) };
        self.handle
            .check("destroy serialized execution context", status)?;
        if !data.ptr.is_null() || data.size != 0 {
            return Err(HostError::Harness(format!(
                "DestroySerializedExecutionContext left the struct at ptr {:p}, size {}",
                data.ptr, data.size
            )));
        }
        Ok(bytes)
    }
}

impl<'p> PluginHandle<'p> {
    /// `CreateExecutionContextFromSerialized`; the context is destroyed when dropped.
    pub fn create_execution_context_from_serialized(
        &self,
        bytes: &[u8],
    ) -> Result<ExecutionContext<'_, 'p>, HostError> {
        let api = serialization(self)?;
        let data = ConstData::borrow(bytes);
        let mut raw: abi::ExecutionContext = std::ptr::null_mut();
        // SAFETY: live handle, borrowed bytes, valid out-pointer.
        let status = unsafe { (api.create_from_serialized)(self.raw, &data, &mut raw) };
        self.check("create execution context from serialized data", status)?;
        if raw.is_null() {
            return Err(HostError::NullHandle {
                description: "hipdnnEnginePluginCreateExecutionContextFromSerialized",
            });
        }
        Ok(ExecutionContext { handle: self, raw })
    }
}

fn serialization(handle: &PluginHandle<'_>) -> Result<SerializationApi, HostError> {
    handle.api().serialization.ok_or_else(|| {
        HostError::Harness(format!(
            "{} does not export all three serialization entry points (the backend answers \
             NOT_SUPPORTED)",
            handle.plugin.path().display()
        ))
    })
}
