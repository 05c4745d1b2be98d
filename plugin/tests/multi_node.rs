//! A multi-node graph through the built library's C ABI, as hipDNN drives it: SDPA whose O is a
//! virtual ragged intermediate sharing Q's aux, feeding a pointwise add of a ragged residual.
//! Checked against a float64 oracle written here (plain loops, no code of the project).

mod common;

use std::ffi::c_void;

use common::*;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, EngineConfig, Graph, Node, PointwiseAttributes, PointwiseMode, SdpaAttributes,
    TensorAttributes,
};

const B: i64 = 2;
const D: i64 = 4;
const SQ: i64 = 3;
const SKV: i64 = 3;
const LQ: [i64; 2] = [2, 3];
const LKV: [i64; 2] = [3, 1];
const SCALE: f64 = 0.5;
const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const R: i64 = 5;
const Y: i64 = 6;
const AUX_Q: i64 = 10;
const AUX_KV: i64 = 11;

fn ragged(uid: i64, s: i64, aux: i64) -> TensorAttributes {
    TensorAttributes::new()
        .set_uid(uid)
        .set_name(format!("t{uid}"))
        .set_data_type(DataType::Float)
        .set_dims(vec![B, s, 1, D])
        .set_strides(vec![s * D, D, D, 1])
        .set_ragged_offset_uid(aux)
}

fn aux(uid: i64) -> TensorAttributes {
    TensorAttributes::new()
        .set_uid(uid)
        .set_name(format!("aux{uid}"))
        .set_data_type(DataType::Int32)
        .set_dims(vec![B + 1, 1, 1, 1])
        .set_strides(vec![1, 1, 1, 1])
}

fn graph() -> Graph {
    let mut sdpa = SdpaAttributes::new(Q, K, V, O);
    sdpa.attn_scale_value = Some(SCALE as f32);
    let o = ragged(O, SQ, AUX_Q).set_is_virtual(true);
    let (r, y) = (ragged(R, SQ, AUX_Q), ragged(Y, SQ, AUX_Q));
    let add = PointwiseAttributes::binary(PointwiseMode::ADD, &o, &r, &y);
    Graph::new("sdpa_then_residual_add")
        .set_data_types(DataType::Float, DataType::Float, DataType::Float)
        .add_tensor(ragged(Q, SQ, AUX_Q))
        .add_tensor(ragged(K, SKV, AUX_KV))
        .add_tensor(ragged(V, SKV, AUX_KV))
        .add_tensor(o)
        .add_tensor(r)
        .add_tensor(y)
        .add_tensor(aux(AUX_Q))
        .add_tensor(aux(AUX_KV))
        .add_node(Node::sdpa("sdpa", sdpa))
        .add_node(Node::pointwise("residual", add))
}

fn offsets(lengths: &[i64]) -> Vec<i32> {
    let mut out = vec![0i32];
    for l in lengths {
        out.push(out[out.len() - 1] + (l * D) as i32);
    }
    out
}

fn values(seed: u32, n: usize) -> Vec<f32> {
    (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// y = softmax(scale · q kᵀ) v + r per batch over packed rows, in float64.
fn oracle(q: &[f32], k: &[f32], v: &[f32], r: &[f32]) -> Vec<f64> {
    let (oq, okv) = (offsets(&LQ), offsets(&LKV));
    let d = D as usize;
    let mut y = vec![0f64; q.len()];
    for b in 0..B as usize {
        let (q0, k0) = (oq[b] as usize, okv[b] as usize);
        for i in 0..LQ[b] as usize {
            let row = q0 + i * d;
            let scores: Vec<f64> = (0..LKV[b] as usize)
                .map(|j| {
                    let col = k0 + j * d;
                    SCALE
                        * (0..d)
                            .map(|x| q[row + x] as f64 * k[col + x] as f64)
                            .sum::<f64>()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
            for x in 0..d {
                let o: f64 = (0..LKV[b] as usize)
                    .map(|j| (scores[j] - max).exp() / sum * v[k0 + j * d + x] as f64)
                    .sum();
                y[row + x] = o + r[row + x] as f64;
            }
        }
    }
    y
}

fn buffer<T>(uid: i64, data: &mut [T]) -> DeviceBuffer {
    DeviceBuffer {
        uid,
        ptr: data.as_mut_ptr().cast::<c_void>(),
    }
}

#[test]
fn sdpa_into_a_ragged_residual_add_matches_the_float64_oracle() {
    let handle = OwnedHandle::new();
    let bytes = encode_graph(&graph());
    let (status, ids) = applicable(&handle, &bytes);
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(
        ids,
        vec![HOST_REFERENCE_ID],
        "only the host engine runs a multi-node graph"
    );

    let config = encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID));
    let context = OwnedContext::new(&handle, &config, &bytes);

    let (mut oq, mut okv) = (offsets(&LQ), offsets(&LKV));
    let (nq, nkv) = (oq[B as usize] as usize, okv[B as usize] as usize);
    let (mut q, mut k, mut v, mut r) =
        (values(1, nq), values(2, nkv), values(3, nkv), values(4, nq));
    let expected = oracle(&q, &k, &v, &r);
    let mut y = vec![f32::NAN; nq];
    let pack = [
        buffer(Q, &mut q),
        buffer(K, &mut k),
        buffer(V, &mut v),
        buffer(R, &mut r),
        buffer(Y, &mut y),
        buffer(AUX_Q, &mut oq),
        buffer(AUX_KV, &mut okv),
    ];
    // Every pointer is a live host buffer of its tensor's extent.
    let status = context.execute(&pack);
    assert_eq!(status, SUCCESS, "{}", last_error());
    for (i, (got, want)) in y.iter().zip(&expected).enumerate() {
        assert!(
            (*got as f64 - want).abs() < 1e-5,
            "y[{i}] = {got}, oracle {want}"
        );
    }

    // Without the residual bound, the execute fails naming the uid and writes nothing.
    let mut y2 = vec![f32::NAN; nq];
    let short = [
        pack[0],
        pack[1],
        pack[2],
        buffer(Y, &mut y2),
        pack[5],
        pack[6],
    ];
    let status = context.execute(&short);
    assert_ne!(status, SUCCESS);
    assert!(last_error().contains("uid 5"), "{}", last_error());
    assert!(y2.iter().all(|x| x.is_nan()));
}
