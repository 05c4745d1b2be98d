//! The GPU layer's error type.
//!
//! The CUDA engine converts it into the core's error with what it means for the caller
//! (`ragged_engine_cuda::adapter::failure`). Plan errors name the graph uid of the offending tensor, because the plugin
//! reports them to hipDNN users who only know uids; device errors name the driver call, because
//! a CUDA error code alone does not say which step failed.

use std::fmt;

use cudarc::driver::DriverError;
use cudarc::nvrtc::result::NvrtcError;

/// The role a tensor plays in the ragged SDPA forward; used with its uid in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// Queries.
    Q,
    /// Keys.
    K,
    /// Values.
    V,
    /// Attention output.
    O,
    /// Log-sum-exp statistics output.
    Lse,
    /// `ragged_offset` aux of Q (and O, which must share it).
    QOffsets,
    /// `ragged_offset` aux of K (and V, which must share it).
    KvOffsets,
    /// `ragged_offset` aux of O.
    OOffsets,
    /// `ragged_offset` aux of V.
    VOffsets,
    /// `ragged_offset` aux of a ragged LSE.
    LseOffsets,
    /// Per-batch valid query lengths.
    SeqLenQ,
    /// Per-batch valid key lengths.
    SeqLenKv,
    /// The engine's scratch memory.
    Workspace,
    /// K's page table (paged K/V).
    PageTableK,
    /// V's page table (paged K/V).
    PageTableV,
    /// Per-head attention sink logits.
    Sinks,
    /// The gradient flowing into O (backward).
    DO,
    /// The gradient of Q (backward).
    DQ,
    /// The gradient of K (backward).
    DK,
    /// The gradient of V (backward).
    DV,
    /// One of an FP8 forward's scale or descale scalars, bound as a device tensor.
    Fp8Scalar,
    /// An FP8 forward's amax output.
    Amax,
}

impl fmt::Display for TensorRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorRole::Q => "Q",
            TensorRole::K => "K",
            TensorRole::V => "V",
            TensorRole::O => "O",
            TensorRole::Lse => "LSE",
            TensorRole::QOffsets => "Q ragged_offset",
            TensorRole::KvOffsets => "K ragged_offset",
            TensorRole::OOffsets => "O ragged_offset",
            TensorRole::VOffsets => "V ragged_offset",
            TensorRole::LseOffsets => "LSE ragged_offset",
            TensorRole::SeqLenQ => "seq_len_q",
            TensorRole::SeqLenKv => "seq_len_kv",
            TensorRole::Workspace => "workspace",
            TensorRole::PageTableK => "page_table_k",
            TensorRole::PageTableV => "page_table_v",
            TensorRole::Sinks => "sinks",
            TensorRole::DO => "dO",
            TensorRole::DQ => "dQ",
            TensorRole::DK => "dK",
            TensorRole::DV => "dV",
            TensorRole::Fp8Scalar => "FP8 scale",
            TensorRole::Amax => "amax",
        })
    }
}

