//! The conformance suites; each returns a [`crate::report::Report`].

pub mod abi;
pub mod backward;
pub mod gating;
pub mod numeric;
