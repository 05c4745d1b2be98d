//! GPU runtime layers, one per vendor, loaded at run time so the plugin links against neither:
//! [`cuda`] (cudarc's driver and NVRTC bindings, the compile cache, stream contexts and modules)
//! and [`hip`] (the HIP runtime and hipRTC in cudarc's sys / result / safe shape). [`probe`]
//! decides once per process which of them is usable; [`launch`] describes a kernel launch for
//! both. Engines sit above these and never load libraries themselves.

pub mod cuda;
pub mod hip;
pub mod launch;
pub mod library;
pub mod library_dir;
pub mod probe;

/// Where an address points, as far as the CPU is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// The CPU may dereference it: memory the runtime does not know, or page-locked host memory.
    Host,
    /// Device (or managed) memory: reach it through copies.
    Device,
}
