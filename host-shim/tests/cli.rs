//! `hipdnn-shim` end to end, against the golden wire files (an oracle computed outside this
//! repository), the project plugin and staged copies of the fixture plugin.

mod common;

use std::path::{Path, PathBuf};

use common::{plugin, scratch, shared_object, shim, shim_with_env};

/// A copy of shared/testdata/wire (see golden/README.md).
const GOLDEN: &str = "tests/golden";

fn golden(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN).join(rel)
}

/// A copy of the fixture plugin declaring `version`, alone in its own directory.
fn fixture_dir(name: &str, versions: &[(&str, &str)]) -> PathBuf {
    let source = shared_object(
        "libhipdnn_fixture_plugin.so",
        "cargo build -p fixture-plugin",
    );
    let dir = scratch(name);
    for (file, version) in versions {
        let target = dir.join(file);
        std::fs::copy(&source, &target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
        std::fs::write(dir.join(format!("{file}.api-version")), version)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    dir
}

fn read_npy_bytes(path: &Path) -> (String, Vec<u8>) {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(file).unwrap_or_else(|e| panic!("{e}"));
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => panic!("{other:?}"),
    };
    let mut bytes = Vec::new();
    npy.into_inner()
        .read_to_end(&mut bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    (descr, bytes)
}

fn oracle(path: &Path) -> Vec<f64> {
    let (descr, bytes) = read_npy_bytes(path);
    assert_eq!(descr, "<f8");
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

#[test]
fn inspect_names_ragged_tensors_their_aux_and_the_minimum_version() {
    let (out, stdout, _) = shim(
        &["inspect", &golden("graph.json").to_string_lossy()],
        &plugin(),
    );
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("ragged via uid 5 (multiplier 1)  [q_tensor_uid]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ragged via uid 6 (multiplier 1)  [k_tensor_uid]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("minimum plugin API version: 1.3.0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("mask band left None, right Some(0), BottomRight"),
        "{stdout}"
    );

    let (_, stdout, _) = shim(
        &["inspect", &golden("graph_upstream.bin").to_string_lossy()],
        &plugin(),
    );
    assert!(stdout.contains("stamp: 1.3.0 (ceiling 1.3.0)"), "{stdout}");
}

#[test]
fn run_on_the_golden_graph_matches_the_float64_oracle() {
    let out_dir = scratch("golden-run");
    let (out, stdout, stderr) = shim(
        &[
            "run",
            &golden("graph.json").to_string_lossy(),
            "--inputs",
            &golden("inputs").to_string_lossy(),
            "--out",
            &out_dir.to_string_lossy(),
            "--verify",
        ],
        &plugin(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("PASS"), "{stdout}");

    // O: bf16 bit patterns against the float64 oracle, bf16 tolerance of ragged-sdpa.md §8.
    let (descr, bytes) = read_npy_bytes(&out_dir.join("4.npy"));
    assert_eq!(descr, "<u2");
    let o: Vec<f64> = bytes
        .chunks_exact(2)
        .map(|c| f64::from(half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))))
        .collect();
    let want = oracle(&golden("expected/4.npy"));
    assert_eq!(o.len(), want.len());
    for (i, (got, want)) in o.iter().zip(&want).enumerate() {
        assert!(
            (got - want).abs() <= 1e-2 + 1e-2 * want.abs(),
            "O[{i}]: {got} vs oracle {want}"
        );
    }

    // LSE: NaN in the oracle marks positions nothing may write; −∞ must match exactly.
    let (descr, bytes) = read_npy_bytes(&out_dir.join("9.npy"));
    assert_eq!(descr, "<f4");
    let lse: Vec<f64> = bytes
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    let want = oracle(&golden("expected/9.npy"));
    assert_eq!(lse.len(), want.len());
    for (i, (got, want)) in lse.iter().zip(&want).enumerate() {
        if want.is_nan() {
            assert!(
                got.is_nan(),
                "LSE[{i}] must be left unwritten (sentinel), got {got}"
            );
        } else if want.is_infinite() {
            assert_eq!(got, want, "LSE[{i}]");
        } else {
            assert!(
                (got - want).abs() <= 1e-3 + 1e-3 * want.abs(),
                "LSE[{i}]: {got} vs {want}"
            );
        }
    }
}

#[test]
fn a_plugin_below_the_graph_version_gets_hipdnns_skip_line() {
    let dir = fixture_dir("skip", &[("libold.so", "1.2.0")]);
    let (out, stdout, stderr) = shim(
        &[
            "run",
            &golden("graph.json").to_string_lossy(),
            "--inputs",
            &golden("inputs").to_string_lossy(),
        ],
        &dir,
    );
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains(
            "Skipping plugin 'fixture:libold' (apiVersion=1.2.0) for graph requiring at least 1.3.0"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("no engine applicable to graph 'golden_ragged_sdpa_bf16'"),
        "{stderr}"
    );
}

#[test]
fn hipdnn_log_file_receives_the_log_lines_appended() {
    let dir = fixture_dir("logfile", &[("libold.so", "1.2.0")]);
    let log = scratch("logfile-log").join("hipdnn.log");
    std::fs::write(&log, "kept from before\n").unwrap_or_else(|e| panic!("{e}"));
    let graph = golden("graph.json");
    let inputs = golden("inputs");
    let args = [
        "run",
        &*graph.to_string_lossy(),
        "--inputs",
        &*inputs.to_string_lossy(),
    ];
    let skip_line =
        "Skipping plugin 'fixture:libold' (apiVersion=1.2.0) for graph requiring at least 1.3.0";
    for _ in 0..2 {
        let (out, _, stderr) = shim_with_env(&args, &dir, &[("HIPDNN_LOG_FILE", &log)]);
        assert!(!out.status.success());
        assert!(!stderr.contains(skip_line), "log line on stderr: {stderr}");
        assert!(
            stderr.contains("no engine applicable to graph"),
            "errors stay on stderr: {stderr}"
        );
    }
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.starts_with("kept from before\n"), "{text}");
    assert_eq!(
        text.matches(skip_line).count(),
        2,
        "appended once per run: {text}"
    );
}

#[test]
fn plugins_lists_loaded_plugins_and_why_others_were_rejected() {
    let dir = fixture_dir(
        "list",
        &[
            ("liba.so", "2.0.0"),
            ("libb.so", "1.3.0-rc1"),
            ("libc.so", "v1.3.0"),
        ],
    );
    let (out, stdout, _) = shim(&["plugins"], &dir);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("plugin fixture:libb"), "{stdout}");
    assert!(
        stdout.contains("API version: \"1.3.0-rc1\" (parsed 1.3.0)"),
        "{stdout}"
    );
    assert!(stdout.contains("engine 0x"), "{stdout}");
    assert!(
        stdout.contains("liba.so]: ERROR: ENGINE PLUGIN ABI VALIDATION FAILED"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reports an unparseable API version ('v1.3.0')"),
        "{stdout}"
    );
}

#[test]
fn missing_offsets_fail_the_strict_check_naming_the_uid() {
    let (out, _, stderr) = shim(&["run", &golden("graph.json").to_string_lossy()], &plugin());
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "ragged_offset uid 5 (referenced by tensor uid 1 'q') is not in the pre-supplied inputs"
        ),
        "{stderr}"
    );
}

