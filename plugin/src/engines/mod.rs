//! The engines this library can list, and which of them it lists in this process.
//!
//! plugin-abi.md §5.2 says the list is fixed per build. Issue 4 overrides that: an engine is listed
//! only if it can run on this machine. The list is still computed once and cached, so it is static
//! for the life of the loaded library, as the backend's two-call protocol requires.
//!
//! Order is preference: hipDNN tries engines in the order it receives them, so the GPU engines
//! come first and the host reference last.
//! - `RAGGED_SDPA_CUDA_FMHA`: listed when [`ragged_kernels::runtime::cuda::runtime::probe`] finds a usable
//!   CUDA device, driver and NVRTC;
//! - `RAGGED_SDPA_AITER_FMHA`: listed when [`ragged_kernels::aiter::probe`] finds HIP, a device,
//!   hipRTC and the AITER shim (next to this library or at `$RAGGED_SDPA_AITER_SHIM`);
//! - `RAGGED_SDPA_HOST_REFERENCE`: listed when the process has no GPU runtime (every pointer is
//!   then host memory) or when `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` asks for it; next to CUDA it
//!   then copies device tensors to the host and back (see [`crate::engines::host::staging`]).
//!
//! Every engine left out gets one INFO line naming what was missing.

pub mod aiter;
pub mod cuda;
pub mod host;

use std::ffi::{CStr, OsStr};
use std::sync::OnceLock;

use ragged_kernels::aiter::{self as kernels_aiter, AiterEngine, Availability, ProbeConfig};
use ragged_kernels::runtime::cuda::runtime;

use crate::abi::types::Severity;
use crate::engine_id::engine_name_to_id;
use crate::{logging, plugin_dir};
use ragged_kernels::runtime::probe as runtime_probe;

/// Environment variable that lists the host reference engine even next to a GPU runtime.
pub const HOST_ENGINE_ENV: &str = "HIPDNN_RAGGED_SDPA_HOST_ENGINE";

/// One engine: its upper-snake-case name (static C storage, as `GetEngineName` hands it out) and
/// the id derived from it.
#[derive(Debug, PartialEq, Eq)]
pub struct Engine {
    pub name: &'static CStr,
    pub id: i64,
}

impl Engine {
    pub fn name_str(&self) -> &'static str {
        self.name.to_str().unwrap_or("<non-utf8 engine name>")
    }
}

/// `RAGGED_SDPA_HOST_REFERENCE`: the CPU reference, the numeric specification of every engine.
pub static HOST_REFERENCE: Engine = Engine {
    name: c"RAGGED_SDPA_HOST_REFERENCE",
    id: engine_name_to_id("RAGGED_SDPA_HOST_REFERENCE"),
};

/// `RAGGED_SDPA_CUDA_FMHA`: the project's ragged FMHA kernels, compiled by NVRTC at first use.
pub static CUDA_FMHA: Engine = Engine {
    name: c"RAGGED_SDPA_CUDA_FMHA",
    id: engine_name_to_id("RAGGED_SDPA_CUDA_FMHA"),
};

/// `RAGGED_SDPA_AITER_FMHA`: AITER's FMHA through the shim, on ROCm.
pub static AITER_FMHA: Engine = Engine {
    name: c"RAGGED_SDPA_AITER_FMHA",
    id: engine_name_to_id(kernels_aiter::ENGINE_NAME),
};

/// What the probes found, as plain values, so that the listing rule can be tested on any machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probes {
    /// `Ok(summary)` when CUDA is usable, else why not.
    pub cuda: Result<String, String>,
    /// AITER's availability as its log line, `Ok` when available.
    pub aiter: Result<String, String>,
    /// Whether any GPU runtime library can be loaded (CUDA or HIP, usable or not).
    pub gpu_runtime_present: bool,
    /// `HIPDNN_RAGGED_SDPA_HOST_ENGINE`.
    pub host_env: Option<std::ffi::OsString>,
}

