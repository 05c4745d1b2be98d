//! Test-only hipDNN engine plugin whose reported API version is configurable per loaded file.
//!
//! Why it exists: the version-gating suite needs plugins that declare every API version of
//! versioning.md §7, and the loader under test must see them exactly as hipDNN would — as real
//! shared objects loaded with `dlopen`.
//!
//! How the version is configured: each copy of the library reads the first line of the sidecar file
//! `<its own path>.api-version` (located through `dladdr`, so copies loaded side by side from
//! different paths each report their own string). Without a sidecar it reports `"1.4.0"`. A second
//! sidecar, `<path>.engine-name`, changes the name `GetEngineName` reports without changing the
//! engine id, to exercise the host's name/hash rule.
//! The two rows of the table that differ in *exported symbols* cannot be configured at run time, so
//! they are separate cdylibs built from the same code as examples of this crate:
//!
//! | artefact | `hipdnnPluginGetApiVersion` | `...ExecuteOpGraphWithOverrides` |
//! |---|---|---|
//! | `libhipdnn_fixture_plugin.so` | yes (sidecar) | no |
//! | `examples/libhipdnn_fixture_no_api_version.so` | no | no |
//! | `examples/libhipdnn_fixture_with_overrides.so` | yes (sidecar) | yes |
//!
//! The fixture declines every graph (`SUCCESS`, 0 engines): the gating suite observes only whether
//! the host calls `GetApplicableEngineIds` at all.

#![allow(non_snake_case)] // exported symbol names are fixed by the hipDNN C ABI

pub mod exports;

use std::ffi::c_char;

/// # Safety
/// `version` must be NULL or valid for one pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipdnnPluginGetApiVersion(version: *mut *const c_char) -> i32 {
    // SAFETY: forwarded caller contract.
    unsafe { exports::get_api_version(version) }
}
