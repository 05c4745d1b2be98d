//! A small fp32 ragged SDPA problem exercising every execute path the host engine has: GQA,
//! ragged Q/K/V/O with int32 offsets, int64 seq_lens (configuration 2), a sliding causal window,
//! a dense LSE output and a runtime pass-by-value scale. Its expected outputs come from calling
//! the CPU reference (ragged-reference) directly, without the plugin.

#![allow(dead_code)]

use std::ffi::c_void;
use std::sync::Arc;

use ragged_core::tensor::BSHD_SEQ_AXIS;
use ragged_core::{
    DenseTensor, DiagonalAlignment, HostData, HostDataMut, MaskBand, ShallowRaggedTensor,
    ShallowRaggedTensorMut, ShallowTensorMut, Tensor,
};
use ragged_reference::{SdpaParams, sdpa_forward};
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{DataType, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes};

use super::{DeviceBuffer, HOST_REFERENCE_ID};

pub const B: i64 = 3;
pub const HQ: i64 = 4;
pub const HKV: i64 = 2;
pub const D: i64 = 8;
pub const SQ: i64 = 5;
pub const SKV: i64 = 6;
pub const LEFT: i64 = 3;

pub const Q: i64 = 1;
pub const K: i64 = 2;
pub const V: i64 = 3;
pub const O: i64 = 4;
pub const LSE: i64 = 5;
pub const Q_OFFSETS: i64 = 10;
pub const KV_OFFSETS: i64 = 11;
pub const SEQ_Q: i64 = 12;
pub const SEQ_KV: i64 = 13;
pub const SCALE: i64 = 14;

/// NaN with a payload no computation produces: unwritten positions must keep exactly this.
pub const SENTINEL: u32 = 0x7FC0_0D1E;

/// Per-batch token counts of one execute's packing.
#[derive(Clone, Copy, Debug)]
pub struct Packing {
    pub q_tokens: [i32; 3],
    pub kv_tokens: [i32; 3],
    pub seq_q: [i64; 3],
    pub seq_kv: [i64; 3],
}

/// Two packings of the same graph: each execute may bring different offsets.
pub const PACKING_A: Packing = Packing {
    q_tokens: [3, 0, 5],
    kv_tokens: [4, 2, 6],
    seq_q: [2, 0, 5],
    seq_kv: [4, 1, 6],
};
pub const PACKING_B: Packing = Packing {
    q_tokens: [5, 1, 2],
    kv_tokens: [1, 6, 3],
    seq_q: [5, 1, 1],
    seq_kv: [0, 6, 3],
};

fn offsets(tokens: [i32; 3], row: i32) -> Vec<i32> {
    let mut out = vec![0];
    for t in tokens {
        out.push(out[out.len() - 1] + t * row);
    }
    out
}

