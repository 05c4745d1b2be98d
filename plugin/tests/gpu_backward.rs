//! Device tests of the CUDA SDPA backward through the C ABI: `RAGGED_SDPA_CUDA_FMHA` and
//! `RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC` against `RAGGED_SDPA_HOST_REFERENCE`'s backward (the
//! CPU reference, staged through host copies) on identical device inputs, with the same
//! tolerances. The deterministic engine must give the same bits on a second call; the
//! non-deterministic one, whose dQ is summed in no fixed order, must stay within the tolerances on
//! every call (and keep dK and dV, which have one writer per row, bit for bit). O and the LSE are the forward of the same inputs, computed here in
//! f64; padding rows of every input hold NaN (a kernel that reads one poisons its gradients) and
//! every gradient starts as a sentinel, which padding rows must keep. Without a CUDA device every
//! test prints `skipped: <reason>` and returns.
//!
//! On the device these run from `bench/gpu/verify_build.sh` (bench/README.md), in both execute
//! modes, and the `zero_length` case under compute-sanitizer memcheck and racecheck.

mod common;

use std::ptr::null_mut;

use common::device::*;
use common::*;
use ragged_gpu_runtime::cuda::memory::{DeviceAllocation, download, upload};
use ragged_gpu_runtime::cuda::runtime;
use ragged_schema::wire::encode_graph;
use ragged_schema::{
    DataType, DiagonalAlignment, Graph, Node, SdpaBackwardAttributes, TensorAttributes,
};

const CUDA_FMHA_NONDETERMINISTIC_ID: i64 = -703742951178686843;

const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const DO: i64 = 5;
const LSE: i64 = 6;
const DQ: i64 = 7;
const DK: i64 = 8;
const DV: i64 = 9;
const AUX_Q: i64 = 10;
const AUX_KV: i64 = 11;
const AUX_LSE: i64 = 12;
const SEQ_LEN_Q: i64 = 13;
const SEQ_LEN_KV: i64 = 14;

struct Case {
    dtype: DataType,
    d: i64,
    hq: i64,
    hkv: i64,
    /// Logical lengths per batch.
    lq: Vec<i64>,
    lkv: Vec<i64>,
    /// Rows past each batch's length on each side, cut off by `seq_len` tensors when > 0.
    pad: i64,
    band: (Option<i64>, Option<i64>, DiagonalAlignment),
    ragged_lse: bool,
    /// Every ragged tensor in cuDNN's `[B, H, S, D]` dims order over the same memory.
    bhsd_dims: bool,
}

