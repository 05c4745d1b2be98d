//! The shim's one error type; each variant names the file, uid or value at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("reading '{path}': {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("writing '{path}': {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("graph '{path}': {source}")]
    Graph {
        path: PathBuf,
        /// Boxed: schema errors are large and this variant is rare.
        #[source]
        source: Box<ragged_schema::SchemaError>,
    },

    #[error("companion file '{path}': {message}")]
    Companion { path: PathBuf, message: String },

    #[error("input '{path}' for tensor uid {uid} '{name}': {message}")]
    Npy {
        path: PathBuf,
        uid: i64,
        name: String,
        message: String,
    },

    #[error("--inputs '{path}': {reason}")]
    InputsDir { path: PathBuf, reason: String },

    /// A file given as a graph that holds none: said in words before any decoder's detail.
    #[error("'{path}' is not a graph file: {reason}")]
    NotAGraph { path: PathBuf, reason: String },

    /// No plugin loaded; `report` lists every place searched and what each held.
    #[error("no engine plugin loaded\n{report}")]
    NoPlugin { report: String },

    /// `--cuda` without a usable CUDA device: nothing runs in its place.
    #[error("--cuda: no usable CUDA device: {reason}")]
    NoDevice { reason: String },

    #[error("no engine applicable to graph '{graph}' among the loaded plugins{hint}")]
    NoEngine { graph: String, hint: String },

    #[error("engine '{0}' is not among the applicable engines of the loaded plugins")]
    UnknownEngine(String),

    #[error(
        "engine '{0}' is not a --host-engine: hipdnn-shim binds host buffers, which a device engine must not be handed"
    )]
    DeviceEngine(String),

    #[error("{0}")]
    Usage(&'static str),

    #[error("shape override: {0}")]
    Override(String),

    #[error(transparent)]
    Host(#[from] hipdnn_shim::HostError),

    #[error("{failures} output position(s) disagree with the float64 oracle")]
    Mismatch { failures: usize },

    #[error("float64 oracle: {0}")]
    Oracle(String),

    #[error("bundle tree '{path}': {message}")]
    Bundle { path: PathBuf, message: String },
}
