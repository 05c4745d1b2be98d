//! A C host (`tests/c/overrides_serialization.c`, compiled against the project header under
//! ASan/UBSan) serializes a compiled override-enabled context, recreates it from the bytes,
//! refuses damaged, foreign and NULL inputs, and executes the recreated context with shape
//! overrides for a new B and S_max. Its outputs must equal, bit for bit, what a context built
//! directly for the new shapes writes.

mod common;

use std::path::PathBuf;

use common::overrides::*;
use common::*;

/// The C host, built as every C host of these tests is (`common::c_host`).
fn compile_host() -> PathBuf {
    c_host::compile(
        "overrides_serialization.c",
        "c_build_overrides",
        "overrides_serialization",
        &[],
    )
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

    let stdout = c_host::run(
        &host,
        &dir.join("graph.bin"),
        &dir.join("config.bin"),
        &dir,
        files.iter().map(|(uid, _)| uid.to_string()),
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
    let context = OwnedContext::new(&handle, &config(), &graph(LARGER, false));
    let mut direct = larger_call();
    let status = context.execute(&direct.pack());
    assert_eq!(status, SUCCESS, "{}", last_error());
    drop(context);

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
