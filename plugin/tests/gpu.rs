//! Device tests through the C ABI: `RAGGED_SDPA_CUDA_FMHA` against `RAGGED_SDPA_HOST_REFERENCE`
//! on identical device inputs (ragged-sdpa.md §8, project rule), the host engine reading and
//! writing device buffers through its staging copies. Without a CUDA device every test prints
//! `skipped: <reason>` and returns.
//!
//! On the H200: `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1 <this test binary>` (the common loader sets the
//! variable itself), and `compute-sanitizer --tool memcheck <binary> zero_length` for the memory
//! check of the zero-length-batch case.

mod common;

use std::ptr::null_mut;

use common::device::*;
use common::*;
use ragged_gpu_runtime::cuda::memory::{DeviceAllocation, download, upload};
use ragged_gpu_runtime::cuda::runtime;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, DiagonalAlignment, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes,
};

const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const LSE: i64 = 5;
const Q_OFFSETS: i64 = 10;
const KV_OFFSETS: i64 = 11;
const LSE_OFFSETS: i64 = 12;
const SCALE: i64 = 20;

const LSE_SENTINEL: u32 = 0x7FC0_0D1E;

#[derive(Clone, Copy, PartialEq)]
enum Lse {
    None,
    Dense,
    /// Dense, token-major memory (`[B, S, H, 1]` strides `{S·H, H, 1, 1}` in the RFC's order).
    DenseTokenMajor,
    Ragged,
}

struct Case {
    dtype: DataType,
    /// Head dim of Q and K.
    d: i64,
    /// Head dim of V and O (differs from `d` in the DeepSeek-style 192/128 case).
    dv: i64,
    hq: i64,
    hkv: i64,
    q_tokens: Vec<i64>,
    kv_tokens: Vec<i64>,
    band: (Option<i64>, Option<i64>, DiagonalAlignment),
    lse: Lse,
    /// A runtime pass-by-value scale (bound as a host pointer next to device tensors) instead of
    /// the graph's `attn_scale_value`.
    runtime_scale: Option<f32>,
    /// Write every ragged tensor (and the LSE) in cuDNN's `[B, H, S, D]` dims order over the
    /// same memory instead of `[B, S, H, D]` (ragged-sdpa.md §1: both upstream forms).
    bhsd_dims: bool,
}

impl Case {
    /// A case with V's head dim equal to Q's, no mask band, no LSE, the graph's own scale and
    /// `[B, S, H, D]` dims: each test names only what it changes.
    fn new(
        dtype: DataType,
        d: i64,
        heads: (i64, i64),
        q_tokens: &[i64],
        kv_tokens: &[i64],
    ) -> Case {
        Case {
            dtype,
            d,
            dv: d,
            hq: heads.0,
            hkv: heads.1,
            q_tokens: q_tokens.to_vec(),
            kv_tokens: kv_tokens.to_vec(),
            band: (None, None, DiagonalAlignment::TopLeft),
            lse: Lse::None,
            runtime_scale: None,
            bhsd_dims: false,
        }
    }
    fn batch(&self) -> i64 {
        self.q_tokens.len() as i64
    }
    /// S_max a little above the longest batch, as padded frameworks declare it.
    fn s_q(&self) -> i64 {
        self.q_tokens.iter().max().copied().unwrap_or(0).max(1) + 3
    }
    fn s_kv(&self) -> i64 {
        self.kv_tokens.iter().max().copied().unwrap_or(0).max(1) + 5
    }
    fn o_sentinel(&self) -> u16 {
        if self.dtype == DataType::BFloat16 {
            0x7FC1
        } else {
            0x7E01
        }
    }
}