/// Deterministic values in [−1, 1] (a 64-bit LCG; no dependency on a random crate's stream).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub fn graph() -> Graph {
    let ragged = |uid, name: &str, s, h, aux| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Float)
            .set_dims(vec![B, s, h, D])
            .set_strides(vec![s * h * D, h * D, D, 1])
            .set_ragged_offset_uid(aux)
    };
    let index = |uid, name: &str, n, data_type| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(data_type)
            .set_dims(vec![n, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let mut sdpa = SdpaAttributes::new(Q, K, V, O);
    sdpa.stats_tensor_uid = Some(LSE);
    sdpa.generate_stats = Some(true);
    sdpa.seq_len_q_tensor_uid = Some(SEQ_Q);
    sdpa.seq_len_kv_tensor_uid = Some(SEQ_KV);
    sdpa.padding_mask = true;
    sdpa.scale_tensor_uid = Some(SCALE);
    sdpa.left_bound = Some(LEFT);
    sdpa.right_bound = Some(0);
    Graph::new("plugin_test_ragged_sdpa_f32")
        .set_data_types(DataType::Float, DataType::Float, DataType::Float)
        .add_tensor(ragged(Q, "q", SQ, HQ, Q_OFFSETS))
        .add_tensor(ragged(K, "k", SKV, HKV, KV_OFFSETS))
        .add_tensor(ragged(V, "v", SKV, HKV, KV_OFFSETS))
        .add_tensor(ragged(O, "o", SQ, HQ, Q_OFFSETS))
        .add_tensor(
            TensorAttributes::new()
                .set_uid(LSE)
                .set_name("lse")
                .set_data_type(DataType::Float)
                .set_dims(vec![B, HQ, SQ, 1])
                .set_strides(vec![HQ * SQ, SQ, 1, 1]),
        )
        .add_tensor(index(Q_OFFSETS, "q_offsets", B + 1, DataType::Int32))
        .add_tensor(index(KV_OFFSETS, "kv_offsets", B + 1, DataType::Int32))
        .add_tensor(index(SEQ_Q, "seq_q", B, DataType::Int64))
        .add_tensor(index(SEQ_KV, "seq_kv", B, DataType::Int64))
        .add_tensor(runtime_scale(SCALE))
        .add_node(Node::sdpa("sdpa", sdpa))
}

/// A float scalar scale bound at execute as a host pointer (runtime pass-by-value).
pub fn runtime_scale(uid: i64) -> TensorAttributes {
    TensorAttributes::new()
        .set_uid(uid)
        .set_name("scale")
        .set_data_type(DataType::Float)
        .set_dims(vec![1])
        .set_strides(vec![1])
        .set_is_runtime_pass_by_value(true)
}

pub fn graph_bytes() -> Vec<u8> {
    encode_graph(&graph())
}

pub fn config_bytes() -> Vec<u8> {
    encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID))
}

/// Inputs of one execute, owned; outputs are allocated per caller.
pub struct Inputs {
    pub packing: Packing,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub q_offsets: Vec<i32>,
    pub kv_offsets: Vec<i32>,
    pub seq_q: Vec<i64>,
    pub seq_kv: Vec<i64>,
    pub scale: f32,
}

impl Inputs {
    pub fn new(packing: Packing) -> Inputs {
        let q_offsets = offsets(packing.q_tokens, (HQ * D) as i32);
        let kv_offsets = offsets(packing.kv_tokens, (HKV * D) as i32);
        Inputs {
            packing,
            q: values(q_offsets[3] as usize, 1),
            k: values(kv_offsets[3] as usize, 2),
            v: values(kv_offsets[3] as usize, 3),
            q_offsets,
            kv_offsets,
            seq_q: packing.seq_q.to_vec(),
            seq_kv: packing.seq_kv.to_vec(),
            scale: 1.0 / (D as f32).sqrt(),
        }
    }

    pub fn o_len(&self) -> usize {
        self.q_offsets[3] as usize
    }

    pub fn lse_len(&self) -> usize {
        (B * HQ * SQ) as usize
    }

    /// Output buffers pre-filled with the sentinel.
    pub fn outputs(&self) -> (Vec<f32>, Vec<f32>) {
        let nan = f32::from_bits(SENTINEL);
        (vec![nan; self.o_len()], vec![nan; self.lse_len()])
    }

    /// The variant pack, as hipDNN builds it: every graph uid → its pointer.
    pub fn pack(&self, o: &mut [f32], lse: &mut [f32]) -> Vec<DeviceBuffer> {
        let input = |uid, ptr: *const c_void| DeviceBuffer {
            uid,
            ptr: ptr.cast_mut(),
        };
        vec![
            input(Q, self.q.as_ptr().cast()),
            input(K, self.k.as_ptr().cast()),
            input(V, self.v.as_ptr().cast()),
            DeviceBuffer {
                uid: O,
                ptr: o.as_mut_ptr().cast(),
            },
            DeviceBuffer {
                uid: LSE,
                ptr: lse.as_mut_ptr().cast(),
            },
            input(Q_OFFSETS, self.q_offsets.as_ptr().cast()),
            input(KV_OFFSETS, self.kv_offsets.as_ptr().cast()),
            input(SEQ_Q, self.seq_q.as_ptr().cast()),
            input(SEQ_KV, self.seq_kv.as_ptr().cast()),
            input(SCALE, (&raw const self.scale).cast()),
        ]
    }

