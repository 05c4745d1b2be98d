//! Calls the fixture's exports as a C host would, to pin the behaviour the conformance suites rely
//! on (a well-behaved plugin that declines every graph).

use std::ffi::{CStr, c_char};
use std::ptr;

use hipdnn_fixture_plugin::exports::*;
use hipdnn_fixture_plugin::hipdnnPluginGetApiVersion;

fn last_error() -> String {
    let mut msg: *const c_char = ptr::null();
    // SAFETY: `msg` is a valid out-pointer; the fixture writes a pointer to its thread-local text.
    unsafe { hipdnnPluginGetLastErrorString(&mut msg) };
    assert!(!msg.is_null(), "last-error pointer must never be NULL");
    // SAFETY: non-NULL, NUL-terminated, valid until the next failure on this thread.
    unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn two_call_engine_id_protocol_reports_one_hash_named_engine() {
    let mut count = 0u32;
    // SAFETY: count-only query: NULL ids with max 0, valid out-pointer.
    let status = unsafe { hipdnnEnginePluginGetAllEngineIds(ptr::null_mut(), 0, &mut count) };
    assert_eq!((status, count), (STATUS_SUCCESS, 1));

    let mut ids = [0i64; 1];
    let mut written = 0u32;
    // SAFETY: buffer of `count` slots.
    let status = unsafe { hipdnnEnginePluginGetAllEngineIds(ids.as_mut_ptr(), 1, &mut written) };
    assert_eq!((status, written), (STATUS_SUCCESS, 1));
    // FNV-1a-64 of "RAGGED_CONFORMANCE_FIXTURE", computed independently of the fixture.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in b"RAGGED_CONFORMANCE_FIXTURE" {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100000001b3);
    }
    assert_eq!(ids[0], h as i64);

    let mut name: *const c_char = ptr::null();
    // SAFETY: valid out-pointer.
    let status = unsafe { hipdnnEnginePluginGetEngineName(ids[0], &mut name) };
    assert_eq!(status, STATUS_SUCCESS);
    // SAFETY: SUCCESS wrote a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name) };
    assert_eq!(name.to_bytes(), b"RAGGED_CONFORMANCE_FIXTURE");

    let mut other: *const c_char = ptr::null();
    // SAFETY: valid out-pointer.
    let status = unsafe { hipdnnEnginePluginGetEngineName(ids[0] ^ 1, &mut other) };
    assert_eq!(status, STATUS_NOT_APPLICABLE);
}

#[test]
fn null_arguments_are_bad_param_with_a_message_naming_the_argument() {
    // SAFETY: NULL is an allowed argument value; the fixture must reject it.
    let status = unsafe { hipdnnPluginGetApiVersion(ptr::null_mut()) };
    assert_eq!(status, STATUS_BAD_PARAM);
    assert_eq!(last_error(), "version is NULL");

    // SAFETY: as above.
    let status = unsafe { hipdnnEnginePluginCreate(ptr::null_mut()) };
    assert_eq!(status, STATUS_BAD_PARAM);
    assert_eq!(last_error(), "handle is NULL");
}

#[test]
fn declines_every_graph_with_success_and_zero_engines() {
    let mut handle = ptr::null_mut();
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe { hipdnnEnginePluginCreate(&mut handle) },
        STATUS_SUCCESS
    );
    assert!(!handle.is_null());
    let garbage = [0xffu8; 7];
    let graph = ConstData {
        ptr: garbage.as_ptr().cast(),
        size: garbage.len(),
    };
    let mut ids = [0i64; 1];
    let mut n = 99u32;
    // SAFETY: live handle, valid graph struct and out-pointers.
    let status = unsafe {
        hipdnnEnginePluginGetApplicableEngineIds(handle, &graph, ids.as_mut_ptr(), 1, &mut n)
    };
    assert_eq!((status, n), (STATUS_SUCCESS, 0));
    // SAFETY: the handle from Create, destroyed once.
    assert_eq!(unsafe { hipdnnEnginePluginDestroy(handle) }, STATUS_SUCCESS);
}

#[test]
fn unconfigured_fixture_reports_the_default_version() {
    // The test binary links the rlib statically, so `dladdr` names the test executable and no
    // sidecar exists next to it.
    let mut v: *const c_char = ptr::null();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { hipdnnPluginGetApiVersion(&mut v) }, STATUS_SUCCESS);
    // SAFETY: static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(v) };
    assert_eq!(v.to_str(), Ok(DEFAULT_API_VERSION));
}

mod header {
    const HEADER_DIR_FROM_MANIFEST: &str = "../../plugin/include";
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../plugin/tests/c/abi_layout.rs"
    ));
}

/// The fixture restates the ABI's types and values for itself; the project's C header is the
/// statement they must agree with.
#[test]
fn the_fixtures_abi_types_match_the_c_header() {
    use header::{align_of as c_align, offset_of as c_offset, size_of as c_size, value};
    use std::mem::{align_of, offset_of, size_of};
    let facts = [
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
        value("HIPDNN_PLUGIN_STATUS_SUCCESS", STATUS_SUCCESS),
        value("HIPDNN_PLUGIN_STATUS_BAD_PARAM", STATUS_BAD_PARAM),
        value("HIPDNN_PLUGIN_STATUS_INVALID_VALUE", STATUS_INVALID_VALUE),
        value("HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR", STATUS_INTERNAL_ERROR),
        value("HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE", STATUS_NOT_APPLICABLE),
        value("HIPDNN_PLUGIN_TYPE_ENGINE", PLUGIN_TYPE_ENGINE),
    ];
    header::assert_matches_header("fixture-plugin", &facts);
}
