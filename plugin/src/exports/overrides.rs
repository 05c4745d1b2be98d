//! `hipdnnEnginePluginExecuteOpGraphWithOverrides` (engine API 1.1.0, RFC 0008): the C arrays
//! become owned [`ShapeOverride`]s here; [`crate::overrides`] checks and runs them.

use std::ffi::c_void;

use crate::abi::boundary::ffi_boundary;
use crate::abi::pointers;
use crate::abi::types::{DeviceBuffer, ExecutionContextHandle, PluginHandle, Status};
use crate::error::PluginError;
use crate::overrides::{self, ShapeOverride};

use super::engine::{lookup_context, lookup_handle};

/// `ExecuteOpGraph` with new dims and strides for the listed uids of an override-enabled graph,
/// for this call only. `num_overrides == 0` runs the compiled shapes.
///
/// # Safety
/// As `hipdnnEnginePluginExecuteOpGraph`, with every data pointer valid for the extent of the
/// overridden shapes; when `num_overrides > 0`, `override_unique_ids` and `override_lengths` are
/// NULL or valid for `num_overrides` reads, `override_shapes` and `override_strides` are NULL or
/// valid for `num_overrides` pointer reads, and each of their entries is NULL or valid for
/// `override_lengths[i]` reads.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature of plugin-abi.md §4.2
pub unsafe extern "C" fn hipdnnEnginePluginExecuteOpGraphWithOverrides(
    handle: PluginHandle,
    execution_context: ExecutionContextHandle,
    workspace: *mut c_void,
    device_buffers: *const DeviceBuffer,
    num_device_buffers: u32,
    num_overrides: u32,
    override_unique_ids: *const i64,
    override_lengths: *const u32,
    override_shapes: *const *const i64,
    override_strides: *const *const i64,
) -> Status {
    ffi_boundary("hipdnnEnginePluginExecuteOpGraphWithOverrides", || {
        let handle = lookup_handle(handle)?;
        let context = lookup_context(execution_context)?;
        // SAFETY: forwarded caller contract.
        let buffers = unsafe { pointers::device_buffers(device_buffers, num_device_buffers) }?;
        // SAFETY: forwarded caller contract.
        let list = unsafe {
            read_overrides(
                num_overrides,
                override_unique_ids,
                override_lengths,
                override_shapes,
                override_strides,
            )
        }?;
        // SAFETY: forwarded caller contract: pointers are valid for the overridden tensors.
        unsafe { overrides::execute(&context, handle.stream(), workspace, buffers, &list) }
    })
}

/// `count` entries of a C array; NULL is BAD_PARAM naming `argument` unless `count == 0`.
///
/// # Safety
/// `ptr` is NULL or valid for `count` reads for the rest of the call.
unsafe fn array<'a, T>(
    ptr: *const T,
    count: usize,
    argument: &'static str,
) -> Result<&'a [T], PluginError> {
    if count == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(PluginError::NullArgument { argument });
    }
    // SAFETY: non-NULL and, by the caller's contract, valid for `count` reads.
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// Copies the four parallel override arrays.
///
/// # Safety
/// As the export's contract for these arguments.
unsafe fn read_overrides(
    count: u32,
    uids: *const i64,
    lengths: *const u32,
    shapes: *const *const i64,
    strides: *const *const i64,
) -> Result<Vec<ShapeOverride>, PluginError> {
    let n = count as usize;
    // SAFETY: forwarded caller contract (each array holds `count` entries when non-NULL).
    let (uids, lengths, shapes, strides) = unsafe {
        (
            array(uids, n, "override_unique_ids")?,
            array(lengths, n, "override_lengths")?,
            array(shapes, n, "override_shapes")?,
            array(strides, n, "override_strides")?,
        )
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let len = lengths[i] as usize;
        // SAFETY: forwarded caller contract: entry i holds `override_lengths[i]` values.
        let (dims, steps) = unsafe {
            (
                array(shapes[i], len, "override_shapes[i]")?,
                array(strides[i], len, "override_strides[i]")?,
            )
        };
        out.push(ShapeOverride {
            uid: uids[i],
            dims: dims.to_vec(),
            strides: steps.to_vec(),
        });
    }
    Ok(out)
}
