//! Execution contexts: an engine, the accepted problem, what every execute binds for it and the
//! engine's plan, owned by the plugin between `CreateExecutionContext` and
//! `DestroyExecutionContext`, and shared by any number of threads executing at once (nothing in
//! a context changes after creation).

use std::ffi::c_void;
use std::fmt;
use std::sync::LazyLock;

use parking_lot::Mutex;

use ragged_core::binding::{Signature, Stream};
use ragged_core::engine::{Planned, Problem};

use crate::abi::types::DeviceBuffer;
use crate::applicability;
use crate::binder::{self, BindScratch, Pack, host_memory::Staged};
use crate::engines::Engine;
use crate::error::PluginError;
use crate::registry::Registry;

pub static CONTEXTS: LazyLock<Registry<ExecutionContext>> =
    LazyLock::new(|| Registry::new("execution context"));

#[derive(Debug)]
pub struct ExecutionContext {
    engine: &'static Engine,
    plan: Plan,
    /// The graph bytes as received: what serialization carries and what shape overrides are
    /// applied to (see [`crate::serialized_context`], [`crate::overrides`]).
    graph: Box<[u8]>,
}

/// A problem, what an execute binds for it, and one engine's plan: everything an execute needs.
pub struct Plan {
    problem: Problem,
    signature: Signature,
    planned: Box<dyn Planned>,
    /// Allocations the binding of one call lends the next (its values are always the call's).
    scratch: Mutex<BindScratch>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("problem", &self.problem)
            .field("planned", &self.planned)
            .finish_non_exhaustive()
    }
}

impl Plan {
    pub fn new(problem: Problem, planned: Box<dyn Planned>) -> Self {
        Plan {
            signature: problem.signature(),
            problem,
            planned,
            scratch: Mutex::default(),
        }
    }

    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// Device scratch each execute needs.
    pub fn workspace_size(&self) -> usize {
        self.planned.workspace_size()
    }

    /// Binds one call's buffers, runs the plan over them, and copies staged outputs back.
    ///
    /// # Safety
    /// As [`binder::bind`] for this plan's signature, with `workspace` holding
    /// [`Self::workspace_size`] bytes.
    pub unsafe fn execute(
        &self,
        stream: *mut c_void,
        workspace: *mut c_void,
        buffers: &[DeviceBuffer],
    ) -> Result<(), PluginError> {
        let pack = Pack {
            entries: buffers,
            stream,
            workspace,
        };
        // Another thread executing this context right now keeps the shared scratch: this call
        // binds with allocations of its own rather than wait.
        let mut shared = self.scratch.try_lock();
        let mut own = BindScratch::default();
        let scratch = shared.as_deref_mut().unwrap_or(&mut own);
        let mut staged = Staged::default();
        {
            // SAFETY: forwarded contract.
            let mut call = unsafe {
                binder::bind(
                    &self.signature,
                    self.planned.reach(),
                    pack,
                    self.workspace_size(),
                    &mut staged,
                    scratch,
                )
            }?;
            self.planned.execute(&mut call)?;
            scratch.reuse(call.into_layouts());
        }
        staged.write_back()
    }
}

impl ExecutionContext {
    /// Decodes and checks `graph` for `engine`; everything kept is a copy.
    pub fn build(engine: &'static Engine, graph: &[u8]) -> Result<Self, PluginError> {
        let (problem, planned) = applicability::require(engine, graph)?;
        Ok(ExecutionContext {
            engine,
            plan: Plan::new(problem, planned),
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
        self.plan.workspace_size()
    }

    /// Moves one-time GPU work (kernel compilation and loading) out of the first execute.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream.
    pub unsafe fn prepare(&self, stream: *mut c_void) -> Result<(), PluginError> {
        // SAFETY: `stream` is NULL or live (contract).
        let stream = unsafe { Stream::new(stream) };
        self.plan.planned.prepare(stream)?;
        Ok(())
    }

    /// Runs the engine over the variant pack of one call, on `stream`.
    ///
    /// # Safety
    /// As [`binder::bind`]: every pointer in `buffers` is valid for the extent this context's
    /// problem implies, in memory its engine reaches, until `stream` completes the work;
    /// `workspace` holds [`Self::workspace_size`] bytes; `stream` is NULL or a live stream.
    pub unsafe fn execute(
        &self,
        stream: *mut c_void,
        workspace: *mut c_void,
        buffers: &[DeviceBuffer],
    ) -> Result<(), PluginError> {
        // SAFETY: forwarded contract.
        unsafe { self.plan.execute(stream, workspace, buffers) }
    }
}
