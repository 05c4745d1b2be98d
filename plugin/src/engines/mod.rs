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
//! - `RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC`: listed with it (the same probe); SDPA backward graphs
//!   only, dQ summed in no fixed order (faster on sm_90a, not bitwise reproducible). Right after the
//!   deterministic engine, so the first applicable engine stays deterministic;
//! - `RAGGED_SDPA_AITER_FMHA`: listed when [`ragged_engine_aiter::probe`] finds HIP, a device,
//!   hipRTC and the AITER shim (next to this library or at `$RAGGED_SDPA_AITER_SHIM`);
//! - `RAGGED_SDPA_HOST_REFERENCE`: listed when the process has no GPU runtime (every pointer is
//!   then host memory) or when `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` asks for it; next to CUDA it
//!   then copies device tensors to the host and back (see [`crate::binder::host_memory`]).
//!
//! Every engine left out gets one INFO line naming what was missing.
//!
//! Each engine lives in its own crate and implements [`Planner`]: its own listing probe, and from
//! the accepted [`Problem`] its own [`Planned`] (or a [`Decline`] naming uid, field, value and
//! need), which an execution context holds and runs. Nothing here dispatches on engine ids;
//! adding an engine is its crate plus its static [`Engine`] and one entry in [`ENGINES`].

use std::ffi::CStr;
use std::fmt;
use std::sync::OnceLock;

use ragged_core::Decline;
use ragged_core::engine::{Listing, Planned, Planner, Problem, Reach};
use ragged_engine_aiter::adapter::AiterFmha;
use ragged_engine_cuda::adapter::CudaFmha;
use ragged_engine_cuda::nondeterministic::CudaFmhaNondeterministic;
use ragged_engine_host::HostReference;

use crate::abi::types::Severity;
use crate::binder::host_memory;
use crate::engine_id::engine_name_to_id;
use crate::logging;

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

    /// This engine's plan for `problem`, or why it declines. A plan that reads host memory
    /// also needs the process to reach the caller's memory (host memory, or a GPU runtime that
    /// can copy it).
    pub fn plan(&self, problem: &Problem) -> Result<Box<dyn Planned>, Decline> {
        let planned = self.planner.plan(problem)?;
        if planned.reach() == Reach::Host {
            host_memory::check_reachable()?;
        }
        Ok(planned)
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
    planner: &HostReference,
};

/// `RAGGED_SDPA_CUDA_FMHA`: the project's ragged FMHA kernels, compiled by NVRTC at first use.
pub static CUDA_FMHA: Engine = Engine {
    name: c"RAGGED_SDPA_CUDA_FMHA",
    id: engine_name_to_id("RAGGED_SDPA_CUDA_FMHA"),
    planner: &CudaFmha,
};

/// `RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC`: the CUDA backward whose dQ is summed in whatever
/// order the blocks finish (the fused dK/dV/dQ kernel on sm_90a); backward graphs only.
pub static CUDA_FMHA_NONDETERMINISTIC: Engine = Engine {
    name: c"RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC",
    id: engine_name_to_id(ragged_engine_cuda::nondeterministic::ENGINE_NAME),
    planner: &CudaFmhaNondeterministic,
};

/// `RAGGED_SDPA_AITER_FMHA`: AITER's FMHA through the shim, on ROCm.
pub static AITER_FMHA: Engine = Engine {
    name: c"RAGGED_SDPA_AITER_FMHA",
    id: engine_name_to_id(ragged_engine_aiter::ENGINE_NAME),
    planner: &AiterFmha,
};

/// Every engine of this library, in preference order (GPU engines first, each deterministic one
/// before its non-deterministic twin). Adding an engine is its module, its static above and one
/// entry here.
pub static ENGINES: [&Engine; 4] = [
    &CUDA_FMHA,
    &CUDA_FMHA_NONDETERMINISTIC,
    &AITER_FMHA,
    &HOST_REFERENCE,
];

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
            (
                &CUDA_FMHA,
                ragged_engine_cuda::adapter::listing_for(cuda_probe.clone()),
            ),
            (
                &CUDA_FMHA_NONDETERMINISTIC,
                ragged_engine_cuda::adapter::listing_named(
                    ragged_engine_cuda::nondeterministic::ENGINE_NAME,
                    cuda_probe,
                ),
            ),
            (
                &AITER_FMHA,
                ragged_engine_aiter::adapter::listing_for(aiter_probe),
            ),
            (
                &HOST_REFERENCE,
                ragged_engine_host::listing_for(gpu_runtime, env),
            ),
        ]
    }

    #[test]
    fn the_listing_is_every_engine_in_preference_order() {
        let names: Vec<_> = ENGINES.iter().map(|e| e.name_str()).collect();
        assert_eq!(
            names,
            [
                "RAGGED_SDPA_CUDA_FMHA",
                "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC",
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
                    "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC not listed: CUDA is unavailable: the \
                     CUDA driver library (libcuda.so) cannot be loaded"
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
                "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC",
                "RAGGED_SDPA_AITER_FMHA",
                "RAGGED_SDPA_HOST_REFERENCE"
            ]
        );
        let (engines, lines) = decide(&probes(true, false, true, None));
        assert_eq!(
            names(&engines),
            [
                "RAGGED_SDPA_CUDA_FMHA",
                "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC"
            ]
        );
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
        assert_eq!(AITER_FMHA.name_str(), ragged_engine_aiter::ENGINE_NAME);
        assert_eq!(
            CUDA_FMHA.name_str(),
            ragged_engine_cuda::adapter::ENGINE_NAME
        );
    }

    #[test]
    fn the_nondeterministic_engine_has_its_own_stable_id_and_follows_the_deterministic_one() {
        assert_eq!(CUDA_FMHA_NONDETERMINISTIC.id, -703742951178686843);
        assert_eq!(
            CUDA_FMHA_NONDETERMINISTIC.name_str(),
            ragged_engine_cuda::nondeterministic::ENGINE_NAME
        );
        let ids: Vec<i64> = ENGINES.iter().map(|e| e.id).collect();
        for (i, id) in ids.iter().enumerate() {
            assert!(!ids[i + 1..].contains(id), "ids collide: {ids:?}");
        }
        let at = |e: &Engine| ENGINES.iter().position(|x| x.id == e.id);
        assert_eq!(
            at(&CUDA_FMHA_NONDETERMINISTIC),
            at(&CUDA_FMHA).map(|i| i + 1)
        );
    }

    #[test]
    fn host_engine_id_is_the_hash_of_its_name() {
        assert_eq!(HOST_REFERENCE.id, 8202884889727546333);
        assert_eq!(HOST_REFERENCE.name_str(), ragged_engine_host::ENGINE_NAME);
    }
}

#[cfg(test)]
mod plan_tests;
