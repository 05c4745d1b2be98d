//! The three conformance suites; each returns a [`crate::report::Report`].

pub mod abi;
pub mod gating;
pub mod numeric;
