//! The base functions every hipDNN plugin exports (`PluginApi.h`).

use std::ffi::{CStr, c_char};

use crate::abi::boundary::ffi_boundary;
use crate::abi::last_error;
use crate::abi::pointers::Out;
use crate::abi::types::{LogCallback, PluginType, Severity, Status};
use crate::error::PluginError;
use crate::logging;

/// The plugin's name in hipDNN's logs; the same as the library's file stem.
pub const PLUGIN_NAME: &CStr = c"hipdnn_provider_ragged_sdpa";

/// The product version, from Cargo.
pub const PLUGIN_VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the package version contains a NUL"),
    };

/// The highest engine-plugin API version whose every function this library implements: ragged
/// tensors, non-default alignment and pass-by-value (1.3.0) plus `GetEngineName` (1.4.0). The
/// optional 1.1.0 override entry point is not exported, so the host skips override graphs.
pub const API_VERSION: &CStr = c"1.4.0";

/// Writes the plugin name.
///
/// # Safety
/// `name` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetName(name: *mut *const c_char) -> Status {
    ffi_boundary("hipdnnPluginGetName", || {
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(name, "name") }?;
        out.write(PLUGIN_NAME.as_ptr());
        Ok(())
    })
}

/// Writes the product version.
///
/// # Safety
/// `version` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetVersion(version: *mut *const c_char) -> Status {
    ffi_boundary("hipdnnPluginGetVersion", || {
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(version, "version") }?;
        out.write(PLUGIN_VERSION.as_ptr());
        Ok(())
    })
}

/// Writes the implemented engine-plugin API version, `"1.4.0"`.
///
/// # Safety
/// `version` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetApiVersion(version: *mut *const c_char) -> Status {
    ffi_boundary("hipdnnPluginGetApiVersion", || {
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(version, "version") }?;
        out.write(API_VERSION.as_ptr());
        Ok(())
    })
}

/// Writes `HIPDNN_PLUGIN_TYPE_ENGINE`.
///
/// # Safety
/// `plugin_type` is NULL or valid for one `hipdnnPluginType_t` write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetType(plugin_type: *mut PluginType) -> Status {
    ffi_boundary("hipdnnPluginGetType", || {
        // SAFETY: forwarded caller contract.
        let out = unsafe { Out::new(plugin_type, "type") }?;
        out.write(PluginType::ENGINE);
        Ok(())
    })
}

/// Writes this thread's last error text (never NULL; empty before the first failure).
/// A NULL argument is ignored, as the header allows.
///
/// # Safety
/// `error_str` is NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetLastErrorString(error_str: *mut *const c_char) {
    ffi_boundary("hipdnnPluginGetLastErrorString", || {
        // SAFETY: forwarded caller contract.
        if let Ok(out) = unsafe { Out::new(error_str, "error_str") } {
            out.write(last_error::as_c_ptr());
        }
    })
}

/// Routes plugin log lines to the backend. NULL is BAD_PARAM, as in the C++ SDK.
///
/// # Safety
/// `callback` is NULL or a function that stays callable while the library is loaded.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginSetLoggingCallback(callback: LogCallback) -> Status {
    ffi_boundary("hipdnnPluginSetLoggingCallback", || {
        if callback.is_none() {
            return Err(PluginError::NullArgument {
                argument: "callback",
            });
        }
        logging::set_callback(callback);
        Ok(())
    })
}

/// Sets the lowest severity that is sent; `HIPDNN_SEV_OFF` silences the plugin.
///
/// # Safety
/// Always safe to call; `unsafe` only for uniformity with the other exports.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginSetLogLevel(level: Severity) -> Status {
    ffi_boundary("hipdnnPluginSetLogLevel", || {
        if !(Severity::INFO..=Severity::OFF).contains(&level) {
            return Err(PluginError::InvalidValue(format!(
                "log level {} is not a hipdnnSeverity_t (0..=4)",
                level.0
            )));
        }
        logging::set_level(level);
        Ok(())
    })
}
