//! Writes the serialized SDPA graphs that `bench/gpu/plugin_bench.py` hands to the plugin's C ABI,
//! one per benchmark problem, so the benchmark times exactly the bytes hipDNN would pass.
//!
//! ```text
//! cargo run -p ragged-plugin --release --example emit_bench_graphs -- <dir> [--tiny]
//! ```
//!
//! For every problem `<dir>` receives `<name>.bin` (a `Graph` FlatBuffer from
//! `ragged_schema::wire::encode_graph`) and `<name>.json` (what a caller must know to bind the
//! variant pack: uids, dims, sequence lengths, offsets). `problems.json` lists the names in run
//! order, and `engine_config_<ENGINE>.bin` holds an `EngineConfig` for each engine the plugin can
//! list, since `GetWorkspaceSize` and `CreateExecutionContext` take one.
//!
//! A problem at a head dim of the backward benchmark (D_qk = D_v: 64, 96, 128, 256) also gets its training pair:
//! `<name>_fwd_lse.bin`, the same forward writing its LSE, and `<name>_bwd.bin`, the
//! `SdpaBackwardAttributes` node of that forward (`SdpaBackwardAttributes::for_forward`; a causal
//! problem also `<name>_bwd_tl.bin`, its band aligned top-left), with
//! their uids under `"backward"` in `<name>.json` (null otherwise). The LSE is ragged token-major,
//! `[B, S, H, 1]` with strides `[S·H, H, 1, 1]` over packed `f32[T, H]`, addressed by its own
//! token offsets (int32, multiplier H): the one packed LSE layout the engines accept. FA2's
//! varlen LSE is head-major `[H, T]`, which no stride set expresses when the batches differ in
//! length, so `bench/gpu/plugin_bench_bwd.py` transposes it when it feeds one engine's LSE to
//! another.
//!
//! FP8 problems (`fp8_<family>_d<D>_<mask>`, listed in `problems_fp8.json` for
//! `bench/gpu/plugin_bench_fp8.py`) are cuDNN's FP8 forward: Q, K, V and O in FP8_E4M3, the six
//! scalars (descale_q/k/v/s, scale_s, scale_o) bound as one-element FLOAT device tensors, both
//! amax outputs, no LSE — the graph cuDNN runs on Hopper, whose FP8 SDPA writes FP8 O only.
//!
//! `--tiny` writes small problems instead (a few short sequences, H = 2) that the host reference
//! engine can execute in a second: the benchmark's self-check runs them on a machine without a
//! GPU to prove the metadata and the ctypes binding before the one device run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hipdnn_provider_ragged_sdpa::engine_id::engine_name_to_id;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, DiagonalAlignment, EngineConfig, Graph, Node, SdpaAttributes, SdpaBackwardAttributes,
    TensorAttributes,
};

const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
/// Q and O share one offsets tensor, K and V another (the RFC's packed layout for self-attention).
const QO_OFFSETS: i64 = 10;
const KV_OFFSETS: i64 = 11;
/// The training pair's extra tensors: the forward's LSE, dO and the three gradients; the LSE
/// has its own offsets, in tokens.
const LSE: i64 = 5;
const DO: i64 = 6;
const DQ: i64 = 7;
const DK: i64 = 8;
const DV: i64 = 9;
const LSE_OFFSETS: i64 = 12;
/// An FP8 problem's scalars (kernels/core/fp8-attention.md §1), inputs then the two amax outputs.
const FP8_SCALARS: [(i64, &str); 6] = [
    (20, "descale_q"),
    (21, "descale_k"),
    (22, "descale_v"),
    (23, "descale_s"),
    (24, "scale_s"),
    (25, "scale_o"),
];
const AMAX_S: i64 = 26;
const AMAX_O: i64 = 27;
/// Head dims (Q/K, V/O) whose backward is benchmarked: every pair the CUDA backward runs, 64, 96 and
/// 128 on the fused kernels, 256 and Q/K 192 with V/O 128 on the mma.sync pair.
const BACKWARD_HEAD_DIMS: [(i64, i64); 5] =
    [(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)];

