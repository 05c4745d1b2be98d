//! The C ABI as hipDNN's loader exercises it: symbol set, base functions, the two-call engine
//! list, engine names, handles, NULL arguments for every export, and the last-error contract.

mod common;

use std::collections::BTreeSet;
use std::ffi::{CStr, c_char, c_void};
use std::process::Command;
use std::ptr::{null, null_mut};

use common::*;

fn text(ptr: *const c_char) -> String {
    assert!(!ptr.is_null());
    // SAFETY: the plugin hands out static NUL-terminated strings.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

fn fnv1a(name: &str) -> i64 {
    // Independent of the plugin's own implementation: the textbook loop.
    let mut hash: u64 = 0xcbf29ce484222325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    hash as i64
}

#[test]
fn exports_exactly_the_twenty_four_plugin_symbols() {
    let output = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(plugin_path())
        .output()
        .expect("nm (binutils) runs");
    assert!(output.status.success());
    let listing = String::from_utf8_lossy(&output.stdout);
    let exported: BTreeSet<&str> = listing
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_addr, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            // Code and data symbols; version-definition entries (`A`) are not exports.
            (kind != "A").then_some(name)
        })
        .collect();
    let expected: BTreeSet<&str> = [
        "hipdnnPluginGetName",
        "hipdnnPluginGetVersion",
        "hipdnnPluginGetApiVersion",
        "hipdnnPluginGetType",
        "hipdnnPluginGetLastErrorString",
        "hipdnnPluginSetLoggingCallback",
        "hipdnnPluginSetLogLevel",
        "hipdnnEnginePluginGetAllEngineIds",
        "hipdnnEnginePluginCreate",
        "hipdnnEnginePluginDestroy",
        "hipdnnEnginePluginSetStream",
        "hipdnnEnginePluginGetApplicableEngineIds",
        "hipdnnEnginePluginGetEngineDetails",
        "hipdnnEnginePluginDestroyEngineDetails",
        "hipdnnEnginePluginGetWorkspaceSize",
        "hipdnnEnginePluginCreateExecutionContext",
        "hipdnnEnginePluginDestroyExecutionContext",
        "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext",
        "hipdnnEnginePluginExecuteOpGraph",
        "hipdnnEnginePluginGetEngineName",
        "hipdnnEnginePluginExecuteOpGraphWithOverrides",
        "hipdnnEnginePluginSerializeExecutionContext",
        "hipdnnEnginePluginDestroySerializedExecutionContext",
        "hipdnnEnginePluginCreateExecutionContextFromSerialized",
    ]
    .into_iter()
    .collect();
    assert_eq!(exported, expected);
}

#[test]
fn base_functions_report_name_version_api_and_type() {
    let p = plugin();
    let mut s: *const c_char = null();
    let mut kind = -1;
    // SAFETY: valid out-pointers; log levels are plain integers.
    unsafe {
        assert_eq!((p.GetName)(&mut s), SUCCESS);
        assert_eq!(text(s), "hipdnn_provider_ragged_sdpa");
        assert_eq!((p.GetVersion)(&mut s), SUCCESS);
        assert_eq!(text(s), env!("CARGO_PKG_VERSION"));
        assert_eq!((p.GetApiVersion)(&mut s), SUCCESS);
        assert_eq!(text(s), "1.4.0");
        assert_eq!((p.GetType)(&mut kind), SUCCESS);
        assert_eq!(kind, 1, "HIPDNN_PLUGIN_TYPE_ENGINE");
        assert_eq!((p.SetLogLevel)(0), SUCCESS);
        assert_eq!((p.SetLogLevel)(4), SUCCESS);
        assert_eq!((p.SetLogLevel)(9), INVALID_VALUE);
        assert!(last_error().contains("log level 9"), "{}", last_error());
        assert_eq!((p.SetLogLevel)(0), SUCCESS);
    }
}

