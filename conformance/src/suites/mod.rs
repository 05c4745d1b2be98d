//! The three conformance suites.

pub mod gating;
