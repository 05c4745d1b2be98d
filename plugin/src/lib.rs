//! The hipDNN engine-plugin C ABI around the ragged SDPA engines: the cdylib
//! `libhipdnn_provider_ragged_sdpa.so`, loaded by hipDNN from `lib/hipdnn_plugins/engines/`.
//!
//! Layers, outermost first:
//! - [`exports`]: the 24 `extern "C"` entry points and nothing else; each is a panic boundary
//!   that checks pointers, calls one module, and writes its outputs only on success;
//! - [`abi`]: C types, the panic boundary, NULL-checking pointer helpers, per-thread last error;
//! - [`applicability`]: graph bytes to a decision, through one pipeline for every graph kind
//!   (versions, schema validation, then [`problem`], [`backward_problem`] or [`graph_plan`]) into
//!   the one `ragged_core::engine::Problem` every engine plans from;
//! - [`engines`]: which engines this process lists, GPU engines first; each engine lives in its
//!   own crate (`ragged-engine-cuda`, `ragged-engine-aiter`, `ragged-engine-host`) and implements
//!   `ragged_core::engine::{Planner, Planned}`;
//! - [`overrides`]: per-call shape overrides (RFC 0008) checked like a graph;
//!   [`serialized_context`]: the byte format of serialized contexts (RFC 0009);
//! - [`execution_context`] → [`binder`]: each execute's pointers bound once against the problem
//!   (the one unsafe step of an execute) into a `ragged_core::binding::Call` of typed host slices
//!   or device addresses, staging device memory through host copies for the host engine.
//!
//! Exported functions are `unsafe extern "C"`: their pointer arguments carry C's contracts, which
//! each one states under `# Safety`.
//!
//! Environment: `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` lists the host reference engine even when a
//! GPU runtime is loadable (see [`engines`]); `HIPDNN_RAGGED_SDPA_VALIDATE=1` makes the CUDA
//! engine check ragged offsets on the device and fail with INVALID_VALUE instead of leaving
//! invalid batches unwritten (one stream synchronization per execute, see
//! `ragged_engine_cuda::adapter`); `RAGGED_SDPA_AITER_SHIM` names the AITER shim library.

pub mod abi;
pub mod applicability;
pub mod backward_problem;
pub mod binder;
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
pub mod problem;
pub mod registry;
pub mod serialized_context;
#[cfg(test)]
mod test_graphs;

pub use error::PluginError;
