//! The `SerializedGraphAndPlan` ("HDGP") container that hipDNN's graph serializer writes.

use super::fb;
use crate::error::SchemaError;

const IDENTIFIER: &str = "HDGP";

/// `Some(graph_blob)` when `bytes` is an HDGP container, `None` when it should be read as a bare
/// graph. A buffer that carries the identifier but does not verify as a container is treated as
/// a bare graph, as upstream does; its graph verification then reports the damage.
pub(super) fn graph_blob(bytes: &[u8]) -> Result<Option<&[u8]>, SchemaError> {
    // Compared by hand: `flatbuffers::buffer_has_identifier` asserts on buffers under 8 bytes.
    if bytes.get(4..8) != Some(IDENTIFIER.as_bytes()) {
        return Ok(None);
    }
    let Ok(container) = flatbuffers::root::<fb::SerializedGraphAndPlan>(bytes) else {
        return Ok(None);
    };
    match container.graph_blob() {
        Some(blob) => Ok(Some(blob.bytes())),
        None => Err(SchemaError::Verification {
            root: "SerializedGraphAndPlan",
            detail: "container has no graph_blob".to_string(),
        }),
    }
}

pub(super) fn wrap(graph_bytes: &[u8]) -> Vec<u8> {
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let blob = fbb.create_vector(graph_bytes);
    let root = fb::SerializedGraphAndPlan::create(
        &mut fbb,
        &fb::SerializedGraphAndPlanArgs {
            graph_blob: Some(blob),
            plan_blob: None,
        },
    );
    fbb.finish(root, Some(IDENTIFIER));
    fbb.finished_data().to_vec()
}
