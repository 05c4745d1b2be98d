//! The structure-aware target: the golden graph, mutated by a list of field edits the fuzzer's
//! bytes choose (dims, strides, uids, data types, aux uids, multipliers, SDPA fields, seq_len
//! inputs), encoded, passed to every graph entry point, and — when the host engine takes it —
//! executed on buffers of exactly the size the graph and offsets imply, each followed by a
//! canary. A crash is: INTERNAL_ERROR, a canary changed, an input changed, or an output byte
//! written by an execute that failed.

use hipdnn_provider_ragged_sdpa::abi::types::{
    ConstData, DeviceBuffer, ExecutionContextHandle, Status,
};
use hipdnn_provider_ragged_sdpa::exports::engine;
use ragged_schema::{DataType, Graph, NodeAttributes, SdpaAttributes, TensorAttributes};

use crate::{ENGINE_CONFIG, handle, last_error, no_internal_error};

pub(crate) const GOLDEN: &[u8] = include_bytes!("../../plugin/tests/golden/graph_flagged.bin");

/// Bytes after each buffer that must survive every execute.
const CANARY: usize = 64;
const CANARY_BYTE: u8 = 0xA5;
const OUTPUT_BYTE: u8 = 0xCD;
/// Larger buffers are not executed (the fuzzer is after logic, not memory bandwidth).
const MAX_BUFFER: usize = 1 << 20;

/// The fuzzer's bytes, read front to back; reads past the end give 0.
pub(crate) struct Input<'a>(pub(crate) &'a [u8]);

impl Input<'_> {
    pub(crate) fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[usize::from(self.byte()) % from.len()]
    }

    pub(crate) fn int(&mut self) -> i64 {
        const EDGES: [i64; 18] = [
            0,
            1,
            2,
            3,
            4,
            8,
            16,
            17,
            32,
            64,
            -1,
            i64::MAX,
            i64::MIN,
            1 << 31,
            1 << 32,
            1 << 40,
            1 << 61,
            1 << 62,
        ];
        if self.byte() < 200 {
            self.pick(&EDGES)
        } else {
            let mut raw = [0u8; 8];
            raw.iter_mut().for_each(|b| *b = self.byte());
            i64::from_le_bytes(raw)
        }
    }

    fn float(&mut self) -> f32 {
        self.pick(&[0.25, 1.0, 0.0, -1.0, 1e30, f32::NAN, f32::INFINITY, 1e-30])
    }
}

const TYPES: [DataType; 8] = [
    DataType::BFloat16,
    DataType::Half,
    DataType::Float,
    DataType::Double,
    DataType::Int32,
    DataType::Int64,
    DataType::Fp8E4m3,
    DataType::Unset,
];

fn sdpa(graph: &mut Graph) -> Option<&mut SdpaAttributes> {
    match &mut graph.nodes.first_mut()?.attributes {
        NodeAttributes::Sdpa(s) => Some(s),
        _ => None,
    }
}

