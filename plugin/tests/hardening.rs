//! Issue 13's regressions, each reproduced from C through the built `.so` (tests/c/hardening.c):
//! oversized extents, GetEngineDetails racing Destroy, stale handles after address reuse,
//! non-finite runtime scales, offsets inside an output, and load/unload loops with a logging
//! callback from a library that is unloaded too. Issue 38's, from tests/c/lifecycle.c: a logging
//! callback calling back into the plugin, dlclose with a live handle after a worker-pool execute,
//! serialized bytes returned after their handle is gone, and handles of earlier loads.
//!
//! `.ci/hardening.sh` runs the same C programs against AddressSanitizer and ThreadSanitizer
//! builds; the inputs they need are the files [`inputs`] writes (`HARDENING_INPUTS` names the
//! folder to keep them in).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::golden::{BF16_SENTINEL, golden_file, npy};
use common::plugin_path;
use common::problem::SENTINEL;
use ragged_schema::{DataType, Graph, NodeAttributes, TensorAttributes};

/// A C source of tests/c compiled with the system compiler (`CC`, default `cc`) and any extra
/// flags in `HARDENING_CFLAGS` (the sanitizer build passes `-fsanitize=address` there).
fn compile(source: &str, output: &str, extra: &[&str]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hardening_build");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let binary = dir.join(output);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let flags = std::env::var("HARDENING_CFLAGS").unwrap_or_default();
    let result = Command::new(&cc)
        .args([
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
        ])
        .args(flags.split_whitespace())
        .args(extra)
        .arg("-o")
        .arg(&binary)
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/c")
                .join(source),
        )
        .args(["-ldl", "-lpthread", "-lm"])
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler {cc}: {e}"));
    assert!(
        result.status.success(),
        "compiling {source} failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    binary
}

struct Built {
    host: PathBuf,
    sink: PathBuf,
    lifecycle: PathBuf,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| Built {
        host: compile("hardening.c", "hardening", &[]),
        sink: compile("log_sink.c", "liblog_sink.so", &["-shared", "-fPIC"]),
        lifecycle: compile(
            "lifecycle.c",
            "lifecycle",
            &[concat!("-I", env!("CARGO_MANIFEST_DIR"), "/include")],
        ),
    })
}

/// The folder of graph files and golden variant pack the C modes read.
fn inputs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("HARDENING_INPUTS").map_or_else(
            || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hardening_inputs"),
            PathBuf::from,
        );
        write_inputs(&dir);
        dir
    })
}

fn golden_graph() -> Graph {
    let bytes = std::fs::read(golden_file("graph_flagged.bin")).expect("golden graph");
    ragged_schema::wire::decode_graph(&bytes).expect("golden graph decodes")
}

fn sdpa(graph: &mut Graph) -> &mut ragged_schema::SdpaAttributes {
    match &mut graph.nodes[0].attributes {
        NodeAttributes::Sdpa(s) => s,
        other => panic!("golden node is {other:?}"),
    }
}

/// The oversized graph: fp32, B = 1, ragged Q/O `[1, S_q, H, 1]`, K/V `[1, 4, 1, 1]`,
/// dense LSE `[1, H, S_q, 1]`; every extent but the byte counts is representable.
fn oversized(seq_q: i64, heads: i64) -> Graph {
    let mut g = golden_graph();
    for t in &mut g.tensors {
        match t.uid {
            5 | 6 => t.dims = vec![2, 1, 1, 1],
            1 | 4 => {
                t.data_type = DataType::Float;
                t.dims = vec![1, seq_q, heads, 1];
                t.strides = vec![heads, heads, 1, 1];
            }
            2 | 3 => {
                t.data_type = DataType::Float;
                t.dims = vec![1, 4, 1, 1];
                t.strides = vec![4, 1, 1, 1];
            }
            9 => {
                t.dims = vec![1, heads, seq_q, 1];
                t.strides = vec![heads.saturating_mul(seq_q), seq_q, 1, 1];
            }
            _ => {}
        }
    }
    g
}

/// Query and key lengths of the two batches of [`large`].
const LARGE_LENS_Q: [i32; 2] = [128, 100];
const LARGE_LENS_KV: [i32; 2] = [128, 90];
/// S_max of [`large`] (Q/O and K/V dims).
const LARGE_S: i64 = 128;

