//! The hipDNN engine-plugin C ABI around the ragged SDPA engines: the cdylib
//! `libhipdnn_provider_ragged_sdpa.so`, loaded by hipDNN from `lib/hipdnn_plugins/engines/`.
//!
//! Layers, outermost first:
//! - [`exports`]: the 24 `extern "C"` entry points and nothing else; each is a panic boundary
//!   that checks pointers, calls one module, and writes its outputs only on success;
//! - [`abi`]: C types, the panic boundary, NULL-checking pointer helpers, per-thread last error;
//! - [`applicability`] → [`problem`]: graph bytes to a decision and an owned
//!   `ragged_core::RaggedSdpaProblem`; a single SDPA backward node becomes a
//!   [`backward_problem::BackwardProblem`], which only the host engine plans;
//! - [`engines`]: which engines this process lists, GPU engines first, and the `Planner` /
//!   `Planned` traits each engine implements in its own module: [`engines::cuda`]
//!   (`RAGGED_SDPA_CUDA_FMHA`), [`engines::aiter`] (`RAGGED_SDPA_AITER_FMHA`) and [`engines::host`]
//!   (`RAGGED_SDPA_HOST_REFERENCE`, copying device tensors through the host with
//!   [`engines::host::staging`] when a CUDA runtime is present);
//! - [`overrides`]: per-call shape overrides (RFC 0008) checked like a graph;
//!   [`serialized_context`]: the byte format of serialized contexts (RFC 0009);
//! - [`execution_context`] → [`variant_pack`]: per-call pointer binding (the one unsafe step of an
//!   execute), and [`scale`]: the
//!   attention scale of each call (a runtime pass-by-value scalar is read from its host pointer).
//!
//! Exported functions are `unsafe extern "C"`: their pointer arguments carry C's contracts, which
//! each one states under `# Safety`.
//!
//! Environment: `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` lists the host reference engine even when a
//! GPU runtime is loadable (see [`engines`]); `HIPDNN_RAGGED_SDPA_VALIDATE=1` makes the CUDA
//! engine check ragged offsets on the device and fail with INVALID_VALUE instead of leaving
//! invalid batches unwritten (one stream synchronization per execute, see [`engines::cuda`]);
//! `RAGGED_SDPA_AITER_SHIM` names the AITER shim library.

pub mod abi;
pub mod applicability;
pub mod backward_problem;
pub mod byte_extents;
pub mod engine_config;
pub mod engine_details;
pub mod engine_id;
pub mod engines;
pub mod error;
pub mod execution_context;
pub mod exports;
pub mod graph_plan;
pub mod handle;
pub mod lent;
pub mod logging;
pub mod overlap;
pub mod overrides;
pub mod plugin_dir;
pub mod problem;
pub mod registry;
pub mod scale;
pub mod serialized_context;
#[cfg(test)]
mod test_graphs;
pub mod variant_pack;
pub mod worker_pool;

pub use error::PluginError;
