//! SDPA graphs the suites build: a ragged forward described by per-batch token counts (the
//! case list of the numeric suite), and the eight graphs G0–G7 of versioning.md §7.
//!
//! Ragged tensors follow the project rule of ragged-sdpa.md §1: dims `[B, S_max, H, D]`, packed
//! strides, offsets in elements (multiplier 1), one `[B+1, 1, 1, 1]` aux per primary.

use ragged_schema::model::{
    DataType, DiagonalAlignment, Graph, Node, SdpaAttributes, TensorAttributes,
};

/// Mask of a case (schema.md §6.1 spellings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mask {
    None,
    CausalTopLeft,
    CausalBottomRight,
}

/// Uids the builders use; fixed so that input directories and reports are stable.
pub mod uid {
    pub const Q: i64 = 1;
    pub const K: i64 = 2;
    pub const V: i64 = 3;
    pub const O: i64 = 4;
    pub const OFFSET_Q: i64 = 5;
    pub const OFFSET_KV: i64 = 6;
    /// Used only when aux tensors are not shared.
    pub const OFFSET_K: i64 = 7;
    pub const OFFSET_O: i64 = 8;
    pub const STATS: i64 = 9;
    pub const SEQ_LEN_Q: i64 = 10;
    pub const SEQ_LEN_KV: i64 = 11;
    pub const SCALE: i64 = 12;
    /// The FP8 scalars and amax outputs (kernels/core/fp8-attention.md §1).
    pub const DESCALE_Q: i64 = 20;
    pub const DESCALE_K: i64 = 21;
    pub const DESCALE_V: i64 = 22;
    pub const DESCALE_S: i64 = 23;
    pub const SCALE_S: i64 = 24;
    pub const SCALE_O: i64 = 25;
    pub const AMAX_S: i64 = 26;
    pub const AMAX_O: i64 = 27;
}

/// The FP8 side of a case (kernels/core/fp8-attention.md §1): Q, K and V hold codes of `input`,
/// O keeps the spec's `io_type` (an FP8 format, or FLOAT/HALF/BFLOAT16).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fp8Spec {
    pub input: DataType,
    /// cuDNN's shape: `scale_s`/`descale_s` (P quantized) and both amax outputs. Without it,
    /// upstream's: `descale_q/k/v` only. `scale_o` comes with an FP8 O either way.
    pub full: bool,
}

/// A ragged SDPA forward: per-batch physical extents (tokens), optional valid lengths
/// (configuration 2 of ragged-sdpa.md §2), head counts, mask and data types.
#[derive(Debug, Clone, PartialEq)]
pub struct RaggedSdpaSpec {
    pub name: String,
    pub io_type: DataType,
    pub heads_q: i64,
    pub heads_kv: i64,
    pub head_dim: i64,
    /// Physical rows of each batch in Q/O.
    pub extents_q: Vec<i64>,
    /// Physical rows of each batch in K/V.
    pub extents_kv: Vec<i64>,
    /// `seq_len_q` values (configuration 2), `None` for packed only.
    pub seq_len_q: Option<Vec<i64>>,
    pub seq_len_kv: Option<Vec<i64>>,
    /// INT32 or INT64 for offsets and seq_lens.
    pub index_type: DataType,
    /// Q/O share one aux and K/V another (upstream's usual layout); otherwise four auxes.
    pub shared_aux: bool,
    pub mask: Mask,
    pub stats: bool,
    /// Ragged Q/K/V/O written in cuDNN's `[B, H, S_max, D]` dims order over the same BSHD
    /// memory (ragged-sdpa.md §1: upstream writes both), instead of `[B, S_max, H, D]`.
    pub bhsd_dims: bool,
    /// An FP8 forward; its scalars are `[1, 1, 1, 1]` FLOAT tensors bound at execute.
    pub fp8: Option<Fp8Spec>,
}

impl RaggedSdpaSpec {
    /// A packed bf16 case with D = 64 (a head dim every engine of the project compiles), an
    /// explicit scale of 1/√D and shared aux tensors.
    pub fn packed(name: &str, extents_q: &[i64], extents_kv: &[i64]) -> RaggedSdpaSpec {
        RaggedSdpaSpec {
            name: name.to_owned(),
            io_type: DataType::BFloat16,
            heads_q: 2,
            heads_kv: 2,
            head_dim: 64,
            extents_q: extents_q.to_vec(),
            extents_kv: extents_kv.to_vec(),
            seq_len_q: None,
            seq_len_kv: None,
            index_type: DataType::Int32,
            shared_aux: true,
            mask: Mask::None,
            stats: true,
            bhsd_dims: false,
            fp8: None,
        }
    }

