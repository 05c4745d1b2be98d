//! The one presence probe for both GPU runtimes: which of CUDA and HIP this process can use,
//! decided once (until [`release`]) and shared by every engine, the plugin's host-memory rule, the shim and the
//! conformance suites.
//!
//! "Usable" means a device can hold tensors here: for HIP, a runtime that loads, sees at least
//! one device, is new enough for the properties call (6.0), exports every function the engines
//! call, and names each device's architecture. Anything less is one reason string, the same
//! for every engine that asks, so no two lines of one log disagree about one library. A
//! runtime that is present but unusable cannot have produced device pointers, so the host
//! engine uses every pointer in place.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::cuda::GpuError;
use super::cuda::runtime::{self as cuda_runtime, CudaRuntime};
use super::hip::{self, HipRuntime, format_hip_version};

/// Why a loaded HIP runtime cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HipUnusable {
    /// HIP reports no device (or failed to count them).
    NoDevice,
    /// Older than 6.0: no `hipDeviceProp_tR0600`, older pointer-attribute numbering.
    TooOld,
    /// A function the engines need is not exported.
    MissingSymbol,
    /// A device's `gcnArchName` could not be read.
    DeviceArch,
}

/// Usable HIP: the runtime and each device's `gcnArchName`, by ordinal.
pub struct HipDevices {
    /// The loaded runtime, shared by every engine.
    pub runtime: Arc<HipRuntime>,
    /// Full architecture names (`gfx942:sramecc+:xnack-`).
    pub archs: Vec<String>,
}

/// The verdict about HIP for one list of candidate libraries.
pub enum HipVerdict {
    /// No candidate loads.
    Absent {
        /// What was tried.
        reason: String,
    },
    /// A runtime loads but cannot hold tensors here.
    Unusable {
        /// The runtime that was loaded.
        runtime: Arc<HipRuntime>,
        /// Which requirement failed.
        kind: HipUnusable,
        /// Why, in words.
        reason: String,
    },
    /// At least one device, and every function the engines call.
    Usable(HipDevices),
}

/// Functions every HIP engine needs beyond those [`HipRuntime::load_from`] and the device count
/// already required. The host engine's copy path needs more ([`copy_path_missing`]).
fn required(sys: &hip::sys::HipSys) -> [(&'static str, bool); 2] {
    [
        ("hipGetDevice", sys.get_device.function.is_some()),
        (
            "hipGetDevicePropertiesR0600",
            sys.get_device_properties_r0600.function.is_some(),
        ),
    ]
}

/// The functions of the host engine's copy path that `runtime` lacks (empty: it can copy).
pub fn copy_path_missing(runtime: &HipRuntime) -> Vec<&'static str> {
    let sys = runtime.sys();
    [
        (
            "hipPointerGetAttributes",
            sys.pointer_get_attributes.function.is_some(),
        ),
        ("hipMemcpyAsync", sys.memcpy_async.function.is_some()),
        (
            "hipStreamSynchronize",
            sys.stream_synchronize.function.is_some(),
        ),
    ]
    .into_iter()
    .filter(|(_, present)| !present)
    .map(|(name, _)| name)
    .collect()
}

impl HipVerdict {
    /// Loads the first candidate and checks it, stopping at the first requirement that fails.
    pub fn evaluate(candidates: &[PathBuf]) -> Self {
        let runtime = match HipRuntime::load_from(candidates) {
            Ok(runtime) => Arc::new(runtime),
            Err(e) => {
                return HipVerdict::Absent {
                    reason: e.to_string(),
                };
            }
        };
        let unusable = |kind, reason: String| HipVerdict::Unusable {
            runtime: Arc::clone(&runtime),
            kind,
            reason,
        };
        match runtime.device_count() {
            Ok(0) => {
                return unusable(
                    HipUnusable::NoDevice,
                    "hipGetDeviceCount found 0 devices".into(),
                );
            }
            Ok(_) => {}
            Err(e) => return unusable(HipUnusable::NoDevice, e.to_string()),
        }
        if runtime.version() < hip::MIN_HIP_VERSION {
            return unusable(
                HipUnusable::TooOld,
                format!(
                    "version {} is older than 6.0 ({}): no hipDeviceProp_tR0600 to read \
                     gcnArchName from, and the older hipMemoryType numbering",
                    runtime.version(),
                    hip::MIN_HIP_VERSION
                ),
            );
        }
        let missing: Vec<&str> = required(runtime.sys())
            .iter()
            .filter(|(_, present)| !present)
            .map(|(name, _)| *name)
            .collect();
        if !missing.is_empty() {
            return unusable(
                HipUnusable::MissingSymbol,
                format!("lacks {}", missing.join(", ")),
            );
        }
        let count = runtime.device_count().unwrap_or(0);
        let mut archs = Vec::new();
        for device in 0..count {
            match runtime.arch_name(device) {
                Ok(arch) => archs.push(arch),
                Err(e) => return unusable(HipUnusable::DeviceArch, e.to_string()),
            }
        }
        HipVerdict::Usable(HipDevices { runtime, archs })
    }

    /// The devices, when HIP is usable.
    pub fn usable(&self) -> Option<&HipDevices> {
        match self {
            HipVerdict::Usable(devices) => Some(devices),
            HipVerdict::Absent { .. } | HipVerdict::Unusable { .. } => None,
        }
    }

