//! SDPA backward (`SdpaBackwardAttributes`, union tag 15) through the built library's C ABI, as
//! hipDNN drives it: ragged GQA problems with zero-length batches and every causal alignment,
//! written in both upstream dims orders over the same memory, checked against a float64 oracle
//! written here from the backward's definition (plain loops; nothing of the project's kernels).
//! Plus the declines and the overlap refusal.

mod common;

use std::ffi::c_void;
use std::ptr::null_mut;

use common::*;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, DiagonalAlignment, EngineConfig, Graph, Node, SdpaBackwardAttributes,
    TensorAttributes,
};

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
const SEQ_LEN_Q: i64 = 12;
const SEQ_LEN_KV: i64 = 13;
const SCALE: i64 = 14;

#[derive(Clone, Copy, PartialEq)]
enum Band {
    None,
    CausalTopLeft,
    CausalBottomRight,
}

/// One ragged problem: per-batch logical lengths, heads, head dim; with `pad > 0` every batch
/// holds `pad` rows beyond its length on each side, cut off by `seq_len` tensors.
struct Case {
    lq: Vec<i64>,
    lkv: Vec<i64>,
    hq: i64,
    hkv: i64,
    d: i64,
    scale: f64,
    band: Band,
    pad: i64,
    /// The scale as a pass-by-value host scalar bound at execute instead of a graph constant.
    runtime_scale: bool,
}

impl Case {
    fn batch(&self) -> i64 {
        self.lq.len() as i64
    }
    /// Rows each batch holds in memory: its length plus the padding.
    fn extents(&self, lengths: &[i64]) -> Vec<i64> {
        lengths.iter().map(|l| l + self.pad).collect()
    }
    fn tokens_q(&self) -> Vec<usize> {
        Case::tokens(&self.extents(&self.lq))
    }
    fn tokens_kv(&self) -> Vec<usize> {
        Case::tokens(&self.extents(&self.lkv))
    }
    fn s_q(&self) -> i64 {
        self.lq.iter().copied().max().unwrap_or(0).max(1) + self.pad
    }
    fn s_kv(&self) -> i64 {
        self.lkv.iter().copied().max().unwrap_or(0).max(1) + self.pad
    }
    fn tokens(lengths: &[i64]) -> Vec<usize> {
        let mut out = vec![0usize];
        for l in lengths {
            out.push(out[out.len() - 1] + *l as usize);
        }
        out
    }
    /// Whether query row `i` of batch `b` admits key `j` (ragged-sdpa.md §5, per-batch diagonal).
    fn admits(&self, b: usize, i: usize, j: usize) -> bool {
        let (lq, lkv) = (self.lq[b], self.lkv[b]);
        let (i, j) = (i as i64, j as i64);
        match self.band {
            Band::None => true,
            Band::CausalTopLeft => j <= i,
            Band::CausalBottomRight => j <= i + (lkv - lq),
        }
    }
}

/// How the graph writes the tensors: both forms address the same packed token-major memory.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Form {
    /// `[B, S, H, D]` dims, offsets in elements, dense head-major LSE `[B, H, S_q, 1]`.
    BshdElementOffsets,
    /// `[B, H, S, D]` dims, offsets in tokens (multiplier H·D), ragged LSE on Q's offsets.
    BhsdTokenOffsets,
}

fn values(seed: u32, n: usize) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let x = i
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503))
                >> 7;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Packed inputs and their float64 forward: O and the LSE rounded to f32 as a forward writes them.
