//! Locating the shared objects this workspace builds next to the test executable.

use std::path::PathBuf;

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
