//! The ragged SDPA backward on NVIDIA GPUs (issue 15 item 3): dQ, dK and dV from the forward's
//! Q, K, V, O and LSE and the incoming dO, by the kernels of `kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu`.
//!
//! The plan ([`plan()`]) is the forward's CUDA plan for Q, K, V, O and the LSE (the same offsets,
//! seq_lens, band and scale rules) plus the gradients' layouts and the backward's own limits; the
//! launcher ([`launcher`]) compiles its own module through the forward's NVRTC cache and runs
//! four kernels per execute: the forward's offsets pre-pass, Di = rowsum(dO ∘ O), dK/dV, dQ.
//! On sm_90a at D 64, 96, 128 and 256 a fused dK/dV/dQ kernel and a dQ convert pass replace the last two
//! ([`fused_launcher`]): for [`DqForm::Deterministic`] the one adding dQ in a fixed order, for
//! [`DqForm::Unordered`] (the non-deterministic engine's) the one adding it in any order.

pub mod device_abi;
pub mod fused_abi;
pub mod fused_launcher;
pub mod launcher;
pub mod plan;

pub use launcher::{BWD_SOURCE, BackwardBuffers, BackwardEngine};
pub use plan::{BackwardPlan, DqForm, Gradients, plan, plan_with_form};