struct Data {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    d_o: Vec<f32>,
    /// Token-major `[tokens, H_q]`, as the ragged LSE.
    lse_tokens: Vec<f32>,
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

impl Data {
    fn new(c: &Case) -> Data {
        let (tq, tkv) = (c.tokens_q(), c.tokens_kv());
        let (nq, nkv) = (tq[tq.len() - 1], tkv[tkv.len() - 1]);
        let (hq, hkv, d) = (c.hq as usize, c.hkv as usize, c.d as usize);
        let mut q = values(1, nq * hq * d);
        let mut k = values(2, nkv * hkv * d);
        let mut v = values(3, nkv * hkv * d);
        let mut d_o = values(4, nq * hq * d);
        let mut o = vec![0f32; nq * hq * d];
        let mut lse_tokens = vec![f32::NEG_INFINITY; nq * hq];
        // Padding rows hold NaN: a read of one would poison the gradients.
        for b in 0..c.lq.len() {
            for t in tq[b] + c.lq[b] as usize..tq[b + 1] {
                for x in [&mut q, &mut o, &mut d_o] {
                    x[t * hq * d..(t + 1) * hq * d].fill(f32::NAN);
                }
                lse_tokens[t * hq..(t + 1) * hq].fill(f32::NAN);
            }
            for t in tkv[b] + c.lkv[b] as usize..tkv[b + 1] {
                for x in [&mut k, &mut v] {
                    x[t * hkv * d..(t + 1) * hkv * d].fill(f32::NAN);
                }
            }
        }
        for b in 0..c.lq.len() {
            for h in 0..hq {
                let g = h / (hq / hkv);
                for i in 0..c.lq[b] as usize {
                    let row = ((tq[b] + i) * hq + h) * d;
                    let keys: Vec<usize> = (0..c.lkv[b] as usize)
                        .filter(|&j| c.admits(b, i, j))
                        .collect();
                    if keys.is_empty() {
                        continue;
                    }
                    let col = |j: usize| ((tkv[b] + j) * hkv + g) * d;
                    let s: Vec<f64> = keys
                        .iter()
                        .map(|&j| c.scale * dot(&q[row..row + d], &k[col(j)..col(j) + d]))
                        .collect();
                    let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
                    lse_tokens[(tq[b] + i) * hq + h] = (max + sum.ln()) as f32;
                    for x in 0..d {
                        let acc: f64 = keys
                            .iter()
                            .zip(&s)
                            .map(|(&j, sj)| (sj - max).exp() / sum * v[col(j) + x] as f64)
                            .sum();
                        o[row + x] = acc as f32;
                    }
                }
            }
        }
        Data {
            q,
            k,
            v,
            o,
            d_o,
            lse_tokens,
        }
    }

