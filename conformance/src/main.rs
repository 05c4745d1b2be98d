//! `ragged-conformance`: runs the ABI, version-gating, numeric and multi-node suites against plugin shared
//! objects, prints a readable report, optionally writes JUnit XML, and exits nonzero on any
//! failure.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use hipdnn_shim::harness::ValidationMode;
use hipdnn_shim::manager::{LoadedPlugin, PluginManager};
use ragged_conformance::report::{CaseResult, Outcome, Report};
use ragged_conformance::suites::gating::{self, FixtureArtifacts};
use ragged_conformance::suites::{abi, backward, fp8, multi_node, numeric, serving};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Suite {
    Abi,
    Gating,
    Numeric,
    /// Multi-node graphs (SDPA → pointwise on virtual intermediates) against the CPU graph
    /// executor; a plugin that declines them gets "declined" skips.
    MultiNode,
    /// SdpaBackward graphs (the numeric cases and the GPU backward's shapes) against kernels'
    /// CPU backward; engines that are not --host-engine on device buffers with --cuda.
    Backward,
    /// Serving graphs (paged K/V prefill and decode, attention sinks) against the CPU
    /// reference; an engine that declines one is reported DECLINED, not failed.
    Serving,
    /// FP8 forward graphs (descales only with bf16 O; every scale with FP8 O, LSE and amaxes)
    /// against the CPU reference; an engine that declines one is reported DECLINED.
    Fp8,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Validation {
    /// Written positions derived from ragged_offset and seq_lens (no sentinel trust needed).
    Coverage,
    /// RFC §4.11.4: skip positions where the reference still holds the sentinel.
    SentinelSkip,
}

/// Conformance suites for hipDNN engine plugins.
///
/// The gating suite loads fixture plugins declaring every API version of versioning.md §7 (found
/// under --fixture-dir, default: this executable's directory, as cargo lays out target/<profile>;
/// build them into target/release with `cargo build --release -p fixture-plugin --lib
/// --examples`, into target/debug without --release) and also checks each PLUGIN's own row. The
/// numeric and backward suites run the engines named by --host-engine on host buffers, the others
/// on CUDA device buffers with --cuda, and report them as skipped without it.
#[derive(Debug, Parser)]
#[command(name = "ragged-conformance", version)]
struct Args {
    /// Plugin shared objects to test (at least one: a run that tests no plugin certifies
    /// nothing).
    #[arg(required = true)]
    plugins: Vec<PathBuf>,
    /// Suites to run (default: all).
    #[arg(long = "suite", value_enum)]
    suites: Vec<Suite>,
    /// cargo profile directory holding the fixture plugin builds (default: this executable's
    /// directory).
    #[arg(long)]
    fixture_dir: Option<PathBuf>,
    /// Where to write JUnit XML.
    #[arg(long)]
    junit: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "coverage")]
    validation: Validation,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Run engines that are not --host-engine on CUDA device 0 (device buffers through the
    /// driver API) in the numeric and backward suites; without it they are skipped.
    #[arg(long)]
    cuda: bool,
    /// Engine names that take host buffers (repeatable).
    #[arg(long = "host-engine", default_values_t = ["RAGGED_SDPA_HOST_REFERENCE".to_string()])]
    host_engines: Vec<String>,
}

/// A case for a suite that could not run at all, so the run fails visibly instead of passing
/// with fewer cases.
fn failed_case(suite: &str, name: &str, why: String) -> CaseResult {
    CaseResult {
        suite: suite.into(),
        name: name.into(),
        outcome: Outcome::Fail(why),
        details: vec![],
        duration: Default::default(),
    }
}

