//! Execution contexts: an engine plus the plan it runs, owned by the plugin between
//! `CreateExecutionContext` and `DestroyExecutionContext`, and shared by any number of threads
//! executing at once (nothing in a context changes after creation).

use std::ffi::c_void;
use std::sync::LazyLock;

use crate::abi::types::DeviceBuffer;
use crate::applicability;
use crate::engines::{Engine, HOST_REFERENCE};
use crate::error::PluginError;
use crate::host_engine;
use crate::plan::SdpaPlan;
use crate::registry::Registry;
use crate::variant_pack::VariantPack;

pub static CONTEXTS: LazyLock<Registry<ExecutionContext>> =
    LazyLock::new(|| Registry::new("execution context"));

#[derive(Debug)]
pub struct ExecutionContext {
    engine: &'static Engine,
    plan: SdpaPlan,
}

impl ExecutionContext {
    /// Decodes and checks `graph` for `engine`; everything kept is a copy.
    pub fn build(engine: &'static Engine, graph: &[u8]) -> Result<Self, PluginError> {
        let plan = applicability::require(engine, graph)?;
        Ok(ExecutionContext { engine, plan })
    }

    /// The host engine allocates nothing on the caller's behalf.
    pub fn workspace_size(&self) -> usize {
        0
    }

    /// Runs the engine over the variant pack of one call.
    ///
    /// # Safety
    /// Every pointer in `buffers` is valid, for the duration of the call, for the extent the
    /// plan's tensor implies, in memory this context's engine can access.
    pub unsafe fn execute(
        &self,
        _stream: *mut c_void,
        _workspace: *mut c_void,
        buffers: &[DeviceBuffer],
    ) -> Result<(), PluginError> {
        let pack = VariantPack::new(buffers)?;
        if self.engine.id == HOST_REFERENCE.id {
            // SAFETY: forwarded contract; the host engine is listed only where pointers are host
            // memory (see `engines`).
            unsafe { host_engine::execute(&self.plan, &pack) }
        } else {
            Err(PluginError::UnknownEngine {
                engine_id: self.engine.id,
            })
        }
    }
}
