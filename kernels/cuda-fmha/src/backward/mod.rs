//! The ragged SDPA backward on NVIDIA GPUs (issue 15 item 3): dQ, dK and dV from the forward's
//! Q, K, V, O and LSE and the incoming dO, by the kernels of `kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu`.
//!
//! The plan ([`plan()`]) is the forward's CUDA plan for Q, K, V, O and the LSE (the same offsets,
//! seq_lens, band and scale rules) plus the gradients' layouts and the backward's own limits; the
//! launcher ([`launcher`]) compiles its own module through the forward's NVRTC cache and runs
//! four kernels per execute: the forward's offsets pre-pass, Di = rowsum(dO ∘ O), dK/dV, dQ.
//! A plan of [`DqForm::Unordered`] (the non-deterministic engine's) runs, on sm_90a, the fused
//! dK/dV/dQ kernel and a dQ convert pass instead of the last two ([`fused_launcher`]).

pub mod device_abi;
pub mod fused_abi;
pub mod fused_launcher;
pub mod launcher;
pub mod plan;

pub use launcher::{BWD_SOURCE, BackwardBuffers, BackwardEngine};
pub use plan::{BackwardPlan, DqForm, Gradients, plan, plan_with_form};