    pub fn batch(&self) -> i64 {
        self.extents_q.len() as i64
    }

    pub fn s_max_q(&self) -> i64 {
        self.extents_q.iter().copied().max().unwrap_or(0).max(1)
    }

    pub fn s_max_kv(&self) -> i64 {
        self.extents_kv.iter().copied().max().unwrap_or(0).max(1)
    }

    /// `ragged_offset` contents, in elements, for a primary with `heads` heads.
    pub fn offsets(extents: &[i64], heads: i64, head_dim: i64) -> Vec<i64> {
        let row = heads * head_dim;
        let mut acc = 0;
        let mut out = vec![0];
        for e in extents {
            acc += e * row;
            out.push(acc);
        }
        out
    }

    pub fn offsets_q(&self) -> Vec<i64> {
        Self::offsets(&self.extents_q, self.heads_q, self.head_dim)
    }

    pub fn offsets_kv(&self) -> Vec<i64> {
        Self::offsets(&self.extents_kv, self.heads_kv, self.head_dim)
    }

    /// The scale the suites always set explicitly (ragged-sdpa.md §8).
    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// The aux uid of each primary: `(q, k, v, o)`.
    pub fn aux_uids(&self) -> (i64, i64, i64, i64) {
        if self.shared_aux {
            (uid::OFFSET_Q, uid::OFFSET_KV, uid::OFFSET_KV, uid::OFFSET_Q)
        } else {
            (uid::OFFSET_Q, uid::OFFSET_K, uid::OFFSET_KV, uid::OFFSET_O)
        }
    }

    pub fn graph(&self) -> Graph {
        let b = self.batch();
        let (hq, hkv, d) = (self.heads_q, self.heads_kv, self.head_dim);
        let input_type = self.fp8.map_or(self.io_type, |f| f.input);
        let primary = |uid: i64, name: &str, s_max: i64, heads: i64, aux: i64| {
            let mut dims = vec![b, s_max, heads, d];
            let mut strides = TensorAttributes::packed_strides(&dims);
            if self.bhsd_dims {
                dims.swap(1, 2);
                strides.swap(1, 2);
            }
            TensorAttributes::new()
                .set_uid(uid)
                .set_name(name)
                .set_data_type(if uid == uid::O {
                    self.io_type
                } else {
                    input_type
                })
                .set_strides(strides)
                .set_dims(dims)
                .set_ragged_offset_uid(aux)
        };
        let index = |uid: i64, name: &str, len: i64| {
            let dims = vec![len, 1, 1, 1];
            TensorAttributes::new()
                .set_uid(uid)
                .set_name(name)
                .set_data_type(self.index_type)
                .set_strides(TensorAttributes::packed_strides(&dims))
                .set_dims(dims)
        };
        let (aq, ak, av, ao) = self.aux_uids();
        let mut graph = Graph::new(self.name.clone()).set_data_types(
            input_type,
            DataType::Float,
            DataType::Float,
        );
        let mut aux = vec![aq, ak, av, ao];
        aux.sort_unstable();
        aux.dedup();
        for a in aux {
            graph = graph.add_tensor(index(a, &format!("ragged_offset_{a}"), b + 1));
        }
        graph = graph
            .add_tensor(primary(uid::Q, "q", self.s_max_q(), hq, aq))
            .add_tensor(primary(uid::K, "k", self.s_max_kv(), hkv, ak))
            .add_tensor(primary(uid::V, "v", self.s_max_kv(), hkv, av))
            .add_tensor(primary(uid::O, "o", self.s_max_q(), hq, ao));

        let mut sdpa = SdpaAttributes::new(uid::Q, uid::K, uid::V, uid::O);
        sdpa.attn_scale_value = Some(self.scale());
        match self.mask {
            Mask::None => {}
            Mask::CausalTopLeft => {
                sdpa.right_bound = Some(0);
                sdpa.diagonal_alignment = DiagonalAlignment::TopLeft;
            }
            Mask::CausalBottomRight => {
                sdpa.right_bound = Some(0);
                sdpa.diagonal_alignment = DiagonalAlignment::BottomRight;
            }
        }
        if self.stats {
            let dims = vec![b, hq, self.s_max_q(), 1];
            graph = graph.add_tensor(
                TensorAttributes::new()
                    .set_uid(uid::STATS)
                    .set_name("stats")
                    .set_data_type(DataType::Float)
                    .set_strides(TensorAttributes::packed_strides(&dims))
                    .set_dims(dims),
            );
            sdpa.stats_tensor_uid = Some(uid::STATS);
            sdpa.generate_stats = Some(true);
        }
        if self.seq_len_q.is_some() {
            graph = graph.add_tensor(index(uid::SEQ_LEN_Q, "seq_len_q", b));
            sdpa.seq_len_q_tensor_uid = Some(uid::SEQ_LEN_Q);
        }
        if self.seq_len_kv.is_some() {
            graph = graph.add_tensor(index(uid::SEQ_LEN_KV, "seq_len_kv", b));
            sdpa.seq_len_kv_tensor_uid = Some(uid::SEQ_LEN_KV);
        }
        if let Some(fp8) = self.fp8 {
            graph = self.add_fp8(graph, &mut sdpa, fp8);
        }
        graph.is_ragged_tensor_enabled = true;
        graph.add_node(Node::sdpa("sdpa", sdpa).set_compute_data_type(DataType::Float))
    }

