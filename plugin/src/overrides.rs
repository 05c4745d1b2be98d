//! Override shapes at execute (RFC 0008): one execution context serving a new batch size B and
//! new S_max per call, without being rebuilt.
//!
//! An override replaces the dims and strides of listed tensor uids of an override-enabled graph
//! for one call. The overridden graph then goes through exactly the checks a new graph would
//! ([`applicability::plan_graph`]: ragged layout, `[B+1,1,1,1]` offsets, GQA ratio, head dims
//! the engine supports), so an override is never trusted more than a graph. What it adds on top:
//! the graph must be override-enabled, every uid must name a tensor of the graph once, the rank
//! must stay, and the call's plan may not need more workspace than the context reported (the
//! caller sized its workspace from that report).
//!
//! Planning is shape arithmetic; compiled GPU kernels are process-wide and shared, so a
//! re-plan per call is what "one compiled plan" costs here. The context's own plan is left as
//! it is: a plain `ExecuteOpGraph` on it still runs the compiled shapes.

use std::ffi::c_void;

use ragged_schema::Graph;

use crate::abi::types::DeviceBuffer;
use crate::applicability;
use crate::error::PluginError;
use crate::execution_context::{ExecutionContext, Plan};

/// One override: new dims and strides for the tensor with `uid`, copied out of the C arrays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeOverride {
    pub uid: i64,
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
}

fn invalid<T>(message: String) -> Result<T, PluginError> {
    Err(PluginError::InvalidValue(message))
}

/// `graph` with `overrides` applied, or why they cannot be: each message names the uid and the
/// offending field and value.
pub fn apply(graph: &Graph, overrides: &[ShapeOverride]) -> Result<Graph, PluginError> {
    if !graph.is_override_shape_enabled {
        return invalid(format!(
            "{} shape override(s) given (first uid {}) but the graph's is_override_shape_enabled \
             is false",
            overrides.len(),
            overrides.first().map_or(0, |o| o.uid)
        ));
    }
    let mut out = graph.clone();
    for (i, item) in overrides.iter().enumerate() {
        if overrides[..i].iter().any(|earlier| earlier.uid == item.uid) {
            return invalid(format!(
                "override_unique_ids[{i}] = {}: the uid is overridden twice",
                item.uid
            ));
        }
        let Some(tensor) = out.tensors.iter_mut().find(|t| t.uid == item.uid) else {
            return invalid(format!(
                "override_unique_ids[{i}] = {}: the graph has no tensor with this uid",
                item.uid
            ));
        };
        if item.dims.len() != tensor.dims.len() {
            return invalid(format!(
                "tensor uid {}: override_lengths[{i}] = {}, but the tensor has rank {}",
                item.uid,
                item.dims.len(),
                tensor.dims.len()
            ));
        }
        if let Some(d) = item.dims.iter().find(|d| **d <= 0) {
            return invalid(format!(
                "tensor uid {}: override dims {:?} hold {d}; every dimension must be positive",
                item.uid, item.dims
            ));
        }
        tensor.dims.clone_from(&item.dims);
        tensor.strides.clone_from(&item.strides);
    }
    Ok(out)
}

/// Runs `context` over one call's variant pack with `overrides` applied; no override runs the
/// compiled shapes. Nothing is written unless every check passes.
///
/// # Safety
/// As [`ExecutionContext::execute`], with every pointer valid for the extent the *overridden*
/// shapes imply.
pub unsafe fn execute(
    context: &ExecutionContext,
    stream: *mut c_void,
    workspace: *mut c_void,
    buffers: &[DeviceBuffer],
    overrides: &[ShapeOverride],
) -> Result<(), PluginError> {
    if overrides.is_empty() {
        // SAFETY: forwarded contract.
        return unsafe { context.execute(stream, workspace, buffers) };
    }
    let graph = match applicability::decode(context.graph_bytes())? {
        Ok(graph) => graph,
        Err(decline) => return Err(internal_graph_error(decline)),
    };
    let graph = apply(&graph, overrides)?;
    let engine = context.engine();
    let (problem, planned) = applicability::plan_graph(engine, &graph).map_err(|reason| {
        PluginError::InvalidValue(format!(
            "the shape overrides give a graph {} cannot run: {reason}",
            engine.name_str()
        ))
    })?;
    if planned.workspace_size() > context.workspace_size() {
        return invalid(format!(
            "the shape overrides need {} workspace bytes, above the {} the execution context \
             reported",
            planned.workspace_size(),
            context.workspace_size()
        ));
    }
    let plan = Plan::new(problem, planned);
    // SAFETY: forwarded contract: the pointers are valid for the overridden extents, and the
    // workspace holds the context's size, at least the new plan's (checked above).
    unsafe { plan.execute(stream, workspace, buffers) }
}