/// One edit of the graph, chosen by the input.
fn mutate(graph: &mut Graph, input: &mut Input<'_>) {
    let n = graph.tensors.len();
    let t = usize::from(input.byte()) % n.max(1);
    let uids: Vec<i64> = graph.tensors.iter().map(|t| t.uid).collect();
    match input.byte() % 14 {
        0 => {
            let tensor = &mut graph.tensors[t];
            if !tensor.dims.is_empty() {
                let k = usize::from(input.byte()) % tensor.dims.len();
                tensor.dims[k] = input.int();
            }
        }
        1 => {
            let tensor = &mut graph.tensors[t];
            if !tensor.strides.is_empty() {
                let k = usize::from(input.byte()) % tensor.strides.len();
                tensor.strides[k] = input.int();
            }
        }
        2 => graph.tensors[t].uid = input.int(),
        3 => graph.tensors[t].data_type = input.pick(&TYPES),
        4 => {
            graph.tensors[t].ragged_offset_tensor_uid = match input.byte() % 3 {
                0 => None,
                _ => Some(input.pick(&uids)),
            }
        }
        5 => graph.tensors[t].ragged_offset_multiplier = input.int(),
        6 => {
            let uid = input.pick(&uids);
            if let Some(s) = sdpa(graph) {
                match input.byte() % 6 {
                    0 => s.q_tensor_uid = uid,
                    1 => s.k_tensor_uid = uid,
                    2 => s.v_tensor_uid = uid,
                    3 => s.o_tensor_uid = uid,
                    4 => s.stats_tensor_uid = Some(uid),
                    _ => s.stats_tensor_uid = None,
                }
            }
        }
        7 => {
            let (a, b) = (input.byte(), input.int());
            if let Some(s) = sdpa(graph) {
                match a % 5 {
                    0 => s.causal_mask = !s.causal_mask,
                    1 => s.causal_mask_bottom_right = !s.causal_mask_bottom_right,
                    2 => s.left_bound = Some(b),
                    3 => s.right_bound = Some(b),
                    _ => s.padding_mask = !s.padding_mask,
                }
            }
        }
        8 => {
            let value = input.float();
            if let Some(s) = sdpa(graph) {
                s.attn_scale_value = Some(value);
            }
        }
        9 | 10 => {
            // A seq_len input [B, 1, 1, 1] of the Q tensor's batch.
            let batch = graph
                .tensors
                .iter()
                .find(|t| t.uid == 1)
                .map_or(2, |t| t.dims[0]);
            let uid = 40 + i64::from(input.byte() % 2);
            let data_type = input.pick(&[DataType::Int32, DataType::Int64]);
            graph.tensors.retain(|t| t.uid != uid);
            graph.tensors.push(
                TensorAttributes::new()
                    .set_uid(uid)
                    .set_data_type(data_type)
                    .set_dims(vec![batch, 1, 1, 1])
                    .set_strides(vec![1, 1, 1, 1]),
            );
            if let Some(s) = sdpa(graph) {
                if uid == 40 {
                    s.seq_len_q_tensor_uid = Some(uid);
                } else {
                    s.seq_len_kv_tensor_uid = Some(uid);
                }
            }
        }
        11 => graph.tensors[t].alignment = input.int(),
        12 => {
            // A runtime pass-by-value scale, uid 30.
            graph.tensors.retain(|t| t.uid != 30);
            graph.tensors.push(
                TensorAttributes::new()
                    .set_uid(30)
                    .set_data_type(input.pick(&[DataType::Float, DataType::Double]))
                    .set_dims(vec![1])
                    .set_strides(vec![1])
                    .set_is_runtime_pass_by_value(!input.byte().is_multiple_of(4)),
            );
            if let Some(s) = sdpa(graph) {
                s.scale_tensor_uid = Some(30);
            }
        }
        _ => {
            let tensor = &mut graph.tensors[t];
            match input.byte() % 3 {
                0 => tensor.is_virtual = !tensor.is_virtual,
                1 => {
                    tensor.dims.pop();
                }
                _ => tensor.dims.push(input.int()),
            }
        }
    }
}

pub fn run(data: &[u8]) {
    let Ok(mut graph) = ragged_schema::wire::decode_graph(GOLDEN) else {
        panic!("the golden graph does not decode");
    };
    let mut input = Input(data);
    let edits = input.byte() % 8;
    for _ in 0..edits {
        mutate(&mut graph, &mut input);
    }
    let bytes = ragged_schema::wire::encode_graph(&graph);
    if crate::every_graph_entry_point(&bytes) {
        execute(&graph, &bytes, &[], &mut input);
    }
}

/// One buffer of the variant pack: its bytes, then the canary.
struct Buffer {
    uid: i64,
    storage: Vec<u128>,
    len: usize,
    output: bool,
}

impl Buffer {
    fn new(uid: i64, len: usize, output: bool, fill: impl Fn(usize) -> u8) -> Buffer {
        let mut storage = vec![0u128; (len + CANARY).div_ceil(16)];
        let bytes = as_bytes_mut(&mut storage);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = if i >= len {
                CANARY_BYTE
            } else if output {
                OUTPUT_BYTE
            } else {
                fill(i)
            };
        }
        Buffer {
            uid,
            storage,
            len,
            output,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: a u128 slice viewed as its bytes; every bit pattern is a valid u8.
        unsafe {
            std::slice::from_raw_parts(self.storage.as_ptr().cast::<u8>(), self.storage.len() * 16)
        }
    }
}

fn as_bytes_mut(storage: &mut [u128]) -> &mut [u8] {
    // SAFETY: as in `Buffer::bytes`, exclusively borrowed.
    unsafe { std::slice::from_raw_parts_mut(storage.as_mut_ptr().cast::<u8>(), storage.len() * 16) }
}

fn element_size(data_type: DataType) -> usize {
    match data_type {
        DataType::Half | DataType::BFloat16 => 2,
        DataType::Float | DataType::Int32 => 4,
        _ => 8,
    }
}

