//! The ragged FMHA forward on NVIDIA GPUs: graph checks ([`plan()`], on top of the shared
//! [`ragged_core::contract`]), launch geometry ([`geometry`]), the kernel contract ([`device_abi`]) and
//! the launcher ([`launcher`]).

pub mod device_abi;
pub mod fp8;
mod fp8_launch;
pub mod fused_list;
pub mod geometry;
pub mod launcher;
pub(crate) mod loading;
pub mod plan;
pub(crate) mod tensor_maps;

pub use launcher::{ExecuteMode, FMHA_SOURCE, FmhaBuffers, FmhaEngine, Prepared};
pub use plan::{FmhaPlan, plan};
