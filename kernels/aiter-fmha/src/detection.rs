//! Whether `RAGGED_SDPA_AITER_FMHA` can be listed here, and if not, which piece was missing.
//!
//! The engine is listed only when a HIP device and the AITER shim are both found. Anything
//! else is an ordinary outcome (most machines have no ROCm), reported as one INFO line that
//! says which piece was missing and what was tried.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ENGINE_NAME;
use super::applicability::GpuArch;
use super::engine::AiterEngine;
use super::shim_library::{ShimLibrary, ShimSearch};
use ragged_gpu_runtime::hip::{Hiprtc, hip_candidates, hiprtc_candidates};
use ragged_gpu_runtime::probe::{self as runtime_probe, HipUnusable, HipVerdict};

/// Where [`probe`] looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Candidate files for `libamdhip64`.
    pub hip_candidates: Vec<PathBuf>,
    /// Candidate files for `libhiprtc`.
    pub hiprtc_candidates: Vec<PathBuf>,
    /// Where the shim may be.
    pub shim: ShimSearch,
}

impl ProbeConfig {
    /// The real search: the process's HIP candidates (so the HIP verdict is the one every
    /// engine shares), ROCm's hipRTC, `$RAGGED_SDPA_AITER_SHIM`, then the plugin's own directory.
    pub fn from_env(plugin_dir: Option<&Path>) -> Self {
        Self {
            hip_candidates: hip_candidates(),
            hiprtc_candidates: hiprtc_candidates(),
            shim: ShimSearch::from_env(plugin_dir),
        }
    }
}

/// The piece that kept the engine unlisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// `libamdhip64` could not be loaded.
    HipRuntime,
    /// HIP loaded but reports no device (or failed to count them).
    HipDevice,
    /// A device's architecture could not be read.
    DeviceArch,
    /// `libhiprtc` could not be loaded (the pre-pass and fix-up are compiled with it).
    Hiprtc,
    /// The AITER shim could not be loaded, or has another ABI version.
    ShimLibrary,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HipRuntime => "no HIP runtime",
            Self::HipDevice => "no HIP device",
            Self::DeviceArch => "HIP device architecture unreadable",
            Self::Hiprtc => "no hipRTC",
            Self::ShimLibrary => "no usable AITER shim library",
        })
    }
}

/// The outcome of [`probe`].
pub enum Availability {
    /// Everything was found; the engine can be listed.
    Available(Box<AiterEngine>),
    /// The engine stays unlisted.
    Unavailable {
        /// Which piece was missing.
        missing: Missing,
        /// What was tried and what failed.
        detail: String,
    },
}

impl Availability {
    /// The INFO log line for the plugin's load sequence.
    pub fn log_line(&self) -> String {
        match self {
            Self::Available(engine) => format!(
                "{ENGINE_NAME} listed: HIP runtime {}, devices [{}], AITER shim {} (built for {}); \
                 backward: {}",
                engine.hip().path().display(),
                engine
                    .archs()
                    .iter()
                    .map(GpuArch::full)
                    .collect::<Vec<_>>()
                    .join(", "),
                engine.shim().path().display(),
                engine.shim().gpu_targets(),
                match engine.shim().backward_available() {
                    Ok(library) => format!("aiter::mha_bwd from {library}"),
                    Err(reason) => format!("declined ({reason})"),
                },
            ),
            Self::Unavailable { missing, detail } => {
                format!("{ENGINE_NAME} not listed: {missing}: {detail}")
            }
        }
    }

    /// The engine, when available.
    pub fn engine(self) -> Option<AiterEngine> {
        match self {
            Self::Available(engine) => Some(*engine),
            Self::Unavailable { .. } => None,
        }
    }
}

fn unavailable(missing: Missing, detail: impl fmt::Display) -> Availability {
    Availability::Unavailable {
        missing,
        detail: detail.to_string(),
    }
}

