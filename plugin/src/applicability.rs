//! Which engines can run a graph (`GetApplicableEngineIds`), and the plan they would run.
//!
//! Three outcomes, kept apart on purpose:
//! - the bytes are not a graph at all ⇒ `PluginError::Malformed` (BAD_PARAM). Issue 4 chose this
//!   over schema.md §11's "unverifiable ⇒ 0 engines" because a corrupt buffer is a caller bug
//!   worth surfacing;
//! - a graph this plugin does not handle (other ops, unknown union tags or enum values, features
//!   we do not implement, a newer stamp) ⇒ a [`Decline`]: SUCCESS with 0 engines, reason logged at
//!   INFO — schema evolution must never turn into errors;
//! - a supported single-node SDPA forward ⇒ a [`RaggedSdpaProblem`] holding copies of all it
//!   needs ([`crate::problem`] builds it), which each listed engine plans for itself.

use ragged_core::problem::RaggedSdpaProblem;
use ragged_schema::version::{
    PROJECT_PLUGIN_API_VERSION, compute_minimum_plugin_api_version, graph_stamp,
    plugin_meets_requirement, stamp_exceeds_ceiling,
};
use ragged_schema::{Graph, NodeAttributes, SchemaError, SdpaAttributes};

use crate::abi::types::Severity;
use crate::backward_problem;
use ragged_core::problem::BackwardProblem;
use crate::engines::{self, Engine, Planned};
use crate::error::PluginError;
use crate::graph_plan::{self, GraphPlan};
use crate::{logging, problem};
use std::sync::Arc;

/// Why a well-formed graph is not ours (the project's one decline type, from the kernels crate):
/// shown in INFO logs and in errors of the calls that require an applicable graph.
pub use ragged_core::Decline;

fn refuse<T>(
    field: impl Into<String>,
    value: impl std::fmt::Display,
    need: impl Into<String>,
) -> Result<T, Decline> {
    Err(Decline::graph(field, value, need))
}

/// The listed engines that run this graph, in listing (preference) order; empty for a declined
/// graph. Each engine that declines a graph the plugin accepts logs its own reason.
pub fn applicable_engines(bytes: &[u8]) -> Result<Vec<&'static Engine>, PluginError> {
    let accepted = match decode(bytes)?.and_then(|graph| accept(&graph)) {
        Ok(accepted) => accepted,
        Err(reason) => {
            logging::log(Severity::INFO, || format!("declining graph: {reason}"));
            return Ok(Vec::new());
        }
    };
    Ok(engines::listed()
        .iter()
        .copied()
        .filter(|engine| match accepted.plan(engine) {
            Ok(_) => true,
            Err(reason) => {
                logging::log(Severity::INFO, || {
                    format!("{} declines the graph: {reason}", engine.name_str())
                });
                false
            }
        })
        .collect())
}

/// The problem and `engine`'s plan for it, or an error naming why the engine cannot run this
/// graph.
pub fn require(
    engine: &'static Engine,
    bytes: &[u8],
) -> Result<(Accepted, Box<dyn Planned>), PluginError> {
    decode(bytes)?
        .and_then(|graph| accept(&graph))
        .and_then(|accepted| accepted.plan(engine).map(|p| (accepted, p)))
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
) -> Result<(RaggedSdpaProblem, Box<dyn Planned>), Decline> {
    problem(graph).and_then(|sdpa| engine.plan(&sdpa).map(|p| (sdpa, p)))
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

/// What the plugin accepted: one SDPA node as a problem every engine may plan, or a multi-node
/// graph for the CPU executor ([`graph_plan`]).
// One per context, so the single-SDPA problem stays unboxed as it always was.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Accepted {
    Sdpa(RaggedSdpaProblem),
    Graph(Arc<GraphPlan>),
    Backward(Arc<BackwardProblem>),
}

impl Accepted {
    fn plan(&self, engine: &Engine) -> Result<Box<dyn Planned>, Decline> {
        match self {
            Accepted::Sdpa(problem) => engine.plan(problem),
            Accepted::Graph(graph) => engine.plan_graph(graph),
            Accepted::Backward(backward) => engine.plan_backward(backward),
        }
    }
}

