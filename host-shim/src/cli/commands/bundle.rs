//! `hipdnn-shim bundle DIR`: every case of an upstream-format integration-test bundle tree run on
//! the loaded plugins' host engine and verified against the float64 oracle.
//!
//! One line per case, then `N passed, M failed, K declined`:
//! - `ran NAME on ENGINE: passed (...)`: an engine accepted, executed and matched the oracle;
//! - `declined NAME: REASON`: the stack does not take the graph — its node type is not SDPA, graph
//!   validation rejects it, or no loaded engine is applicable (the plugins' logged reasons);
//! - `failed NAME: REASON`: the case could not be loaded (files, placeholders, metadata, pinned
//!   inputs), the engine failed, or its outputs disagree with the oracle.
//!
//! Exits nonzero when any case failed. With `--cuda`, engines that are not host engines run on
//! CUDA device 0 with device buffers (inputs copied in, outputs copied back, as `run --cuda`), and
//! a case no device engine takes is declined, never run on a host engine instead (unless
//! `--engine` names one);
//! without a usable CUDA device nothing runs: the command prints `skipped: --cuda: REASON` and
//! exits with status [`SKIPPED_EXIT`], so a script never mistakes it for a pass.

use std::path::{Path, PathBuf};

use hipdnn_shim::harness::{DeviceRun, Harness, ValidationMode};
use hipdnn_shim::log::{Log, Source};
use hipdnn_shim::manager::PluginManager;
use ragged_gpu_runtime::cuda::runtime::CudaRuntime;
use ragged_schema::SchemaError;
use ragged_schema::model::Graph;

use crate::bundle_inputs;
use crate::error::ShimError;
use crate::host;
use crate::integration_bundle::{self, Loaded};
use crate::verify;

/// Seed of random inputs for a case whose metadata names none.
const DEFAULT_SEED: u64 = 0x5eed;

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Passed { engine: String, detail: String },
    Declined(String),
    Failed(String),
}

pub struct BundleRun {
    pub dir: PathBuf,
    pub plugin_dir: Option<PathBuf>,
    pub engine: Option<String>,
    pub host_engines: Vec<String>,
    pub cuda: bool,
}

/// The exit status of `bundle --cuda` without a usable CUDA device (automake's "skipped").
pub const SKIPPED_EXIT: u8 = 77;

/// How a bundle run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No case failed.
    Passed,
    Failed,
    /// Nothing ran, for this reason.
    Skipped(String),
}

pub fn run(args: &BundleRun) -> Result<Verdict, ShimError> {
    let device = match args.cuda.then(hipdnn_shim::harness::cuda_device) {
        Some(Err(e)) => {
            let reason = format!("--cuda: {e}");
            println!("skipped: {reason}");
            return Ok(Verdict::Skipped(reason));
        }
        Some(Ok(d)) => Some(d),
        None => None,
    };
    let root = tree_root(&args.dir);
    if root != args.dir {
        eprintln!(
            "bundle tree: {} ('{}' is a corpus folder: its bundles/ beside expectations.json)",
            root.display(),
            args.dir.display()
        );
    }
    let cases = integration_bundle::discover(&root).map_err(|message| ShimError::Bundle {
        path: root.clone(),
        message,
    })?;
    let mut manager = host::require_plugins(args.plugin_dir.clone())?;
    host::flush_log(&mut manager.log);
    let (mut passed, mut failed, mut declined) = (0, 0, 0);
    for case in &cases {
        let outcome = match &case.loaded {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    eprintln!("{}: {w}", case.name);
                }
                run_case(args, device, &mut manager, loaded)
            }
            Err(e) => Outcome::Failed(e.clone()),
        };
        match outcome {
            Outcome::Passed { engine, detail } => {
                passed += 1;
                println!("ran {} on {engine}: passed ({detail})", case.name);
            }
            Outcome::Declined(reason) => {
                declined += 1;
                println!("declined {}: {reason}", case.name);
            }
            Outcome::Failed(reason) => {
                failed += 1;
                println!("failed {}: {reason}", case.name);
            }
        }
    }
    println!("{passed} passed, {failed} failed, {declined} declined");
    Ok(if failed == 0 {
        Verdict::Passed
    } else {
        Verdict::Failed
    })
}

/// The bundle tree to walk: `dir`, or `dir/bundles` when `dir` is a corpus folder laid out as
/// `host-shim/tests/corpus/` is (the tree in `bundles/`, `expectations.json` beside it). Walking
/// the corpus folder itself would take `expectations.json` for a graph bundle without metadata.
fn tree_root(dir: &Path) -> PathBuf {
    let bundles = dir.join("bundles");
    if bundles.is_dir() && dir.join("expectations.json").is_file() {
        bundles
    } else {
        dir.to_path_buf()
    }
}

