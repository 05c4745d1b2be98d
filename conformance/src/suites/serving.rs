//! Suite (f): serving graphs — paged K/V prefill and decode, attention sinks
//! (kernels/core/paged-kv-and-sinks.md) — on every engine of a plugin, against the CPU reference.
//!
//! These are features a plugin may legitimately not implement: an engine that declines a case
//! is reported as DECLINED with the plugin's logged reason, never as a failure. An engine that
//! accepts one must compute it.

use super::engine_cases::run_cases;
use crate::report::{Outcome, Report};
use hipdnn_shim::HostError;
use hipdnn_shim::manager::{Engine, LoadedPlugin};
use hipdnn_shim::serving_graphs::{ServingCase, cases};

use super::numeric::{NumericOptions, optional_feature_case};

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

fn run_case(
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    engine: &Engine,
    case: &ServingCase,
    options: &NumericOptions,
) -> Result<(Outcome, Vec<String>), HostError> {
    optional_feature_case(
        handle,
        engine,
        (case.name, "paged K/V or sinks"),
        case.graph(),
        &case.pre_supplied()?,
        options,
    )
}