/// `run examples/FILE --verify --out DIR` with the project plugin: (stdout, DIR).
fn run_example(file: &str) -> (String, PathBuf) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(file);
    let out_dir = scratch(file);
    let (example, out) = (example.to_string_lossy(), out_dir.to_string_lossy());
    let (status, stdout, stderr) = shim(&["run", &example, "--verify", "--out", &out], &plugin());
    assert!(status.status.success(), "{stdout}\n{stderr}");
    (stdout, out_dir)
}

#[test]
fn the_example_graph_runs_with_its_companion_file_and_verifies() {
    let (stdout, _) = run_example("ragged_sdpa_bf16.json");
    // Batch 1 has no query rows and batch 0 only 3 of 9: 144 of 288 LSE positions stay unwritten.
    assert!(
        stdout.contains("over 144 written positions; 144 unwritten positions intact"),
        "{stdout}"
    );
}

/// The FP8 example (E4M3 in and out, every scale, LSE, both amaxes) on the host engine, each
/// output checked against the oracle's own FP8 steps; the file is the builder's graph.
#[test]
fn the_fp8_example_runs_and_verifies_every_output() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ragged_sdpa_fp8.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
    let graph = ragged_schema::model::Graph::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(graph, hipdnn_shim::graphs::fp8_example().graph());
    let (stdout, out_dir) = run_example("ragged_sdpa_fp8.json");
    for line in [
        "OK   uid 4 'o'",
        "over 9216 written positions",
        "OK   uid 9 'stats'",
        "OK   uid 26 'amax_s'",
        "OK   uid 27 'amax_o'",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    assert!(stdout.ends_with("PASS\n"), "{stdout}");
    assert!(out_dir.join("4.npy").is_file() && out_dir.join("27.npy").is_file());
}

/// The multi-node example (SDPA → residual add, O virtual) through the host engine, every output
/// checked against the float64 oracle walked over both nodes.
#[test]
fn the_multi_node_example_runs_and_verifies_against_the_graph_oracle() {
    let (stdout, out_dir) = run_example("sdpa_residual_add_bf16.json");
    // Y: Q rows 4 + 0 + 6, 4 heads, D 32, every element written (no seq_lens).
    assert!(
        stdout.contains("uid 21 'y'") && stdout.contains("over 1280 written positions"),
        "{stdout}"
    );
    assert!(
        stdout.contains("uid 9 'stats'") && stdout.ends_with("PASS\n"),
        "{stdout}"
    );
    assert!(out_dir.join("21.npy").is_file() && !out_dir.join("4.npy").exists());
}

