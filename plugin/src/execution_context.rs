//! Execution contexts: an engine plus the plan it runs, owned by the plugin between
//! `CreateExecutionContext` and `DestroyExecutionContext`, and shared by any number of threads
//! executing at once (nothing in a context changes after creation).

use std::ffi::c_void;
use std::sync::LazyLock;

use crate::abi::types::DeviceBuffer;
use crate::applicability;
use crate::engine_plan::EnginePlan;
use crate::engines::Engine;
use crate::error::PluginError;
use crate::plan::SdpaPlan;
use crate::registry::Registry;
use crate::variant_pack::VariantPack;

pub static CONTEXTS: LazyLock<Registry<ExecutionContext>> =
    LazyLock::new(|| Registry::new("execution context"));

#[derive(Debug)]
pub struct ExecutionContext {
    engine: &'static Engine,
    plan: SdpaPlan,
    engine_plan: EnginePlan,
}

impl ExecutionContext {
    /// Decodes and checks `graph` for `engine`; everything kept is a copy.
    pub fn build(engine: &'static Engine, graph: &[u8]) -> Result<Self, PluginError> {
        let (plan, engine_plan) = applicability::require(engine, graph)?;
        Ok(ExecutionContext {
            engine,
            plan,
            engine_plan,
        })
    }

    pub fn engine(&self) -> &'static Engine {
        self.engine
    }

    /// What `GetWorkspaceSize` reports for this engine and graph.
    pub fn workspace_size(&self) -> usize {
        self.engine_plan.workspace_size()
    }

    /// Moves one-time GPU work (kernel compilation and loading) out of the first execute.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream.
    pub unsafe fn prepare(&self, stream: *mut c_void) -> Result<(), PluginError> {
        // SAFETY: forwarded contract.
        unsafe { self.engine_plan.prepare(stream) }
    }

    /// Runs the engine over the variant pack of one call, on `stream`.
    ///
    /// # Safety
    /// Every pointer in `buffers` is valid for the extent the plan's tensor implies, in memory
    /// this context's engine reaches, until `stream` completes the work; `workspace` holds
    /// [`Self::workspace_size`] bytes; `stream` is NULL or a live stream.
    pub unsafe fn execute(
        &self,
        stream: *mut c_void,
        workspace: *mut c_void,
        buffers: &[DeviceBuffer],
    ) -> Result<(), PluginError> {
        let pack = VariantPack::new(buffers)?;
        // SAFETY: forwarded contract.
        unsafe {
            self.engine_plan
                .execute(&self.plan, stream, workspace, &pack)
        }
    }
}
