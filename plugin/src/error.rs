//! The plugin's one error type, and the one place where errors become C status codes.

use ragged_core::Fault;

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

    /// A CUDA call of the binder's copy path (the runtime's failure, not the caller's).
    #[error("CUDA runtime: {0}")]
    Cuda(#[from] ragged_gpu_runtime::cuda::GpuError),

    /// A HIP call of the binder's copy path (the runtime's failure, not the caller's).
    #[error("HIP runtime: {0}")]
    Hip(#[from] ragged_gpu_runtime::hip::HipError),

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
            PluginError::Kernel(error) => match error.fault() {
                Fault::CallerValues => Status::INVALID_VALUE,
                Fault::CallerArguments => Status::BAD_PARAM,
                Fault::OutOfMemory => Status::ALLOC_FAILED,
                Fault::Internal => Status::INTERNAL_ERROR,
            },
            PluginError::Cuda(_)
            | PluginError::Hip(_)
            | PluginError::Engine(_)
            | PluginError::Panic(_) => Status::INTERNAL_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
