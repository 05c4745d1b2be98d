//! `cargo xtask demo`: the main job. Builds `hipdnn-shim` and the plugin (release), points
//! `HIPDNN_PLUGIN_DIR` at the built plugin (the shim itself lists the CPU host engine: it sets
//! `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` when the environment leaves it unset), and runs the example
//! ragged SDPA graph with `--verify`, so the exit status says whether the plugin's output agrees
//! with the shim's float64 oracle — an evaluation of the SDPA formula that shares no code with the
//! host engine (which is kernels' CPU reference), so a wrong host engine fails the demo. Then it
//! runs the test corpus (`hipdnn-shim bundle`), every SDPA feature the plugin accepts, against the
//! same oracle.

use std::path::{Path, PathBuf};
use std::process::Command;

const EXAMPLE_GRAPH: &str = "examples/ragged_sdpa_bf16.json";
/// The test corpus in upstream's integration-test bundle format (host-shim/tests/corpus).
const CORPUS: &str = "host-shim/tests/corpus/bundles";
const PLUGIN_FILE: &str = "libhipdnn_provider_ragged_sdpa.so";
/// Named explicitly: on a GPU machine the plugin lists its GPU engines first.
const HOST_ENGINE: &str = "RAGGED_SDPA_HOST_REFERENCE";

/// Where cargo puts build outputs for this checkout (honouring `CARGO_TARGET_DIR`).
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                root.join(dir)
            }
        }
        _ => root.join("target"),
    }
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!("unexpected argument '{extra}' (demo takes none)"));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("xtask demo: building hipdnn-shim and the plugin (release)");
    let status = Command::new(&cargo)
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "hipdnn-shim",
            "-p",
            "ragged-plugin",
        ])
        .status()
        .map_err(|e| format!("running cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed ({status})"));
    }

    let release = target_dir(root).join("release");
    let plugin = release.join(PLUGIN_FILE);
    let shim = release.join("hipdnn-shim");
    for built in [&plugin, &shim] {
        if !built.is_file() {
            return Err(format!("{} was not produced by the build", built.display()));
        }
    }
    let out_dir = target_dir(root).join("demo-outputs");
    eprintln!(
        "xtask demo: HIPDNN_PLUGIN_DIR={} hipdnn-shim run {EXAMPLE_GRAPH} --engine {HOST_ENGINE} --verify",
        plugin.display()
    );
    let status = Command::new(&shim)
        .current_dir(root)
        .env("HIPDNN_PLUGIN_DIR", &plugin)
        .args([
            "run",
            EXAMPLE_GRAPH,
            "--engine",
            HOST_ENGINE,
            "--verify",
            "--out",
        ])
        .arg(&out_dir)
        .status()
        .map_err(|e| format!("running {}: {e}", shim.display()))?;
    if !status.success() {
        return Err(format!(
            "hipdnn-shim run --verify failed ({status}): the plugin's output disagrees with the float64 oracle or the run failed"
        ));
    }
    eprintln!("xtask demo: hipdnn-shim bundle {CORPUS}");
    let status = Command::new(&shim)
        .current_dir(root)
        .env("HIPDNN_PLUGIN_DIR", &plugin)
        .args(["bundle", CORPUS, "--engine", HOST_ENGINE])
        .status()
        .map_err(|e| format!("running {}: {e}", shim.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "hipdnn-shim bundle {CORPUS} failed ({status}): a corpus case disagrees with the float64 oracle or could not run"
        ))
    }
}