/// The golden graph (bf16, B = 2, H_q = 2, H_kv = 1, D = 16) at S_max = 128: 2^21 multiply-adds
/// by the host engine's bound, above its 2^20 inline threshold, so executes run on the worker
/// pool (the golden graph itself runs on the calling thread).
fn large() -> Graph {
    let mut g = golden_graph();
    for t in &mut g.tensors {
        let heads = match t.uid {
            1 | 4 => 2,
            2 | 3 => 1,
            9 => {
                t.dims = vec![2, 2, LARGE_S, 1];
                t.strides = vec![2 * LARGE_S, LARGE_S, 1, 1];
                continue;
            }
            _ => continue,
        };
        t.dims = vec![2, LARGE_S, heads, 16];
        t.strides = vec![LARGE_S * heads * 16, heads * 16, 16, 1];
    }
    g
}

/// [`large`]'s graph and variant pack, in the layout the C modes read (`DIR/<uid>.bin`).
fn write_large(dir: &Path) {
    std::fs::create_dir_all(dir).expect("large inputs dir");
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).expect("write");
    write("graph.bin", &ragged_schema::wire::encode_graph(&large()));
    let offsets = |lens: [i32; 2], width: i32| {
        [0, lens[0] * width, (lens[0] + lens[1]) * width]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>()
    };
    write("5.bin", &offsets(LARGE_LENS_Q, 2 * 16));
    write("6.bin", &offsets(LARGE_LENS_KV, 16));
    // Values in [-1, 1) from a fixed LCG, exact in bf16 (the top half of an f32).
    let mut state = 0x2545_f491_u32;
    let mut bf16s = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let x = (state >> 8) as f32 / (1u32 << 23) as f32 - 1.0;
                ((x.to_bits() >> 16) as u16).to_le_bytes()
            })
            .collect()
    };
    let s = LARGE_S as usize;
    write("1.bin", &bf16s(2 * s * 2 * 16));
    write("2.bin", &bf16s(2 * s * 16));
    write("3.bin", &bf16s(2 * s * 16));
    let o: Vec<u8> = std::iter::repeat_n(BF16_SENTINEL.to_le_bytes(), 2 * s * 2 * 16)
        .flatten()
        .collect();
    write("4.bin", &o);
    let lse: Vec<u8> = std::iter::repeat_n(SENTINEL.to_le_bytes(), 2 * 2 * s)
        .flatten()
        .collect();
    write("9.bin", &lse);
}

/// The golden graph with its scale a pass-by-value f32 bound as uid 30.
fn runtime_scale() -> Graph {
    let mut g = golden_graph();
    g.tensors.push(
        TensorAttributes::new()
            .set_uid(30)
            .set_data_type(DataType::Float)
            .set_dims(vec![1])
            .set_strides(vec![1])
            .set_is_runtime_pass_by_value(true),
    );
    sdpa(&mut g).scale_tensor_uid = Some(30);
    g
}

fn write_inputs(dir: &Path) {
    std::fs::create_dir_all(dir).expect("inputs dir");
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).expect("write");
    for (name, (seq_q, heads)) in [
        ("extent_2p61.bin", (1i64 << 61, 4)),
        ("extent_2p62.bin", (1i64 << 62, 1)),
        ("extent_2p60.bin", (1i64 << 60, 2)),
    ] {
        write(
            name,
            &ragged_schema::wire::encode_graph(&oversized(seq_q, heads)),
        );
    }
    write(
        "scale_graph.bin",
        &ragged_schema::wire::encode_graph(&runtime_scale()),
    );
    for name in ["graph_flagged.bin", "engine_config.bin"] {
        write(
            name,
            &std::fs::read(golden_file(name)).expect("golden file"),
        );
    }
    let o_len = npy::<f64>("expected/4.npy").len();
    let lse_len = npy::<f64>("expected/9.npy").len();
    let le16 = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let le32 = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for uid in [1, 2, 3] {
        write(
            &format!("{uid}.bin"),
            &le16(&npy::<u16>(&format!("inputs/{uid}.npy"))),
        );
    }
    for uid in [5, 6] {
        write(
            &format!("{uid}.bin"),
            &le32(&npy::<i32>(&format!("inputs/{uid}.npy"))),
        );
    }
    write("4.bin", &le16(&vec![BF16_SENTINEL; o_len]));
    let lse: Vec<u8> = std::iter::repeat_n(SENTINEL.to_le_bytes(), lse_len)
        .flatten()
        .collect();
    write("9.bin", &lse);
    write_large(&dir.join("large"));
}

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut command = Command::new(&built().host);
    for arg in args {
        command.arg(arg);
    }
    command
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .output()
        .expect("C host runs")
}