    /// The two offsets tensors (`[B+1, 1, 1, 1]`), as the CPU reference takes them.
    pub fn offsets_tensors(&self) -> (Arc<dyn Tensor>, Arc<dyn Tensor>) {
        let aux = |v: &[i32]| -> Arc<dyn Tensor> {
            Arc::new(
                DenseTensor::from_vec(v.to_vec(), vec![B + 1, 1, 1, 1], vec![1, 1, 1, 1])
                    .expect("offsets tensor"),
            )
        };
        (aux(&self.q_offsets), aux(&self.kv_offsets))
    }

    /// The two per-batch length tensors (`[B, 1, 1, 1]`).
    pub fn seq_len_tensors(&self) -> (DenseTensor<i64>, DenseTensor<i64>) {
        let seq = |v: &[i64]| {
            DenseTensor::from_vec(v.to_vec(), vec![B, 1, 1, 1], vec![1, 1, 1, 1]).expect("seq_lens")
        };
        (seq(&self.seq_q), seq(&self.seq_kv))
    }

    /// The graph's scale and band as the CPU reference's parameters.
    pub fn params(&self) -> SdpaParams {
        SdpaParams {
            scale: self.scale,
            band: MaskBand::window(Some(LEFT), Some(0), DiagonalAlignment::TopLeft),
        }
    }

    /// O and LSE from the CPU reference, called directly.
    pub fn reference(&self) -> (Vec<f32>, Vec<f32>) {
        let (mut o, mut lse) = self.outputs();
        let (q_aux, kv_aux) = self.offsets_tensors();
        let q = ragged_input(&self.q, SQ, HQ, &q_aux);
        let k = ragged_input(&self.k, SKV, HKV, &kv_aux);
        let v = ragged_input(&self.v, SKV, HKV, &kv_aux);
        let mut o_view = o_output(&mut o, q_aux);
        let mut lse_view = lse_output(&mut lse);
        let (seq_q, seq_kv) = self.seq_len_tensors();
        sdpa_forward(
            &q,
            &k,
            &v,
            &mut o_view,
            Some(&mut lse_view),
            Some(&seq_q),
            Some(&seq_kv),
            &self.params(),
        )
        .expect("reference runs");
        drop((o_view, lse_view));
        (o, lse)
    }
}

/// A packed BSHD input view of `s` padded tokens and `h` heads over `aux`'s offsets.
pub fn ragged_input<'a>(
    data: &'a [f32],
    s: i64,
    h: i64,
    aux: &Arc<dyn Tensor>,
) -> ShallowRaggedTensor<'a> {
    ShallowRaggedTensor::new(
        HostData::F32(data),
        vec![B, s, h, D],
        vec![s * h * D, h * D, D, 1],
        BSHD_SEQ_AXIS,
        Arc::clone(aux),
        1,
    )
    .expect("ragged input")
}

/// The packed O view, addressed by Q's offsets.
pub fn o_output(data: &mut [f32], q_aux: Arc<dyn Tensor>) -> ShallowRaggedTensorMut<'_> {
    ShallowRaggedTensorMut::new(
        HostDataMut::F32(data),
        vec![B, SQ, HQ, D],
        vec![SQ * HQ * D, HQ * D, D, 1],
        BSHD_SEQ_AXIS,
        q_aux,
        1,
    )
    .expect("ragged output")
}

/// The dense `[B, H_q, S_q, 1]` LSE view.
pub fn lse_output(data: &mut [f32]) -> ShallowTensorMut<'_> {
    ShallowTensorMut::from_storage(
        HostDataMut::F32(data),
        vec![B, HQ, SQ, 1],
        vec![HQ * SQ, SQ, 1, 1],
    )
    .expect("dense LSE")
}

/// Bitwise comparison, so NaN sentinels and −∞ count too.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
