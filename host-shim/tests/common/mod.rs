//! What the shim's integration tests share: the built plugin, scratch directories, and
//! `hipdnn-shim` run as a user runs it (plugin directory set, the host engine enabled, no log
//! settings inherited from the caller's environment).

// Each test crate uses its own subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    exe.parent()
        .and_then(Path::parent)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{} has no grandparent", exe.display()))
}

/// The newest build of `file` in the profile directory or its `deps/`.
pub fn shared_object(file: &str, build: &str) -> PathBuf {
    let dir = profile_dir();
    [dir.join("deps").join(file), dir.join(file)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!("{file} not built; run `{build}` (cargo test --workspace builds it)")
        })
}

pub fn plugin() -> PathBuf {
    shared_object(
        "libhipdnn_provider_ragged_sdpa.so",
        "cargo build -p ragged-plugin",
    )
}

/// An empty directory of this test process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hipdnn-shim-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

pub fn shim(args: &[&str], plugin_dir: &Path) -> (Output, String, String) {
    shim_with_env(args, plugin_dir, &[])
}

pub fn shim_with_env(
    args: &[&str],
    plugin_dir: &Path,
    env: &[(&str, &Path)],
) -> (Output, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hipdnn-shim"))
        .args(args)
        .env("HIPDNN_PLUGIN_DIR", plugin_dir)
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .env_remove("HIPDNN_LOG_LEVEL")
        .env_remove("HIPDNN_LOG_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running hipdnn-shim: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}
