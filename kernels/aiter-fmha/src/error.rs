//! The one error type of the AITER engine. Declines are not errors (see
//! [`Decline`](ragged_core::contract::Decline)); these are failures of loading or of an execution that was
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
    /// A HIP runtime or hipRTC call failed (see [`ragged_gpu_runtime::hip`]).
    #[error(transparent)]
    Hip(#[from] ragged_gpu_runtime::hip::HipError),
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
    /// A paged or sink plan handed to the plain forward's execute, which would read the page
    /// pools as K and V.
    #[error("a paged or sink plan runs only through AiterEngine::execute_serving")]
    ServingPlanOnPlainExecute,
}
