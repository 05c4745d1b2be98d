//! Where hipDNN looks for engine plugins (plugin-abi.md §8.1): `HIPDNN_PLUGIN_DIR` *replaces* the
//! default `hipdnn_plugins/engines/`; a relative path is resolved against the backend library's
//! directory (for the shim: its executable's directory); a directory is scanned non-recursively for
//! regular `*.so` files; anything else is loaded as a file. The result is ordered and duplicate-free
//! like the backend's `std::set<path>`, because load order decides who keeps a contested engine id.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use crate::log::Log;

/// The default engine-plugin path, relative to the backend library's directory.
pub const DEFAULT_ENGINE_PLUGIN_DIR: &str = "hipdnn_plugins/engines/";

/// The environment variable that replaces the default.
pub const PLUGIN_DIR_ENV: &str = "HIPDNN_PLUGIN_DIR";

/// The single search path in effect: `env_value` when set and non-empty, else the default;
/// made absolute against `module_dir` and weakly canonical.
pub fn engine_plugin_search_path(env_value: Option<&OsStr>, module_dir: &Path) -> PathBuf {
    let chosen = match env_value {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_ENGINE_PLUGIN_DIR),
    };
    let absolute = if chosen.is_absolute() {
        chosen
    } else {
        module_dir.join(chosen)
    };
    weakly_canonical(&absolute)
}

/// `std::filesystem::weakly_canonical`: canonicalise the longest existing prefix, then append the
/// rest lexically normalised.
pub fn weakly_canonical(path: &Path) -> PathBuf {
    if let Ok(canonical) = path.canonicalize() {
        return canonical;
    }
    let mut existing = path.to_path_buf();
    let mut tail = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                tail.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut result = existing.canonicalize().unwrap_or(existing);
    for part in tail.iter().rev() {
        result.push(part);
    }
    normalize_lexically(&result)
}

fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The plugin files found under `search_path`, in load order.
pub fn discover_plugin_files(search_path: &Path, log: &mut Log) -> Vec<PathBuf> {
    let mut files = BTreeSet::new();
    if search_path.is_dir() {
        match std::fs::read_dir(search_path) {
            Ok(entries) => {
                for entry in entries {
                    match entry {
                        Ok(entry) => {
                            let path = entry.path();
                            if path.is_file() && path.extension() == Some(OsStr::new("so")) {
                                files.insert(path);
                            }
                        }
                        Err(e) => log.warn(format!(
                            "Error reading plugin directory '{}': {e}",
                            search_path.display()
                        )),
                    }
                }
            }
            Err(e) => log.warn(format!(
                "Error reading plugin directory '{}': {e}",
                search_path.display()
            )),
        }
    } else if search_path.file_name().is_none_or(|n| n.is_empty()) {
        log.warn(format!(
            "Plugin path '{}' is invalid: it names neither a directory nor a file",
            search_path.display()
        ));
    } else {
        files.insert(search_path.to_path_buf());
    }
    files.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hipdnn-shim-discovery-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        dir
    }

    #[test]
    fn env_replaces_default_and_relative_paths_use_the_module_directory() {
        let module = Path::new("/opt/rocm/lib");
        assert_eq!(
            engine_plugin_search_path(None, module),
            PathBuf::from("/opt/rocm/lib/hipdnn_plugins/engines")
        );
        assert_eq!(
            engine_plugin_search_path(Some(OsStr::new("")), module),
            PathBuf::from("/opt/rocm/lib/hipdnn_plugins/engines")
        );
        assert_eq!(
            engine_plugin_search_path(Some(OsStr::new("../mine/./x.so")), module),
            PathBuf::from("/opt/rocm/mine/x.so")
        );
        assert_eq!(
            engine_plugin_search_path(Some(OsStr::new("/abs/dir")), module),
            PathBuf::from("/abs/dir")
        );
    }

    #[test]
    fn directory_scan_is_non_recursive_sorted_and_so_only() {
        let dir = scratch("scan");
        for name in ["b.so", "a.so", "c.so.1", "d.txt", "e.so.api-version"] {
            std::fs::write(dir.join(name), b"").unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        std::fs::create_dir_all(dir.join("nested")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("nested/z.so"), b"").unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(dir.join("dir.so")).unwrap_or_else(|e| panic!("{e}"));
        let mut log = Log::default();
        let found = discover_plugin_files(&dir, &mut log);
        let names: Vec<_> = found
            .iter()
            .filter_map(|p| p.file_name()?.to_str())
            .collect();
        assert_eq!(names, ["a.so", "b.so"]);
        assert!(log.records().is_empty());
    }

    #[test]
    fn a_file_path_is_loaded_directly_whatever_its_extension() {
        let dir = scratch("file");
        let file = dir.join("plugin.so.7");
        std::fs::write(&file, b"").unwrap_or_else(|e| panic!("{e}"));
        let mut log = Log::default();
        assert_eq!(discover_plugin_files(&file, &mut log), vec![file]);
    }
}
