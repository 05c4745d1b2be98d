//! `ExecuteOpGraphWithOverrides` (RFC 0008) and the serialization trio (RFC 0009) through the
//! built .so: one compiled context serving a new B and S_max must give bit-for-bit what a context
//! built for those shapes gives; a context recreated from its bytes must give bit-for-bit what
//! the original gives; bad overrides and bad bytes are refused with a message, writing nothing.

mod common;

use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

use common::overrides::*;
use common::*;

type WithOverrides = unsafe extern "C" fn(
    Handle,
    Context,
    *mut c_void,
    *const DeviceBuffer,
    u32,
    u32,
    *const i64,
    *const u32,
    *const *const i64,
    *const *const i64,
) -> Status;
type Serialize = unsafe extern "C" fn(Handle, Context, *mut ConstData) -> Status;
type DestroySerialized = unsafe extern "C" fn(Handle, *mut ConstData) -> Status;
type FromSerialized = unsafe extern "C" fn(Handle, *const ConstData, *mut Context) -> Status;

/// The four entry points this file tests, resolved from the same loaded library.
struct Extra {
    _lib: libloading::Library,
    with_overrides: WithOverrides,
    serialize: Serialize,
    destroy_serialized: DestroySerialized,
    from_serialized: FromSerialized,
}

fn extra() -> &'static Extra {
    static EXTRA: OnceLock<Extra> = OnceLock::new();
    EXTRA.get_or_init(|| {
        plugin();
        // SAFETY: the plugin is already loaded by `plugin()`; this takes a second reference.
        let lib = unsafe { libloading::Library::new(plugin_path()) }.expect("plugin loads");
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the types above are the C signatures of plugin-abi.md §4.2.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .unwrap_or_else(|e| panic!("symbol {}: {e}", $name))
            };
        }
        Extra {
            with_overrides: sym!("hipdnnEnginePluginExecuteOpGraphWithOverrides"),
            serialize: sym!("hipdnnEnginePluginSerializeExecutionContext"),
            destroy_serialized: sym!("hipdnnEnginePluginDestroySerializedExecutionContext"),
            from_serialized: sym!("hipdnnEnginePluginCreateExecutionContextFromSerialized"),
            _lib: lib,
        }
    })
}

fn create(handle: &OwnedHandle, graph: &[u8]) -> Context {
    create_context(handle, &config(), graph)
}

fn destroy(handle: &OwnedHandle, context: Context) {
    destroy_context(handle, context);
}

fn execute(handle: &OwnedHandle, context: Context, call: &mut Call) -> Status {
    let pack = call.pack();
    // SAFETY: every pointer is a live host buffer of its tensor's extent.
    unsafe { common::execute(handle.0, context, &pack) }
}

/// Executes with `overrides` given as C's four parallel arrays.
fn execute_overridden(
    handle: &OwnedHandle,
    context: Context,
    call: &mut Call,
    overrides: &[(i64, Vec<i64>, Vec<i64>)],
) -> Status {
    let pack = call.pack();
    let uids: Vec<i64> = overrides.iter().map(|o| o.0).collect();
    let lengths: Vec<u32> = overrides.iter().map(|o| o.1.len() as u32).collect();
    let shapes: Vec<*const i64> = overrides.iter().map(|o| o.1.as_ptr()).collect();
    let strides: Vec<*const i64> = overrides.iter().map(|o| o.2.as_ptr()).collect();
    // SAFETY: every array holds `overrides.len()` entries; each shape/stride array its length.
    unsafe {
        (extra().with_overrides)(
            handle.0,
            context,
            null_mut(),
            pack.as_ptr(),
            pack.len() as u32,
            overrides.len() as u32,
            uids.as_ptr(),
            lengths.as_ptr(),
            shapes.as_ptr(),
            strides.as_ptr(),
        )
    }
}

#[test]
fn override_enabled_graphs_are_applicable() {
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &graph(COMPILED, true));
    assert_eq!(status, SUCCESS);
    assert!(
        ids.contains(&HOST_REFERENCE_ID),
        "{ids:?}: {}",
        last_error()
    );
}

