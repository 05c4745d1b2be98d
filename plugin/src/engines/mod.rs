//! The engines this library can list, and which of them it lists in this process.
//!
//! plugin-abi.md §5.2 says the list is fixed per build. Issue 4 overrides that: an engine is listed
//! only if it can run on this machine. The list is still computed once and cached, so it is static
//! for the life of the loaded library, as the backend's two-call protocol requires.
//!
//! Order is preference: hipDNN tries engines in the order it receives them, so the GPU engines
//! come first and the host reference last.
//! - `RAGGED_SDPA_CUDA_FMHA`: listed when [`ragged_gpu_runtime::cuda::runtime::probe`] finds a usable
//!   CUDA device, driver and NVRTC;
//! - `RAGGED_SDPA_AITER_FMHA`: listed when [`ragged_engine_aiter::probe`] finds HIP, a device,
//!   hipRTC and the AITER shim (next to this library or at `$RAGGED_SDPA_AITER_SHIM`);
//! - `RAGGED_SDPA_HOST_REFERENCE`: listed when the process has no GPU runtime (every pointer is
//!   then host memory) or when `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` asks for it; next to CUDA it
//!   then copies device tensors to the host and back (see [`crate::engines::host::staging`]).
//!
//! Every engine left out gets one INFO line naming what was missing.
//!
//! Each engine lives in one module and implements [`Planner`]: its own listing probe, and from the
//! graph's [`RaggedSdpaProblem`] its own [`Planned`] (or a [`Decline`] naming uid, field, value
//! and need), which an execution context holds and runs. Nothing here dispatches on engine ids;
//! adding an engine is its module plus its static [`Engine`] and one entry in [`ENGINES`].

pub mod aiter;
pub mod cuda;
pub mod host;

use std::ffi::{CStr, c_void};
use std::fmt;
use std::sync::{Arc, OnceLock};

use ragged_core::Decline;
use ragged_core::problem::RaggedSdpaProblem;
use ragged_engine_aiter as kernels_aiter;

use crate::abi::types::Severity;
use ragged_core::problem::BackwardProblem;
use crate::engine_id::engine_name_to_id;
use crate::error::PluginError;
use crate::graph_plan::GraphPlan;
use crate::logging;
use crate::variant_pack::VariantPack;

pub use host::{HOST_ENGINE_ENV, host_engine_offered};

/// What an engine's probe found: whether to list it, and the INFO line that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub listed: bool,
    pub line: Option<String>,
}

/// An engine's process-time and graph-time halves.
pub trait Planner: Sync {
    /// Whether this engine can run in this process (probed once; the list is cached).
    fn listing(&self) -> Listing;

    /// This engine's plan for `problem`, or why it cannot run it.
    fn plan(&self, problem: &RaggedSdpaProblem) -> Result<Box<dyn Planned>, Decline>;

    /// This engine's plan for a multi-node graph ([`crate::graph_plan`]); only the host engine
    /// runs one, through the CPU executor.
    fn plan_graph(&self, graph: &Arc<GraphPlan>) -> Result<Box<dyn Planned>, Decline> {
        Err(Decline::graph(
            "nodes",
            graph.exec.nodes.len(),
            "a single SdpaAttributes node: this engine does not run multi-node or pointwise \
             graphs (the host reference engine does)",
        ))
    }

    /// This engine's plan for a single SDPA backward node ([`crate::backward_problem`]); only
    /// the host engine runs one, through the CPU reference backward.
    fn plan_backward(&self, problem: &Arc<BackwardProblem>) -> Result<Box<dyn Planned>, Decline> {
        let _ = problem;
        Err(Decline::graph(
            "node attributes",
            "SdpaBackwardAttributes (union tag 15)",
            "SdpaAttributes: this engine has no backward kernels (the host reference engine \
             runs the backward)",
        ))
    }
}

/// One engine's plan for one graph, owned by an execution context and shared by every thread
/// executing it (nothing in a plan changes after creation).
pub trait Planned: fmt::Debug + Send + Sync {
    /// Device scratch the caller allocates for each execute.
    fn workspace_size(&self) -> usize;

    /// Moves one-time GPU work (kernel compilation and loading) out of the first execute.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream.
    unsafe fn prepare(&self, stream: *mut c_void) -> Result<(), PluginError> {
        let _ = stream;
        Ok(())
    }

    /// Runs the plan over one call's variant pack (whose creation carried the caller's
    /// promises about every pointer, the workspace and the stream). Forward plans implement
    /// it; a backward plan holds its own problem and refuses a forward one here, in one place
    /// for every engine.
    fn execute(
        &self,
        problem: &RaggedSdpaProblem,
        pack: &VariantPack<'_>,
    ) -> Result<(), PluginError> {
        let _ = (problem, pack);
        Err(PluginError::Engine(
            "this plan runs an SDPA backward, not a forward".to_owned(),
        ))
    }