/// One compiled plan (the example graph, override-enabled) executed through
/// ExecuteOpGraphWithOverrides for a new B = 3 and new S_max values, with the companion offsets
/// of the new shapes; the outputs verify against the float64 oracle. Without the graph flag the
/// backend's rule refuses the call before the plugin sees it.
#[test]
fn run_executes_with_shape_overrides_and_verifies() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ragged_sdpa_bf16.json");
    let dir = scratch("overrides");
    let text = std::fs::read_to_string(&example).unwrap_or_else(|e| panic!("{e}"));
    let mut graph: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    graph["is_override_shape_enabled"] = serde_json::Value::Bool(true);
    let enabled = dir.join("enabled.json");
    std::fs::write(&enabled, graph.to_string()).unwrap_or_else(|e| panic!("{e}"));
    // Q rows 3, 6, 2 (512 elements each); K/V rows 5, 12, 4 (128 each), 5, 7, 4 valid.
    let offsets = dir.join("new_shapes.offsets.json");
    std::fs::write(
        &offsets,
        r#"{"ragged_offsets": {"ragged_offset_q": [0, 1536, 4608, 5632],
                               "ragged_offset_kv": [0, 640, 2176, 2688]},
            "seq_lens": {"seq_len_kv": [5, 7, 4]}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let run = |graph: &Path| {
        let (graph, offsets) = (graph.to_string_lossy(), offsets.to_string_lossy());
        let out = dir.join("out");
        shim(
            &[
                "run",
                &graph,
                "--verify",
                "--offsets",
                &offsets,
                "--out",
                &out.to_string_lossy(),
                "--override-batch",
                "3",
                "--override-seq-q",
                "6",
                "--override-seq-kv",
                "12",
            ],
            &plugin(),
        )
    };
    let (out, stdout, stderr) = run(&enabled);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("executed through ExecuteOpGraphWithOverrides: 8 override(s)"),
        "{stderr}"
    );
    // O of the new shapes: 11 query rows x 8 heads x 64, all written.
    assert!(
        stdout.contains("over 5632 written positions") && stdout.ends_with("PASS\n"),
        "{stdout}"
    );

    let (out, _, stderr) = run(&example);
    assert!(!out.status.success());
    assert!(
        stderr.contains("shape overrides given for a graph that is not override-enabled"),
        "{stderr}"
    );
}

#[test]
fn inspect_of_the_example_graph_snapshot() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ragged_sdpa_bf16.json");
    let (out, stdout, _) = shim(&["inspect", &example.to_string_lossy()], &plugin());
    assert!(out.status.success(), "{stdout}");
    let redacted = stdout.replace(&example.to_string_lossy().into_owned(), "[graph]");
    insta::assert_snapshot!("inspect_example", redacted);
}

#[test]
fn an_engine_outside_the_host_engines_is_never_handed_host_buffers() {
    let (out, _, stderr) = shim(
        &[
            "run",
            &golden("graph.json").to_string_lossy(),
            "--inputs",
            &golden("inputs").to_string_lossy(),
            "--engine",
            "RAGGED_SDPA_HOST_REFERENCE",
            "--host-engine",
            "SOME_OTHER_ENGINE",
        ],
        &plugin(),
    );
    assert!(!out.status.success());
    assert!(
        stderr.contains("engine 'RAGGED_SDPA_HOST_REFERENCE' is not a --host-engine"),
        "{stderr}"
    );
}

/// The golden graph with one JSON fragment replaced, written to a scratch folder.
fn golden_graph_with(name: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(golden("graph.json")).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains(from), "golden graph.json has no '{from}'");
    let path = scratch(name).join("graph.json");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap_or_else(|e| panic!("{e}"));
    path
}

#[test]
fn when_no_engine_applies_the_plugins_decline_reason_reaches_the_terminal() {
    let graph = golden_graph_with("declined", "\"alibi_mask\": false", "\"alibi_mask\": true");
    let (out, _, stderr) = shim(&["run", &graph.to_string_lossy()], &plugin());
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no engine applicable to graph 'golden_ragged_sdpa_bf16'"),
        "{stderr}"
    );
    // Default log level, no HIPDNN_LOG_LEVEL: the plugin's own words, not only the shim's.
    assert!(
        stderr.contains("alibi_mask = true, need false: ALiBi is not supported"),
        "{stderr}"
    );
}

#[test]
fn inspect_exits_nonzero_on_an_invalid_graph_after_printing_the_report() {
    let graph = golden_graph_with(
        "invalid",
        "\"ragged_offset_tensor_uid\": 5",
        "\"ragged_offset_tensor_uid\": 77",
    );
    let (out, stdout, stderr) = shim(&["inspect", &graph.to_string_lossy()], &plugin());
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("validation: FAILED"), "{stdout}");
    assert!(
        stdout.contains("minimum plugin API version"),
        "the report is still printed: {stdout}"
    );
    assert!(stderr.contains("hipdnn-shim: graph '"), "{stderr}");
}
