//! `hipdnn-shim run BWD.json [--verify]` for an SDPA backward graph (issue 15 item 4): the same
//! inputs as the forward's `run` (companion offsets and seq_lens, `.npy` inputs by uid or name,
//! the rest seeded random), O and the LSE from the CPU forward unless supplied, one engine
//! executed (on host buffers, or with `--cuda` a GPU engine on device copies of them, as the
//! forward's `run --cuda`), dQ, dK and dV written as `.npy`, and with `--verify` compared with
//! the float64 backward oracle ([`hipdnn_shim::oracle_backward`]), which shares no code with any
//! engine.

use std::path::Path;
use std::time::Instant;

use hipdnn_shim::backward::{BackwardHarness, backward_node};
use hipdnn_shim::harness::{DeviceRun, ValidationMode};
use hipdnn_shim::oracle_backward;
use ragged_schema::model::Graph;

use super::shared::{
    GraphRun, choose_engine, device_for, flush_and_write_outputs, report_execute_time,
    report_verification, supplied_inputs,
};
use crate::error::ShimError;

pub fn run(
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
    let pre = supplied_inputs(args, &graph, &outputs)?;
    if args.inputs.is_some() {
        eprintln!("O and LSE not given come from the CPU forward");
    }
    let (mut manager, candidate) = choose_engine(args, &graph, args.cuda)?;
    let device = device_for(args, &candidate)?;
    let plugin = &manager.plugins[candidate.plugin_index];
    let mut harness = BackwardHarness::new(graph.clone(), &pre, args.seed)?;
    let handle = plugin.plugin.create_handle()?;
    let start = Instant::now();
    match device {
        Some(cuda) => harness.run_engine_on_device(&handle, candidate.engine_id, cuda)?,
        None => harness.run_engine(&handle, candidate.engine_id)?,
    }
    report_execute_time(start, device.is_some());
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
    let expected = oracle_backward::evaluate(&harness).map_err(ShimError::Oracle)?;
    let comparisons =
        oracle_backward::compare(&harness, &expected, mode).map_err(ShimError::Oracle)?;
    report_verification(
        &graph,
        &comparisons,
        mode,
        &format!("verify against the float64 backward oracle ({mode} validation):"),
    )
}
