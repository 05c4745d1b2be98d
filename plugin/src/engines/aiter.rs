//! `RAGGED_SDPA_AITER_FMHA`: the kernels' AITER plan on the current HIP device (the shared GPU
//! contract, then AITER's limits), and one execute on the handle's stream.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use ragged_core::problem::RaggedSdpaProblem;
use ragged_engine_aiter::{
    self as kernels_aiter, AiterBackwardPlan, AiterBackwardProblem, AiterEngine, AiterPlan,
    AiterProblem, Availability, BackwardBuffers, DeviceBuffers, ProbeConfig,
};

use super::{AITER_FMHA, Listing, Planned, Planner};
use ragged_core::problem::BackwardProblem;
use crate::error::PluginError;
use crate::plugin_dir;
use crate::scale;
use crate::variant_pack::VariantPack;
use ragged_core::Decline;

/// The engine; its runtime state is probed once per process ([`engine`]).
pub struct AiterFmha;

impl Planner for AiterFmha {
    fn listing(&self) -> Listing {
        listing_for(probe().1)
    }

    fn plan(&self, problem: &RaggedSdpaProblem) -> Result<Box<dyn Planned>, Decline> {
        let engine = available()?;
        let (problem, plan) = plan(engine, problem)?;
        Ok(Box::new(Plan { problem, plan }))
    }

    /// Through `aiter::mha_bwd`, when the shim finds AITER's libmha_bwd.so exporting it;
    /// otherwise every backward is declined with the shim's reason (the probe line says it too).
    fn plan_backward(&self, problem: &Arc<BackwardProblem>) -> Result<Box<dyn Planned>, Decline> {
        let engine = available()?;
        let (aiter, plan) = plan_backward(engine, problem)?;
        Ok(Box::new(BackwardPlan {
            problem: Arc::clone(problem),
            aiter,
            plan,
        }))
    }
}

/// The engine for a plan (forward or backward), or the decline naming what is missing.
fn available() -> Result<&'static AiterEngine, Decline> {
    engine().ok_or_else(|| {
        Decline::graph(
            "RAGGED_SDPA_AITER_FMHA",
            "not available in this process",
            "a HIP runtime, a device and the AITER shim",
        )
    })
}

/// The engine for an execute: a plan exists only when it was listed, so its absence is an
/// unknown engine.
fn listed_engine() -> Result<&'static AiterEngine, PluginError> {
    engine().ok_or(PluginError::UnknownEngine {
        engine_id: AITER_FMHA.id,
    })
}

