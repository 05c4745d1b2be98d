//! The backward suite through the `ragged-conformance` binary: the project plugin's host engine
//! runs (and passes) every backward case; the fixture plugin, which has no backward, reports each
//! case declined and the run still succeeds.

mod common;

use std::path::Path;
use std::process::Command;

use common::{PLUGIN_FILE, host_reference_passes, shared_object};
use ragged_conformance::suites::backward;
use ragged_conformance::suites::gating::{FIXTURE_BUILD_COMMAND, FIXTURE_MAIN_FILE};

fn backward_suite(plugin: &Path) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ragged-conformance"))
        .args(["--suite", "backward"])
        .arg(plugin)
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .unwrap_or_else(|e| panic!("running ragged-conformance: {e}"));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), out)
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
