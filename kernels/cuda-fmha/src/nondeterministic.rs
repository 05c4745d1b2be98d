//! `RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC`: the CUDA backward with dQ summed in no fixed order.
//!
//! Issue 42 item 3: the default engine ([`crate::adapter`], `RAGGED_SDPA_CUDA_FMHA`) gives the
//! same bits on every call with the same inputs: on sm_90a its fused dK/dV/dQ kernel adds the dQ
//! contributions to each block of rows in a fixed order of key tiles, waiting for each one's
//! turn. This engine runs the same kernel without the turns, adding in whatever order the blocks
//! get there: 0.98–1.06× the deterministic engine on an H100 (ragged mix, 2 × 8192, 8 × 2048 at
//! D 64, 96 and 128, `bench/RESULTS.md`), ahead by more than 5 % only on some non-causal rows
//! since D 64's dQ reductions halved, under a name that says what it gives up. dQ may differ in its last bits between calls (within the same
//! tolerances against the float64 oracle as the deterministic engine); dK and dV are still written
//! once per row. On other targets (no fused kernel) it runs the deterministic pair.
//!
//! It plans SDPA backward graphs exactly as `RAGGED_SDPA_CUDA_FMHA` does (the same declines and
//! the same workspace).
//! Forward graphs are declined: the forward has no non-deterministic form, and listing the same
//! kernels twice would only give a caller a second, identical choice under a misleading name;
//! `RAGGED_SDPA_CUDA_FMHA` runs them. The plugin lists this engine after the deterministic one,
//! so a caller that takes the first applicable engine stays deterministic.
//!
//! hipDNN's engine details carry behaviour notes (`EngineDetails.behavior_notes`), but the note
//! values upstream defines (`BehaviorNote.h`: runtime compilation, layout transform, graph
//! capture, external library, plan serialization) have none for determinism; the name is where
//! this engine says it.

use std::sync::Arc;

use ragged_core::engine::{self, Listing, Planned, Planner, Problem};
use ragged_core::{Decline, problem::BackwardProblem};

use crate::adapter::{self, BackwardKernelsPlan};
use crate::backward::DqForm;

/// The engine's name as `GetEngineName` reports it.
pub const ENGINE_NAME: &str = "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC";

/// The engine.
pub struct CudaFmhaNondeterministic;

impl Planner for CudaFmhaNondeterministic {
    /// Listed wherever `RAGGED_SDPA_CUDA_FMHA` is: the same runtime probe.
    fn listing(&self) -> Listing {
        adapter::listing_named(ENGINE_NAME, adapter::probe())
    }

    fn plan(&self, problem: &Problem) -> Result<Box<dyn Planned>, Decline> {
        match problem {
            Problem::Backward(p) => Ok(Box::new(plan_backward(p)?)),
            Problem::Forward(_) => Err(forward_declined()),
            Problem::Graph(g) => Err(engine::multi_node_declined(g)),
        }
    }
}

/// The unordered backward's plan; every refusal is the deterministic engine's.
pub fn plan_backward(problem: &Arc<BackwardProblem>) -> Result<BackwardKernelsPlan, Decline> {
    adapter::plan_backward_with(problem, DqForm::Unordered, ENGINE_NAME)
}

/// Why a forward graph is not this engine's.
pub fn forward_declined() -> Decline {
    Decline::graph(
        "node",
        "SdpaAttributes (an SDPA forward)",
        "an SdpaBackwardAttributes node: RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC runs only the \
         backward (the forward has no non-deterministic form; RAGGED_SDPA_CUDA_FMHA runs it)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragged_core::engine::Reach;
    use ragged_core::problem::test_support::{dense_stats, problem, ragged};

    fn backward() -> BackwardProblem {
        let mut forward = problem();
        forward.stats = Some(dense_stats(5, [3, 8, 200, 1], [1600, 200, 1, 1]));
        let lse = forward.stats.expect("an LSE");
        BackwardProblem {
            forward,
            lse,
            d_o: ragged("do_tensor_uid", 31, [3, 200, 8, 128], 10),
            dq: ragged("dq_tensor_uid", 32, [3, 200, 8, 128], 10),
            dk: ragged("dk_tensor_uid", 33, [3, 300, 2, 128], 11),
            dv: ragged("dv_tensor_uid", 34, [3, 300, 2, 128], 11),
        }
    }

    #[test]
    fn backward_graphs_plan_unordered_with_the_same_workspace() {
        let p = Arc::new(backward());
        let det = adapter::plan_backward(&p).expect("the deterministic engine plans it");
        let unordered = plan_backward(&p).expect("so does this one");
        assert_eq!(unordered.engine, ENGINE_NAME);
        assert_eq!(det.engine, adapter::ENGINE_NAME);
        assert_eq!(unordered.plan.dq_form, DqForm::Unordered);
        assert_eq!(det.plan.dq_form, DqForm::Deterministic);
        assert_eq!(unordered.workspace_size(), det.workspace_size());
        assert_eq!(unordered.reach(), Reach::Device);
        let planned = CudaFmhaNondeterministic
            .plan(&Problem::Backward(Arc::clone(&p)))
            .expect("plans through the planner");
        assert_eq!(planned.workspace_size(), unordered.workspace_size());
    }

    #[test]
    fn declines_are_the_deterministic_engines() {
        let mut p = backward();
        p.forward.stats = None;
        let p = Arc::new(p);
        let det = adapter::plan_backward(&p).map(|_| ()).unwrap_err();
        let unordered = plan_backward(&p).map(|_| ()).unwrap_err();
        assert_eq!(det.to_string(), unordered.to_string());
    }

    #[test]
    fn forward_graphs_are_declined_naming_the_deterministic_engine() {
        let forward = Arc::new(problem());
        let decline = CudaFmhaNondeterministic
            .plan(&Problem::Forward(forward))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(decline.uid, None);
        let text = decline.to_string();
        assert!(text.contains("runs only the backward"), "{text}");
        assert!(text.contains("RAGGED_SDPA_CUDA_FMHA runs it"), "{text}");
    }

    #[test]
    fn the_listing_line_names_this_engine() {
        let listed = adapter::listing_named(ENGINE_NAME, Ok("CUDA driver 13.0".into()));
        assert!(listed.listed);
        assert_eq!(
            listed.line.as_deref(),
            Some("RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC listed: CUDA driver 13.0")
        );
        let not = adapter::listing_named(ENGINE_NAME, Err("no driver".into()));
        assert!(!not.listed);
    }
}
