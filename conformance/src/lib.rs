//! Conformance harness and suites for hipDNN engine plugins.
//!
//! The crate is a *host*: it loads plugin shared objects exactly as hipDNN's backend does
//! ([`discovery`], [`manager`], [`dispatch`]), so the same code serves the `hipdnn-shim` CLI and the
//! conformance suites.

pub mod abi;
pub mod api_version;
pub mod device;
pub mod discovery;
pub mod dispatch;
pub mod elf_symbols;
pub mod engine_id;
pub mod error;
pub mod graphs;
pub mod harness;
pub mod log;
pub mod manager;
pub mod plugin;
pub mod report;
pub mod suites;

pub use error::ConformanceError;
