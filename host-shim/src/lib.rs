//! hipDNN's backend, emulated: the library half of `hipdnn-shim`.
//!
//! It loads plugin shared objects exactly as hipDNN's backend does, so the `hipdnn-shim` CLI and
//! the `ragged-conformance` suites (which depend on this crate, never the other way round) drive
//! plugins through one host, and a suite failure is what hipDNN itself would hit.
//!
//! | layer | modules |
//! |---|---|
//! | C ABI as the host sees it | [`abi`], [`plugin`] (dlopen, typed symbols, `Failed to …` errors), [`elf_symbols`] |
//! | hipDNN's backend | [`discovery`] (search path), [`manager`] (load sequence, engine admission), [`dispatch`] (version/override gates, offer), [`api_version`], [`engine_id`], [`log`] |
//! | RFC §4.11 harness | [`harness`] (pre-supplied bundle, allocation, init, reference and engine runs, validation) (GPU engines' buffers through `ragged_gpu_runtime::cuda`), [`graphs`] (ragged SDPA graphs from token counts, versioning.md's G0–G7), [`multi_node_graphs`] (SDPA → pointwise chains on virtual intermediates) |
//!
//! The CLI's own modules (commands, companion files, `.npy`) live in the binary (`main.rs`).
//!
//! **Architecture invariant:** numerics come from `ragged_reference::sdpa_forward` (multi-node graphs: `ragged_reference::executor`), version rules
//! from `ragged_schema::version`, wire bytes from `ragged_schema::wire`; this crate re-implements
//! none of them. The one deliberate copy is FNV-1a ([`engine_id`]): the host must verify the
//! plugin's hashes independently.

pub mod abi;
pub mod api_version;
pub mod backward;
pub mod case_inputs;
pub mod discovery;
pub mod dispatch;
pub mod elf_symbols;
pub mod engine_id;
pub mod execute;
pub mod graphs;
pub mod harness;
pub mod host_error;
pub mod log;
pub mod manager;
pub mod multi_node_graphs;
pub mod oracle_backward;
pub mod plugin;
pub mod serving_graphs;

pub use host_error::HostError;