#[test]
fn engine_ids_follow_the_two_call_protocol() {
    let p = plugin();
    let mut n = u32::MAX;
    // SAFETY: NULL ids with 0 capacity is the counting call.
    let status = unsafe { (p.GetAllEngineIds)(null_mut(), 0, &mut n) };
    assert_eq!(status, SUCCESS);
    // The host engine (requested by the loader) is always listed, after any GPU engine this
    // machine can run.
    assert!((1..=3).contains(&n), "{n} engines");
    let mut ids = vec![0i64; n as usize + 1];
    let mut m = u32::MAX;
    // SAFETY: `ids` has room for n + 1 entries; we offer n.
    let status = unsafe { (p.GetAllEngineIds)(ids.as_mut_ptr(), n, &mut m) };
    assert_eq!(status, SUCCESS);
    assert_eq!(m, n);
    assert_eq!(
        ids[n as usize - 1],
        HOST_REFERENCE_ID,
        "host reference last"
    );
    assert_eq!(ids[n as usize], 0, "the spare slot is untouched");
}

#[test]
fn engine_names_hash_to_their_ids() {
    let p = plugin();
    let mut name: *const c_char = null();
    // SAFETY: valid out-pointer.
    let status = unsafe { (p.GetEngineName)(HOST_REFERENCE_ID, &mut name) };
    assert_eq!(status, SUCCESS);
    let name = text(name);
    assert_eq!(name, "RAGGED_SDPA_HOST_REFERENCE");
    assert_eq!(fnv1a(&name), HOST_REFERENCE_ID);
    assert!(name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'));

    // Every listed engine (GPU engines too, where this machine lists them) obeys the same rule.
    let mut ids = [0i64; 8];
    let mut n = 0u32;
    // SAFETY: `ids` has room for 8 entries.
    let status = unsafe { (p.GetAllEngineIds)(ids.as_mut_ptr(), 8, &mut n) };
    assert_eq!(status, SUCCESS);
    for &id in &ids[..n as usize] {
        let mut listed: *const c_char = null();
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { (p.GetEngineName)(id, &mut listed) }, SUCCESS);
        let listed = text(listed);
        assert_eq!(fnv1a(&listed), id, "{listed}");
        assert!(listed.starts_with("RAGGED_SDPA_"), "{listed}");
    }

    let mut other: *const c_char = null();
    // SAFETY: valid out-pointer.
    let status = unsafe { (p.GetEngineName)(fnv1a("RAGGED_SDPA_NOT_AN_ENGINE"), &mut other) };
    assert_eq!(status, NOT_APPLICABLE);
    assert!(other.is_null(), "output written on a decline");
}

#[test]
fn handles_are_distinct_and_checked() {
    let p = plugin();
    let a = OwnedHandle::new();
    let b = OwnedHandle::new();
    assert_ne!(a.0, b.0);
    let mut gone: Handle = null_mut();
    // SAFETY: handles and streams are registry keys and stored values; a stale handle is
    // reported, never followed.
    unsafe {
        assert_eq!((p.SetStream)(a.0, 0x1234 as *mut c_void), SUCCESS);
        assert_eq!((p.SetStream)(a.0, null_mut()), SUCCESS);
        assert_eq!((p.Create)(&mut gone), SUCCESS);
        assert_eq!((p.Destroy)(gone), SUCCESS);
        assert_eq!((p.Destroy)(gone), BAD_PARAM);
        assert!(last_error().starts_with("hipdnnEnginePluginDestroy: engine plugin handle 0x"));
        assert_eq!((p.SetStream)(gone, null_mut()), BAD_PARAM);
        assert_eq!((p.SetStream)(0x10 as Handle, null_mut()), BAD_PARAM);
    }
}

