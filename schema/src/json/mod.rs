//! hipDNN's JSON graph-dump format (as written for `HIPDNN_LOG_GRAPH_DIR`, schema.md §10).
//!
//! The writer emits every key upstream writes, plus the project's `is_ragged_tensor_enabled`
//! (true whenever the graph is ragged, as the binary writer sets it) and
//! `ragged_offset_multiplier`. The version stamp is written as stored, never computed. The reader is stricter than upstream where upstream is silently
//! lossy (unknown DataType strings are errors, not `unset`) and more lenient where newer keys may
//! be missing (`alignment` 16, `ragged_offset_multiplier` 1, flag `false`, absent SDPA keys unset).
//!
//! Values JSON cannot express are written as numbers: an `Unknown` enum value as its wire number
//! (which this reader accepts back), a non-finite `TensorValue` float as `null` (rejected on read).

mod object;
mod read;
mod sdpa_backward;
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
}
