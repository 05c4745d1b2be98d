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
//! modes, and the `zero_length` cases (every head dim) under compute-sanitizer memcheck and
//! racecheck. The cases themselves are in `gpu_backward/cases.rs`.

#[path = "gpu_backward/cases.rs"]
mod cases;
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

/// Where the forward wrote the LSE (each a layout the forward writes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lse {
    /// Dense head-major `[B, H_q, S_q, 1]`.
    Dense,
    /// Dense token-major memory (`[B, S_q, H_q, 1]` strides `{S·H, H, 1, 1}` in the RFC's order).
    DenseTokenMajor,
    /// Ragged on Q's token starts.
    Ragged,
}

struct Case {
    dtype: DataType,
    /// Head dim of Q and K (and dQ, dK).
    d: i64,
    /// Head dim of V and O (and dO, dV): `d` but for Q/K 192 with V/O 128.
    dv: i64,
    hq: i64,
    hkv: i64,
    /// Logical lengths per batch.
    lq: Vec<i64>,
    lkv: Vec<i64>,
    /// Rows past each batch's length on each side, cut off by `seq_len` tensors when > 0.
    pad: i64,
    band: (Option<i64>, Option<i64>, DiagonalAlignment),
    lse: Lse,
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
    /// Element index of (batch `b`, row `i`, head `h`) in the LSE buffer.
    fn lse_at(&self, b: usize, i: usize, h: usize) -> usize {
        let (hq, s_q) = (self.hq as usize, self.s_q() as usize);
        match self.lse {
            Lse::Dense => (b * hq + h) * s_q + i,
            Lse::DenseTokenMajor => (b * s_q + i) * hq + h,
            Lse::Ragged => (self.q_starts()[b] as usize + i) * hq + h,
        }
    }
    /// K-side offsets count elements (multiplier 1) where K and V have one head dim; with two
    /// head dims one element offset cannot start both, so they count tokens (multiplier
    /// `H_kv · width`).
    fn kv_offsets_in_tokens(&self) -> bool {
        self.d != self.dv
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
    let (b, hq, hkv) = (case.batch(), case.hq, case.hkv);
    let order = |mut dims: Vec<i64>, mut strides: Vec<i64>| {
        if case.bhsd_dims {
            dims.swap(1, 2);
            strides.swap(1, 2);
        }
        (dims, strides)
    };
    let ragged = |uid: i64, s: i64, h: i64, d: i64, aux: i64, multiplier: i64| {
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
    // Q-side offsets count tokens (int32, multiplier H·D), K-side count elements (int64), or
    // tokens where K and V differ in head dim.
    let mut g = Graph::new("gpu_backward")
        .set_data_types(case.dtype, DataType::Float, DataType::Float)
        .add_tensor(index(AUX_Q, b + 1, DataType::Int32))
        .add_tensor(index(AUX_KV, b + 1, DataType::Int64));
    for (uid, d) in [(Q, case.d), (O, case.dv), (DO, case.dv), (DQ, case.d)] {
        g = g.add_tensor(ragged(uid, s_q, hq, d, AUX_Q, hq * d));
    }
    for (uid, d) in [(K, case.d), (V, case.dv), (DK, case.d), (DV, case.dv)] {
        let multiplier = if case.kv_offsets_in_tokens() {
            hkv * d
        } else {
            1
        };
        g = g.add_tensor(ragged(uid, s_kv, hkv, d, AUX_KV, multiplier));
    }
    let lse = match case.lse {
        Lse::Ragged => {
            g = g.add_tensor(index(AUX_LSE, b + 1, DataType::Int32));
            let (dims, strides) = order(vec![b, s_q, hq, 1], vec![s_q * hq, hq, 1, 1]);
            TensorAttributes::new()
                .set_dims(dims)
                .set_strides(strides)
                .set_ragged_offset_uid(AUX_LSE)
                .set_ragged_offset_multiplier(hq)
        }
        Lse::DenseTokenMajor => {
            let (dims, strides) = order(vec![b, s_q, hq, 1], vec![s_q * hq, hq, 1, 1]);
            TensorAttributes::new().set_dims(dims).set_strides(strides)
        }
        Lse::Dense => TensorAttributes::new()
            .set_dims(vec![b, hq, s_q, 1])
            .set_strides(vec![hq * s_q, s_q, 1, 1]),
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
    /// Elements of dQ, dK and dV.
    dq_elems: usize,
    dk_elems: usize,
    dv_elems: usize,
}

fn inputs(case: &Case) -> Inputs {
    let (hq, hkv) = (case.hq as usize, case.hkv as usize);
    let (d, dv) = (case.d as usize, case.dv as usize);
    let (qs, ks) = (case.q_starts(), case.kv_starts());
    let (q_rows, kv_rows) = (qs[qs.len() - 1] as usize, ks[ks.len() - 1] as usize);
    let mut q = values(q_rows * hq * d, 1, case);
    let mut d_o = values(q_rows * hq * dv, 4, case);
    let mut k = values(kv_rows * hkv * d, 2, case);
    let mut v = values(kv_rows * hkv * dv, 3, case);
    let mut o = vec![case.nan(); q_rows * hq * dv];
    let lse_elems = match case.lse {
        Lse::Ragged => q_rows * hq,
        Lse::Dense | Lse::DenseTokenMajor => case.batch() as usize * hq * case.s_q() as usize,
    };
    let mut lse = vec![f32::NAN; lse_elems];
    let rep = hq / hkv;
    for b in 0..case.lq.len() {
        let (lq, lkv) = (case.lq[b], case.lkv[b]);
        for h in 0..hq {
            let g = h / rep;
            for i in 0..lq {
                let qi = (qs[b] + i) as usize;
                let row = |t: &[u16], tok: usize, heads: usize, head: usize, d: usize| {
                    (0..d)
                        .map(|c| to_f64(t[(tok * heads + head) * d + c], case))
                        .collect::<Vec<_>>()
                };
                let qrow = row(&q, qi, hq, h, d);
                let scores: Vec<(usize, f64)> = (0..lkv)
                    .filter(|&j| case.admits(lq, lkv, i, j))
                    .map(|j| {
                        let kj = (ks[b] + j) as usize;
                        let krow = row(&k, kj, hkv, g, d);
                        let dot: f64 = qrow.iter().zip(&krow).map(|(a, b)| a * b).sum();
                        (kj, dot * case.scale())
                    })
                    .collect();
                let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
                let mut out = vec![0.0; dv];
                for (kj, s) in &scores {
                    let p = (s - m).exp() / sum;
                    let vrow = row(&v, *kj, hkv, g, dv);
                    for c in 0..dv {
                        out[c] += p * vrow[c];
                    }
                }
                for c in 0..dv {
                    o[(qi * hq + h) * dv + c] = from_f32(out[c] as f32, case);
                }
                let value = if scores.is_empty() {
                    f32::NEG_INFINITY
                } else {
                    (m + sum.ln()) as f32
                };
                lse[case.lse_at(b, i as usize, h)] = value;
            }
        }
    }
    // Padding rows hold NaN in every input.
    for b in 0..case.lq.len() {
        for (t, starts, l, heads, d) in [
            (&mut q, &qs, case.lq[b], hq, d),
            (&mut d_o, &qs, case.lq[b], hq, dv),
            (&mut k, &ks, case.lkv[b], hkv, d),
            (&mut v, &ks, case.lkv[b], hkv, dv),
        ] {
            let (lo, hi) = ((starts[b] + l) as usize, starts[b + 1] as usize);
            t[lo * heads * d..hi * heads * d].fill(case.nan());
        }
    }
    let u16s = |t: &[u16]| le_bytes(t, u16::to_le_bytes);
    let q_off: Vec<i32> = qs.iter().map(|&t| t as i32).collect();
    let kv_unit = if case.kv_offsets_in_tokens() {
        1
    } else {
        (hkv * d) as i64
    };
    let kv_off: Vec<i64> = ks.iter().map(|&t| t * kv_unit).collect();
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
    if case.lse == Lse::Ragged {
        tensors.push((AUX_LSE, le_bytes(&q_off, i32::to_le_bytes)));
    }
    if case.pad > 0 {
        let lens = |l: &[i64]| l.iter().map(|&x| x as i32).collect::<Vec<_>>();
        tensors.push((SEQ_LEN_Q, le_bytes(&lens(&case.lq), i32::to_le_bytes)));
        tensors.push((SEQ_LEN_KV, le_bytes(&lens(&case.lkv), i32::to_le_bytes)));
    }
    Inputs {
        tensors,
        dq_elems: q_rows * hq * d,
        dk_elems: kv_rows * hkv * d,
        dv_elems: kv_rows * hkv * dv,
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
        (DQ, inputs.dq_elems, sentinel(inputs.dq_elems)),
        (DK, inputs.dk_elems, sentinel(inputs.dk_elems)),
        (DV, inputs.dv_elems, sentinel(inputs.dv_elems)),
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

/// Calls of each CUDA engine per case (`RAGGED_SDPA_TEST_REPEATS`, default 3).
fn repeats() -> usize {
    test_repeats(3).clamp(2, 8)
}

/// `case` with its batches' lengths rotated by one (so other token starts and tile counts), for
/// a call between two whose bits must agree.
fn other_offsets(case: &Case) -> Case {
    let (mut lq, mut lkv) = (case.lq.clone(), case.lkv.clone());
    lq.rotate_left(1);
    lkv.rotate_left(1);
    Case { lq, lkv, ..*case }
}

/// Both CUDA engines against the host reference's backward on the same device inputs; false
/// when there is no device (the test printed why and checked nothing).
fn check(name: &str, case: Case) -> bool {
    if let Err(reason) = runtime::probe() {
        skip(name, &reason.to_string());
        return false;
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
    let other = other_offsets(&case);
    let other_inputs = inputs(&other);
    let inputs = inputs(&case);
    let host = run(HOST_REFERENCE_ID, &case, &inputs);
    let cuda = run(CUDA_FMHA_ID, &case, &inputs);
    compare(name, "CUDA", &case, &cuda, &host);
    // dQ sums several key tiles' contributions in f32 in a fixed order: every later call gives
    // the same bits, the first of them after a call on other offsets and lengths (whose values
    // the workspace held last).
    run(CUDA_FMHA_ID, &other, &other_inputs);
    for call in 1..repeats() {
        let again = run(CUDA_FMHA_ID, &case, &inputs);
        for (which, (a, b)) in ["dQ", "dK", "dV"].iter().zip(cuda.iter().zip(&again)) {
            assert!(a == b, "{name}: CUDA {which} differs on call {}", call + 1);
        }
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
    true
}

/// One engine's dQ, dK, dV (`got`) against the host reference's: within the tolerance where
/// written, the sentinel in padding rows, exactly 0 where nothing contributes.
fn compare(name: &str, engine: &str, case: &Case, got: &[Vec<u16>; 3], host: &[Vec<u16>; 3]) {
    let tol = if case.bf16() { 2e-2 } else { 5e-3 };
    let (qs, ks) = (case.q_starts(), case.kv_starts());
    for (which, (c, h)) in ["dQ", "dK", "dV"].iter().zip(got.iter().zip(host)) {
        let (starts, lens, heads) = if *which == "dQ" {
            (&qs, &case.lq, case.hq as usize)
        } else {
            (&ks, &case.lkv, case.hkv as usize)
        };
        let d = if *which == "dV" { case.dv } else { case.d } as usize;
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
