//! `ExecuteOpGraphWithOverrides` (RFC 0008) and the serialization trio (RFC 0009) through the
//! built .so: one compiled context serving a new B and S_max must give bit-for-bit what a context
//! built for those shapes gives; a context recreated from its bytes must give bit-for-bit what
//! the original gives; bad overrides and bad bytes are refused with a message, writing nothing.

mod common;

use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

use common::*;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{DataType, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes};

const H: i64 = 2;
const D: i64 = 8;
const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const LSE: i64 = 5;
const Q_OFF: i64 = 10;
const KV_OFF: i64 = 11;
const NAN: u32 = 0x7FC0_0D1E;

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

/// Shapes of one graph: batch, S_max of Q/O and of K/V.
#[derive(Clone, Copy)]
struct Shape {
    b: i64,
    sq: i64,
    skv: i64,
}

fn bshd(s: i64) -> (Vec<i64>, Vec<i64>) {
    (vec![0, s, H, D], vec![s * H * D, H * D, D, 1])
}

/// Every (uid, dims, strides) of the graph for `shape`: what an override lists.
fn tensor_shapes(shape: Shape) -> Vec<(i64, Vec<i64>, Vec<i64>)> {
    let ragged = |uid, s| {
        let (mut dims, strides) = bshd(s);
        dims[0] = shape.b;
        (uid, dims, strides)
    };
    vec![
        ragged(Q, shape.sq),
        ragged(K, shape.skv),
        ragged(V, shape.skv),
        ragged(O, shape.sq),
        (
            LSE,
            vec![shape.b, H, shape.sq, 1],
            vec![H * shape.sq, shape.sq, 1, 1],
        ),
        (Q_OFF, vec![shape.b + 1, 1, 1, 1], vec![1, 1, 1, 1]),
        (KV_OFF, vec![shape.b + 1, 1, 1, 1], vec![1, 1, 1, 1]),
    ]
}

fn graph(shape: Shape, override_enabled: bool) -> Vec<u8> {
    let mut sdpa = SdpaAttributes::new(Q, K, V, O);
    sdpa.stats_tensor_uid = Some(LSE);
    sdpa.generate_stats = Some(true);
    sdpa.attn_scale_value = Some(0.3);
    sdpa.causal_mask = true;
    let mut g = Graph::new("override_and_serialization")
        .set_data_types(DataType::Float, DataType::Float, DataType::Float);
    for (uid, dims, strides) in tensor_shapes(shape) {
        let index = uid == Q_OFF || uid == KV_OFF;
        let mut t = TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("t{uid}"))
            .set_data_type(if index {
                DataType::Int32
            } else {
                DataType::Float
            })
            .set_dims(dims)
            .set_strides(strides);
        if matches!(uid, Q | O) {
            t = t.set_ragged_offset_uid(Q_OFF);
        }
        if matches!(uid, K | V) {
            t = t.set_ragged_offset_uid(KV_OFF);
        }
        g = g.add_tensor(t);
    }
    g.is_override_shape_enabled = override_enabled;
    encode_graph(&g.add_node(Node::sdpa("sdpa", sdpa)))
}

fn config() -> Vec<u8> {
    encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID))
}

/// One call's tensors: tokens per batch (each within the shape's S_max), element offsets.
struct Call {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    q_off: Vec<i32>,
    kv_off: Vec<i32>,
    o: Vec<f32>,
    lse: Vec<f32>,
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 2001)
        .map(|x| x as f32 / 1000.0 - 1.0)
        .collect()
}

impl Call {
    fn new(shape: Shape, q_tokens: &[i32], kv_tokens: &[i32]) -> Call {
        let offsets = |tokens: &[i32]| {
            let mut out = vec![0];
            for t in tokens {
                out.push(out[out.len() - 1] + t * (H * D) as i32);
            }
            out
        };
        let (q_off, kv_off) = (offsets(q_tokens), offsets(kv_tokens));
        let (nq, nkv) = (q_off[q_tokens.len()] as usize, kv_off[kv_tokens.len()] as usize);
        Call {
            q: values(nq, 1),
            k: values(nkv, 2),
            v: values(nkv, 3),
            o: vec![f32::from_bits(NAN); nq],
            lse: vec![f32::from_bits(NAN); (shape.b * H * shape.sq) as usize],
            q_off,
            kv_off,
        }
    }

