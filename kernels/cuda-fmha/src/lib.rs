//! `RAGGED_SDPA_CUDA_FMHA` and `RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC`: the project's ragged
//! FMHA kernels on NVIDIA GPUs.
//!
//! * [`forward`]: the forward's plan (which kernel, which grid), its launcher and device ABI.
//! * [`backward`]: the backward's plan and launcher, sharing the forward's loading and geometry.
//! * [`paged`]: paged K/V and attention sinks, the split-KV kernels' plan and launcher.
//! * [`adapter`]: the engine as the plugin lists, plans and executes it.
//! * [`nondeterministic`]: the second engine, backward only: the fused backward adding dQ in no
//!   fixed order (a little faster, not bitwise reproducible).
//!
//! The CUDA sources live in `cuda/` beside this crate; `build.rs` splices each program into one
//! string that NVRTC compiles at first use on the user's machine.

pub mod adapter;
pub mod backward;
pub mod forward;
pub mod nondeterministic;
pub mod paged;
