//! Builds the C hosts of `tests/c/` the one way every driver needs them: against the project's
//! ABI header, warnings as errors, under AddressSanitizer and UndefinedBehaviorSanitizer (UB
//! aborts instead of warning), so a C host that misuses the plugin's memory fails its test.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `tests/c/<source>` into `<test tmpdir>/<dir>/<output_name>` and returns the binary.
pub fn compile(source: &str, dir: &str, output_name: &str, extra: &[&str]) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = manifest.join("tests/c").join(source);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let binary = dir.join(output_name);
    let parent = binary.parent().unwrap_or(&dir);
    std::fs::create_dir_all(parent).expect("scratch dir");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
        .args([
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
        ])
        .arg("-I")
        .arg(manifest.join("include"))
        .args(extra)
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .arg("-ldl")
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler {cc}: {e}"));
    assert!(
        output.status.success(),
        "C compile failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    binary
}

/// Runs a C host as `host PLUGIN.so GRAPH CONFIG DIR UID...` on the host engine and returns
/// its stdout; a failed run fails the test with both streams.
pub fn run(
    host: &Path,
    graph: &Path,
    config: &Path,
    dir: &Path,
    uids: impl IntoIterator<Item = String>,
) -> String {
    let output = Command::new(host)
        .arg(super::plugin_path())
        .arg(graph)
        .arg(config)
        .arg(dir)
        .args(uids)
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .expect("C host runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "C host failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
