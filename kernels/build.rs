//! Splices the CUDA forward kernel's parts into one source for NVRTC.
//!
//! `kernels/cuda/ragged_fmha_fwd.cu` lists its parts as `#include "fmha/…"` lines, so nvcc and
//! NVRTC with an include path read it as it is; the plugin, which ships no files, hands NVRTC one
//! string, written here to `$OUT_DIR/ragged_fmha_fwd.cu` with each such line replaced by the part.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let cuda = Path::new("cuda");
    let top = cuda.join("ragged_fmha_fwd.cu");
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
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("ragged_fmha_fwd.cu");
    fs::write(&out, spliced).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
