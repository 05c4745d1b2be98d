//! The conformance suites; each returns a [`crate::report::Report`].

pub mod abi;
pub mod backward;
pub mod backward_cases;
pub mod engine_cases;
pub mod fp8;
pub mod gating;
pub mod multi_node;
pub mod numeric;
pub mod serving;
