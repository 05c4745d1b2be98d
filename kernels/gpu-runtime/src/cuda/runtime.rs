//! Finding CUDA at run time: the probe, the devices, and the NVRTC target for each device.
//!
//! The plugin must load and work on machines without CUDA, so nothing here links to CUDA: cudarc
//! opens `libcuda` and `libnvrtc` with `dlopen` on first use. cudarc panics when a library or a
//! symbol is missing, so the probe first asks whether each library can be opened at all and runs
//! every first call inside `catch_unwind`; whatever goes wrong becomes a reason string and the
//! engine is simply not listed. The answer is computed once: hipDNN requires the engine list to
//! stay fixed while the plugin is loaded.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, PoisonError};

use cudarc::driver::sys::{self as cu, CUdevice_attribute};
use cudarc::nvrtc::sys as nvrtc;

use super::error::GpuError;

/// Setting this variable (to anything but `0` or empty) hides the CUDA engine, so users can
/// force the host path and tests can check that the plugin works without CUDA.
pub const DISABLE_ENV: &str = "RAGGED_SDPA_DISABLE_CUDA";

/// The kernels use `cp.async`, `ldmatrix` and bf16 `mma.sync`, all new in sm_80.
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (8, 0);

/// The oldest driver API whose entry points this layer calls (`cuCtxGetId` is 12.0).
pub const MIN_DRIVER_VERSION: i32 = 12_000;

/// One CUDA device as the probe saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Driver ordinal (also the `CUdevice` handle's value).
    pub ordinal: i32,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors, for sizing persistent grids and reporting.
    pub multiprocessors: i32,
    /// Largest dynamic shared memory a block may opt into, in bytes.
    pub max_shared_per_block_optin: i32,
    /// What NVRTC produces for this device.
    pub target: CompileTarget,
}

/// What the probe found: usable devices and the library versions that key the kernel cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRuntime {
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: i32,
    /// `nvrtcVersion` (major, minor).
    pub nvrtc_version: (i32, i32),
    /// Devices with compute capability >= [`MIN_COMPUTE_CAPABILITY`] (at least one).
    pub devices: Vec<DeviceInfo>,
}

impl CudaRuntime {
    /// The probe's view of device `ordinal`, if it is usable.
    pub fn device(&self, ordinal: i32) -> Option<&DeviceInfo> {
        self.devices.iter().find(|d| d.ordinal == ordinal)
    }
}

/// How NVRTC compiles for one device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CompileTarget {
    /// Machine code for exactly this architecture (`sm_90a`): no JIT at load time, and the
    /// arch-specific (`a`) variants on sm_90 and newer.
    Cubin {
        /// The `--gpu-architecture` value.
        arch: String,
    },
    /// PTX for the newest virtual architecture NVRTC knows that the device can run: used when the
    /// device is newer than the installed NVRTC, the driver JIT-compiles it at module load.
    Ptx {
        /// The `--gpu-architecture` value (`compute_XY`).
        arch: String,
    },
}

impl CompileTarget {
    /// The value of `--gpu-architecture`.
    pub fn arch(&self) -> &str {
        match self {
            CompileTarget::Cubin { arch } | CompileTarget::Ptx { arch } => arch,
        }
    }

    /// File extension of a cached image.
    pub fn extension(&self) -> &'static str {
        match self {
            CompileTarget::Cubin { .. } => "cubin",
            CompileTarget::Ptx { .. } => "ptx",
        }
    }
}

/// Picks the NVRTC target for a device of compute capability `cc`, given the real architectures
/// the installed NVRTC supports (`nvrtcGetSupportedArchs`, as `major * 10 + minor`).
pub fn compile_target(cc: (i32, i32), nvrtc_archs: &[i32]) -> Result<CompileTarget, String> {
    let (major, minor) = cc;
    if cc < MIN_COMPUTE_CAPABILITY {
        return Err(format!(
            "compute capability {major}.{minor} is below the kernels' minimum {}.{}",
            MIN_COMPUTE_CAPABILITY.0, MIN_COMPUTE_CAPABILITY.1
        ));
    }
    let sm = major * 10 + minor;
    if nvrtc_archs.contains(&sm) {
        // Every architecture from sm_90 on has an arch-specific `a` variant; its cubin runs on
        // exactly that architecture, which is all a cache keyed by architecture needs.
        let suffix = if major >= 9 { "a" } else { "" };
        return Ok(CompileTarget::Cubin {
            arch: format!("sm_{sm}{suffix}"),
        });
    }
    let min_sm = MIN_COMPUTE_CAPABILITY.0 * 10 + MIN_COMPUTE_CAPABILITY.1;
    match nvrtc_archs
        .iter()
        .copied()
        .filter(|&a| a >= min_sm && a <= sm)
        .max()
    {
        Some(best) => Ok(CompileTarget::Ptx {
            arch: format!("compute_{best}"),
        }),
        None => Err(format!(
            "NVRTC supports none of the architectures sm_{min_sm}..=sm_{sm} (it lists {nvrtc_archs:?})"
        )),
    }
}