fn graph(case: &Case) -> Graph {
    let (b, d, hq, hkv) = (case.batch(), case.d, case.hq, case.hkv);
    // [B, S, H, x] dims and strides, axes 1 and 2 swapped in the [B, H, S, x] order.
    let order = |mut dims: Vec<i64>, mut strides: Vec<i64>| {
        if case.bhsd_dims {
            dims.swap(1, 2);
            strides.swap(1, 2);
        }
        (dims, strides)
    };
    let ragged = |uid, s, h, d, aux, multiplier| {
        let (dims, strides) = order(vec![b, s, h, d], vec![s * h * d, h * d, d, 1]);
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("t{uid}"))
            .set_data_type(case.dtype)
            .set_dims(dims)
            .set_strides(strides)
            .set_ragged_offset_uid(aux)
            .set_ragged_offset_multiplier(multiplier)
    };
    let index = |uid, data_type| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("offsets{uid}"))
            .set_data_type(data_type)
            .set_dims(vec![b + 1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let mut sdpa = SdpaAttributes::new(Q, K, V, O)
        .set_attn_scale_value(1.0 / (d as f32).sqrt())
        .set_diagonal_band(case.band.0, case.band.1, case.band.2);
    // Q/O offsets count tokens (int32, multiplier H·D); K/V offsets count elements (int64),
    // unless V's head dim differs from K's: then they count tokens too (one offset per token
    // serves both only in token units).
    let dv = case.dv;
    let (k_mult, v_mult) = if dv == d { (1, 1) } else { (hkv * d, hkv * dv) };
    let mut g = Graph::new("gpu_test")
        .set_data_types(case.dtype, DataType::Float, DataType::Float)
        .add_tensor(ragged(Q, case.s_q(), hq, d, Q_OFFSETS, hq * d))
        .add_tensor(ragged(K, case.s_kv(), hkv, d, KV_OFFSETS, k_mult))
        .add_tensor(ragged(V, case.s_kv(), hkv, dv, KV_OFFSETS, v_mult))
        .add_tensor(ragged(O, case.s_q(), hq, dv, Q_OFFSETS, hq * dv))
        .add_tensor(index(Q_OFFSETS, DataType::Int32))
        .add_tensor(index(KV_OFFSETS, DataType::Int64));
    if case.runtime_scale.is_some() {
        sdpa.scale_tensor_uid = Some(SCALE);
        g = g.add_tensor(common::problem::runtime_scale(SCALE));
    }
    let s_q = case.s_q();
    match case.lse {
        Lse::None => {}
        Lse::Dense => {
            sdpa.stats_tensor_uid = Some(LSE);
            g = g.add_tensor(
                TensorAttributes::new()
                    .set_uid(LSE)
                    .set_name("lse")
                    .set_data_type(DataType::Float)
                    .set_dims(vec![b, hq, s_q, 1])
                    .set_strides(vec![hq * s_q, s_q, 1, 1]),
            );
        }
        Lse::DenseTokenMajor => {
            sdpa.stats_tensor_uid = Some(LSE);
            let (dims, strides) = order(vec![b, s_q, hq, 1], vec![s_q * hq, hq, 1, 1]);
            g = g.add_tensor(
                TensorAttributes::new()
                    .set_uid(LSE)
                    .set_name("lse")
                    .set_data_type(DataType::Float)
                    .set_dims(dims)
                    .set_strides(strides),
            );
        }
        Lse::Ragged => {
            sdpa.stats_tensor_uid = Some(LSE);
            let (dims, strides) = order(vec![b, s_q, hq, 1], vec![s_q * hq, hq, 1, 1]);
            g = g
                .add_tensor(
                    TensorAttributes::new()
                        .set_uid(LSE)
                        .set_name("lse")
                        .set_data_type(DataType::Float)
                        .set_dims(dims)
                        .set_strides(strides)
                        .set_ragged_offset_uid(LSE_OFFSETS)
                        .set_ragged_offset_multiplier(hq),
                )
                .add_tensor(index(LSE_OFFSETS, DataType::Int32));
        }
    }
    g.add_node(Node::sdpa("sdpa", sdpa))
}

fn prefix(tokens: &[i64]) -> Vec<i64> {
    let mut out = vec![0];
    for t in tokens {
        out.push(out[out.len() - 1] + t);
    }
    out
}

fn device_with(bytes: &[u8]) -> DeviceAllocation {
    let buffer = DeviceAllocation::new(bytes.len()).expect("cuMemAlloc");
    // SAFETY: the allocation holds `bytes.len()` bytes.
    unsafe { upload(null_mut(), &[(buffer.address(), bytes)]) }.expect("upload");
    buffer
}

fn read_back(buffer: &DeviceAllocation) -> Vec<u8> {
    let mut out = vec![0u8; buffer.len()];
    // SAFETY: the allocation holds `out.len()` bytes.
    unsafe { download(null_mut(), &mut [(buffer.address(), &mut out[..])]) }.expect("download");
    out
}

/// Device inputs of one case, shared by both engines.
struct DeviceInputs {
    buffers: Vec<(i64, DeviceAllocation)>,
    o_bytes: usize,
    lse_bytes: usize,
}

fn device_inputs(case: &Case) -> DeviceInputs {
    let (hq, hkv, d, dv) = (
        case.hq as usize,
        case.hkv as usize,
        case.d as usize,
        case.dv as usize,
    );
    let q_starts = prefix(&case.q_tokens);
    let kv_starts = prefix(&case.kv_tokens);
    let (q_total, kv_total) = (
        q_starts[case.q_tokens.len()],
        kv_starts[case.kv_tokens.len()],
    );
    let q = uniform_bits(
        q_total as usize * hq * d,
        1,
        case.dtype == DataType::BFloat16,
    );
    let k = uniform_bits(
        kv_total as usize * hkv * d,
        2,
        case.dtype == DataType::BFloat16,
    );
    let v = uniform_bits(
        kv_total as usize * hkv * dv,
        3,
        case.dtype == DataType::BFloat16,
    );
    let q_offsets: Vec<i32> = q_starts.iter().map(|&t| t as i32).collect();
    let kv_unit = if dv == d { (hkv * d) as i64 } else { 1 };
    let kv_offsets: Vec<i64> = kv_starts.iter().map(|&t| t * kv_unit).collect();
    let mut buffers = vec![
        (Q, device_with(&le_bytes(&q, u16::to_le_bytes))),
        (K, device_with(&le_bytes(&k, u16::to_le_bytes))),
        (V, device_with(&le_bytes(&v, u16::to_le_bytes))),
        (
            Q_OFFSETS,
            device_with(&le_bytes(&q_offsets, i32::to_le_bytes)),
        ),
        (
            KV_OFFSETS,
            device_with(&le_bytes(&kv_offsets, i64::to_le_bytes)),
        ),
    ];
    if case.lse == Lse::Ragged {
        buffers.push((
            LSE_OFFSETS,
            device_with(&le_bytes(&q_offsets, i32::to_le_bytes)),
        ));
    }
    let lse_elements = match case.lse {
        Lse::None => 0,
        Lse::Dense | Lse::DenseTokenMajor => (case.batch() * case.hq * case.s_q()) as usize,
        Lse::Ragged => q_total as usize * hq,
    };
    DeviceInputs {
        buffers,
        o_bytes: q_total as usize * hq * dv * 2,
        lse_bytes: lse_elements * 4,
    }
}

/// Runs `engine` through the C ABI on device buffers; returns (O bits, LSE bits).
fn run(engine: i64, case: &Case, inputs: &DeviceInputs) -> (Vec<u16>, Vec<u32>) {
    let (status, error, o, lse) = execute(engine, case, inputs);
    assert_eq!(status, SUCCESS, "{error}");
    (o, lse)
}

/// The variant pack of a case's device inputs plus its O.
fn pack_with_o(inputs: &DeviceInputs, o: &DeviceAllocation) -> Vec<DeviceBuffer> {
    let mut pack: Vec<DeviceBuffer> = inputs
        .buffers
        .iter()
        .map(|(uid, b)| DeviceBuffer {
            uid: *uid,
            ptr: b.address() as *mut _,
        })
        .collect();
    pack.push(DeviceBuffer {
        uid: O,
        ptr: o.address() as *mut _,
    });
    pack
}

/// Runs `engine` through the C ABI on device buffers; returns the execute's status and last
/// error text, and O and LSE as bits afterwards.
fn execute(
    engine: i64,
    case: &Case,
    inputs: &DeviceInputs,
) -> (Status, String, Vec<u16>, Vec<u32>) {
    let graph = encode_graph(&graph(case));
    let o_init = le_bytes(
        &vec![case.o_sentinel(); inputs.o_bytes / 2],
        u16::to_le_bytes,
    );
    let o = device_with(&o_init);
    let lse = device_with(&le_bytes(
        &vec![LSE_SENTINEL; inputs.lse_bytes / 4],
        u32::to_le_bytes,
    ));
    let mut pack = pack_with_o(inputs, &o);
    if case.lse != Lse::None {
        pack.push(DeviceBuffer {
            uid: LSE,
            ptr: lse.address() as *mut _,
        });
    }
    let mut scale = case.runtime_scale.unwrap_or(0.0);
    if case.runtime_scale.is_some() {
        pack.push(DeviceBuffer {
            uid: SCALE,
            ptr: (&raw mut scale).cast(),
        });
    }
    let read = || {
        let o_bits = read_back(&o)
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let lse_bits = read_back(&lse)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        (o_bits, lse_bits)
    };
    // SAFETY: the pack's device buffers and `scale` outlive the call.
    let (status, error, (o_bits, lse_bits)) =
        unsafe { execute_on_device(engine, &graph, &pack, 0, read) };
    (status, error, o_bits, lse_bits)
}

/// Plugin log lines on stderr, so a decline on the device shows its reason.
unsafe extern "C" fn print_line(severity: i32, message: *const std::ffi::c_char) {
    // SAFETY: the plugin passes a NUL-terminated line valid during the call.
    let line = unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy();
    eprintln!("plugin log (severity {severity}): {line}");
}

/// Whether a CUDA device is usable; if not, prints test `name`'s skip line with the reason.
fn device_present(name: &str) -> bool {
    match runtime::probe() {
        Ok(_) => true,
        Err(reason) => {
            skip(name, &reason.to_string());
            false
        }
    }
}

/// CUDA FMHA against the host reference (both on device buffers), ragged-sdpa.md §8; CUDA's O
/// and LSE bits, `None` when skipped.
fn check(name: &str, case: Case) -> Option<(Vec<u16>, Vec<u32>)> {
    if !device_present(name) {
        return None;
    }
    // SAFETY: a valid callback that outlives the plugin.
    unsafe { (plugin().SetLoggingCallback)(Some(print_line)) };
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &encode_graph(&graph(&case)));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(
        ids,
        vec![CUDA_FMHA_ID, HOST_REFERENCE_ID],
        "{name}: GPU engine first, host reference last"
    );
    let inputs = device_inputs(&case);
    let (cuda_o, cuda_lse) = run(CUDA_FMHA_ID, &case, &inputs);
    let (host_o, host_lse) = run(HOST_REFERENCE_ID, &case, &inputs);
    let (atol, rtol) = if case.dtype == DataType::BFloat16 {
        (1e-2, 1e-2)
    } else {
        (2e-3, 2e-3)
    };
    let sentinel = case.o_sentinel();
    let is_bf16 = case.dtype == DataType::BFloat16;
    let mut written = 0;
    for (i, (&c, &h)) in cuda_o.iter().zip(&host_o).enumerate() {
        if h == sentinel {
            assert_eq!(
                c, sentinel,
                "{name}: O[{i}] written by CUDA, not by the reference"
            );
            continue;
        }
        written += 1;
        let (c, h) = (element_value(c, is_bf16), element_value(h, is_bf16));
        assert!(!c.is_nan(), "{name}: O[{i}] is NaN");
        assert!(
            (c - h).abs() <= atol + rtol * h.abs(),
            "{name}: O[{i}] = {c}, reference {h}"
        );
    }
    assert!(written > 0, "{name}: the reference wrote no O element");
    for (i, (&c, &h)) in cuda_lse.iter().zip(&host_lse).enumerate() {
        if h == LSE_SENTINEL {
            assert_eq!(c, LSE_SENTINEL, "{name}: LSE[{i}] written by CUDA only");
            continue;
        }
        let (c, h) = (f32::from_bits(c), f32::from_bits(h));
        if h == f32::NEG_INFINITY {
            assert_eq!(c, h, "{name}: LSE[{i}] must be -inf exactly");
        } else {
            assert!(
                (c - h).abs() <= 1e-3 + 1e-3 * h.abs(),
                "{name}: LSE[{i}] = {c}, reference {h}"
            );
        }
    }
    eprintln!(
        "test {name}: CUDA FMHA matches the host reference on {written} O elements and {} LSE values",
        host_lse.iter().filter(|&&b| b != LSE_SENTINEL).count()
    );
    Some((cuda_o, cuda_lse))
}

