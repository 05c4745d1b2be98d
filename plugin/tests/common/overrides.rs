//! The shape-override problem shared by the override and serialization tests: fp32 ragged
//! Q/K/V/O (BSHD, H = 2, D = 8) on element-unit offsets, a dense LSE, causal, scale 0.3, built
//! for any batch and S_max, so one context compiled for [`COMPILED`] can be run at [`LARGER`]
//! and compared with a context built for [`LARGER`] directly.

#![allow(dead_code)]

use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{DataType, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes};

use super::{DeviceBuffer, HOST_REFERENCE_ID};

pub const H: i64 = 2;
pub const D: i64 = 8;
pub const Q: i64 = 1;
pub const K: i64 = 2;
pub const V: i64 = 3;
pub const O: i64 = 4;
pub const LSE: i64 = 5;
pub const Q_OFF: i64 = 10;
pub const KV_OFF: i64 = 11;
pub const NAN: u32 = 0x7FC0_0D1E;

/// Shapes of one graph: batch, S_max of Q/O and of K/V.
#[derive(Clone, Copy)]
pub struct Shape {
    pub b: i64,
    pub sq: i64,
    pub skv: i64,
}

fn bshd(s: i64) -> (Vec<i64>, Vec<i64>) {
    (vec![0, s, H, D], vec![s * H * D, H * D, D, 1])
}

/// Every (uid, dims, strides) of the graph for `shape`: what an override lists.
pub fn tensor_shapes(shape: Shape) -> Vec<(i64, Vec<i64>, Vec<i64>)> {
    let ragged = |uid, s| {
        let (mut dims, strides) = bshd(s);
        dims[0] = shape.b;
        (uid, dims, strides)
    };
    vec![
        ragged(Q, shape.sq),
        ragged(K, shape.skv),
        ragged(V, shape.skv),
        ragged(O, shape.sq),
        (
            LSE,
            vec![shape.b, H, shape.sq, 1],
            vec![H * shape.sq, shape.sq, 1, 1],
        ),
        (Q_OFF, vec![shape.b + 1, 1, 1, 1], vec![1, 1, 1, 1]),
        (KV_OFF, vec![shape.b + 1, 1, 1, 1], vec![1, 1, 1, 1]),
    ]
}

pub fn graph(shape: Shape, override_enabled: bool) -> Vec<u8> {
    let mut sdpa = SdpaAttributes::new(Q, K, V, O);
    sdpa.stats_tensor_uid = Some(LSE);
    sdpa.generate_stats = Some(true);
    sdpa.attn_scale_value = Some(0.3);
    sdpa.causal_mask = true;
    let mut g = Graph::new("override_and_serialization").set_data_types(
        DataType::Float,
        DataType::Float,
        DataType::Float,
    );
    for (uid, dims, strides) in tensor_shapes(shape) {
        let index = uid == Q_OFF || uid == KV_OFF;
        let mut t = TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("t{uid}"))
            .set_data_type(if index {
                DataType::Int32
            } else {
                DataType::Float
            })
            .set_dims(dims)
            .set_strides(strides);
        if matches!(uid, Q | O) {
            t = t.set_ragged_offset_uid(Q_OFF);
        }
        if matches!(uid, K | V) {
            t = t.set_ragged_offset_uid(KV_OFF);
        }
        g = g.add_tensor(t);
    }
    g.is_override_shape_enabled = override_enabled;
    encode_graph(&g.add_node(Node::sdpa("sdpa", sdpa)))
}

pub fn config() -> Vec<u8> {
    encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID))
}

/// One call's tensors: tokens per batch (each within the shape's S_max), element offsets.
pub struct Call {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub q_off: Vec<i32>,
    pub kv_off: Vec<i32>,
    pub o: Vec<f32>,
    pub lse: Vec<f32>,
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 2001)
        .map(|x| x as f32 / 1000.0 - 1.0)
        .collect()
}

impl Call {
    pub fn new(shape: Shape, q_tokens: &[i32], kv_tokens: &[i32]) -> Call {
        let offsets = |tokens: &[i32]| {
            let mut out = vec![0];
            for t in tokens {
                out.push(out[out.len() - 1] + t * (H * D) as i32);
            }
            out
        };
        let (q_off, kv_off) = (offsets(q_tokens), offsets(kv_tokens));
        let (nq, nkv) = (
            q_off[q_tokens.len()] as usize,
            kv_off[kv_tokens.len()] as usize,
        );
        Call {
            q: values(nq, 1),
            k: values(nkv, 2),
            v: values(nkv, 3),
            o: vec![f32::from_bits(NAN); nq],
            lse: vec![f32::from_bits(NAN); (shape.b * H * shape.sq) as usize],
            q_off,
            kv_off,
        }
    }

    pub fn pack(&mut self) -> Vec<DeviceBuffer> {
        let entry = |uid, ptr: *const f32| DeviceBuffer {
            uid,
            ptr: ptr.cast_mut().cast(),
        };
        vec![
            entry(Q, self.q.as_ptr()),
            entry(K, self.k.as_ptr()),
            entry(V, self.v.as_ptr()),
            entry(O, self.o.as_mut_ptr()),
            entry(LSE, self.lse.as_mut_ptr()),
            DeviceBuffer {
                uid: Q_OFF,
                ptr: self.q_off.as_ptr().cast_mut().cast(),
            },
            DeviceBuffer {
                uid: KV_OFF,
                ptr: self.kv_off.as_ptr().cast_mut().cast(),
            },
        ]
    }

    pub fn untouched(&self) -> bool {
        self.o.iter().chain(&self.lse).all(|x| x.to_bits() == NAN)
    }

    pub fn bits(&self) -> Vec<u32> {
        self.o
            .iter()
            .chain(&self.lse)
            .map(|x| x.to_bits())
            .collect()
    }
}

pub const COMPILED: Shape = Shape {
    b: 3,
    sq: 4,
    skv: 5,
};
pub const LARGER: Shape = Shape {
    b: 5,
    sq: 7,
    skv: 6,
};

pub fn compiled_call() -> Call {
    Call::new(COMPILED, &[4, 0, 2], &[5, 3, 1])
}

pub fn larger_call() -> Call {
    Call::new(LARGER, &[7, 1, 0, 3, 6], &[6, 2, 4, 0, 5])
}