fn assert_passed(mode: &str, output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{mode} failed ({:?}):\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.ends_with("ok\n"), "{stdout}");
    stdout
}

/// Items 1-2: S_q = 2^61 (UB in release, abort in debug), 2^60 with H = 2 (SIGSEGV), 2^62
/// (INTERNAL_ERROR) — all declined at applicability, naming uid, dims and bytes.
#[test]
fn oversized_extents_are_declined_naming_uid_dims_and_bytes() {
    let dir = inputs();
    for graph in ["extent_2p61.bin", "extent_2p60.bin", "extent_2p62.bin"] {
        let out = run(&[
            &"extent",
            &plugin_path(),
            &dir.join(graph),
            &dir.join("engine_config.bin"),
        ]);
        let stdout = assert_passed(graph, &out);
        assert!(stdout.contains("status 1:"), "{graph}: {stdout}");
        assert!(
            stdout.contains("need at most 9223372036854775807 bytes"),
            "{stdout}"
        );
    }
}

/// Item 3: every GetEngineDetails that succeeds while another thread destroys the handle hands
/// back a buffer that is still readable (AddressSanitizer checks the reads in CI).
#[test]
fn engine_details_racing_destroy_stay_valid() {
    let dir = inputs();
    let out = run(&[
        &"details-race",
        &plugin_path(),
        &dir.join("graph_flagged.bin"),
        &"2000",
    ]);
    assert_passed("details-race", &out);
}

/// Item 4: 1000 destroy/create rounds give 1000 distinct handles and contexts, and the stale
/// ones are BAD_PARAM in every entry point tried.
#[test]
fn stale_handles_and_contexts_are_bad_param_after_reuse() {
    let dir = inputs();
    let out = run(&[
        &"stale",
        &plugin_path(),
        &dir.join("graph_flagged.bin"),
        &dir.join("engine_config.bin"),
        &"1000",
    ]);
    let stdout = assert_passed("stale", &out);
    assert!(
        stdout.contains("1001 handles and 1001 contexts"),
        "{stdout}"
    );
}

/// Item 5: NaN, +inf and -inf runtime scales are INVALID_VALUE naming uid 30, nothing written;
/// 0.25 still runs.
#[test]
fn non_finite_runtime_scales_are_invalid_value() {
    let dir = inputs();
    let out = run(&[
        &"scale",
        &plugin_path(),
        &dir.join("scale_graph.bin"),
        &dir.join("engine_config.bin"),
        &dir,
    ]);
    assert_passed("scale", &out);
}

/// Item 6: ragged offsets placed inside O or the LSE are INVALID_VALUE and left unchanged;
/// placed right after them they run.
#[test]
fn offsets_inside_an_output_are_refused_and_kept() {
    let dir = inputs();
    let out = run(&[
        &"overlap",
        &plugin_path(),
        &dir.join("graph_flagged.bin"),
        &dir.join("engine_config.bin"),
        &dir,
    ]);
    assert_passed("overlap", &out);
}

/// Item 7: after the last handle is destroyed, dlclose unmaps the library in every loop, and a
/// reload does not call the unloaded library's callback. Each loop runs the golden graph (on the
/// calling thread) and the large one (on the worker pool, whose threads must be gone too).
#[test]
fn dlclose_unmaps_the_library_and_forgets_the_callback() {
    let dir = inputs();
    let out = run(&[
        &"unload",
        &plugin_path(),
        &built().sink,
        &dir.join("graph_flagged.bin"),
        &dir.join("engine_config.bin"),
        &dir,
        &"20",
        &dir.join("large/graph.bin"),
        &dir.join("large"),
    ]);
    let stdout = assert_passed("unload", &out);
    assert!(stdout.contains("20 load/execute/unload loops"), "{stdout}");
}

/// The concurrency case `.ci/hardening.sh` runs under ThreadSanitizer, here without it: 8
/// threads × 200 executes on one context, bit-identical to a single-threaded run, while a ninth
/// creates and destroys contexts and engine details on the same handle; then the worker pool
/// restarts under a new handle.
#[test]
fn threads_sharing_one_context_agree_bit_for_bit() {
    let dir = inputs();
    let out = run(&[
        &"threads",
        &plugin_path(),
        &dir.join("graph_flagged.bin"),
        &dir.join("engine_config.bin"),
        &dir,
        &"8",
        &"200",
    ]);
    let stdout = assert_passed("threads", &out);
    assert!(
        stdout.contains("8 threads x 200 executes on one context, all bit-identical"),
        "{stdout}"
    );
}

