//! `EngineConfig` buffers: which engine the backend picked. Knob settings are ignored because no
//! engine here exposes knobs (plugin-abi.md §5.6).

use ragged_schema::wire::decode_engine_config;

use crate::engines::{self, Engine};
use crate::error::PluginError;

/// The listed engine the config names.
pub fn decode(bytes: &[u8]) -> Result<&'static Engine, PluginError> {
    let config = decode_engine_config(bytes).map_err(|error| PluginError::Malformed {
        what: "engine_config",
        detail: error.to_string(),
    })?;
    engines::find(config.engine_id).ok_or(PluginError::UnknownEngine {
        engine_id: config.engine_id,
    })
}
