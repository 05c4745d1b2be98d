//! The CPU reference: the numeric specification every GPU engine is checked against, and the
//! engine that runs wherever no GPU engine can.
//!
//! * [`sdpa`]: SDPA forward over the core's dense and ragged tensors ([`sdpa_forward`]).
//! * [`mod@sdpa_fp8`]: the FP8 forward's numeric definition (scalar, [`sdpa_forward_fp8`]) and
//!   its staging over the SDK's tensors ([`sdpa_forward_fp8_tensors`], the host engine's FP8
//!   forward).
//! * [`mod@sdpa_backward`]: SDPA backward (dQ, dK, dV) over the same tensors ([`sdpa_backward()`]).
//! * [`executor`]: runs a multi-node graph (SDPA and pointwise nodes) over host buffers.
//! * [`parallel`]: the worker pool every kernel here runs on; `gemm`: the micro-kernels, run on
//!   the instruction set [`isa`] chooses.

mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod bf16_dot;
pub mod executor;
mod gemm;
pub mod isa;
pub mod parallel;
pub mod sdpa;
pub mod sdpa_backward;
pub mod sdpa_fp8;
#[cfg(target_arch = "x86_64")]
mod stream;
mod tiles;

pub use sdpa::{ForwardExtras, PagedInputs, SdpaParams, sdpa_forward, sdpa_forward_with};
pub use sdpa_backward::{BackwardInputs, BackwardOutputs, SdpaBackwardParams, sdpa_backward};
pub use sdpa_fp8::{
    Fp8Amaxes, Fp8Attributes, Fp8Output, Fp8OutputData, Fp8Scales, Fp8SdpaOutputs, Fp8SdpaProblem,
    Fp8Tensors, SoftmaxQuantization, sdpa_forward_fp8, sdpa_forward_fp8_tensors,
};
