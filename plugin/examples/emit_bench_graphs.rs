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
//! `--tiny` writes small problems instead (a few short sequences, H = 2) that the host reference
//! engine can execute in a second: the benchmark's self-check runs them on a machine without a
//! GPU to prove the metadata and the ctypes binding before the one device run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hipdnn_provider_ragged_sdpa::engine_id::engine_name_to_id;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, DiagonalAlignment, EngineConfig, Graph, Node, SdpaAttributes, TensorAttributes,
};

const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
/// Q and O share one offsets tensor, K and V another (the RFC's packed layout for self-attention).
const QO_OFFSETS: i64 = 10;
const KV_OFFSETS: i64 = 11;

const ENGINES: [&str; 3] = [
    "RAGGED_SDPA_CUDA_FMHA",
    "RAGGED_SDPA_AITER_FMHA",
    "RAGGED_SDPA_HOST_REFERENCE",
];

/// The ragged mix of `bench/gpu/fmha_dev.py` (`ragged_mix(7)`: numpy's default generator, seed 7,
/// lengths drawn from 64..=4096 until 16 384 tokens). Written out rather than re-drawn so that
/// the plugin benchmark and the direct-kernel results in RESULTS-gpu.md time the same problem.
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

    fn graph(&self) -> Graph {
        let (b, s, h) = (self.batch(), self.s_max(), self.heads);
        let token_units = self.token_units();
        let packed = |uid: i64, name: &str, aux: i64, d: i64| {
            TensorAttributes::new()
                .set_uid(uid)
                .set_name(name)
                .set_data_type(DataType::BFloat16)
                .set_dims(vec![b, s, h, d])
                .set_strides(vec![s * h * d, h * d, d, 1])
                .set_ragged_offset_uid(aux)
                .set_ragged_offset_multiplier(if token_units { h * d } else { 1 })
        };
        let (d, dv) = (self.head_dim, self.value_dim);
        let offsets = |uid: i64, name: &str| {
            TensorAttributes::new()
                .set_uid(uid)
                .set_name(name)
                .set_data_type(DataType::Int32)
                .set_dims(vec![b + 1, 1, 1, 1])
                .set_strides(vec![1, 1, 1, 1])
        };
        // Bottom-right causal, as FA2 varlen and cuDNN's padded causal define it; with equal
        // query and key lengths it admits the same pairs as top-left.
        let right = self.causal.then_some(0);
        let sdpa = SdpaAttributes::new(Q, K, V, O)
            .set_attn_scale_value(self.scale())
            .set_diagonal_band(None, right, DiagonalAlignment::BottomRight);
        Graph::new(self.name.clone())
            .set_data_types(DataType::BFloat16, DataType::Float, DataType::Float)
            .add_tensor(packed(Q, "q", QO_OFFSETS, d))
            .add_tensor(packed(K, "k", KV_OFFSETS, d))
            .add_tensor(packed(V, "v", KV_OFFSETS, dv))
            .add_tensor(packed(O, "o", QO_OFFSETS, dv))
            .add_tensor(offsets(QO_OFFSETS, "qo_offsets"))
            .add_tensor(offsets(KV_OFFSETS, "kv_offsets"))
            .add_node(Node::sdpa("sdpa", sdpa))
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
                "  \"dtype\": \"bf16\",\n",
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
                "  \"uids\": {{\"q\": {q}, \"k\": {k}, \"v\": {v}, \"o\": {o}, ",
                "\"qo_offsets\": {qo}, \"kv_offsets\": {kv}}}\n",
                "}}\n"
            ),
            name = self.name,
            family = self.family,
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

fn emit(dir: &Path, problems: &[Problem]) -> Result<(), String> {
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
        &dir.join("problems.json"),
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
    match emit(&dir, &problems) {
        Ok(()) => {
            println!(
                "wrote {} graphs and {} engine configs to {}",
                problems.len(),
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
