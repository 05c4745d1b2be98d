//! The node's tensors as a plan sees them: Q, K, V, O and stats operands, their ragged offsets and
//! multiplier, and the integer side tensors (offsets, length inputs) with their width.

use std::fmt;

use crate::DataType;

use super::{Axes, resolve_axes};

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

    /// The element type of the tensor.
    pub fn data_type(self) -> DataType {
        match self {
            Self::I32 => DataType::I32,
            Self::I64 => DataType::I64,
        }
    }

    /// The width of an element type, `None` for the floating-point types.
    pub fn of(data_type: DataType) -> Option<Self> {
        match data_type {
            DataType::I32 => Some(Self::I32),
            DataType::I64 => Some(Self::I64),
            _ => None,
        }
    }
}

impl fmt::Display for IndexWidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::I32 => "int32",
            Self::I64 => "int64",
        })
    }
}

/// The `ragged_offset` aux of a ragged primary: `[B + 1, 1, 1, 1]`, read per execute (never
/// cached), so each execute may bring different offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    /// The aux tensor's uid (`ragged_offset_tensor_uid` of the primary).
    pub uid: i64,
    /// INT32 or INT64.
    pub width: IndexWidth,
    /// `ragged_offset_multiplier`: element offset = stored value × multiplier.
    pub multiplier: Multiplier,
}

/// A `ragged_offset_multiplier`: at least 1. [`Multiplier::new`] is the only way to make one, so
/// no layer below the graph's conversion checks the rule again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Multiplier(i64);

impl Multiplier {
    /// Offsets that count elements.
    pub const ONE: Multiplier = Multiplier(1);

    /// `value` as a multiplier, or `None` below 1.
    pub fn new(value: i64) -> Option<Multiplier> {
        (value >= 1).then_some(Multiplier(value))
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Multiplier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The SDPA field that names the offsets aux, for messages.
pub const OFFSETS_ROLE: &str = "ragged_offset_tensor_uid";

/// One Q, K, V, O or stats tensor of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    /// Which SDPA field named it (`q_tensor_uid`, …), for messages.
    pub role: &'static str,
    /// Graph uid.
    pub uid: i64,
    /// Element type.
    pub dtype: DataType,
    /// Graph dims, in the graph's order (see [`Operand::axes`]); a dense LSE written token-major
    /// is held reordered to `[B, H, S, 1]`, its strides with it (same memory, see
    /// [`dense_stats_axes`]).
    pub dims: [i64; 4],
    /// Graph strides, in elements; a ragged tensor's batch stride is ignored.
    pub strides: [i64; 4],
    /// Declared pointer alignment in bytes.
    pub alignment: i64,
    /// The offsets of a ragged tensor; `None` when dense.
    pub ragged: Option<Offsets>,
}

impl Operand {
    /// Where this tensor's S and H sit.
    pub fn axes(&self) -> Axes {
        resolve_axes(&self.dims, &self.strides, self.ragged.is_some())
    }

    /// B.
    pub fn batch(&self) -> i64 {
        self.dims[self.axes().batch]
    }

    /// S_max: the padded sequence length.
    pub fn seq_max(&self) -> i64 {
        self.dims[self.axes().seq]
    }

    /// H.
    pub fn heads(&self) -> i64 {
        self.dims[self.axes().heads]
    }

    /// D (1 for the stats tensor).
    pub fn head_dim(&self) -> i64 {
        self.dims[self.axes().dim]
    }

    /// Elements between batches (ignored for ragged tensors).
    pub fn batch_stride(&self) -> i64 {
        self.strides[self.axes().batch]
    }

    /// `seqStride`: elements between consecutive tokens.
    pub fn seq_stride(&self) -> i64 {
        self.strides[self.axes().seq]
    }

    /// Elements between heads.
    pub fn head_stride(&self) -> i64 {
        self.strides[self.axes().heads]
    }

    /// Elements between head-dim entries.
    pub fn dim_stride(&self) -> i64 {
        self.strides[self.axes().dim]
    }

    /// `[B, S_max, H, D]` whatever the graph's order.
    pub fn bshd(&self) -> [i64; 4] {
        [self.batch(), self.seq_max(), self.heads(), self.head_dim()]
    }
}

/// An integer input read per execute: `seq_len_q` / `seq_len_kv` (`[B, 1, 1, 1]` or `[B]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexInput {
    /// Which SDPA field named it, for messages.
    pub role: &'static str,
    /// Graph uid.
    pub uid: i64,
    /// INT32 or INT64.
    pub width: IndexWidth,
}
