//! hipDNN wire schemas, the safe graph model with ragged tensor attributes, and plugin API
//! versioning.
//!
//! **Architecture invariant:** this is the only crate that knows the wire formats. Generated
//! FlatBuffers types never leave it; other crates see [`Graph`] and friends, built by
//! [`wire`] (binary) or [`json`] and checked by [`Graph::validate`].

pub mod error;
pub mod model;
mod validation;
pub mod version;

pub use error::{SchemaError, ValidationError};
pub use model::{
    AttentionImplementation, DataType, DiagonalAlignment, DiagonalBand, EngineApiVersion,
    EngineConfig, EngineDetails, Graph, GraphId, KnobSetting, KnobValue, Node, NodeAttributes,
    SdpaAttributes, TensorAttributes, TensorValue,
};
