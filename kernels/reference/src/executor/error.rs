//! Errors of the graph executor. Like the GPU layers' enums it wraps [`KernelError`] (the
//! tensor SDK and the SDPA reference) and adds what only a graph walk can get wrong; every
//! message names the tensor uid or node.

use ragged_core::dtype::DataType;
use ragged_core::error::KernelError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecutorError {
    #[error("node #{node_index} ({node}): tensor uid {uid} is not in the graph")]
    UnknownTensor {
        node_index: usize,
        node: String,
        uid: i64,
    },

    #[error("tensor uid {uid}: not in the variant pack and not virtual")]
    Unbound { uid: i64 },

    #[error(
        "node #{node_index} ({node}): reads tensor uid {uid} before any node wrote it (graph not in topological order, or cyclic)"
    )]
    NotYetWritten {
        node_index: usize,
        node: String,
        uid: i64,
    },

    #[error(
        "tensor uid {uid}: ragged offset aux uid {aux_uid} is {problem}; a ragged intermediate reuses a real, bound aux (RFC §4.9)"
    )]
    AuxUnavailable {
        uid: i64,
        aux_uid: i64,
        problem: &'static str,
    },

    #[error("tensor uid {uid}: data type {data_type} where {expected} is needed")]
    DataType {
        uid: i64,
        data_type: DataType,
        expected: &'static str,
    },

    #[error(
        "node #{node_index} ({node}): tensor uid {uid} dims {dims:?} do not broadcast to output dims {out:?}"
    )]
    Broadcast {
        node_index: usize,
        node: String,
        uid: i64,
        dims: Vec<i64>,
        out: Vec<i64>,
    },

    #[error("node #{node_index} ({node}): {op:?} takes {expected} input(s)")]
    Arity {
        node_index: usize,
        node: String,
        op: super::PointwiseOp,
        expected: usize,
    },

    #[error("tensor uid {uid}: {source}")]
    Tensor {
        uid: i64,
        #[source]
        source: KernelError,
    },

    #[error("node #{node_index} ({node}): {source}")]
    Node {
        node_index: usize,
        node: String,
        #[source]
        source: KernelError,
    },
}
