//! The crate's single error type.
//!
//! Callers (the plugin, the host shim) turn any `SchemaError` into "decline the graph" or a
//! `BAD_PARAM` status, so every message must be self-explanatory in a log line: it names the
//! tensor uid or node, the field, and the offending value.

use crate::model::DataType;

/// Everything that can go wrong reading, writing or validating a graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    /// The FlatBuffers verifier rejected the buffer (truncated, out-of-bounds offsets, bad
    /// alignment, ...). `root` names the table type the buffer was verified as.
    #[error("{root} buffer failed FlatBuffers verification: {detail}")]
    Verification { root: &'static str, detail: String },

    /// A `TensorValue` union tag outside the known members: its struct size is unknown, so the
    /// value cannot be read (a newer producer wrote it).
    #[error("tensor uid {uid}: field value_type has unknown TensorValue tag {tag}")]
    UnknownTensorValueTag { uid: i64, tag: u8 },

    /// A tensor's `value` union is malformed (tag without value, or value outside the buffer).
    #[error("tensor uid {uid}: field value is malformed: {detail}")]
    MalformedTensorValue { uid: i64, detail: String },

    /// The text is not JSON at all, or not the expected JSON shape.
    #[error("JSON graph: {detail}")]
    Json { detail: String },

    /// A JSON key holds a value of the wrong type, or a required key is absent.
    #[error("JSON graph: key {path}: {detail}")]
    JsonField { path: String, detail: String },

    /// A DataType string that hipDNN does not define (upstream would silently read `unset`).
    #[error("JSON graph: key {path}: unknown data type string {value:?}")]
    UnknownDataTypeString { path: String, value: String },

    /// An enum string (`diagonal_alignment`, `implementation`, `value_type`) outside its set.
    #[error("JSON graph: key {path}: unknown value {value:?}")]
    UnknownEnumString { path: String, value: String },

    /// JSON nodes other than SDPA forward, SDPA backward and pointwise cannot be rebuilt: the
    /// project declares those member tables empty, so it has nowhere to put their fields.
    #[error(
        "JSON graph: node {node_index} has type {type_name:?}, only \"SdpaAttributes\", \"SdpaBackwardAttributes\" and \"PointwiseAttributes\" can be read"
    )]
    UnsupportedJsonNodeType {
        node_index: usize,
        type_name: String,
    },

    /// The graph is well-formed on the wire but breaks a model rule.
    #[error(transparent)]
    Validation(#[from] ValidationError),
}

