//! Serving graphs (kernels/core/paged-kv-and-sinks.md): paged K/V caches in prefill and decode,
//! and attention sinks on paged and non-paged graphs, as upstream's paged bundles write them
//! (packed Q/O `[1, H_q, T, D]` over token-major strides, token-major pools
//! `[P, H_kv, ps, D]`, page tables `[B, MP]`, lengths `[B]`). The conformance suite and the
//! shim's tests share them; every value a case pins (lengths, tables, sinks) is here.

use std::sync::Arc;

use ragged_core::DenseTensor;
use ragged_schema::model::{
    DataType, DiagonalAlignment, Graph, Node, SdpaAttributes, TensorAttributes,
};

use crate::HostError;
use crate::harness::PreSuppliedInputs;

/// Uids of a serving graph.
pub mod uid {
    pub const Q: i64 = 1;
    pub const K: i64 = 2;
    pub const V: i64 = 3;
    pub const O: i64 = 4;
    pub const STATS: i64 = 5;
    pub const PAGE_TABLE_K: i64 = 6;
    pub const PAGE_TABLE_V: i64 = 7;
    pub const SEQ_LEN_Q: i64 = 8;
    pub const SEQ_LEN_KV: i64 = 9;
    pub const SINK: i64 = 10;
}

/// One serving case.
#[derive(Debug, Clone)]
pub struct ServingCase {
    pub name: &'static str,
    pub io_type: DataType,
    pub heads_q: i64,
    pub heads_kv: i64,
    pub head_dim: i64,
    pub len_q: Vec<i64>,
    pub len_kv: Vec<i64>,
    /// Paged K/V with this page size; `None`: dense `[B, H, S, D]` Q/K/V/O with the lengths.
    pub page_size: Option<i64>,
    pub bottom_right_causal: bool,
    pub sinks: bool,
    pub stats: bool,
}

/// Page tables hold this many spare columns past the longest sequence, left at -1 (never read).
const SPARE_COLUMNS: i64 = 1;

impl ServingCase {
    fn batch(&self) -> i64 {
        self.len_q.len() as i64
    }

    fn columns(&self, page_size: i64) -> i64 {
        self.len_kv
            .iter()
            .map(|&l| (l + page_size - 1) / page_size)
            .max()
            .unwrap_or(0)
            + SPARE_COLUMNS
    }

    /// Pages the pool holds: every page a sequence uses, plus two never referenced.
    fn pages(&self, page_size: i64) -> i64 {
        self.len_kv
            .iter()
            .map(|&l| (l + page_size - 1) / page_size)
            .sum::<i64>()
            + 2
    }

    pub fn graph(&self) -> Graph {
        let (b, hq, hkv, d) = (self.batch(), self.heads_q, self.heads_kv, self.head_dim);
        let tensor = |uid: i64, name: &str, dims: Vec<i64>, strides: Vec<i64>, t: DataType| {
            TensorAttributes::new()
                .set_uid(uid)
                .set_name(name)
                .set_data_type(t)
                .set_strides(strides)
                .set_dims(dims)
        };
        let io = self.io_type;
        let mut graph = Graph::new(self.name).set_data_types(io, DataType::Float, DataType::Float);
        let mut sdpa = SdpaAttributes::new(uid::Q, uid::K, uid::V, uid::O);
        sdpa.attn_scale_value = Some(1.0 / (d as f32).sqrt());
        if self.bottom_right_causal {
            sdpa.right_bound = Some(0);
            sdpa.diagonal_alignment = DiagonalAlignment::BottomRight;
        }
        let lens = |uid, name| tensor(uid, name, vec![b], vec![1], DataType::Int32);
        graph = graph
            .add_tensor(lens(uid::SEQ_LEN_Q, "seq_len_q"))
            .add_tensor(lens(uid::SEQ_LEN_KV, "seq_len_kv"));
        sdpa.seq_len_q_tensor_uid = Some(uid::SEQ_LEN_Q);
        sdpa.seq_len_kv_tensor_uid = Some(uid::SEQ_LEN_KV);
        let (q_dims, q_strides, l_dims, l_strides) = match self.page_size {
            Some(ps) => {
                let t = self.len_q.iter().sum::<i64>() + 1;
                let (pages, mp) = (self.pages(ps), self.columns(ps));
                let pool = vec![pages, hkv, ps, d];
                let pool_strides = vec![ps * hkv * d, d, hkv * d, 1];
                graph = graph
                    .add_tensor(tensor(
                        uid::K,
                        "k_pool",
                        pool.clone(),
                        pool_strides.clone(),
                        io,
                    ))
                    .add_tensor(tensor(uid::V, "v_pool", pool, pool_strides, io));
                for (uid, name) in [
                    (uid::PAGE_TABLE_K, "page_table_k"),
                    (uid::PAGE_TABLE_V, "page_table_v"),
                ] {
                    graph = graph.add_tensor(tensor(
                        uid,
                        name,
                        vec![b, mp],
                        vec![mp, 1],
                        DataType::Int32,
                    ));
                }
                sdpa.page_table_k_tensor_uid = Some(uid::PAGE_TABLE_K);
                sdpa.page_table_v_tensor_uid = Some(uid::PAGE_TABLE_V);
                sdpa.max_seq_len_kv = i32::try_from(mp * ps).ok();
                (
                    vec![1, hq, t, d],
                    vec![t * hq * d, d, hq * d, 1],
                    vec![1, hq, t, 1],
                    vec![hq * t, t, 1, 1],
                )
            }
            None => {
                let s_q = self.len_q.iter().copied().max().unwrap_or(0).max(1);
                let s_kv = self.len_kv.iter().copied().max().unwrap_or(0).max(1);
                let kv = vec![b, hkv, s_kv, d];
                let kv_strides = TensorAttributes::packed_strides(&kv);
                graph = graph
                    .add_tensor(tensor(uid::K, "k", kv.clone(), kv_strides.clone(), io))
                    .add_tensor(tensor(uid::V, "v", kv, kv_strides, io));
                let q = vec![b, hq, s_q, d];
                let l = vec![b, hq, s_q, 1];
                let (qs, ls) = (
                    TensorAttributes::packed_strides(&q),
                    TensorAttributes::packed_strides(&l),
                );
                (q, qs, l, ls)
            }
        };
        graph = graph
            .add_tensor(tensor(uid::Q, "q", q_dims.clone(), q_strides.clone(), io))
            .add_tensor(tensor(uid::O, "o", q_dims, q_strides, io));
        if self.stats {
            graph = graph.add_tensor(tensor(
                uid::STATS,
                "stats",
                l_dims,
                l_strides,
                DataType::Float,
            ));
            sdpa.stats_tensor_uid = Some(uid::STATS);
        }
        if self.sinks {
            graph = graph.add_tensor(tensor(
                uid::SINK,
                "sink",
                vec![hq],
                vec![1],
                DataType::Float,
            ));
            sdpa.sink_token_tensor_uid = Some(uid::SINK);
        }
        graph.add_node(Node::sdpa("sdpa", sdpa).set_compute_data_type(DataType::Float))
    }