    /// The LSE as a dense `[B, H_q, S_q, 1]` buffer; padding rows hold NaN (never read).
    fn lse_dense(&self, c: &Case) -> Vec<f32> {
        let tq = c.tokens_q();
        let (hq, s) = (c.hq as usize, c.s_q() as usize);
        let mut out = vec![f32::NAN; c.lq.len() * hq * s];
        for b in 0..c.lq.len() {
            for h in 0..hq {
                for i in 0..c.lq[b] as usize {
                    out[(b * hq + h) * s + i] = self.lse_tokens[(tq[b] + i) * hq + h];
                }
            }
        }
        out
    }
}

/// dQ, dK, dV in float64 from the definition (kernels/reference/src/sdpa_backward/README.md §2), over the
/// f32 inputs the plugin is given; NaN marks a padding position, which must stay unwritten.
fn oracle(c: &Case, x: &Data) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (tq, tkv) = (c.tokens_q(), c.tokens_kv());
    let (hq, hkv, d) = (c.hq as usize, c.hkv as usize, c.d as usize);
    let mut dq = vec![f64::NAN; x.q.len()];
    let mut dk = vec![f64::NAN; x.k.len()];
    let mut dv = vec![f64::NAN; x.v.len()];
    for b in 0..c.lq.len() {
        dq[tq[b] * hq * d..(tq[b] + c.lq[b] as usize) * hq * d].fill(0.0);
        dk[tkv[b] * hkv * d..(tkv[b] + c.lkv[b] as usize) * hkv * d].fill(0.0);
        dv[tkv[b] * hkv * d..(tkv[b] + c.lkv[b] as usize) * hkv * d].fill(0.0);
    }
    for b in 0..c.lq.len() {
        for h in 0..hq {
            let g = h / (hq / hkv);
            for i in 0..c.lq[b] as usize {
                let row = ((tq[b] + i) * hq + h) * d;
                let lse = x.lse_tokens[(tq[b] + i) * hq + h] as f64;
                let delta = dot(&x.d_o[row..row + d], &x.o[row..row + d]);
                for j in (0..c.lkv[b] as usize).filter(|&j| c.admits(b, i, j)) {
                    let col = ((tkv[b] + j) * hkv + g) * d;
                    let s = c.scale * dot(&x.q[row..row + d], &x.k[col..col + d]);
                    let p = (s - lse).exp();
                    let dp = dot(&x.d_o[row..row + d], &x.v[col..col + d]);
                    let ds = p * (dp - delta);
                    for e in 0..d {
                        dq[row + e] += c.scale * ds * x.k[col + e] as f64;
                        dk[col + e] += c.scale * ds * x.q[row + e] as f64;
                        dv[col + e] += p * x.d_o[row + e] as f64;
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}

fn aux(uid: i64, b: i64) -> TensorAttributes {
    TensorAttributes::new()
        .set_uid(uid)
        .set_name(format!("offsets{uid}"))
        .set_data_type(DataType::Int32)
        .set_dims(vec![b + 1, 1, 1, 1])
        .set_strides(vec![1, 1, 1, 1])
}

/// A packed token-major ragged tensor `[B, S, H, D]` in `form`'s dims order.
fn ragged(uid: i64, c: &Case, s: i64, h: i64, d: i64, aux: i64, form: Form) -> TensorAttributes {
    let b = c.batch();
    let t = TensorAttributes::new()
        .set_uid(uid)
        .set_name(format!("t{uid}"))
        .set_data_type(DataType::Float)
        .set_ragged_offset_uid(aux);
    match form {
        Form::BshdElementOffsets => {
            t.set_dims(vec![b, s, h, d])
                .set_strides(vec![s * h * d, h * d, d, 1])
        }
        Form::BhsdTokenOffsets => t
            .set_dims(vec![b, h, s, d])
            .set_strides(vec![s * h * d, d, h * d, 1])
            .set_ragged_offset_multiplier(h * d),
    }
}

fn graph(c: &Case, form: Form) -> Graph {
    let (sq, skv, b) = (c.s_q(), c.s_kv(), c.batch());
    let (hq, hkv, d) = (c.hq, c.hkv, c.d);
    let mut node = SdpaBackwardAttributes::new(Q, K, V, O, DO, LSE, DQ, DK, DV);
    if !c.runtime_scale {
        node = node.set_attn_scale_value(c.scale as f32);
    }
    node = match c.band {
        Band::None => node,
        Band::CausalTopLeft => node.set_diagonal_band(None, Some(0), DiagonalAlignment::TopLeft),
        Band::CausalBottomRight => {
            node.set_diagonal_band(None, Some(0), DiagonalAlignment::BottomRight)
        }
    };
    let lse = match form {
        Form::BshdElementOffsets => TensorAttributes::new()
            .set_dims(vec![b, hq, sq, 1])
            .set_strides(vec![hq * sq, sq, 1, 1]),
        Form::BhsdTokenOffsets => TensorAttributes::new()
            .set_dims(vec![b, hq, sq, 1])
            .set_strides(vec![sq * hq, 1, hq, 1])
            .set_ragged_offset_uid(AUX_Q)
            .set_ragged_offset_multiplier(hq),
    }
    .set_uid(LSE)
    .set_name("lse")
    .set_data_type(DataType::Float);
    let mut g = Graph::new("sdpa_backward")
        .set_data_types(DataType::Float, DataType::Float, DataType::Float)
        .add_tensor(lse)
        .add_tensor(aux(AUX_Q, b))
        .add_tensor(aux(AUX_KV, b));
    let index = |uid: i64| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("seq_len{uid}"))
            .set_data_type(DataType::Int32)
            .set_dims(vec![b, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    if c.pad > 0 {
        g = g.add_tensor(index(SEQ_LEN_Q)).add_tensor(index(SEQ_LEN_KV));
        node = node
            .set_seq_len_q(&index(SEQ_LEN_Q))
            .set_seq_len_kv(&index(SEQ_LEN_KV));
        node.padding_mask = true;
    }
    if c.runtime_scale {
        let scale = TensorAttributes::new()
            .set_uid(SCALE)
            .set_name("scale")
            .set_data_type(DataType::Float)
            .set_dims(vec![1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
            .set_is_runtime_pass_by_value(true);
        node = node.set_scale_tensor(&scale);
        g = g.add_tensor(scale);
    }
    for (uid, s, h, aux) in [
        (Q, sq, hq, AUX_Q),
        (K, skv, hkv, AUX_KV),
        (V, skv, hkv, AUX_KV),
        (O, sq, hq, AUX_Q),
        (DO, sq, hq, AUX_Q),
        (DQ, sq, hq, AUX_Q),
        (DK, skv, hkv, AUX_KV),
        (DV, skv, hkv, AUX_KV),
    ] {
        g = g.add_tensor(ragged(uid, c, s, h, d, aux, form));
    }
    g.add_node(Node::sdpa_backward("bwd", node))
}

/// Ragged offsets for `form`: elements (token · H · D) or tokens.
fn offsets(lengths: &[i64], h: i64, d: i64, form: Form) -> Vec<i32> {
    let unit = if form == Form::BshdElementOffsets {
        h * d
    } else {
        1
    };
    Case::tokens(lengths)
        .iter()
        .map(|t| (*t as i64 * unit) as i32)
        .collect()
}

fn buffer<T>(uid: i64, data: &mut [T]) -> DeviceBuffer {
    DeviceBuffer {
        uid,
        ptr: data.as_mut_ptr().cast::<c_void>(),
    }
}

/// A host-engine execution context for `graph`, destroyed on drop.
struct Ctx<'h> {
    handle: &'h OwnedHandle,
    context: Context,
}

impl<'h> Ctx<'h> {
    fn new(handle: &'h OwnedHandle, graph: &Graph) -> Result<Ctx<'h>, (Status, String)> {
        let bytes = encode_graph(graph);
        let config = encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID));
        let (c, g) = (ConstData::of(&config), ConstData::of(&bytes));
        let mut context: Context = null_mut();
        // SAFETY: valid pointers.
        let status = unsafe { (plugin().CreateExecutionContext)(handle.0, &c, &g, &mut context) };
        if status != SUCCESS {
            return Err((status, last_error()));
        }
        let mut size = usize::MAX;
        // SAFETY: a live context and a valid out-pointer.
        let status = unsafe {
            (plugin().GetWorkspaceSizeFromExecutionContext)(handle.0, context, &mut size)
        };
        assert_eq!((status, size), (SUCCESS, 0), "{}", last_error());
        Ok(Ctx { handle, context })
    }

    fn execute(&self, pack: &[DeviceBuffer]) -> Status {
        // SAFETY: every pointer is a live host buffer of its tensor's extent; the context is
        // live; the host engine takes no workspace.
        unsafe {
            (plugin().ExecuteOpGraph)(
                self.handle.0,
                self.context,
                null_mut(),
                pack.as_ptr(),
                pack.len() as u32,
            )
        }
    }
}

impl Drop for Ctx<'_> {
    fn drop(&mut self) {
        // SAFETY: a live context of this handle, destroyed once.
        let status = unsafe { (plugin().DestroyExecutionContext)(self.handle.0, self.context) };
        assert_eq!(status, SUCCESS);
    }
}

struct Gradients {
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
}

/// Runs `c` written as `form` through the C ABI; gradients start as NaN so that a position the
/// engine fails to write shows.
fn run(c: &Case, x: &Data, form: Form) -> Gradients {
    let handle = OwnedHandle::new();
    let g = graph(c, form);
    let (status, ids) = applicable(&handle, &encode_graph(&g));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(
        ids,
        vec![HOST_REFERENCE_ID],
        "{form:?}: only the host engine runs a backward"
    );
    let ctx = Ctx::new(&handle, &g).unwrap_or_else(|(s, e)| panic!("{form:?}: {s}: {e}"));
    let (mut q, mut k, mut v, mut o, mut d_o) = (
        x.q.clone(),
        x.k.clone(),
        x.v.clone(),
        x.o.clone(),
        x.d_o.clone(),
    );
    let mut lse = match form {
        Form::BshdElementOffsets => x.lse_dense(c),
        Form::BhsdTokenOffsets => x.lse_tokens.clone(),
    };
    let mut aux_q = offsets(&c.extents(&c.lq), c.hq, c.d, form);
    let mut aux_kv = offsets(&c.extents(&c.lkv), c.hkv, c.d, form);
    let mut lens_q: Vec<i32> = c.lq.iter().map(|l| *l as i32).collect();
    let mut lens_kv: Vec<i32> = c.lkv.iter().map(|l| *l as i32).collect();
    let mut scale = [c.scale as f32];
    let mut out = Gradients {
        dq: vec![f32::NAN; q.len()],
        dk: vec![f32::NAN; k.len()],
        dv: vec![f32::NAN; v.len()],
    };
    let pack = [
        buffer(Q, &mut q),
        buffer(K, &mut k),
        buffer(V, &mut v),
        buffer(O, &mut o),
        buffer(DO, &mut d_o),
        buffer(LSE, &mut lse),
        buffer(DQ, &mut out.dq),
        buffer(DK, &mut out.dk),
        buffer(DV, &mut out.dv),
        buffer(AUX_Q, &mut aux_q),
        buffer(AUX_KV, &mut aux_kv),
        buffer(SEQ_LEN_Q, &mut lens_q),
        buffer(SEQ_LEN_KV, &mut lens_kv),
        buffer(SCALE, &mut scale),
    ];
    assert_eq!(ctx.execute(&pack), SUCCESS, "{form:?}: {}", last_error());
    out
}

fn check(name: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name} length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = *g as f64;
        if w.is_nan() {
            assert!(g.is_nan(), "{name}[{i}] = {g} written in a padding row");
            continue;
        }
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "{name}[{i}] = {g}, oracle {w}"
        );
    }
}

/// Runs `c` in both forms: identical bits from the same memory, and the oracle's values.
fn both_forms_match_the_oracle(c: &Case) -> Gradients {
    let x = Data::new(c);
    let (dq, dk, dv) = oracle(c, &x);
    let a = run(c, &x, Form::BshdElementOffsets);
    let b = run(c, &x, Form::BhsdTokenOffsets);
    for (name, ga, gb) in [
        ("dQ", &a.dq, &b.dq),
        ("dK", &a.dk, &b.dk),
        ("dV", &a.dv, &b.dv),
    ] {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(ga), bits(gb), "{name}: the two dims orders differ");
    }
    check("dQ", &a.dq, &dq);
    check("dK", &a.dk, &dk);
    check("dV", &a.dv, &dv);
    a
}

fn gqa_case(band: Band) -> Case {
    Case {
        // Batch 1 has no queries (dK = dV = 0), batch 2 no keys (dQ = 0).
        lq: vec![3, 0, 4, 6],
        lkv: vec![5, 3, 0, 2],
        hq: 4,
        hkv: 2,
        d: 8,
        scale: 0.35,
        band,
        pad: 0,
        runtime_scale: false,
    }
}

#[test]
fn ragged_gqa_backward_matches_the_float64_oracle_in_both_dims_orders() {
    both_forms_match_the_oracle(&gqa_case(Band::None));
}

#[test]
fn causal_bottom_right_and_top_left_match_the_oracle() {
    both_forms_match_the_oracle(&gqa_case(Band::CausalBottomRight));
    both_forms_match_the_oracle(&gqa_case(Band::CausalTopLeft));
}

#[test]
fn zero_length_batches_give_exact_zeros() {
    let c = gqa_case(Band::CausalBottomRight);
    let out = both_forms_match_the_oracle(&c);
    let (tq, tkv) = (c.tokens_q(), c.tokens_kv());
    let (hq, hkv, d) = (c.hq as usize, c.hkv as usize, c.d as usize);
    // Batch 1: Lq = 0, so its Lkv = 3 key rows of dK and dV are exactly 0.
    for t in tkv[1]..tkv[2] {
        for e in 0..hkv * d {
            assert_eq!(out.dk[t * hkv * d + e].to_bits(), 0, "dK token {t}");
            assert_eq!(out.dv[t * hkv * d + e].to_bits(), 0, "dV token {t}");
        }
    }
    // Batch 2: Lkv = 0, so its 4 query rows of dQ are exactly 0.
    assert!(tq[3] > tq[2]);
    for t in tq[2]..tq[3] {
        for e in 0..hq * d {
            assert_eq!(out.dq[t * hq * d + e].to_bits(), 0, "dQ token {t}");
        }
    }
    // Batch 3 under bottom-right causal with Lq 6 > Lkv 2: rows 0..4 admit no key, so they
    // contribute nothing and their dQ is 0.
    for i in 0..4 {
        let t = tq[3] + i;
        for e in 0..hq * d {
            assert_eq!(out.dq[t * hq * d + e].to_bits(), 0, "dQ token {t}");
        }
    }
}

#[test]
fn padded_seq_lens_and_a_runtime_scale_leave_padding_rows_unread_and_unwritten() {
    let c = Case {
        pad: 2,
        runtime_scale: true,
        hq: 2,
        hkv: 1,
        ..gqa_case(Band::CausalBottomRight)
    };
    both_forms_match_the_oracle(&c);
}

/// The reason a host-engine context for `g` was refused (status, message).
fn refused(g: &Graph) -> (Status, String) {
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &encode_graph(g));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert!(ids.is_empty(), "a declined graph lists no engine");
    match Ctx::new(&handle, g) {
        Ok(_) => panic!("context created for a declined graph"),
        Err(refusal) => refusal,
    }
}