impl Case {
    fn batch(&self) -> i64 {
        self.lq.len() as i64
    }
    fn s_q(&self) -> i64 {
        self.lq.iter().max().copied().unwrap_or(0).max(1) + self.pad + 3
    }
    fn s_kv(&self) -> i64 {
        self.lkv.iter().max().copied().unwrap_or(0).max(1) + self.pad + 5
    }
    fn bf16(&self) -> bool {
        self.dtype == DataType::BFloat16
    }
    fn sentinel(&self) -> u16 {
        if self.bf16() { 0x7FC1 } else { 0x7E01 }
    }
    fn nan(&self) -> u16 {
        if self.bf16() { 0x7FC0 } else { 0x7E00 }
    }
    fn q_starts(&self) -> Vec<i64> {
        prefix(self.lq.iter().map(|l| l + self.pad))
    }
    fn kv_starts(&self) -> Vec<i64> {
        prefix(self.lkv.iter().map(|l| l + self.pad))
    }
    fn scale(&self) -> f64 {
        1.0 / (self.d as f64).sqrt()
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
}

fn prefix(lengths: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut out = vec![0];
    for l in lengths {
        out.push(out[out.len() - 1] + l);
    }
    out
}

fn graph(case: &Case) -> Graph {
    let (b, d, hq, hkv) = (case.batch(), case.d, case.hq, case.hkv);
    let order = |mut dims: Vec<i64>, mut strides: Vec<i64>| {
        if case.bhsd_dims {
            dims.swap(1, 2);
            strides.swap(1, 2);
        }
        (dims, strides)
    };
    let ragged = |uid: i64, s: i64, h: i64, aux: i64, multiplier: i64| {
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
    let index = |uid: i64, n: i64, data_type| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("index{uid}"))
            .set_data_type(data_type)
            .set_dims(vec![n, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let mut node = SdpaBackwardAttributes::new(Q, K, V, O, DO, LSE, DQ, DK, DV)
        .set_attn_scale_value(case.scale() as f32)
        .set_diagonal_band(case.band.0, case.band.1, case.band.2);
    let (s_q, s_kv) = (case.s_q(), case.s_kv());
    // Q-side offsets count tokens (int32, multiplier H·D), K-side count elements (int64).
    let mut g = Graph::new("gpu_backward")
        .set_data_types(case.dtype, DataType::Float, DataType::Float)
        .add_tensor(index(AUX_Q, b + 1, DataType::Int32))
        .add_tensor(index(AUX_KV, b + 1, DataType::Int64));
    for uid in [Q, O, DO, DQ] {
        g = g.add_tensor(ragged(uid, s_q, hq, AUX_Q, hq * d));
    }
    for uid in [K, V, DK, DV] {
        g = g.add_tensor(ragged(uid, s_kv, hkv, AUX_KV, 1));
    }
    let lse = if case.ragged_lse {
        g = g.add_tensor(index(AUX_LSE, b + 1, DataType::Int32));
        let (dims, strides) = order(vec![b, s_q, hq, 1], vec![s_q * hq, hq, 1, 1]);
        TensorAttributes::new()
            .set_dims(dims)
            .set_strides(strides)
            .set_ragged_offset_uid(AUX_LSE)
            .set_ragged_offset_multiplier(hq)
    } else {
        TensorAttributes::new()
            .set_dims(vec![b, hq, s_q, 1])
            .set_strides(vec![hq * s_q, s_q, 1, 1])
    };
    g = g.add_tensor(
        lse.set_uid(LSE)
            .set_name("lse")
            .set_data_type(DataType::Float),
    );
    if case.pad > 0 {
        let (sq, skv) = (
            index(SEQ_LEN_Q, b, DataType::Int32),
            index(SEQ_LEN_KV, b, DataType::Int32),
        );
        node = node.set_seq_len_q(&sq).set_seq_len_kv(&skv);
        node.padding_mask = true;
        g = g.add_tensor(sq).add_tensor(skv);
    }
    g.add_node(Node::sdpa_backward("bwd", node))
}

fn values(n: usize, seed: u64, case: &Case) -> Vec<u16> {
    uniform_bits(n, seed, case.bf16())
}

fn from_f32(x: f32, case: &Case) -> u16 {
    element_bits(x, case.bf16())
}

fn to_f64(bits: u16, case: &Case) -> f64 {
    f64::from(element_value(bits, case.bf16()))
}

fn device_with(bytes: &[u8]) -> DeviceAllocation {
    let buffer = DeviceAllocation::new(bytes.len().max(16)).expect("cuMemAlloc");
    if !bytes.is_empty() {
        // SAFETY: the allocation holds at least `bytes.len()` bytes.
        unsafe { upload(null_mut(), &[(buffer.address(), bytes)]) }.expect("upload");
    }
    buffer
}

fn read_back_u16(buffer: &DeviceAllocation, n: usize) -> Vec<u16> {
    let mut out = vec![0u8; buffer.len()];
    // SAFETY: the allocation holds `out.len()` bytes.
    unsafe { download(null_mut(), &mut [(buffer.address(), &mut out[..])]) }.expect("download");
    out.chunks_exact(2)
        .take(n)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// Host copies of one case's inputs: Q, K, V, dO (NaN in padding rows), O and the LSE (the f64
/// forward of those), the offsets and seq_lens.
struct Inputs {
    tensors: Vec<(i64, Vec<u8>)>,
    /// Elements of the Q side (Q, O, dO, dQ) and of the K side (K, V, dK, dV).
    q_elems: usize,
    kv_elems: usize,
}

fn inputs(case: &Case) -> Inputs {
    let (hq, hkv, d) = (case.hq as usize, case.hkv as usize, case.d as usize);
    let (qs, ks) = (case.q_starts(), case.kv_starts());
    let (q_rows, kv_rows) = (qs[qs.len() - 1] as usize, ks[ks.len() - 1] as usize);
    let mut q = values(q_rows * hq * d, 1, case);
    let mut d_o = values(q_rows * hq * d, 4, case);
    let mut k = values(kv_rows * hkv * d, 2, case);
    let mut v = values(kv_rows * hkv * d, 3, case);
    let mut o = vec![case.nan(); q_rows * hq * d];
    let s_q = case.s_q() as usize;
    let lse_elems = if case.ragged_lse {
        q_rows * hq
    } else {
        case.batch() as usize * hq * s_q
    };
    let mut lse = vec![f32::NAN; lse_elems];
    let rep = hq / hkv;
    for b in 0..case.lq.len() {
        let (lq, lkv) = (case.lq[b], case.lkv[b]);
        for h in 0..hq {
            let g = h / rep;
            for i in 0..lq {
                let qi = (qs[b] + i) as usize;
                let row = |t: &[u16], tok: usize, heads: usize, head: usize| {
                    (0..d)
                        .map(|c| to_f64(t[(tok * heads + head) * d + c], case))
                        .collect::<Vec<_>>()
                };
                let qrow = row(&q, qi, hq, h);
                let scores: Vec<(usize, f64)> = (0..lkv)
                    .filter(|&j| case.admits(lq, lkv, i, j))
                    .map(|j| {
                        let kj = (ks[b] + j) as usize;
                        let krow = row(&k, kj, hkv, g);
                        let dot: f64 = qrow.iter().zip(&krow).map(|(a, b)| a * b).sum();
                        (kj, dot * case.scale())
                    })
                    .collect();
                let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
                let mut out = vec![0.0; d];
                for (kj, s) in &scores {
                    let p = (s - m).exp() / sum;
                    let vrow = row(&v, *kj, hkv, g);
                    for c in 0..d {
                        out[c] += p * vrow[c];
                    }
                }
                for c in 0..d {
                    o[(qi * hq + h) * d + c] = from_f32(out[c] as f32, case);
                }
                let value = if scores.is_empty() {
                    f32::NEG_INFINITY
                } else {
                    (m + sum.ln()) as f32
                };
                let at = if case.ragged_lse {
                    qi * hq + h
                } else {
                    (b * hq + h) * s_q + i as usize
                };
                lse[at] = value;
            }
        }
    }
    // Padding rows hold NaN in every input.
    for b in 0..case.lq.len() {
        for (t, starts, l, heads) in [
            (&mut q, &qs, case.lq[b], hq),
            (&mut d_o, &qs, case.lq[b], hq),
            (&mut k, &ks, case.lkv[b], hkv),
            (&mut v, &ks, case.lkv[b], hkv),
        ] {
            let (lo, hi) = ((starts[b] + l) as usize, starts[b + 1] as usize);
            t[lo * heads * d..hi * heads * d].fill(case.nan());
        }
    }
    let u16s = |t: &[u16]| le_bytes(t, u16::to_le_bytes);
    let q_off: Vec<i32> = qs.iter().map(|&t| t as i32).collect();
    let kv_off: Vec<i64> = ks.iter().map(|&t| t * (hkv * d) as i64).collect();
    let mut tensors = vec![
        (Q, u16s(&q)),
        (K, u16s(&k)),
        (V, u16s(&v)),
        (O, u16s(&o)),
        (DO, u16s(&d_o)),
        (LSE, le_bytes(&lse, f32::to_le_bytes)),
        (AUX_Q, le_bytes(&q_off, i32::to_le_bytes)),
        (AUX_KV, le_bytes(&kv_off, i64::to_le_bytes)),
    ];
    if case.ragged_lse {
        tensors.push((AUX_LSE, le_bytes(&q_off, i32::to_le_bytes)));
    }
    if case.pad > 0 {
        let lens = |l: &[i64]| l.iter().map(|&x| x as i32).collect::<Vec<_>>();
        tensors.push((SEQ_LEN_Q, le_bytes(&lens(&case.lq), i32::to_le_bytes)));
        tensors.push((SEQ_LEN_KV, le_bytes(&lens(&case.lkv), i32::to_le_bytes)));
    }
    Inputs {
        tensors,
        q_elems: q_rows * hq * d,
        kv_elems: kv_rows * hkv * d,
    }
}

/// Runs `engine` through the C ABI on fresh device copies of `inputs`; returns dQ, dK, dV bits.
fn run(engine: i64, case: &Case, inputs: &Inputs) -> [Vec<u16>; 3] {
    let graph = encode_graph(&graph(case));
    let device: Vec<(i64, DeviceAllocation)> = inputs
        .tensors
        .iter()
        .map(|(uid, bytes)| (*uid, device_with(bytes)))
        .collect();
    let sentinel = |n: usize| device_with(&le_bytes(&vec![case.sentinel(); n], u16::to_le_bytes));
    let outputs = [
        (DQ, inputs.q_elems, sentinel(inputs.q_elems)),
        (DK, inputs.kv_elems, sentinel(inputs.kv_elems)),
        (DV, inputs.kv_elems, sentinel(inputs.kv_elems)),
    ];
    let pack: Vec<DeviceBuffer> = device
        .iter()
        .map(|(uid, b)| (*uid, b))
        .chain(outputs.iter().map(|(uid, _, b)| (*uid, b)))
        .map(|(uid, b)| DeviceBuffer {
            uid,
            ptr: b.address() as *mut _,
        })
        .collect();
    let read = || outputs.map(|(_, n, b)| read_back_u16(&b, n));
    // SAFETY: the pack's device buffers outlive the call.
    let (status, error, out) = unsafe { execute_on_device(engine, &graph, &pack, 1, read) };
    assert_eq!(status, SUCCESS, "engine {engine}: {error}");
    out
}

/// Calls of the non-deterministic engine per case (`RAGGED_SDPA_TEST_REPEATS`, default 3).
fn repeats() -> usize {
    test_repeats(3).clamp(2, 8)
}

/// Both CUDA engines against the host reference's backward on the same device inputs.
fn check(name: &str, case: Case) {
    if let Err(reason) = runtime::probe() {
        skip(name, &reason.to_string());
        return;
    }
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &encode_graph(&graph(&case)));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(
        ids,
        vec![
            CUDA_FMHA_ID,
            CUDA_FMHA_NONDETERMINISTIC_ID,
            HOST_REFERENCE_ID
        ],
        "{name}: every engine applies, the deterministic CUDA engine first"
    );
    let inputs = inputs(&case);
    let host = run(HOST_REFERENCE_ID, &case, &inputs);
    let cuda = run(CUDA_FMHA_ID, &case, &inputs);
    compare(name, "CUDA", &case, &cuda, &host);
    // dQ sums several key tiles' contributions in f32 in a fixed order: a second call, after
    // other engines', gives the same bits.
    let again = run(CUDA_FMHA_ID, &case, &inputs);
    for (which, (a, b)) in ["dQ", "dK", "dV"].iter().zip(cuda.iter().zip(&again)) {
        assert!(a == b, "{name}: CUDA {which} differs between two calls");
    }
    let first = run(CUDA_FMHA_NONDETERMINISTIC_ID, &case, &inputs);
    compare(name, "CUDA non-deterministic", &case, &first, &host);
    let mut differing = 0;
    for call in 1..repeats() {
        let next = run(CUDA_FMHA_NONDETERMINISTIC_ID, &case, &inputs);
        compare(
            name,
            &format!("CUDA non-deterministic, call {}", call + 1),
            &case,
            &next,
            &host,
        );
        assert!(
            next[1] == first[1] && next[2] == first[2],
            "{name}: non-deterministic dK or dV differs between calls (one writer per row)"
        );
        differing += next[0]
            .iter()
            .zip(&first[0])
            .filter(|(a, b)| a != b)
            .count();
    }
    eprintln!(
        "{name}: non-deterministic dQ: {differing} element(s) of {} differed from the first call over {} more call(s)",
        first[0].len(),
        repeats() - 1
    );
}

/// One engine's dQ, dK, dV (`got`) against the host reference's: within the tolerance where
/// written, the sentinel in padding rows, exactly 0 where nothing contributes.
fn compare(name: &str, engine: &str, case: &Case, got: &[Vec<u16>; 3], host: &[Vec<u16>; 3]) {
    let tol = if case.bf16() { 2e-2 } else { 5e-3 };
    let (qs, ks) = (case.q_starts(), case.kv_starts());
    let d = case.d as usize;
    for (which, (c, h)) in ["dQ", "dK", "dV"].iter().zip(got.iter().zip(host)) {
        let (starts, lens, heads) = if *which == "dQ" {
            (&qs, &case.lq, case.hq as usize)
        } else {
            (&ks, &case.lkv, case.hkv as usize)
        };
        let row = heads * d;
        let max = h
            .iter()
            .map(|&x| to_f64(x, case))
            .filter(|x| x.is_finite())
            .fold(0.0, |a: f64, x| a.max(x.abs()));
        for b in 0..lens.len() {
            let (lo, end, hi) = (
                starts[b] as usize * row,
                (starts[b] + lens[b]) as usize * row,
                starts[b + 1] as usize * row,
            );
            assert!(
                c[end..hi].iter().all(|&x| x == case.sentinel()),
                "{name}: {engine} {which} padding rows of batch {b} written"
            );
            for e in lo..end {
                let (cv, hv) = (to_f64(c[e], case), to_f64(h[e], case));
                assert!(
                    (cv - hv).abs() <= tol * max + tol * hv.abs(),
                    "{name}: {which} element {e} (batch {b}): {engine} {cv}, host {hv} (max |host| {max})"
                );
                // Exactly 0 where no (row, key) pair contributes: a zero-length partner, a row
                // the band gives no key, a key no row admits. (A value that is 0 only because
                // dP = Di, e.g. a row with one key, is not exact in either engine's rounding.)
                let r = (e / row) as i64 - starts[b];
                let (lq, lkv) = (case.lq[b], case.lkv[b]);
                let isolated = if *which == "dQ" {
                    (0..lkv).all(|j| !case.admits(lq, lkv, r, j))
                } else {
                    (0..lq).all(|i| !case.admits(lq, lkv, i, r))
                };
                if isolated {
                    assert_eq!(
                        cv, 0.0,
                        "{name}: {engine} {which} element {e}: nothing contributes"
                    );
                    assert_eq!(
                        hv, 0.0,
                        "{name}: {which} element {e}: host, nothing contributes"
                    );
                }
            }
        }
    }
}

/// The device cases, by test name.
fn case(name: &str) -> Case {
    let base = Case {
        dtype: DataType::BFloat16,
        d: 128,
        hq: 4,
        hkv: 2,
        lq: vec![70, 130, 1],
        lkv: vec![150, 64, 33],
        pad: 0,
        band: (None, Some(0), DiagonalAlignment::BottomRight),
        ragged_lse: false,
        bhsd_dims: false,
    };
    match name {
        "bf16_d128_gqa_causal_bottom_right_dense_lse" => base,
        "f16_d64_mqa_window_top_left_ragged_lse_bhsd_order" => Case {
            dtype: DataType::Half,
            d: 64,
            hq: 3,
            hkv: 1,
            lq: vec![90, 200],
            lkv: vec![120, 77],
            band: (Some(20), Some(3), DiagonalAlignment::TopLeft),
            ragged_lse: true,
            bhsd_dims: true,
            ..base
        },
        // Batch 1 has no keys (dQ = 0), batch 2 no queries (dK = dV = 0), batch 3 neither.
        "bf16_d64_seq_len_padding_and_zero_length_batches" => Case {
            d: 64,
            hq: 2,
            hkv: 2,
            lq: vec![45, 17, 0, 0, 80],
            lkv: vec![60, 0, 25, 0, 81],
            pad: 6,
            band: (None, None, DiagonalAlignment::TopLeft),
            ..base
        },
        // A window of 4 left of the top-left diagonal with Lq 150 > Lkv 60: rows from 64 on
        // admit no key and contribute nothing.
        "f16_d128_window_top_left_rows_without_keys" => Case {
            dtype: DataType::Half,
            hq: 2,
            hkv: 1,
            lq: vec![150, 40],
            lkv: vec![60, 100],
            pad: 2,
            band: (Some(4), Some(0), DiagonalAlignment::TopLeft),
            ragged_lse: true,
            ..base
        },
        // Several key tiles of 128 add into every 64-row query block's dQ (up to 8 here), in
        // both batches; no mask.
        "bf16_d128_long_sequences_many_key_tiles" => Case {
            lq: vec![700, 300],
            lkv: vec![650, 900],
            band: (None, None, DiagonalAlignment::TopLeft),
            ..base
        },
        // GQA (4 query heads on 2 KV heads) at D 64, causal, several key tiles per query block.
        "f16_d64_gqa_causal_long_sequences" => Case {
            dtype: DataType::Half,
            d: 64,
            lq: vec![520, 260],
            lkv: vec![600, 300],
            ragged_lse: true,
            ..base
        },
        other => panic!("no case {other}"),
    }
}

const CASES: [&str; 6] = [
    "bf16_d128_gqa_causal_bottom_right_dense_lse",
    "f16_d64_mqa_window_top_left_ragged_lse_bhsd_order",
    "bf16_d64_seq_len_padding_and_zero_length_batches",
    "f16_d128_window_top_left_rows_without_keys",
    "bf16_d128_long_sequences_many_key_tiles",
    "f16_d64_gqa_causal_long_sequences",
];

#[test]
fn bf16_d128_gqa_causal_bottom_right_dense_lse() {
    check(CASES[0], case(CASES[0]));
}

#[test]
fn f16_d64_mqa_window_top_left_ragged_lse_bhsd_order() {
    check(CASES[1], case(CASES[1]));
}

#[test]
fn bf16_d64_seq_len_padding_and_zero_length_batches() {
    check(CASES[2], case(CASES[2]));
}

#[test]
fn f16_d128_window_top_left_rows_without_keys() {
    check(CASES[3], case(CASES[3]));
}

#[test]
fn bf16_d128_long_sequences_many_key_tiles() {
    check(CASES[4], case(CASES[4]));
}

#[test]
fn f16_d64_gqa_causal_long_sequences() {
    check(CASES[5], case(CASES[5]));
}

/// Runs on every machine: each device case is a backward graph the plugin accepts (the host
/// engine at least applies), so a device run fails only on the engines' numbers.
#[test]
fn every_device_case_is_an_applicable_backward_graph() {
    for name in CASES {
        let handle = OwnedHandle::new();
        let (status, ids) = applicable(&handle, &encode_graph(&graph(&case(name))));
        assert_eq!(status, SUCCESS, "{name}: {}", last_error());
        assert!(ids.contains(&HOST_REFERENCE_ID), "{name}: {ids:?}");
    }
}