/// Rule violations found by [`crate::Graph::validate`] and
/// [`crate::SdpaAttributes::resolve_diagonal_band`].
///
/// One variant per rule, so callers and tests can match on the exact violation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("tensor uid {uid}: uid is not unique (tensors #{first_index} and #{second_index})")]
    DuplicateUid {
        uid: i64,
        first_index: usize,
        second_index: usize,
    },

    #[error("tensor uid {uid}: field alignment must be >= 1, got {alignment}")]
    AlignmentTooSmall { uid: i64, alignment: i64 },

    #[error("tensor uid {uid}: field ragged_offset_multiplier must be >= 1, got {multiplier}")]
    RaggedOffsetMultiplierTooSmall { uid: i64, multiplier: i64 },

    #[error(
        "tensor uid {uid}: field ragged_offset_tensor_uid refers to tensor uid {aux_uid}, which is not in the graph"
    )]
    RaggedOffsetMissing { uid: i64, aux_uid: i64 },

    #[error(
        "tensor uid {uid}: field ragged_offset_tensor_uid refers to itself; a tensor cannot be its own offset aux"
    )]
    RaggedOffsetSelf { uid: i64 },

    #[error(
        "tensor uid {uid}: ragged tensor needs dims (its dims[0] is the batch B), got dims {dims:?}"
    )]
    RaggedPrimaryWithoutDims { uid: i64, dims: Vec<i64> },

    #[error(
        "tensor uid {uid}: field dims[0] (the batch B) = {batch} is out of range; the ragged offset aux needs B + 1 entries, so 0 <= B < {max}",
        max = i64::MAX
    )]
    RaggedBatchOutOfRange { uid: i64, batch: i64 },

    #[error(
        "tensor uid {uid}: ragged offset aux uid {aux_uid} must have rank 4, got dims {dims:?} (rank {rank})",
        rank = dims.len()
    )]
    RaggedOffsetRank {
        uid: i64,
        aux_uid: i64,
        dims: Vec<i64>,
    },

    #[error(
        "tensor uid {uid}: ragged offset aux uid {aux_uid} must have dims[0] == B + 1 = {expected} (B = dims[0] of uid {uid}), got {actual}"
    )]
    RaggedOffsetBatch {
        uid: i64,
        aux_uid: i64,
        expected: i64,
        actual: i64,
    },

    #[error(
        "tensor uid {uid}: ragged offset aux uid {aux_uid} field data_type must be int32 or int64, got {data_type}"
    )]
    RaggedOffsetDataType {
        uid: i64,
        aux_uid: i64,
        data_type: DataType,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field {field} refers to tensor uid {uid}, which is not in the graph"
    )]
    NodeTensorMissing {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
    },

    #[error(
        "tensor uid {uid}: ragged offset aux uid {aux_uid} is virtual; an offset aux must be a real tensor of the graph, bound by the caller (RFC §4.9: intermediates reuse an existing aux, none is synthesized)"
    )]
    RaggedOffsetVirtual { uid: i64, aux_uid: i64 },

    #[error(
        "node #{node_index} ({node_name:?}): field {field} reads tensor uid {uid}, which node #{producer} writes; nodes must be listed in topological order, without cycles"
    )]
    NodeOrder {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
        producer: usize,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field {field} reads virtual tensor uid {uid}, which no node writes"
    )]
    VirtualTensorUnwritten {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field {field} writes tensor uid {uid}, which node #{first_node} already writes"
    )]
    TensorWrittenTwice {
        uid: i64,
        first_node: usize,
        node_index: usize,
        node_name: String,
        field: &'static str,
    },

    #[error(
        "node #{node_index} ({node_name:?}): orphan node, none of its tensor uids {uids:?} is shared with the rest of the graph"
    )]
    OrphanNode {
        node_index: usize,
        node_name: String,
        uids: Vec<i64>,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field {field} tensor uid {uid} must have rank 4 ({layout}), got dims {dims:?}"
    )]
    SdpaRank {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
        layout: &'static str,
        dims: Vec<i64>,
    },

    #[error(
        "node #{node_index} ({node_name:?}): H_q = {h_q} (q_tensor_uid {q_uid}) must be a positive multiple of H_kv = {h_kv} ({field} {kv_uid})"
    )]
    SdpaHeadsNotMultiple {
        node_index: usize,
        node_name: String,
        field: &'static str,
        q_uid: i64,
        h_q: i64,
        kv_uid: i64,
        h_kv: i64,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field {field} tensor uid {uid} must have dims [B, 1, 1, 1] = {expected:?} or [B], got {dims:?}"
    )]
    SeqLenShape {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
        expected: Vec<i64>,
        dims: Vec<i64>,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field {field} tensor uid {uid} data_type must be int32 or int64, got {data_type}"
    )]
    SeqLenDataType {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
        data_type: DataType,
    },

    #[error(
        "node #{node_index} ({node_name:?}): deprecated fields causal_mask and causal_mask_bottom_right are both true; set at most one"
    )]
    BothCausalFlags {
        node_index: usize,
        node_name: String,
    },

    /// Raised by `resolve_diagonal_band`, which has no node context.
    #[error(
        "SDPA attributes: deprecated fields causal_mask and causal_mask_bottom_right are both true; set at most one"
    )]
    AmbiguousCausalMask,

    /// SDPA backward: a gradient must have the dims of the tensor it is the gradient of.
    #[error(
        "node #{node_index} ({node_name:?}): field {field} tensor uid {uid} must have the dims of {like_field}, {expected:?}, got {dims:?}"
    )]
    BackwardDims {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
        like_field: &'static str,
        expected: Vec<i64>,
        dims: Vec<i64>,
    },

    /// SDPA backward: O, dO and dQ address their tokens as Q does, dK and dV as K does.
    #[error(
        "node #{node_index} ({node_name:?}): field {field} tensor uid {uid} must share the token layout of {like_field} (uid {like_uid}): its {mismatch}"
    )]
    BackwardLayout {
        node_index: usize,
        node_name: String,
        field: &'static str,
        uid: i64,
        like_field: &'static str,
        like_uid: i64,
        /// What differs, its value and the leader's: `ragged_offset_multiplier is 32, expected 1`.
        mismatch: String,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field stats_tensor_uid tensor uid {uid} must have dims [B, H_q, S_q, 1] = {head_major:?} or [B, S_q, H_q, 1] = {token_major:?}, got {dims:?}"
    )]
    BackwardStatsShape {
        node_index: usize,
        node_name: String,
        uid: i64,
        head_major: Vec<i64>,
        token_major: Vec<i64>,
        dims: Vec<i64>,
    },

    #[error(
        "node #{node_index} ({node_name:?}): field stats_tensor_uid tensor uid {uid} data_type must be float, got {data_type}"
    )]
    BackwardStatsDataType {
        node_index: usize,
        node_name: String,
        uid: i64,
        data_type: DataType,
    },
}