fn small_graph() -> Graph {
    graph(&gqa_case(Band::None), Form::BshdElementOffsets)
}

fn edit(g: &mut Graph) -> &mut SdpaBackwardAttributes {
    match &mut g.nodes[0].attributes {
        ragged_schema::NodeAttributes::SdpaBackward(b) => b,
        _ => panic!("not a backward node"),
    }
}

#[test]
fn unsupported_features_are_declined_naming_the_field() {
    let dense = |uid: i64| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("extra{uid}"))
            .set_data_type(DataType::Float)
            .set_dims(vec![4, 4, 6, 5])
            .set_strides(vec![120, 30, 5, 1])
    };
    let mut dropout = small_graph();
    edit(&mut dropout).dropout_probability = Some(0.25);
    let mut bias = small_graph().add_tensor(dense(20));
    edit(&mut bias).attn_mask_tensor_uid = Some(20);
    let mut dbias = small_graph().add_tensor(dense(21));
    edit(&mut dbias).dbias_tensor_uid = Some(21);
    let mut alibi = small_graph();
    edit(&mut alibi).alibi_mask = true;
    for (g, needle) in [
        (dropout, "dropout_probability"),
        (bias, "tensor uid 20"),
        (dbias, "tensor uid 21"),
        (alibi, "alibi_mask"),
    ] {
        let (status, message) = refused(&g);
        assert_ne!(status, SUCCESS);
        assert!(message.contains(needle), "{needle}: {message}");
    }
}

