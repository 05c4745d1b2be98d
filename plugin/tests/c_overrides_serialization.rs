//! A C host (`tests/c/overrides_serialization.c`, compiled against the project header under
//! ASan/UBSan) serializes a compiled override-enabled context, recreates it from the bytes,
//! refuses damaged, foreign and NULL inputs, and executes the recreated context with shape
//! overrides for a new B and S_max. Its outputs must equal, bit for bit, what a context built
//! directly for the new shapes writes.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::ptr::null_mut;

use common::overrides::*;
use common::*;

/// Compiles the C host into the test's scratch folder (as `c_program.rs` does for its host).
fn compile_host() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_build_overrides");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let binary = dir.join("overrides_serialization");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
        .args([
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
        ])
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-o")
        .arg(&binary)
        .arg(manifest.join("tests/c/overrides_serialization.c"))
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

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn bits_of(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_c_host_recreates_a_serialized_context_and_runs_it_with_overrides() {
    let host = compile_host();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_overrides_serialization");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(dir.join("graph.bin"), graph(COMPILED, true)).expect("graph");
    std::fs::write(dir.join("config.bin"), config()).expect("config");
    let call = larger_call();
    let index = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let files: Vec<(i64, Vec<u8>)> = vec![
        (Q, f32_bytes(&call.q)),
        (K, f32_bytes(&call.k)),
        (V, f32_bytes(&call.v)),
        (O, f32_bytes(&call.o)),
        (LSE, f32_bytes(&call.lse)),
        (Q_OFF, index(&call.q_off)),
        (KV_OFF, index(&call.kv_off)),
    ];
    for (uid, bytes) in &files {
        std::fs::write(dir.join(format!("{uid}.bin")), bytes).expect("input");
    }
    let overrides: String = tensor_shapes(LARGER)
        .iter()
        .map(|(uid, dims, strides)| {
            let join = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(" ");
            format!("{uid} {} {} {}\n", dims.len(), join(dims), join(strides))
        })
        .collect();
    std::fs::write(dir.join("overrides.txt"), overrides).expect("overrides");

    let output = Command::new(&host)
        .arg(plugin_path())
        .arg(dir.join("graph.bin"))
        .arg(dir.join("config.bin"))
        .arg(&dir)
        .args(files.iter().map(|(uid, _)| uid.to_string()))
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .expect("C host runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "C host failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "damaged bytes refused (1): hipdnnEnginePluginCreateExecutionContextFromSerialized: \
         malformed serialized_context: checksum mismatch",
        "foreign bytes refused (1): hipdnnEnginePluginCreateExecutionContextFromSerialized: \
         malformed serialized_context: not a serialized execution context",
        "NULL serialized_context refused (1)",
        "NULL override arrays refused (1)",
        "executed with 7 overrides",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }

    // The same call on a context built for the larger shapes, through the Rust loader.
    let handle = OwnedHandle::new();
    let (c, g) = (config(), graph(LARGER, false));
    let (c, g) = (ConstData::of(&c), ConstData::of(&g));
    let mut context: Context = null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { (plugin().CreateExecutionContext)(handle.0, &c, &g, &mut context) };
    assert_eq!(status, SUCCESS, "{}", last_error());
    let mut direct = larger_call();
    let pack = direct.pack();
    // SAFETY: every pointer is a live host buffer of its tensor's extent.
    let status = unsafe {
        (plugin().ExecuteOpGraph)(
            handle.0,
            context,
            null_mut(),
            pack.as_ptr(),
            pack.len() as u32,
        )
    };
    assert_eq!(status, SUCCESS, "{}", last_error());
    // SAFETY: a live context of this handle.
    let status = unsafe { (plugin().DestroyExecutionContext)(handle.0, context) };
    assert_eq!(status, SUCCESS);

    let o = bits_of(&std::fs::read(dir.join(format!("{O}.out"))).expect("O"));
    let lse = bits_of(&std::fs::read(dir.join(format!("{LSE}.out"))).expect("LSE"));
    assert!(
        o.iter().any(|b| *b != NAN),
        "the C host's execute wrote no O"
    );
    let expected: Vec<u32> = direct.o.iter().map(|x| x.to_bits()).collect();
    assert_eq!(o, expected, "O");
    let expected: Vec<u32> = direct.lse.iter().map(|x| x.to_bits()).collect();
    assert_eq!(lse, expected, "LSE");
}
