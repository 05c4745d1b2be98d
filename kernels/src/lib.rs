//! Tensor SDK (dense, shallow, ragged), CPU reference SDPA and GPU FMHA engines (issues 3, 6, 7).
//!
//! * [`problem`]: the one graph-free description of a ragged SDPA forward every engine reads,
//!   and [`contract`]: the rules all GPU engines share, each failure one [`Decline`].
//! * [`tensor`]: the RFC's tensor hierarchy: a type-erased [`Tensor`] trait, owning and shallow
//!   dense tensors, owning and shallow ragged tensors sharing one [`tensor::RaggedLayout`].
//! * [`sdpa`]: the CPU reference SDPA forward over those tensors, the numeric specification the
//!   GPU engines are checked against ([`sdpa_forward`]).
//! * [`sdpa_backward`]: the CPU reference SDPA backward (dQ, dK, dV) over the same tensors
//!   ([`sdpa_backward()`]).
//! * [`runtime`]: the GPU runtime layers, CUDA (dynamic loading, NVRTC compile cache) and HIP.
//! * [`cuda_fmha`]: the ragged FMHA engine on CUDA: its plan and launcher.
//! * [`aiter`]: the AMD engine: ROCm and the AITER shim loaded at run time, the graph → AITER
//!   mapping and the device pre-pass / fix-up kernels.
//!
//! This crate knows nothing about graphs or wire formats; the plugin maps the graph model onto
//! these types.

pub mod aiter;
pub mod contract;
pub mod cuda_fmha;
pub mod cuda_fmha_bwd;
pub mod dtype;
pub mod error;
pub mod executor;
mod gemm;
pub mod parallel;
pub mod problem;
pub mod runtime;
pub mod sdpa;
pub mod sdpa_backward;
pub mod tensor;

pub use contract::Decline;
pub use dtype::{DataType, Element, FloatElement, HostData, HostDataMut};
pub use error::{KernelError, Role};
pub use problem::{
    IndexInput, IndexWidth, Offsets, Operand, RaggedSdpaProblem, ScalarType, ScalePlan,
};
pub use sdpa::{DiagonalAlignment, MaskBand, SdpaParams, sdpa_forward};
pub use sdpa_backward::{
    BackwardFeature, BackwardInputs, BackwardOutputs, SdpaBackwardParams, sdpa_backward,
};
pub use tensor::{
    BSHD_SEQ_AXIS, DenseTensor, RaggedTensor, ShallowRaggedTensor, ShallowRaggedTensorMut,
    ShallowTensor, ShallowTensorMut, Tensor, TensorExt, TensorMut, TensorMutExt, read_scalar_f32,
};
