//! A C program, compiled here with the system C compiler against `include/hipdnn_engine_plugin.h`,
//! `dlopen()`s the plugin and runs the golden ragged SDPA graph end to end: the plugin works for a
//! C host, not only through Rust's view of its ABI.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use common::golden::{BF16_SENTINEL, bf16_to_f64, check_against_oracle, golden_file, npy};
use common::plugin_path;
use common::problem::SENTINEL;

/// Compiles `tests/c/<source>` with the system C compiler into the test's scratch folder, against
/// the project's ABI header and under AddressSanitizer and UndefinedBehaviorSanitizer (UB aborts
/// instead of warning), so a C host that misuses the plugin's memory fails the test.
fn compile(source: &str, output_name: &str, extra: &[&str]) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("include");
    let source = manifest.join("tests/c").join(source);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_build");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let binary = dir.join(output_name);
    if let Some(parent) = binary.parent() {
        std::fs::create_dir_all(parent).expect("scratch dir");
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
        .args([
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
        ])
        .arg("-I")
        .arg(&include)
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

/// Compiled once per test binary: tests run in parallel and must not rewrite a running file.
fn compile_host() -> PathBuf {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| compile("run_graph.c", "run_graph", &[]))
        .clone()
}

/// Writes the golden inputs and sentinel-filled outputs as `<uid>.bin` into a fresh folder;
/// returns the folder and the uids in variant-pack order.
fn golden_variant_pack(name: &str) -> (PathBuf, Vec<i64>) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let o_len = npy::<f64>("expected/4.npy").len();
    let lse_len = npy::<f64>("expected/9.npy").len();
    let files: Vec<(i64, Vec<u8>)> = vec![
        (1, le_bytes(&npy::<u16>("inputs/1.npy"), u16::to_le_bytes)),
        (2, le_bytes(&npy::<u16>("inputs/2.npy"), u16::to_le_bytes)),
        (3, le_bytes(&npy::<u16>("inputs/3.npy"), u16::to_le_bytes)),
        (5, le_bytes(&npy::<i32>("inputs/5.npy"), i32::to_le_bytes)),
        (6, le_bytes(&npy::<i32>("inputs/6.npy"), i32::to_le_bytes)),
        (4, le_bytes(&vec![BF16_SENTINEL; o_len], u16::to_le_bytes)),
        (9, le_bytes(&vec![SENTINEL; lse_len], u32::to_le_bytes)),
    ];
    for (uid, bytes) in &files {
        std::fs::write(dir.join(format!("{uid}.bin")), bytes).expect("write input");
    }
    (dir, files.iter().map(|(uid, _)| *uid).collect())
}

fn le_bytes<T: Copy, const N: usize>(values: &[T], to_le: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| to_le(v)).collect()
}

#[test]
fn a_c_host_runs_the_golden_graph_through_dlopen() {
    let host = compile_host();
    let (dir, uids) = golden_variant_pack("c_program_golden");
    let (o_ref, lse_ref) = (npy::<f64>("expected/4.npy"), npy::<f64>("expected/9.npy"));

    let output = Command::new(&host)
        .arg(plugin_path())
        .arg(golden_file("graph_flagged.bin"))
        .arg(golden_file("engine_config.bin"))
        .arg(&dir)
        .args(uids.iter().map(i64::to_string))
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .expect("C host runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "C host failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("API 1.4.0"), "{stdout}");
    assert!(
        stdout.contains("engine RAGGED_SDPA_HOST_REFERENCE = 8202884889727546333"),
        "{stdout}"
    );

    let o_bytes = std::fs::read(dir.join("4.out")).expect("O written back");
    let o: Vec<u16> = o_bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let o_got: Vec<f64> = o.iter().map(|&b| bf16_to_f64(b)).collect();
    let o_untouched: Vec<bool> = o.iter().map(|&b| b == BF16_SENTINEL).collect();
    check_against_oracle("O", &o_got, &o_untouched, &o_ref, 1e-2);

    let lse_bytes = std::fs::read(dir.join("9.out")).expect("LSE written back");
    let lse: Vec<u32> = lse_bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let lse_got: Vec<f64> = lse.iter().map(|&b| f64::from(f32::from_bits(b))).collect();
    let lse_untouched: Vec<bool> = lse.iter().map(|&b| b == SENTINEL).collect();
    check_against_oracle("LSE", &lse_got, &lse_untouched, &lse_ref, 1e-3);
}

/// With a GPU runtime loadable, the host engine is listed only on request: a C host that does not
/// ask sees no engine (hipDNN would reject the plugin), one that sets the variable sees it.
#[test]
fn next_to_a_gpu_runtime_the_host_engine_needs_the_environment_variable() {
    let host = compile_host();
    let fake = compile(
        "fake_gpu_runtime.c",
        "cuda_runtime/libcuda.so.1",
        &["-shared", "-fPIC"],
    );
    let runtime_dir = fake.parent().expect("scratch dir").to_path_buf();
    let (dir, uids) = golden_variant_pack("c_program_gpu_runtime");
    let run = |enable: bool| {
        let mut command = Command::new(&host);
        command
            .arg(plugin_path())
            .arg(golden_file("graph_flagged.bin"))
            .arg(golden_file("engine_config.bin"))
            .arg(&dir)
            .args(uids.iter().map(i64::to_string))
            .env("LD_LIBRARY_PATH", &runtime_dir)
            .env_remove("HIPDNN_RAGGED_SDPA_HOST_ENGINE");
        if enable {
            command.env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1");
        }
        command.output().expect("C host runs")
    };

    let refused = run(false);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "engines listed next to a GPU runtime"
    );
    assert!(
        stderr.contains("GetAllEngineIds(count) failed with status 0"),
        "{stderr}"
    );

    let listed = run(true);
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        stdout.contains("engine RAGGED_SDPA_HOST_REFERENCE"),
        "{stdout}"
    );
}

/// Next to HIP the host engine cannot copy device tensors (no HIP copy path), so even when asked
/// for it is listed but declines every graph instead of reading what may be device pointers.
#[test]
fn next_to_hip_the_requested_host_engine_declines_every_graph() {
    let host = compile_host();
    let fake = compile(
        "fake_gpu_runtime.c",
        // A folder of its own: the CUDA stand-in's folder must not hold a HIP runtime.
        "hip_runtime/libamdhip64.so",
        &["-shared", "-fPIC"],
    );
    let runtime_dir = fake.parent().expect("scratch dir").to_path_buf();
    let (dir, uids) = golden_variant_pack("c_program_hip_runtime");
    let output = Command::new(&host)
        .arg(plugin_path())
        .arg(golden_file("graph_flagged.bin"))
        .arg(golden_file("engine_config.bin"))
        .arg(&dir)
        .args(uids.iter().map(i64::to_string))
        .env("LD_LIBRARY_PATH", &runtime_dir)
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .expect("C host runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stdout.contains("engine RAGGED_SDPA_HOST_REFERENCE"),
        "{stdout}"
    );
    assert!(
        stderr.contains("no engine applies to the graph"),
        "{stderr}"
    );
}