    /// The one line that says what was found.
    pub fn describe(&self) -> String {
        let name = |runtime: &HipRuntime| {
            format!(
                "HIP runtime {} (HIP {})",
                runtime.path().display(),
                format_hip_version(runtime.version())
            )
        };
        match self {
            HipVerdict::Absent { reason } => format!("no HIP runtime: {reason}"),
            HipVerdict::Unusable {
                runtime, reason, ..
            } => format!("{} unusable: {reason}", name(runtime)),
            HipVerdict::Usable(devices) => format!(
                "{}, devices [{}]",
                name(&devices.runtime),
                devices.archs.join(", ")
            ),
        }
    }
}

/// Verdicts by candidate list, and the process's own ([`hip`]), until [`release`].
static VERDICTS: Mutex<Vec<(Vec<PathBuf>, Arc<HipVerdict>)>> = Mutex::new(Vec::new());
static HIP: Mutex<Option<Arc<HipVerdict>>> = Mutex::new(None);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The verdict for `candidates`, computed on first request and kept until [`release`]: every
/// caller naming the same libraries gets the same answer (and the same loaded runtime).
pub fn hip_for(candidates: &[PathBuf]) -> Arc<HipVerdict> {
    let mut verdicts = lock(&VERDICTS);
    if let Some((_, verdict)) = verdicts.iter().find(|(c, _)| c == candidates) {
        return Arc::clone(verdict);
    }
    let verdict = Arc::new(HipVerdict::evaluate(candidates));
    verdicts.push((candidates.to_vec(), Arc::clone(&verdict)));
    verdict
}

/// The process's verdict about HIP, from [`hip::hip_candidates`].
pub fn hip() -> Arc<HipVerdict> {
    let mut slot = lock(&HIP);
    if let Some(verdict) = slot.as_ref() {
        return Arc::clone(verdict);
    }
    Arc::clone(slot.insert(hip_for(&hip::hip_candidates())))
}

/// Drops the kept verdicts of both runtimes (a usable CUDA runtime excepted, see
/// [`cuda_runtime::release`]): the plugin calls this when its last handle is destroyed, so that
/// no heap is left that only an unloaded library's statics knew about. A verdict still held by
/// a caller lives on with it; the next request decides again.
pub fn release() {
    lock(&HIP).take();
    std::mem::take(&mut *lock(&VERDICTS));
    cuda_runtime::release();
}

/// The process's verdict about CUDA (see [`cuda_runtime::probe`]).
pub fn cuda() -> Result<&'static CudaRuntime, GpuError> {
    cuda_runtime::probe()
}

/// Whether either runtime can hold tensors here: then the host engine is not offered by
/// default, since hipDNN hands out device pointers.
pub fn gpu_runtime_present() -> bool {
    cuda().is_ok() || hip().usable().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_runtime_is_one_reason_naming_the_candidates() {
        let v = HipVerdict::evaluate(&[PathBuf::from("/nonexistent/libamdhip64.so.6")]);
        assert!(v.usable().is_none());
        let line = v.describe();
        assert!(
            line.starts_with("no HIP runtime: HIP runtime (libamdhip64) not found"),
            "{line}"
        );
        assert!(line.contains("/nonexistent/libamdhip64.so.6"), "{line}");
    }

    #[test]
    fn the_same_candidates_get_the_same_verdict_object() {
        let c = [PathBuf::from("/nonexistent/for-the-memo/libamdhip64.so")];
        assert!(Arc::ptr_eq(&hip_for(&c), &hip_for(&c)));
    }

    #[test]
    fn a_fake_runtime_with_one_device_is_usable_and_copies_through_its_side_table() {
        let lib = hip::fake_hip_library().to_path_buf();
        let verdict = hip_for(std::slice::from_ref(&lib));
        let devices = verdict
            .usable()
            .unwrap_or_else(|| panic!("{}", verdict.describe()));
        assert_eq!(devices.archs, ["gfx942:sramecc+:xnack-"]);
        assert!(copy_path_missing(&devices.runtime).is_empty());
        let line = verdict.describe();
        assert!(line.contains("(HIP 6.2.41133), devices [gfx942"), "{line}");

        let hip = &devices.runtime;
        let host = [7u8; 16];
        assert_eq!(
            hip.location(host.as_ptr() as u64),
            Ok(crate::Location::Host)
        );
        let device = hip.alloc(6).expect("fake hipMalloc");
        assert_eq!(hip.location(device.address()), Ok(crate::Location::Device));
        device.upload(&[1, 2, 3, 4, 5, 6]).expect("upload");
        let mut back = [0u8; 6];
        device.download(&mut back).expect("download");
        assert_eq!(back, [1, 2, 3, 4, 5, 6]);
        // A copy past the end of the allocation is refused by the runtime, not performed.
        let mut too_long = [0u8; 7];
        // SAFETY: the fake checks the range against its table and copies nothing.
        let err = unsafe {
            hip.download(
                std::ptr::null_mut(),
                &mut [(device.address(), &mut too_long[..])],
            )
        }
        .expect_err("out of range");
        assert!(err.to_string().contains("hipMemcpyAsync failed"), "{err}");
    }

    #[test]
    fn a_device_without_the_copy_functions_is_usable_but_names_what_copies_lack() {
        let lib = hip::fake_hip_library_without_copies();
        let verdict = hip_for(&[lib.to_path_buf()]);
        let devices = verdict
            .usable()
            .unwrap_or_else(|| panic!("{}", verdict.describe()));
        assert_eq!(
            copy_path_missing(&devices.runtime),
            ["hipPointerGetAttributes", "hipMemcpyAsync"]
        );
    }
}