/// Takes the HIP verdict for the configured candidates (shared with every other engine), then
/// loads hipRTC and the shim — stopping at the first piece that is missing.
pub fn probe(config: &ProbeConfig) -> Availability {
    let verdict = runtime_probe::hip_for(&config.hip_candidates);
    let devices = match &*verdict {
        HipVerdict::Usable(devices) => devices,
        HipVerdict::Absent { reason } => return unavailable(Missing::HipRuntime, reason),
        HipVerdict::Unusable { kind, .. } => {
            let missing = match kind {
                HipUnusable::NoDevice => Missing::HipDevice,
                HipUnusable::TooOld | HipUnusable::DeviceArch => Missing::DeviceArch,
                HipUnusable::MissingSymbol => Missing::HipRuntime,
            };
            return unavailable(missing, verdict.describe());
        }
    };
    let hip = Arc::clone(&devices.runtime);
    let archs: Vec<GpuArch> = devices.archs.iter().cloned().map(GpuArch::new).collect();
    let hiprtc = match Hiprtc::load_from(&config.hiprtc_candidates) {
        Ok(rtc) => rtc,
        Err(e) => return unavailable(Missing::Hiprtc, e),
    };
    let shim = match ShimLibrary::load(&config.shim) {
        Ok(shim) => shim,
        Err(e) => {
            return unavailable(
                Missing::ShimLibrary,
                format!("{e} (searched: {})", config.shim.describe()),
            );
        }
    };
    Availability::Available(Box::new(AiterEngine::new(hip, hiprtc, shim, archs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::fake_rocm;

    fn config(hip: &Path, hiprtc: &Path, shim: Option<&Path>) -> ProbeConfig {
        ProbeConfig {
            hip_candidates: vec![hip.to_path_buf()],
            hiprtc_candidates: vec![hiprtc.to_path_buf()],
            shim: ShimSearch {
                env_override: shim.map(Path::to_path_buf),
                plugin_dir: Some(PathBuf::from("/nonexistent/plugin-dir")),
            },
        }
    }

    fn missing(a: &Availability) -> Option<Missing> {
        match a {
            Availability::Available(_) => None,
            Availability::Unavailable { missing, .. } => Some(*missing),
        }
    }

    #[test]
    fn without_rocm_the_engine_is_unlisted_because_hip_is_missing() {
        let c = ProbeConfig {
            hip_candidates: vec![PathBuf::from("/nonexistent/libamdhip64.so.7")],
            hiprtc_candidates: vec![],
            shim: ShimSearch {
                env_override: None,
                plugin_dir: None,
            },
        };
        let a = probe(&c);
        assert_eq!(missing(&a), Some(Missing::HipRuntime));
        let line = a.log_line();
        assert!(
            line.starts_with("RAGGED_SDPA_AITER_FMHA not listed: no HIP runtime: HIP runtime (libamdhip64) not found (tried /nonexistent/libamdhip64.so.7)"),
            "{line}"
        );
    }

    #[test]
    fn the_default_probe_agrees_with_the_hip_loader() {
        // On a machine without ROCm (CI, this project's dev machines) the real search must end
        // at the HIP runtime; where ROCm is installed it must get past it.
        let candidates = hip_candidates();
        let hip_present = ragged_gpu_runtime::hip::HipRuntime::load_from(&candidates).is_ok();
        let a = probe(&ProbeConfig::from_env(None));
        if hip_present {
            assert_ne!(missing(&a), Some(Missing::HipRuntime), "{}", a.log_line());
        } else {
            assert_eq!(missing(&a), Some(Missing::HipRuntime), "{}", a.log_line());
            // The default search names libamdhip64.so.7; with RAGGED_SDPA_HIP_RUNTIME set (as
            // when absence is simulated on a ROCm machine) the one path searched is the override.
            let searched = if std::env::var_os(ragged_gpu_runtime::hip::HIP_RUNTIME_ENV).is_some() {
                candidates[0].display().to_string()
            } else {
                "libamdhip64.so.7".to_owned()
            };
            assert!(a.log_line().contains(&searched), "{}", a.log_line());
        }
    }

    #[test]
    fn hip_without_devices_is_reported_as_no_device() {
        let f = fake_rocm();
        let a = probe(&config(&f.hip_no_device, &f.hiprtc, Some(&f.shim)));
        assert_eq!(missing(&a), Some(Missing::HipDevice));
        assert!(
            a.log_line().contains("hipGetDeviceCount found 0 devices"),
            "{}",
            a.log_line()
        );
    }

    #[test]
    fn hip_older_than_6_is_reported_as_unreadable_arch() {
        let f = fake_rocm();
        let a = probe(&config(&f.hip_old, &f.hiprtc, Some(&f.shim)));
        assert_eq!(missing(&a), Some(Missing::DeviceArch));
        assert!(
            a.log_line().contains("50731921 is older than 6.0"),
            "{}",
            a.log_line()
        );
    }

    #[test]
    fn missing_hiprtc_is_reported() {
        let f = fake_rocm();
        let a = probe(&config(
            &f.hip,
            Path::new("/nonexistent/libhiprtc.so"),
            Some(&f.shim),
        ));
        assert_eq!(missing(&a), Some(Missing::Hiprtc));
    }

    #[test]
    fn missing_shim_names_the_search() {
        let f = fake_rocm();
        let mut c = config(&f.hip, &f.hiprtc, None);
        let a = probe(&c);
        assert_eq!(missing(&a), Some(Missing::ShimLibrary));
        assert!(
            a.log_line().contains(
                "(searched: $RAGGED_SDPA_AITER_SHIM unset; /nonexistent/plugin-dir/libragged_aiter_shim.so)"
            ),
            "{}",
            a.log_line()
        );
        c.shim.env_override = Some(f.shim_next_abi.clone());
        let a = probe(&c);
        assert_eq!(missing(&a), Some(Missing::ShimLibrary));
        assert!(
            a.log_line()
                .contains("reports ABI version 4, this plugin needs 3"),
            "{}",
            a.log_line()
        );
    }

    #[test]
    fn with_a_device_and_the_shim_the_engine_is_listed_with_its_arch() {
        let f = fake_rocm();
        let a = probe(&config(&f.hip, &f.hiprtc, Some(&f.shim)));
        let line = a.log_line();
        assert!(line.starts_with("RAGGED_SDPA_AITER_FMHA listed:"), "{line}");
        assert!(line.contains("devices [gfx942:sramecc+:xnack-]"), "{line}");
        assert!(line.contains("(built for gfx942;gfx950)"), "{line}");
        let engine = a.engine().expect("available");
        assert_eq!(engine.archs()[0].processor(), "gfx942");
    }

    /// The backward is detected by symbol: listed with the library the shim found, declined by
    /// name with an older shim, another backward ABI or a missing libmha_bwd.so — while the
    /// forward stays listed in every case.
    #[test]
    fn the_backward_is_detected_by_symbol_and_declined_by_name() {
        let f = fake_rocm();
        let line = |shim: &std::path::PathBuf| {
            let a = probe(&config(&f.hip, &f.hiprtc, Some(shim)));
            let line = a.log_line();
            assert!(line.starts_with("RAGGED_SDPA_AITER_FMHA listed:"), "{line}");
            line
        };
        let found = line(&f.shim_bwd);
        assert!(
            found.ends_with("; backward: aiter::mha_bwd from /fake/libmha_bwd.so"),
            "{found}"
        );
        let old = line(&f.shim);
        assert!(
            old.contains("backward: declined (the AITER shim at ")
                && old.contains("has no backward entry (ragged_aiter_shim_bwd_abi_version absent"),
            "{old}"
        );
        let next = line(&f.shim_bwd_next_abi);
        assert!(
            next.contains("reports backward ABI version 3, this plugin needs 2"),
            "{next}"
        );
        let missing = line(&f.shim_bwd_missing);
        assert!(
            missing.ends_with(
                "backward: declined (libmha_bwd.so not found at /fake/libmha_bwd.so (no such file))"
            ),
            "{missing}"
        );
    }
}