/// Graph model → what the engines plan for, or the first reason to decline.
pub fn accept(graph: &Graph) -> Result<Accepted, Decline> {
    if let [node] = graph.nodes.as_slice()
        && let NodeAttributes::SdpaBackward(backward) = &node.attributes
    {
        check_versions(graph)?;
        if let Err(error) = graph.validate() {
            return refuse("validation", error, "a graph that passes schema validation");
        }
        return backward_problem::build(graph, backward).map(|p| Accepted::Backward(Arc::new(p)));
    }
    if !graph_plan::is_graph_path(graph) {
        return problem(graph).map(Accepted::Sdpa);
    }
    check_versions(graph)?;
    if let Err(error) = graph.validate() {
        return refuse("validation", error, "a graph that passes schema validation");
    }
    graph_plan::build(graph).map(|plan| Accepted::Graph(Arc::new(plan)))
}

/// Graph model → problem, or the first reason to decline.
pub fn problem(graph: &Graph) -> Result<RaggedSdpaProblem, Decline> {
    check_versions(graph)?;
    let sdpa = single_sdpa_node(graph)?;
    if let Err(error) = graph.validate() {
        return refuse("validation", error, "a graph that passes schema validation");
    }
    check_unsupported_features(sdpa)?;
    let problem = problem::build(graph, sdpa)?;
    crate::byte_extents::check(&problem)?;
    Ok(problem)
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

pub(crate) fn check_unsupported_features(sdpa: &SdpaAttributes) -> Result<(), Decline> {
    let unsupported_uids = [
        ("attn_mask_tensor_uid", sdpa.attn_mask_tensor_uid),
        ("seed_tensor_uid", sdpa.seed_tensor_uid),
        ("offset_tensor_uid", sdpa.offset_tensor_uid),
        ("dropout_mask_tensor_uid", sdpa.dropout_mask_tensor_uid),
        ("dropout_scale_tensor_uid", sdpa.dropout_scale_tensor_uid),
        ("page_table_k_tensor_uid", sdpa.page_table_k_tensor_uid),
        ("page_table_v_tensor_uid", sdpa.page_table_v_tensor_uid),
        ("block_mask_tensor_uid", sdpa.block_mask_tensor_uid),
        ("sink_token_tensor_uid", sdpa.sink_token_tensor_uid),
        ("descale_q_tensor_uid", sdpa.descale_q_tensor_uid),
        ("descale_k_tensor_uid", sdpa.descale_k_tensor_uid),
        ("descale_v_tensor_uid", sdpa.descale_v_tensor_uid),
        ("descale_s_tensor_uid", sdpa.descale_s_tensor_uid),
        ("scale_s_tensor_uid", sdpa.scale_s_tensor_uid),
        ("scale_o_tensor_uid", sdpa.scale_o_tensor_uid),
        ("max_tensor_uid", sdpa.max_tensor_uid),
        ("sum_exp_tensor_uid", sdpa.sum_exp_tensor_uid),
        ("rng_dump_tensor_uid", sdpa.rng_dump_tensor_uid),
        ("amax_s_tensor_uid", sdpa.amax_s_tensor_uid),
        ("amax_o_tensor_uid", sdpa.amax_o_tensor_uid),
    ];
    if let Some((field, Some(uid))) = unsupported_uids.iter().find(|(_, uid)| uid.is_some()) {
        return Err(Decline::new(
            *uid,
            *field,
            uid,
            "unset: that SDPA feature is not supported",
        ));
    }
    if sdpa.alibi_mask {
        return refuse("alibi_mask", true, "false: ALiBi is not supported");
    }
    // Only an exact 0 means "no dropout": a NaN or negative probability is no probability at
    // all, and `p > 0.0` would have let both through as if dropout were off.
    if let Some(p) = sdpa.dropout_probability.filter(|p| *p != 0.0) {
        return refuse("dropout_probability", p, "0 (no dropout)");
    }
    Ok(())
}

#[cfg(test)]
#[path = "applicability_tests.rs"]
mod tests;
