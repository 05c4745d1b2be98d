//! Locating the shared objects this workspace builds next to the test executable.

#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;

use ragged_conformance::suites::gating::newest_existing;

/// The project plugin's shared object.
pub const PLUGIN_FILE: &str = "libhipdnn_provider_ragged_sdpa.so";

/// `<target>/<profile>`: the test executable lives in `<target>/<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("test executable {} has no grandparent", exe.display()))
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ragged-conformance-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// The shared object `file` of this build, in the profile directory or its deps/; a missing one
/// fails naming the command that builds it.
pub fn shared_object(file: &str, build: &str) -> PathBuf {
    let dir = profile_dir();
    newest_existing(&[dir.join("deps").join(file), dir.join(file)]).unwrap_or_else(|| {
        panic!(
            "{file} not found in {} or its deps/; build it with `{build}` (cargo test --workspace builds it)",
            dir.display()
        )
    })
}

/// How many cases of the binary's output `out` passed on the project plugin's host engine.
pub fn host_reference_passes(out: &str) -> usize {
    out.lines()
        .filter(|l| l.starts_with("PASS hipdnn_provider_ragged_sdpa::RAGGED_SDPA_HOST_REFERENCE::"))
        .count()
}