#[test]
fn one_context_serves_a_new_batch_and_s_max_like_a_context_built_for_them() {
    let handle = OwnedHandle::new();
    let compiled = create(&handle, &graph(COMPILED, true));
    let direct = create(&handle, &graph(LARGER, false));

    let (mut over, mut plain) = (larger_call(), larger_call());
    let status = execute_overridden(&handle, compiled, &mut over, &tensor_shapes(LARGER));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(
        execute(&handle, direct, &mut plain),
        SUCCESS,
        "{}",
        last_error()
    );
    assert!(!over.untouched(), "the overridden execute wrote nothing");
    assert_eq!(over.bits(), plain.bits());

    // The compiled shapes still run, through both entry points (no override = ExecuteOpGraph).
    let reference_context = create(&handle, &graph(COMPILED, false));
    let (mut a, mut b, mut c) = (compiled_call(), compiled_call(), compiled_call());
    assert_eq!(
        execute(&handle, compiled, &mut a),
        SUCCESS,
        "{}",
        last_error()
    );
    assert_eq!(execute_overridden(&handle, compiled, &mut b, &[]), SUCCESS);
    assert_eq!(execute(&handle, reference_context, &mut c), SUCCESS);
    assert_eq!(a.bits(), c.bits());
    assert_eq!(b.bits(), c.bits());
    for context in [compiled, direct, reference_context] {
        destroy(&handle, context);
    }
}

#[test]
fn bad_overrides_are_refused_naming_uid_and_value_and_write_nothing() {
    let handle = OwnedHandle::new();
    let compiled = create(&handle, &graph(COMPILED, true));

    // A new B on every primary but offsets left at the compiled [B+1]: the graph's own rule.
    let stale_offsets: Vec<_> = tensor_shapes(LARGER)
        .into_iter()
        .filter(|(uid, ..)| *uid != Q_OFF && *uid != KV_OFF)
        .collect();
    let mut call = larger_call();
    let status = execute_overridden(&handle, compiled, &mut call, &stale_offsets);
    assert_eq!(status, INVALID_VALUE);
    let text = last_error();
    assert!(text.contains("shape overrides"), "{text}");
    assert!(
        text.contains("aux uid 10") && text.contains("got 4"),
        "{text}"
    );
    assert!(call.untouched());

    let mut call = larger_call();
    let unknown = vec![(99, vec![1, 1, 1, 1], vec![1, 1, 1, 1])];
    assert_eq!(
        execute_overridden(&handle, compiled, &mut call, &unknown),
        INVALID_VALUE
    );
    assert!(
        last_error().contains("override_unique_ids[0] = 99"),
        "{}",
        last_error()
    );
    assert!(call.untouched());

    // Arrays missing while num_overrides > 0.
    let pack = call.pack();
    // SAFETY: NULL arrays with a non-zero count are what is under test; nothing is read.
    let status = unsafe {
        (extra().with_overrides)(
            handle.0,
            compiled,
            null_mut(),
            pack.as_ptr(),
            pack.len() as u32,
            1,
            null(),
            null(),
            null(),
            null(),
        )
    };
    assert_eq!(status, BAD_PARAM);
    assert!(
        last_error().contains("override_unique_ids"),
        "{}",
        last_error()
    );
    assert!(call.untouched());

    // A context whose graph is not override-enabled takes no override.
    let plain = create(&handle, &graph(COMPILED, false));
    let mut call = compiled_call();
    let status = execute_overridden(&handle, plain, &mut call, &tensor_shapes(COMPILED));
    assert_eq!(status, INVALID_VALUE);
    assert!(
        last_error().contains("is_override_shape_enabled is false"),
        "{}",
        last_error()
    );
    assert!(call.untouched());
    destroy(&handle, compiled);
    destroy(&handle, plain);
}

/// Serializes `context`, copies the bytes and gives the plugin's buffer back (zeroed).
fn serialized_copy(handle: &OwnedHandle, context: Context) -> Vec<u8> {
    let mut data = ConstData::empty();
    // SAFETY: a live context; valid out-pointer.
    let status = unsafe { (extra().serialize)(handle.0, context, &mut data) };
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert!(!data.ptr.is_null() && data.size > 0);
    // SAFETY: the plugin lends `size` readable bytes until DestroySerialized.
    let bytes = unsafe { std::slice::from_raw_parts(data.ptr.cast::<u8>(), data.size) }.to_vec();
    // SAFETY: the struct the plugin filled.
    let status = unsafe { (extra().destroy_serialized)(handle.0, &mut data) };
    assert_eq!(status, SUCCESS);
    assert!(
        data.ptr.is_null() && data.size == 0,
        "destroy zeroes the struct"
    );
    let mut stale = ConstData::of(&bytes);
    // SAFETY: already destroyed: must be refused, not freed twice.
    let status = unsafe { (extra().destroy_serialized)(handle.0, &mut stale) };
    assert_eq!(status, BAD_PARAM);
    bytes
}