/// Each NULL pointer argument of each export gives BAD_PARAM, a message naming the function and
/// the argument, and leaves every output untouched.
#[test]
fn null_arguments_are_bad_param_for_every_export() {
    let p = plugin();
    let handle = OwnedHandle::new();
    let h = handle.0;
    let graph = [0u8; 8];
    let graph = ConstData::of(&graph);
    let config = ConstData::of(&[1u8; 8]);
    let mut ids = [7i64; 2];
    let mut n = 7u32;
    let mut size = 7usize;
    let mut ctx: Context = null_mut();
    let mut details = ConstData::empty();
    let mut dummy_ctx = 0x1000usize as Context;

    let expect = |status: Status, function: &str, argument: &str| {
        assert_eq!(status, BAD_PARAM, "{function}({argument} = NULL)");
        let message = last_error();
        assert!(
            message.starts_with(function) && message.contains(argument),
            "{function}({argument} = NULL): message {message:?}"
        );
    };
    // SAFETY: each non-NULL argument is a valid pointer of the right type; handles and
    // contexts are registry keys, never followed.
    unsafe {
        expect((p.GetName)(null_mut()), "hipdnnPluginGetName", "name");
        expect(
            (p.GetVersion)(null_mut()),
            "hipdnnPluginGetVersion",
            "version",
        );
        expect(
            (p.GetApiVersion)(null_mut()),
            "hipdnnPluginGetApiVersion",
            "version",
        );
        expect((p.GetType)(null_mut()), "hipdnnPluginGetType", "type");
        expect(
            (p.SetLoggingCallback)(None),
            "hipdnnPluginSetLoggingCallback",
            "callback",
        );
        (p.GetLastErrorString)(null_mut());

        let f = "hipdnnEnginePluginGetAllEngineIds";
        expect(
            (p.GetAllEngineIds)(ids.as_mut_ptr(), 2, null_mut()),
            f,
            "num_engines",
        );
        expect((p.GetAllEngineIds)(null_mut(), 2, &mut n), f, "engine_ids");
        expect((p.Create)(null_mut()), "hipdnnEnginePluginCreate", "handle");
        expect(
            (p.Destroy)(null_mut()),
            "hipdnnEnginePluginDestroy",
            "handle",
        );
        expect(
            (p.SetStream)(null_mut(), null_mut()),
            "hipdnnEnginePluginSetStream",
            "handle",
        );

        let f = "hipdnnEnginePluginGetApplicableEngineIds";
        expect(
            (p.GetApplicableEngineIds)(null_mut(), &graph, ids.as_mut_ptr(), 2, &mut n),
            f,
            "handle",
        );
        expect(
            (p.GetApplicableEngineIds)(h, null(), ids.as_mut_ptr(), 2, &mut n),
            f,
            "op_graph",
        );
        expect(
            (p.GetApplicableEngineIds)(h, &graph, null_mut(), 2, &mut n),
            f,
            "engine_ids",
        );
        expect(
            (p.GetApplicableEngineIds)(h, &graph, ids.as_mut_ptr(), 2, null_mut()),
            f,
            "num_engines",
        );
        let empty = ConstData::empty();
        expect(
            (p.GetApplicableEngineIds)(h, &empty, ids.as_mut_ptr(), 2, &mut n),
            f,
            "op_graph",
        );

        let f = "hipdnnEnginePluginGetEngineDetails";
        expect(
            (p.GetEngineDetails)(null_mut(), HOST_REFERENCE_ID, &graph, &mut details),
            f,
            "handle",
        );
        expect(
            (p.GetEngineDetails)(h, HOST_REFERENCE_ID, null(), &mut details),
            f,
            "op_graph",
        );
        expect(
            (p.GetEngineDetails)(h, HOST_REFERENCE_ID, &graph, null_mut()),
            f,
            "engine_details",
        );
        let f = "hipdnnEnginePluginDestroyEngineDetails";
        expect(
            (p.DestroyEngineDetails)(null_mut(), &mut details),
            f,
            "handle",
        );
        expect((p.DestroyEngineDetails)(h, null_mut()), f, "engine_details");

        let f = "hipdnnEnginePluginGetWorkspaceSize";
        expect(
            (p.GetWorkspaceSize)(null_mut(), &config, &graph, &mut size),
            f,
            "handle",
        );
        expect(
            (p.GetWorkspaceSize)(h, null(), &graph, &mut size),
            f,
            "engine_config",
        );
        expect(
            (p.GetWorkspaceSize)(h, &config, null(), &mut size),
            f,
            "op_graph",
        );
        expect(
            (p.GetWorkspaceSize)(h, &config, &graph, null_mut()),
            f,
            "workspace_size",
        );

        let f = "hipdnnEnginePluginCreateExecutionContext";
        expect(
            (p.CreateExecutionContext)(null_mut(), &config, &graph, &mut ctx),
            f,
            "handle",
        );
        expect(
            (p.CreateExecutionContext)(h, null(), &graph, &mut ctx),
            f,
            "engine_config",
        );
        expect(
            (p.CreateExecutionContext)(h, &config, null(), &mut ctx),
            f,
            "op_graph",
        );
        expect(
            (p.CreateExecutionContext)(h, &config, &graph, null_mut()),
            f,
            "execution_context",
        );

        let f = "hipdnnEnginePluginDestroyExecutionContext";
        expect(
            (p.DestroyExecutionContext)(null_mut(), dummy_ctx),
            f,
            "handle",
        );
        expect(
            (p.DestroyExecutionContext)(h, null_mut()),
            f,
            "execution_context",
        );

        let f = "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext";
        expect(
            (p.GetWorkspaceSizeFromExecutionContext)(null_mut(), dummy_ctx, &mut size),
            f,
            "handle",
        );
        expect(
            (p.GetWorkspaceSizeFromExecutionContext)(h, null_mut(), &mut size),
            f,
            "execution_context",
        );

        let f = "hipdnnEnginePluginExecuteOpGraph";
        let one = DeviceBuffer {
            uid: 1,
            ptr: null_mut(),
        };
        expect(
            (p.ExecuteOpGraph)(null_mut(), dummy_ctx, null_mut(), &one, 1),
            f,
            "handle",
        );
        expect(
            (p.ExecuteOpGraph)(h, null_mut(), null_mut(), &one, 1),
            f,
            "execution_context",
        );

        expect(
            (p.GetEngineName)(HOST_REFERENCE_ID, null_mut()),
            "hipdnnEnginePluginGetEngineName",
            "name",
        );
    }
    dummy_ctx = null_mut();
    assert!(dummy_ctx.is_null());
    assert_eq!((ids, n, size), ([7, 7], 7, 7), "outputs written on failure");
    assert!(ctx.is_null() && details.ptr.is_null() && details.size == 0);
}

