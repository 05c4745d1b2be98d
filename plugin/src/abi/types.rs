//! The C types of hipDNN's engine-plugin ABI (`PluginApiDataTypes.h`, `CallbackTypes.h`).
//!
//! Every C enum is a transparent `i32` newtype rather than a Rust `enum`: hipDNN may hand us a value
//! this build has never heard of, and reading such a value into a Rust `enum` would be undefined
//! behaviour.

use std::ffi::{c_char, c_void};

/// `hipdnnPluginStatus_t`.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct Status(pub i32);

impl Status {
    pub const SUCCESS: Status = Status(0);
    pub const BAD_PARAM: Status = Status(1);
    pub const INVALID_VALUE: Status = Status(2);
    pub const INTERNAL_ERROR: Status = Status(3);
    pub const ALLOC_FAILED: Status = Status(4);
    pub const NOT_APPLICABLE: Status = Status(5);
    pub const NOT_INITIALIZED: Status = Status(6);

    /// The upstream spelling, for log lines that hipDNN developers grep for.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "HIPDNN_PLUGIN_STATUS_SUCCESS",
            1 => "HIPDNN_PLUGIN_STATUS_BAD_PARAM",
            2 => "HIPDNN_PLUGIN_STATUS_INVALID_VALUE",
            3 => "HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR",
            4 => "HIPDNN_PLUGIN_STATUS_ALLOC_FAILED",
            5 => "HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE",
            6 => "HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED",
            _ => "HIPDNN_PLUGIN_STATUS_<unknown>",
        }
    }
}

/// `hipdnnPluginType_t`.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PluginType(pub i32);

impl PluginType {
    pub const UNSPECIFIED: PluginType = PluginType(0);
    pub const ENGINE: PluginType = PluginType(1);
    pub const HEURISTIC: PluginType = PluginType(2);
}

/// `hipdnnSeverity_t`. Ordered: a higher value is more severe, `OFF` silences everything.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct Severity(pub i32);

impl Severity {
    pub const INFO: Severity = Severity(0);
    pub const WARN: Severity = Severity(1);
    pub const ERROR: Severity = Severity(2);
    pub const FATAL: Severity = Severity(3);
    pub const OFF: Severity = Severity(4);
}

/// `hipdnnCallback_t`. `Option` gives the C NULL a Rust spelling (the niche of a fn pointer).
pub type LogCallback = Option<unsafe extern "C" fn(severity: Severity, message: *const c_char)>;

/// `hipdnnPluginConstData_t`: a byte buffer (serialized Graph, EngineConfig or EngineDetails).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConstData {
    pub ptr: *const c_void,
    pub size: usize,
}

/// `hipdnnPluginDeviceBuffer_t`: one variant-pack entry, tensor uid → pointer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DeviceBuffer {
    pub uid: i64,
    pub ptr: *mut c_void,
}

/// Target of `hipdnnEnginePluginHandle_t`. Never dereferenced: the pointer is a key into the
/// live-handle registry, so a stale or foreign pointer is reported instead of followed.
#[repr(C)]
pub struct HipdnnEnginePluginHandle {
    _private: [u8; 0],
}

/// Target of `hipdnnEnginePluginExecutionContext_t`; a registry key like [`HipdnnEnginePluginHandle`].
#[repr(C)]
pub struct HipdnnEnginePluginExecutionContext {
    _private: [u8; 0],
}

/// `hipdnnEnginePluginHandle_t`.
pub type PluginHandle = *mut HipdnnEnginePluginHandle;
/// `hipdnnEnginePluginExecutionContext_t`.
pub type ExecutionContextHandle = *mut HipdnnEnginePluginExecutionContext;
/// `hipStream_t`: opaque; NULL is the default stream.
pub type HipStream = *mut c_void;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn struct_layouts_match_the_lp64_c_headers() {
        assert_eq!((size_of::<ConstData>(), align_of::<ConstData>()), (16, 8));
        assert_eq!(offset_of!(ConstData, size), 8);
        assert_eq!(
            (size_of::<DeviceBuffer>(), align_of::<DeviceBuffer>()),
            (16, 8)
        );
        assert_eq!(offset_of!(DeviceBuffer, ptr), 8);
        assert_eq!(size_of::<Status>(), 4);
        assert_eq!(size_of::<LogCallback>(), size_of::<*const c_void>());
    }

    mod header {
        const HEADER_DIR_FROM_MANIFEST: &str = "include";
        include!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/c/abi_layout.rs"
        ));
    }

    /// The header is what a C host compiles against; every type above must agree with it.
    #[test]
    fn every_type_matches_the_projects_c_header() {
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
            c_size("hipdnnPluginType_t", size_of::<PluginType>()),
            c_size("hipdnnSeverity_t", size_of::<Severity>()),
            c_size("hipdnnCallback_t", size_of::<LogCallback>()),
            c_size("hipdnnEnginePluginHandle_t", size_of::<PluginHandle>()),
            c_size(
                "hipdnnEnginePluginExecutionContext_t",
                size_of::<ExecutionContextHandle>(),
            ),
            c_size("hipStream_t", size_of::<HipStream>()),
            value("HIPDNN_PLUGIN_TYPE_UNSPECIFIED", PluginType::UNSPECIFIED.0),
            value("HIPDNN_PLUGIN_TYPE_ENGINE", PluginType::ENGINE.0),
            value("HIPDNN_PLUGIN_TYPE_HEURISTIC", PluginType::HEURISTIC.0),
            value("HIPDNN_SEV_INFO", Severity::INFO.0),
            value("HIPDNN_SEV_WARN", Severity::WARN.0),
            value("HIPDNN_SEV_ERROR", Severity::ERROR.0),
            value("HIPDNN_SEV_FATAL", Severity::FATAL.0),
            value("HIPDNN_SEV_OFF", Severity::OFF.0),
            value(
                "HIPDNN_PLUGIN_ERROR_STRING_MAX_LENGTH",
                crate::abi::last_error::MAX_LEN,
            ),
        ];
        for status in [
            Status::SUCCESS,
            Status::BAD_PARAM,
            Status::INVALID_VALUE,
            Status::INTERNAL_ERROR,
            Status::ALLOC_FAILED,
            Status::NOT_APPLICABLE,
            Status::NOT_INITIALIZED,
        ] {
            facts.push(value(status.name(), status.0));
        }
        header::assert_matches_header("plugin-types", &facts);
    }

    #[test]
    fn severities_order_from_info_to_off() {
        assert!(Severity::INFO < Severity::WARN);
        assert!(Severity::ERROR < Severity::FATAL);
        assert!(Severity::FATAL < Severity::OFF);
    }
}
