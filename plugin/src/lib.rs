//! The hipDNN engine-plugin C ABI around the ragged SDPA engines: the cdylib
//! `libhipdnn_provider_ragged_sdpa.so`, loaded by hipDNN from `lib/hipdnn_plugins/engines/`.
//!
//! Layers, outermost first:
//! - [`exports`]: the 20 `extern "C"` entry points and nothing else; each is a panic boundary
//!   that checks pointers, calls one module, and writes its outputs only on success;
//! - [`abi`]: C types, the panic boundary, NULL-checking pointer helpers, per-thread last error;
//! - [`applicability`] → [`plan`]: graph bytes to a decision and an owned SDPA plan;
//! - [`execution_context`] → [`variant_pack`] → [`host_engine`]: per-call pointer binding and
//!   the CPU reference run.
//!
//! Exported functions are `unsafe extern "C"`: their pointer arguments carry C's contracts, which
//! each one states under `# Safety`.
//!
//! Environment: `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` lists the host reference engine even when a
//! GPU runtime is loadable (see [`engines`]).

pub mod abi;
pub mod applicability;
pub mod engine_config;
pub mod engine_details;
pub mod engine_id;
pub mod engines;
pub mod error;
pub mod execution_context;
pub mod exports;
pub mod handle;
pub mod host_engine;
pub mod logging;
pub mod plan;
pub mod registry;
pub mod runtime_probe;
pub mod variant_pack;

pub use error::PluginError;