    /// The FP8 scalars and amax outputs of `fp8`, as `[1, 1, 1, 1]` FLOAT tensors.
    fn add_fp8(&self, mut graph: Graph, sdpa: &mut SdpaAttributes, fp8: Fp8Spec) -> Graph {
        let fp8_output = !matches!(
            self.io_type,
            DataType::Float | DataType::Half | DataType::BFloat16
        );
        let mut scalars = vec![
            (uid::DESCALE_Q, "descale_q"),
            (uid::DESCALE_K, "descale_k"),
            (uid::DESCALE_V, "descale_v"),
        ];
        sdpa.descale_q_tensor_uid = Some(uid::DESCALE_Q);
        sdpa.descale_k_tensor_uid = Some(uid::DESCALE_K);
        sdpa.descale_v_tensor_uid = Some(uid::DESCALE_V);
        if fp8.full {
            scalars.extend([
                (uid::DESCALE_S, "descale_s"),
                (uid::SCALE_S, "scale_s"),
                (uid::AMAX_S, "amax_s"),
                (uid::AMAX_O, "amax_o"),
            ]);
            sdpa.descale_s_tensor_uid = Some(uid::DESCALE_S);
            sdpa.scale_s_tensor_uid = Some(uid::SCALE_S);
            sdpa.amax_s_tensor_uid = Some(uid::AMAX_S);
            sdpa.amax_o_tensor_uid = Some(uid::AMAX_O);
        }
        if fp8_output {
            scalars.push((uid::SCALE_O, "scale_o"));
            sdpa.scale_o_tensor_uid = Some(uid::SCALE_O);
        }
        scalars.sort_unstable();
        for (uid, name) in scalars {
            let dims = vec![1, 1, 1, 1];
            graph = graph.add_tensor(
                TensorAttributes::new()
                    .set_uid(uid)
                    .set_name(name)
                    .set_data_type(DataType::Float)
                    .set_strides(TensorAttributes::packed_strides(&dims))
                    .set_dims(dims),
            );
        }
        graph
    }
}

/// A dense SDPA graph `[B, H, S, D]` (hipDNN's usual logical order).
fn dense_sdpa(name: &str) -> Graph {
    let tensor = |uid: i64, name: &str| {
        let dims = vec![2, 2, 4, 16];
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::BFloat16)
            .set_strides(TensorAttributes::packed_strides(&dims))
            .set_dims(dims)
    };
    let mut sdpa = SdpaAttributes::new(uid::Q, uid::K, uid::V, uid::O);
    sdpa.attn_scale_value = Some(0.25);
    Graph::new(name)
        .set_data_types(DataType::BFloat16, DataType::Float, DataType::Float)
        .add_tensor(tensor(uid::Q, "q"))
        .add_tensor(tensor(uid::K, "k"))
        .add_tensor(tensor(uid::V, "v"))
        .add_tensor(tensor(uid::O, "o"))
        .add_node(Node::sdpa("sdpa", sdpa).set_compute_data_type(DataType::Float))
}

/// Replaces the attribute scale with a runtime pass-by-value scalar tensor (RFC 0016), uid
/// [`uid::SCALE`], FLOAT, dims `[1, 1, 1, 1]`.
pub fn with_pass_by_value_scale(mut graph: Graph) -> Graph {
    let dims = vec![1, 1, 1, 1];
    graph.tensors.push(
        TensorAttributes::new()
            .set_uid(uid::SCALE)
            .set_name("attn_scale")
            .set_data_type(DataType::Float)
            .set_strides(TensorAttributes::packed_strides(&dims))
            .set_dims(dims)
            .set_is_runtime_pass_by_value(true),
    );
    for node in &mut graph.nodes {
        if let ragged_schema::model::NodeAttributes::Sdpa(sdpa) = &mut node.attributes {
            sdpa.scale_tensor_uid = Some(uid::SCALE);
            sdpa.attn_scale_value = None;
        }
    }
    graph
}

