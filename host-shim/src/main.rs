//! `hipdnn-shim`: loads engine plugins exactly as hipDNN's backend does (discovery, load
//! sequence, API-version gating, engine admission) and runs graphs through them.

mod bundle_inputs;
mod commands;
mod error;
mod graph_file;
mod host;
mod inputs;
mod integration_bundle;
mod npy;
mod oracle;
mod run_backward;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use hipdnn_shim::harness::ValidationMode;

use commands::run::GraphRun;

/// Loads hipDNN engine plugins as hipDNN does and runs graphs through them.
///
/// Plugins come from HIPDNN_PLUGIN_DIR (a directory scanned non-recursively for *.so, or one
/// file), replacing the default hipdnn_plugins/engines/ beside this executable. Log lines at
/// HIPDNN_LOG_LEVEL (default info here, so hipDNN's skip lines show) go to stderr, or are
/// appended to the file HIPDNN_LOG_FILE names.
#[derive(Debug, Parser)]
#[command(name = "hipdnn-shim", version)]
struct Cli {
    /// Use this plugin directory or file instead of HIPDNN_PLUGIN_DIR.
    #[arg(long, global = true)]
    plugin_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Validation {
    /// Written positions derived from ragged_offset and seq_lens; unwritten ones must keep the
    /// sentinel.
    Coverage,
    /// RFC §4.11.4: skip positions where the reference kept the sentinel.
    SentinelSkip,
}

#[derive(Debug, clap::Args)]
struct GraphArgs {
    /// Graph file: hipDNN JSON or FlatBuffers (bare Graph or HDGP).
    graph: PathBuf,
    /// Engine name or 0x-hex id (default: the first applicable engine that takes host buffers).
    #[arg(long)]
    engine: Option<String>,
    /// Directory of .npy inputs named <uid>.npy or <tensor name>.npy (physical buffers; bf16 and
    /// fp16 as uint16 bit patterns, or any float dtype to be converted). Missing inputs are
    /// seeded random.
    #[arg(long)]
    inputs: Option<PathBuf>,
    /// Companion file with ragged offsets and seq_lens (default: <graph stem>.offsets.json beside
    /// the graph). Format: {"ragged_offsets": {"<name or uid>": [..]}, "seq_lens": {"<name or
    /// uid>": [..]}}; values in elements, stored with the tensor's declared INT32/INT64 type.
    #[arg(long)]
    offsets: Option<PathBuf>,
    /// Seed for random inputs.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Engine names that accept host buffers (repeatable); the shim binds host memory and runs
    /// no other engine.
    #[arg(long = "host-engine", default_values_t = ["RAGGED_SDPA_HOST_REFERENCE".to_string()])]
    host_engines: Vec<String>,
    /// Run engines that are not --host-engine on CUDA device 0 (inputs copied to device buffers,
    /// outputs copied back).
    #[arg(long)]
    cuda: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List plugins, their versions and engines, and why any was rejected.
    Plugins,
    /// Show a graph's tensors (ragged ones and their aux), its SDPA node and the minimum plugin
    /// API version with the reasons.
    Inspect {
        /// Graph file: hipDNN JSON or FlatBuffers.
        graph: PathBuf,
    },
    /// Execute a graph on one engine and write its outputs as .npy.
    Run {
        #[command(flatten)]
        graph: GraphArgs,
        /// Output directory (default: a directory under the system temp dir).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Compare with a float64 evaluation of the SDPA formula (independent of every engine);
        /// print max abs/rel error; exit 1 on mismatch.
        #[arg(long)]
        verify: bool,
        #[arg(long, value_enum, default_value = "coverage")]
        validation: Validation,
    },
    /// Run every case of an upstream integration-test bundle tree (single-graph bundles and
    /// graph.template.json + sweep.json sweeps) on a host engine against the float64 oracle: one
    /// line per case, then "N passed, M failed, K declined"; exit 1 if any failed.
    Bundle {
        /// Root of the bundle tree.
        dir: PathBuf,
        /// Engine name or 0x-hex id (default: the first applicable host engine).
        #[arg(long)]
        engine: Option<String>,
        /// Engine names that accept host buffers (repeatable).
        #[arg(long = "host-engine", default_values_t = ["RAGGED_SDPA_HOST_REFERENCE".to_string()])]
        host_engines: Vec<String>,
    },
    /// Median execute time of an engine over N runs.
    Bench {
        #[command(flatten)]
        graph: GraphArgs,
        /// Timed runs.
        #[arg(long, default_value_t = 50)]
        runs: usize,
        /// Untimed runs first.
        #[arg(long, default_value_t = 3)]
        warmup: usize,
    },
}

fn graph_run(args: GraphArgs, plugin_dir: Option<PathBuf>) -> GraphRun {
    GraphRun {
        graph: args.graph,
        plugin_dir,
        engine: args.engine,
        inputs: args.inputs,
        offsets: args.offsets,
        seed: args.seed,
        host_engines: args.host_engines,
        cuda: args.cuda,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plugins => {
            return if commands::plugins::run(cli.plugin_dir) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Command::Inspect { graph } => commands::inspect::run(&graph),
        Command::Bundle {
            dir,
            engine,
            host_engines,
        } => {
            let run = commands::bundle::BundleRun {
                dir,
                plugin_dir: cli.plugin_dir,
                engine,
                host_engines,
            };
            return match commands::bundle::run(&run) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("hipdnn-shim: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Run {
            graph,
            out,
            verify,
            validation,
        } => commands::run::run(
            &graph_run(graph, cli.plugin_dir),
            out.as_deref(),
            verify,
            match validation {
                Validation::Coverage => ValidationMode::Coverage,
                Validation::SentinelSkip => ValidationMode::SentinelSkip,
            },
        ),
        Command::Bench {
            graph,
            runs,
            warmup,
        } => commands::bench::run(&graph_run(graph, cli.plugin_dir), runs, warmup),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hipdnn-shim: {e}");
            ExitCode::FAILURE
        }
    }
}
