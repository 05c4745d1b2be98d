//! Conformance suites for hipDNN engine plugins.
//!
//! The host they run on is `hipdnn-shim`'s library: plugin loading, hipDNN's load sequence and
//! dispatch, the RFC §4.11 harness and the case graphs all come from [`hipdnn_shim`], so a suite
//! exercises the same backend emulation a user of the shim sees. This crate adds only what
//! certifies a plugin:
//!
//! | module | job |
//! |---|---|
//! | [`suites`] | ABI behaviour, API-version gating, numeric agreement with the CPU reference |
//! | [`report`] | text and JUnit XML output |

pub mod report;
pub mod suites;
