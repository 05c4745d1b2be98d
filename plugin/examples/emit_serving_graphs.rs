//! Writes the paged serving benchmark's graphs (`bench/gpu/serving_bench.py`), decode and
//! chunked prefill: for each problem a serialized graph `<name>.bin` built by the shim's serving
//! graphs (packed Q/O `[1, H_q, ΣLq + 1, D]`, token-major pools `[P, H_kv, 16, D]`, page tables
//! `[B, MP]`, int32 lengths; bottom-right causal, which for one query token admits the whole
//! context) and `<name>.json` with what the harness needs to fill the variant pack and the peer's
//! inputs (uids, heads, head dim, page size, pages, table columns, the lengths). `problems.json` lists the names in run order and
//! `engine_config_<ENGINE>.bin` holds an `EngineConfig` per engine.
//!
//! ```text
//! cargo run --release -p ragged-plugin --example emit_serving_graphs -- OUT_DIR [--tiny]
//! ```
//!
//! `--tiny` writes one small problem (B = 3, short contexts, H_q = 4) that the host reference engine
//! runs in a moment, for the harness's self-check without a GPU.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hipdnn_provider_ragged_sdpa::engine_id::engine_name_to_id;
use hipdnn_shim::serving_graphs::{ServingCase, uid};
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{DataType, EngineConfig};

const ENGINES: [&str; 2] = ["RAGGED_SDPA_CUDA_FMHA", "RAGGED_SDPA_HOST_REFERENCE"];

/// One problem: (name, H_q, H_kv, D, page size, contexts, new query tokens per sequence; one
/// for decode).
type Serving = (&'static str, i64, i64, i64, i64, Vec<i64>, Vec<i64>);

/// `n` lengths spread evenly over `lo..=hi`, in a shuffled order (i -> 37 i mod n).
fn spread(n: i64, lo: i64, hi: i64) -> Vec<i64> {
    (0..n)
        .map(|i| lo + (37 * i % n) * (hi - lo) / (n - 1))
        .collect()
}

/// The decode problems, and two chunked prefills.
fn problems(tiny: bool) -> Vec<Serving> {
    if tiny {
        return vec![(
            "tiny_decode_gqa2_d64",
            4,
            2,
            64,
            16,
            vec![37, 1, 70],
            vec![1; 3],
        )];
    }
    vec![
        // 64 contexts spread over 1k..32k keys, shuffled.
        gqa4_d128(
            "decode_b64_mixed_1k_32k_gqa4_d128",
            spread(64, 1024, 32768),
            1,
        ),
        // The same spread over 1k..6k keys: bounded below the paged plan's LONG_CONTEXT (8192),
        // where a batch whose (sequence, KV head) pairs fill the card runs unsplit, so that the
        // longest contexts are its tail.
        gqa4_d128(
            "decode_b64_mixed_1k_6k_gqa4_d128",
            spread(64, 1024, 6144),
            1,
        ),
        gqa4_d128("decode_b64_ctx4k_gqa4_d128", vec![4096; 64], 1),
        gqa4_d128("decode_b64_ctx32k_gqa4_d128", vec![32768; 64], 1),
        // A serving mix of chunked prefills: 512 new tokens on each of 32 sequences whose contexts
        // spread over 1k..8k keys, shuffled.
        gqa4_d128(
            "prefill_b32_q512_ctx1k_8k_gqa4_d128",
            spread(32, 1024, 8192),
            512,
        ),
        // Chunked prefill: 1024 new tokens after 3072 cached ones, 8 sequences.
        gqa4_d128("prefill_b8_q1k_ctx4k_gqa4_d128", vec![4096; 8], 1024),
    ]
}

/// A benchmark problem of the serving shape: 32 query heads over 8 KV heads, D 128, pages of 16
/// rows, `new` query tokens on every sequence.
fn gqa4_d128(name: &'static str, contexts: Vec<i64>, new: i64) -> Serving {
    let queries = vec![new; contexts.len()];
    (name, 32, 8, 128, 16, contexts, queries)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn emit(dir: &Path, tiny: bool) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for (name, hq, hkv, d, ps, len_kv, len_q) in problems(tiny) {
        let batch = len_kv.len();
        let case = ServingCase {
            name,
            io_type: DataType::BFloat16,
            heads_q: hq,
            heads_kv: hkv,
            head_dim: d,
            len_q: len_q.clone(),
            len_kv: len_kv.clone(),
            page_size: Some(ps),
            bottom_right_causal: true,
            sinks: false,
            stats: false,
        };
        let graph = case.graph();
        graph
            .validate()
            .map_err(|e| format!("{name}: invalid graph: {e}"))?;
        write(&dir.join(format!("{name}.bin")), &encode_graph(&graph))?;
        // The serving graph's pool and table sizes (one spare table column, two spare pages).
        let used: Vec<i64> = len_kv.iter().map(|l| (l + ps - 1) / ps).collect();
        let columns = used.iter().max().copied().unwrap_or(0) + 1;
        let pages = used.iter().sum::<i64>() + 2;
        let list = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
        let meta = format!(
            "{{\"name\": \"{name}\", \"batch\": {batch}, \"heads_q\": {hq}, \"heads_kv\": {hkv}, \
             \"head_dim\": {d}, \"page_size\": {ps}, \"pages\": {pages}, \"columns\": {columns}, \
             \"rows_q\": {}, \"len_kv\": [{}], \"len_q\": [{}], \"uids\": {{\"q\": {}, \"k\": {}, \"v\": {}, \
             \"o\": {}, \"page_table_k\": {}, \"page_table_v\": {}, \"seq_len_q\": {}, \
             \"seq_len_kv\": {}}}}}\n",
            len_q.iter().sum::<i64>() + 1,
            list(&len_kv),
            list(&len_q),
            uid::Q,
            uid::K,
            uid::V,
            uid::O,
            uid::PAGE_TABLE_K,
            uid::PAGE_TABLE_V,
            uid::SEQ_LEN_Q,
            uid::SEQ_LEN_KV,
        );
        write(&dir.join(format!("{name}.json")), meta.as_bytes())?;
        names.push(format!("\"{name}\""));
    }
    for engine in ENGINES {
        let config = EngineConfig::new(engine_name_to_id(engine));
        write(
            &dir.join(format!("engine_config_{engine}.bin")),
            &encode_engine_config(&config),
        )?;
    }
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
            _ if dir.is_none() => dir = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("usage: emit_serving_graphs OUT_DIR [--tiny]");
                return ExitCode::from(2);
            }
        }
    }
    let Some(dir) = dir else {
        eprintln!("usage: emit_serving_graphs OUT_DIR [--tiny]");
        return ExitCode::from(2);
    };
    match emit(&dir, tiny) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("emit_serving_graphs: {e}");
            ExitCode::FAILURE
        }
    }
}