fn from_bytes(handle: &OwnedHandle, bytes: &[u8]) -> (Status, Context) {
    let data = ConstData::of(bytes);
    let mut context: Context = null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { (extra().from_serialized)(handle.0, &data, &mut context) };
    (status, context)
}

fn workspace(handle: &OwnedHandle, context: Context) -> usize {
    let mut size = usize::MAX;
    // SAFETY: a live context; valid out-pointer.
    let status =
        unsafe { (plugin().GetWorkspaceSizeFromExecutionContext)(handle.0, context, &mut size) };
    assert_eq!(status, SUCCESS);
    size
}

#[test]
fn a_recreated_context_runs_bit_identically_to_the_original() {
    let handle = OwnedHandle::new();
    let original = create(&handle, &graph(COMPILED, true));
    let bytes = serialized_copy(&handle, original);
    let (status, recreated) = from_bytes(&handle, &bytes);
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(workspace(&handle, recreated), workspace(&handle, original));

    let (mut a, mut b) = (compiled_call(), compiled_call());
    assert_eq!(execute(&handle, original, &mut a), SUCCESS);
    destroy(&handle, original);
    assert_eq!(
        execute(&handle, recreated, &mut b),
        SUCCESS,
        "{}",
        last_error()
    );
    assert!(!a.untouched());
    assert_eq!(a.bits(), b.bits());

    // The recreated context keeps the original's override capability.
    let (mut c, mut d) = (larger_call(), larger_call());
    let direct = create(&handle, &graph(LARGER, false));
    assert_eq!(
        execute_overridden(&handle, recreated, &mut c, &tensor_shapes(LARGER)),
        SUCCESS,
        "{}",
        last_error()
    );
    assert_eq!(execute(&handle, direct, &mut d), SUCCESS);
    assert_eq!(c.bits(), d.bits());
    destroy(&handle, recreated);
    destroy(&handle, direct);
}

#[test]
fn foreign_damaged_and_null_serialized_bytes_are_bad_param_with_a_message() {
    let handle = OwnedHandle::new();
    let original = create(&handle, &graph(COMPILED, false));
    let bytes = serialized_copy(&handle, original);
    destroy(&handle, original);

    let expect = |bytes: &[u8], words: &str| {
        let (status, context) = from_bytes(&handle, bytes);
        assert_eq!(status, BAD_PARAM, "{words}");
        assert!(context.is_null(), "output written on failure");
        let text = last_error();
        assert!(
            text.contains("serialized_context") && text.contains(words),
            "{text}"
        );
    };
    expect(
        &graph(COMPILED, false),
        "not a serialized execution context",
    );
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 1;
    expect(&damaged, "checksum mismatch");
    expect(&bytes[..bytes.len() - 1], "checksum mismatch");
    expect(&bytes[..5], "truncated");

    // Well-formed bytes from another plugin version: the version field rewritten (RSDPACTX
    // layout: magic 8, format 4, version length 2, version) and the trailing FNV-1a-64 redone
    // with the textbook loop, so only the version can be the reason.
    let version = env!("CARGO_PKG_VERSION").as_bytes();
    assert_eq!(&bytes[14..14 + version.len()], version);
    let mut other = bytes.clone();
    other[14] = if version[0] == b'9' { b'8' } else { b'9' };
    let body = other.len() - 8;
    let mut hash: u64 = 0xcbf29ce484222325;
    for byte in &other[..body] {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    other[body..].copy_from_slice(&hash.to_le_bytes());
    let foreign_version = String::from_utf8_lossy(&other[14..14 + version.len()]).into_owned();
    expect(
        &other,
        &format!("written by plugin version {foreign_version}; this is version"),
    );

    let mut context: Context = null_mut();
    // SAFETY: NULL arguments are what is under test.
    unsafe {
        assert_eq!(
            (extra().from_serialized)(handle.0, null(), &mut context),
            BAD_PARAM
        );
        let data = ConstData::of(&bytes);
        assert_eq!(
            (extra().from_serialized)(handle.0, &data, null_mut()),
            BAD_PARAM
        );
        assert_eq!(
            (extra().serialize)(handle.0, null_mut(), null_mut()),
            BAD_PARAM
        );
        assert_eq!(
            (extra().destroy_serialized)(handle.0, null_mut()),
            BAD_PARAM
        );
    }
}
