//! Graph files as hipDNN writes them: JSON (`HIPDNN_LOG_GRAPH_DIR` dumps) or a FlatBuffers
//! buffer (bare `Graph` or an `HDGP` container). JSON is recognised by its first non-blank byte.
//!
//! A file that holds no graph at all (empty, a JSON document of another kind, bytes no
//! FlatBuffers graph verifies) is reported as such in words, with the decoder's detail after
//! them: the detail alone ("Range [0, 4) is out of bounds") does not tell a user that the path
//! names the wrong file.

use std::path::Path;

use ragged_schema::SchemaError;
use ragged_schema::model::Graph;
use serde_json::Value;

use crate::error::ShimError;

pub fn load(path: &Path) -> Result<Graph, ShimError> {
    let bytes = std::fs::read(path).map_err(|source| ShimError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let not_a_graph = |reason: String| ShimError::NotAGraph {
        path: path.to_path_buf(),
        reason,
    };
    let Some(first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(not_a_graph(if bytes.is_empty() {
            "the file is empty".to_owned()
        } else {
            "the file holds only whitespace".to_owned()
        }));
    };
    if matches!(first, b'{' | b'[') {
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| not_a_graph(format!("it starts like JSON but does not parse: {e}")))?;
        let is_graph_document = value
            .as_object()
            .is_some_and(|o| o.contains_key("tensors") || o.contains_key("nodes"));
        if !is_graph_document {
            return Err(not_a_graph(
                "it is JSON, but not a hipDNN graph (no \"tensors\" or \"nodes\" at the top level)"
                    .to_owned(),
            ));
        }
        Graph::from_json_value(&value).map_err(|source| ShimError::Graph {
            path: path.to_path_buf(),
            source: Box::new(source),
        })
    } else {
        ragged_schema::wire::decode_graph(&bytes).map_err(|source| match source {
            // The verifier refusing the bytes is what "this is no FlatBuffers graph" looks like;
            // any later error is a graph's own fault and keeps the graph wording.
            SchemaError::Verification { .. } => not_a_graph(format!(
                "it is not JSON (it does not start with '{{') and not a FlatBuffers graph \
                 (bare Graph or HDGP container) either: {source}"
            )),
            source => ShimError::Graph {
                path: path.to_path_buf(),
                source: Box::new(source),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(name: &str, bytes: &[u8]) -> String {
        let path = std::env::temp_dir().join(format!(
            "hipdnn-shim-graph-file-{}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let result = load(&path);
        let _ = std::fs::remove_file(&path);
        match result {
            Ok(g) => panic!("{name} loaded as graph '{}'", g.name),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn files_without_a_graph_say_so_before_any_decoder_detail() {
        let cases: [(&str, &[u8], &str); 5] = [
            ("empty", b"", "is not a graph file: the file is empty"),
            (
                "blank",
                b" \n\t",
                "is not a graph file: the file holds only whitespace",
            ),
            (
                "other-json",
                br#"{"about": "x", "cases": {}}"#,
                "is not a graph file: it is JSON, but not a hipDNN graph",
            ),
            (
                "broken-json",
                b"{\"tensors\": [",
                "is not a graph file: it starts like JSON but does not parse:",
            ),
            (
                "text",
                b"hello",
                "is not a graph file: it is not JSON (it does not start with '{') and not a \
                 FlatBuffers graph",
            ),
        ];
        for (name, bytes, want) in cases {
            let message = load_text(name, bytes);
            assert!(message.contains(want), "{name}: {message}");
        }
    }

    #[test]
    fn a_json_graph_with_a_schema_error_keeps_the_schema_error() {
        let message = load_text("bad-graph", br#"{"tensors": 7, "nodes": []}"#);
        assert!(message.contains("': JSON graph: "), "{message}");
        assert!(!message.contains("is not a graph file"), "{message}");
    }
}