const ENGINES: [&str; 4] = [
    "RAGGED_SDPA_CUDA_FMHA",
    "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC",
    "RAGGED_SDPA_AITER_FMHA",
    "RAGGED_SDPA_HOST_REFERENCE",
];

/// The ragged mix of `bench/lab/fmha_dev.py` (`ragged_mix(7)`: numpy's default generator, seed 7,
/// lengths drawn from 64..=4096 until 16 384 tokens). Written out rather than re-drawn so that
/// the plugin benchmark and the direct-kernel harnesses time the same problem.
const RAGGED_MIX: [i64; 6] = [3874, 2585, 2823, 3682, 2396, 1024];

/// One benchmark problem: equal query and key lengths per sequence (self-attention).
struct Problem {
    name: String,
    family: &'static str,
    seq_lens: Vec<i64>,
    heads: i64,
    /// Head dim of Q and K.
    head_dim: i64,
    /// Head dim of V and O (192/128 is the DeepSeek-style prefill shape).
    value_dim: i64,
    causal: bool,
    /// Q, K, V and O in FP8_E4M3 with cuDNN's scalars and amax outputs (else bf16).
    fp8: bool,
}

impl Problem {
    fn batch(&self) -> i64 {
        self.seq_lens.len() as i64
    }

    fn s_max(&self) -> i64 {
        self.seq_lens.iter().copied().max().unwrap_or(0).max(1)
    }

    /// Whether the offsets count tokens (each tensor's multiplier its token stride) rather than
    /// elements: one offsets tensor serves Q and O (K and V) in elements only when their rows
    /// are the same size.
    fn token_units(&self) -> bool {
        self.value_dim != self.head_dim
    }

    /// `ragged_offset[B + 1]`: token prefix sums, times H·D when counted in elements.
    fn offsets(&self) -> Vec<i64> {
        let token_stride = if self.token_units() {
            1
        } else {
            self.heads * self.head_dim
        };
        let mut out = Vec::with_capacity(self.seq_lens.len() + 1);
        let mut tokens = 0;
        out.push(0);
        for len in &self.seq_lens {
            tokens += len;
            out.push(tokens * token_stride);
        }
        out
    }

    /// Admitted (query, key) pairs: causal keeps L(L+1)/2 per sequence.
    fn pairs(&self) -> i64 {
        self.seq_lens
            .iter()
            .map(|&l| if self.causal { l * (l + 1) / 2 } else { l * l })
            .sum()
    }

    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// Q·Kᵀ and P·V, 2 FLOPs per multiply-add each.
    fn flops(&self) -> i64 {
        2 * (self.head_dim + self.value_dim) * self.heads * self.pairs()
    }

    /// Whether the training pair is written (the benchmarked backward head dims).
    fn has_backward(&self) -> bool {
        !self.fp8 && BACKWARD_HEAD_DIMS.contains(&(self.head_dim, self.value_dim))
    }

    /// Backward FLOPs: 2.5 × the forward's (dV, dP, dQ, dK and the recomputed S: five matrix
    /// products of the forward's two), the convention of FA2's and cuDNN's benchmarks.
    fn backward_flops(&self) -> i64 {
        self.flops() / 2 * 5
    }

    fn packed(&self, uid: i64, name: &str, aux: i64, d: i64) -> TensorAttributes {
        let (b, s, h) = (self.batch(), self.s_max(), self.heads);
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(self.element_type())
            .set_dims(vec![b, s, h, d])
            .set_strides(vec![s * h * d, h * d, d, 1])
            .set_ragged_offset_uid(aux)
            .set_ragged_offset_multiplier(if self.token_units() { h * d } else { 1 })
    }

    fn element_type(&self) -> DataType {
        if self.fp8 {
            DataType::Fp8E4m3
        } else {
            DataType::BFloat16
        }
    }

