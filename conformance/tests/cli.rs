//! The `ragged-conformance` command line: a run that names no plugin is a usage error (it would
//! certify nothing), and fixture plugins missing from the profile directory are named with the
//! command that builds them there.

mod common;

use std::process::{Command, Output};

fn conformance(args: &[&str]) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ragged-conformance"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running ragged-conformance: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn no_plugin_argument_is_a_usage_error() {
    let (out, text) = conformance(&[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("the following required arguments were not provided:\n  <PLUGINS>..."),
        "{text}"
    );
    assert!(text.contains("Usage: ragged-conformance "), "{text}");
    // Nothing ran: no suite printed a case.
    assert!(!text.contains("PASS "), "{text}");

    let (out, text) = conformance(&["--suite", "gating"]);
    assert_eq!(out.status.code(), Some(2), "{text}");
}

#[test]
fn missing_fixtures_name_every_path_and_the_command_for_the_profile() {
    let release = common::scratch("cli-fixtures").join("release");
    std::fs::create_dir_all(&release).unwrap_or_else(|e| panic!("{e}"));
    let (out, text) = conformance(&[
        "--suite",
        "gating",
        "--fixture-dir",
        &release.to_string_lossy(),
        "/nonexistent/libplugin.so",
    ]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let missing = [
        release.join("deps/libhipdnn_fixture_plugin.so"),
        release.join("libhipdnn_fixture_plugin.so"),
        release.join("examples/libhipdnn_fixture_no_api_version.so"),
        release.join("examples/libhipdnn_fixture_with_overrides.so"),
    ];
    for path in missing {
        assert!(text.contains(&path.display().to_string()), "{text}");
    }
    assert!(
        text.contains("build them with `cargo build --release -p fixture-plugin --lib --examples`"),
        "{text}"
    );
}