    fn pack(&mut self) -> Vec<DeviceBuffer> {
        let entry = |uid, ptr: *const f32| DeviceBuffer {
            uid,
            ptr: ptr.cast_mut().cast(),
        };
        vec![
            entry(Q, self.q.as_ptr()),
            entry(K, self.k.as_ptr()),
            entry(V, self.v.as_ptr()),
            entry(O, self.o.as_mut_ptr()),
            entry(LSE, self.lse.as_mut_ptr()),
            DeviceBuffer {
                uid: Q_OFF,
                ptr: self.q_off.as_ptr().cast_mut().cast(),
            },
            DeviceBuffer {
                uid: KV_OFF,
                ptr: self.kv_off.as_ptr().cast_mut().cast(),
            },
        ]
    }

    fn untouched(&self) -> bool {
        self.o.iter().chain(&self.lse).all(|x| x.to_bits() == NAN)
    }

    fn bits(&self) -> Vec<u32> {
        self.o.iter().chain(&self.lse).map(|x| x.to_bits()).collect()
    }
}

fn create(handle: &OwnedHandle, graph: &[u8]) -> Context {
    let (c, g) = (config(), graph);
    let (c, g) = (ConstData::of(&c), ConstData::of(g));
    let mut context: Context = null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { (plugin().CreateExecutionContext)(handle.0, &c, &g, &mut context) };
    assert_eq!(status, SUCCESS, "{}", last_error());
    context
}

fn destroy(handle: &OwnedHandle, context: Context) {
    // SAFETY: a live context of this handle.
    assert_eq!(
        unsafe { (plugin().DestroyExecutionContext)(handle.0, context) },
        SUCCESS
    );
}

fn execute(handle: &OwnedHandle, context: Context, call: &mut Call) -> Status {
    let pack = call.pack();
    // SAFETY: every pointer is a live host buffer of its tensor's extent.
    unsafe {
        (plugin().ExecuteOpGraph)(
            handle.0,
            context,
            null_mut(),
            pack.as_ptr(),
            pack.len() as u32,
        )
    }
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

const COMPILED: Shape = Shape {
    b: 3,
    sq: 4,
    skv: 5,
};
const LARGER: Shape = Shape {
    b: 5,
    sq: 7,
    skv: 6,
};

fn compiled_call() -> Call {
    Call::new(COMPILED, &[4, 0, 2], &[5, 3, 1])
}

fn larger_call() -> Call {
    Call::new(LARGER, &[7, 1, 0, 3, 6], &[6, 2, 4, 0, 5])
}

#[test]
fn override_enabled_graphs_are_applicable() {
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &graph(COMPILED, true));
    assert_eq!(status, SUCCESS);
    assert!(ids.contains(&HOST_REFERENCE_ID), "{ids:?}: {}", last_error());
}

#[test]
fn one_context_serves_a_new_batch_and_s_max_like_a_context_built_for_them() {
    let handle = OwnedHandle::new();
    let compiled = create(&handle, &graph(COMPILED, true));
    let direct = create(&handle, &graph(LARGER, false));

    let (mut over, mut plain) = (larger_call(), larger_call());
    let status = execute_overridden(&handle, compiled, &mut over, &tensor_shapes(LARGER));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(execute(&handle, direct, &mut plain), SUCCESS, "{}", last_error());
    assert!(!over.untouched(), "the overridden execute wrote nothing");
    assert_eq!(over.bits(), plain.bits());

    // The compiled shapes still run, through both entry points (no override = ExecuteOpGraph).
    let reference_context = create(&handle, &graph(COMPILED, false));
    let (mut a, mut b, mut c) = (compiled_call(), compiled_call(), compiled_call());
    assert_eq!(execute(&handle, compiled, &mut a), SUCCESS, "{}", last_error());
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
    assert!(text.contains("aux uid 10") && text.contains("got 4"), "{text}");
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
    assert!(last_error().contains("override_unique_ids"), "{}", last_error());
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
    assert_eq!(
        unsafe { (extra().destroy_serialized)(handle.0, &mut data) },
        SUCCESS
    );
    assert!(data.ptr.is_null() && data.size == 0, "destroy zeroes the struct");
    // SAFETY: already destroyed: must be refused, not freed twice.
    let mut stale = ConstData::of(&bytes);
    assert_eq!(
        unsafe { (extra().destroy_serialized)(handle.0, &mut stale) },
        BAD_PARAM
    );
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
    assert_eq!(execute(&handle, recreated, &mut b), SUCCESS, "{}", last_error());
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
        assert!(text.contains("serialized_context") && text.contains(words), "{text}");
    };
    expect(&graph(COMPILED, false), "not a serialized execution context");
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 1;
    expect(&damaged, "checksum mismatch");
    expect(&bytes[..bytes.len() - 1], "checksum mismatch");
    expect(&bytes[..5], "truncated");

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
        assert_eq!((extra().serialize)(handle.0, null_mut(), null_mut()), BAD_PARAM);
        assert_eq!(
            (extra().destroy_serialized)(handle.0, null_mut()),
            BAD_PARAM
        );
    }
}
