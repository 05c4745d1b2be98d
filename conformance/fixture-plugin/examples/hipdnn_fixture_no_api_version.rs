//! Fixture variant without `hipdnnPluginGetApiVersion`: hipDNN must treat it as API 1.0.0
//! (versioning.md §2, "Symbol absent").

#![allow(non_snake_case)] // exported symbol names are fixed by the hipDNN C ABI

#[path = "../src/exports.rs"]
pub mod exports;
