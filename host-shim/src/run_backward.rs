//! `hipdnn-shim run BWD.json [--verify]` for an SDPA backward graph (issue 15 item 4): the same
//! inputs as the forward's `run` (companion offsets and seq_lens, `.npy` inputs by uid or name,
//! the rest seeded random), O and the LSE from the CPU forward unless supplied, one host engine
//! executed, dQ, dK and dV written as `.npy`, and with `--verify` compared with the float64
//! backward oracle ([`hipdnn_shim::oracle_backward`]), which shares no code with any engine.

use std::path::Path;
use std::time::Instant;

use hipdnn_shim::backward::{BackwardHarness, backward_node};
use hipdnn_shim::harness::{PreSuppliedInputs, ValidationMode};
use hipdnn_shim::oracle_backward;
use ragged_schema::model::Graph;

use crate::commands::run::{GraphRun, npy_shape};
use crate::error::ShimError;
use crate::{graph_file, host, inputs, npy};

/// Runs `args.graph` if it is a single backward node; `None` leaves it to the forward path
/// (which also reports a graph file that cannot be read).
pub fn maybe_run(
    args: &GraphRun,
    out_dir: Option<&Path>,
    verify: bool,
    mode: ValidationMode,
) -> Option<Result<(), ShimError>> {
    let graph = graph_file::load(&args.graph).ok()?;
    backward_node(&graph)?;
    Some(run(args, graph, out_dir, verify, mode))
}

fn run(
    args: &GraphRun,
    graph: Graph,
    out_dir: Option<&Path>,
    verify: bool,
    mode: ValidationMode,
) -> Result<(), ShimError> {
    graph.validate().map_err(|source| ShimError::Graph {
        path: args.graph.clone(),
        source: Box::new(source),
    })?;
    let outputs = backward_node(&graph)
        .map(|n| [n.dq_tensor_uid, n.dk_tensor_uid, n.dv_tensor_uid].into())
        .unwrap_or_default();
    let mut pre = PreSuppliedInputs::new();
    let companion = args
        .offsets
        .clone()
        .unwrap_or_else(|| inputs::default_companion(&args.graph));
    inputs::load_companion(&graph, &companion, args.offsets.is_some(), &mut pre)?;
    if let Some(dir) = &args.inputs {
        let loaded = inputs::load_npy_dir(&graph, dir, &outputs, &mut pre)?;
        eprintln!(
            "inputs from {}: uids {:?}; the rest seeded random (seed {:#x}), O and LSE from the \
             CPU forward unless given",
            dir.display(),
            loaded,
            args.seed
        );
    }

    let (_, mut manager) = host::load_plugins(args.plugin_dir.clone());
    let candidates = host::applicable_engines(&mut manager, &graph);
    host::flush_log(&mut manager.log);
    // Backward graphs run on host engines only: no engine of this project runs them on a GPU.
    let candidate = host::choose(
        &candidates?,
        args.engine.as_deref(),
        &args.host_engines,
        false,
        &graph,
    )?;
    let plugin = &manager.plugins[candidate.plugin_index];
    eprintln!(
        "engine {} ({}) of plugin '{}'",
        candidate.engine_name,
        hipdnn_shim::engine_id::hex_id(candidate.engine_id),
        plugin.name
    );
    let mut harness = BackwardHarness::new(graph.clone(), &pre, args.seed)?;
    let handle = plugin.plugin.create_handle()?;
    let start = Instant::now();
    harness.run_engine(&handle, candidate.engine_id)?;
    eprintln!("executed in {:.3} ms", start.elapsed().as_secs_f64() * 1e3);
    manager.log.absorb_plugin_messages();
    host::flush_log(&mut manager.log);

    let out_dir = out_dir.map(Path::to_path_buf).unwrap_or_else(|| {
        let stem = args
            .graph
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "graph".into());
        std::env::temp_dir().join(format!("hipdnn-shim-{stem}-outputs"))
    });
    std::fs::create_dir_all(&out_dir).map_err(|source| ShimError::Write {
        path: out_dir.clone(),
        source,
    })?;
    for &uid in &harness.outputs {
        let t = harness.engine.get(uid)?;
        let path = out_dir.join(format!("{uid}.npy"));
        npy::write(&path, t.host_data(), &npy_shape(t)).map_err(|source| ShimError::Write {
            path: path.clone(),
            source,
        })?;
        println!("output uid {uid} -> {}", path.display());
    }
    if !verify {
        return Ok(());
    }
    let expected = oracle_backward::evaluate(&harness).map_err(ShimError::Oracle)?;
    let comparisons =
        oracle_backward::compare(&harness, &expected, mode).map_err(ShimError::Oracle)?;
    println!("verify against the float64 backward oracle ({mode} validation):");
    let mut failures = 0;
    for c in &comparisons {
        let name = graph
            .tensor(c.uid)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        println!(
            "  {} uid {} '{}': max abs err {:.3e}, max rel err {:.3e} over {} written positions; \
             {} unwritten positions{}",
            if c.passed() { "OK  " } else { "FAIL" },
            c.uid,
            name,
            c.max_abs_error,
            c.max_rel_error,
            c.compared,
            c.skipped,
            if mode == ValidationMode::Coverage {
                " intact"
            } else {
                " skipped"
            }
        );
        for f in &c.failures {
            println!("       {f}");
        }
        failures += c.failure_count;
    }
    if failures > 0 {
        return Err(ShimError::Mismatch { failures });
    }
    println!("PASS");
    Ok(())
}