/// Loads each plugin alone and runs `suite` on it; a plugin that does not load is a failed case.
fn for_each_loaded(
    plugins: &[PathBuf],
    suite: &str,
    report: &mut Report,
    run: &dyn Fn(&LoadedPlugin) -> Report,
) {
    for plugin in plugins {
        let mut manager = PluginManager::new();
        manager.load_file(plugin);
        match manager.plugins.first() {
            Some(loaded) => report.extend(run(loaded)),
            None => report.push(failed_case(
                suite,
                &format!("{}::load", plugin.display()),
                manager
                    .rejected
                    .first()
                    .map_or_else(|| "not loaded".to_owned(), |r| r.reason.clone()),
            )),
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let suites = if args.suites.is_empty() {
        vec![
            Suite::Abi,
            Suite::Gating,
            Suite::Numeric,
            Suite::MultiNode,
            Suite::Backward,
            Suite::Serving,
            Suite::Fp8,
        ]
    } else {
        args.suites.clone()
    };
    let mut report = Report::default();

    if suites.contains(&Suite::Abi) {
        for plugin in &args.plugins {
            report.extend(abi::run(plugin, &args.host_engines));
        }
    }
    if suites.contains(&Suite::Gating) {
        let dir = args.fixture_dir.clone().or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(PathBuf::from))
        });
        match dir.as_deref().map(FixtureArtifacts::locate) {
            Some(Ok(fixtures)) => {
                let scratch = std::env::temp_dir()
                    .join(format!("ragged-conformance-gating-{}", std::process::id()));
                match gating::run_matrix(&fixtures, &scratch, &|g| {
                    Ok(ragged_schema::wire::encode_graph(g))
                }) {
                    Ok(matrix) => {
                        println!("{}", matrix.table());
                        report.extend(gating::report(&matrix));
                    }
                    Err(e) => report.push(failed_case("gating", "fixture matrix", e.to_string())),
                }
                let _ = std::fs::remove_dir_all(&scratch);
            }
            Some(Err(e)) => {
                eprintln!("ragged-conformance: {e}");
                return ExitCode::from(2);
            }
            None => {
                eprintln!(
                    "ragged-conformance: cannot find the fixture directory; pass --fixture-dir"
                );
                return ExitCode::from(2);
            }
        }
        for plugin in &args.plugins {
            report.extend(gating::check_plugin(plugin));
        }
    }
    let mode = match args.validation {
        Validation::Coverage => ValidationMode::Coverage,
        Validation::SentinelSkip => ValidationMode::SentinelSkip,
    };
    // One CUDA verdict for the numeric and backward suites: with --cuda, no device is an error.
    let mut options = numeric::NumericOptions {
        mode,
        seed: args.seed,
        host_engines: args.host_engines.clone(),
        device: None,
    };
    let device_suites = [Suite::Numeric, Suite::Backward, Suite::Serving, Suite::Fp8];
    if args.cuda && device_suites.iter().any(|s| suites.contains(s)) {
        match hipdnn_shim::harness::cuda_device() {
            Ok(d) => options.device = Some(d),
            Err(e) => {
                eprintln!("ragged-conformance: --cuda: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if suites.contains(&Suite::Numeric) {
        for_each_loaded(&args.plugins, "numeric", &mut report, &|loaded| {
            numeric::run(loaded, &options)
        });
    }
    if suites.contains(&Suite::MultiNode) {
        for_each_loaded(&args.plugins, "multi_node", &mut report, &|loaded| {
            multi_node::run(loaded, &args.host_engines, mode, args.seed)
        });
    }

    if suites.contains(&Suite::Backward) {
        for_each_loaded(&args.plugins, "backward", &mut report, &|loaded| {
            backward::run(loaded, &options)
        });
    }
    if suites.contains(&Suite::Serving) {
        for_each_loaded(&args.plugins, "serving", &mut report, &|loaded| {
            serving::run(loaded, &options)
        });
    }
    if suites.contains(&Suite::Fp8) {
        for_each_loaded(&args.plugins, "fp8", &mut report, &|loaded| {
            fp8::run(loaded, &options)
        });
    }

    print!("{}", report.text());
    if let Some(path) = &args.junit
        && let Err(e) = std::fs::write(path, report.junit_xml())
    {
        eprintln!(
            "ragged-conformance: writing JUnit XML to '{}': {e}",
            path.display()
        );
        return ExitCode::from(2);
    }
    if report.failures() > 0 || report.cases.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
