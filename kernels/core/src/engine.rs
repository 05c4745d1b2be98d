//! What an engine is to the plugin: a listing probe, a planner over the accepted [`Problem`], and
//! a plan that runs one [`Call`] at a time.
//!
//! Each engine crate implements [`Planner`] and [`Planned`]; the plugin holds the list of engines,
//! accepts a graph into one [`Problem`], asks each engine for its plan, binds each execute's
//! buffers into a [`Call`] as the plan's [`Reach`] asks, and calls [`Planned::execute`].

use std::fmt;
use std::sync::Arc;

use crate::binding::{Call, Signature, Stream};
use crate::contract::Decline;
use crate::error::KernelError;
use crate::graph::ExecGraph;
use crate::problem::{BackwardProblem, RaggedSdpaProblem};

/// What the plugin accepted from one graph.
/// Each is shared by the execution context and the plan an engine makes for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// One SDPA forward node.
    Forward(Arc<RaggedSdpaProblem>),
    /// One SDPA backward node.
    Backward(Arc<BackwardProblem>),
    /// A multi-node graph (SDPA and pointwise nodes), which the CPU executor runs.
    Graph(Arc<ExecGraph>),
}

impl Problem {
    /// Every buffer an execute binds for this problem.
    pub fn signature(&self) -> Signature {
        match self {
            Problem::Forward(p) => Signature::forward(p),
            Problem::Backward(p) => Signature::backward(p),
            Problem::Graph(g) => Signature::graph(g),
        }
    }
}

/// What an engine's probe found: whether to list it, and the INFO line that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub listed: bool,
    pub line: Option<String>,
}

/// The memory a plan's execute reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Host slices: the binder copies device-resident buffers to the host and the outputs back.
    Host,
    /// Device addresses, handed to device code on the call's stream.
    Device,
}

/// An engine's process-time and graph-time halves.
pub trait Planner: Sync {
    /// Whether this engine can run in this process (probed once; the list is cached).
    fn listing(&self) -> Listing;

    /// This engine's plan for `problem`, or why it cannot run it (uid, field, value, need).
    fn plan(&self, problem: &Problem) -> Result<Box<dyn Planned>, Decline>;
}

/// One engine's plan for one problem, owned by an execution context and shared by every thread
/// executing it (nothing in a plan changes after creation).
pub trait Planned: fmt::Debug + Send + Sync {
    /// Which memory [`Planned::execute`] reads and writes.
    fn reach(&self) -> Reach;

    /// Device scratch the caller allocates for each execute.
    fn workspace_size(&self) -> usize {
        0
    }

    /// Moves one-time GPU work (kernel compilation and loading) out of the first execute.
    fn prepare(&self, stream: Stream<'_>) -> Result<(), KernelError> {
        let _ = stream;
        Ok(())
    }

    /// Runs the plan over one call's bound buffers.
    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError>;
}

/// The decline of an engine that runs single SDPA nodes only, for a multi-node graph.
pub fn multi_node_declined(graph: &ExecGraph) -> Decline {
    Decline::graph(
        "nodes",
        graph.nodes.len(),
        "a single SdpaAttributes node: this engine does not run multi-node or pointwise graphs \
         (the host reference engine does)",
    )
}
