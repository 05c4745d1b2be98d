//! `RAGGED_SDPA_AITER_FMHA` as the plugin sees it: the listing probe (once per process), the
//! plans on the current HIP device (the shared GPU contract, then AITER's limits) and one execute
//! on the call's stream.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use ragged_core::binding::Call;
use ragged_core::engine::{self, Listing, Planned, Planner, Problem, Reach};
use ragged_core::problem::{BackwardProblem, Operand, RaggedSdpaProblem};
use ragged_core::{Decline, Fault, KernelError};
use ragged_gpu_runtime::library_dir;

use crate::serving_kernels::ServingBuffers;
use crate::{
    AiterBackwardPlan, AiterBackwardProblem, AiterEngine, AiterError, AiterPlan, AiterProblem,
    Availability, BackwardBuffers, DeviceBuffers, ENGINE_NAME, ProbeConfig,
};

/// The engine; its runtime state is probed once per process ([`engine()`]).
pub struct AiterFmha;

impl Planner for AiterFmha {
    fn listing(&self) -> Listing {
        listing_for(probe().1)
    }

    fn plan(&self, problem: &Problem) -> Result<Box<dyn Planned>, Decline> {
        match problem {
            Problem::Forward(p) => {
                let (aiter, plan) = plan(available()?, p)?;
                Ok(Box::new(ForwardPlan {
                    problem: Arc::clone(p),
                    aiter,
                    plan,
                }))
            }
            // Through `aiter::mha_bwd`, when the shim finds AITER's libmha_bwd.so exporting it;
            // otherwise every backward is declined with the shim's reason (the probe line says
            // it too).
            Problem::Backward(p) => {
                let (aiter, plan) = plan_backward(available()?, p)?;
                Ok(Box::new(BackwardPlan {
                    problem: Arc::clone(p),
                    aiter,
                    plan,
                }))
            }
            Problem::Graph(g) => Err(engine::multi_node_declined(g)),
        }
    }
}

/// The engine for a plan (forward or backward), or the decline naming what is missing.
fn available() -> Result<&'static AiterEngine, Decline> {
    engine().ok_or_else(|| {
        Decline::graph(
            ENGINE_NAME,
            "not available in this process",
            "a HIP runtime, a device and the AITER shim",
        )
    })
}

/// The engine for an execute: a plan exists only when the engine was listed.
fn listed_engine() -> Result<&'static AiterEngine, KernelError> {
    engine().ok_or_else(|| {
        KernelError::Internal(format!(
            "{ENGINE_NAME} holds a plan but is not available in this process"
        ))
    })
}

/// The calling thread's HIP device, which every plan is made for.
fn current_device(engine: &AiterEngine) -> Result<i32, Decline> {
    engine
        .current_device()
        .map_err(|error| Decline::graph("the current HIP device", error, "a known device"))
}

/// Forward applicability on the calling thread's current HIP device.
pub fn plan(
    engine: &AiterEngine,
    problem: &RaggedSdpaProblem,
) -> Result<(AiterProblem, AiterPlan), Decline> {
    let device = current_device(engine)?;
    engine.plan(problem, device)
}

/// Backward applicability on the calling thread's current HIP device.
pub fn plan_backward(
    engine: &AiterEngine,
    problem: &BackwardProblem,
) -> Result<(AiterBackwardProblem, AiterBackwardPlan), Decline> {
    let device = current_device(engine)?;
    engine.plan_backward(
        &problem.forward,
        [&problem.d_o, &problem.dq, &problem.dk, &problem.dv],
        device,
    )
}

/// A forward's plan: the problem (for the call's uids), its AITER view and the applicability
/// result.
#[derive(Debug)]
pub struct ForwardPlan {
    problem: Arc<RaggedSdpaProblem>,
    aiter: AiterProblem,
    plan: AiterPlan,
}

impl Planned for ForwardPlan {
    fn reach(&self) -> Reach {
        Reach::Device
    }

    fn workspace_size(&self) -> usize {
        self.plan.workspace_bytes()
    }

    /// AITER compiles on first execute: its device comes from the calling thread.
    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        let aiter = AiterProblem {
            scale: call.scale(self.problem.scale)?,
            ..self.aiter
        };
        let mut buffers = buffers(&self.problem, call)?;
        if let Some(fp8) = &self.plan.fp8 {
            let [q, k, v] = fp8.descale_uids;
            let address = |uid| call.device(uid).map(|d| d.address() as usize);
            (buffers.q_descale, buffers.k_descale, buffers.v_descale) =
                (address(q)?, address(k)?, address(v)?);
        }
        let engine = listed_engine()?;
        if self.plan.serving.is_some() {
            let p = &*self.problem;
            let optional = |uid: Option<i64>| call.device_address(uid).map(|a| a as usize);
            let tables = ServingBuffers {
                table_k: optional(p.paged.map(|t| t.table_k.uid))?,
                table_v: optional(p.paged.map(|t| t.table_v.uid))?,
                sinks: optional(p.sinks.map(|s| s.uid))?,
            };
            return engine
                .execute_serving_call(&aiter, &self.plan, &buffers, &tables, call)
                .map_err(failure);
        }
        engine
            .execute_call(&aiter, &self.plan, &buffers, call)
            .map_err(failure)
    }
}

