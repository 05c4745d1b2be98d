//! Whether this process can load a GPU runtime.
//!
//! "No GPU runtime" is what makes it safe to treat every variant-pack pointer as host memory.
//! The probe opens the runtime library and closes it again; the answer is cached because
//! `dlopen` of a GPU runtime is slow and the engine list must not change while we are loaded.

use std::sync::OnceLock;

/// HIP's runtime (the unversioned name comes with development packages, the versioned ones with
/// runtime-only installs) and the NVIDIA driver library.
const HIP_RUNTIMES: &[&str] = &["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"];
const CUDA_DRIVER: &str = "libcuda.so.1";

pub fn gpu_runtime_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| hip_runtime_present() || can_load(CUDA_DRIVER))
}

/// Whether HIP's runtime loads: HIP device pointers are then possible, and the host engine has
/// no way to copy them.
pub fn hip_runtime_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| HIP_RUNTIMES.iter().any(|name| can_load(name)))
}

fn can_load(name: &str) -> bool {
    // SAFETY: loading a vendor GPU runtime runs its initialisers; these libraries are made to be
    // loaded into arbitrary host processes, and hipDNN itself loads them into the same process.
    unsafe { libloading::Library::new(name) }.is_ok()
}
