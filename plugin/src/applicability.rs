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

use ragged_kernels::problem::RaggedSdpaProblem;
use ragged_schema::version::{
    PROJECT_PLUGIN_API_VERSION, compute_minimum_plugin_api_version, graph_stamp,
    plugin_meets_requirement, stamp_exceeds_ceiling,
};
use ragged_schema::{Graph, NodeAttributes, SchemaError, SdpaAttributes};

use crate::abi::types::Severity;
use crate::engines::{self, Engine, Planned};
use crate::error::PluginError;
use crate::{logging, problem};

/// Why a well-formed graph is not ours; shown in INFO logs and in errors of the calls that
/// require an applicable graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline(pub String);

/// An engine's decline (uid, field, value and need) in the plugin's words: its text.
impl From<ragged_kernels::Decline> for Decline {
    fn from(decline: ragged_kernels::Decline) -> Self {
        Decline(decline.to_string())
    }
}

macro_rules! decline {
    ($($arg:tt)*) => { return Err(Decline(format!($($arg)*))) };
}

/// The listed engines that run this graph, in listing (preference) order; empty for a declined
/// graph. Each engine that declines a graph the plugin accepts logs its own reason.
pub fn applicable_engines(bytes: &[u8]) -> Result<Vec<&'static Engine>, PluginError> {
    let sdpa = match decode(bytes)?.and_then(|graph| problem(&graph)) {
        Ok(sdpa) => sdpa,
        Err(Decline(reason)) => {
            logging::log(Severity::INFO, || format!("declining graph: {reason}"));
            return Ok(Vec::new());
        }
    };
    Ok(engines::listed()
        .iter()
        .copied()
        .filter(|engine| match engine.plan(&sdpa) {
            Ok(_) => true,
            Err(Decline(reason)) => {
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
) -> Result<(RaggedSdpaProblem, Box<dyn Planned>), PluginError> {
    decode(bytes)?
        .and_then(|graph| problem(&graph))
        .and_then(|sdpa| engine.plan(&sdpa).map(|p| (sdpa, p)))
        .map_err(|Decline(reason)| PluginError::NotApplicable {
            engine: engine.name_str(),
            reason,
        })
}

/// Bytes → graph model. Outer error: malformed bytes; inner: a decline (e.g. an unknown
/// `TensorValue` tag, a newer member we cannot read).
fn decode(bytes: &[u8]) -> Result<Result<Graph, Decline>, PluginError> {
    match ragged_schema::wire::decode_graph(bytes) {
        Ok(graph) => Ok(Ok(graph)),
        Err(error @ SchemaError::UnknownTensorValueTag { .. }) => {
            Ok(Err(Decline(error.to_string())))
        }
        Err(SchemaError::Validation(error)) => Ok(Err(Decline(error.to_string()))),
        Err(error) => Err(PluginError::Malformed {
            what: "op_graph",
            detail: error.to_string(),
        }),
    }
}

/// Graph model → problem, or the first reason to decline.
pub fn problem(graph: &Graph) -> Result<RaggedSdpaProblem, Decline> {
    check_versions(graph)?;
    let sdpa = single_sdpa_node(graph)?;
    if let Err(error) = graph.validate() {
        decline!("{error}");
    }
    check_unsupported_features(sdpa)?;
    problem::build(graph, sdpa)
}

fn check_versions(graph: &Graph) -> Result<(), Decline> {
    if stamp_exceeds_ceiling(graph) {
        decline!(
            "graph is stamped min_required_engine_api_version {}, above the supported ceiling {}",
            graph_stamp(graph),
            ragged_schema::version::MAX_SUPPORTED_API_VERSION
        );
    }
    if graph.is_override_shape_enabled {
        decline!(
            "is_override_shape_enabled is true and this plugin does not export \
             hipdnnEnginePluginExecuteOpGraphWithOverrides"
        );
    }
    if !plugin_meets_requirement(&PROJECT_PLUGIN_API_VERSION, graph) {
        let need = compute_minimum_plugin_api_version(graph);
        decline!(
            "graph needs engine API {} and this plugin implements {PROJECT_PLUGIN_API_VERSION}",
            need.version
        );
    }
    Ok(())
}

fn single_sdpa_node(graph: &Graph) -> Result<&SdpaAttributes, Decline> {
    let [node] = graph.nodes.as_slice() else {
        decline!(
            "graph has {} nodes; this plugin runs exactly one SdpaAttributes node",
            graph.nodes.len()
        );
    };
    match &node.attributes {
        NodeAttributes::Sdpa(sdpa) => Ok(sdpa),
        NodeAttributes::None => decline!("node {:?} has no attributes (union tag NONE)", node.name),
        NodeAttributes::Unsupported { tag, name } => {
            decline!(
                "node {:?} is {name} (union tag {tag}), not SdpaAttributes",
                node.name
            )
        }
    }
}

fn check_unsupported_features(sdpa: &SdpaAttributes) -> Result<(), Decline> {
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
        decline!("{field} is set (tensor uid {uid}); that SDPA feature is not supported");
    }
    if sdpa.alibi_mask {
        decline!("alibi_mask is true; ALiBi is not supported");
    }
    // Only an exact 0 means "no dropout": a NaN or negative probability is no probability at
    // all, and `p > 0.0` would have let both through as if dropout were off.
    if let Some(p) = sdpa.dropout_probability.filter(|p| *p != 0.0) {
        decline!("dropout_probability is {p}; only 0 (no dropout) is supported");
    }
    Ok(())
}

#[cfg(test)]
#[path = "applicability_tests.rs"]
mod tests;
