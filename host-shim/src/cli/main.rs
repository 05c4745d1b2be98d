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
mod shape_overrides;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use hipdnn_shim::harness::ValidationMode;

use commands::run::GraphRun;

/// `hipdnn-shim --help`: where plugins come from and how paths resolve, which a user cannot
/// guess (relative paths follow hipDNN, not the shell), and the environment the shim sets.
const LONG_ABOUT: &str = "\
Loads hipDNN engine plugins as hipDNN does and runs graphs through them.

Where plugins come from (`hipdnn-shim plugins` prints each place and what it held; a command
that finds none lists every place it searched):
  1. --plugin-dir PATH, else HIPDNN_PLUGIN_DIR=PATH, and nothing else (as in hipDNN, it
     replaces the default): a directory is scanned non-recursively for *.so, anything else
     is loaded as one file. A relative PATH resolves against the folder of this executable,
     not the current directory, as hipDNN resolves it against its backend library's folder:
     from the checkout, write \"$PWD/PATH\".
  2. With neither, the first of these (relative to this executable's folder) that holds a
     plugin; only that one is loaded:
       hipdnn_plugins/engines/              hipDNN's default
       libhipdnn_provider_ragged_sdpa.so    the plugin cargo built beside this executable
                                            (cargo xtask demo; cargo build --release -p
                                            ragged-plugin)
       ../../lib/hipdnn_plugins/engines/    the layout `cargo xtask dist` writes, seen from
                                            the checkout's target/<profile>/

HIPDNN_RAGGED_SDPA_HOST_ENGINE is set to 1 unless the environment sets it: the shim binds
host buffers, so it asks the project plugin to list its CPU host engine next to a GPU runtime
too. Log lines at HIPDNN_LOG_LEVEL (default info here, so hipDNN's skip lines show) go to
stderr, or are appended to the file HIPDNN_LOG_FILE names.";

/// Loads hipDNN engine plugins as hipDNN does and runs graphs through them.
#[derive(Debug, Parser)]
#[command(name = "hipdnn-shim", version, long_about = LONG_ABOUT)]
struct Cli {
    /// Load plugins from this directory or file only (instead of HIPDNN_PLUGIN_DIR and the
    /// default places); relative: against this executable's folder, as HIPDNN_PLUGIN_DIR.
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
    ///
    /// A ragged Q/K/V/O may be [B, S, H, D] or [B, H, S, D] over BSHD memory: its sequence axis
    /// is the middle axis with the larger stride. Strides cannot tell S from H when they tie
    /// (H = 1: the larger dim is taken as S) and a BHSD-packed [B, H, 1, D] (S_max = 1) is read
    /// as one head of H tokens; a dense LSE matching both orders (H = S_max) is taken as
    /// [B, H, S, 1]. See README "How the shim tells S from H".
    graph: PathBuf,
    /// Engine name or 0x-hex id (default: the first applicable engine that takes host buffers).
    #[arg(long)]
    engine: Option<String>,
    /// Directory of .npy inputs named <uid>.npy or <tensor name>.npy (physical buffers; bf16 and
    /// fp16 as uint16 bit patterns, or any float dtype to be converted). Each array's shape is
    /// the one run writes for the tensor ([tokens, H, D] for ragged buffers, the dims for
    /// row-major dense ones) or the flat buffer; inputs without a file are seeded random. The
    /// directory must exist.
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
    /// Run an engine that is not a --host-engine on CUDA device 0 (inputs copied to device
    /// buffers, outputs copied back). Without a usable CUDA device, or without an applicable
    /// device engine, the command fails saying why; it runs a host engine only where --engine
    /// names one, and says so.
    #[arg(long)]
    cuda: bool,
    #[command(flatten)]
    overrides: OverrideFlags,
}

/// One execute through ExecuteOpGraphWithOverrides (RFC 0008, plugin-abi.md §4): the plan is
/// compiled for the graph file (which must set is_override_shape_enabled), the call carries the
/// dims and strides of every tensor these flags change, and the inputs, outputs, companion
/// offsets and --verify all describe the overridden shapes (so the companion file gives B + 1
/// offsets for the new B). Host engines only.
#[derive(Debug, Clone, Default, clap::Args)]
struct OverrideFlags {
    /// New batch size B of a single-SDPA graph (every batch axis; offset auxes get B + 1).
    #[arg(long, value_name = "B")]
    override_batch: Option<i64>,
    /// New S_max of Q, O and LSE (strides repacked in each tensor's own memory order).
    #[arg(long, value_name = "S")]
    override_seq_q: Option<i64>,
    /// New S_max of K and V.
    #[arg(long, value_name = "S")]
    override_seq_kv: Option<i64>,
    /// Exact shape of one tensor, applied after the flags above (repeatable):
    /// UID:D0,D1,..[:S0,S1,..], strides packed row-major when omitted.
    #[arg(long, value_name = "UID:DIMS[:STRIDES]")]
    override_shape: Vec<String>,
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
    /// Execute a graph (one SDPA node, or a multi-node graph of SDPA and pointwise nodes on a host
    /// engine) on one engine and write its outputs as .npy.
    Run {
        #[command(flatten)]
        graph: GraphArgs,
        /// Output directory (default: a directory under the system temp dir).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Compare with a float64 evaluation of the SDPA formula (independent of every engine);
        /// print max abs/rel error; exit 1 on mismatch. A multi-node graph (SDPA and pointwise
        /// nodes, virtual intermediates) is walked node by node in the same float64 oracle, each
        /// node's values rounded into its output's declared type; it shares no code with the
        /// kernels' CPU reference or graph executor.
        #[arg(long)]
        verify: bool,
        #[arg(long, value_enum, default_value = "coverage")]
        validation: Validation,
    },
    /// Run every case of an upstream integration-test bundle tree (single-graph bundles and
    /// graph.template.json + sweep.json sweeps) on a host engine (with --cuda: the CUDA engine)
    /// against the float64 oracle: one line per case, then "N passed, M failed, K declined";
    /// exit 1 if any failed.
    Bundle {
        /// Root of the bundle tree, or a corpus folder holding one as bundles/ beside
        /// expectations.json (host-shim/tests/corpus).
        dir: PathBuf,
        /// Engine name or 0x-hex id (default: the first applicable host engine).
        #[arg(long)]
        engine: Option<String>,
        /// Engine names that accept host buffers (repeatable).
        #[arg(long = "host-engine", default_values_t = ["RAGGED_SDPA_HOST_REFERENCE".to_string()])]
        host_engines: Vec<String>,
        /// Run engines that are not --host-engine on CUDA device 0 with device buffers (inputs
        /// copied in, outputs copied back), as run --cuda. Without a usable CUDA device nothing
        /// runs: "skipped: --cuda: REASON" is printed and the exit status is 77.
        #[arg(long)]
        cuda: bool,
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
        overrides: shape_overrides::OverrideArgs {
            batch: args.overrides.override_batch,
            seq_q: args.overrides.override_seq_q,
            seq_kv: args.overrides.override_seq_kv,
            shapes: args.overrides.override_shape,
        },
    }
}

fn main() -> ExitCode {
    if std::env::var_os(host::HOST_ENGINE_ENV).is_none() {
        // SAFETY: the first statement of main: the process has no other thread yet, so nothing
        // reads or writes the environment concurrently.
        unsafe { std::env::set_var(host::HOST_ENGINE_ENV, "1") };
    }
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
            cuda,
        } => {
            let run = commands::bundle::BundleRun {
                dir,
                plugin_dir: cli.plugin_dir,
                engine,
                host_engines,
                cuda,
            };
            return match commands::bundle::run(&run) {
                Ok(commands::bundle::Verdict::Passed) => ExitCode::SUCCESS,
                Ok(commands::bundle::Verdict::Failed) => ExitCode::FAILURE,
                Ok(commands::bundle::Verdict::Skipped(_)) => {
                    ExitCode::from(commands::bundle::SKIPPED_EXIT)
                }
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
