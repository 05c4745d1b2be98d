//! Device tests of the CUDA forward through the C ABI: `RAGGED_SDPA_CUDA_FMHA` against
//! `RAGGED_SDPA_HOST_REFERENCE` on identical device inputs (ragged-sdpa.md §8, project rule), the
//! host engine reading and writing device buffers through its staging copies, and against a naive
//! float64 attention loop over the same input bits. Positions no engine may write (padding rows,
//! rows past a batch's end) must keep their NaN sentinel bit for bit; padding rows of every input
//! hold NaN, so a kernel that reads one poisons its output. Without a CUDA device every test
//! prints `skipped: <reason>` and returns.
//!
//! On the device these run from `bench/gpu/verify_build.sh` (bench/README.md), which also runs the
//! `zero_length` tests under compute-sanitizer memcheck and racecheck, and
//! `ragged_mix_calls_are_bit_identical` with more calls (`RAGGED_SDPA_TEST_REPEATS`).
//!
//! The tests live by subject in `cases`, `fp8` (the e4m3 forward, with its own graphs, inputs and
//! float64 model), `head_dims`, `paged` and `ragged_mix`; this file holds the cases' graphs, device
//! buffers, the float64 oracle and the checks they share.

mod cases;
#[path = "../common/mod.rs"]
mod common;
mod fp8;
mod head_dims;
mod paged;
mod ragged_mix;