#[test]
fn a_gradient_overlapping_an_input_is_refused_and_nothing_is_written() {
    let c = gqa_case(Band::None);
    let x = Data::new(&c);
    let handle = OwnedHandle::new();
    let form = Form::BshdElementOffsets;
    let ctx = Ctx::new(&handle, &graph(&c, form)).expect("accepted");
    let (mut q, mut k, mut v, mut o) = (x.q.clone(), x.k.clone(), x.v.clone(), x.o.clone());
    let mut d_o = x.d_o.clone();
    let mut lse = x.lse_dense(&c);
    let (mut aux_q, mut aux_kv) = (
        offsets(&c.extents(&c.lq), c.hq, c.d, form),
        offsets(&c.extents(&c.lkv), c.hkv, c.d, form),
    );
    let (mut dk, mut dv) = (vec![f32::NAN; k.len()], vec![f32::NAN; v.len()]);
    let before = d_o.clone();
    let shared = buffer(DO, &mut d_o);
    let pack = [
        buffer(Q, &mut q),
        buffer(K, &mut k),
        buffer(V, &mut v),
        buffer(O, &mut o),
        shared,
        buffer(LSE, &mut lse),
        DeviceBuffer {
            uid: DQ,
            ptr: shared.ptr,
        },
        buffer(DK, &mut dk),
        buffer(DV, &mut dv),
        buffer(AUX_Q, &mut aux_q),
        buffer(AUX_KV, &mut aux_kv),
    ];
    assert_eq!(ctx.execute(&pack), INVALID_VALUE);
    let message = last_error();
    assert!(
        message.contains("output tensor uid 7") && message.contains("tensor uid 5"),
        "{message}"
    );
    assert!(
        dk.iter().chain(&dv).all(|x| x.is_nan()),
        "a gradient was written"
    );
    assert_eq!(
        d_o.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        before.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}
