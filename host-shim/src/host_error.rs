//! The library's one error type. Every variant names the offending path, symbol, tensor uid or
//! value, so a failing load, call or harness run (in the shim or a conformance suite) says what to fix.

use std::path::PathBuf;

use crate::abi::Status;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("dlopen('{path}') failed: {message}")]
    Open { path: PathBuf, message: String },

    #[error("required symbol {symbol} not found in '{path}'")]
    MissingSymbol { path: PathBuf, symbol: &'static str },

    /// `PluginBase::invokePluginFunction`'s message.
    #[error("Failed to {description}. Status: {status}, Error: {last_error}")]
    PluginCall {
        description: &'static str,
        status: Status,
        last_error: String,
    },

    #[error("Wrong plugin type: expected HIPDNN_PLUGIN_TYPE_ENGINE(1), got {0}")]
    WrongPluginType(i32),

    #[error("Plugin type mismatch: expected HIPDNN_PLUGIN_TYPE_ENGINE(1), got {0}")]
    PluginTypeMismatch(i32),

    #[error(
        "Plugin {name} reports an unparseable API version ('{version}'); rejecting at load time so dispatch is not exposed to the malformed string on every graph execute."
    )]
    UnparseableApiVersion { name: String, version: String },

    #[error(
        "ERROR: ENGINE PLUGIN ABI VALIDATION FAILED\nPlugin {name}'s major API version ({major}) does not match expected engine API major version (1)\nExpected API version: {expected}"
    )]
    MajorVersionMismatch {
        name: String,
        major: u64,
        expected: String,
    },

    #[error("No engines found in the plugin")]
    NoEngines,

    #[error(
        "Number of engines returned does not match the number reported by the plugin (reported {reported}, returned {returned})"
    )]
    EngineCountMismatch { reported: u32, returned: u32 },

    #[error("Duplicate engine IDs found (engine {0})")]
    DuplicateEngineIds(String),

    #[error("More applicable engines than expected ({returned} > max {max})")]
    TooManyApplicableEngines { returned: u32, max: u32 },

    #[error("Engine ID not found in the plugin's known IDs ({0})")]
    UnknownApplicableEngine(String),

    #[error("plugin returned a NULL or empty string from {description}")]
    NullString { description: &'static str },

    #[error("{description} returned a NULL pointer or a zero size")]
    EmptyBuffer { description: &'static str },

    #[error("{description} returned a NULL handle")]
    NullHandle { description: &'static str },

    #[error(
        "graph is stamped with min_required_engine_api_version {stamp}, above the supported maximum {max}; rejected at deserialize"
    )]
    GraphStampAboveCeiling { stamp: String, max: String },

    #[error("reading '{path}': {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// RFC §4.11.1: a ragged primary cannot be sized without its offsets.
    #[error("ragged_offset uid {aux_uid} of tensor uid {uid} is not pre-supplied")]
    RaggedOffsetNotSupplied { uid: i64, aux_uid: i64 },

    #[error("allocating tensor uid {uid} '{name}': {source}")]
    Allocation {
        uid: i64,
        name: String,
        #[source]
        source: ragged_core::KernelError,
    },

    #[error("{0}")]
    Harness(String),
}