/// One case in both upstream dims orders over the same device memory: the CUDA engine must
/// match the host reference in each and write bit-identical O and LSE in both.
fn both_dims_orders(name: &str, case: impl Fn(bool) -> Case) {
    let Some(a) = check(&format!("{name} [B, S, H, D]"), case(false)) else {
        return;
    };
    let Some(b) = check(&format!("{name} [B, H, S, D]"), case(true)) else {
        return;
    };
    assert!(a.0 == b.0, "{name}: O differs between the dims orders");
    assert!(a.1 == b.1, "{name}: LSE differs between the dims orders");
}

#[test]
fn both_dims_orders_gqa_unequal_lengths_dense_token_major_lse() {
    // S_q and S_kv differ and neither equals a head count: a positional reading of the
    // [B, H, S, D] order would take S for H.
    for (dtype, lse) in [
        (DataType::BFloat16, Lse::DenseTokenMajor),
        (DataType::Half, Lse::Ragged),
    ] {
        both_dims_orders("both_dims_orders_gqa_unequal_lengths", |bhsd_dims| Case {
            band: (None, Some(0), DiagonalAlignment::BottomRight),
            lse,
            bhsd_dims,
            ..Case::new(dtype, 64, (4, 2), &[9, 0, 21], &[14, 3, 30])
        });
    }
}

