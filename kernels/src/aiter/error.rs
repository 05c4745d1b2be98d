//! The one error type of the AITER engine. Declines are not errors (see
//! [`Decline`](crate::contract::Decline)); these are failures of loading or of an execution that was
//! already accepted.

use std::path::PathBuf;

/// What went wrong while loading ROCm or the shim, or while executing on the device.
#[derive(Debug, thiserror::Error)]
pub enum AiterError {
    /// None of the candidate file names of a library could be opened.
    #[error("{library} not found (tried {tried}): {last_error}")]
    LibraryNotFound {
        /// Human name of the library, e.g. "HIP runtime (libamdhip64)".
        library: &'static str,
        /// Every path or soname tried, comma-separated, in order.
        tried: String,
        /// The loader's message for the last candidate.
        last_error: String,
    },
    /// The library opened but lacks a symbol the engine needs.
    #[error("{library} at {path} lacks symbol `{symbol}`: {source}")]
    MissingSymbol {
        /// Human name of the library.
        library: &'static str,
        /// The file that was opened.
        path: PathBuf,
        /// The symbol that was looked up.
        symbol: &'static str,
        /// The loader's error.
        source: libloading::Error,
    },
    /// A HIP runtime call returned an error code.
    #[error("{call} failed with hipError_t {code} ({message})")]
    Hip {
        /// The HIP function, e.g. "hipModuleLaunchKernel(ragged_aiter_prepass)".
        call: String,
        /// The raw `hipError_t`.
        code: i32,
        /// `hipGetErrorString(code)`, or a placeholder when unavailable.
        message: String,
    },
    /// hipRTC rejected a device-kernel source; the log is kept whole.
    #[error(
        "hipRTC could not compile {kernel} with options {options:?} (hiprtcResult {code}):\n{log}"
    )]
    Compile {
        /// The source file name given to hipRTC.
        kernel: &'static str,
        /// The exact options passed.
        options: Vec<String>,
        /// The raw `hiprtcResult`.
        code: i32,
        /// The compiler log.
        log: String,
    },
    /// The HIP runtime is older than the `hipDeviceProp_tR0600` layout the arch query relies on.
    #[error("HIP runtime version {found} is older than 6.0 (60000000); gcnArchName cannot be read")]
    HipTooOld {
        /// `hipRuntimeGetVersion` result.
        found: i32,
    },
    /// `gcnArchName` did not hold a NUL-terminated `gfx…` name.
    #[error(
        "device {device}: gcnArchName is not a NUL-terminated gfx name (first bytes {first_bytes:?})"
    )]
    BadArchName {
        /// HIP device ordinal.
        device: i32,
        /// The first bytes read, for the report.
        first_bytes: Vec<u8>,
    },
    /// The shim was built from another revision of `ragged_aiter_shim.h`.
    #[error("AITER shim at {path} reports ABI version {found}, this plugin needs {expected}")]
    ShimAbiMismatch {
        /// The shim file.
        path: PathBuf,
        /// `ragged_aiter_shim_abi_version()`.
        found: u32,
        /// `RAGGED_AITER_SHIM_ABI_VERSION` of this build.
        expected: u32,
    },
    /// `ragged_aiter_mha_fwd` returned a non-OK status.
    #[error("AITER shim returned status {status} ({meaning}): {message}")]
    Shim {
        /// Raw status.
        status: i32,
        /// Name of the status constant.
        meaning: &'static str,
        /// `ragged_aiter_shim_last_error()`.
        message: String,
    },
    /// The caller's workspace is smaller than [`WorkspacePlan::size`](super::WorkspacePlan).
    #[error("workspace of {given} bytes is smaller than the {needed} bytes this plan needs")]
    WorkspaceTooSmall {
        /// Bytes the caller passed.
        given: usize,
        /// Bytes the plan needs.
        needed: usize,
    },
    /// A device pointer that the problem needs was null.
    #[error("device pointer for {what} (tensor uid {uid}) is null")]
    NullPointer {
        /// Which buffer.
        what: &'static str,
        /// The tensor uid the plugin bound it to.
        uid: i64,
    },
}
