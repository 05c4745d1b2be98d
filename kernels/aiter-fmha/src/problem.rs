//! A ragged SDPA forward as the AITER engine sees it: plain numbers, no schema types.
//!
//! Derived once from the [`RaggedSdpaProblem`] after the shared GPU contract has accepted it
//! ([`AiterProblem::from_problem`]): the sequence and head axes are already resolved, so the
//! workspace, [`mapping`](super::mapping) (the only place that knows AITER's conventions) and the
//! device kernels read plain numbers.

pub use ragged_core::problem::IndexWidth;
use ragged_core::problem::{Fp8Forward, IndexInput, Offsets, Operand, RaggedSdpaProblem};
use ragged_core::{DataType, MaskBand};

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
    /// A ragged primary with its axes resolved by [`Operand`]. A dense operand (which the GPU
    /// contract declines) gets a zero aux, never read.
    pub fn from_operand(t: &Operand) -> Self {
        Self {
            uid: t.uid,
            heads: t.heads(),
            head_dim: t.head_dim(),
            seq_stride: t.seq_stride(),
            head_stride: t.head_stride(),
            dim_stride: t.dim_stride(),
            aux: RaggedAux::from_offsets(t.ragged.unwrap_or(Offsets {
                uid: 0,
                width: IndexWidth::I32,
                multiplier: ragged_core::Multiplier::ONE,
            })),
            alignment: t.alignment,
        }
    }
}

impl RaggedAux {
    fn from_offsets(o: Offsets) -> Self {
        Self {
            uid: o.uid,
            width: o.width,
            multiplier: o.multiplier.get(),
        }
    }
}

impl SeqLens {
    fn from_input(s: &IndexInput) -> Self {
        Self {
            uid: s.uid,
            width: s.width,
        }
    }
}

impl LseLayout {
    fn from_stats(stats: Option<&Operand>) -> Self {
        match stats {
            None => Self::None,
            Some(t) => match t.ragged {
                Some(offsets) => Self::Ragged {
                    uid: t.uid,
                    seq_stride: t.seq_stride(),
                    head_stride: t.head_stride(),
                    aux: RaggedAux::from_offsets(offsets),
                    alignment: t.alignment,
                },
                // The fix-up takes the strides of `[B, H_q, S_q_max, 1]`.
                None => Self::Dense {
                    uid: t.uid,
                    strides: [
                        t.batch_stride(),
                        t.head_stride(),
                        t.seq_stride(),
                        t.dim_stride(),
                    ],
                    alignment: t.alignment,
                },
            },
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
    /// Element type of Q, K and V (FLOAT and the integer types are declined).
    pub dtype: DataType,
    /// Element type of O: Q's, except on an FP8 forward, whose O may be wider.
    pub o_dtype: DataType,
    /// B.
    pub batch: i64,
    /// S_q_max: Q's (and O's) padded sequence dim.
    pub s_q_max: i64,
    /// S_kv_max: K's (and V's) padded sequence dim.
    pub s_kv_max: i64,
    /// Rows of Q (and O) in all, when every sequence lies within fewer than `B · S_q_max` rows:
    /// T_q for a paged graph's packed Q, whose sequences share one `[T_q]` row range. `None`
    /// means `B · S_q_max` ([`AiterProblem::q_rows_total`]).
    pub packed_q_rows: Option<i64>,
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
    /// An FP8 forward's scalars, output plan and amax outputs, as the plugin planned them
    /// (fp8-attention.md §1); applicability decides which of them AITER can honour.
    pub fp8: Option<Fp8Forward>,
}

impl AiterProblem {
    /// Physical Q/O rows the forward can touch: the bound on token starts, AITER's `seqlen_q`
    /// total and the LSE scratch's rows.
    pub fn q_rows_total(&self) -> i64 {
        self.packed_q_rows
            .unwrap_or_else(|| self.batch.saturating_mul(self.s_q_max))
    }

    /// The AITER view of a problem that meets the GPU contract.
    pub fn from_problem(p: &RaggedSdpaProblem) -> Self {
        Self {
            dtype: p.q.dtype,
            o_dtype: p.o.dtype,
            batch: p.batch(),
            s_q_max: p.q.seq_max(),
            s_kv_max: p.k.seq_max(),
            packed_q_rows: None,
            q: RaggedOperand::from_operand(&p.q),
            k: RaggedOperand::from_operand(&p.k),
            v: RaggedOperand::from_operand(&p.v),
            o: RaggedOperand::from_operand(&p.o),
            seq_len_q: p.seq_len_q.as_ref().map(SeqLens::from_input),
            seq_len_kv: p.seq_len_kv.as_ref().map(SeqLens::from_input),
            mask: p.mask,
            scale: p.scale.plan_value(),
            lse: LseLayout::from_stats(p.stats.as_ref()),
            fp8: p.fp8,
        }
    }
}
