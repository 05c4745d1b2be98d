//! Fixture variant that also exports `hipdnnEnginePluginExecuteOpGraphWithOverrides`, for the
//! "override symbol: yes" rows of versioning.md §7.

#![allow(non_snake_case)] // exported symbol names are fixed by the hipDNN C ABI

#[path = "../src/exports.rs"]
pub mod exports;

use std::ffi::{c_char, c_void};

/// # Safety
/// `version` must be NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetApiVersion(version: *mut *const c_char) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { exports::get_api_version(version) }
}

/// # Safety
/// Pointer arguments must be NULL or valid as in hipDNN's `EnginePluginApi.h`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature is fixed by hipDNN
pub unsafe extern "C" fn hipdnnEnginePluginExecuteOpGraphWithOverrides(
    handle: *mut c_void,
    execution_context: *mut c_void,
    _workspace: *mut c_void,
    _device_buffers: *const exports::DeviceBuffer,
    _num_device_buffers: u32,
    _num_overrides: u32,
    _override_unique_ids: *const i64,
    _override_lengths: *const u32,
    _override_shapes: *const *const i64,
    _override_strides: *const *const i64,
) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { exports::execute_with_overrides(handle, execution_context) }
}
