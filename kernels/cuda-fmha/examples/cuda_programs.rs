//! Writes the CUDA programs exactly as the plugin hands them to NVRTC: the forward, backward and
//! paged sources with their parts spliced in (`kernels/cuda-fmha/build.rs`) and the NVRTC option list the plugin
//! uses for each given architecture. Tools outside the crate (`kernels/cuda-fmha/cuda/ci/compile_check.py`,
//! CI's `.ci/cuda-compile.sh`) then compile what the plugin compiles instead of a second
//! description of it.
//!
//! ```text
//! cargo run -q -p ragged-engine-cuda --example cuda_programs -- OUT_DIR sm_90a sm_80
//! ```
//!
//! writes `OUT_DIR/ragged_fmha_fwd.cu`, `OUT_DIR/ragged_fmha_bwd.cu`,
//! `OUT_DIR/ragged_paged_decode.cu` and, per architecture,
//! `OUT_DIR/nvrtc-options-<arch>.txt` (one option per line, as `NvrtcCache::options` builds them
//! for a CUBIN of that architecture).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ragged_engine_cuda::backward::launcher::BWD_SOURCE;
use ragged_engine_cuda::forward::launcher::FMHA_SOURCE;
use ragged_engine_cuda::paged::PAGED_SOURCE;
use ragged_gpu_runtime::cuda::nvrtc_cache::NvrtcCache;
use ragged_gpu_runtime::cuda::runtime::CompileTarget;

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn run(out: &Path, arches: &[String]) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    for source in [FMHA_SOURCE, BWD_SOURCE, PAGED_SOURCE] {
        write(&out.join(source.name), source.text)?;
    }
    for arch in arches {
        let valid = arch
            .strip_prefix("sm_")
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric()));
        if !valid {
            return Err(format!(
                "architecture {arch:?}: expected sm_XY (e.g. sm_90a, sm_80)"
            ));
        }
        let target = CompileTarget::Cubin { arch: arch.clone() };
        let mut lines = NvrtcCache::options(&target, &[]).join("\n");
        lines.push('\n');
        write(&out.join(format!("nvrtc-options-{arch}.txt")), &lines)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((out, arches)) = args.split_first() else {
        eprintln!("usage: cuda_programs OUT_DIR ARCH... (e.g. OUT_DIR sm_90a sm_80)");
        return ExitCode::from(2);
    };
    if arches.is_empty() {
        eprintln!("cuda_programs: no architecture given (e.g. sm_90a sm_80)");
        return ExitCode::from(2);
    }
    match run(&PathBuf::from(out), arches) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("cuda_programs: {msg}");
            ExitCode::FAILURE
        }
    }
}