    /// A one-element FLOAT tensor: an FP8 scalar or amax output.
    fn scalar_tensor(uid: i64, name: &str) -> TensorAttributes {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Float)
            .set_dims(vec![1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    }

    fn offsets_tensor(&self, uid: i64, name: &str) -> TensorAttributes {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Int32)
            .set_dims(vec![self.batch() + 1, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    }

    /// The packed token-major LSE, `f32[T, H]` (see the module docs).
    fn lse_tensor(&self) -> TensorAttributes {
        let (b, s, h) = (self.batch(), self.s_max(), self.heads);
        TensorAttributes::new()
            .set_uid(LSE)
            .set_name("lse")
            .set_data_type(DataType::Float)
            .set_dims(vec![b, s, h, 1])
            .set_strides(vec![s * h, h, 1, 1])
            .set_ragged_offset_uid(LSE_OFFSETS)
            .set_ragged_offset_multiplier(h)
    }

    /// The forward node; with `lse`, it also writes the LSE.
    fn sdpa(&self, lse: bool) -> SdpaAttributes {
        // Bottom-right causal, as FA2 varlen and cuDNN's padded causal define it; with equal
        // query and key lengths it admits the same pairs as top-left.
        let right = self.causal.then_some(0);
        let mut sdpa = SdpaAttributes::new(Q, K, V, O)
            .set_attn_scale_value(self.scale())
            .set_diagonal_band(None, right, DiagonalAlignment::BottomRight);
        if lse {
            sdpa = sdpa.set_stats(&self.lse_tensor());
            sdpa.generate_stats = Some(true);
        }
        if self.fp8 {
            let [dq, dk, dv, ds, ss, so] = FP8_SCALARS.map(|(uid, _)| Some(uid));
            sdpa.descale_q_tensor_uid = dq;
            sdpa.descale_k_tensor_uid = dk;
            sdpa.descale_v_tensor_uid = dv;
            sdpa.descale_s_tensor_uid = ds;
            sdpa.scale_s_tensor_uid = ss;
            sdpa.scale_o_tensor_uid = so;
            sdpa.amax_s_tensor_uid = Some(AMAX_S);
            sdpa.amax_o_tensor_uid = Some(AMAX_O);
        }
        sdpa
    }

    /// Q, K, V, O and their offsets, as every graph of the problem has them.
    fn base_graph(&self, name: String) -> Graph {
        let (d, dv) = (self.head_dim, self.value_dim);
        let mut graph = Graph::new(name)
            .set_data_types(self.element_type(), DataType::Float, DataType::Float)
            .add_tensor(self.packed(Q, "q", QO_OFFSETS, d))
            .add_tensor(self.packed(K, "k", KV_OFFSETS, d))
            .add_tensor(self.packed(V, "v", KV_OFFSETS, dv))
            .add_tensor(self.packed(O, "o", QO_OFFSETS, dv))
            .add_tensor(self.offsets_tensor(QO_OFFSETS, "qo_offsets"))
            .add_tensor(self.offsets_tensor(KV_OFFSETS, "kv_offsets"));
        if self.fp8 {
            for (uid, name) in FP8_SCALARS
                .into_iter()
                .chain([(AMAX_S, "amax_s"), (AMAX_O, "amax_o")])
            {
                graph = graph.add_tensor(Self::scalar_tensor(uid, name));
            }
        }
        graph
    }

    /// The `"fp8"` member of the metadata: null, or the scalars' and amax outputs' uids.
    fn fp8_metadata(&self) -> String {
        if !self.fp8 {
            return "null".into();
        }
        let scalars: Vec<String> = FP8_SCALARS
            .iter()
            .map(|(uid, name)| format!("\"{name}\": {uid}"))
            .collect();
        format!(
            "{{\"format\": \"e4m3\", \"o\": \"e4m3\", {}, \"amax_s\": {AMAX_S}, \"amax_o\": {AMAX_O}}}",
            scalars.join(", ")
        )
    }

    /// The benchmark's forward graph (no LSE).
    fn graph(&self) -> Graph {
        self.base_graph(self.name.clone())
            .add_node(Node::sdpa("sdpa", self.sdpa(false)))
    }

    /// The forward writing its LSE: what the backward benchmark runs once for O and the LSE.
    fn forward_lse_graph(&self) -> Graph {
        self.base_graph(format!("{}_fwd_lse", self.name))
            .add_tensor(self.lse_tensor())
            .add_tensor(self.offsets_tensor(LSE_OFFSETS, "lse_offsets"))
            .add_node(Node::sdpa("sdpa", self.sdpa(true)))
    }

    /// The backward of [`Self::forward_lse_graph`]'s node: dO, dQ share Q's offsets, dK, dV K's;
    /// dO and dV have V's head dim, dQ and dK Q's.
    /// With `top_left`, the causal band is aligned top-left instead: with equal query and key
    /// lengths the same pairs, so the benchmark can time both alignments on one LSE (cuDNN skips
    /// masked tiles only top-left; ours should not care).
    fn backward_graph(&self, top_left: bool) -> Option<Graph> {
        let (d, dv) = (self.head_dim, self.value_dim);
        let mut node = SdpaBackwardAttributes::for_forward(&self.sdpa(true), DO, DQ, DK, DV)?;
        let mut name = format!("{}_bwd", self.name);
        if top_left {
            node.diagonal_alignment = DiagonalAlignment::TopLeft;
            name.push_str("_tl");
        }
        Some(
            self.base_graph(name)
                .add_tensor(self.lse_tensor())
                .add_tensor(self.offsets_tensor(LSE_OFFSETS, "lse_offsets"))
                .add_tensor(self.packed(DO, "do", QO_OFFSETS, dv))
                .add_tensor(self.packed(DQ, "dq", QO_OFFSETS, d))
                .add_tensor(self.packed(DK, "dk", KV_OFFSETS, d))
                .add_tensor(self.packed(DV, "dv", KV_OFFSETS, dv))
                .add_node(Node::sdpa_backward("sdpa_backward", node)),
        )
    }

    /// The `"backward"` member of the metadata: null, or the training pair's files and uids.
    fn backward_metadata(&self) -> String {
        if !self.has_backward() {
            return "null".into();
        }
        format!(
            concat!(
                "{{\"forward_graph\": \"{name}_fwd_lse\", \"graph\": \"{name}_bwd\", ",
                "\"graph_top_left\": {top_left}, ",
                "\"flops\": {flops}, \"flops_rule\": \"2.5 x forward\",\n",
                "    \"lse_layout\": \"ragged token-major [T, H] f32, int32 token offsets, multiplier H\",\n",
                "    \"uids\": {{\"lse\": {lse}, \"lse_offsets\": {lse_off}, \"do\": {d_o}, ",
                "\"dq\": {dq}, \"dk\": {dk}, \"dv\": {dv}}}}}"
            ),
            name = self.name,
            top_left = if self.causal {
                format!("\"{}_bwd_tl\"", self.name)
            } else {
                "null".into()
            },
            flops = self.backward_flops(),
            lse = LSE,
            lse_off = LSE_OFFSETS,
            d_o = DO,
            dq = DQ,
            dk = DK,
            dv = DV,
        )
    }

    /// Hand-written JSON (the crate has no JSON serializer for free-form metadata); every value
    /// is a number, a bool, or a name made of `[a-z0-9_-]`, so nothing needs escaping.
    fn metadata(&self) -> String {
        let list = |values: &[i64]| {
            values
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            concat!(
                "{{\n",
                "  \"name\": \"{name}\",\n",
                "  \"problem\": \"{family}\",\n",
                "  \"dtype\": \"{dtype}\",\n",
                "  \"batch\": {b},\n",
                "  \"heads\": {h},\n",
                "  \"head_dim\": {d},\n",
                "  \"value_dim\": {dv},\n",
                "  \"s_max\": {s},\n",
                "  \"causal\": {causal},\n",
                "  \"diagonal_alignment\": \"bottom_right\",\n",
                "  \"scale\": {scale:e},\n",
                "  \"seq_lens\": [{lens}],\n",
                "  \"tokens\": {tokens},\n",
                "  \"offsets_dtype\": \"int32\",\n",
                "  \"offsets_unit\": \"{unit}\",\n",
                "  \"offsets\": [{offsets}],\n",
                "  \"pairs\": {pairs},\n",
                "  \"flops\": {flops},\n",
                "  \"lse\": null,\n",
                "  \"backward\": {backward},\n",
                "  \"fp8\": {fp8},\n",
                "  \"uids\": {{\"q\": {q}, \"k\": {k}, \"v\": {v}, \"o\": {o}, ",
                "\"qo_offsets\": {qo}, \"kv_offsets\": {kv}}}\n",
                "}}\n"
            ),
            name = self.name,
            family = self.family,
            dtype = if self.fp8 { "fp8_e4m3" } else { "bf16" },
            b = self.batch(),
            h = self.heads,
            d = self.head_dim,
            dv = self.value_dim,
            unit = if self.token_units() {
                "tokens"
            } else {
                "elements"
            },
            s = self.s_max(),
            causal = self.causal,
            scale = self.scale(),
            lens = list(&self.seq_lens),
            tokens = self.seq_lens.iter().sum::<i64>(),
            offsets = list(&self.offsets()),
            pairs = self.pairs(),
            flops = self.flops(),
            q = Q,
            k = K,
            v = V,
            o = O,
            qo = QO_OFFSETS,
            kv = KV_OFFSETS,
            backward = self.backward_metadata(),
            fp8 = self.fp8_metadata(),
        )
    }
}

/// The issue's matrix: bf16, H = 16, 16 384 tokens, D 64 and 128 on every family, causal and
/// not; the other compiled head dims (96, 256, Q/K 192 with V/O 128) on the ragged mix.
fn bench_problems() -> Vec<Problem> {
    let families: [(&'static str, Vec<i64>); 3] = [
        ("8x2048", vec![2048; 8]),
        ("2x8192", vec![8192; 2]),
        ("ragged-mix", RAGGED_MIX.to_vec()),
    ];
    let mut out = Vec::new();
    for head_dim in [64, 128] {
        for (family, lens) in &families {
            for causal in [false, true] {
                out.push(Problem {
                    name: problem_name(family, head_dim, head_dim, causal),
                    family,
                    seq_lens: lens.clone(),
                    heads: 16,
                    head_dim,
                    value_dim: head_dim,
                    causal,
                    fp8: false,
                });
            }
        }
    }
    for (head_dim, value_dim) in [(96, 96), (256, 256), (192, 128)] {
        for causal in [false, true] {
            out.push(Problem {
                name: problem_name("ragged-mix", head_dim, value_dim, causal),
                family: "ragged-mix",
                seq_lens: RAGGED_MIX.to_vec(),
                heads: 16,
                head_dim,
                value_dim,
                causal,
                fp8: false,
            });
        }
    }
    out
}

/// Short sequences the host reference runs quickly, with an empty batch in the middle.
fn tiny_problems() -> Vec<Problem> {
    let mut out = Vec::new();
    for (head_dim, value_dim) in [(64, 64), (128, 128), (96, 96), (192, 128)] {
        for causal in [false, true] {
            out.push(Problem {
                name: problem_name("tiny", head_dim, value_dim, causal),
                family: "tiny",
                seq_lens: vec![5, 0, 17, 9],
                heads: 2,
                head_dim,
                value_dim,
                causal,
                fp8: false,
            });
        }
    }
    out
}

/// The FP8 forward's problems: D 128 on every family, D 64 on the ragged mix and D 256 on the
/// ragged mix and 8 x 2048 (the head dims FP8 kernels run at in the peers; FA3's FP8 peaks at
/// D 256 on long uniform sequences), causal and not; with `tiny`, the tiny set's lengths at D 64,
/// 128 and 256 for the self-check on the host engine.
fn fp8_problems(tiny: bool) -> Vec<Problem> {
    let mut shapes: Vec<(&'static str, Vec<i64>, i64, i64)> = Vec::new();
    if tiny {
        for head_dim in [64, 128, 256] {
            shapes.push(("tiny", vec![5, 0, 17, 9], 2, head_dim));
        }
    } else {
        for head_dim in [128, 64, 256] {
            shapes.push(("ragged-mix", RAGGED_MIX.to_vec(), 16, head_dim));
        }
        for head_dim in [128, 256] {
            shapes.push(("8x2048", vec![2048; 8], 16, head_dim));
        }
        shapes.push(("2x8192", vec![8192; 2], 16, 128));
    }
    let mut out = Vec::new();
    for (family, lens, heads, head_dim) in shapes {
        for causal in [false, true] {
            out.push(Problem {
                name: format!("fp8_{}", problem_name(family, head_dim, head_dim, causal)),
                family,
                seq_lens: lens.clone(),
                heads,
                head_dim,
                value_dim: head_dim,
                causal,
                fp8: true,
            });
        }
    }
    out
}

fn problem_name(family: &str, head_dim: i64, value_dim: i64, causal: bool) -> String {
    let mask = if causal { "causal" } else { "full" };
    if head_dim == value_dim {
        format!("{family}_d{head_dim}_{mask}")
    } else {
        format!("{family}_d{head_dim}v{value_dim}_{mask}")
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes `problems`' graphs and metadata and lists their names in `dir/list` (run order).
fn emit(dir: &Path, problems: &[Problem], list: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for problem in problems {
        write(
            &dir.join(format!("{}.bin", problem.name)),
            &encode_graph(&problem.graph()),
        )?;
        write(
            &dir.join(format!("{}.json", problem.name)),
            problem.metadata().as_bytes(),
        )?;
        if problem.has_backward() {
            let mut graphs = vec![problem.forward_lse_graph()];
            for top_left in [false, true]
                .into_iter()
                .take(1 + usize::from(problem.causal))
            {
                graphs.push(problem.backward_graph(top_left).ok_or_else(|| {
                    format!("{}: the forward node has no stats output", problem.name)
                })?);
            }
            for graph in graphs {
                graph
                    .validate()
                    .map_err(|e| format!("{}: invalid graph: {e}", graph.name))?;
                write(
                    &dir.join(format!("{}.bin", graph.name)),
                    &encode_graph(&graph),
                )?;
            }
        }
    }
    for engine in ENGINES {
        let config = EngineConfig::new(engine_name_to_id(engine));
        write(
            &dir.join(format!("engine_config_{engine}.bin")),
            &encode_engine_config(&config),
        )?;
    }
    let names: Vec<String> = problems.iter().map(|p| format!("\"{}\"", p.name)).collect();
    write(
        &dir.join(list),
        format!("[{}]\n", names.join(", ")).as_bytes(),
    )
}

fn main() -> ExitCode {
    let mut dir: Option<PathBuf> = None;
    let mut tiny = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--tiny" => tiny = true,
            flag if flag.starts_with("--") => {
                eprintln!("emit_bench_graphs: unknown flag {flag}; usage: <dir> [--tiny]");
                return ExitCode::from(2);
            }
            path if dir.is_none() => dir = Some(PathBuf::from(path)),
            extra => {
                eprintln!("emit_bench_graphs: unexpected argument {extra}; usage: <dir> [--tiny]");
                return ExitCode::from(2);
            }
        }
    }
    let Some(dir) = dir else {
        eprintln!("emit_bench_graphs: missing output directory; usage: <dir> [--tiny]");
        return ExitCode::from(2);
    };
    let problems = if tiny {
        tiny_problems()
    } else {
        bench_problems()
    };
    let fp8 = fp8_problems(tiny);
    match emit(&dir, &problems, "problems.json")
        .and_then(|()| emit(&dir, &fp8, "problems_fp8.json"))
    {
        Ok(()) => {
            println!(
                "wrote {} graphs, {} FP8 graphs and {} engine configs to {}",
                problems.len(),
                fp8.len(),
                ENGINES.len(),
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("emit_bench_graphs: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
