//! Paged K/V and attention sinks on NVIDIA GPUs (kernels/core/paged-kv-and-sinks.md): the
//! split-KV kernels of `cuda/ragged_paged_decode.cu`. [`plan()`] checks a paged forward problem
//! against what the kernels implement and chooses the KV split; [`device_abi`] is the host's copy
//! of the kernels' contract; [`launcher`] enqueues them.

mod args;
pub mod device_abi;
pub mod gather;
pub mod launcher;
pub mod plan;

pub use launcher::{PAGED_SOURCE, PagedBuffers, PagedEngine};
pub use plan::{PagedPlan, plan};
