//! The backward suite through the `ragged-conformance` binary: the project plugin's host engine
//! runs (and passes) every backward case; the fixture plugin, which has no backward, reports each
//! case declined and the run still succeeds; an engine that is not a host engine is skipped with
//! the reason without `--cuda`, and with it runs on the device (where there is one).

mod common;

use std::path::Path;
use std::process::Command;

use common::{PLUGIN_FILE, host_reference_passes, shared_object};
use ragged_conformance::suites::backward;
use ragged_conformance::suites::gating::{FIXTURE_BUILD_COMMAND, FIXTURE_MAIN_FILE};

fn backward_suite(plugin: &Path) -> (bool, String) {
    let (status, out) = backward_suite_with(plugin, &[]);
    (status == Some(0), out)
}

/// The suite with `extra` arguments: the exit code and stdout + stderr.
fn backward_suite_with(plugin: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ragged-conformance"))
        .args(["--suite", "backward"])
        .args(extra)
        .arg(plugin)
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .unwrap_or_else(|e| panic!("running ragged-conformance: {e}"));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), out)
}

#[test]
fn the_project_host_engine_passes_every_backward_case() {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (ok, out) = backward_suite(&plugin);
    assert!(ok, "{out}");
    assert_eq!(
        host_reference_passes(&out),
        backward::cases().len(),
        "every backward case must run (not skip) on the host engine:\n{out}"
    );
    assert!(!out.contains("FAIL "), "{out}");
}

#[test]
fn a_plugin_without_a_backward_reports_declined_not_failed() {
    let fixture = shared_object(FIXTURE_MAIN_FILE, FIXTURE_BUILD_COMMAND);
    let (ok, out) = backward_suite(&fixture);
    assert!(ok, "{out}");
    let skips: Vec<&str> = out.lines().filter(|l| l.starts_with("SKIP ")).collect();
    assert!(!skips.is_empty(), "{out}");
    assert!(!out.contains("FAIL "), "{out}");
    assert!(out.contains("declined"), "{out}");
}

/// Without `--cuda` an engine that is not a `--host-engine` must not be handed host buffers: with
/// the host reference named out of the host engines, each of its cases is a skip saying why.
#[test]
fn a_non_host_engine_without_cuda_is_skipped_with_the_reason() {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (code, out) = backward_suite_with(&plugin, &["--host-engine", "NO_SUCH_ENGINE"]);
    assert_eq!(code, Some(0), "{out}");
    let count = |f: &dyn Fn(&str) -> bool| out.lines().filter(|l| f(l)).count();
    let skips =
        count(&|l| l.starts_with("SKIP hipdnn_provider_ragged_sdpa::RAGGED_SDPA_HOST_REFERENCE::"));
    let reasons = count(&|l| l.contains("is not a --host-engine and no --cuda device was given"));
    assert_eq!(skips, backward::cases().len(), "{out}");
    assert_eq!(reasons, skips, "each skip says why:\n{out}");
    assert_eq!(host_reference_passes(&out), 0, "{out}");
}

/// `--cuda`: on a CUDA machine the CUDA engine runs every case it accepts on device buffers and
/// none fails; without a device the run stops with the reason (exit status 2), as the numeric
/// suite's `--cuda` does, and the device half is reported skipped.
#[test]
fn with_cuda_the_cuda_engine_runs_the_backward_on_device_buffers() {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (code, out) = backward_suite_with(&plugin, &["--cuda"]);
    match hipdnn_shim::harness::cuda_device() {
        Ok(_) => {
            assert_eq!(code, Some(0), "{out}");
            let passes = |engine: &str| {
                let prefix = format!("PASS hipdnn_provider_ragged_sdpa::{engine}::");
                out.lines().filter(|l| l.starts_with(&prefix)).count()
            };
            let cuda_passes = passes("RAGGED_SDPA_CUDA_FMHA");
            assert!(cuda_passes > 0, "{out}");
            // The non-deterministic twin runs the same backward cases within the same tolerances.
            assert_eq!(
                passes("RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC"),
                cuda_passes,
                "{out}"
            );
            assert!(!out.contains("FAIL "), "{out}");
        }
        Err(reason) => {
            assert_eq!(code, Some(2), "{out}");
            assert!(out.contains("--cuda: "), "{out}");
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "test with_cuda_the_cuda_engine_runs_the_backward_on_device_buffers: the device \
                 half skipped: {reason}"
            );
        }
    }
}
