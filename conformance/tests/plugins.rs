//! CI's conformance run: the `ragged-conformance` binary against the fixture plugin and the
//! project plugin, both built by `cargo test --workspace` into the profile directory. A missing
//! shared object fails with the command that builds it.

mod common;

use std::path::Path;
use std::process::Command;

use common::{PLUGIN_FILE, host_reference_passes, shared_object};
use ragged_conformance::suites::gating::{FIXTURE_BUILD_COMMAND, FIXTURE_MAIN_FILE};

/// Runs the binary; returns (success, stdout, JUnit XML).
fn conformance(name: &str, args: &[&str], plugin: &Path) -> (bool, String, String) {
    let junit = common::scratch(name).join("junit.xml");
    let output = Command::new(env!("CARGO_BIN_EXE_ragged-conformance"))
        .args(args)
        .arg("--fixture-dir")
        .arg(common::profile_dir())
        .arg("--junit")
        .arg(&junit)
        .arg(plugin)
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .unwrap_or_else(|e| panic!("running ragged-conformance: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let xml = std::fs::read_to_string(&junit).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            junit.display()
        )
    });
    (output.status.success(), format!("{stdout}{stderr}"), xml)
}

#[test]
fn fixture_plugin_passes_every_suite() {
    let fixture = shared_object(FIXTURE_MAIN_FILE, FIXTURE_BUILD_COMMAND);
    let (ok, out, xml) = conformance("ci-fixture", &[], &fixture);
    assert!(ok, "{out}");
    assert!(xml.contains("failures=\"0\""), "{xml}");
    // The gating matrix rows and the fixture's own row all ran.
    assert!(out.contains("PASS fixture \"1.3.0\" + override"), "{out}");
    assert!(
        out.contains("PASS libhipdnn_fixture_plugin.so declared \"1.4.0\""),
        "{out}"
    );
    // 7 base + 12 engine functions + GetEngineName, and nothing else.
    assert!(
        out.contains("PASS libhipdnn_fixture_plugin.so::symbol_hygiene")
            && out.contains("20 exported symbols, all plugin-API functions"),
        "{out}"
    );
}

#[test]
fn project_plugin_passes_gating_and_numeric_on_the_host_engine() {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (ok, out, _) = conformance(
        "ci-plugin",
        &["--suite", "gating", "--suite", "numeric"],
        &plugin,
    );
    assert!(ok, "{out}");
    assert!(out.contains("declared \"1.4.0\""), "{out}");
    assert_eq!(
        host_reference_passes(&out),
        ragged_conformance::suites::numeric::cases().len(),
        "every numeric case must run (not skip) on the host engine:\n{out}"
    );
}

/// The host engine runs every multi-node case (SDPA → pointwise, pointwise-only, both ragged
/// dims orders) and agrees with the CPU graph executor; no case may be a "declined" skip.
#[test]
fn project_plugin_runs_the_multi_node_suite_on_the_host_engine() {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (ok, out, _) = conformance("ci-plugin-multi-node", &["--suite", "multi-node"], &plugin);
    assert!(ok, "{out}");
    assert_eq!(
        host_reference_passes(&out),
        hipdnn_shim::multi_node_graphs::cases().len(),
        "every multi-node case must run on the host engine:\n{out}"
    );
}

#[test]
fn project_plugin_passes_the_abi_suite() {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (ok, out, _) = conformance("ci-plugin-abi", &["--suite", "abi"], &plugin);
    assert!(ok, "{out}");
    // Both run an execute on the host engine (a skip would prove nothing).
    for check in [
        "set_stream_on_a_live_handle",
        "runtime_pass_by_value_scale_executes",
        "execute_with_overrides",
    ] {
        let lines: Vec<&str> = out.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains(&format!("{PLUGIN_FILE}::{check}")));
        let (line, detail) = at.map_or(("", ""), |i| {
            (lines[i], lines.get(i + 1).copied().unwrap_or_default())
        });
        assert!(
            line.starts_with("PASS ") && detail.contains("match the CPU reference"),
            "{check}: {line} / {detail}\n{out}"
        );
    }
}

