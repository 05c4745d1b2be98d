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
    if plugin.api_version < needed {
        return Route::Refused(format!(
            "Plugin '{}' (apiVersion={}) cannot execute shape overrides, which require at least {needed}",
            plugin.name, plugin.api_version
        ));
    }
    if !plugin.plugin.engine().has_execute_with_overrides {
        return Route::Refused(format!(
            "Plugin '{}' does not export hipdnnEnginePluginExecuteOpGraphWithOverrides",
            plugin.name
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
