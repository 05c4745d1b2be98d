//! The plugin's one error type, and the one place where errors become C status codes.

use crate::abi::types::Status;

/// Everything that can make an entry point fail. Each message names the offending argument,
/// tensor uid, field or value, because it ends up verbatim in hipDNN's `Failed to …` text.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("argument `{argument}` is NULL")]
    NullArgument { argument: &'static str },

    #[error("argument `{argument}` holds an empty buffer (ptr {ptr:#x}, size {size})")]
    EmptyBuffer {
        argument: &'static str,
        ptr: usize,
        size: usize,
    },

    #[error("`engine_ids` is NULL but `max_engines` is {max_engines}")]
    NullIdBuffer { max_engines: u32 },

    #[error("{kind} {address:#x} is not live (never created by this plugin, or already destroyed)")]
    UnknownObject { kind: &'static str, address: usize },

    #[error("engine id {engine_id} is not an engine of this plugin on this machine")]
    UnknownEngine { engine_id: i64 },

    #[error("engine id {engine_id} is not listed by this plugin; it supplies no name for it")]
    NoEngineName { engine_id: i64 },

    #[error(
        "{what} buffer {address:#x} of {size} bytes was not lent through this handle, or was already returned"
    )]
    UnknownLentBuffer {
        what: &'static str,
        address: usize,
        size: usize,
    },

    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },

    #[error("engine {engine} does not apply to this graph: {reason}")]
    NotApplicable {
        engine: &'static str,
        reason: String,
    },

    #[error("tensor uid {uid} ({role}) has no entry in device_buffers")]
    MissingBuffer { uid: i64, role: &'static str },

    #[error("tensor uid {uid} ({role}) is bound to a NULL pointer in device_buffers")]
    NullBuffer { uid: i64, role: &'static str },

    #[error("invalid value: {0}")]
    InvalidValue(String),

    #[error("{0}")]
    Kernel(#[from] ragged_core::KernelError),

    #[error("RAGGED_SDPA_CUDA_FMHA: {0}")]
    Cuda(#[from] ragged_gpu_runtime::cuda::GpuError),

    #[error("RAGGED_SDPA_AITER_FMHA: {0}")]
    Aiter(#[from] ragged_engine_aiter::AiterError),

    /// A HIP call of the host engine's copy path (the runtime's failure, not the caller's).
    #[error("HIP runtime: {0}")]
    Hip(#[from] ragged_gpu_runtime::hip::HipError),

    #[error("RAGGED_SDPA_HOST_REFERENCE graph executor: {0}")]
    Executor(#[from] ragged_reference::executor::ExecutorError),

    #[error("engine failure: {0}")]
    Engine(String),

    #[error("internal panic: {0}")]
    Panic(String),
}

impl PluginError {
    /// The single error → status mapping of the crate.
    pub fn status(&self) -> Status {
        match self {
            PluginError::NullArgument { .. }
            | PluginError::EmptyBuffer { .. }
            | PluginError::NullIdBuffer { .. }
            | PluginError::UnknownObject { .. }
            | PluginError::UnknownLentBuffer { .. }
            | PluginError::Malformed { .. }
            | PluginError::NotApplicable { .. }
            | PluginError::MissingBuffer { .. }
            | PluginError::NullBuffer { .. } => Status::BAD_PARAM,
            PluginError::UnknownEngine { .. } | PluginError::InvalidValue(_) => {
                Status::INVALID_VALUE
            }
            PluginError::NoEngineName { .. } => Status::NOT_APPLICABLE,
            PluginError::Kernel(error) => kernel_status(error),
            PluginError::Executor(error) => executor_status(error),
            PluginError::Cuda(error) => cuda_status(error),
            PluginError::Aiter(error) => aiter_status(error),
            PluginError::Hip(_) | PluginError::Engine(_) | PluginError::Panic(_) => {
                Status::INTERNAL_ERROR
            }
        }
    }
}

/// CUDA engine errors: offsets the device pre-pass rejected (validating mode) are the caller's
/// values; unusable pointers, a short workspace or a stream under capture in validating mode are
/// bad parameters; driver, compiler and contract failures are ours.
fn cuda_status(error: &ragged_gpu_runtime::cuda::GpuError) -> Status {
    use ragged_gpu_runtime::cuda::GpuError as G;
    match error {
        G::InvalidOffsets { .. } => Status::INVALID_VALUE,
        G::BadPointer { .. }
        | G::WorkspaceTooSmall { .. }
        | G::Unsupported { .. }
        | G::ValidatingUnderCapture { .. } => Status::BAD_PARAM,
        _ => Status::INTERNAL_ERROR,
    }
}

/// AITER engine errors, by the same rule as [`cuda_status`].
fn aiter_status(error: &ragged_engine_aiter::AiterError) -> Status {
    use ragged_engine_aiter::AiterError as A;
    match error {
        A::NullPointer { .. } | A::WorkspaceTooSmall { .. } => Status::BAD_PARAM,
        _ => Status::INTERNAL_ERROR,
    }
}

/// Kernel errors by cause: bad offset or seq_len contents are the caller's values
/// (INVALID_VALUE); unusable pointers are bad parameters; anything else means the plan let
/// through something the kernel cannot run, which is our bug (INTERNAL_ERROR).
/// Graph executor errors: a kernel error inside keeps its kernel status; a tensor the caller
/// did not bind or whose aux is unusable is a bad parameter; anything else is ours (the graph
/// was checked when the context was built).
fn executor_status(error: &ragged_reference::executor::ExecutorError) -> Status {
    use ragged_reference::executor::ExecutorError as X;
    match error {
        X::Tensor { source, .. } | X::Node { source, .. } => kernel_status(source),
        X::Unbound { .. } | X::AuxUnavailable { .. } => Status::BAD_PARAM,
        _ => Status::INTERNAL_ERROR,
    }
}

fn kernel_status(error: &ragged_core::KernelError) -> Status {
    use ragged_core::KernelError as K;
    match error {
        K::InTensor { source, .. } => kernel_status(source),
        K::OffsetOverflow { .. }
        | K::FirstOffsetNotZero { .. }
        | K::OffsetsDecrease { .. }
        | K::PartialRow { .. }
        | K::ExtentAboveMax { .. }
        | K::OffsetsBeyondBuffer { .. }
        | K::RowsOutsideBatch { .. }
        | K::RowsBeyondExtent { .. }
        | K::ExtentMismatch { .. }
        | K::SeqLenOutOfRange { .. } => Status::INVALID_VALUE,
        K::NullPointer { .. } | K::Misaligned { .. } | K::ByteLengthNotWhole { .. } => {
            Status::BAD_PARAM
        }
        // A buffer beyond isize::MAX bytes is the caller's geometry (planning declines it first).
        K::ExtentAboveIsizeMax { .. } => Status::INVALID_VALUE,
        // The reference could not reserve its f32 staging copy: the host is out of memory for
        // this problem, which is what ALLOC_FAILED tells hipDNN.
        K::StagingTooLarge { .. } => Status::ALLOC_FAILED,
        _ => Status::INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragged_engine_aiter::AiterError;
    use ragged_gpu_runtime::cuda::{GpuError, TensorRole};

    #[test]
    fn a_staging_copy_that_cannot_be_allocated_is_alloc_failed() {
        use ragged_core::{KernelError, Role};
        let error = PluginError::from(
            KernelError::StagingTooLarge {
                role: Role::K,
                elements: "2^40".into(),
            }
            .for_tensor(2),
        );
        assert_eq!(error.status(), Status::ALLOC_FAILED);
        assert!(error.to_string().contains("uid 2"), "{error}");
    }

    /// An output whose own offsets give a batch fewer rows than Q defines (O or a ragged LSE on
    /// a separate aux) is the caller's offset values, like every other offset-content error.
    #[test]
    fn rows_beyond_an_outputs_extent_are_the_callers_values() {
        use ragged_core::{KernelError, Role};
        let error = PluginError::from(
            KernelError::RowsBeyondExtent {
                role: Role::Lse,
                batch: 1,
                extent: 2,
                rows: 3,
                source_role: Role::Q,
            }
            .for_tensor(9),
        );
        assert_eq!(error.status(), Status::INVALID_VALUE);
        assert_eq!(
            error.to_string(),
            "tensor uid 9: LSE: batch 1 has sequence extent 2, below the 3 rows Q defines"
        );
    }

    #[test]
    fn gpu_errors_map_by_cause_and_name_the_engine() {
        let invalid = PluginError::from(GpuError::InvalidOffsets {
            flag: 2,
            problems: vec!["Q/O ragged_offset (uid 10): offsets decrease".into()],
        });
        assert_eq!(invalid.status(), Status::INVALID_VALUE);
        assert_eq!(
            invalid.to_string(),
            "RAGGED_SDPA_CUDA_FMHA: device validation of ragged offsets failed (flag \
             0x00000002): Q/O ragged_offset (uid 10): offsets decrease"
        );
        let pointer = PluginError::from(GpuError::BadPointer {
            uid: 4,
            role: TensorRole::O,
            address: 8,
            problem: "is not 16-byte aligned",
        });
        assert_eq!(pointer.status(), Status::BAD_PARAM);
        let driver_missing = PluginError::from(GpuError::Unavailable {
            reason: "no device".into(),
        });
        assert_eq!(driver_missing.status(), Status::INTERNAL_ERROR);

        let null = PluginError::from(AiterError::NullPointer { what: "Q", uid: 1 });
        assert_eq!(null.status(), Status::BAD_PARAM);
        assert_eq!(
            null.to_string(),
            "RAGGED_SDPA_AITER_FMHA: device pointer for Q (tensor uid 1) is null"
        );
    }
}