/// The project plugin exports all 24 functions, so both optional checks must really run.
#[test]
fn project_plugin_passes_the_override_and_serialization_checks() {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (ok, out, _) = conformance("ci-plugin-optional", &["--suite", "abi"], &plugin);
    assert!(ok, "{out}");
    for wanted in [
        format!("PASS {PLUGIN_FILE}::symbol_hygiene"),
        "24 exported symbols, all plugin-API functions".to_owned(),
        format!("PASS {PLUGIN_FILE}::execute_with_overrides"),
        "offsets left at [B+1] of the compiled graph: HIPDNN_PLUGIN_STATUS_INVALID_VALUE"
            .to_owned(),
        format!("PASS {PLUGIN_FILE}::serialized_context_round_trip"),
        "bit-identical outputs".to_owned(),
        "one flipped byte: BAD_PARAM".to_owned(),
        "foreign bytes (a serialized graph): BAD_PARAM".to_owned(),
    ] {
        assert!(out.contains(&wanted), "missing {wanted:?}:\n{out}");
    }
}

#[test]
fn a_failing_plugin_makes_the_run_exit_nonzero_and_reports_the_failure() {
    let fixture = shared_object(FIXTURE_MAIN_FILE, FIXTURE_BUILD_COMMAND);
    let dir = common::scratch("ci-rejected");
    let staged = dir.join("libmajor2.so");
    std::fs::copy(&fixture, &staged).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("libmajor2.so.api-version"), "2.0.0").unwrap_or_else(|e| panic!("{e}"));
    let (ok, out, xml) = conformance("ci-rejected-run", &["--suite", "abi"], &staged);
    assert!(!ok, "a plugin rejected at load must fail the run:\n{out}");
    assert!(out.contains("FAIL libmajor2.so::load_sequence"), "{out}");
    assert!(out.contains("ENGINE PLUGIN ABI VALIDATION FAILED"), "{out}");
    assert!(xml.contains("failures=\"1\""), "{xml}");
}

/// An optional-feature suite: its `cases` all run on the project's host engine and agree with the
/// CPU reference, and a plugin without the feature (the fixture) is reported as declining every
/// case, not failing.
fn optional_suite_passes_on_the_host_engine_and_declines_on_the_fixture(suite: &str, cases: usize) {
    let plugin = shared_object(PLUGIN_FILE, "cargo build -p ragged-plugin");
    let (ok, out, _) = conformance(&format!("ci-plugin-{suite}"), &["--suite", suite], &plugin);
    assert!(ok, "{out}");
    assert_eq!(
        host_reference_passes(&out),
        cases,
        "every {suite} case must run on the host engine:\n{out}"
    );
    let fixture = shared_object(FIXTURE_MAIN_FILE, FIXTURE_BUILD_COMMAND);
    let (ok, out, xml) = conformance(
        &format!("ci-fixture-{suite}"),
        &["--suite", suite],
        &fixture,
    );
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("0 passed, 0 failed, 0 skipped, {cases} declined")),
        "{out}"
    );
    assert!(
        xml.contains("failures=\"0\"") && xml.contains("declined: engine"),
        "{xml}"
    );
}

/// The serving suite (paged K/V, sinks).
#[test]
fn serving_cases_pass_on_the_host_engine_and_a_declining_plugin_is_declined_not_failed() {
    optional_suite_passes_on_the_host_engine_and_declines_on_the_fixture(
        "serving",
        hipdnn_shim::serving_graphs::cases().len(),
    );
}

/// The FP8 suite.
#[test]
fn fp8_cases_pass_on_the_host_engine_and_a_declining_plugin_is_declined_not_failed() {
    optional_suite_passes_on_the_host_engine_and_declines_on_the_fixture(
        "fp8",
        ragged_conformance::suites::fp8::cases().len(),
    );
}
