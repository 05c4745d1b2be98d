//! Per-graph dispatch (plugin-abi.md §8.3, versioning.md §4–§5): the graph's stamp is checked
//! against the deserialize ceiling, then each loaded plugin is skipped by version, skipped for a
//! missing override entry point, or offered the graph through `GetApplicableEngineIds`, whose
//! answer is checked as the backend checks it.

use std::collections::HashSet;
use std::fmt;

use ragged_schema::model::Graph;

use crate::api_version::ApiVersion;
use crate::engine_id::hex_id;
use crate::host_error::HostError;
use crate::log::Log;
use crate::manager::LoadedPlugin;
use crate::plugin::PluginHandle;

/// What the backend needs to know about a graph before offering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphRequirements {
    /// Computed from features (flag OR ragged tensors, alignment, pass-by-value, override).
    pub required: ApiVersion,
    /// One line per feature that raised the requirement, highest first.
    pub reasons: Vec<String>,
    pub override_shape_enabled: bool,
    /// `min_required_engine_api_version`, absent ⇒ 1.0.0; used only for the ceiling.
    pub stamp: ApiVersion,
}

impl GraphRequirements {
    pub fn of(graph: &Graph) -> GraphRequirements {
        let (required, reasons) = ApiVersion::required_by(graph);
        GraphRequirements {
            required,
            reasons,
            override_shape_enabled: graph.is_override_shape_enabled,
            stamp: ApiVersion::stamp_of(graph),
        }
    }

    /// The deserialize ceiling: a stamp above the supported maximum is rejected before any
    /// plugin sees the graph.
    pub fn check_ceiling(&self) -> Result<(), HostError> {
        let max = ApiVersion::graph_stamp_ceiling();
        if self.stamp > max {
            return Err(HostError::GraphStampAboveCeiling {
                stamp: self.stamp.to_string(),
                max: max.to_string(),
            });
        }
        Ok(())
    }
}

/// The backend's decision for one (plugin, graph) pair, before any plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `GetApplicableEngineIds` will be called.
    Offer,
    /// Rule 1: declared version below the graph's requirement.
    SkipVersion,
    /// Rule 2: override-enabled graph, `ExecuteOpGraphWithOverrides` not exported.
    SkipOverride,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gate::Offer => "offered",
            Gate::SkipVersion => "skipped (version)",
            Gate::SkipOverride => "skipped (no override entry point)",
        })
    }
}

/// Rules 1 and 2 of versioning.md §4, logging the skip line hipDNN prints.
pub fn gate(plugin: &LoadedPlugin, requirements: &GraphRequirements, log: &mut Log) -> Gate {
    if plugin.api_version < requirements.required {
        log.info(skip_line(plugin, requirements));
        return Gate::SkipVersion;
    }
    if requirements.override_shape_enabled && !plugin.plugin.engine().has_execute_with_overrides {
        log.info(format!(
            "Skipping plugin '{}' for override-enabled graph because it does not export hipdnnEnginePluginExecuteOpGraphWithOverrides",
            plugin.name
        ));
        return Gate::SkipOverride;
    }
    Gate::Offer
}

/// `Skipping plugin '<name>' (apiVersion=<v>) for graph requiring at least <r>`.
pub fn skip_line(plugin: &LoadedPlugin, requirements: &GraphRequirements) -> String {
    format!(
        "Skipping plugin '{}' (apiVersion={}) for graph requiring at least {}",
        plugin.name, plugin.api_version, requirements.required
    )
}

/// Offers serialized graph bytes to one plugin handle and validates the answer: count within the
/// buffer, no duplicates, every id among the plugin's engines. Ids of engines dropped at load are
/// skipped with an INFO line.
pub fn offer(
    plugin: &LoadedPlugin,
    handle: &PluginHandle<'_>,
    graph_bytes: &[u8],
    log: &mut Log,
) -> Result<Vec<i64>, HostError> {
    let max = u32::try_from(plugin.engines.len()).unwrap_or(u32::MAX);
    let answer = handle.applicable_engine_ids(graph_bytes, max);
    // hipDNN's backend forwards plugin log lines as they arrive; what the plugin said about this
    // graph (why it declines it, above all) belongs in the log next to the offer.
    log.absorb_plugin_messages();
    let (reported, ids) = answer?;
    if reported > max {
        return Err(HostError::TooManyApplicableEngines {
            returned: reported,
            max,
        });
    }
    let mut seen = HashSet::new();
    let mut admitted = Vec::new();
    for id in ids {
        if !seen.insert(id) {
            return Err(HostError::DuplicateEngineIds(hex_id(id)));
        }
        match plugin.engines.iter().find(|e| e.id == id) {
            None => return Err(HostError::UnknownApplicableEngine(hex_id(id))),
            Some(e) if !e.admitted => log.info(format!(
                "Skipping engine {} of plugin '{}': it was dropped at load",
                hex_id(id),
                plugin.name
            )),
            Some(_) => admitted.push(id),
        }
    }
    let names: Vec<String> = admitted
        .iter()
        .filter_map(|id| plugin.engines.iter().find(|e| e.id == *id))
        .map(|e| e.name.clone())
        .collect();
    log.info(format!(
        "Offered graph to plugin '{}': {} applicable engine(s) [{}]",
        plugin.name,
        admitted.len(),
        names.join(", ")
    ));
    Ok(admitted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphs::decision_table_graphs;
    use ragged_schema::model::EngineApiVersion;

    #[test]
    fn a_stamp_above_the_ceiling_is_rejected_before_any_plugin_is_asked() {
        let mut g = decision_table_graphs().remove(0).graph;
        g.min_required_engine_api_version = Some(EngineApiVersion::new(1, 5, 0));
        let err = GraphRequirements::of(&g)
            .check_ceiling()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "graph is stamped with min_required_engine_api_version 1.5.0, above the supported maximum 1.3.0; rejected at deserialize"
            )
        );
        g.min_required_engine_api_version = Some(EngineApiVersion::new(1, 3, 0));
        assert!(GraphRequirements::of(&g).check_ceiling().is_ok());
    }

    #[test]
    fn g3_with_default_alignment_everywhere_behaves_like_g0() {
        let mut graphs = decision_table_graphs();
        let mut g3 = graphs.remove(3).graph;
        for t in &mut g3.tensors {
            t.alignment = 16;
        }
        assert_eq!(GraphRequirements::of(&g3).required.to_string(), "1.0.0");
        assert_eq!(
            GraphRequirements::of(&graphs[0].graph).required.to_string(),
            "1.0.0"
        );
    }
}
