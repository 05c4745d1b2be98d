//! What each engine makes of an accepted SDPA plan: its own plan (or a decline naming why), its
//! workspace, and the execute that runs it. The single dispatch on engine identity.

use std::ffi::c_void;

use ragged_kernels::aiter::{AiterPlan, AiterProblem};
use ragged_kernels::cuda_fmha::{FmhaEngine, FmhaPlan};

use crate::applicability::Decline;
use crate::engines::host::staging as device_staging;
use crate::engines::{self, AITER_FMHA, CUDA_FMHA, Engine, HOST_REFERENCE};
use crate::engines::{aiter as aiter_engine, cuda as cuda_engine};
use crate::error::PluginError;
use crate::plan::SdpaPlan;
use crate::variant_pack::VariantPack;

/// An engine's plan for one graph.
/// GPU plans are boxed: they are hundreds of bytes and the host engine's is none.
#[derive(Debug)]
pub enum EnginePlan {
    Host,
    Cuda(Box<FmhaPlan>),
    Aiter(Box<AiterPlans>),
}

/// The AITER engine's problem and its applicability result.
#[derive(Debug)]
pub struct AiterPlans {
    pub problem: AiterProblem,
    pub plan: AiterPlan,
}

/// `engine`'s plan for `sdpa`, or why it declines.
pub fn for_engine(engine: &Engine, sdpa: &SdpaPlan) -> Result<EnginePlan, Decline> {
    if engine.id == CUDA_FMHA.id {
        cuda_engine::plan(sdpa).map(|plan| EnginePlan::Cuda(Box::new(plan)))
    } else if engine.id == AITER_FMHA.id {
        let aiter = engines::aiter_engine()
            .ok_or_else(|| Decline("the AITER engine is not available in this process".into()))?;
        let (problem, plan) = aiter_engine::plan(aiter, sdpa)?;
        Ok(EnginePlan::Aiter(Box::new(AiterPlans { problem, plan })))
    } else if engine.id == HOST_REFERENCE.id {
        device_staging::check_reachable().map(|()| EnginePlan::Host)
    } else {
        Err(Decline(format!("engine id {} is unknown", engine.id)))
    }
}

impl EnginePlan {
    /// Device scratch the caller allocates for each execute.
    pub fn workspace_size(&self) -> usize {
        match self {
            EnginePlan::Host => 0,
            EnginePlan::Cuda(plan) => usize::try_from(plan.workspace_bytes()).unwrap_or(usize::MAX),
            EnginePlan::Aiter(aiter) => aiter.plan.workspace.size,
        }
    }

    /// Compiles and loads GPU kernels for `stream`'s device now, so the first execute does not
    /// pay for NVRTC. AITER compiles on first execute (its device comes from the calling thread).
    ///
    /// # Safety
    /// `stream` is NULL or a live stream.
    pub unsafe fn prepare(&self, stream: *mut c_void) -> Result<(), PluginError> {
        if let EnginePlan::Cuda(_) = self {
            // SAFETY: forwarded contract.
            unsafe { FmhaEngine::global().prepare(stream.cast()) }?;
        }
        Ok(())
    }

    /// Runs the plan over one call's variant pack.
    ///
    /// # Safety
    /// Every pointer in `pack` is valid for its tensor's extent in memory the engine reaches
    /// (host or device memory, see each engine), `workspace` holds [`Self::workspace_size`]
    /// bytes, and `stream` is NULL or a live stream; all stay valid until the stream is done.
    pub unsafe fn execute(
        &self,
        sdpa: &SdpaPlan,
        stream: *mut c_void,
        workspace: *mut c_void,
        pack: &VariantPack<'_>,
    ) -> Result<(), PluginError> {
        match self {
            // SAFETY: forwarded contract.
            EnginePlan::Host => unsafe { device_staging::execute(sdpa, stream, pack) },
            EnginePlan::Cuda(plan) => {
                // SAFETY: forwarded contract.
                unsafe { cuda_engine::execute(sdpa, plan, stream, workspace, pack) }
            }
            EnginePlan::Aiter(aiter) => {
                let AiterPlans { problem, plan } = &**aiter;
                let engine = engines::aiter_engine().ok_or(PluginError::UnknownEngine {
                    engine_id: AITER_FMHA.id,
                })?;
                // SAFETY: forwarded contract.
                unsafe {
                    aiter_engine::execute(engine, sdpa, problem, plan, stream, workspace, pack)
                }
            }
        }
    }
}
