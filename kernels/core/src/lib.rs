//! The bottom layer every other crate of the workspace stands on.
//!
//! * [`problem`]: the graph-free description of a ragged SDPA forward that every engine reads,
//!   and [`contract`]: the rules all GPU engines share, each failure one [`Decline`].
//! * [`tensor`]: the RFC's tensor hierarchy: a type-erased [`Tensor`] trait, owning and shallow
//!   dense tensors, owning and shallow ragged tensors sharing one [`tensor::RaggedLayout`].
//! * [`dtype`]: the element types and their host buffers; [`fp8`]: bit-exact conversion to and
//!   from the four 8-bit float formats; [`mask`]: the mask band semantics; [`error`]: this
//!   crate's one error type.
//!
//! Nothing here knows a graph, a wire format, a GPU or a C pointer's origin.

pub mod binding;
pub mod contract;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod fp8;
pub mod graph;
pub mod mask;
pub mod params;
pub mod problem;
pub mod tensor;

pub use contract::Decline;
pub use dtype::{DataType, Element, FloatElement, HostData, HostDataMut};
pub use error::{BackwardFeature, EngineFailure, Fault, KernelError, Role};
pub use fp8::Fp8Format;
pub use mask::{DiagonalAlignment, MaskBand};
pub use params::SdpaParams;
pub use problem::{
    IndexInput, IndexWidth, Multiplier, Offsets, Operand, RaggedSdpaProblem, ScalarType, ScalePlan,
};
pub use tensor::{
    BSHD_SEQ_AXIS, DenseTensor, RaggedTensor, ShallowRaggedTensor, ShallowRaggedTensorMut,
    ShallowTensor, ShallowTensorMut, Tensor, TensorExt, TensorMut, TensorMutExt, read_scalar_f32,
};
