//! Suite (f): serving graphs — paged K/V prefill and decode, attention sinks
//! (kernels/core/paged-kv-and-sinks.md) — on every engine of a plugin, against the CPU reference.
//!
//! These are features a plugin may legitimately not implement: an engine that declines a case
//! is reported as DECLINED with the plugin's logged reason, never as a failure. An engine that
//! accepts one must compute it.

use super::engine_cases::run_cases;
use crate::report::{Outcome, Report};
use hipdnn_shim::HostError;
use hipdnn_shim::harness::Harness;
use hipdnn_shim::manager::{Engine, LoadedPlugin};
use hipdnn_shim::serving_graphs::{ServingCase, cases};

use super::numeric::{NumericOptions, against_reference};

pub fn run(plugin: &LoadedPlugin, options: &NumericOptions) -> Report {
    let cases = cases();
    run_cases(
        plugin,
        "serving",
        &cases,
        |c| c.name,
        |handle, engine, case| {
            run_case(handle, engine, case, options)
                .unwrap_or_else(|e| (Outcome::Fail(e.to_string()), vec![]))
        },
    )
}

/// Whether the engine takes the case is asked first, on any machine: a decline needs no device.
fn run_case(
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    engine: &Engine,
    case: &ServingCase,
    options: &NumericOptions,
) -> Result<(Outcome, Vec<String>), HostError> {
    let engine_id = engine.id;
    let graph = case.graph();
    let bytes = ragged_schema::wire::encode_graph(&graph);
    let (_, applicable) = handle.applicable_engine_ids(&bytes, 64)?;
    if !applicable.contains(&engine_id) {
        return Ok((
            Outcome::Declined(format!(
                "engine {} declines '{}' (paged K/V or sinks; the plugin's INFO log says why)",
                hipdnn_shim::engine_id::hex_id(engine_id),
                case.name
            )),
            vec![],
        ));
    }
    let on_host = options.host_engines.contains(&engine.name);
    if !on_host && options.device.is_none() {
        return Ok((
            Outcome::Skip(format!(
                "engine {} accepts the case; it is not a --host-engine and no --device was given",
                engine.name
            )),
            vec![],
        ));
    }
    let device = if on_host { None } else { options.device };
    let harness = Harness::new(graph, &case.pre_supplied()?, options.seed)?;
    against_reference(harness, handle, engine_id, device, options.mode)
}

#[cfg(test)]
mod tests {
    use hipdnn_shim::harness::ValidationMode;

    use super::*;

    /// Every case validates, and the CPU reference as "engine" passes coverage validation
    /// against itself with every output compared.
    #[test]
    fn every_case_runs_on_the_reference() {
        for case in cases() {
            let graph = case.graph();
            graph
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let pre = case
                .pre_supplied()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let mut h =
                Harness::new(graph, &pre, 1).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            h.run_reference()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            std::mem::swap(&mut h.reference, &mut h.engine);
            h.run_reference()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let ok = h
                .validate(ValidationMode::Coverage)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert!(
                ok.iter().all(|c| c.passed() && c.compared > 0),
                "{}: {ok:?}",
                case.name
            );
        }
    }
}
