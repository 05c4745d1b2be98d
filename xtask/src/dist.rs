//! `cargo xtask dist [--release]`: builds the plugin and lays out hipDNN's drop-in directory
//! `lib/hipdnn_plugins/engines/` (git-ignored) with `libhipdnn_provider_ragged_sdpa.so` in it.
//!
//! hipDNN scans `hipdnn_plugins/engines/` next to its backend library (or `HIPDNN_PLUGIN_DIR`), so
//! copying `lib/` beside `libhipdnn_backend.so`, or pointing `HIPDNN_PLUGIN_DIR` at the engines
//! folder, installs the plugin.

use std::path::{Path, PathBuf};
use std::process::Command;

const PLUGIN_FILE: &str = "libhipdnn_provider_ragged_sdpa.so";

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let release = match args {
        [] => false,
        [flag] if flag == "--release" => true,
        other => {
            return Err(format!(
                "unexpected arguments {other:?}; usage: cargo xtask dist [--release]"
            ));
        }
    };
    let profile = if release { "release" } else { "debug" };

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = Command::new(&cargo);
    build
        .current_dir(root)
        .args(["build", "-p", "ragged-plugin", "--lib"]);
    if release {
        build.arg("--release");
    }
    let status = build
        .status()
        .map_err(|e| format!("cannot run `{cargo} build`: {e}"))?;
    if !status.success() {
        return Err(format!("`cargo build -p ragged-plugin` failed ({status})"));
    }

    let built = target_dir(root).join(profile).join(PLUGIN_FILE);
    if !built.is_file() {
        return Err(format!("the build did not produce {}", built.display()));
    }
    let engines = root.join("lib").join("hipdnn_plugins").join("engines");
    std::fs::create_dir_all(&engines)
        .map_err(|e| format!("cannot create {}: {e}", engines.display()))?;
    let installed = engines.join(PLUGIN_FILE);
    std::fs::copy(&built, &installed).map_err(|e| {
        format!(
            "cannot copy {} to {}: {e}",
            built.display(),
            installed.display()
        )
    })?;
    println!("{}", installed.display());
    Ok(())
}

/// Where cargo put the build: `CARGO_TARGET_DIR` (relative to the workspace root) or `target/`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_arguments_are_refused_before_building() {
        let err = run(Path::new("/nonexistent"), &["--debug".to_owned()]);
        assert_eq!(
            err,
            Err(
                "unexpected arguments [\"--debug\"]; usage: cargo xtask dist [--release]"
                    .to_owned()
            )
        );
    }
}
