//! The CUDA runtime layer: finding CUDA at run time, compiling kernels with NVRTC, and launching
//! them on a caller's stream. The FMHA engine built on it is `ragged_engine_cuda::forward`.
//!
//! Layering, bottom up: [`runtime`] (probe, devices, NVRTC target), [`nvrtc_cache`] (compile and
//! cache images), [`context`] and [`module`] (stream contexts, loaded modules, typed launches).
//! Only [`runtime::probe`] may be called on a machine without CUDA; it answers with a reason
//! instead of failing, and everything else starts by calling it.
//!
//! The CUDA engine's use, in order:
//! 1. [`runtime::probe`] once: list `RAGGED_SDPA_CUDA_FMHA` only on `Ok`.
//! 2. `ragged_engine_cuda::forward::plan()` per graph: `Err(GpuError::Unsupported { .. })` means
//!    decline.
//! 3. `ragged_engine_cuda::forward::FmhaEngine::execute_call` per execute, with the call's stream
//!    and device pointers; workspace size from `FmhaPlan::workspace_bytes`.
//!
//! [`memory`] serves the host reference engine next to CUDA: which pointers are device memory,
//! and synchronous copies to and from the host on the caller's stream.

pub mod context;
pub mod error;
pub mod fingerprint;
pub mod memory;
pub mod module;
pub mod nvrtc_cache;
pub mod runtime;

pub use error::{GpuError, TensorRole};