/// A backward's plan, as the forward's.
#[derive(Debug)]
pub struct BackwardPlan {
    problem: Arc<BackwardProblem>,
    aiter: AiterBackwardProblem,
    plan: AiterBackwardPlan,
}

impl Planned for BackwardPlan {
    fn reach(&self) -> Reach {
        Reach::Device
    }

    fn workspace_size(&self) -> usize {
        self.plan.workspace.size
    }

    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        let p = &*self.problem;
        let aiter = AiterBackwardProblem {
            forward: AiterProblem {
                scale: call.scale(p.forward.scale)?,
                ..self.aiter.forward
            },
            ..self.aiter
        };
        let address = |t: &Operand| call.device(t.uid).map(|d| d.address() as usize);
        let buffers = BackwardBuffers {
            forward: buffers(&p.forward, call)?,
            d_o: address(&p.d_o)?,
            dq: address(&p.dq)?,
            dk: address(&p.dk)?,
            dv: address(&p.dv)?,
        };
        listed_engine()?
            .execute_backward_call(&aiter, &self.plan, &buffers, call)
            .map_err(failure)
    }
}

/// The call's device addresses in the shim's form (0 for absent optional tensors; the FP8
/// descales are the forward plan's to add).
fn buffers(problem: &RaggedSdpaProblem, call: &Call<'_>) -> Result<DeviceBuffers, KernelError> {
    let address = |t: &Operand| call.device(t.uid).map(|d| d.address() as usize);
    let aux = |t: &Operand| {
        call.device_address(t.ragged.map(|r| r.uid))
            .map(|a| a as usize)
    };
    let optional = |uid: Option<i64>| call.device_address(uid).map(|a| a as usize);
    let (lse, lse_offsets) = match &problem.stats {
        Some(stats) => (address(stats)?, aux(stats)?),
        None => (0, 0),
    };
    Ok(DeviceBuffers {
        q: address(&problem.q)?,
        k: address(&problem.k)?,
        v: address(&problem.v)?,
        o: address(&problem.o)?,
        q_offsets: aux(&problem.q)?,
        k_offsets: aux(&problem.k)?,
        seq_len_q: optional(problem.seq_len_q.map(|s| s.uid))?,
        seq_len_kv: optional(problem.seq_len_kv.map(|s| s.uid))?,
        lse,
        lse_offsets,
        workspace: call.workspace().ptr.map_or(0, |w| w.address() as usize),
        q_descale: 0,
        k_descale: 0,
        v_descale: 0,
    })
}

/// AITER engine errors: a null pointer or a short workspace is the caller's argument; anything
/// else (HIP, hipRTC, the shim, AITER) is ours.
pub fn failure(error: AiterError) -> KernelError {
    let fault = match &error {
        AiterError::NullPointer { .. } | AiterError::WorkspaceTooSmall { .. } => {
            Fault::CallerArguments
        }
        _ => Fault::Internal,
    };
    KernelError::engine(ENGINE_NAME, fault, error)
}

/// Listed when the probe finds HIP, a device, hipRTC and the AITER shim; the probe's line says
/// which.
pub fn listing_for(probe: Result<String, String>) -> Listing {
    let (listed, line) = match probe {
        Ok(line) => (true, line),
        Err(line) => (false, line),
    };
    Listing {
        listed,
        line: Some(line),
    }
}

/// The AITER engine, probed once per process; `None` when it is not listed.
pub fn engine() -> Option<&'static AiterEngine> {
    probe().0
}

/// An available engine, kept for the process once found (callers hold `&'static` references),
/// with its line; or why there is none, kept until [`release_probe`].
static AVAILABLE: OnceLock<(AiterEngine, String)> = OnceLock::new();
static UNAVAILABLE: Mutex<Option<String>> = Mutex::new(None);

fn probe() -> (Option<&'static AiterEngine>, Result<String, String>) {
    let available =
        |(engine, line): &'static (AiterEngine, String)| (Some(engine), Ok(line.clone()));
    if let Some(found) = AVAILABLE.get() {
        return available(found);
    }
    let mut unavailable = UNAVAILABLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(line) = unavailable.as_ref() {
        return (None, Err(line.clone()));
    }
    if let Some(found) = AVAILABLE.get() {
        return available(found);
    }
    let availability = crate::probe(&ProbeConfig::from_env(library_dir::plugin_dir().as_deref()));
    let line = availability.log_line();
    match availability {
        Availability::Available(engine) => available(AVAILABLE.get_or_init(|| (*engine, line))),
        Availability::Unavailable { .. } => (None, Err(unavailable.insert(line).clone())),
    }
}

/// Forgets why the engine was unavailable (the plugin's last handle); the next probe decides
/// again. An available engine is kept.
pub fn release_probe() {
    UNAVAILABLE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aiter_errors_map_by_cause_and_name_the_engine() {
        let null = failure(AiterError::NullPointer { what: "Q", uid: 1 });
        assert_eq!(null.fault(), Fault::CallerArguments);
        assert_eq!(
            null.to_string(),
            "RAGGED_SDPA_AITER_FMHA: device pointer for Q (tensor uid 1) is null"
        );
    }
}
