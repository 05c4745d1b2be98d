//! Q/K head dim 192 with V/O head dim 128 (DeepSeek-style prefill, issue 14 item 1) through the
//! C ABI on the host engine, against a float64 attention written out in this file.

mod common;

use std::ffi::c_void;

use common::*;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{DataType, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes};

const B: i64 = 2;
const HQ: i64 = 2;
const HKV: i64 = 1;
const D_QK: i64 = 192;
const D_V: i64 = 128;
const Q_TOKENS: [i64; 2] = [3, 5];
const KV_TOKENS: [i64; 2] = [4, 7];
const SCALE: f32 = 0.07;
/// uids: Q, K, V, O, then one element-offset aux per tensor (their rows differ in width).
const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const AUX: [i64; 4] = [11, 12, 13, 14];

fn offsets(tokens: [i64; 2], row: i64) -> Vec<i32> {
    let mut out = vec![0i32];
    for t in tokens {
        out.push(out[out.len() - 1] + (t * row) as i32);
    }
    out
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut next = xorshift(seed);
    (0..n)
        .map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect()
}

fn graph() -> Graph {
    let s_q = *Q_TOKENS.iter().max().expect("batches");
    let s_kv = *KV_TOKENS.iter().max().expect("batches");
    let ragged = |uid, name: &str, s, h, d, aux| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Float)
            .set_dims(vec![B, s, h, d])
            .set_strides(vec![s * h * d, h * d, d, 1])
            .set_ragged_offset_uid(aux)
    };
    let aux = |uid, name: &str| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Int32)
            .set_dims(vec![B + 1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let mut sdpa = SdpaAttributes::new(Q, K, V, O);
    sdpa.attn_scale_value = Some(SCALE);
    Graph::new("plugin_test_dqk192_dv128")
        .set_data_types(DataType::Float, DataType::Float, DataType::Float)
        .add_tensor(ragged(Q, "q", s_q, HQ, D_QK, AUX[0]))
        .add_tensor(ragged(K, "k", s_kv, HKV, D_QK, AUX[1]))
        .add_tensor(ragged(V, "v", s_kv, HKV, D_V, AUX[2]))
        .add_tensor(ragged(O, "o", s_q, HQ, D_V, AUX[3]))
        .add_tensor(aux(AUX[0], "q_offsets"))
        .add_tensor(aux(AUX[1], "k_offsets"))
        .add_tensor(aux(AUX[2], "v_offsets"))
        .add_tensor(aux(AUX[3], "o_offsets"))
        .add_node(Node::sdpa("sdpa", sdpa))
}

/// softmax(scale·QKᵀ)·V per batch and head in float64, from the packed buffers.
fn oracle(q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
    let (hq, hkv, dqk, dv) = (HQ as usize, HKV as usize, D_QK as usize, D_V as usize);
    let mut out = vec![0.0; Q_TOKENS.iter().sum::<i64>() as usize * hq * dv];
    let (mut q0, mut kv0) = (0, 0);
    for (&lq, &lkv) in Q_TOKENS.iter().zip(&KV_TOKENS) {
        let (lq, lkv) = (lq as usize, lkv as usize);
        for h in 0..hq {
            let g = h / (hq / hkv);
            for i in 0..lq {
                let qi = &q[((q0 + i) * hq + h) * dqk..][..dqk];
                let scores: Vec<f64> = (0..lkv)
                    .map(|j| {
                        let kj = &k[((kv0 + j) * hkv + g) * dqk..][..dqk];
                        let dot: f64 = qi
                            .iter()
                            .zip(kj)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum();
                        dot * f64::from(SCALE)
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = weights.iter().sum();
                let row = &mut out[((q0 + i) * hq + h) * dv..][..dv];
                for (j, w) in weights.iter().enumerate() {
                    let vj = &v[((kv0 + j) * hkv + g) * dv..][..dv];
                    for (o, x) in row.iter_mut().zip(vj) {
                        *o += w / sum * f64::from(*x);
                    }
                }
            }
        }
        q0 += lq;
        kv0 += lkv;
    }
    out
}

#[test]
fn query_key_dim_192_with_value_dim_128_matches_the_float64_oracle() {
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(
        &handle,
        &encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID)),
        &encode_graph(&graph()),
    );

    let aux = [
        offsets(Q_TOKENS, HQ * D_QK),
        offsets(KV_TOKENS, HKV * D_QK),
        offsets(KV_TOKENS, HKV * D_V),
        offsets(Q_TOKENS, HQ * D_V),
    ];
    let q = values(aux[0][2] as usize, 1);
    let k = values(aux[1][2] as usize, 2);
    let v = values(aux[2][2] as usize, 3);
    let mut o = vec![f32::NAN; aux[3][2] as usize];
    let input = |uid, ptr: *const c_void| DeviceBuffer {
        uid,
        ptr: ptr.cast_mut(),
    };
    let mut pack = vec![
        input(Q, q.as_ptr().cast()),
        input(K, k.as_ptr().cast()),
        input(V, v.as_ptr().cast()),
        DeviceBuffer {
            uid: O,
            ptr: o.as_mut_ptr().cast(),
        },
    ];
    pack.extend(
        AUX.iter()
            .zip(&aux)
            .map(|(&uid, a)| input(uid, a.as_ptr().cast())),
    );
    // Every pointer in `pack` is a live host buffer of its tensor's extent.
    let status = context.execute(&pack);
    assert_eq!(status, SUCCESS, "{}", last_error());
    drop(context);

    let want = oracle(&q, &k, &v);
    assert_eq!(o.len(), want.len());
    for (n, (got, want)) in o.iter().zip(&want).enumerate() {
        let err = (f64::from(*got) - want).abs();
        assert!(
            err <= 1e-5 + 1e-5 * want.abs(),
            "O[{n}] = {got}, oracle {want}"
        );
    }
}
