//! Plumbing shared by every export: C types, the panic boundary, pointer checks, last error.

pub mod boundary;
pub mod last_error;
pub mod pointers;
pub mod types;
