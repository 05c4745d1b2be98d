//! What the plugin knows about a ragged SDPA forward graph, in the terms the CUDA kernels need.
//!
//! These are plain copies of graph attributes (no device pointers, no offsets contents): the plan
//! is made from them once, without touching the GPU, and every execute reuses it. Element types
//! and the mask band are the crate's own ([`DataType`], [`MaskBand`]), the same values the CPU
//! reference takes, so the plugin maps a graph once for every engine.

use crate::{DataType, MaskBand};

/// A ragged tensor's `ragged_offset` aux: `[B + 1, 1, 1, 1]`, int32 or int64, in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetsDesc {
    /// Graph uid of the aux tensor.
    pub uid: i64,
    /// Its element type.
    pub dtype: DataType,
    /// Its element count (must be B + 1).
    pub elements: i64,
    /// `ragged_offset_multiplier` of the primary tensor: element offset = stored × multiplier.
    pub multiplier: i64,
}

/// A ragged primary tensor: dims `[B, S_max, H, D]` in memory order, packed BSHD strides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaggedDesc {
    /// Graph uid.
    pub uid: i64,
    /// Element type.
    pub dtype: DataType,
    /// `[B, S_max, H, D]`.
    pub dims: [i64; 4],
    /// Declared strides; the batch stride is ignored for ragged tensors.
    pub strides: [i64; 4],
    /// Declared pointer alignment in bytes.
    pub alignment: i64,
    /// The `ragged_offset` aux.
    pub offsets: OffsetsDesc,
}

/// The optional LSE (stats) output, fp32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LseDesc {
    /// Dense `[B, H_q, S_q_max, 1]` with any non-negative strides.
    Dense {
        /// Graph uid.
        uid: i64,
        /// Element type (must be Float).
        dtype: DataType,
        /// `[B, H_q, S_q_max, 1]`.
        dims: [i64; 4],
        /// Declared strides.
        strides: [i64; 4],
        /// Declared pointer alignment in bytes.
        alignment: i64,
    },
    /// Token-major ragged `[B, S_q_max, H_q, 1]`, packed, with its own offsets aux.
    Ragged(RaggedDesc),
}

/// `seq_len_q` / `seq_len_kv`: `[B, 1, 1, 1]`, int32 or int64, in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqLenDesc {
    /// Graph uid.
    pub uid: i64,
    /// Element type.
    pub dtype: DataType,
    /// Element count (must be B).
    pub elements: i64,
}

/// One ragged SDPA forward graph, as far as the CUDA engine is concerned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FmhaProblem {
    /// Queries `[B, S_q_max, H_q, D]`.
    pub q: RaggedDesc,
    /// Keys `[B, S_kv_max, H_kv, D]`.
    pub k: RaggedDesc,
    /// Values `[B, S_kv_max, H_kv, D]`.
    pub v: RaggedDesc,
    /// Output `[B, S_q_max, H_q, D]`.
    pub o: RaggedDesc,
    /// Optional LSE output.
    pub lse: Option<LseDesc>,
    /// Optional per-batch valid query lengths (configuration 2).
    pub seq_len_q: Option<SeqLenDesc>,
    /// Optional per-batch valid key lengths.
    pub seq_len_kv: Option<SeqLenDesc>,
    /// Resolved softmax scale (host value).
    pub scale: f32,
    /// Resolved mask band.
    pub mask: MaskBand,
}
