//! Upstream's paged bundle (`quick/SdpaFwd/paged/fp16/hd128_page16_multiseq/Small`, copied into
//! tests/corpus) through `run --verify`: its lengths and page tables from a companion file, the
//! host engine's O checked against the shim's float64 oracle; and a page id outside the pool or
//! a length beyond `max_seq_len_kv` refused at execute naming the uid and the value.

mod common;

use std::path::{Path, PathBuf};

use common::{plugin, scratch, shim};

fn bundle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/bundles/quick/SdpaFwd/paged/fp16/hd128_page16_multiseq/Small")
}

/// The metadata's pinned values, by uid.
fn pinned() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(bundle_dir().join("Small.meta.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let meta: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    meta["inputs"]
        .as_object()
        .cloned()
        .unwrap_or_else(|| panic!("inputs"))
}

fn values(pins: &serde_json::Map<String, serde_json::Value>, uid: &str) -> Vec<i64> {
    pins[uid]["values"]
        .as_array()
        .unwrap_or_else(|| panic!("uid {uid}"))
        .iter()
        .map(|v| v.as_i64().unwrap_or_else(|| panic!("{v}")))
        .collect()
}

/// `run --verify` with a companion holding `table_k`, the pinned V table and `lens_kv`.
fn run(name: &str, table_k: &[i64], lens_kv: &[i64]) -> (bool, String, String) {
    let pins = pinned();
    let companion = serde_json::json!({
        "seq_lens": {"7": values(&pins, "7"), "8": lens_kv},
        "page_tables": {"5": table_k, "6": values(&pins, "6")},
    });
    let dir = scratch(name);
    let path = dir.join("companion.json");
    std::fs::write(&path, companion.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let graph = bundle_dir().join("Small.json");
    let out = dir.join("out");
    let (status, stdout, stderr) = shim(
        &[
            "run",
            &graph.to_string_lossy(),
            "--offsets",
            &path.to_string_lossy(),
            "--verify",
            "--out",
            &out.to_string_lossy(),
        ],
        &plugin(),
    );
    (status.status.success(), stdout, stderr)
}

#[test]
fn upstreams_paged_bundle_passes_run_verify() {
    let pins = pinned();
    let (ok, stdout, stderr) = run("paged-pass", &values(&pins, "5"), &values(&pins, "8"));
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("PASS"), "{stdout}");
    assert!(stdout.contains("OK   uid 4 'O'"), "{stdout}");
}

#[test]
fn a_page_id_outside_the_pool_is_invalid_value_naming_the_table() {
    let pins = pinned();
    let mut table = values(&pins, "5");
    table[3] = 128; // sequence 0, entry 3: read (sequence 0 holds 300 keys = 19 pages)
    let (ok, stdout, stderr) = run("paged-bad-page", &table, &values(&pins, "8"));
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("HIPDNN_PLUGIN_STATUS_INVALID_VALUE")
            && stderr.contains("tensor uid 5: page_table_k[0][3] = 128 is not a page of the pool"),
        "{stderr}"
    );
    // An entry no sequence reads may hold anything.
    let mut table = values(&pins, "5");
    table[31] = 1 << 30;
    let (ok, stdout, stderr) = run("paged-unread-entry", &table, &values(&pins, "8"));
    assert!(ok, "{stdout}\n{stderr}");
}

#[test]
fn a_length_beyond_max_seq_len_kv_is_invalid_value_naming_the_lengths() {
    let pins = pinned();
    let (ok, stdout, stderr) = run("paged-long", &values(&pins, "5"), &[600, 16, 512]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("HIPDNN_PLUGIN_STATUS_INVALID_VALUE")
            && stderr.contains("tensor uid 8: seq_len_kv[0] = 600 is above the 512 keys"),
        "{stderr}"
    );
}