/// A usable runtime, kept for the process once found: callers hold `&'static` references to it,
/// and the driver library it loaded stays loaded anyway.
static RUNTIME: OnceLock<CudaRuntime> = OnceLock::new();
/// Why there is no usable runtime, kept until [`release`] (the plugin's last handle).
static UNAVAILABLE: Mutex<Option<String>> = Mutex::new(None);

/// The process-wide probe: the devices this engine can use, or why there are none.
///
/// Never panics and never fails twice in different ways: the first answer is kept (a failure
/// until [`release`], a usable runtime for the process).
pub fn probe() -> Result<&'static CudaRuntime, GpuError> {
    let unavailable = |reason: &String| GpuError::Unavailable {
        reason: reason.clone(),
    };
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let mut reason = UNAVAILABLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(reason) = reason.as_ref() {
        return Err(unavailable(reason));
    }
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    match probe_uncached() {
        Ok(runtime) => Ok(RUNTIME.get_or_init(|| runtime)),
        Err(why) => Err(unavailable(reason.insert(why))),
    }
}

/// Forgets why CUDA was unavailable (its heap would outlive an unloaded plugin); the next
/// [`probe`] decides again. A usable runtime is kept.
pub fn release() {
    UNAVAILABLE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
}

fn probe_uncached() -> Result<CudaRuntime, String> {
    if let Some(value) = std::env::var_os(DISABLE_ENV)
        && !value.is_empty()
        && value != "0"
    {
        return Err(format!(
            "disabled by {DISABLE_ENV}={}",
            value.to_string_lossy()
        ));
    }
    // SAFETY: `is_culib_present` only tries `dlopen` on the candidate library names; loading the
    // NVIDIA driver library runs its initialisers, which are made to run in any host process.
    if !unsafe { cu::is_culib_present() } {
        return Err("the CUDA driver library (libcuda.so) cannot be loaded".to_owned());
    }
    // SAFETY: as above, for libnvrtc.
    if !unsafe { nvrtc::is_culib_present() } {
        return Err("the NVRTC library (libnvrtc.so) cannot be loaded".to_owned());
    }
    match catch_unwind(AssertUnwindSafe(query_runtime)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            Err(format!("loading CUDA failed: {message}"))
        }
    }
}

fn query_runtime() -> Result<CudaRuntime, String> {
    let mut driver_version = 0;
    // SAFETY: plain out-parameter call; the library is present (checked by the caller).
    let status = unsafe { cu::cuDriverGetVersion(&mut driver_version) };
    check_cu(status, "cuDriverGetVersion")?;
    if driver_version < MIN_DRIVER_VERSION {
        return Err(format!(
            "CUDA driver {} is older than the required {}",
            format_cuda_version(driver_version),
            format_cuda_version(MIN_DRIVER_VERSION)
        ));
    }
    // SAFETY: cuInit may be called any number of times from any thread.
    check_cu(unsafe { cu::cuInit(0) }, "cuInit")?;
    let mut count = 0;
    // SAFETY: out-parameter call after a successful cuInit.
    let status = unsafe { cu::cuDeviceGetCount(&mut count) };
    check_cu(status, "cuDeviceGetCount")?;
    if count == 0 {
        return Err("the CUDA driver reports no device".to_owned());
    }

    let (mut major, mut minor) = (0, 0);
    // SAFETY: out-parameter call; NVRTC is present (checked by the caller).
    let status = unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
    check_nvrtc(status, "nvrtcVersion")?;
    let nvrtc_archs = nvrtc_supported_archs()?;

    let mut devices = Vec::new();
    let mut skipped = Vec::new();
    for ordinal in 0..count {
        let info = query_device(ordinal)?;
        match compile_target(info.0, &nvrtc_archs) {
            Ok(target) => devices.push(DeviceInfo {
                ordinal,
                name: info.1,
                compute_capability: info.0,
                multiprocessors: info.2,
                max_shared_per_block_optin: info.3,
                target,
            }),
            Err(why) => skipped.push(format!("device {ordinal} ({}): {why}", info.1)),
        }
    }
    if devices.is_empty() {
        return Err(format!("no usable CUDA device: {}", skipped.join("; ")));
    }
    Ok(CudaRuntime {
        driver_version,
        nvrtc_version: (major, minor),
        devices,
    })
}