/// Writes index values (int32 or int64) into a buffer's bytes.
fn index_bytes(values: &[i64], data_type: DataType) -> Vec<u8> {
    if data_type == DataType::Int32 {
        values
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect()
    } else {
        values.iter().flat_map(|&v| v.to_le_bytes()).collect()
    }
}

/// Dense element space of `dims`/`strides`, if it is a small non-negative one.
fn dense_space(t: &TensorAttributes) -> Option<usize> {
    if t.dims.contains(&0) {
        return Some(0);
    }
    let mut last = 0i64;
    for (&d, &s) in t.dims.iter().zip(&t.strides) {
        last = last.checked_add((d.checked_sub(1)?).checked_mul(s)?)?;
    }
    usize::try_from(last.checked_add(1)?).ok()
}

/// One shape override as C passes it: uid, dims, strides.
pub(crate) type Override = (i64, Vec<i64>, Vec<i64>);

/// Builds buffers for `graph` (the shapes the call runs at) and executes the context made from
/// `bytes`: through `ExecuteOpGraph`, or through `ExecuteOpGraphWithOverrides` with `overrides`
/// when there are any (then `graph` is `bytes`' graph with the overrides applied).
pub(crate) fn execute(graph: &Graph, bytes: &[u8], overrides: &[Override], input: &mut Input<'_>) {
    let Some(s) = graph.nodes.first().and_then(|n| match &n.attributes {
        NodeAttributes::Sdpa(s) => Some(s.clone()),
        _ => None,
    }) else {
        return;
    };
    let find = |uid: i64| graph.tensors.iter().find(|t| t.uid == uid);
    let mut buffers: Vec<Buffer> = Vec::new();
    // Offsets first: a ragged tensor's extent is ragged_offset[B] × multiplier elements.
    let primaries = [
        (s.q_tensor_uid, false),
        (s.k_tensor_uid, false),
        (s.v_tensor_uid, false),
        (s.o_tensor_uid, true),
    ]
    .into_iter()
    .chain(s.stats_tensor_uid.map(|u| (u, true)));
    let mut offsets_of: Vec<(i64, Vec<i64>)> = Vec::new();
    for (uid, output) in primaries {
        let Some(t) = find(uid) else { return };
        if offsets_of.iter().any(|(u, _)| *u == uid) {
            // One uid as both offsets and a primary: no buffer size honours both contracts.
            return;
        }
        if buffers.iter().any(|b| b.uid == uid) {
            continue;
        }
        let size = element_size(t.data_type);
        let elements = match t.ragged_offset_tensor_uid {
            None => dense_space(t),
            Some(aux_uid) => {
                let Some(aux) = find(aux_uid) else { return };
                let [b, s_max, h, d] = <[i64; 4]>::try_from(t.dims.as_slice()).unwrap_or([0; 4]);
                let existing = offsets_of.iter().find(|(u, _)| *u == aux_uid).cloned();
                if existing.is_none() && buffers.iter().any(|b| b.uid == aux_uid) {
                    return;
                }
                let values = match existing {
                    Some((_, values)) => values,
                    None => {
                        let Some(n) = usize::try_from(b).ok().filter(|&n| n <= 64) else {
                            return;
                        };
                        let row = h.saturating_mul(d);
                        let mut values = vec![0i64];
                        for _ in 0..n {
                            let len = i64::from(input.byte()) % (s_max.clamp(0, 64) + 1);
                            let next =
                                values[values.len() - 1].saturating_add(len.saturating_mul(row));
                            values.push(next);
                        }
                        let m = t.ragged_offset_multiplier.max(1);
                        let mut values: Vec<i64> = values.iter().map(|v| v / m).collect();
                        if input.byte().is_multiple_of(8) {
                            let i = usize::from(input.byte()) % values.len();
                            values[i] = input.int();
                        }
                        let raw = index_bytes(&values, aux.data_type);
                        buffers.push(Buffer::new(aux_uid, raw.len(), false, |i| raw[i]));
                        offsets_of.push((aux_uid, values.clone()));
                        values
                    }
                };
                let last = values.last().copied().unwrap_or(0);
                usize::try_from(last.saturating_mul(t.ragged_offset_multiplier)).ok()
            }
        };
        let Some(len) = elements
            .and_then(|e| e.checked_mul(size))
            .filter(|&l| l <= MAX_BUFFER)
        else {
            return;
        };
        // Inputs hold small finite values in every float format: 0x3C00/0x3F80-ish patterns.
        buffers.push(Buffer::new(uid, len, output, |i| {
            if i % 2 == 1 { 0x3C } else { 0 }
        }));
    }
    for uid in [s.seq_len_q_tensor_uid, s.seq_len_kv_tensor_uid]
        .into_iter()
        .flatten()
    {
        let Some(t) = find(uid) else { return };
        if buffers.iter().any(|b| b.uid == uid) {
            return;
        }
        let n = usize::try_from(t.dims.first().copied().unwrap_or(0))
            .unwrap_or(0)
            .min(64);
        let values: Vec<i64> = (0..n).map(|_| i64::from(input.byte() % 8)).collect();
        let raw = index_bytes(&values, t.data_type);
        buffers.push(Buffer::new(uid, raw.len(), false, |i| raw[i]));
    }
    let mut entries: Vec<DeviceBuffer> = buffers
        .iter_mut()
        .map(|b| DeviceBuffer {
            uid: b.uid,
            ptr: b.storage.as_mut_ptr().cast(),
        })
        .collect();
    let value = input.float();
    let mut scale = if s
        .scale_tensor_uid
        .and_then(find)
        .is_some_and(|t| t.data_type == DataType::Double)
    {
        f64::from(value).to_le_bytes()
    } else {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&value.to_le_bytes());
        b
    };
    if let Some(uid) = s.scale_tensor_uid {
        entries.push(DeviceBuffer {
            uid,
            ptr: scale.as_mut_ptr().cast(),
        });
    }
    let before: Vec<Vec<u8>> = buffers.iter().map(|b| b.bytes().to_vec()).collect();

    let h = handle();
    let graph_data = ConstData {
        ptr: bytes.as_ptr().cast(),
        size: bytes.len(),
    };
    let config = ConstData {
        ptr: ENGINE_CONFIG.as_ptr().cast(),
        size: ENGINE_CONFIG.len(),
    };
    let mut context: ExecutionContextHandle = std::ptr::null_mut();
    // SAFETY: locals valid for the writes; the graph and config describe live bytes.
    let status = unsafe {
        engine::hipdnnEnginePluginCreateExecutionContext(h, &config, &graph_data, &mut context)
    };
    assert_eq!(
        status,
        Status::SUCCESS,
        "offered but no context: {}",
        last_error()
    );
    let count = u32::try_from(entries.len()).unwrap_or(0);
    // SAFETY: every entry points at a live buffer of exactly the extent the graph and its
    // offsets give (that is what the fuzzer checks), followed by a canary.
    let status = if overrides.is_empty() {
        // SAFETY: as above.
        unsafe {
            engine::hipdnnEnginePluginExecuteOpGraph(
                h,
                context,
                std::ptr::null_mut(),
                entries.as_ptr(),
                count,
            )
        }
    } else {
        let uids: Vec<i64> = overrides.iter().map(|o| o.0).collect();
        let lengths: Vec<u32> = overrides.iter().map(|o| o.1.len() as u32).collect();
        let shapes: Vec<*const i64> = overrides.iter().map(|o| o.1.as_ptr()).collect();
        let strides: Vec<*const i64> = overrides.iter().map(|o| o.2.as_ptr()).collect();
        // SAFETY: as above, the buffers sized for the overridden shapes; every override array
        // holds `overrides.len()` entries, and entry i's dims and strides `lengths[i]` values
        // (`Override` keeps both the same length).
        unsafe {
            hipdnn_provider_ragged_sdpa::exports::overrides::hipdnnEnginePluginExecuteOpGraphWithOverrides(
                h,
                context,
                std::ptr::null_mut(),
                entries.as_ptr(),
                count,
                overrides.len() as u32,
                uids.as_ptr(),
                lengths.as_ptr(),
                shapes.as_ptr(),
                strides.as_ptr(),
            )
        }
    };
    no_internal_error("ExecuteOpGraph", status);
    // SAFETY: `context` is live and destroyed once.
    let destroyed = unsafe { engine::hipdnnEnginePluginDestroyExecutionContext(h, context) };
    assert_eq!(destroyed, Status::SUCCESS);

    for (buffer, before) in buffers.iter().zip(&before) {
        let now = buffer.bytes();
        assert!(
            now[buffer.len..].iter().all(|&b| b == CANARY_BYTE),
            "tensor uid {} written past its {} bytes (status {})",
            buffer.uid,
            buffer.len,
            status.0
        );
        if !buffer.output || status != Status::SUCCESS {
            assert!(
                now == before.as_slice(),
                "tensor uid {} changed by an execute that {} (status {}: {})",
                buffer.uid,
                if buffer.output {
                    "failed"
                } else {
                    "must only read it"
                },
                status.0,
                last_error()
            );
        }
    }
}
