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

/// `tests/c/<source>` built by [`common::c_host::compile`] into this binary's scratch folder.
fn compile(source: &str, output_name: &str, extra: &[&str]) -> PathBuf {
    common::c_host::compile(source, "c_build", output_name, extra)
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

    let stdout = common::c_host::run(
        &host,
        &golden_file("graph_flagged.bin"),
        &golden_file("engine_config.bin"),
        &dir,
        uids.iter().map(i64::to_string),
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

/// The project's fake `libamdhip64` (one device, device memory in a side table), built from
/// `kernels/gpu-runtime/src/hip/fake_amdhip64.c` into a folder of its own.
fn fake_hip(output_name: &str, extra: &[&str]) -> PathBuf {
    let mut flags = vec!["-shared", "-fPIC", "-D_GNU_SOURCE"];
    flags.extend_from_slice(extra);
    compile(
        "../../../kernels/gpu-runtime/src/hip/fake_amdhip64.c",
        output_name,
        &flags,
    )
}

/// Runs the C host over the golden graph; `env` is applied after the host-engine variable is
/// cleared, and CUDA is hidden so the HIP stand-in alone decides.
fn run_c_host(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> std::process::Output {
    let host = compile_host();
    let (dir, uids) = golden_variant_pack(name);
    let mut command = Command::new(&host);
    command
        .arg(plugin_path())
        .arg(golden_file("graph_flagged.bin"))
        .arg(golden_file("engine_config.bin"))
        .arg(&dir)
        .args(uids.iter().map(i64::to_string))
        .env_remove("HIPDNN_RAGGED_SDPA_HOST_ENGINE")
        .env("RAGGED_SDPA_DISABLE_CUDA", "1");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("C host runs")
}

/// A GPU runtime that loads but has no device cannot have produced device pointers: the host
/// engine is listed without being asked for and runs on the host buffers (a CUDA driver stand-in
/// on the library path, and a HIP runtime reporting no device).
#[test]
fn a_gpu_runtime_without_a_device_does_not_hide_the_host_engine() {
    let cuda = compile(
        "fake_gpu_runtime.c",
        "cuda_runtime/libcuda.so.1",
        &["-shared", "-fPIC"],
    );
    let hip = fake_hip("hip_runtime/libamdhip64.so.6", &[]);
    let cuda_dir = cuda.parent().expect("scratch dir").as_os_str().to_owned();
    let output = run_c_host(
        "c_program_no_device",
        &[
            ("LD_LIBRARY_PATH", &cuda_dir),
            ("RAGGED_SDPA_HIP_RUNTIME", hip.as_os_str()),
            ("FAKE_HIP_DEVICES", "0".as_ref()),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("engine RAGGED_SDPA_HOST_REFERENCE"),
        "{stdout}"
    );
}

/// Next to a HIP device, hipDNN hands out device pointers, so the host engine is listed only on
/// request; when asked for, it classifies the C host's buffers as host memory and runs in place.
#[test]
fn next_to_a_hip_device_the_host_engine_needs_the_environment_variable() {
    let hip = fake_hip("hip_device/libamdhip64.so.6", &[]);
    let refused = run_c_host(
        "c_program_hip_device",
        &[("RAGGED_SDPA_HIP_RUNTIME", hip.as_os_str())],
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "engines listed next to a HIP device"
    );
    assert!(
        stderr.contains("GetAllEngineIds(count) failed with status 0"),
        "{stderr}"
    );

    let listed = run_c_host(
        "c_program_hip_device",
        &[
            ("RAGGED_SDPA_HIP_RUNTIME", hip.as_os_str()),
            ("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1".as_ref()),
        ],
    );
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

/// A HIP device whose runtime lacks the copy functions: the requested host engine is listed but
/// declines every graph instead of reading what may be device pointers.
#[test]
fn next_to_a_hip_device_without_copies_the_requested_host_engine_declines_every_graph() {
    let hip = fake_hip("hip_no_copies/libamdhip64.so.6", &["-DFAKE_HIP_NO_COPIES"]);
    let output = run_c_host(
        "c_program_hip_no_copies",
        &[
            ("RAGGED_SDPA_HIP_RUNTIME", hip.as_os_str()),
            ("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1".as_ref()),
        ],
    );
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