/// The listed engines in preference order, and the log lines explaining the choice.
pub fn decide(probes: &Probes) -> (Vec<&'static Engine>, Vec<(Severity, String)>) {
    let mut engines = Vec::new();
    let mut lines = Vec::new();
    match &probes.cuda {
        Ok(summary) => {
            engines.push(&CUDA_FMHA);
            lines.push((
                Severity::INFO,
                format!("{} listed: {summary}", CUDA_FMHA.name_str()),
            ));
        }
        Err(reason) => lines.push((
            Severity::INFO,
            format!("{} not listed: {reason}", CUDA_FMHA.name_str()),
        )),
    }
    match &probes.aiter {
        Ok(line) => {
            engines.push(&AITER_FMHA);
            lines.push((Severity::INFO, line.clone()));
        }
        Err(line) => lines.push((Severity::INFO, line.clone())),
    }
    if host_engine_offered(probes.gpu_runtime_present, probes.host_env.as_deref()) {
        engines.push(&HOST_REFERENCE);
    } else {
        lines.push((
            Severity::INFO,
            format!(
                "{} not listed: a GPU runtime is loadable and {HOST_ENGINE_ENV} is not 1 (set it \
                 to run the CPU reference; next to CUDA it copies device tensors to the host)",
                HOST_REFERENCE.name_str()
            ),
        ));
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

/// The AITER engine, probed once per process; `None` when it is not listed.
pub fn aiter_engine() -> Option<&'static AiterEngine> {
    aiter_probe().0.as_ref()
}

fn aiter_probe() -> &'static (Option<AiterEngine>, Result<String, String>) {
    static AITER: OnceLock<(Option<AiterEngine>, Result<String, String>)> = OnceLock::new();
    AITER.get_or_init(|| {
        let availability =
            kernels_aiter::probe(&ProbeConfig::from_env(plugin_dir::plugin_dir().as_deref()));
        let line = availability.log_line();
        match availability {
            Availability::Available(engine) => (Some(*engine), Ok(line)),
            Availability::Unavailable { .. } => (None, Err(line)),
        }
    })
}

fn cuda_probe() -> Result<String, String> {
    match runtime::probe() {
        Ok(cuda) => Ok(format!(
            "CUDA driver {}, NVRTC {}.{}, devices [{}]",
            runtime::format_cuda_version(cuda.driver_version),
            cuda.nvrtc_version.0,
            cuda.nvrtc_version.1,
            cuda.devices
                .iter()
                .map(|d| format!("{} {} ({})", d.ordinal, d.name, d.target.arch()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Err(error) => Err(error.to_string()),
    }
}

/// The host engine's listing rule, separated from the probes so it can be tested on any machine.
pub fn host_engine_offered(gpu_runtime_present: bool, env_value: Option<&OsStr>) -> bool {
    !gpu_runtime_present || env_value == Some(OsStr::new("1"))
}

/// The engines listed in this process, decided on first use.
pub fn listed() -> &'static [&'static Engine] {
    static LISTED: OnceLock<Vec<&'static Engine>> = OnceLock::new();
    LISTED.get_or_init(|| {
        let probes = Probes {
            cuda: cuda_probe(),
            aiter: aiter_probe().1.clone(),
            gpu_runtime_present: runtime_probe::gpu_runtime_present(),
            host_env: std::env::var_os(HOST_ENGINE_ENV),
        };
        let (engines, lines) = decide(&probes);
        for (severity, line) in lines {
            logging::log(severity, || line);
        }
        engines
    })
}

/// A listed engine by id.
pub fn find(id: i64) -> Option<&'static Engine> {
    listed().iter().copied().find(|engine| engine.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_engine_rule() {
        assert!(host_engine_offered(false, None));
        assert!(host_engine_offered(false, Some(OsStr::new("0"))));
        assert!(!host_engine_offered(true, None));
        assert!(!host_engine_offered(true, Some(OsStr::new("0"))));
        assert!(!host_engine_offered(true, Some(OsStr::new("yes"))));
        assert!(host_engine_offered(true, Some(OsStr::new("1"))));
    }

    fn probes(cuda: bool, aiter: bool, gpu_runtime: bool, env: Option<&str>) -> Probes {
        Probes {
            cuda: if cuda {
                Ok("CUDA driver 13.0, NVRTC 13.0, devices [0 NVIDIA H200 (sm_90a)]".into())
            } else {
                Err(
                    "CUDA is unavailable: the CUDA driver library (libcuda.so) cannot be loaded"
                        .into(),
                )
            },
            aiter: if aiter {
                Ok(
                    "RAGGED_SDPA_AITER_FMHA listed: HIP runtime /opt/rocm/lib/libamdhip64.so"
                        .into(),
                )
            } else {
                Err("RAGGED_SDPA_AITER_FMHA not listed: no HIP runtime: not found".into())
            },
            gpu_runtime_present: gpu_runtime,
            host_env: env.map(Into::into),
        }
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