/// The context's own graph decoded once already; failing now is our bug, not the caller's.
fn internal_graph_error(decline: applicability::Decline) -> PluginError {
    PluginError::Engine(format!(
        "the execution context's stored graph no longer decodes: {decline}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_graphs::golden;

    fn enabled() -> Graph {
        let mut g = golden();
        g.is_override_shape_enabled = true;
        g
    }

    fn message(result: Result<Graph, PluginError>) -> String {
        match result {
            Ok(_) => panic!("override accepted"),
            Err(e) => {
                assert_eq!(e.status(), crate::abi::types::Status::INVALID_VALUE, "{e}");
                e.to_string()
            }
        }
    }

    fn item(uid: i64, dims: &[i64]) -> ShapeOverride {
        ShapeOverride {
            uid,
            dims: dims.to_vec(),
            strides: vec![1; dims.len()],
        }
    }

    #[test]
    fn a_graph_without_the_flag_takes_no_override() {
        let text = message(apply(&golden(), &[item(5, &[2, 1, 1, 1])]));
        assert!(
            text.contains("is_override_shape_enabled is false"),
            "{text}"
        );
        assert!(text.contains("first uid 5"), "{text}");
    }

    #[test]
    fn unknown_repeated_and_rank_changing_uids_are_named() {
        let text = message(apply(&enabled(), &[item(777, &[1, 1, 1, 1])]));
        assert!(text.contains("override_unique_ids[0] = 777"), "{text}");
        let text = message(apply(
            &enabled(),
            &[item(5, &[2, 1, 1, 1]), item(5, &[2, 1, 1, 1])],
        ));
        assert!(text.contains("override_unique_ids[1] = 5"), "{text}");
        assert!(text.contains("twice"), "{text}");
        let text = message(apply(&enabled(), &[item(5, &[2, 1])]));
        assert!(
            text.contains("tensor uid 5: override_lengths[0] = 2, but the tensor has rank 4"),
            "{text}"
        );
        let text = message(apply(&enabled(), &[item(5, &[0, 1, 1, 1])]));
        assert!(
            text.contains("tensor uid 5") && text.contains("hold 0"),
            "{text}"
        );
    }

    #[test]
    fn accepted_overrides_replace_only_the_listed_tensors() {
        let graph = enabled();
        let over = ShapeOverride {
            uid: 5,
            dims: vec![4, 1, 1, 1],
            strides: vec![1, 1, 1, 1],
        };
        let out = apply(&graph, std::slice::from_ref(&over)).expect("accepted");
        for (before, after) in graph.tensors.iter().zip(&out.tensors) {
            if before.uid == 5 {
                assert_eq!(after.dims, over.dims);
                assert_eq!(after.strides, over.strides);
            } else {
                assert_eq!(before, after);
            }
        }
    }

    /// A new B on Q/O without resizing their offsets is caught by the graph's own rule.
    #[test]
    fn an_override_breaking_a_graph_rule_is_declined_by_that_rule() {
        let graph = enabled();
        let q = graph.tensor(1).cloned().expect("Q");
        let mut dims = q.dims.clone();
        dims[0] += 1;
        let over = ShapeOverride {
            uid: 1,
            dims,
            strides: q.strides.clone(),
        };
        let applied = apply(&graph, &[over]).expect("structurally fine");
        let result = applicability::plan_graph(&crate::engines::HOST_REFERENCE, &applied);
        let reason = result.err().map(|d| d.to_string()).unwrap_or_default();
        assert!(
            !reason.is_empty(),
            "a Q batch of B+1 over [B+1] offsets ran"
        );
    }
}
