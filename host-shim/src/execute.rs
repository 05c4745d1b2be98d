//! Which entry point the backend executes a plan through (`EnginePluginResourceManager`'s
//! execute path, plugin-abi.md §5.7 and versioning.md §4): an empty override set goes through
//! `ExecuteOpGraph`; a non-empty one needs an override-enabled graph, a plugin declaring at least
//! 1.1.0 (re-checked at execute time) and the exported `ExecuteOpGraphWithOverrides`, and goes
//! through it. Anything else is refused before the plugin is called.

use std::ffi::c_void;

use ragged_schema::model::Graph;
use ragged_schema::version as schema_version;

use crate::abi::DeviceBuffer;
use crate::api_version::ApiVersion;
use crate::host_error::HostError;
use crate::manager::LoadedPlugin;
use crate::plugin::ExecutionContext;
pub use crate::plugin::optional::ShapeOverride;

/// The entry point a call takes, or why the backend refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    ExecuteOpGraph,
    WithOverrides,
    Refused(String),
}

/// The backend's choice for `overrides` on `graph` executed by `plugin`.
pub fn route(plugin: &LoadedPlugin, graph: &Graph, overrides: &[ShapeOverride]) -> Route {
    decide(
        &plugin.name,
        plugin.api_version,
        plugin.plugin.engine().has_execute_with_overrides,
        graph,
        overrides,
    )
}

/// [`route`] over the plugin facts it reads.
pub fn decide(
    name: &str,
    api_version: ApiVersion,
    exports_overrides: bool,
    graph: &Graph,
    overrides: &[ShapeOverride],
) -> Route {
    if overrides.is_empty() {
        return Route::ExecuteOpGraph;
    }
    if !graph.is_override_shape_enabled {
        return Route::Refused(format!(
            "shape overrides given for a graph that is not override-enabled \
             (is_override_shape_enabled = false; first override uid {})",
            overrides[0].uid
        ));
    }
    let needed = {
        let v = schema_version::API_1_1_0;
        ApiVersion {
            major: v.major,
            minor: v.minor,
            patch: v.patch,
        }
    };
    if api_version < needed {
        return Route::Refused(format!(
            "Plugin '{name}' (apiVersion={api_version}) cannot execute shape overrides, which \
             require at least {needed}"
        ));
    }
    if !exports_overrides {
        return Route::Refused(format!(
            "Plugin '{name}' does not export hipdnnEnginePluginExecuteOpGraphWithOverrides"
        ));
    }
    Route::WithOverrides
}

/// Executes `context` (created by `plugin` for `graph`) the way the backend does.
///
/// # Safety
/// As [`ExecutionContext::execute`], with every pointer sized for the overridden shapes.
pub unsafe fn execute(
    plugin: &LoadedPlugin,
    graph: &Graph,
    context: &ExecutionContext<'_, '_>,
    workspace: *mut c_void,
    buffers: &[DeviceBuffer],
    overrides: &[ShapeOverride],
) -> Result<(), HostError> {
    match route(plugin, graph, overrides) {
        // SAFETY: forwarded contract.
        Route::ExecuteOpGraph => unsafe { context.execute(workspace, buffers) },
        // SAFETY: forwarded contract.
        Route::WithOverrides => unsafe {
            context.execute_with_overrides(workspace, buffers, overrides)
        },
        Route::Refused(reason) => Err(HostError::Harness(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphs::decision_table_graphs;

    fn v(text: &str) -> ApiVersion {
        ApiVersion::parse(text).unwrap_or_else(|| panic!("{text}"))
    }

    fn one() -> Vec<ShapeOverride> {
        vec![ShapeOverride {
            uid: 1,
            dims: vec![3, 4, 2, 8],
            strides: vec![64, 16, 8, 1],
        }]
    }

    fn g1() -> Graph {
        let mut g = decision_table_graphs().remove(0).graph;
        g.is_override_shape_enabled = true;
        g
    }

    #[test]
    fn an_empty_override_set_always_goes_through_execute_op_graph() {
        assert_eq!(
            decide("p", v("1.0.0"), false, &g1(), &[]),
            Route::ExecuteOpGraph
        );
    }

    #[test]
    fn overrides_take_the_override_entry_point_when_everything_allows_it() {
        assert_eq!(
            decide("p", v("1.4.0"), true, &g1(), &one()),
            Route::WithOverrides
        );
        assert_eq!(
            decide("p", v("1.1.0"), true, &g1(), &one()),
            Route::WithOverrides
        );
    }

    #[test]
    fn each_missing_condition_is_refused_with_its_own_reason() {
        let plain = decision_table_graphs().remove(0).graph;
        let refused = |route: Route| match route {
            Route::Refused(why) => why,
            other => panic!("{other:?}"),
        };
        let why = refused(decide("p", v("1.4.0"), true, &plain, &one()));
        assert!(
            why.contains("not override-enabled") && why.contains("uid 1"),
            "{why}"
        );
        let why = refused(decide("p", v("1.0.0"), true, &g1(), &one()));
        assert!(
            why.contains("apiVersion=1.0.0") && why.contains("1.1.0"),
            "{why}"
        );
        let why = refused(decide("p", v("1.3.0"), false, &g1(), &one()));
        assert!(
            why.contains("does not export hipdnnEnginePluginExecuteOpGraphWithOverrides"),
            "{why}"
        );
    }
}
