//! `cargo xtask` asked for help prints its usage on stdout and succeeds; called without a command
//! or with an unknown one it prints the usage on stderr and exits 2, so a script tells them apart.

use std::process::{Command, Output};

fn xtask(args: &[&str]) -> (Output, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running xtask: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

#[test]
fn help_prints_the_usage_and_succeeds() {
    for flag in ["--help", "-h", "help"] {
        let (out, stdout, stderr) = xtask(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {stdout}{stderr}");
        assert!(
            stdout.starts_with("usage: cargo xtask <command>"),
            "{flag}: {stdout}"
        );
        for command in ["codegen [--check]", "dist [--release]", "demo"] {
            assert!(stdout.contains(command), "{flag}: {stdout}");
        }
        assert!(stderr.is_empty(), "{flag}: {stderr}");
    }
}

#[test]
fn no_command_or_an_unknown_one_is_a_usage_error() {
    let (out, stdout, stderr) = xtask(&[]);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.starts_with("usage: cargo xtask <command>"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");

    let (out, _, stderr) = xtask(&["bogus"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("xtask: unknown command 'bogus'\n\nusage: cargo xtask <command>"),
        "{stderr}"
    );
}
