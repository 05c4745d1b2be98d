//! Binary (FlatBuffers) encode and decode, wire-compatible with hipDNN.
//!
//! Every decode runs the FlatBuffers verifier first: the bytes come from another process or
//! library, and the generated accessors are only memory-safe on verified buffers. Absent fields
//! take their schema defaults, so buffers from older or newer producers read cleanly.

/// Model and wire tables name their fields alike, so a node table's decode and encode are one
/// field list: `copy` fields move unchanged, `enums` go through the model enum's wire byte,
/// `strings` are owned in the model and built into the buffer before the table.
macro_rules! table_codec {
    (
        $model:ident <=> $table:ident / $args:ident;
        copy: [$($f:ident),* $(,)?];
        enums: [$($e:ident: $model_enum:ident / $fb_enum:ident),* $(,)?];
        strings: [$($st:ident),* $(,)?] $(;)?
    ) => {
        pub(super) fn decode(s: &fb::$table<'_>) -> $model {
            $model {
                $($f: s.$f(),)*
                $($e: $model_enum::from_wire(s.$e().0),)*
                $($st: s.$st().map(str::to_string),)*
            }
        }

        pub(super) fn encode<'a>(
            fbb: &mut flatbuffers::FlatBufferBuilder<'a>,
            s: &$model,
        ) -> flatbuffers::WIPOffset<fb::$table<'a>> {
            $(let $st = s.$st.as_deref().map(|v| fbb.create_string(v));)*
            let args = fb::$args {
                $($f: s.$f,)*
                $($e: fb::$fb_enum(s.$e.to_wire()),)*
                $($st,)*
            };
            fb::$table::create(fbb, &args)
        }
    };
}

mod container;
mod engine;
mod graph;
mod pointwise;
mod sdpa;
mod sdpa_backward;
mod tensor;
mod tensor_value;

use crate::error::SchemaError;
use crate::model::{EngineConfig, EngineDetails, Graph};

/// The generated types, under one short name for the wire modules.
pub(crate) use crate::generated::hipdnn_flatbuffers_sdk::data_objects as fb;

/// Decodes a bare `Graph` buffer or an `HDGP` container (schema.md §9 rule: identifier `HDGP` and
/// verifies as the container ⇒ its `graph_blob`; otherwise a bare graph).
pub fn decode_graph(bytes: &[u8]) -> Result<Graph, SchemaError> {
    match container::graph_blob(bytes)? {
        Some(blob) => graph::decode(blob),
        None => graph::decode(bytes),
    }
}

/// Encodes a bare `Graph`, stamping `min_required_engine_api_version` with the computed minimum
/// and setting `is_ragged_tensor_enabled` when the graph is ragged (versioning.md §6 writer rule).
pub fn encode_graph(graph: &Graph) -> Vec<u8> {
    graph::encode(graph, graph::Provenance::Stamp)
}

/// Encodes the model exactly as it stands: `min_required_engine_api_version` and
/// `is_ragged_tensor_enabled` as stored (absent stamp ⇒ field absent; flag false ⇒ field absent,
/// as upstream writes it). For building upstream-like buffers and version-gating test cases.
pub fn encode_graph_exact(graph: &Graph) -> Vec<u8> {
    graph::encode(graph, graph::Provenance::Exact)
}

/// [`encode_graph`]'s output wrapped in a `SerializedGraphAndPlan` container with no plan.
pub fn encode_graph_hdgp(graph: &Graph) -> Vec<u8> {
    container::wrap(&encode_graph(graph))
}

/// Wraps any graph buffer (for example from [`encode_graph_exact`]) in an `HDGP` container.
pub fn wrap_hdgp(graph_bytes: &[u8]) -> Vec<u8> {
    container::wrap(graph_bytes)
}

pub fn decode_engine_config(bytes: &[u8]) -> Result<EngineConfig, SchemaError> {
    engine::decode_config(bytes)
}

pub fn encode_engine_config(config: &EngineConfig) -> Vec<u8> {
    engine::encode_config(config)
}

/// Writes `engine_id`, an empty `knobs` vector (the project's engines have no knobs), and the
/// name and behavior notes when present.
pub fn encode_engine_details(details: &EngineDetails) -> Vec<u8> {
    engine::encode_details(details)
}

pub fn decode_engine_details(bytes: &[u8]) -> Result<EngineDetails, SchemaError> {
    engine::decode_details(bytes)
}

/// Maps a verifier failure to the crate error, naming the root table.
fn verification(root: &'static str) -> impl FnOnce(flatbuffers::InvalidFlatbuffer) -> SchemaError {
    move |e| SchemaError::Verification {
        root,
        detail: e.to_string(),
    }
}
