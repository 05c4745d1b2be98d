//! Execution contexts: an engine, the problem and the engine's plan for it, owned by the plugin
//! between `CreateExecutionContext` and `DestroyExecutionContext`, and shared by any number of
//! threads executing at once (nothing in a context changes after creation).

use std::ffi::c_void;
use std::sync::LazyLock;

use crate::abi::types::DeviceBuffer;
use crate::applicability::{self, Accepted};
use crate::engines::{Engine, Planned};
use crate::error::PluginError;
use crate::registry::Registry;
use crate::variant_pack::VariantPack;

pub static CONTEXTS: LazyLock<Registry<ExecutionContext>> =
    LazyLock::new(|| Registry::new("execution context"));

#[derive(Debug)]
pub struct ExecutionContext {
    engine: &'static Engine,
    problem: Accepted,
    planned: Box<dyn Planned>,
    /// The graph bytes as received: what serialization carries and what shape overrides are
    /// applied to (see [`crate::serialized_context`], [`crate::overrides`]).
    graph: Box<[u8]>,
}

impl ExecutionContext {
    /// Decodes and checks `graph` for `engine`; everything kept is a copy.
    pub fn build(engine: &'static Engine, graph: &[u8]) -> Result<Self, PluginError> {
        let (problem, planned) = applicability::require(engine, graph)?;
        Ok(ExecutionContext {
            engine,
            problem,
            planned,
            graph: graph.into(),
        })
    }

    /// The graph this context was built from, byte for byte.
    pub fn graph_bytes(&self) -> &[u8] {
        &self.graph
    }

    pub fn engine(&self) -> &'static Engine {
        self.engine
    }

    /// What `GetWorkspaceSize` reports for this engine and graph.
    pub fn workspace_size(&self) -> usize {
        self.planned.workspace_size()
    }

    /// Moves one-time GPU work (kernel compilation and loading) out of the first execute.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream.
    pub unsafe fn prepare(&self, stream: *mut c_void) -> Result<(), PluginError> {
        // SAFETY: forwarded contract.
        unsafe { self.planned.prepare(stream) }
    }

    /// Runs the engine over the variant pack of one call, on `stream`.
    ///
    /// # Safety
    /// As [`VariantPack::new`]: every pointer in `buffers` is valid for the extent this
    /// context's problem implies, in memory its engine reaches, until `stream` completes the
    /// work; `workspace` holds [`Self::workspace_size`] bytes; `stream` is NULL or a live stream.
    pub unsafe fn execute(
        &self,
        stream: *mut c_void,
        workspace: *mut c_void,
        buffers: &[DeviceBuffer],
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded contract.
        let pack = unsafe { VariantPack::new(buffers, stream, workspace) }?;
        match &self.problem {
            Accepted::Sdpa(problem) => self.planned.execute(problem, &pack),
            Accepted::Graph(_) => self.planned.execute_graph(&pack),
            Accepted::Backward(_) => self.planned.execute_backward(&pack),
        }
    }
}
