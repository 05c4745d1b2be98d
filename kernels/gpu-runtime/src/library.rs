//! Opening a vendor library by one of several names, and reading symbols out of it.
//!
//! Both GPU runtimes and the AITER shim are found the same way: a list of candidate files or
//! sonames, the first that `dlopen` accepts wins, and a failure names every candidate tried.

use std::path::PathBuf;

use libloading::Library;

/// No candidate could be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFound {
    /// Every path or soname tried, comma-separated, in order.
    pub tried: String,
    /// The loader's message for the last candidate.
    pub last_error: String,
}

/// Opens the first candidate that loads.
pub fn open_first(candidates: &[PathBuf]) -> Result<(Library, PathBuf), NotFound> {
    open_first_with(candidates, false)
}

/// `RTLD_NODELETE` (glibc and musl on Linux; libloading does not export it).
const RTLD_NODELETE: std::ffi::c_int = 0x1000;

/// As [`open_first`], but the library stays mapped for the process after the last `dlclose`.
///
/// For the HIP runtime: its initialiser allocates 408 B (libamdhip64 5.2 of
/// `apt-get install libamdhip64-5`, measured with valgrind) that its destructor never frees, so
/// every open after a full unload would add that much to the process, and ROCm's runtime is
/// not made to be unloaded. Kept mapped, a later open finds it initialised, while what the
/// plugin allocated around it is still freed with its last handle.
pub fn open_first_resident(candidates: &[PathBuf]) -> Result<(Library, PathBuf), NotFound> {
    open_first_with(candidates, true)
}

fn open_first_with(candidates: &[PathBuf], resident: bool) -> Result<(Library, PathBuf), NotFound> {
    use libloading::os::unix::{Library as UnixLibrary, RTLD_LAZY, RTLD_LOCAL};
    // RTLD_LAZY | RTLD_LOCAL is what `Library::new` uses.
    let flags = RTLD_LAZY | RTLD_LOCAL | if resident { RTLD_NODELETE } else { 0 };
    let mut last_error = String::from("no candidates");
    for path in candidates {
        // SAFETY: opening a shared library runs its initialisers. The candidates are vendor GPU
        // runtimes (made to be loaded into any host process, as hipDNN itself does) or the
        // project's own shim, whose initialisers have no preconditions on us.
        match unsafe { UnixLibrary::open(Some(path), flags) }.map(Library::from) {
            Ok(lib) => return Ok((lib, path.clone())),
            Err(e) => last_error = e.to_string(),
        }
    }
    Err(NotFound {
        tried: candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        last_error,
    })
}

/// Resolves `symbol` to a plain function pointer. The library must outlive every use of the
/// pointer: callers keep it in the same struct.
///
/// # Safety
/// `T` must be the exact C signature of `symbol`.
pub unsafe fn symbol<T: Copy>(lib: &Library, symbol: &str) -> Result<T, libloading::Error> {
    let name = format!("{symbol}\0");
    // SAFETY: the caller guarantees that `T` is the symbol's signature; the pointer is copied
    // out and the library is kept alive next to it by the caller.
    unsafe { lib.get::<T>(name.as_bytes()) }.map(|sym| *sym)
}

/// Candidates for one library: each soname through the loader's search path, then under
/// `$ROCM_PATH/lib` and `/opt/rocm/lib` (ROCm does not always register itself with ld.so).
pub fn rocm_candidates(names: &[&str]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(rocm) = std::env::var_os("ROCM_PATH") {
        dirs.push(PathBuf::from(rocm).join("lib"));
    }
    dirs.push(PathBuf::from("/opt/rocm/lib"));
    let mut out: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
    for dir in &dirs {
        out.extend(names.iter().map(|n| dir.join(n)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_every_candidate() {
        let tried = [
            PathBuf::from("/nonexistent/libamdhip64.so.7"),
            PathBuf::from("libamdhip64-not-here.so"),
        ];
        let err = open_first(&tried).expect_err("nothing to open");
        assert_eq!(
            err.tried,
            "/nonexistent/libamdhip64.so.7, libamdhip64-not-here.so"
        );
        assert!(!err.last_error.is_empty());
    }

    #[test]
    fn candidates_try_sonames_then_rocm_dirs() {
        let c = rocm_candidates(&["libx.so.7", "libx.so"]);
        assert_eq!(c[0], PathBuf::from("libx.so.7"));
        assert_eq!(c[1], PathBuf::from("libx.so"));
        assert!(c.contains(&PathBuf::from("/opt/rocm/lib/libx.so.7")));
    }
}
