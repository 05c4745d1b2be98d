//! What the three kinds of `run` share: the arguments, the inputs supplied from the companion
//! file and `--inputs`, the engine chosen as hipDNN's dispatch would, the outputs written as
//! `.npy`, and the verification report.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use hipdnn_shim::harness::{Bundle, Comparison, PreSuppliedInputs, ValidationMode};
use hipdnn_shim::log::Log;
use hipdnn_shim::manager::PluginManager;
use ragged_gpu_runtime::cuda::runtime::CudaRuntime;
use ragged_schema::model::Graph;

use crate::error::ShimError;
use crate::host::{self, Candidate};
use crate::shape_overrides::OverrideArgs;
use crate::{graph_file, inputs, npy};

/// The arguments of `run` and `bench`.
#[derive(Debug, Clone)]
pub struct GraphRun {
    pub graph: PathBuf,
    pub plugin_dir: Option<PathBuf>,
    pub engine: Option<String>,
    pub inputs: Option<PathBuf>,
    pub offsets: Option<PathBuf>,
    pub seed: u64,
    /// Engines that accept host buffers.
    pub host_engines: Vec<String>,
    /// Run other engines on CUDA device 0 with device buffers.
    pub cuda: bool,
    /// Shapes of an ExecuteOpGraphWithOverrides call; empty: plain ExecuteOpGraph.
    pub overrides: OverrideArgs,
}

/// The graph file, validated.
pub(crate) fn load_valid(args: &GraphRun) -> Result<Graph, ShimError> {
    let graph = graph_file::load(&args.graph)?;
    graph.validate().map_err(|source| ShimError::Graph {
        path: args.graph.clone(),
        source: Box::new(source),
    })?;
    Ok(graph)
}

/// The companion file's offsets and seq_lens, then any `--inputs` `.npy` that is not an output.
pub(crate) fn supplied_inputs(
    args: &GraphRun,
    graph: &Graph,
    outputs: &BTreeSet<i64>,
) -> Result<PreSuppliedInputs, ShimError> {
    let mut pre = PreSuppliedInputs::new();
    let companion = args
        .offsets
        .clone()
        .unwrap_or_else(|| inputs::default_companion(&args.graph));
    inputs::load_companion(graph, &companion, args.offsets.is_some(), &mut pre)?;
    if let Some(dir) = &args.inputs {
        let loaded = inputs::load_npy_dir(graph, dir, outputs, &mut pre)?;
        eprintln!(
            "inputs from {}: uids {:?}; the rest seeded random (seed {:#x})",
            dir.display(),
            loaded,
            args.seed
        );
    }
    Ok(pre)
}

