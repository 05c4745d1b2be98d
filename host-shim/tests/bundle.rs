//! `hipdnn-shim bundle`: the project's corpus in upstream's bundle format (tests/corpus, written by
//! its generate.py) runs on the plugin's host engine against the float64 oracle with exactly the
//! outcomes its expectations.json records; and the command's own behaviour on bundles written
//! here (loading failures, declines, sweeps, the closing line, the exit status).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{plugin, scratch, shim};

fn bundle(dir: &Path) -> (Output, String, String) {
    shim(&["bundle", &dir.to_string_lossy()], &plugin())
}

/// Case name → (outcome word, rest of the line), from the per-case lines.
fn outcomes(stdout: &str) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let Some((word, rest)) = line.split_once(' ') else {
            continue;
        };
        let name_end = match word {
            "ran" => rest.find(" on "),
            "declined" | "failed" => rest.find(": "),
            _ => None,
        };
        if let Some(end) = name_end {
            let outcome = if word == "ran" && rest.contains(": passed (") {
                "pass"
            } else {
                word
            };
            out.insert(
                rest[..end].to_owned(),
                (outcome.to_owned(), rest[end..].to_owned()),
            );
        }
    }
    out
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

#[test]
fn the_corpus_runs_with_the_recorded_outcomes() {
    let text = std::fs::read_to_string(corpus().join("expectations.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let expected: BTreeMap<String, String> = manifest["cases"]
        .as_object()
        .unwrap_or_else(|| panic!("expectations.json has a cases object"))
        .iter()
        .map(|(k, v)| (k.clone(), v["expect"].as_str().unwrap_or("?").to_owned()))
        .collect();

    // The corpus folder as README.md names it: the shim walks its bundles/ tree.
    let (out, stdout, stderr) = bundle(&corpus());
    assert!(
        stderr.contains(&format!(
            "bundle tree: {} ('{}' is a corpus folder: its bundles/ beside expectations.json)",
            corpus().join("bundles").display(),
            corpus().display()
        )),
        "{stderr}"
    );
    let got = outcomes(&stdout);
    let mut problems = Vec::new();
    for (name, want) in &expected {
        match got.get(name) {
            None => problems.push(format!("{name}: not run")),
            Some((outcome, _)) if outcome == want => {}
            Some((outcome, line)) if outcome == "pass" => problems.push(format!(
                "{name}: now passes ({line}); flip it to \"pass\" in tests/corpus/expectations.json"
            )),
            Some((outcome, line)) => {
                problems.push(format!("{name}: expected {want}, got {outcome}{line}"))
            }
        }
    }
    for name in got.keys().filter(|n| !expected.contains_key(*n)) {
        problems.push(format!("{name}: ran but is not in expectations.json"));
    }
    assert!(
        problems.is_empty(),
        "{}\n\n{stdout}\n{stderr}",
        problems.join("\n")
    );

    let passes = expected.values().filter(|e| *e == "pass").count();
    let declines = expected.len() - passes;
    assert!(
        stdout.contains(&format!("{passes} passed, 0 failed, {declines} declined")),
        "{stdout}"
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(passes >= 19, "the corpus shrank: {passes} passing cases");
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

const META: &str = r#"{"format_version": 1, "generator": "test", "reference_source": "oracle"}"#;

/// A dense [B, H, S, D] SDPA graph over BSHD strides; `scale` and `dims` are substituted in.
fn dense_graph(q_dims: &str, q_strides: &str) -> String {
    format!(
        r#"{{"name": "t", "io_data_type": "float", "compute_data_type": "float",
        "intermediate_data_type": "float",
        "nodes": [{{"type": "SdpaAttributes", "name": "",
          "inputs": {{"q_tensor_uid": 0, "k_tensor_uid": 1, "v_tensor_uid": 2}},
          "outputs": {{"o_tensor_uid": 3}},
          "attributes": {{"attn_scale_value": "${{case.scale}}", "right_bound": 0}}}}],
        "tensors": [
          {{"uid": 0, "name": "Q", "dims": {q_dims}, "strides": {q_strides}, "data_type": "float", "virtual": false}},
          {{"uid": 1, "name": "K", "dims": [1, 1, 3, 4], "strides": [12, 4, 4, 1], "data_type": "float", "virtual": false}},
          {{"uid": 2, "name": "V", "dims": [1, 1, 3, 4], "strides": [12, 4, 4, 1], "data_type": "float", "virtual": false}},
          {{"uid": 3, "name": "O", "dims": {q_dims}, "strides": {q_strides}, "data_type": "float", "virtual": false}}]}}"#
    )
}

#[test]
fn each_case_gets_one_line_and_a_failure_sets_the_exit_status() {
    let root = scratch("lines");
    // A sweep of three: one runs, one lacks a placeholder value, one lacks its metadata.
    let template = dense_graph("\"${case.dims}\"", "\"${case.strides}\"");
    write(&root.join("quick/Sweep/graph.template.json"), &template);
    write(
        &root.join("quick/Sweep/sweep.json"),
        &format!(
            r#"{{"version": 1, "cases": [
              {{"id": "ok", "values": {{"scale": 0.5, "tensors": [
                 {{"uid": 0, "dims": [1, 2, 3, 4], "strides": [24, 4, 8, 1]}},
                 {{"uid": 3, "dims": [1, 2, 3, 4], "strides": [24, 4, 8, 1]}}]}}, "metadata": {META}}},
              {{"id": "no_scale", "values": {{"tensors": [
                 {{"uid": 0, "dims": [1, 2, 3, 4], "strides": [24, 4, 8, 1]}},
                 {{"uid": 3, "dims": [1, 2, 3, 4], "strides": [24, 4, 8, 1]}}]}}, "metadata": {META}}},
              {{"id": "no_meta", "values": {{}}}}]}}"#
        ),
    );
    // A single graph whose node type is not SDPA, and one without its metadata sidecar.
    write(
        &root.join("quick/Matmul/Small/Small.json"),
        r#"{"name": "", "io_data_type": "float", "compute_data_type": "float",
           "intermediate_data_type": "float", "tensors": [],
           "nodes": [{"type": "MatmulAttributes", "name": "mm"}]}"#,
    );
    write(&root.join("quick/Matmul/Small/Small.meta.json"), META);
    write(
        &root.join("quick/Matmul/Small/Small.support.json"),
        r#"{"claims": {}, "version": 1}"#,
    );
    write(&root.join("quick/Lonely/Small.json"), "{}");

    let (out, stdout, stderr) = bundle(&root);
    let got = outcomes(&stdout);
    let line = |name: &str| {
        got.get(name)
            .map(|(o, rest)| format!("{o}{rest}"))
            .unwrap_or_else(|| panic!("no line for {name}:\n{stdout}\n{stderr}"))
    };
    assert!(line("quick/Sweep#ok").starts_with("pass on RAGGED_SDPA_HOST_REFERENCE"));
    assert_eq!(
        line("quick/Sweep#no_scale"),
        "failed: placeholder ${case.scale} has no value"
    );
    assert_eq!(
        line("quick/Sweep#no_meta"),
        "failed: the case's metadata is not a JSON object"
    );
    assert_eq!(
        line("quick/Matmul/Small/Small"),
        "declined: JSON graph: node 0 has type \"MatmulAttributes\", only \"SdpaAttributes\", \"SdpaBackwardAttributes\" and \"PointwiseAttributes\" can be read"
    );
    assert!(
        line("quick/Lonely/Small").starts_with("failed: no metadata sidecar '"),
        "{stdout}"
    );
    assert_eq!(got.len(), 5, "{stdout}");
    assert!(
        stdout.ends_with("1 passed, 3 failed, 1 declined\n"),
        "{stdout}"
    );
    assert!(!out.status.success());
}

