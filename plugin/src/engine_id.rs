//! Engine ids: derived from names (never chosen), which is what lets the host check
//! `engineNameToId(GetEngineName(id)) == id` at load. The hash lives in the schema crate, shared
//! with the shim that checks it.

pub use ragged_schema::engine_id::engine_name_to_id;