/// Loads the plugins, dispatches the graph as the backend does and picks the engine.
///
/// `cuda` asks for an engine that is not a `--host-engine`, on a device: without a usable CUDA
/// device that is an error before anything loads, and without `--engine` the first applicable
/// device engine is chosen, never a host engine in its place (a `--cuda` run that printed PASS
/// from the CPU engine would claim a device result that never existed).
pub(crate) fn choose_engine(
    args: &GraphRun,
    graph: &Graph,
    cuda: bool,
) -> Result<(PluginManager, Candidate), ShimError> {
    if cuda {
        hipdnn_shim::harness::cuda_device().map_err(|e| ShimError::NoDevice {
            reason: e.to_string(),
        })?;
    }
    let mut manager = host::require_plugins(args.plugin_dir.clone())?;
    let candidates = host::applicable_engines(&mut manager, graph);
    host::flush_log(&mut manager.log);
    let candidates = candidates?;
    let candidate = if cuda && args.engine.is_none() {
        let on_device = host::device_engines(&candidates, &args.host_engines);
        if on_device.is_empty() {
            return Err(ShimError::NoEngine {
                graph: graph.name.clone(),
                hint: format!(
                    " that runs on the CUDA device (--cuda): applicable: [{}], all --host-engine \
                     (the device engines' reasons are in the log lines above)",
                    candidates
                        .iter()
                        .map(|c| c.engine_name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        host::choose(&on_device, None, &args.host_engines, true, graph)?
    } else {
        host::choose(
            &candidates,
            args.engine.as_deref(),
            &args.host_engines,
            cuda,
            graph,
        )?
    };
    if cuda && args.host_engines.contains(&candidate.engine_name) {
        eprintln!(
            "--cuda: engine {} is a --host-engine named by --engine: it runs on host buffers",
            candidate.engine_name
        );
    }
    eprintln!(
        "engine {} ({}) of plugin '{}'",
        candidate.engine_name,
        hipdnn_shim::engine_id::hex_id(candidate.engine_id),
        manager.plugins[candidate.plugin_index].name
    );
    Ok((manager, candidate))
}

/// The CUDA device `candidate` runs on: with `--cuda`, for an engine that is not a
/// `--host-engine`; `None` runs it on host buffers.
pub(crate) fn device_for(
    args: &GraphRun,
    candidate: &Candidate,
) -> Result<Option<&'static CudaRuntime>, ShimError> {
    if args.cuda && !args.host_engines.contains(&candidate.engine_name) {
        Ok(Some(hipdnn_shim::harness::cuda_device()?))
    } else {
        Ok(None)
    }
}

/// The execute's wall time since `start` on stderr; on a device it includes the copies.
pub(crate) fn report_execute_time(start: Instant, on_device: bool) {
    eprintln!(
        "executed in {:.3} ms{}",
        start.elapsed().as_secs_f64() * 1e3,
        if on_device {
            " (including device copies)"
        } else {
            ""
        }
    );
}

/// A spinner on stderr while `work` runs, only when stderr is a terminal.
pub(crate) fn with_spinner<T>(message: String, work: impl FnOnce() -> T) -> T {
    if !std::io::stderr().is_terminal() {
        return work();
    }
    let spinner = indicatif::ProgressBar::new_spinner().with_message(message);
    spinner.enable_steady_tick(Duration::from_millis(100));
    let out = work();
    spinner.finish_and_clear();
    out
}

/// After an execute: the plugin's log lines flushed, then each output of `bundle` written as
/// `<uid>.npy` to `--out` (or the default directory of [`output_dir`]).
pub(crate) fn flush_and_write_outputs(
    log: &mut Log,
    args: &GraphRun,
    out_dir: Option<&Path>,
    bundle: &Bundle,
    outputs: &BTreeSet<i64>,
) -> Result<(), ShimError> {
    log.absorb_plugin_messages();
    host::flush_log(log);
    let out_dir = output_dir(args, out_dir)?;
    write_outputs(bundle, outputs, &out_dir)
}

/// `--out`, or a directory under the system temp dir named after the graph file; created.
fn output_dir(args: &GraphRun, out_dir: Option<&Path>) -> Result<PathBuf, ShimError> {
    let out_dir = out_dir.map(Path::to_path_buf).unwrap_or_else(|| {
        let stem = args
            .graph
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "graph".into());
        std::env::temp_dir().join(format!("hipdnn-shim-{stem}-outputs"))
    });
    std::fs::create_dir_all(&out_dir).map_err(|source| ShimError::Write {
        path: out_dir.clone(),
        source,
    })?;
    Ok(out_dir)
}

/// Each output of `bundle` as `<uid>.npy` in `out_dir`.
fn write_outputs(
    bundle: &Bundle,
    outputs: &BTreeSet<i64>,
    out_dir: &Path,
) -> Result<(), ShimError> {
    for &uid in outputs {
        let t = bundle.get(uid)?;
        let path = out_dir.join(format!("{uid}.npy"));
        npy::write(&path, t.host_data(), &npy::shape_of(t)).map_err(|source| ShimError::Write {
            path: path.clone(),
            source,
        })?;
        println!("output uid {uid} -> {}", path.display());
    }
    Ok(())
}

/// The forward oracle's heading of [`report_verification`].
pub(crate) fn forward_oracle_heading(mode: ValidationMode) -> String {
    format!(
        "verify against the float64 oracle ({mode} validation, tolerances of ragged-sdpa.md §8):"
    )
}

/// `heading`, one line per output, each failure under it, then PASS; a mismatch is an error.
pub(crate) fn report_verification(
    graph: &Graph,
    comparisons: &[Comparison],
    mode: ValidationMode,
    heading: &str,
) -> Result<(), ShimError> {
    let mut failures = 0;
    println!("{heading}");
    for c in comparisons {
        let name = graph
            .tensor(c.uid)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        println!(
            "  {} uid {} '{}': max abs err {:.3e}, max rel err {:.3e} over {} written positions; {} unwritten positions {}",
            if c.passed() { "OK  " } else { "FAIL" },
            c.uid,
            name,
            c.max_abs_error,
            c.max_rel_error,
            c.compared,
            c.skipped,
            if mode == ValidationMode::Coverage {
                "intact"
            } else {
                "skipped"
            }
        );
        for f in &c.failures {
            println!("       {f}");
        }
        failures += c.failure_count;
    }
    if failures > 0 {
        return Err(ShimError::Mismatch { failures });
    }
    println!("PASS");
    Ok(())
}
