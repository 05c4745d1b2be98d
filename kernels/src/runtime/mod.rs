//! GPU runtime layers, one per vendor, loaded at run time so the plugin links against neither:
//! [`cuda`] (cudarc's driver and NVRTC bindings, the compile cache, stream contexts and modules)
//! and [`hip`] (the HIP runtime and hipRTC). Engines sit above these and never load libraries.

pub mod cuda;
pub mod hip;
