//! The ragged FMHA forward on NVIDIA GPUs: graph checks ([`plan()`]), the kernel contract
//! ([`device_abi`]) and the launcher ([`launcher`]).

pub mod device_abi;
pub mod launcher;
pub mod plan;
pub mod problem;

pub use launcher::{ExecuteMode, FMHA_SOURCE, FmhaBuffers, FmhaEngine, Prepared};
pub use plan::{FmhaPlan, plan};
pub use problem::{FmhaProblem, LseDesc, OffsetsDesc, RaggedDesc, SeqLenDesc};
