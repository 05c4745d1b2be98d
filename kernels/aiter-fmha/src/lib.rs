//! The AMD engine `RAGGED_SDPA_AITER_FMHA`: ragged SDPA forward through AITER's FMHA
//! (`aiter::mha_fwd`), as specified in `shared/spec/ragged-sdpa.md` §7 and §9.
//!
//! AITER has no C ABI for attention, so the engine talks to a small `extern "C"` shim
//! (`shim/ragged_aiter_shim.{h,cpp}` beside this crate) that is built on a ROCm machine and loaded at run
//! time, as is the HIP runtime itself: the plugin must load, and decline this engine cleanly,
//! where ROCm is absent. Nothing here links against ROCm.
//!
//! Layers, each in its own module:
//! - [`problem`]: the plain description of a ragged SDPA forward that the plugin fills from the
//!   graph (no schema types leak in here).
//! - [`applicability`]: which problems this engine takes, and why it declines the rest (§4, §9).
//! - [`workspace`]: the device scratch layout (token starts, lengths, LSE scratch).
//! - [`shim_abi`]: the `#[repr(C)]` mirror of the shim header, checked against a C compiler.
//! - [`mapping`]: problem → shim arguments, exactly as §7.4 says.
//! - [`device_kernels`]: the pre-pass and fix-up kernels (`hip/*.cu` beside this crate) and their
//!   launch arguments.
//! - `ragged_gpu_runtime::hip` and [`shim_library`]: the only code that calls foreign functions;
//!   they load `libamdhip64`/`libhiprtc` and the shim with `libloading`. Outside them, `unsafe`
//!   appears only where [`engine`] and its backward half hand a call's device addresses to them
//!   (`AiterEngine::execute_call`, whose addresses come from the plugin's one binding step).
//! - [`asm_kernels`]: the shim's preflight, so that a problem AITER would abort the process on
//!   (an unreadable asm `.co` file) or run no kernel for is declined at applicability.
//! - [`detection`]: whether the engine can be listed, with the reason when it cannot; the HIP part
//!   of the answer is the process verdict of `ragged_gpu_runtime::probe`, shared with the binder.
//! - [`engine`]: the execute sequence (pre-pass, `aiter::mha_fwd`, fix-up) on one stream.
//! - [`backward`], [`backward_mapping`], [`shim_abi_bwd`]: the backward (issue 15 item 6) through
//!   `aiter::mha_bwd`: applicability, the shim's backward arguments and the backward's two
//!   kernels, and the mirror of `ragged_aiter_shim_bwd.h`. The engine runs it only when the shim
//!   finds AITER's `libmha_bwd.so` exporting `aiter::mha_bwd`.
//! - [`serving`], [`serving_kernels`]: paged K/V (gathered into the workspace, then the
//!   forward) and attention sinks (folded in after the forward), with their three kernels.
//! - [`adapter`]: the engine as the plugin lists, plans and executes it.

pub mod adapter;
pub mod applicability;
pub mod asm_kernels;
pub mod backward;
pub mod backward_mapping;
pub mod detection;
pub mod device_kernels;
pub mod engine;
pub mod error;
pub mod mapping;
pub mod problem;
pub mod serving;
pub mod serving_kernels;
pub mod shim_abi;
pub mod shim_abi_bwd;
pub mod shim_library;
pub mod workspace;

#[cfg(test)]
mod fixtures;

pub use applicability::{AiterPlan, GpuArch, check_applicability, plan};
pub use backward::{AiterBackwardPlan, AiterBackwardProblem, plan_backward};
pub use backward_mapping::BackwardBuffers;
pub use detection::{Availability, Missing, ProbeConfig, probe};
pub use engine::AiterEngine;
pub use error::AiterError;
pub use mapping::DeviceBuffers;
pub use problem::{
    AiterProblem, IndexWidth, LseLayout, RaggedAux, RaggedOperand, SeqLens, is_unmasked,
};
pub use workspace::WorkspacePlan;

/// The engine's name; its id is FNV-1a-64 of this string (`plugin-abi.md` §7).
pub const ENGINE_NAME: &str = "RAGGED_SDPA_AITER_FMHA";