fn small_ragged(name: &str) -> Graph {
    RaggedSdpaSpec::packed(name, &[2, 3], &[4, 1]).graph()
}

/// One column of the decision table.
pub struct GatingGraph {
    pub id: &'static str,
    pub description: &'static str,
    pub graph: Graph,
}

/// G0–G7 of versioning.md §7, in order.
pub fn decision_table_graphs() -> Vec<GatingGraph> {
    let g3 = {
        let mut g = dense_sdpa("g3_alignment_32");
        g.tensors[0].alignment = 32;
        g
    };
    let g4 = {
        let mut g = small_ragged("g4_ragged_unflagged");
        g.is_ragged_tensor_enabled = false;
        g
    };
    let g5 = {
        let mut g = dense_sdpa("g5_flag_only");
        g.is_ragged_tensor_enabled = true;
        g
    };
    let g7 = {
        let mut g = small_ragged("g7_ragged_override");
        g.is_override_shape_enabled = true;
        g
    };
    vec![
        GatingGraph {
            id: "G0",
            description: "dense SDPA, no feature",
            graph: dense_sdpa("g0_dense"),
        },
        GatingGraph {
            id: "G1",
            description: "is_override_shape_enabled",
            graph: Graph {
                is_override_shape_enabled: true,
                ..dense_sdpa("g1_override")
            },
        },
        GatingGraph {
            id: "G2",
            description: "runtime pass-by-value scale",
            graph: with_pass_by_value_scale(dense_sdpa("g2_pass_by_value")),
        },
        GatingGraph {
            id: "G3",
            description: "one tensor with alignment 32",
            graph: g3,
        },
        GatingGraph {
            id: "G4",
            description: "ragged tensors, flag absent (upstream-produced)",
            graph: g4,
        },
        GatingGraph {
            id: "G5",
            description: "is_ragged_tensor_enabled, no ragged tensor",
            graph: g5,
        },
        GatingGraph {
            id: "G6",
            description: "ragged + flag + pass-by-value scale",
            graph: with_pass_by_value_scale(small_ragged("g6_ragged_pass_by_value")),
        },
        GatingGraph {
            id: "G7",
            description: "ragged + override flag",
            graph: g7,
        },
    ]
}

/// The graph of `examples/ragged_sdpa_fp8.json`: the bf16 example's batch (4 sequences, one with
/// no queries, padded keys), GQA 8:2, causal bottom-right, D 64, in FP8_E4M3 with every scale of
/// fp8-attention.md §1.3, an FP8_E4M3 O, the LSE and both amax outputs.
pub fn fp8_example() -> RaggedSdpaSpec {
    RaggedSdpaSpec {
        io_type: DataType::Fp8E4m3,
        heads_q: 8,
        heads_kv: 2,
        seq_len_kv: Some(vec![5, 2, 12, 6]),
        mask: Mask::CausalBottomRight,
        fp8: Some(Fp8Spec {
            input: DataType::Fp8E4m3,
            full: true,
        }),
        ..RaggedSdpaSpec::packed(
            "example_ragged_sdpa_fp8_e4m3",
            &[3, 0, 9, 6],
            &[5, 4, 12, 6],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_version::ApiVersion;

    #[test]
    fn offsets_are_cumulative_elements() {
        assert_eq!(
            RaggedSdpaSpec::offsets(&[2, 0, 3], 2, 16),
            vec![0, 64, 64, 160]
        );
    }

    #[test]
    fn decision_graphs_require_the_versions_of_versioning_7() {
        let required: Vec<String> = decision_table_graphs()
            .iter()
            .map(|g| ApiVersion::required_by(&g.graph).0.to_string())
            .collect();
        assert_eq!(
            required,
            [
                "1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.3.0", "1.3.0", "1.3.0", "1.3.0"
            ]
        );
        let overrides: Vec<bool> = decision_table_graphs()
            .iter()
            .map(|g| g.graph.is_override_shape_enabled)
            .collect();
        assert_eq!(
            overrides,
            [false, true, false, false, false, false, false, true]
        );
    }

    #[test]
    fn ragged_graph_passes_schema_validation() {
        let spec = RaggedSdpaSpec::packed("v", &[2, 0, 3], &[4, 1, 2]);
        let graph = spec.graph();
        if let Err(e) = graph.validate() {
            panic!("{e}");
        }
    }
}
