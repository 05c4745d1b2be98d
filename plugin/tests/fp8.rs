//! FP8 SDPA forward graphs through the C ABI on the host engine (kernels/core/fp8-attention.md):
//! a small ragged causal GQA batch in FP8_E4M3, once in upstream's shape (descale_q/k/v only,
//! BFLOAT16 O) and once in cuDNN's (all six scalars, FP8 O, both amax outputs), each against a
//! float64 computation written here from the document — its own E4M3 table and rounding, its
//! own mask and indexing; only the input codes are shared. Then the declines of §6, each naming
//! its uid or field.

mod common;

use common::*;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes, TensorValue,
};

const B: usize = 3;
const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 8;
const S_MAX: i64 = 5;
const Q_TOKENS: [usize; B] = [3, 0, 5];
const KV_TOKENS: [usize; B] = [4, 2, 5];
const ATTN_SCALE: f32 = 0.3;

const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const LSE: i64 = 5;
const Q_OFFSETS: i64 = 10;
const KV_OFFSETS: i64 = 11;
const DESCALE_Q: i64 = 20;
const DESCALE_K: i64 = 21;
const DESCALE_V: i64 = 22;
const DESCALE_S: i64 = 23;
const SCALE_S: i64 = 24;
const SCALE_O: i64 = 25;
const AMAX_S: i64 = 26;
const AMAX_O: i64 = 27;

// The scalars' values: descale_q baked into the graph, the rest bound at execute.
const DQ: f32 = 0.5;
const DK: f32 = 0.25;
const DV: f32 = 0.75;
const SS: f32 = 448.0;
const DS: f32 = 1.0 / 448.0;
const SO: f32 = 96.0;

/// OCP E4M3 written out from fp8-attention.md §2: bias 7, 3 mantissa bits, 0x7F NaN, largest
/// finite 448 (0x7E); every positive finite code with its value, ascending.
fn e4m3_table() -> Vec<(u8, f64)> {
    (0u8..0x7F)
        .map(|c| {
            let (e, m) = (i32::from(c >> 3), f64::from(c & 7));
            let value = if e == 0 {
                m / 8.0 * 2f64.powi(-6)
            } else {
                (1.0 + m / 8.0) * 2f64.powi(e - 7)
            };
            (c, value)
        })
        .collect()
}