#[test]
fn stale_execution_contexts_are_reported() {
    let p = plugin();
    let handle = OwnedHandle::new();
    let mut size = 0usize;
    let stale = 0x1000 as Context;
    // SAFETY: the context pointer is a registry key, never dereferenced.
    let status = unsafe { (p.GetWorkspaceSizeFromExecutionContext)(handle.0, stale, &mut size) };
    assert_eq!(status, BAD_PARAM);
    assert!(last_error().contains("execution context 0x1000 is not live"));
}

#[test]
fn last_error_is_per_thread_and_persists_across_successes() {
    let p = plugin();
    // SAFETY: NULL is the failing argument under test.
    let status = unsafe { (p.GetName)(null_mut()) };
    assert_eq!(status, BAD_PARAM);
    let here = last_error();
    assert_eq!(here, "hipdnnPluginGetName: argument `name` is NULL");

    let there = std::thread::spawn(|| {
        let before = last_error();
        // SAFETY: NULL is the failing argument under test.
        let status = unsafe { (plugin().GetType)(null_mut()) };
        (before, status, last_error())
    })
    .join()
    .expect("thread ran");
    assert_eq!(there.0, "", "a fresh thread starts with an empty message");
    assert_eq!(there.1, BAD_PARAM);
    assert_eq!(there.2, "hipdnnPluginGetType: argument `type` is NULL");

    let mut s: *const c_char = null();
    // SAFETY: valid out-pointer.
    let status = unsafe { (p.GetName)(&mut s) };
    assert_eq!(status, SUCCESS);
    assert_eq!(last_error(), here, "a success does not clear the message");
}
