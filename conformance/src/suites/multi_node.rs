//! Suite (d): multi-node graphs (RFC §4.9, §4.10.1) — SDPA whose O is a virtual intermediate
//! on Q's aux feeding pointwise nodes, and a pointwise-only ragged graph, each in both ragged
//! dims orders — through every admitted host engine of a plugin, compared with kernels' CPU
//! graph executor. A plugin may decline multi-node graphs (the ABI allows it, and GPU engines
//! do): that is reported per case as a skip naming "declined", never as a failure.

use super::engine_cases::{run_cases, verdict};
use crate::report::{Outcome, Report};
use hipdnn_shim::HostError;
use hipdnn_shim::harness::{GraphHarness, ValidationMode};
use hipdnn_shim::manager::LoadedPlugin;
use hipdnn_shim::multi_node_graphs::{MultiNodeSpec, cases};
use hipdnn_shim::plugin::PluginHandle;

const SUITE: &str = "multi_node";

/// Runs every case on every admitted engine of `plugin` that takes host buffers; the others are
/// skipped (the harness binds host memory only for multi-node graphs).
pub fn run(
    plugin: &LoadedPlugin,
    host_engines: &[String],
    mode: ValidationMode,
    seed: u64,
) -> Report {
    let cases = cases();
    run_cases(
        plugin,
        SUITE,
        &cases,
        |c| c.name.as_str(),
        |handle, engine, case| {
            if !host_engines.contains(&engine.name) {
                return (
                    Outcome::Skip(format!(
                        "engine {} is not a --host-engine; multi-node graphs run on host buffers",
                        engine.name
                    )),
                    vec![],
                );
            }
            run_case(handle, engine.id, case, mode, seed)
                .unwrap_or_else(|e| (Outcome::Fail(e.to_string()), vec![]))
        },
    )
}

fn run_case(
    handle: &PluginHandle<'_>,
    engine_id: i64,
    case: &MultiNodeSpec,
    mode: ValidationMode,
    seed: u64,
) -> Result<(Outcome, Vec<String>), HostError> {
    let graph = case.graph()?;
    let bytes = ragged_schema::wire::encode_graph(&graph);
    let (_, applicable) = handle.applicable_engine_ids(&bytes, 64)?;
    if !applicable.contains(&engine_id) {
        return Ok((
            Outcome::Skip(format!(
                "declined: engine {} does not take multi-node case '{}'",
                hipdnn_shim::engine_id::hex_id(engine_id),
                case.name
            )),
            vec![],
        ));
    }
    let mut harness = GraphHarness::new(graph, &case.pre_supplied()?, seed)?;
    harness.run_reference()?;
    harness.run_engine(handle, engine_id)?;
    let comparisons = harness.validate(mode)?;
    Ok(verdict(
        &comparisons,
        "output",
        "the CPU graph executor",
        mode,
    ))
}