fn decode(code: u8) -> f64 {
    let magnitude = e4m3_table()[usize::from(code & 0x7F)].1;
    if code & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Nearest table value, ties to the even code, saturating at 448 (§2.2, §2.3); finite inputs.
fn encode(x: f64) -> u8 {
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs();
    let table = e4m3_table();
    let mut best = table[0];
    for &(code, value) in &table {
        let (d, d_best) = ((value - a).abs(), (best.1 - a).abs());
        if d < d_best || (d == d_best && code % 2 == 0) {
            best = (code, value);
        }
    }
    sign | best.0
}

fn quantize(x: f64) -> f64 {
    decode(encode(x))
}

fn prefix(tokens: &[usize]) -> Vec<i32> {
    let mut out = vec![0i32];
    for &t in tokens {
        out.push(out[out.len() - 1] + t as i32);
    }
    out
}

/// Deterministic E4M3 codes of values in about [−4, 4].
fn codes(n: usize, seed: u64) -> Vec<u8> {
    let mut next = xorshift(seed);
    (0..n)
        .map(|_| encode(((next() >> 11) as f64 / (1u64 << 53) as f64) * 8.0 - 4.0))
        .collect()
}

struct Shape {
    /// FP8 O with scale_o, both softmax scalars and both amax outputs.
    full: bool,
}

fn graph(shape: &Shape) -> Graph {
    let ragged = |uid, name: &str, data_type, heads: usize, aux| {
        let h = heads as i64;
        let d = D as i64;
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(data_type)
            .set_dims(vec![B as i64, S_MAX, h, d])
            .set_strides(vec![S_MAX * h * d, h * d, d, 1])
            .set_ragged_offset_uid(aux)
    };
    let index = |uid, name: &str| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Int32)
            .set_dims(vec![B as i64 + 1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let one = |uid, name: &str| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Float)
            .set_dims(vec![1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let e4m3 = DataType::Fp8E4m3;
    let o_type = if shape.full { e4m3 } else { DataType::BFloat16 };
    let mut sdpa = SdpaAttributes::new(Q, K, V, O);
    sdpa.stats_tensor_uid = Some(LSE);
    sdpa.generate_stats = Some(true);
    sdpa.attn_scale_value = Some(ATTN_SCALE);
    sdpa.right_bound = Some(0);
    sdpa.descale_q_tensor_uid = Some(DESCALE_Q);
    sdpa.descale_k_tensor_uid = Some(DESCALE_K);
    sdpa.descale_v_tensor_uid = Some(DESCALE_V);
    let mut g = Graph::new("plugin_test_fp8")
        .set_data_types(e4m3, DataType::Float, DataType::Float)
        .add_tensor(ragged(Q, "q", e4m3, HQ, Q_OFFSETS))
        .add_tensor(ragged(K, "k", e4m3, HKV, KV_OFFSETS))
        .add_tensor(ragged(V, "v", e4m3, HKV, KV_OFFSETS))
        .add_tensor(ragged(O, "o", o_type, HQ, Q_OFFSETS))
        .add_tensor(
            TensorAttributes::new()
                .set_uid(LSE)
                .set_name("lse")
                .set_data_type(DataType::Float)
                .set_dims(vec![B as i64, HQ as i64, S_MAX, 1])
                .set_strides(vec![HQ as i64 * S_MAX, S_MAX, 1, 1]),
        )
        .add_tensor(index(Q_OFFSETS, "q_offsets"))
        .add_tensor(index(KV_OFFSETS, "kv_offsets"))
        // The three ways a scalar is read: baked, pass-by-value host scalar, bound tensor.
        .add_tensor(one(DESCALE_Q, "descale_q").set_value(TensorValue::Float32(DQ)))
        .add_tensor(
            one(DESCALE_K, "descale_k")
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_is_runtime_pass_by_value(true),
        )
        .add_tensor(one(DESCALE_V, "descale_v"));
    if shape.full {
        sdpa.descale_s_tensor_uid = Some(DESCALE_S);
        sdpa.scale_s_tensor_uid = Some(SCALE_S);
        sdpa.scale_o_tensor_uid = Some(SCALE_O);
        sdpa.amax_s_tensor_uid = Some(AMAX_S);
        sdpa.amax_o_tensor_uid = Some(AMAX_O);
        g = g
            .add_tensor(one(DESCALE_S, "descale_s"))
            .add_tensor(one(SCALE_S, "scale_s"))
            .add_tensor(one(SCALE_O, "scale_o"))
            .add_tensor(one(AMAX_S, "amax_s"))
            .add_tensor(one(AMAX_O, "amax_o"));
    }
    g.add_node(Node::sdpa("sdpa", sdpa))
}

fn config() -> Vec<u8> {
    encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID))
}

/// The float64 computation of §3 over packed rows: O' per element (before scale_o and before
/// rounding), the LSE per (row, head), amax_s and amax_o.
struct Expected {
    o: Vec<f64>,
    lse: Vec<f64>,
    amax_s: f64,
    amax_o: f64,
}

fn expected(q: &[u8], k: &[u8], v: &[u8], full: bool) -> Expected {
    let (q_rows, kv_rows) = (prefix(&Q_TOKENS), prefix(&KV_TOKENS));
    let total_q = *q_rows.last().unwrap() as usize;
    let mut out = Expected {
        o: vec![0.0; total_q * HQ * D],
        lse: vec![f64::NEG_INFINITY; total_q * HQ],
        amax_s: 0.0,
        amax_o: 0.0,
    };
    let (dq, dk, dv) = (f64::from(DQ), f64::from(DK), f64::from(DV));
    for b in 0..B {
        let (q0, kv0) = (q_rows[b] as usize, kv_rows[b] as usize);
        for h in 0..HQ {
            let g = h / (HQ / HKV);
            for i in 0..Q_TOKENS[b] {
                // Top-left causal: key j ≤ i.
                let keys: Vec<usize> = (0..KV_TOKENS[b]).filter(|&j| j <= i).collect();
                if keys.is_empty() {
                    continue;
                }
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        (0..D)
                            .map(|d| {
                                decode(q[((q0 + i) * HQ + h) * D + d])
                                    * decode(k[((kv0 + j) * HKV + g) * D + d])
                            })
                            .sum::<f64>()
                            * dq
                            * dk
                            * f64::from(ATTN_SCALE)
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let l: f64 = s.iter().map(|x| (x - m).exp()).sum();
                out.lse[(q0 + i) * HQ + h] = m + l.ln();
                for d in 0..D {
                    let mut acc = 0.0;
                    for (&j, &sj) in keys.iter().zip(&s) {
                        let p = (sj - m).exp() / l;
                        out.amax_s = out.amax_s.max(p);
                        let w = if full {
                            quantize(p * f64::from(SS)) * f64::from(DS)
                        } else {
                            p
                        };
                        acc += w * decode(v[((kv0 + j) * HKV + g) * D + d]);
                    }
                    let o = acc * dv;
                    out.amax_o = out.amax_o.max(o.abs());
                    out.o[((q0 + i) * HQ + h) * D + d] = o;
                }
            }
        }
    }
    out
}

/// Runs one shape and returns (O as f64 per packed element, LSE per packed row and head, amax_s,
/// amax_o, the expected values).
fn run(full: bool) {
    let handle = OwnedHandle::new();
    let bytes = encode_graph(&graph(&Shape { full }));
    let context = OwnedContext::new(&handle, &config(), &bytes);
    let (tq, tkv) = (
        Q_TOKENS.iter().sum::<usize>(),
        KV_TOKENS.iter().sum::<usize>(),
    );
    let q = codes(tq * HQ * D, 1);
    let k = codes(tkv * HKV * D, 2);
    let v = codes(tkv * HKV * D, 3);
    let (q_off, kv_off) = (prefix(&Q_TOKENS), prefix(&KV_TOKENS));
    let scaled = |offsets: &[i32], row: usize| -> Vec<i32> {
        offsets.iter().map(|&o| o * row as i32).collect()
    };
    let (q_off, kv_off) = (scaled(&q_off, HQ * D), scaled(&kv_off, HKV * D));
    let descale_k = [DK];
    let descale_v = [DV];
    let (descale_s, scale_s, scale_o) = ([DS], [SS], [SO]);
    let mut o_fp8 = vec![0x7Fu8; tq * HQ * D];
    let mut o_bf16 = vec![0x7FDAu16; tq * HQ * D];
    let mut lse = vec![f32::NAN; B * HQ * S_MAX as usize];
    let (mut amax_s, mut amax_o) = ([f32::NAN], [f32::NAN]);
    let input = |uid, ptr: *const f32| DeviceBuffer {
        uid,
        ptr: ptr.cast_mut().cast(),
    };
    let mut pack = vec![
        input(Q, q.as_ptr().cast()),
        input(K, k.as_ptr().cast()),
        input(V, v.as_ptr().cast()),
        input(Q_OFFSETS, q_off.as_ptr().cast()),
        input(KV_OFFSETS, kv_off.as_ptr().cast()),
        input(DESCALE_K, descale_k.as_ptr()),
        input(DESCALE_V, descale_v.as_ptr()),
        DeviceBuffer {
            uid: LSE,
            ptr: lse.as_mut_ptr().cast(),
        },
    ];
    if full {
        pack.extend([
            input(DESCALE_S, descale_s.as_ptr()),
            input(SCALE_S, scale_s.as_ptr()),
            input(SCALE_O, scale_o.as_ptr()),
            DeviceBuffer {
                uid: O,
                ptr: o_fp8.as_mut_ptr().cast(),
            },
            DeviceBuffer {
                uid: AMAX_S,
                ptr: amax_s.as_mut_ptr().cast(),
            },
            DeviceBuffer {
                uid: AMAX_O,
                ptr: amax_o.as_mut_ptr().cast(),
            },
        ]);
    } else {
        pack.push(DeviceBuffer {
            uid: O,
            ptr: o_bf16.as_mut_ptr().cast(),
        });
    }
    assert_eq!(context.execute(&pack), SUCCESS, "{}", last_error());

    let want = expected(&q, &k, &v, full);
    for (i, &o) in want.o.iter().enumerate() {
        if full {
            // Both sides round O'·scale_o once to E4M3; f64 noise can only flip a tie, one code.
            let want_code = encode(o * f64::from(SO));
            let (got, want_value) = (decode(o_fp8[i]), decode(want_code));
            let ulp = (want_value.abs() / 8.0).max(2f64.powi(-9));
            assert!(
                (got - want_value).abs() <= ulp,
                "O element {i}: {got} (code {:#04x}), want {want_value}",
                o_fp8[i]
            );
        } else {
            let got = f64::from(f32::from_bits(u32::from(o_bf16[i]) << 16));
            assert!(
                (got - o).abs() <= o.abs() * 2f64.powi(-8) + 1e-12,
                "O element {i}: {got}, want {o}"
            );
        }
    }
    let q_rows = prefix(&Q_TOKENS);
    for b in 0..B {
        for s in 0..S_MAX as usize {
            for h in 0..HQ {
                let got = lse[(b * HQ + h) * S_MAX as usize + s];
                if s < Q_TOKENS[b] {
                    let want_lse = want.lse[(q_rows[b] as usize + s) * HQ + h];
                    assert!(
                        (f64::from(got) - want_lse).abs() <= 1e-5 * want_lse.abs().max(1.0),
                        "LSE b {b} s {s} h {h}: {got}, want {want_lse}"
                    );
                } else {
                    assert!(got.is_nan(), "padding LSE row b {b} s {s} written");
                }
            }
        }
    }
    if full {
        assert_eq!(amax_s[0], want.amax_s as f32);
        assert!(
            (f64::from(amax_o[0]) - want.amax_o).abs() <= want.amax_o * 1e-6,
            "amax_o {}, want {}",
            amax_o[0],
            want.amax_o
        );
        assert!(want.amax_s > 0.0 && want.amax_s <= 1.0);
    }
}

#[test]
fn e4m3_graph_with_bf16_output_and_descales_only_matches_float64() {
    run(false);
}

#[test]
fn e4m3_graph_with_all_six_scalars_fp8_output_and_amaxes_matches_float64() {
    run(true);
}

/// `CreateExecutionContext` on the host engine fails, and the message names
/// every one of `needles`.
fn assert_declined(g: &Graph, needles: &[&str]) {
    let handle = OwnedHandle::new();
    let (config, bytes) = (config(), encode_graph(g));
    let (c, gd) = (ConstData::of(&config), ConstData::of(&bytes));
    let mut context: Context = std::ptr::null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { (plugin().CreateExecutionContext)(handle.0, &c, &gd, &mut context) };
    // The plugin reports an engine that does not apply to the graph as BAD_PARAM.
    assert_eq!(status, BAD_PARAM, "{needles:?}: {}", last_error());
    let message = last_error();
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
    assert_eq!(applicable(&handle, &bytes), (SUCCESS, vec![]));
}

fn sdpa_mut(g: &mut Graph) -> &mut SdpaAttributes {
    match &mut g.nodes[0].attributes {
        ragged_schema::NodeAttributes::Sdpa(s) => s,
        other => panic!("not an SDPA node: {other:?}"),
    }
}

fn tensor_mut(g: &mut Graph, uid: i64) -> &mut TensorAttributes {
    g.tensors.iter_mut().find(|t| t.uid == uid).expect("uid")
}

#[test]
fn fp8_graphs_outside_the_semantics_are_declined_naming_uid_and_field() {
    // Mixed formats among Q, K, V: K's uid and FP8 formats named.
    let mut g = graph(&Shape { full: false });
    tensor_mut(&mut g, K).data_type = DataType::Fp8E5m2;
    assert_declined(&g, &["tensor uid 2", "k_tensor_uid data type", "fp8_e5m2"]);

    // A missing descale.
    let mut g = graph(&Shape { full: false });
    sdpa_mut(&mut g).descale_v_tensor_uid = None;
    assert_declined(&g, &["descale_v_tensor_uid = unset"]);

    // scale_o with a BFLOAT16 O.
    let mut g = graph(&Shape { full: false }).add_tensor(
        TensorAttributes::new()
            .set_uid(SCALE_O)
            .set_name("scale_o")
            .set_data_type(DataType::Float)
            .set_dims(vec![1])
            .set_strides(vec![1]),
    );
    sdpa_mut(&mut g).scale_o_tensor_uid = Some(SCALE_O);
    assert_declined(&g, &["tensor uid 25", "scale_o_tensor_uid", "bfloat16 O"]);

    // scale_s without descale_s.
    let mut g = graph(&Shape { full: true });
    sdpa_mut(&mut g).descale_s_tensor_uid = None;
    assert_declined(
        &g,
        &["descale_s_tensor_uid = unset while scale_s_tensor_uid"],
    );

    // An FP8 O of the other family.
    let mut g = graph(&Shape { full: true });
    tensor_mut(&mut g, O).data_type = DataType::Fp8E4m3Fnuz;
    assert_declined(&g, &["tensor uid 4", "o_tensor_uid data type", "OCP"]);

    // A per-head descale.
    let mut g = graph(&Shape { full: false });
    let t = tensor_mut(&mut g, DESCALE_V);
    t.dims = vec![1, HQ as i64, 1, 1];
    assert_declined(&g, &["tensor uid 22", "descale_v_tensor_uid dims"]);

    // A DOUBLE amax.
    let mut g = graph(&Shape { full: true });
    tensor_mut(&mut g, AMAX_O).data_type = DataType::Double;
    assert_declined(&g, &["tensor uid 27", "amax_o_tensor_uid data type"]);

    // Sinks with FP8.
    let mut g = graph(&Shape { full: false }).add_tensor(
        TensorAttributes::new()
            .set_uid(30)
            .set_name("sinks")
            .set_data_type(DataType::Float)
            .set_dims(vec![HQ as i64])
            .set_strides(vec![1]),
    );
    sdpa_mut(&mut g).sink_token_tensor_uid = Some(30);
    assert_declined(&g, &["tensor uid 30", "sink_token_tensor_uid", "FP8 graph"]);

    // FP8_E8M0 is a scale format.
    let mut g = graph(&Shape { full: false });
    tensor_mut(&mut g, Q).data_type = DataType::Fp8E8m0;
    assert_declined(&g, &["tensor uid 1", "scale format"]);

    // FP8 scalars on a 16-bit graph.
    let mut g = graph(&Shape { full: false });
    for uid in [Q, K, V, O] {
        tensor_mut(&mut g, uid).data_type = DataType::BFloat16;
    }
    assert_declined(
        &g,
        &["tensor uid 20", "descale_q_tensor_uid", "16-bit graph"],
    );
}

#[test]
fn fp8_backward_is_declined_naming_the_tensor() {
    use ragged_schema::SdpaBackwardAttributes;
    let forward = graph(&Shape { full: false });
    let mut g = Graph::new("plugin_test_fp8_backward").set_data_types(
        DataType::Fp8E4m3,
        DataType::Float,
        DataType::Float,
    );
    for t in forward.tensors.iter().filter(|t| t.uid < 20) {
        g = g.add_tensor(t.clone());
    }
    let grad = |uid, name: &str, like: i64| {
        let mut t = forward
            .tensors
            .iter()
            .find(|t| t.uid == like)
            .unwrap()
            .clone();
        t.uid = uid;
        t.name = name.to_owned();
        t
    };
    g = g
        .add_tensor(grad(40, "do", O))
        .add_tensor(grad(41, "dq", Q))
        .add_tensor(grad(42, "dk", K))
        .add_tensor(grad(43, "dv", V));
    let mut node = SdpaBackwardAttributes::new(Q, K, V, O, 40, LSE, 41, 42, 43);
    node.causal_mask = true;
    let g = g.add_node(Node::sdpa_backward("sdpa_backward", node));
    assert_declined(&g, &["tensor uid 1", "does not support FP8"]);
}
