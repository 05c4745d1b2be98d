//! Compiles `kernels/src/gpu` outside the workspace so that its unit tests and the device check
//! can run before the module is wired into `ragged-kernels`.

#[path = "../../../kernels/src/gpu/mod.rs"]
pub mod gpu;
