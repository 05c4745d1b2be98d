//! The host engine's multi-node path: every bound tensor of the call, as a typed host slice, to
//! [`ragged_reference::executor::execute`], which allocates the virtual intermediates from the
//! real auxes (RFC §4.10.1).

use std::sync::Arc;

use ragged_core::binding::Call;
use ragged_core::engine::{Planned, Reach};
use ragged_core::graph::ExecGraph;
use ragged_core::{Fault, KernelError};
use ragged_reference::executor::{self, ExecutorError, VariantPack};

use crate::pool;

/// How executor failures are prefixed.
const EXECUTOR: &str = "RAGGED_SDPA_HOST_REFERENCE graph executor";

/// The host engine's plan for a multi-node graph.
#[derive(Debug)]
pub struct HostGraph {
    pub graph: Arc<ExecGraph>,
}

impl Planned for HostGraph {
    fn reach(&self) -> Reach {
        Reach::Host
    }

    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        let mut pack = VariantPack::new();
        for declared in call.signature().buffers() {
            pack = if declared.is_output() {
                pack.bind_output(declared.uid, call.take_output(declared.uid)?)
            } else {
                pack.bind_input(declared.uid, call.host(declared.uid)?)
            };
        }
        pool::install(|| executor::execute(&self.graph, pack))?.map_err(executor_error)?;
        Ok(())
    }
}

/// A kernel error inside keeps its own fault; a tensor the caller did not bind or whose aux is
/// unusable is the caller's argument; anything else is ours (the graph was checked when the
/// context was built).
fn executor_error(error: ExecutorError) -> KernelError {
    let fault = match &error {
        ExecutorError::Tensor { source, .. } | ExecutorError::Node { source, .. } => source.fault(),
        ExecutorError::Unbound { .. } | ExecutorError::AuxUnavailable { .. } => {
            Fault::CallerArguments
        }
        _ => Fault::Internal,
    };
    KernelError::engine(EXECUTOR, fault, error)
}
