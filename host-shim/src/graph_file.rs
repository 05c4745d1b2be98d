//! Graph files as hipDNN writes them: JSON (`HIPDNN_LOG_GRAPH_DIR` dumps) or a FlatBuffers
//! buffer (bare `Graph` or an `HDGP` container). JSON is recognised by its first non-blank byte.

use std::path::Path;

use ragged_schema::model::Graph;

use crate::error::ShimError;

pub fn load(path: &Path) -> Result<Graph, ShimError> {
    let bytes = std::fs::read(path).map_err(|source| ShimError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let is_json = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    let graph = if is_json {
        let text = String::from_utf8_lossy(&bytes);
        Graph::from_json(&text)
    } else {
        ragged_schema::wire::decode_graph(&bytes)
    };
    graph.map_err(|source| ShimError::Graph {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}
