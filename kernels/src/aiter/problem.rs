//! A ragged SDPA forward as the AITER engine sees it: plain numbers, no schema types.
//!
//! The plugin fills this from the graph (ragged-sdpa.md §1, §2, §4). It is deliberately closer
//! to the graph than to AITER's arguments: every check of [`applicability`](super::applicability)
//! can then name the tensor uid and field the user wrote, and [`mapping`](super::mapping) is the
//! only place that knows AITER's conventions. Element types and the mask band are the crate's
//! ([`DataType`], [`MaskBand`]), shared with the CPU reference and the CUDA engine.

use crate::{DataType, MaskBand};

/// Width of an integer side tensor (ragged offsets, `seq_len_*`): INT32 or INT64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexWidth {
    /// INT32.
    I32,
    /// INT64.
    I64,
}

impl IndexWidth {
    /// Bytes per element, as the device kernels take it.
    pub fn bytes(self) -> i32 {
        match self {
            Self::I32 => 4,
            Self::I64 => 8,
        }
    }
}

/// The `ragged_offset` aux tensor of one ragged primary (`[B+1, 1, 1, 1]`, device memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaggedAux {
    /// The aux tensor's uid (`ragged_offset_tensor_uid` of the primary).
    pub uid: i64,
    /// INT32 or INT64.
    pub width: IndexWidth,
    /// `ragged_offset_multiplier`: element offset = stored value × multiplier.
    pub multiplier: i64,
}

/// One ragged primary (Q, K, V or O) with graph dims `[B, S_max, H, D]` (sequence axis 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaggedOperand {
    /// The tensor's uid.
    pub uid: i64,
    /// H: heads of this tensor.
    pub heads: i64,
    /// D: head dim of this tensor.
    pub head_dim: i64,
    /// `seqStride`: elements between consecutive tokens (`strides[1]`).
    pub seq_stride: i64,
    /// Elements between heads (`strides[2]`).
    pub head_stride: i64,
    /// Elements between head-dim entries (`strides[3]`).
    pub dim_stride: i64,
    /// Its offsets.
    pub aux: RaggedAux,
    /// Declared pointer alignment in bytes.
    pub alignment: i64,
}

impl RaggedOperand {
    /// Reads a ragged primary from its graph dims `[B, S_max, H, D]` and strides (sequence
    /// axis 1, ragged-sdpa.md §1). B and S_max belong to the problem, not the operand; the
    /// caller checks that Q/O and K/V agree on them.
    pub fn from_bshd(
        uid: i64,
        dims: [i64; 4],
        strides: [i64; 4],
        aux: RaggedAux,
        alignment: i64,
    ) -> Self {
        Self {
            uid,
            heads: dims[2],
            head_dim: dims[3],
            seq_stride: strides[1],
            head_stride: strides[2],
            dim_stride: strides[3],
            aux,
            alignment,
        }
    }
}

/// A `seq_len_q` / `seq_len_kv` tensor (`[B, 1, 1, 1]`, device memory): configuration 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqLens {
    /// The tensor's uid.
    pub uid: i64,
    /// INT32 or INT64.
    pub width: IndexWidth,
}

/// True when the band excludes nothing, whatever its alignment. AITER only takes non-negative
/// window sizes (applicability declines the rest), so unbounded means `None` here.
pub fn is_unmasked(mask: &MaskBand) -> bool {
    mask.left.is_none() && mask.right.is_none()
}

/// Where the optional LSE (`stats_tensor_uid`, FLOAT) goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LseLayout {
    /// No stats tensor.
    None,
    /// Dense `[B, H_q, S_q_max, 1]` with declared strides (elements).
    Dense {
        /// The stats tensor's uid.
        uid: i64,
        /// Declared strides of `[B, H_q, S_q_max, 1]`.
        strides: [i64; 4],
        /// Declared pointer alignment in bytes.
        alignment: i64,
    },
    /// Token-major ragged `[B, S_q_max, H_q, 1]` with its own offsets.
    Ragged {
        /// The stats tensor's uid.
        uid: i64,
        /// Elements between tokens (`strides[1]`, H_q when packed).
        seq_stride: i64,
        /// Elements between heads (`strides[2]`, 1 when packed).
        head_stride: i64,
        /// Its offsets.
        aux: RaggedAux,
        /// Declared pointer alignment in bytes.
        alignment: i64,
    },
}

/// One ragged SDPA forward: what the plugin extracted from the graph.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AiterProblem {
    /// Element type of Q, K, V, O (FLOAT and the integer types are declined).
    pub dtype: DataType,
    /// B.
    pub batch: i64,
    /// S_q_max: Q's (and O's) padded sequence dim.
    pub s_q_max: i64,
    /// S_kv_max: K's (and V's) padded sequence dim.
    pub s_kv_max: i64,
    /// Query.
    pub q: RaggedOperand,
    /// Key.
    pub k: RaggedOperand,
    /// Value.
    pub v: RaggedOperand,
    /// Output.
    pub o: RaggedOperand,
    /// `seq_len_q_tensor_uid`, when present.
    pub seq_len_q: Option<SeqLens>,
    /// `seq_len_kv_tensor_uid`, when present.
    pub seq_len_kv: Option<SeqLens>,
    /// The resolved mask band.
    pub mask: MaskBand,
    /// The resolved attention scale (host value; a device-resident scale is declined upstream).
    pub scale: f32,
    /// The stats output.
    pub lse: LseLayout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bshd_dims_and_strides_land_in_their_fields() {
        // Q of shared/testdata/wire/graph.json: dims [2, 3, 2, 16], strides [96, 32, 16, 1].
        let aux = RaggedAux {
            uid: 5,
            width: IndexWidth::I32,
            multiplier: 1,
        };
        let q = RaggedOperand::from_bshd(1, [2, 3, 2, 16], [96, 32, 16, 1], aux, 16);
        assert_eq!((q.heads, q.head_dim), (2, 16));
        assert_eq!((q.seq_stride, q.head_stride, q.dim_stride), (32, 16, 1));
        assert_eq!((q.uid, q.aux, q.alignment), (1, aux, 16));
    }
}
