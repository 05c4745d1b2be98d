//! The override and serialization entry points: raw bytes as a serialized execution context
//! (`CreateExecutionContextFromSerialized`), a stored context with bytes flipped, and shape
//! overrides the bytes choose passed to `ExecuteOpGraphWithOverrides` on a context of the golden
//! graph made override-enabled, executed on buffers of exactly the size the overridden shapes
//! imply (`mutate::execute`, canaries included). A crash is: INTERNAL_ERROR, a context that
//! deserializes but will not serialize again or gives another workspace size, or what
//! `mutate::execute` checks.

use hipdnn_provider_ragged_sdpa::abi::types::{ConstData, ExecutionContextHandle, Status};
use hipdnn_provider_ragged_sdpa::exports::{engine, serialization};
use ragged_schema::Graph;

use crate::mutate::{self, Input, Override};
use crate::{ENGINE_CONFIG, handle, last_error, no_internal_error};

fn golden_override_enabled() -> Graph {
    let Ok(mut graph) = ragged_schema::wire::decode_graph(mutate::GOLDEN) else {
        panic!("the golden graph does not decode");
    };
    graph.is_override_shape_enabled = true;
    graph
}

fn const_data(bytes: &[u8]) -> ConstData {
    ConstData {
        ptr: bytes.as_ptr().cast(),
        size: bytes.len(),
    }
}

pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => from_serialized(rest),
        1 => flipped_serialized(rest),
        _ => with_overrides(rest),
    }
}

/// A context of `graph`, serialized: the bytes a well-behaved caller would store.
fn serialized_context_of(graph: &Graph) -> Vec<u8> {
    let h = handle();
    let bytes = ragged_schema::wire::encode_graph(graph);
    let (graph_data, config) = (const_data(&bytes), const_data(ENGINE_CONFIG));
    let mut context: ExecutionContextHandle = std::ptr::null_mut();
    // SAFETY: locals valid for the writes; the graph and config describe live bytes.
    let status = unsafe {
        engine::hipdnnEnginePluginCreateExecutionContext(h, &config, &graph_data, &mut context)
    };
    assert_eq!(status, Status::SUCCESS, "golden context: {}", last_error());
    let stored = serialize(context);
    // SAFETY: `context` is live and destroyed once.
    let status = unsafe { engine::hipdnnEnginePluginDestroyExecutionContext(h, context) };
    assert_eq!(status, Status::SUCCESS, "{}", last_error());
    stored
}

/// `SerializeExecutionContext` of a live context, copied out and given back.
fn serialize(context: ExecutionContextHandle) -> Vec<u8> {
    let h = handle();
    let mut out = ConstData {
        ptr: std::ptr::null(),
        size: 0,
    };
    // SAFETY: `context` is live; `out` a local valid for the write.
    let status =
        unsafe { serialization::hipdnnEnginePluginSerializeExecutionContext(h, context, &mut out) };
    assert_eq!(status, Status::SUCCESS, "Serialize: {}", last_error());
    // SAFETY: the plugin lent `out.size` readable bytes at `out.ptr` until they are given back.
    let copy = unsafe { std::slice::from_raw_parts(out.ptr.cast::<u8>(), out.size) }.to_vec();
    // SAFETY: `out` is what Serialize lent, given back once.
    let status =
        unsafe { serialization::hipdnnEnginePluginDestroySerializedExecutionContext(h, &mut out) };
    assert_eq!(
        status,
        Status::SUCCESS,
        "DestroySerialized: {}",
        last_error()
    );
    copy
}

/// `bytes` as a stored context. One that is accepted must answer like any context: its
/// workspace size, and serializing it again gives bytes that are accepted too.
fn from_serialized(bytes: &[u8]) {
    let h = handle();
    let stored = const_data(bytes);
    let mut context: ExecutionContextHandle = std::ptr::null_mut();
    // SAFETY: `stored` describes live bytes; `context` a local valid for the write.
    let status = unsafe {
        serialization::hipdnnEnginePluginCreateExecutionContextFromSerialized(
            h,
            &stored,
            &mut context,
        )
    };
    no_internal_error("CreateExecutionContextFromSerialized", status);
    if status != Status::SUCCESS {
        return;
    }
    let mut workspace = 0usize;
    // SAFETY: `context` is live.
    let status = unsafe {
        engine::hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(h, context, &mut workspace)
    };
    assert_eq!(status, Status::SUCCESS, "{}", last_error());
    let again = serialize(context);
    // SAFETY: `context` is live and destroyed once.
    let status = unsafe { engine::hipdnnEnginePluginDestroyExecutionContext(h, context) };
    assert_eq!(status, Status::SUCCESS, "{}", last_error());
    let stored = const_data(&again);
    let mut second: ExecutionContextHandle = std::ptr::null_mut();
    // SAFETY: as above.
    let status = unsafe {
        serialization::hipdnnEnginePluginCreateExecutionContextFromSerialized(
            h,
            &stored,
            &mut second,
        )
    };
    assert_eq!(
        status,
        Status::SUCCESS,
        "re-serialized context refused: {}",
        last_error()
    );
    let mut second_workspace = 0usize;
    // SAFETY: `second` is live.
    let status = unsafe {
        engine::hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
            h,
            second,
            &mut second_workspace,
        )
    };
    assert_eq!(status, Status::SUCCESS, "{}", last_error());
    assert_eq!(workspace, second_workspace, "workspace sizes disagree");
    // SAFETY: `second` is live and destroyed once.
    let status = unsafe { engine::hipdnnEnginePluginDestroyExecutionContext(h, second) };
    assert_eq!(status, Status::SUCCESS, "{}", last_error());
}

