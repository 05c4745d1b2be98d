//! Which engines can run a graph (`GetApplicableEngineIds`), and the plan they would run.
//!
//! Three outcomes, kept apart on purpose:
//! - the bytes are not a graph at all ⇒ `PluginError::Malformed` (BAD_PARAM). Issue 4 chose this
//!   over schema.md §11's "unverifiable ⇒ 0 engines" because a corrupt buffer is a caller bug
//!   worth surfacing;
//! - a graph this plugin does not handle (other ops, unknown union tags or enum values, features
//!   we do not implement, a newer stamp) ⇒ a [`Decline`]: SUCCESS with 0 engines, reason logged at
//!   INFO — schema evolution must never turn into errors;
//! - a supported graph ⇒ one [`Problem`] holding copies of all it needs, which each listed engine
//!   plans for itself. Every kind goes through the same pipeline ([`accept`]): versions, the
//!   graph's kind, schema validation, then the kind's builder — a single SDPA forward
//!   ([`crate::problem`]), a single SDPA backward ([`crate::backward_problem`]) or a multi-node
//!   graph ([`crate::graph_plan`]).

use std::sync::Arc;

use ragged_core::engine::{Planned, Problem};
use ragged_core::problem::RaggedSdpaProblem;
use ragged_schema::version::{
    PROJECT_PLUGIN_API_VERSION, compute_minimum_plugin_api_version, graph_stamp,
    plugin_meets_requirement, stamp_exceeds_ceiling,
};
use ragged_schema::{Graph, NodeAttributes, SchemaError, SdpaAttributes, SdpaBackwardAttributes};

use crate::abi::types::Severity;
use crate::engines::{self, Engine};
use crate::error::PluginError;
use crate::{backward_problem, graph_plan, logging, problem};

/// Why a well-formed graph is not ours (the project's one decline type, from ragged-core):
/// shown in INFO logs and in errors of the calls that require an applicable graph.
pub use ragged_core::Decline;

fn refuse<T>(
    field: impl Into<String>,
    value: impl std::fmt::Display,
    need: impl Into<String>,
) -> Result<T, Decline> {
    Err(Decline::graph(field, value, need))
}

/// The ids of the listed engines that run this graph, in listing (preference) order; empty for a
/// declined graph. Each engine that declines a graph the plugin accepts logs its own reason.
pub fn applicable_engine_ids(bytes: &[u8]) -> Result<Vec<i64>, PluginError> {
    let problem = match decode(bytes)?.and_then(|graph| accept(&graph)) {
        Ok(accepted) => accepted,
        Err(reason) => {
            logging::log(Severity::INFO, || format!("declining graph: {reason}"));
            return Ok(Vec::new());
        }
    };
    Ok(engines::listed()
        .iter()
        .copied()
        .filter(|engine| match engine.plan(&problem) {
            Ok(_) => true,
            Err(reason) => {
                logging::log(Severity::INFO, || {
                    format!("{} declines the graph: {reason}", engine.name_str())
                });
                false
            }
        })
        .map(|engine| engine.id)
        .collect())
}

/// The problem and `engine`'s plan for it, or an error naming why the engine cannot run this
/// graph.
pub fn require(
    engine: &'static Engine,
    bytes: &[u8],
) -> Result<(Problem, Box<dyn Planned>), PluginError> {
    decode(bytes)?
        .and_then(|graph| accept(&graph))
        .and_then(|problem| engine.plan(&problem).map(|p| (problem, p)))
        .map_err(|reason| PluginError::NotApplicable {
            engine: engine.name_str(),
            reason: reason.to_string(),
        })
}

/// The problem and `engine`'s plan for an already decoded graph (an override-applied copy of a
/// context's graph goes through exactly the checks its bytes did).
pub fn plan_graph(
    engine: &'static Engine,
    graph: &Graph,
) -> Result<(Problem, Box<dyn Planned>), Decline> {
    let problem = Problem::Forward(Arc::new(self::problem(graph)?));
    engine.plan(&problem).map(|p| (problem, p))
}

/// Bytes → graph model. Outer error: malformed bytes; inner: a decline (e.g. an unknown
/// `TensorValue` tag, a newer member we cannot read).
pub fn decode(bytes: &[u8]) -> Result<Result<Graph, Decline>, PluginError> {
    match ragged_schema::wire::decode_graph(bytes) {
        Ok(graph) => Ok(Ok(graph)),
        Err(error @ SchemaError::UnknownTensorValueTag { .. }) => Ok(refuse(
            "tensor value",
            error,
            "a TensorValue member this plugin reads",
        )),
        Err(SchemaError::Validation(error)) => Ok(refuse(
            "validation",
            error,
            "a graph that passes schema validation",
        )),
        Err(error) => Err(PluginError::Malformed {
            what: "op_graph",
            detail: error.to_string(),
        }),
    }
}