/// Everything that can go wrong in the GPU layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// No usable CUDA device or library in this process; the engine is not listed.
    #[error("CUDA is unavailable: {reason}")]
    Unavailable {
        /// Why, in words a user can act on (missing library, no device, old driver, ...).
        reason: String,
    },

    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed: {}", driver_error_text(.source))]
    Driver {
        /// The driver entry point, e.g. `cuLaunchKernel`.
        call: &'static str,
        /// The driver's status.
        source: DriverError,
    },

    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC call {call} failed: {source:?}")]
    Nvrtc {
        /// The NVRTC entry point.
        call: &'static str,
        /// NVRTC's status.
        source: NvrtcError,
    },

    /// NVRTC rejected a kernel source; the log is the compiler's full output.
    #[error(
        "NVRTC failed to compile {source_name} for {target} ({status:?}) with options [{}]:\n{log}",
        .options.join(" ")
    )]
    Compile {
        /// Name of the `.cu` file.
        source_name: String,
        /// The `--gpu-architecture` target.
        target: String,
        /// Every option passed to NVRTC, in order.
        options: Vec<String>,
        /// NVRTC's status code.
        status: NvrtcError,
        /// The compiler log.
        log: String,
    },

    /// A kernel source or option holds a NUL byte and cannot be passed to NVRTC.
    #[error("{what} of {source_name} contains a NUL byte at position {position}")]
    InteriorNul {
        /// "source" or "option".
        what: &'static str,
        /// Name of the `.cu` file.
        source_name: String,
        /// Byte position of the NUL.
        position: usize,
    },

    /// A compiled module lacks an expected kernel.
    #[error("kernel {kernel} is not in the module compiled from {source_name}")]
    MissingKernel {
        /// The `extern "C"` name.
        kernel: String,
        /// Name of the `.cu` file.
        source_name: String,
    },

    /// A whole-allocation copy into a host buffer of another size.
    #[error("download of {device} device bytes into a {host}-byte host buffer")]
    HostBufferSize {
        /// Bytes of the allocation.
        device: usize,
        /// Bytes of the host buffer.
        host: usize,
    },

    /// The compiled kernel file breaks an assumption of the launcher (its published tile table).
    #[error("kernel {kernel} violates the launcher's contract: {detail}")]
    KernelContract {
        /// The entry point.
        kernel: String,
        /// What is wrong.
        detail: String,
    },

    /// A graph property the CUDA FMHA kernels do not support; the engine declines the graph.
    #[error("tensor uid {uid} ({role}): {field} = {value}: {requirement}")]
    Unsupported {
        /// Graph uid of the offending tensor.
        uid: i64,
        /// Its role in the operation.
        role: TensorRole,
        /// The field that is wrong (`dtype`, `dims[3]`, `strides`, `alignment`, ...).
        field: &'static str,
        /// The offending value, formatted.
        value: String,
        /// What the engine needs instead.
        requirement: String,
    },

    /// A quantity derived from the graph dims does not fit the kernel's integer types.
    #[error("{what} = {value} exceeds the kernel limit {limit}")]
    TooLarge {
        /// The derived quantity (`grid size`, `workspace bytes`, ...).
        what: &'static str,
        /// Its value (saturated at `u128::MAX` when it overflowed).
        value: u128,
        /// The largest value the kernel accepts.
        limit: u128,
    },

    /// The kernel needs more shared memory per block than the device allows.
    #[error(
        "kernel {kernel} needs {required} bytes of shared memory per block; device {device} allows {available}"
    )]
    SharedMemory {
        /// The kernel entry point.
        kernel: String,
        /// Bytes the kernel needs.
        required: u32,
        /// Bytes the device allows with opt-in.
        available: u32,
        /// Device ordinal.
        device: i32,
    },

    /// A device pointer from the variant pack is unusable.
    #[error("tensor uid {uid} ({role}): device pointer {address:#x} {problem}")]
    BadPointer {
        /// Graph uid of the tensor (or -1 for the workspace).
        uid: i64,
        /// Its role.
        role: TensorRole,
        /// The pointer value.
        address: u64,
        /// "is null", "is not 16-byte aligned", ...
        problem: &'static str,
    },

    /// The workspace is smaller than the plan requires.
    #[error("workspace of {provided} bytes is smaller than the {required} bytes the plan requires")]
    WorkspaceTooSmall {
        /// Bytes the plan requires.
        required: u64,
        /// Bytes provided.
        provided: u64,
    },

    /// The device pre-pass found invalid ragged offsets or sequence lengths (validating mode).
    #[error("device validation of ragged offsets failed (flag {flag:#010x}): {}", .problems.join("; "))]
    InvalidOffsets {
        /// The raw error flag the pre-pass wrote.
        flag: u32,
        /// One sentence per violated rule, each naming the tensor uid.
        problems: Vec<String>,
    },

    /// Validating mode on a stream that is being captured into a CUDA graph: reading the
    /// offsets' check back needs a stream synchronisation, which capture forbids (and which
    /// would invalidate the caller's capture), so nothing was enqueued.
    #[error(
        "validating mode (the plugin's HIPDNN_RAGGED_SDPA_VALIDATE=1) reads the device's offsets \
         check back with a stream synchronisation, which a stream under CUDA graph capture \
         (capture status: {status}) does not allow; nothing was enqueued and the capture was left \
         as it was: capture this execute without validating mode (offsets are then checked on the \
         device, and invalid batches are skipped)"
    )]
    ValidatingUnderCapture {
        /// The stream's capture status, as the driver names it.
        status: &'static str,
    },
}

fn driver_error_text(error: &DriverError) -> String {
    // The name lookup itself is a driver call; fall back to the numeric code if it fails.
    match error.error_name() {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(_) => format!("CUresult {}", error.0 as u32),
    }
}

/// Attaches the driver entry point to a `DriverError`.
pub trait DriverCall<T> {
    /// Names the failed call.
    fn call(self, call: &'static str) -> Result<T, GpuError>;
}

impl<T> DriverCall<T> for Result<T, DriverError> {
    fn call(self, call: &'static str) -> Result<T, GpuError> {
        self.map_err(|source| GpuError::Driver { call, source })
    }
}
