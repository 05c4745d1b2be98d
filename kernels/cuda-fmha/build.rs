//! Splices the CUDA kernels' parts into one source each for NVRTC.
//!
//! `kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu` (forward) and `kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu` (backward)
//! list their parts as `#include "fmha/…"` / `#include "fmha_bwd/…"` lines, so nvcc and NVRTC
//! with an include path read them as they are; the plugin, which ships no files, hands NVRTC one
//! string per file, written here to `$OUT_DIR/<file>` with each such line replaced by the part.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    for file in [
        "ragged_fmha_fwd.cu",
        "ragged_fmha_bwd.cu",
        "ragged_paged_decode.cu",
    ] {
        splice(file);
    }
}

fn splice(file: &str) {
    let cuda = Path::new("cuda");
    let top = cuda.join(file);
    println!("cargo:rerun-if-changed={}", top.display());
    let text =
        fs::read_to_string(&top).unwrap_or_else(|e| panic!("reading {}: {e}", top.display()));
    let mut spliced = String::with_capacity(64 * 1024);
    for line in text.lines() {
        match line
            .strip_prefix("#include \"")
            .and_then(|rest| rest.strip_suffix('"'))
        {
            Some(part) => {
                let path = cuda.join(part);
                println!("cargo:rerun-if-changed={}", path.display());
                let body = fs::read_to_string(&path).unwrap_or_else(|e| {
                    panic!(
                        "reading {} (included by {}): {e}",
                        path.display(),
                        top.display()
                    )
                });
                spliced.push_str(&body);
            }
            None => spliced.push_str(line),
        }
        spliced.push('\n');
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join(file);
    fs::write(&out, spliced).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
