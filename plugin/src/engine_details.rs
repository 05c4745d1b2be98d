//! `EngineDetails` buffers: the engine id and an empty knob list. `name` stays absent: it
//! "records the engine's name but never confers one", and `GetEngineName` is the source of names.

use ragged_schema::EngineDetails;
use ragged_schema::wire::encode_engine_details;

use crate::engines::Engine;

pub fn encode(engine: &Engine) -> Vec<u8> {
    encode_engine_details(&EngineDetails::new(engine.id))
}