    /// Runs a multi-node graph plan over one call's variant pack; only plans from
    /// [`Planner::plan_graph`] implement it.
    fn execute_graph(&self, pack: &VariantPack<'_>) -> Result<(), PluginError> {
        let _ = pack;
        Err(PluginError::Engine(
            "this plan runs a single SDPA node, not a multi-node graph".to_owned(),
        ))
    }

    /// Runs a backward plan (which holds its own problem) over one call's variant pack; only
    /// plans from [`Planner::plan_backward`] implement it.
    fn execute_backward(&self, pack: &VariantPack<'_>) -> Result<(), PluginError> {
        let _ = pack;
        Err(PluginError::Engine(
            "this plan runs an SDPA forward, not a backward".to_owned(),
        ))
    }
}

/// One engine: its upper-snake-case name (static C storage, as `GetEngineName` hands it out),
/// the id derived from it, and its planner.
pub struct Engine {
    pub name: &'static CStr,
    pub id: i64,
    planner: &'static dyn Planner,
}

impl Engine {
    pub fn name_str(&self) -> &'static str {
        self.name.to_str().unwrap_or("<non-utf8 engine name>")
    }

    /// This engine's plan for `problem`, or why it declines.
    pub fn plan(&self, problem: &RaggedSdpaProblem) -> Result<Box<dyn Planned>, Decline> {
        self.planner.plan(problem)
    }

    /// This engine's plan for a multi-node graph, or why it declines.
    pub fn plan_graph(&self, graph: &Arc<GraphPlan>) -> Result<Box<dyn Planned>, Decline> {
        self.planner.plan_graph(graph)
    }

    /// This engine's plan for an SDPA backward node, or why it declines.
    pub fn plan_backward(
        &self,
        problem: &Arc<BackwardProblem>,
    ) -> Result<Box<dyn Planned>, Decline> {
        self.planner.plan_backward(problem)
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

impl PartialEq for Engine {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Engine {}

/// `RAGGED_SDPA_HOST_REFERENCE`: the CPU reference, the numeric specification of every engine.
pub static HOST_REFERENCE: Engine = Engine {
    name: c"RAGGED_SDPA_HOST_REFERENCE",
    id: engine_name_to_id("RAGGED_SDPA_HOST_REFERENCE"),
    planner: &host::HostReference,
};

/// `RAGGED_SDPA_CUDA_FMHA`: the project's ragged FMHA kernels, compiled by NVRTC at first use.
pub static CUDA_FMHA: Engine = Engine {
    name: c"RAGGED_SDPA_CUDA_FMHA",
    id: engine_name_to_id("RAGGED_SDPA_CUDA_FMHA"),
    planner: &cuda::CudaFmha,
};

/// `RAGGED_SDPA_AITER_FMHA`: AITER's FMHA through the shim, on ROCm.
pub static AITER_FMHA: Engine = Engine {
    name: c"RAGGED_SDPA_AITER_FMHA",
    id: engine_name_to_id(kernels_aiter::ENGINE_NAME),
    planner: &aiter::AiterFmha,
};

/// Every engine of this library, in preference order (GPU engines first). Adding an engine is
/// its module, its static above and one entry here.
pub static ENGINES: [&Engine; 3] = [&CUDA_FMHA, &AITER_FMHA, &HOST_REFERENCE];

/// The listed engines in preference order, and the log lines explaining the choice.
pub fn decide(
    listings: &[(&'static Engine, Listing)],
) -> (Vec<&'static Engine>, Vec<(Severity, String)>) {
    let mut engines = Vec::new();
    let mut lines = Vec::new();
    for (engine, listing) in listings {
        if listing.listed {
            engines.push(*engine);
        }
        if let Some(line) = &listing.line {
            lines.push((Severity::INFO, line.clone()));
        }
    }
    if engines.is_empty() {
        lines.push((
            Severity::WARN,
            "no engine is listed: a GPU runtime is loadable but no GPU engine can run here, and \
             the host reference engine was not requested"
                .to_owned(),
        ));
    }
    (engines, lines)
}

/// The engines listed in this process, decided on first use.
///
/// Kept in a fixed array, not a `Vec`: a static's heap is never freed, and is lost when the
/// library is unloaded (issue 13).
pub fn listed() -> &'static [&'static Engine] {
    static LISTED: OnceLock<([&'static Engine; ENGINES.len()], usize)> = OnceLock::new();
    let (engines, count) = LISTED.get_or_init(|| {
        let listings: Vec<_> = ENGINES
            .iter()
            .map(|engine| (*engine, engine.planner.listing()))
            .collect();
        let (engines, lines) = decide(&listings);
        for (severity, line) in lines {
            logging::log(severity, || line);
        }
        let mut kept = [&HOST_REFERENCE; ENGINES.len()];
        for (slot, engine) in kept.iter_mut().zip(&engines) {
            *slot = engine;
        }
        (kept, engines.len())
    });
    &engines[..*count]
}

/// A listed engine by id.
pub fn find(id: i64) -> Option<&'static Engine> {
    listed().iter().copied().find(|engine| engine.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn host_engine_rule() {
        assert!(host_engine_offered(false, None));
        assert!(host_engine_offered(false, Some(OsStr::new("0"))));
        assert!(!host_engine_offered(true, None));
        assert!(!host_engine_offered(true, Some(OsStr::new("0"))));
        assert!(!host_engine_offered(true, Some(OsStr::new("yes"))));
        assert!(host_engine_offered(true, Some(OsStr::new("1"))));
    }

    /// The three engines' listing rules over the given probe results.
    fn probes(
        cuda: bool,
        aiter: bool,
        gpu_runtime: bool,
        env: Option<&str>,
    ) -> Vec<(&'static Engine, Listing)> {
        let cuda_probe = if cuda {
            Ok("CUDA driver 13.0, NVRTC 13.0, devices [0 NVIDIA H200 (sm_90a)]".into())
        } else {
            Err("CUDA is unavailable: the CUDA driver library (libcuda.so) cannot be loaded".into())
        };
        let aiter_probe = if aiter {
            Ok("RAGGED_SDPA_AITER_FMHA listed: HIP runtime /opt/rocm/lib/libamdhip64.so".into())
        } else {
            Err("RAGGED_SDPA_AITER_FMHA not listed: no HIP runtime: not found".into())
        };
        let env = env.map(OsStr::new);
        vec![
            (&CUDA_FMHA, cuda::listing_for(cuda_probe)),
            (&AITER_FMHA, aiter::listing_for(aiter_probe)),
            (&HOST_REFERENCE, host::listing_for(gpu_runtime, env)),
        ]
    }

    #[test]
    fn the_listing_is_every_engine_in_preference_order() {
        let names: Vec<_> = ENGINES.iter().map(|e| e.name_str()).collect();
        assert_eq!(
            names,
            [
                "RAGGED_SDPA_CUDA_FMHA",
                "RAGGED_SDPA_AITER_FMHA",
                "RAGGED_SDPA_HOST_REFERENCE"
            ]
        );
    }

    fn names(engines: &[&Engine]) -> Vec<&'static str> {
        engines.iter().map(|e| e.name_str()).collect()
    }

    #[test]
    fn without_gpus_only_the_host_engine_is_listed_and_each_gpu_engine_says_why() {
        let (engines, lines) = decide(&probes(false, false, false, None));
        assert_eq!(names(&engines), ["RAGGED_SDPA_HOST_REFERENCE"]);
        assert_eq!(
            lines,
            vec![
                (
                    Severity::INFO,
                    "RAGGED_SDPA_CUDA_FMHA not listed: CUDA is unavailable: the CUDA driver \
                     library (libcuda.so) cannot be loaded"
                        .to_owned()
                ),
                (
                    Severity::INFO,
                    "RAGGED_SDPA_AITER_FMHA not listed: no HIP runtime: not found".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn gpu_engines_come_first_and_the_host_engine_last() {
        let (engines, _) = decide(&probes(true, true, true, Some("1")));
        assert_eq!(
            names(&engines),
            [
                "RAGGED_SDPA_CUDA_FMHA",
                "RAGGED_SDPA_AITER_FMHA",
                "RAGGED_SDPA_HOST_REFERENCE"
            ]
        );
        let (engines, lines) = decide(&probes(true, false, true, None));
        assert_eq!(names(&engines), ["RAGGED_SDPA_CUDA_FMHA"]);
        assert!(
            lines[0]
                .1
                .starts_with("RAGGED_SDPA_CUDA_FMHA listed: CUDA driver 13.0")
        );
        assert!(
            lines.iter().any(|(s, l)| *s == Severity::INFO
                && l.starts_with("RAGGED_SDPA_HOST_REFERENCE not listed"))
        );
    }

    #[test]
    fn a_gpu_runtime_without_engines_or_the_variable_lists_nothing_and_warns() {
        let (engines, lines) = decide(&probes(false, false, true, None));
        assert!(engines.is_empty());
        assert_eq!(lines.last().map(|(s, _)| *s), Some(Severity::WARN));
    }

    #[test]
    fn gpu_engine_ids_are_the_hashes_of_their_names() {
        assert_eq!(CUDA_FMHA.id, -8390111541657994951);
        assert_eq!(AITER_FMHA.id, -7892907548674631411);
        assert_eq!(AITER_FMHA.name_str(), kernels_aiter::ENGINE_NAME);
    }

    #[test]
    fn host_engine_id_is_the_hash_of_its_name() {
        assert_eq!(HOST_REFERENCE.id, 8202884889727546333);
        assert_eq!(HOST_REFERENCE.name_str(), "RAGGED_SDPA_HOST_REFERENCE");
    }
}