    /// The page tables (sequence pages shuffled over the pool by `p → (5·p + 3) mod P`, -1 in
    /// the columns a sequence does not read), lengths and sink logits.
    pub fn pre_supplied(&self) -> Result<PreSuppliedInputs, HostError> {
        let b = self.batch();
        let ints =
            |values: Vec<i32>, dims: Vec<i64>| -> Result<Arc<dyn ragged_core::Tensor>, HostError> {
                let strides = TensorAttributes::packed_strides(&dims);
                DenseTensor::from_vec(values, dims, strides)
                    .map(|t| Arc::new(t) as Arc<dyn ragged_core::Tensor>)
                    .map_err(|e| HostError::Harness(format!("serving case {}: {e}", self.name)))
            };
        let narrow = |v: &[i64]| v.iter().map(|&x| x as i32).collect::<Vec<i32>>();
        let mut pre = PreSuppliedInputs::new();
        pre.insert(uid::SEQ_LEN_Q, ints(narrow(&self.len_q), vec![b])?);
        pre.insert(uid::SEQ_LEN_KV, ints(narrow(&self.len_kv), vec![b])?);
        if let Some(ps) = self.page_size {
            let (pages, mp) = (self.pages(ps), self.columns(ps));
            if pages % 5 == 0 {
                return Err(HostError::Harness(format!(
                    "serving case {}: {pages} pages; the shuffle needs a count coprime with 5",
                    self.name
                )));
            }
            for (uid, shift) in [(uid::PAGE_TABLE_K, 3), (uid::PAGE_TABLE_V, 1)] {
                let mut table = vec![-1i32; (b * mp) as usize];
                let mut next = 0;
                for (seq, &len) in self.len_kv.iter().enumerate() {
                    for i in 0..(len + ps - 1) / ps {
                        table[seq * mp as usize + i as usize] = ((5 * next + shift) % pages) as i32;
                        next += 1;
                    }
                }
                pre.insert(uid, ints(table, vec![b, mp])?);
            }
        }
        if self.sinks {
            let logits: Vec<f32> = (0..self.heads_q)
                .map(|h| [0.75, -1.5, 2.5, -40.0][h as usize % 4])
                .collect();
            let t = DenseTensor::from_vec(logits, vec![self.heads_q], vec![1])
                .map_err(|e| HostError::Harness(format!("serving case {}: {e}", self.name)))?;
            pre.insert(uid::SINK, Arc::new(t));
        }
        Ok(pre)
    }
}

/// The cases: paged prefill and decode (partial pages, a one-key context, GQA), with and without
/// sinks, and sinks on a non-paged graph. bf16 at D = 64, page size 16: shapes every GPU engine
/// of the project compiles.
pub fn cases() -> Vec<ServingCase> {
    let base = ServingCase {
        name: "paged_prefill",
        io_type: DataType::BFloat16,
        heads_q: 4,
        heads_kv: 2,
        head_dim: 64,
        len_q: vec![7, 16, 3],
        len_kv: vec![7, 40, 19],
        page_size: Some(16),
        bottom_right_causal: true,
        sinks: false,
        stats: true,
    };
    vec![
        base.clone(),
        ServingCase {
            name: "paged_decode",
            len_q: vec![1, 1, 1, 1],
            len_kv: vec![33, 1, 64, 17],
            ..base.clone()
        },
        ServingCase {
            name: "paged_decode_sinks",
            len_q: vec![1, 1, 1],
            len_kv: vec![50, 16, 2],
            sinks: true,
            ..base.clone()
        },
        ServingCase {
            name: "paged_prefill_sinks_no_mask",
            bottom_right_causal: false,
            sinks: true,
            stats: false,
            ..base.clone()
        },
        ServingCase {
            name: "dense_sinks",
            len_q: vec![5, 2],
            len_kv: vec![9, 0],
            page_size: None,
            sinks: true,
            ..base
        },
    ]
}