use common::device::*;
use common::*;
use ragged_gpu_runtime::cuda::memory::{DeviceAllocation, download, upload};
use ragged_gpu_runtime::cuda::runtime;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, DiagonalAlignment, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes,
};
use std::ptr::null_mut;
const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const LSE: i64 = 5;
const Q_OFFSETS: i64 = 10;
const KV_OFFSETS: i64 = 11;
const LSE_OFFSETS: i64 = 12;
const SCALE: i64 = 20;
const SEQ_LEN_Q: i64 = 13;
const SEQ_LEN_KV: i64 = 14;
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
    /// Logical lengths per batch.
    q_tokens: Vec<i64>,
    kv_tokens: Vec<i64>,
    /// Rows past each batch's length on each side (NaN in the inputs, the sentinel in O), cut off
    /// by int64 `seq_len` tensors with the padding mask when > 0.
    pad: i64,
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
            pad: 0,
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
        self.q_tokens.iter().max().copied().unwrap_or(0).max(1) + self.pad + 3
    }
    fn s_kv(&self) -> i64 {
        self.kv_tokens.iter().max().copied().unwrap_or(0).max(1) + self.pad + 5
    }
    /// First token of each batch in the packed Q / O rows (padding included), then the total.
    fn q_starts(&self) -> Vec<i64> {
        prefix(
            &self
                .q_tokens
                .iter()
                .map(|t| t + self.pad)
                .collect::<Vec<_>>(),
        )
    }
    fn kv_starts(&self) -> Vec<i64> {
        prefix(
            &self
                .kv_tokens
                .iter()
                .map(|t| t + self.pad)
                .collect::<Vec<_>>(),
        )
    }
    fn scale(&self) -> f64 {
        match self.runtime_scale {
            Some(s) => f64::from(s),
            None => f64::from(1.0 / (self.d as f32).sqrt()),
        }
    }
    /// Whether query row `i` of a batch (lq, lkv) admits key `j` (schema.md §6.1).
    fn admits(&self, lq: i64, lkv: i64, i: i64, j: i64) -> bool {
        let off = if self.band.2 == DiagonalAlignment::BottomRight {
            lkv - lq
        } else {
            0
        };
        self.band.1.is_none_or(|r| j <= i + off + r) && self.band.0.is_none_or(|l| j >= i + off - l)
    }
    /// Where the LSE of (batch, head, row) lives in the LSE buffer.
    fn lse_index(&self, b: usize, h: usize, i: usize) -> usize {
        let (hq, s_q) = (self.hq as usize, self.s_q() as usize);
        match self.lse {
            Lse::None => unreachable!("no LSE"),
            Lse::Dense => (b * hq + h) * s_q + i,
            Lse::DenseTokenMajor => (b * s_q + i) * hq + h,
            Lse::Ragged => (self.q_starts()[b] as usize + i) * hq + h,
        }
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
    let lengths = |uid| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("seq_len{uid}"))
            .set_data_type(DataType::Int64)
            .set_dims(vec![b, 1, 1, 1])
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
    if case.pad > 0 {
        let (sq, skv) = (lengths(SEQ_LEN_Q), lengths(SEQ_LEN_KV));
        sdpa = sdpa.set_seq_len_q(&sq).set_seq_len_kv(&skv);
        sdpa.padding_mask = true;
        g = g.add_tensor(sq).add_tensor(skv);
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
    /// Q, K and V as uploaded (element bits), for the float64 oracle.
    q: Vec<u16>,
    k: Vec<u16>,
    v: Vec<u16>,
}
fn device_inputs(case: &Case) -> DeviceInputs {
    let (hq, hkv, d, dv) = (
        case.hq as usize,
        case.hkv as usize,
        case.d as usize,
        case.dv as usize,
    );
    let q_starts = case.q_starts();
    let kv_starts = case.kv_starts();
    let (q_total, kv_total) = (
        q_starts[case.q_tokens.len()],
        kv_starts[case.kv_tokens.len()],
    );
    let mut q = uniform_bits(
        q_total as usize * hq * d,
        1,
        case.dtype == DataType::BFloat16,
    );
    let mut k = uniform_bits(
        kv_total as usize * hkv * d,
        2,
        case.dtype == DataType::BFloat16,
    );
    let mut v = uniform_bits(
        kv_total as usize * hkv * dv,
        3,
        case.dtype == DataType::BFloat16,
    );
    // Padding rows hold NaN in every input.
    let nan = case.o_sentinel();
    for b in 0..case.q_tokens.len() {
        for (t, starts, l, width) in [
            (&mut q, &q_starts, case.q_tokens[b], hq * d),
            (&mut k, &kv_starts, case.kv_tokens[b], hkv * d),
            (&mut v, &kv_starts, case.kv_tokens[b], hkv * dv),
        ] {
            let (lo, hi) = ((starts[b] + l) as usize, starts[b + 1] as usize);
            t[lo * width..hi * width].fill(nan);
        }
    }
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
    if case.pad > 0 {
        for (uid, lengths) in [(SEQ_LEN_Q, &case.q_tokens), (SEQ_LEN_KV, &case.kv_tokens)] {
            buffers.push((uid, device_with(&le_bytes(lengths, i64::to_le_bytes))));
        }
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
        q,
        k,
        v,
    }
}
/// Naive float64 attention over the uploaded input bits: O per (token, head, column) and the LSE
/// (natural log of the scaled scores' sum) per (batch, head, row), in the case's O and LSE
/// layouts; `None` where no engine may write. A row that admits no key has O = 0, LSE = −∞.
fn oracle(case: &Case, inputs: &DeviceInputs) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let (hq, hkv, d, dv) = (
        case.hq as usize,
        case.hkv as usize,
        case.d as usize,
        case.dv as usize,
    );
    let bf16 = case.dtype == DataType::BFloat16;
    let value = |bits: u16| f64::from(element_value(bits, bf16));
    let (qs, ks) = (case.q_starts(), case.kv_starts());
    let mut o = vec![None; inputs.o_bytes / 2];
    let mut lse = vec![None; inputs.lse_bytes / 4];
    for b in 0..case.q_tokens.len() {
        let (lq, lkv) = (case.q_tokens[b], case.kv_tokens[b]);
        for h in 0..hq {
            let g = h / (hq / hkv);
            for i in 0..lq {
                let qi = (qs[b] + i) as usize;
                let q_row = &inputs.q[(qi * hq + h) * d..][..d];
                let scores: Vec<(usize, f64)> = (0..lkv)
                    .filter(|&j| case.admits(lq, lkv, i, j))
                    .map(|j| {
                        let kj = (ks[b] + j) as usize;
                        let k_row = &inputs.k[(kj * hkv + g) * d..][..d];
                        let dot: f64 = q_row
                            .iter()
                            .zip(k_row)
                            .map(|(&a, &c)| value(a) * value(c))
                            .sum();
                        (kj, dot * case.scale())
                    })
                    .collect();
                let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
                let mut out = vec![0.0; dv];
                for &(kj, score) in &scores {
                    let p = (score - m).exp() / sum;
                    let v_row = &inputs.v[(kj * hkv + g) * dv..][..dv];
                    for (acc, &x) in out.iter_mut().zip(v_row) {
                        *acc += p * value(x);
                    }
                }
                for (c, x) in out.into_iter().enumerate() {
                    o[(qi * hq + h) * dv + c] = Some(x);
                }
                if case.lse != Lse::None {
                    lse[case.lse_index(b, h, i as usize)] = Some(if scores.is_empty() {
                        f64::NEG_INFINITY
                    } else {
                        m + sum.ln()
                    });
                }
            }
        }
    }
    (o, lse)
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
/// Whether a device is present and this process runs in validating mode
/// (`HIPDNN_RAGGED_SDPA_VALIDATE=1`, read once per process); prints why the test skips if not.
fn validating_device_present(name: &str) -> bool {
    if !device_present(name) {
        return false;
    }
    let validating =
        std::env::var_os("HIPDNN_RAGGED_SDPA_VALIDATE").as_deref() == Some("1".as_ref());
    if !validating {
        skip(name, "needs HIPDNN_RAGGED_SDPA_VALIDATE=1");
    }
    validating
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
    // The float64 oracle: the same tolerances (ragged-sdpa.md §8), and every position it leaves
    // unwritten (padding, rows past a batch's end) still the sentinel.
    let (o64, lse64) = oracle(&case, &inputs);
    for (i, (&c, r)) in cuda_o.iter().zip(&o64).enumerate() {
        match r {
            None => assert_eq!(
                c, sentinel,
                "{name}: O[{i}] is a padding position the kernel wrote"
            ),
            Some(r) => {
                let c = f64::from(element_value(c, is_bf16));
                assert!(
                    (c - r).abs() <= f64::from(atol) + f64::from(rtol) * r.abs(),
                    "{name}: O[{i}] = {c}, float64 oracle {r}"
                );
            }
        }
    }
    for (i, (&c, r)) in cuda_lse.iter().zip(&lse64).enumerate() {
        match r {
            None => assert_eq!(c, LSE_SENTINEL, "{name}: LSE[{i}] is not a row's"),
            Some(r) if *r == f64::NEG_INFINITY => assert_eq!(
                f32::from_bits(c),
                f32::NEG_INFINITY,
                "{name}: LSE[{i}] of a row without keys"
            ),
            Some(r) => {
                let c = f64::from(f32::from_bits(c));
                assert!(
                    (c - r).abs() <= 1e-3 + 1e-3 * r.abs(),
                    "{name}: LSE[{i}] = {c}, float64 oracle {r}"
                );
            }
        }
    }
    eprintln!(
        "test {name}: CUDA FMHA matches the host reference and the float64 oracle on {written} O \
         elements and {} LSE values",
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
fn seq_len_padding_case() -> Case {
    Case {
        pad: 3,
        band: (Some(16), Some(4), DiagonalAlignment::TopLeft),
        lse: Lse::Dense,
        ..Case::new(DataType::BFloat16, 64, (6, 3), &[33, 70, 0], &[80, 0, 9])
    }
}
/// The plugin set's head dims (Q/K, V/O).
const HEAD_DIMS: [(i64, i64); 5] = [(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)];
fn sanitizer_case(d: i64, dv: i64, (left, right): (Option<i64>, Option<i64>)) -> Case {
    Case {
        dv,
        pad: 2,
        band: (left, right, DiagonalAlignment::BottomRight),
        lse: Lse::Dense,
        ..Case::new(
            DataType::Half,
            d,
            (4, 2),
            &[5, 0, 37, 130],
            &[70, 9, 0, 200],
        )
    }
}
/// The benchmark's ragged mix (`plugin/examples/emit_bench_graphs/`).
const RAGGED_MIX: [i64; 6] = [3874, 2585, 2823, 3682, 2396, 1024];
fn ragged_mix_case(
    d: i64,
    dv: i64,
    band: (Option<i64>, Option<i64>, DiagonalAlignment),
    lengths: &[i64],
) -> Case {
    Case {
        dv,
        band,
        ..Case::new(DataType::BFloat16, d, (16, 16), lengths, lengths)
    }
}