/// A stored context of the golden graph with up to 8 bytes replaced, truncated or extended as
/// the input says: the near-valid bytes raw fuzzing rarely reaches.
fn flipped_serialized(rest: &[u8]) {
    static STORED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let mut bytes = STORED
        .get_or_init(|| serialized_context_of(&golden_override_enabled()))
        .clone();
    let mut input = Input(rest);
    for _ in 0..input.byte() % 9 {
        let at = usize::from(input.byte()) << 8 | usize::from(input.byte());
        match input.byte() % 4 {
            0 => bytes.truncate(at % (bytes.len() + 1)),
            1 => bytes.push(input.byte()),
            _ if !bytes.is_empty() => {
                let i = at % bytes.len();
                bytes[i] = input.byte();
            }
            _ => {}
        }
    }
    from_serialized(&bytes);
}

/// Overrides of the golden graph's tensors: either a coherent new batch size and S_max for every
/// tensor, or field edits of the compiled dims and strides; then the override-enabled golden
/// context executes with them.
fn with_overrides(rest: &[u8]) {
    let graph = golden_override_enabled();
    let bytes = ragged_schema::wire::encode_graph(&graph);
    let mut input = Input(rest);
    let mut overrides: Vec<Override> = Vec::new();
    if input.byte().is_multiple_of(2) {
        let b = i64::from(input.byte() % 8) + 1;
        let s = i64::from(input.byte() % 64) + 1;
        for t in &graph.tensors {
            let (mut dims, mut strides) = (t.dims.clone(), t.strides.clone());
            if dims.len() != 4 || strides.len() != 4 {
                continue;
            }
            let is_offsets = graph
                .tensors
                .iter()
                .any(|o| o.ragged_offset_tensor_uid == Some(t.uid));
            if is_offsets {
                dims[0] = b + 1;
            } else if t.ragged_offset_tensor_uid.is_some() {
                // [B, S, H, D] with S's stride inside B's.
                dims[0] = b;
                dims[1] = s;
                strides[0] = s.saturating_mul(strides[1]);
            } else {
                // The dense LSE, [B, H, S, 1].
                dims[0] = b;
                dims[2] = s;
                strides[1] = s.saturating_mul(strides[2]);
                strides[0] = dims[1].saturating_mul(strides[1]);
            }
            if !input.byte().is_multiple_of(4) {
                overrides.push((t.uid, dims, strides));
            }
        }
    }
    for _ in 0..input.byte() % 4 {
        let i = usize::from(input.byte());
        let (uid, mut dims, mut strides) = match graph.tensors.get(i % (graph.tensors.len() + 1)) {
            Some(t) => (t.uid, t.dims.clone(), t.strides.clone()),
            None => (input.int(), vec![1; 4], vec![1; 4]),
        };
        if input.byte().is_multiple_of(16) {
            let len = usize::from(input.byte() % 7);
            dims.resize(len, 1);
            strides.resize(len, 1);
        }
        for _ in 0..input.byte() % 3 {
            let field = usize::from(input.byte());
            let value = input.int();
            match (field % 2, dims.len()) {
                (_, 0) => {}
                (0, n) => dims[field / 2 % n] = value,
                (_, n) => strides[field / 2 % n] = value,
            }
        }
        overrides.push((uid, dims, strides));
    }
    if overrides.is_empty() {
        return;
    }
    // The shapes the call runs at, for sizing its buffers: each listed uid takes its override
    // (the plugin refuses a uid listed twice or not in the graph, and a changed rank).
    let mut shaped = graph.clone();
    for (uid, dims, strides) in &overrides {
        if let Some(t) = shaped.tensors.iter_mut().find(|t| t.uid == *uid) {
            t.dims = dims.clone();
            t.strides = strides.clone();
        }
    }
    mutate::execute(&shaped, &bytes, &overrides, &mut input);
}
