//! `hipdnn-shim run GRAPH` for a multi-node graph (SDPA and pointwise nodes joined by virtual
//! intermediates, RFC §4.9): dispatched as the backend would, run on one host engine, outputs
//! written as `.npy`; `--verify` checks every output against the float64 oracle walked over the
//! whole graph ([`crate::oracle::evaluate_graph`]), which shares no code with kernels' executor.

use std::path::Path;
use std::time::Instant;

use hipdnn_shim::harness::{GraphHarness, ValidationMode, outputs_of};
use ragged_schema::model::Graph;

use super::shared::{
    GraphRun, choose_engine, flush_and_write_outputs, forward_oracle_heading, report_verification,
    supplied_inputs, with_spinner,
};
use crate::error::ShimError;

pub fn run(
    args: &GraphRun,
    graph: Graph,
    out_dir: Option<&Path>,
    verify: bool,
    mode: ValidationMode,
) -> Result<(), ShimError> {
    if !args.overrides.is_empty() {
        return Err(ShimError::Usage(
            "--override-* resizes single-SDPA graphs; multi-node graphs run with their own shapes",
        ));
    }
    if args.cuda {
        return Err(ShimError::Usage(
            "--cuda: multi-node graphs run on host engines only (GPU engines decline them)",
        ));
    }
    graph.validate().map_err(|source| ShimError::Graph {
        path: args.graph.clone(),
        source: Box::new(source),
    })?;
    let outputs = outputs_of(&graph)?;
    let pre = supplied_inputs(args, &graph, &outputs)?;
    let (mut manager, candidate) = choose_engine(args, &graph, args.cuda)?;
    let mut harness = GraphHarness::new(graph, &pre, args.seed)?;
    let handle = manager.plugins[candidate.plugin_index]
        .plugin
        .create_handle()?;
    let start = Instant::now();
    with_spinner(format!("executing {}", candidate.engine_name), || {
        harness.run_engine(&handle, candidate.engine_id)
    })?;
    eprintln!(
        "executed {} nodes in {:.3} ms",
        harness.graph.nodes.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    flush_and_write_outputs(
        &mut manager.log,
        args,
        out_dir,
        &harness.engine,
        &harness.outputs,
    )?;
    if !verify {
        return Ok(());
    }
    let comparisons = with_spinner("evaluating the float64 oracle".into(), || {
        crate::verify::against_graph_oracle(&mut harness, mode)
    })?;
    report_verification(
        &harness.graph,
        &comparisons,
        mode,
        &forward_oracle_heading(mode),
    )
}