/// The same on the worker pool (the large graph, above the inline threshold): 4 threads × 20
/// executes, each spread over the pool's threads and its caller.
#[test]
fn threads_sharing_the_worker_pool_agree_bit_for_bit() {
    let dir = inputs();
    let out = run(&[
        &"threads",
        &plugin_path(),
        &dir.join("large/graph.bin"),
        &dir.join("engine_config.bin"),
        &dir.join("large"),
        &"4",
        &"20",
    ]);
    let stdout = assert_passed("threads", &out);
    assert!(
        stdout.contains("4 threads x 20 executes on one context, all bit-identical"),
        "{stdout}"
    );
}

/// The bad-input suite the AddressSanitizer stage runs from C: NULL arguments of the optional
/// entry points, graph, config and stored-context bytes cut short in exact-size blocks, flipped
/// stored bytes, bad bindings and bad override arrays — each refused with a message, no output
/// written.
#[test]
fn bad_input_is_refused_with_a_message_and_writes_nothing() {
    let dir = inputs();
    let out = run(&[
        &"bad-input",
        &plugin_path(),
        &dir.join("graph_flagged.bin"),
        &dir.join("engine_config.bin"),
        &dir,
    ]);
    let stdout = assert_passed("bad-input", &out);
    assert!(
        stdout.contains("bad inputs refused with a message, no output written"),
        "{stdout}"
    );
}

fn run_lifecycle(args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let mut command = Command::new(&built().lifecycle);
    for arg in args {
        command.arg(arg);
    }
    let out = command
        .env("HIPDNN_RAGGED_SDPA_HOST_ENGINE", "1")
        .env("LIFECYCLE_WATCHDOG_S", "120")
        .output()
        .expect("C host runs");
    let mode = args
        .first()
        .map(|m| m.as_ref().to_string_lossy().into_owned());
    assert_passed(mode.as_deref().unwrap_or("lifecycle"), &out)
}

/// Issue 38: a logging callback calls back into the plugin from every line — the first engine
/// listing's (written inside its one-time initialisation, which deadlocked), every failing entry
/// point's, and lines of calls whose handle and context the callback destroys (which waited for
/// the call's own lease). Each call returns its own status and keeps its own last-error text.
#[test]
fn a_logging_callback_may_call_back_into_the_plugin() {
    let dir = inputs();
    let stdout = run_lifecycle(&[
        &"reentrant",
        &plugin_path(),
        &dir.join("graph_flagged.bin"),
        &dir.join("engine_config.bin"),
        &dir,
    ]);
    assert!(
        stdout.contains("23 entry points and 2 victim calls returned"),
        "{stdout}"
    );
}

/// Issue 38: dlclose with a handle still live after a worker-pool execute (a host that leaks a
/// handle and unloads at exit) joins the pool's threads first; two spinning threads beside it
/// make a thread left behind run, and crash, within the loop.
#[test]
fn unloading_with_a_live_handle_stops_the_worker_pool_first() {
    let dir = inputs();
    let stdout = run_lifecycle(&[
        &"unload-live",
        &plugin_path(),
        &dir.join("large/graph.bin"),
        &dir.join("engine_config.bin"),
        &dir.join("large"),
        &"10",
    ]);
    assert!(stdout.contains("10 loops unloaded the plugin"), "{stdout}");
}

/// Issue 38: serialized context bytes outlive the handle they were lent through, and come back
/// through that handle value only, once.
#[test]
fn serialized_bytes_are_returned_after_their_handle_is_destroyed() {
    let dir = inputs();
    let stdout = run_lifecycle(&[
        &"serialized",
        &plugin_path(),
        &dir.join("graph_flagged.bin"),
        &dir.join("engine_config.bin"),
        &"5",
    ]);
    assert!(stdout.contains("5 loops returned the bytes"), "{stdout}");
}

/// Issue 38: across 2 000 unload/reload cycles no handle of an earlier load is accepted by a later
/// one (a 16-bit per-load tag had let 32 through).
#[test]
fn handles_of_earlier_loads_are_never_accepted() {
    let stdout = run_lifecycle(&[&"reload", &plugin_path(), &"2000"]);
    assert!(
        stdout.contains("2000 loads, 0 stale handles accepted"),
        "{stdout}"
    );
}