#[test]
fn zero_length_batches_bf16_d128_gqa_dense_lse() {
    check(
        "zero_length_batches_bf16_d128_gqa_dense_lse",
        Case {
            lse: Lse::Dense,
            // Batch 1 is empty; batch 3 has queries but no keys (O = 0, LSE = -inf).
            ..Case::new(
                DataType::BFloat16,
                128,
                (8, 2),
                &[37, 0, 130, 5],
                &[50, 0, 200, 0],
            )
        },
    );
}

#[test]
fn causal_top_left_f16_d64_ragged_lse() {
    check(
        "causal_top_left_f16_d64_ragged_lse",
        Case {
            band: (None, Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..Case::new(
                DataType::Half,
                64,
                (4, 4),
                &[64, 1, 200, 17],
                &[64, 300, 17, 90],
            )
        },
    );
}

#[test]
fn causal_bottom_right_bf16_d64_mqa() {
    check(
        "causal_bottom_right_bf16_d64_mqa",
        Case {
            band: (None, Some(0), DiagonalAlignment::BottomRight),
            lse: Lse::Dense,
            // Batch 1 has fewer keys than queries: its top rows admit no key.
            ..Case::new(DataType::BFloat16, 64, (6, 1), &[40, 70, 9], &[90, 20, 9])
        },
    );
}

#[test]
fn sliding_window_f16_d128_no_lse() {
    check(
        "sliding_window_f16_d128_no_lse",
        Case {
            band: (Some(16), Some(4), DiagonalAlignment::BottomRight),
            ..Case::new(
                DataType::Half,
                128,
                (2, 1),
                &[300, 129, 128],
                &[260, 129, 1],
            )
        },
    );
}

/// A pass-by-value scale arrives as a host pointer while every tensor is on the device
/// (plugin-abi.md §5.7): the CUDA engine reads it at execute. A scale far from the graph's
/// `1/√D` would show in O if either engine ignored it.
#[test]
fn runtime_pass_by_value_scale_bf16_d64() {
    check(
        "runtime_pass_by_value_scale_bf16_d64",
        Case {
            lse: Lse::Dense,
            runtime_scale: Some(0.7),
            ..Case::new(DataType::BFloat16, 64, (4, 2), &[33, 0, 70], &[40, 12, 70])
        },
    );
}

/// In validating mode (`HIPDNN_RAGGED_SDPA_VALIDATE=1`, read once per process) decreasing Q
/// offsets are an INVALID_VALUE naming the offsets tensor, and O keeps its sentinel.
#[test]
fn decreasing_offsets_are_invalid_value_in_validating_mode() {
    let name = "decreasing_offsets_are_invalid_value_in_validating_mode";
    if !device_present(name) {
        return;
    }
    if std::env::var_os("HIPDNN_RAGGED_SDPA_VALIDATE").as_deref() != Some("1".as_ref()) {
        skip(name, "needs HIPDNN_RAGGED_SDPA_VALIDATE=1");
        return;
    }
    let case = Case {
        ..Case::new(DataType::BFloat16, 64, (2, 2), &[8, 8, 8], &[8, 8, 8])
    };
    let mut inputs = device_inputs(&case);
    let bad: Vec<i32> = vec![0, 16, 8, 24];
    for (uid, buffer) in inputs.buffers.iter_mut() {
        if *uid == Q_OFFSETS {
            *buffer = device_with(&le_bytes(&bad, i32::to_le_bytes));
        }
    }
    let (status, error, o, _) = execute(CUDA_FMHA_ID, &case, &inputs);
    assert_eq!(status, INVALID_VALUE, "{error}");
    assert!(
        error.contains("ragged_offset (uid 10)"),
        "names the offsets tensor uid: {error}"
    );
    assert!(o.iter().all(|&b| b == case.o_sentinel()), "O written");
    eprintln!("test {name}: {error}");
}

/// Head dim 96: stored in rows padded to 128 in shared memory, the padding never read from or
/// written to global memory. GQA, causal bottom-right, ragged LSE, in both dims orders.
#[test]
fn head_dim_96_bf16_gqa_causal_ragged_lse() {
    both_dims_orders("head_dim_96_bf16_gqa_causal_ragged_lse", |bhsd_dims| Case {
        band: (None, Some(0), DiagonalAlignment::BottomRight),
        lse: Lse::Ragged,
        bhsd_dims,
        ..Case::new(
            DataType::BFloat16,
            96,
            (6, 2),
            &[150, 0, 77, 1],
            &[160, 9, 77, 300],
        )
    });
}

/// Head dim 256 (the PV product is two n128 halves on sm_90): a zero-length key set and a
/// zero-length batch, dense LSE, sliding window.
#[test]
fn head_dim_256_f16_zero_lengths_window_dense_lse() {
    check(
        "head_dim_256_f16_zero_lengths_window_dense_lse",
        Case {
            band: (Some(40), Some(3), DiagonalAlignment::TopLeft),
            lse: Lse::Dense,
            ..Case::new(
                DataType::Half,
                256,
                (4, 4),
                &[200, 0, 65, 31],
                &[190, 40, 0, 31],
            )
        },
    );
}

/// DeepSeek-style prefill: Q/K head dim 192, V/O head dim 128 (token-unit offsets shared by K and
/// V), GQA, causal top-left, token-major dense LSE.
#[test]
fn head_dims_192_128_bf16_gqa_causal() {
    check(
        "head_dims_192_128_bf16_gqa_causal",
        Case {
            dv: 128,
            band: (None, Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::DenseTokenMajor,
            ..Case::new(
                DataType::BFloat16,
                192,
                (8, 2),
                &[129, 64, 0, 250],
                &[129, 80, 17, 250],
            )
        },
    );
}

/// The fused list (the CUDA engine's forward building its own tile list, no pre-pass launch)
/// keeps state in the caller's workspace between its blocks: a claim word, a publication word and
/// a count, which must work from whatever the workspace holds and must be clean again for a CUDA
/// graph that replays the nonce it captured. The execute is captured once on a stream of its own
/// with a workspace full of garbage, replayed three times (O reset before each), then run eagerly
/// on the same workspace: every O must equal, bit for bit, an eager execute's on the null stream.
/// In validating mode (`HIPDNN_RAGGED_SDPA_VALIDATE=1`, which synchronises after the pre-pass) the
/// captured execute must instead be refused with BAD_PARAM before it enqueues anything, leaving the
/// caller's capture valid.
#[test]
fn fused_list_from_a_garbage_workspace_and_across_graph_replays() {
    let name = "fused_list_from_a_garbage_workspace_and_across_graph_replays";
    if !device_present(name) {
        return;
    }
    // bf16, causal, at both of the plugin's arrangements: d128 (two consumer warpgroups, query
    // tiles of 128 rows: 19 tiles × 16 heads = 304 items) and d64 (three, tiles of 192 rows: 13 × 16
    // = 208). Either is more than an H200's 132 blocks take first, so blocks draw from the work
    // counter: a replay that found the previous replay's words would skip the claim, draw from a
    // counter left past the end and leave items undone.
    for d in [128, 64] {
        graph_replays_equal_eager(name, d);
    }
}

fn graph_replays_equal_eager(name: &str, d: i64) {
    use cudarc::driver::sys as cu;
    let validating =
        std::env::var_os("HIPDNN_RAGGED_SDPA_VALIDATE").as_deref() == Some("1".as_ref());
    let case = Case {
        band: (None, Some(0), DiagonalAlignment::TopLeft),
        ..Case::new(
            DataType::BFloat16,
            d,
            (16, 4),
            &[1000, 0, 1333],
            &[1100, 7, 1333],
        )
    };
    let inputs = device_inputs(&case);
    let (reference, _) = run(CUDA_FMHA_ID, &case, &inputs);

    let p = plugin();
    let graph = encode_graph(&graph(&case));
    let config = encode_engine_config(&EngineConfig::new(CUDA_FMHA_ID));
    let (gd, cd) = (ConstData::of(&graph), ConstData::of(&config));
    let o = device_with(&vec![0u8; inputs.o_bytes]);
    let pack = pack_with_o(&inputs, &o);
    let handle = OwnedHandle::new();
    let mut stream: cu::CUstream = null_mut();
    let mut captured: cu::CUgraph = null_mut();
    let mut exec: cu::CUgraphExec = null_mut();
    let mut workspace_size = 0usize;
    let mut context: Context = null_mut();
    let o_words = inputs.o_bytes / 2;
    let mut primary: cu::CUcontext = null_mut();
    // SAFETY: driver calls with live out-pointers, in device 0's primary context (where the
    // allocations above live: the null stream's context); the pack's buffers, the workspace and O
    // outlive every launch (each replay is synchronised).
    unsafe {
        assert_eq!(
            cu::cuDevicePrimaryCtxRetain(&mut primary, 0),
            cu::CUresult::CUDA_SUCCESS
        );
        assert_eq!(cu::cuCtxSetCurrent(primary), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(
            cu::cuStreamCreate(
                &mut stream,
                cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32
            ),
            cu::CUresult::CUDA_SUCCESS
        );
        assert_eq!((p.SetStream)(handle.0, stream.cast()), SUCCESS);
        assert_eq!(
            (p.GetWorkspaceSize)(handle.0, &cd, &gd, &mut workspace_size),
            SUCCESS,
            "{}",
            last_error()
        );
        assert_eq!(
            (p.CreateExecutionContext)(handle.0, &cd, &gd, &mut context),
            SUCCESS,
            "{}",
            last_error()
        );
        // Every byte 0xA5: the claim and publication words hold a value no execute's nonce has
        // (but with probability 2^-64), as a reused workspace would.
        let workspace = device_with(&vec![0xA5u8; workspace_size]);
        assert_eq!(
            cu::cuStreamBeginCapture_v2(
                stream,
                cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            ),
            cu::CUresult::CUDA_SUCCESS
        );
        let status = (p.ExecuteOpGraph)(
            handle.0,
            context,
            workspace.address() as *mut _,
            pack.as_ptr(),
            pack.len() as u32,
        );
        let message = last_error();
        assert_eq!(
            cu::cuStreamEndCapture(stream, &mut captured),
            cu::CUresult::CUDA_SUCCESS,
            "{name} (d{d}): the capture must survive the execute ({message})"
        );
        if validating {
            // Validating mode synchronises after its pre-pass, which capture forbids: the
            // execute must refuse before enqueuing anything, leaving the capture valid.
            assert_eq!(status, BAD_PARAM, "captured validating execute: {message}");
            assert!(
                message.contains("HIPDNN_RAGGED_SDPA_VALIDATE") && message.contains("capture"),
                "the refusal names the mode and the capture: {message}"
            );
        } else {
            assert_eq!(status, SUCCESS, "captured execute: {message}");
        }
        assert_eq!(
            cu::cuGraphInstantiateWithFlags(&mut exec, captured, 0),
            cu::CUresult::CUDA_SUCCESS
        );
        for replay in (0..4).filter(|_| !validating) {
            assert_eq!(
                cu::cuMemsetD16Async(o.address(), case.o_sentinel(), o_words, stream),
                cu::CUresult::CUDA_SUCCESS
            );
            if replay < 3 {
                assert_eq!(cu::cuGraphLaunch(exec, stream), cu::CUresult::CUDA_SUCCESS);
            } else {
                let status = (p.ExecuteOpGraph)(
                    handle.0,
                    context,
                    workspace.address() as *mut _,
                    pack.as_ptr(),
                    pack.len() as u32,
                );
                assert_eq!(status, SUCCESS, "eager execute: {}", last_error());
            }
            assert_eq!(cu::cuStreamSynchronize(stream), cu::CUresult::CUDA_SUCCESS);
            let bits: Vec<u16> = read_back(&o)
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            let what = if replay < 3 {
                "graph replay"
            } else {
                "eager execute after the replays"
            };
            let differing = bits.iter().zip(&reference).filter(|(a, b)| a != b).count();
            assert_eq!(
                differing, 0,
                "{name} (d{d}): {what} {replay}: {differing} of {o_words} O elements differ from the eager execute"
            );
        }
        assert_eq!((p.DestroyExecutionContext)(handle.0, context), SUCCESS);
        assert_eq!(cu::cuGraphExecDestroy(exec), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(cu::cuGraphDestroy(captured), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(cu::cuStreamDestroy_v2(stream), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(
            cu::cuDevicePrimaryCtxRelease_v2(0),
            cu::CUresult::CUDA_SUCCESS
        );
    }
    if validating {
        eprintln!(
            "test {name} (d{d}): validating mode refused the captured execute with BAD_PARAM and \
             left the capture valid (the replays need the enqueue mode)"
        );
    } else {
        eprintln!(
            "test {name} (d{d}): three graph replays from a garbage workspace and an eager execute \
             after them equal an eager execute bit for bit"
        );
    }
}
