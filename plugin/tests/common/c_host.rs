//! Builds the C hosts of `tests/c/` the one way every driver needs them: against the project's
//! ABI header, warnings as errors, under AddressSanitizer and UndefinedBehaviorSanitizer (UB
//! aborts instead of warning), so a C host that misuses the plugin's memory fails its test.

use std::path::PathBuf;
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