#[test]
fn a_graph_the_plugin_declines_shows_the_plugins_reason_and_exits_zero() {
    let root = scratch("declined");
    let graph = dense_graph("[1, 2, 3, 4]", "[24, 4, 8, 1]")
        .replace("\"${case.scale}\"", "0.5")
        .replace(
            "\"right_bound\": 0",
            "\"right_bound\": 0, \"alibi_mask\": true",
        );
    write(&root.join("quick/Alibi/Small.json"), &graph);
    write(&root.join("quick/Alibi/Small.meta.json"), META);
    let (out, stdout, stderr) = bundle(&root);
    assert!(
        stdout.contains("declined quick/Alibi/Small: [hipdnn_provider_ragged_sdpa] declining graph: alibi_mask = true, need false: ALiBi is not supported"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.ends_with("0 passed, 0 failed, 1 declined\n"),
        "{stdout}"
    );
    assert!(out.status.success());
}

/// `bundle --cuda`: on a machine without a usable CUDA device nothing runs and the reason is
/// printed with exit status 77 (never a silent pass); with one, the corpus runs on the device
/// with no failure.
#[test]
fn bundle_on_cuda_runs_on_the_device_or_skips_with_the_reason() {
    let (out, stdout, stderr) = shim(
        &["bundle", &corpus().to_string_lossy(), "--cuda"],
        &plugin(),
    );
    match out.status.code() {
        Some(77) => {
            assert!(stdout.starts_with("skipped: --cuda: "), "{stdout}");
            assert!(!stdout.contains(" passed ("), "{stdout}");
            eprintln!("{}", stdout.trim());
        }
        status => {
            assert_eq!(status, Some(0), "{stdout}\n{stderr}");
            assert!(stdout.contains(" 0 failed, "), "{stdout}");
        }
    }
}