/// Graph model → the one problem every engine plans from, or the first reason to decline: the
/// API versions the graph needs, its kind, schema validation, then the kind's builder.
pub fn accept(graph: &Graph) -> Result<Problem, Decline> {
    check_versions(graph)?;
    let kind = Kind::of(graph)?;
    graph
        .validate()
        .or_else(|error| refuse("validation", error, "a graph that passes schema validation"))?;
    Ok(match kind {
        Kind::Forward(sdpa) => {
            problem::check_unsupported_features(sdpa)?;
            let problem = problem::build(graph, sdpa)?;
            crate::byte_extents::check(&problem)?;
            Problem::Forward(Arc::new(problem))
        }
        Kind::Backward(node) => Problem::Backward(Arc::new(backward_problem::build(graph, node)?)),
        Kind::Graph => Problem::Graph(Arc::new(graph_plan::build(graph)?)),
    })
}

/// Which builder a graph goes to.
enum Kind<'g> {
    Forward(&'g SdpaAttributes),
    Backward(&'g SdpaBackwardAttributes),
    Graph,
}

impl<'g> Kind<'g> {
    fn of(graph: &'g Graph) -> Result<Self, Decline> {
        if let [node] = graph.nodes.as_slice()
            && let NodeAttributes::SdpaBackward(backward) = &node.attributes
        {
            return Ok(Kind::Backward(backward));
        }
        if graph_plan::is_graph_path(graph) {
            return Ok(Kind::Graph);
        }
        single_sdpa_node(graph).map(Kind::Forward)
    }
}

/// A single SDPA forward graph → its problem, or the first reason to decline (shape overrides
/// re-plan only these).
pub fn problem(graph: &Graph) -> Result<RaggedSdpaProblem, Decline> {
    match accept(graph)? {
        Problem::Forward(problem) => Ok(Arc::unwrap_or_clone(problem)),
        // A backward node or a multi-node graph: the single-node rule says which.
        _ => single_sdpa_node(graph).and_then(|_| {
            refuse(
                "nodes",
                graph.nodes.len(),
                "exactly one SdpaAttributes node",
            )
        }),
    }
}

fn check_versions(graph: &Graph) -> Result<(), Decline> {
    if stamp_exceeds_ceiling(graph) {
        return refuse(
            "min_required_engine_api_version",
            graph_stamp(graph),
            format!(
                "at most the supported ceiling {}",
                ragged_schema::version::GRAPH_STAMP_CEILING
            ),
        );
    }
    if !plugin_meets_requirement(&PROJECT_PLUGIN_API_VERSION, graph) {
        let need = compute_minimum_plugin_api_version(graph);
        return refuse(
            "the engine API the graph needs",
            need.version,
            format!("at most {PROJECT_PLUGIN_API_VERSION}, the API this plugin implements"),
        );
    }
    Ok(())
}

fn single_sdpa_node(graph: &Graph) -> Result<&SdpaAttributes, Decline> {
    let [node] = graph.nodes.as_slice() else {
        return refuse(
            "nodes",
            graph.nodes.len(),
            "exactly one SdpaAttributes node",
        );
    };
    let field = || format!("node {:?} attributes", node.name);
    match &node.attributes {
        NodeAttributes::Sdpa(sdpa) => Ok(sdpa),
        NodeAttributes::None => refuse(field(), "none (union tag NONE)", "SdpaAttributes"),
        NodeAttributes::Pointwise(_) => refuse(
            field(),
            "PointwiseAttributes (union tag 2)",
            "SdpaAttributes",
        ),
        NodeAttributes::SdpaBackward(_) => refuse(
            field(),
            "SdpaBackwardAttributes (union tag 15)",
            "SdpaAttributes: shape overrides re-plan a forward node only (a backward graph runs \
             without overrides)",
        ),
        NodeAttributes::Unsupported { tag, name } => refuse(
            field(),
            format!("{name} (union tag {tag})"),
            "SdpaAttributes",
        ),
    }
}

#[cfg(test)]
#[path = "applicability_tests.rs"]
mod tests;