/// The plugins' decline lines logged since the last call, joined.
fn decline_reasons(log: &mut Log) -> String {
    log.absorb_plugin_messages();
    let reasons: Vec<String> = log
        .records()
        .iter()
        .filter(|r| r.source == Source::Plugin && r.message.contains("declin"))
        .map(|r| r.message.clone())
        .collect();
    *log = Log::default();
    if reasons.is_empty() {
        "no loaded engine is applicable".to_owned()
    } else {
        reasons.join("; ")
    }
}

fn run_case(
    args: &BundleRun,
    device: Option<&CudaRuntime>,
    manager: &mut PluginManager,
    loaded: &Loaded,
) -> Outcome {
    let graph = match Graph::from_json_value(&loaded.graph) {
        Ok(g) => g,
        Err(e @ SchemaError::UnsupportedJsonNodeType { .. }) => {
            return Outcome::Declined(e.to_string());
        }
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    if let Err(e) = graph.validate() {
        return Outcome::Declined(format!("graph validation: {e}"));
    }
    let pre = match bundle_inputs::pinned_inputs(&graph, &loaded.metadata) {
        Ok(pre) => pre,
        Err(e) => return Outcome::Failed(e),
    };
    manager.log = Log::default();
    let candidates = match host::applicable_engines(manager, &graph) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let reasons = decline_reasons(&mut manager.log);
    if candidates.is_empty() {
        return Outcome::Declined(reasons);
    }
    // `--cuda` without `--engine` runs device engines only: a case none of them takes is declined,
    // not run on a host engine and counted as a `--cuda` pass.
    let candidates = if device.is_some() && args.engine.is_none() {
        let on_device = host::device_engines(&candidates, &args.host_engines);
        if on_device.is_empty() {
            let names: Vec<&str> = candidates.iter().map(|c| c.engine_name.as_str()).collect();
            return Outcome::Declined(format!(
                "no device engine applies (--cuda); applicable: [{}], all --host-engine; {reasons}",
                names.join(", ")
            ));
        }
        on_device
    } else {
        candidates
    };
    let candidate = match host::choose(
        &candidates,
        args.engine.as_deref(),
        &args.host_engines,
        device.is_some(),
        &graph,
    ) {
        Ok(c) => c,
        Err(e) => return Outcome::Declined(e.to_string()),
    };
    let seed = bundle_inputs::seed(&loaded.metadata, DEFAULT_SEED);
    let result = (|| -> Result<(String, Vec<String>), ShimError> {
        let mut harness = Harness::new(graph.clone(), &pre, seed)?;
        let plugin = &manager.plugins[candidate.plugin_index];
        let handle = plugin.plugin.create_handle()?;
        match device {
            Some(d) if !args.host_engines.contains(&candidate.engine_name) => {
                harness.run_engine_on_device(&handle, candidate.engine_id, d)?
            }
            _ => harness.run_engine(&handle, candidate.engine_id)?,
        }
        let comparisons = verify::against_oracle(&mut harness, ValidationMode::Coverage)?;
        let mut summary = Vec::new();
        let mut problems = Vec::new();
        for c in &comparisons {
            summary.push(format!(
                "uid {} max abs err {:.2e} over {} positions",
                c.uid, c.max_abs_error, c.compared
            ));
            if !c.passed() {
                problems.push(format!(
                    "uid {}: {} position(s) disagree with the float64 oracle{}",
                    c.uid,
                    c.failure_count,
                    c.failures
                        .first()
                        .map(|f| format!(", first: {f}"))
                        .unwrap_or_default()
                ));
            }
        }
        Ok((summary.join(", "), problems))
    })();
    manager.log = Log::default();
    match result {
        Ok((detail, problems)) if problems.is_empty() => Outcome::Passed {
            engine: candidate.engine_name,
            detail,
        },
        Ok((_, problems)) => Outcome::Failed(format!(
            "on {}: {}",
            candidate.engine_name,
            problems.join("; ")
        )),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corpus_folder_is_walked_from_its_bundles_and_any_other_folder_as_it_is() {
        let dir =
            std::env::temp_dir().join(format!("hipdnn-shim-bundle-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bundles")).unwrap_or_else(|e| panic!("{e}"));
        // A bundles/ folder alone is an ordinary subtree of a bundle tree.
        assert_eq!(tree_root(&dir), dir);
        std::fs::write(dir.join("expectations.json"), "{}").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tree_root(&dir), dir.join("bundles"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
