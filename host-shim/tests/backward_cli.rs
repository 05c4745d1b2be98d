//! `hipdnn-shim run` on an SDPA backward graph, end to end through the project plugin's host
//! engine: `--verify` against the float64 backward oracle, `.npy` inputs and outputs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn examples(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(file)
}

/// The newest build of the plugin next to this test executable.
fn plugin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} has no grandparent", exe.display()));
    let file = "libhipdnn_provider_ragged_sdpa.so";
    [profile.join("deps").join(file), profile.join(file)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("{file} not built; run `cargo build -p ragged-plugin`"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hipdnn-shim-bwd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// `hipdnn-shim run` of the example backward graph with `extra` arguments, `--verify` and
/// `--out out`, which must succeed; its stdout.
fn verify_example(extra: &[&str], out: &Path) -> String {
    verify_example_output(extra, out).0
}

/// [`verify_example`]'s stdout and stderr.
fn verify_example_output(extra: &[&str], out: &Path) -> (String, String) {
    let graph = examples("ragged_sdpa_backward_bf16.json");
    let output = Command::new(env!("CARGO_BIN_EXE_hipdnn-shim"))
        .arg("run")
        .arg(&graph)
        .args(extra)
        .arg("--verify")
        .arg("--out")
        .arg(out)
        .env("HIPDNN_PLUGIN_DIR", plugin())
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .env_remove("HIPDNN_LOG_LEVEL")
        .env_remove("HIPDNN_LOG_FILE")
        .output()
        .unwrap_or_else(|e| panic!("running hipdnn-shim: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

fn read_bf16(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{e}"));
    npy.into_vec::<u16>()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|b| f32::from_bits(u32::from(b) << 16))
        .collect()
}

#[test]
fn the_example_backward_passes_the_float64_oracle_and_writes_three_gradients() {
    let out = scratch("verify");
    let stdout = verify_example(&[], &out);
    for name in ["'dq'", "'dk'", "'dv'"] {
        assert!(
            stdout.lines().any(|l| l.contains("OK") && l.contains(name)),
            "{name}: {stdout}"
        );
    }
    assert!(stdout.trim_end().ends_with("PASS"), "{stdout}");
    for uid in [21, 22, 23] {
        let values = read_bf16(&out.join(format!("{uid}.npy")));
        assert!(
            values.iter().any(|v| *v != 0.0 && v.is_finite()),
            "uid {uid}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// A 1-D little-endian f32 `.npy` (format version 1.0).
fn npy_f32(values: &[f32]) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        values.len()
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    values.iter().for_each(|v| out.extend(v.to_le_bytes()));
    out
}

/// A zero incoming gradient (dO from a `.npy`) gives exactly zero gradients everywhere the engine
/// writes: the input file is what the engine read.
#[test]
fn a_zero_do_from_npy_gives_zero_gradients() {
    let dir = scratch("inputs");
    let tokens_q = 18; // the companion's ragged_offset_q[B] / (H_q · D)
    let zeros = vec![0f32; tokens_q * 8 * 64];
    let file = npy_f32(&zeros);
    std::fs::write(dir.join("20.npy"), file).unwrap_or_else(|e| panic!("{e}"));
    let out = dir.join("out");
    verify_example(&["--inputs", dir.to_str().unwrap_or_default()], &out);
    let dq = read_bf16(&out.join("21.npy"));
    assert!(dq.iter().all(|v| *v == 0.0), "dQ is not all zero");
    for uid in [22, 23] {
        // K/V batch 1 has 2 padding rows (seq_len_kv 2 of 4): they keep the NaN sentinel.
        let values = read_bf16(&out.join(format!("{uid}.npy")));
        assert!(values.iter().all(|v| *v == 0.0 || v.is_nan()), "uid {uid}");
        assert_eq!(
            values.iter().filter(|v| v.is_nan()).count(),
            2 * 2 * 64,
            "uid {uid}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --cuda` on a backward graph: with a CUDA device the CUDA engine runs on device copies
/// and passes the float64 oracle. Without one the test is skipped: the command then fails with
/// the reason and runs nothing in the device engine's place (`cli_errors.rs` holds that).
#[test]
fn run_cuda_runs_the_backward_on_the_device_when_there_is_one() {
    if let Err(reason) = hipdnn_shim::harness::cuda_device() {
        // Past the test harness's capture, as the plugin's device tests print their skips.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "test run_cuda_runs_the_backward_on_the_device_when_there_is_one: skipped: {reason}"
        );
        return;
    }
    let out = scratch("cuda");
    let (stdout, stderr) = verify_example_output(&["--cuda"], &out);
    assert!(stdout.trim_end().ends_with("PASS"), "{stdout}");
    assert!(stderr.contains("engine RAGGED_SDPA_CUDA_FMHA"), "{stderr}");
    assert!(stderr.contains("(including device copies)"), "{stderr}");
    let _ = std::fs::remove_dir_all(&out);
}
