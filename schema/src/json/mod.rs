//! hipDNN's JSON graph-dump format (as written for `HIPDNN_LOG_GRAPH_DIR`, schema.md §10).
//!
//! The writer emits every key upstream writes, plus the project's `is_ragged_tensor_enabled`
//! (true whenever the graph is ragged, as the binary writer sets it) and
//! `ragged_offset_multiplier`. The version stamp is written as stored, never computed. The reader is stricter than upstream where upstream is silently
//! lossy (unknown DataType strings are errors, not `unset`) and more lenient where newer keys may
//! be missing (`alignment` 16, `ragged_offset_multiplier` 1, flag `false`, absent SDPA keys unset,
//! `virtual` false).
//!
//! Upstream dialects read beside the writer's own form: the numpy-style data-type names of its
//! test bundles (`float16`, `float32`, `float64`), and SDPA port uids written flat inside the
//! node's `attributes` object instead of nested in `inputs` / `outputs`. Keys the reader does not
//! know are ignored; a known key with the wrong JSON type is an error naming its path.
//!
//! Values JSON cannot express are written as numbers: an `Unknown` enum value as its wire number
//! (which this reader accepts back), a non-finite `TensorValue` float as `null` (rejected on read).

mod object;
mod pointwise;
mod read;
mod sdpa_backward;
mod sdpa_shared;
mod write;

use crate::error::SchemaError;
use crate::model::Graph;

impl Graph {
    /// Pretty JSON with one-space indentation, as upstream's dumps are laid out.
    pub fn to_json(&self) -> String {
        write::graph_to_string(self)
    }

    pub fn from_json(text: &str) -> Result<Graph, SchemaError> {
        read::graph_from_str(text)
    }

    /// The same reader on an already parsed document, for callers that build or rewrite the
    /// JSON first (the shim's integration-test bundles substitute `${case.*}` placeholders).
    pub fn from_json_value(value: &serde_json::Value) -> Result<Graph, SchemaError> {
        read::graph_from_value(value)
    }
}
