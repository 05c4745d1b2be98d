//! The safe, owned graph model: what every other crate works with instead of wire types.

mod data_type;
mod engine;
mod graph;
mod pointwise;
mod sdpa;
mod sdpa_backward;
mod sdpa_shared;
mod tensor;

pub use data_type::DataType;
pub use engine::{EngineConfig, EngineDetails, KnobSetting, KnobValue};
pub use graph::{
    EngineApiVersion, Graph, GraphId, NODE_ATTRIBUTE_NAMES, Node, NodeAttributes,
    POINTWISE_ATTRIBUTES_TAG, SDPA_ATTRIBUTES_TAG, SDPA_BACKWARD_ATTRIBUTES_TAG,
};
pub use pointwise::{PointwiseAttributes, PointwiseMode};
pub use sdpa::{AttentionImplementation, DiagonalAlignment, DiagonalBand, SdpaAttributes};
pub(crate) use sdpa::{OPTIONAL_INPUT_UIDS, OPTIONAL_OUTPUT_UIDS};
pub(crate) use sdpa_backward::BACKWARD_OPTIONAL_INPUTS;
pub use sdpa_backward::SdpaBackwardAttributes;
pub(crate) use sdpa_shared::SdpaShared;
pub use tensor::{
    DEFAULT_ALIGNMENT, DEFAULT_RAGGED_OFFSET_MULTIPLIER, TensorAttributes, TensorValue,
};