/// (compute capability, name, SM count, opt-in shared memory per block).
fn query_device(ordinal: i32) -> Result<((i32, i32), String, i32, i32), String> {
    let mut device = 0;
    // SAFETY: out-parameter call; `ordinal` is below the device count.
    let status = unsafe { cu::cuDeviceGet(&mut device, ordinal) };
    check_cu(status, "cuDeviceGet")?;
    let attribute = |attr: CUdevice_attribute| -> Result<i32, String> {
        let mut value = 0;
        // SAFETY: out-parameter call on a valid device handle.
        let status = unsafe { cu::cuDeviceGetAttribute(&mut value, attr, device) };
        check_cu(status, "cuDeviceGetAttribute")?;
        Ok(value)
    };
    let major = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sms = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let smem =
        attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds `len` bytes; the driver writes a NUL-terminated string into it.
    let status = unsafe { cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device) };
    check_cu(status, "cuDeviceGetName")?;
    let bytes: Vec<u8> = name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok((
        (major, minor),
        String::from_utf8_lossy(&bytes).into_owned(),
        sms,
        smem,
    ))
}

fn nvrtc_supported_archs() -> Result<Vec<i32>, String> {
    let mut n = 0;
    // SAFETY: out-parameter call.
    let status = unsafe { nvrtc::nvrtcGetNumSupportedArchs(&mut n) };
    check_nvrtc(status, "nvrtcGetNumSupportedArchs")?;
    let mut archs = vec![0; usize::try_from(n).unwrap_or(0)];
    if !archs.is_empty() {
        // SAFETY: `archs` holds exactly the number of entries NVRTC just reported.
        let status = unsafe { nvrtc::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
        check_nvrtc(status, "nvrtcGetSupportedArchs")?;
    }
    Ok(archs)
}

fn check_cu(status: cu::CUresult, call: &str) -> Result<(), String> {
    status.result().map_err(|e| {
        let name = e
            .error_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("CUresult {}", status as u32));
        format!("{call} failed: {name}")
    })
}

fn check_nvrtc(status: nvrtc::nvrtcResult, call: &str) -> Result<(), String> {
    status
        .result()
        .map_err(|e| format!("{call} failed: {:?}", e.0))
}

/// `13000` -> `13.0`.
pub fn format_cuda_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// For device tests: the runtime, or `None` after printing why the test is skipped.
///
/// The reason goes straight to the process's stderr, past libtest's capture of `eprintln!`, so a
/// skipped device test is visible in a normal `cargo test` run instead of passing silently.
pub fn runtime_or_skip(test: &str) -> Option<&'static CudaRuntime> {
    use std::io::Write;
    match probe() {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "test {test}: skipped: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUDA13_ARCHS: &[i32] = &[75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121];

    #[test]
    fn hopper_gets_the_arch_specific_cubin() {
        assert_eq!(
            compile_target((9, 0), CUDA13_ARCHS),
            Ok(CompileTarget::Cubin {
                arch: "sm_90a".to_owned()
            })
        );
        assert_eq!(
            compile_target((12, 0), CUDA13_ARCHS).map(|t| t.arch().to_owned()),
            Ok("sm_120a".to_owned())
        );
    }

    #[test]
    fn ampere_gets_the_plain_cubin() {
        assert_eq!(
            compile_target((8, 6), CUDA13_ARCHS).map(|t| t.arch().to_owned()),
            Ok("sm_86".to_owned())
        );
    }

    #[test]
    fn a_device_newer_than_nvrtc_gets_ptx_for_the_newest_older_arch() {
        assert_eq!(
            compile_target((13, 0), CUDA13_ARCHS),
            Ok(CompileTarget::Ptx {
                arch: "compute_121".to_owned()
            })
        );
    }

    #[test]
    fn pre_ampere_devices_are_refused_with_the_reason() {
        let err = compile_target((7, 5), CUDA13_ARCHS).unwrap_err();
        assert!(err.contains("7.5") && err.contains("8.0"), "{err}");
    }

    #[test]
    fn an_nvrtc_without_any_usable_arch_is_refused() {
        let err = compile_target((9, 0), &[75]).unwrap_err();
        assert!(err.contains("sm_80..=sm_90"), "{err}");
    }

    #[test]
    fn cuda_versions_format_like_nvidia_smi() {
        assert_eq!(format_cuda_version(13000), "13.0");
        assert_eq!(format_cuda_version(12080), "12.8");
    }

    /// Runs everywhere: where CUDA is absent the probe must answer with a reason, not panic.
    #[test]
    fn probe_answers_without_panicking() {
        match probe() {
            Ok(runtime) => {
                assert!(!runtime.devices.is_empty());
                eprintln!(
                    "CUDA present: driver {}, {:?}",
                    format_cuda_version(runtime.driver_version),
                    runtime.devices
                );
            }
            Err(GpuError::Unavailable { reason }) => {
                assert!(!reason.is_empty());
                assert!(runtime_or_skip("probe_answers_without_panicking").is_none());
            }
            Err(other) => panic!("probe returned a non-availability error: {other}"),
        }
    }
}