/// The calling thread's HIP device, which every plan is made for.
fn current_device(engine: &AiterEngine) -> Result<i32, Decline> {
    engine
        .current_device()
        .map_err(|error| Decline::graph("the current HIP device", error, "a known device"))
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

/// A backward graph's plan: the plugin's problem (for the variant pack's uids), its AITER view
/// and the applicability result.
#[derive(Debug)]
struct BackwardPlan {
    problem: Arc<BackwardProblem>,
    aiter: AiterBackwardProblem,
    plan: AiterBackwardPlan,
}

impl Planned for BackwardPlan {
    fn workspace_size(&self) -> usize {
        self.plan.workspace.size
    }

    fn execute_backward(&self, pack: &VariantPack<'_>) -> Result<(), PluginError> {
        let p = &self.problem;
        let forward = problem_for_execute(&p.forward, &self.aiter.forward, pack)?;
        let aiter = AiterBackwardProblem {
            forward,
            ..self.aiter
        };
        let address = |t: &ragged_core::problem::Operand| pack.address(t.uid, t.role);
        let buffers = BackwardBuffers {
            forward: buffers(&p.forward, pack)?,
            d_o: address(&p.d_o)?,
            dq: address(&p.dq)?,
            dk: address(&p.dk)?,
            dv: address(&p.dv)?,
        };
        let engine = listed_engine()?;
        // SAFETY: the pack's contract, as for the forward: every address is device memory of
        // the current HIP device sized as the problem describes, the workspace holds
        // `workspace.size` bytes, the stream is NULL or live, all until the stream reaches the
        // last kernel.
        unsafe {
            engine.execute_backward(
                &aiter,
                &self.plan,
                &buffers,
                self.plan.workspace.size,
                pack.stream() as usize,
            )
        }?;
        Ok(())
    }
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
    let availability =
        kernels_aiter::probe(&ProbeConfig::from_env(plugin_dir::plugin_dir().as_deref()));
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

/// Applicability on the calling thread's current HIP device.
pub fn plan(
    engine: &AiterEngine,
    problem: &RaggedSdpaProblem,
) -> Result<(AiterProblem, AiterPlan), Decline> {
    let device = current_device(engine)?;
    engine.plan(problem, device)
}

/// The AITER view of the problem and the applicability result, for one graph.
#[derive(Debug)]
struct Plan {
    problem: AiterProblem,
    plan: AiterPlan,
}

impl Planned for Plan {
    fn workspace_size(&self) -> usize {
        self.plan.workspace.size
    }

    /// AITER compiles on first execute: its device comes from the calling thread.
    fn execute(
        &self,
        problem: &RaggedSdpaProblem,
        pack: &VariantPack<'_>,
    ) -> Result<(), PluginError> {
        let aiter = &problem_for_execute(problem, &self.problem, pack)?;
        let buffers = buffers(problem, pack)?;
        let plan = &self.plan;
        let engine = listed_engine()?;
        // SAFETY: the pack's contract: every address is device memory of the current HIP device
        // sized as `problem` describes, the workspace holds `workspace.size` bytes, the stream is
        // NULL or live, all until the stream reaches the last kernel.
        unsafe {
            engine.execute(
                aiter,
                plan,
                &buffers,
                plan.workspace.size,
                pack.stream() as usize,
            )
        }?;
        Ok(())
    }
}

/// The problem for this execute: the one planned at `CreateExecutionContext` with the scale of
/// this call, which a runtime pass-by-value scalar may change from one execute to the next.
pub fn problem_for_execute(
    problem: &RaggedSdpaProblem,
    planned: &AiterProblem,
    pack: &VariantPack<'_>,
) -> Result<AiterProblem, PluginError> {
    // SAFETY: the pack's contract: a pass-by-value scale's pointer is a host pointer to one
    // element of its type.
    let scale = unsafe { scale::for_device_engine(problem.scale, pack) }?;
    Ok(AiterProblem { scale, ..*planned })
}

/// The variant pack's device addresses in the shim's form (0 for absent optional tensors).
fn buffers(
    problem: &RaggedSdpaProblem,
    pack: &VariantPack<'_>,
) -> Result<DeviceBuffers, PluginError> {
    let (lse, lse_offsets) = match &problem.stats {
        Some(stats) => (
            pack.address(stats.uid, stats.role)?,
            pack.aux_address(stats)?,
        ),
        None => (0, 0),
    };
    let address = |t: &ragged_core::problem::Operand| pack.address(t.uid, t.role);
    Ok(DeviceBuffers {
        q: address(&problem.q)?,
        k: address(&problem.k)?,
        v: address(&problem.v)?,
        o: address(&problem.o)?,
        q_offsets: pack.aux_address(&problem.q)?,
        k_offsets: pack.aux_address(&problem.k)?,
        seq_len_q: pack.optional_address(problem.seq_len_q)?,
        seq_len_kv: pack.optional_address(problem.seq_len_kv)?,
        lse,
        lse_offsets,
        workspace: pack.workspace() as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability;
    use ragged_core::{DataType as K, MaskBand};
    use ragged_engine_aiter::{
        GpuArch, IndexWidth, LseLayout, RaggedAux, RaggedOperand, check_applicability,
        plan as aiter_plan,
    };
    use ragged_schema::Graph;
    use std::ptr::null_mut;

    use crate::test_graphs::golden;

    #[test]
    fn the_golden_graph_maps_field_by_field() {
        let sdpa = applicability::problem(&golden()).expect("accepted");
        let p = AiterProblem::from_problem(&sdpa);
        let aux = |uid| RaggedAux {
            uid,
            width: IndexWidth::I32,
            multiplier: 1,
        };
        assert_eq!(p.dtype, K::BF16);
        assert_eq!((p.batch, p.s_q_max, p.s_kv_max), (2, 3, 4));
        assert_eq!(
            p.q,
            RaggedOperand {
                uid: 1,
                heads: 2,
                head_dim: 16,
                seq_stride: 32,
                head_stride: 16,
                dim_stride: 1,
                aux: aux(5),
                alignment: 16,
            }
        );
        assert_eq!(
            (p.k.uid, p.k.heads, p.k.seq_stride, p.k.aux),
            (2, 1, 16, aux(6))
        );
        assert_eq!((p.v.uid, p.v.aux), (3, aux(6)));
        assert_eq!((p.o.uid, p.o.aux), (4, aux(5)));
        assert_eq!(
            p.lse,
            LseLayout::Dense {
                uid: 9,
                strides: [6, 3, 1, 1],
                alignment: 16
            }
        );
        assert_eq!(p.mask, MaskBand::causal_bottom_right());
        assert_eq!(p.scale, 0.25);
    }

    #[test]
    fn the_mapped_golden_graph_is_applicable_on_gfx942_and_declined_elsewhere() {
        let sdpa = applicability::problem(&golden()).expect("accepted");
        let plan = aiter_plan(
            &sdpa,
            &GpuArch::new("gfx942:sramecc+:xnack-"),
            "gfx942;gfx950",
        );
        assert!(plan.is_ok_and(|(_, plan)| plan.workspace.size > 0));
        let other = aiter_plan(&sdpa, &GpuArch::new("gfx1100"), "gfx942;gfx950")
            .err()
            .map(|d| d.to_string());
        assert!(other.is_some_and(|d| d.contains("gfx1100")));
    }

    fn with_scale_tensor(pass_by_value: bool) -> Graph {
        let mut g = golden();
        g.tensors.push(
            ragged_schema::TensorAttributes::new()
                .set_uid(30)
                .set_data_type(ragged_schema::DataType::Half)
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_is_runtime_pass_by_value(pass_by_value),
        );
        match &mut g.nodes[0].attributes {
            ragged_schema::NodeAttributes::Sdpa(s) => s.scale_tensor_uid = Some(30),
            other => panic!("golden node is {other:?}"),
        }
        g
    }

    #[test]
    fn a_pass_by_value_scale_is_applicable_and_replaced_at_each_execute() {
        let sdpa = applicability::problem(&with_scale_tensor(true)).expect("accepted");
        let arch = GpuArch::new("gfx942");
        let (planned, _) = aiter_plan(&sdpa, &arch, "gfx942").expect("a pass-by-value scale plans");
        assert!(check_applicability(&planned, &arch, "gfx942").is_ok());

        let mut scalar = half::f16::from_f32(0.125);
        let entries = [crate::abi::types::DeviceBuffer {
            uid: 30,
            ptr: (&raw mut scalar).cast(),
        }];
        // SAFETY: uid 30 is bound to a live host f16; nothing else is dereferenced.
        let pack =
            unsafe { VariantPack::new(&entries, null_mut(), null_mut()) }.expect("one binding");
        let resolved = problem_for_execute(&sdpa, &planned, &pack).expect("read");
        assert_eq!(resolved.scale, 0.125);
        assert_eq!(
            AiterProblem {
                scale: planned.scale,
                ..resolved
            },
            planned
        );

        // SAFETY: nothing is bound, so nothing is read.
        let empty = unsafe { VariantPack::new(&[], null_mut(), null_mut()) }.expect("empty pack");
        let missing = problem_for_execute(&sdpa, &planned, &empty)
            .err()
            .map(|e| (e.status(), e.to_string()));
        assert_eq!(
            missing,
            Some((
                crate::abi::types::Status::BAD_PARAM,
                "tensor uid 30 (scale_tensor_uid) has no entry in device_buffers".to_owned()
            ))
        );
    }

    #[test]
    fn a_device_resident_scale_tensor_is_declined_by_uid() {
        let sdpa = applicability::problem(&with_scale_tensor(false)).expect("accepted");
        let why = aiter_plan(&sdpa, &GpuArch::new("gfx942"), "gfx942")
            .err()
            .map(|d| d.to_string());
        assert!(
            why.as_deref().is_some_and(|w| w.starts_with(
                "tensor uid 30: scale_tensor_uid residency = a device-resident tensor"
            )),
            "{why:?}"
        );
    }

    #[test]
    fn fp32_graphs_map_and_are_declined_by_aiter_naming_q() {
        let mut g = golden();
        for t in g.tensors.iter_mut().filter(|t| (1..=4).contains(&t.uid)) {
            t.data_type = ragged_schema::DataType::Float;
        }
        let sdpa = applicability::problem(&g).expect("accepted by the plugin");
        let why = aiter_plan(&sdpa, &GpuArch::new("gfx942"), "gfx942")
            .err()
            .map(|d| d.to_string())
            .unwrap_or_default();
        assert!(why.starts_with("tensor uid 1: data type = FLOAT"), "{why}");
    }
}
