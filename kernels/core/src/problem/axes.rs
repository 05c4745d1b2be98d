//! Where a rank-4 tensor keeps its sequence and head axes.

/// Positions of the four logical axes inside a rank-4 `dims` / `strides` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axes {
    /// The batch axis (always 0).
    pub batch: usize,
    /// The sequence (token) axis.
    pub seq: usize,
    /// The head axis.
    pub heads: usize,
    /// The head-dim axis (always 3).
    pub dim: usize,
}

/// Sequence axis 1: `[B, S, H, D]`, the RFC's memory order for ragged tensors.
pub const SEQ_AXIS_1: Axes = Axes {
    batch: 0,
    seq: 1,
    heads: 2,
    dim: 3,
};

/// Sequence axis 2: hipDNN's logical `[B, H, S, D]` order.
pub const SEQ_AXIS_2: Axes = Axes {
    batch: 0,
    seq: 2,
    heads: 1,
    dim: 3,
};

/// The one place that decides where S and H sit (ragged-sdpa.md §1, revised 2026-12-01).
///
/// A ragged tensor's memory is BSHD-packed, but upstream writes its dims two ways: the RFC's
/// `[B, S_max, H, D]` (strides `{·, H·D, D, 1}`) and cuDNN's logical `[B, H, S_max, D]` over the
/// same memory (strides `{·, D, H·D, 1}`). Tokens are outermost within a batch, so the sequence
/// axis is the middle axis with the larger stride (upstream's data-SDK rule); with one head the
/// two strides tie and the larger dim is the sequence. The head axis is the other middle axis.
/// A dense tensor keeps hipDNN's logical `[B, H, S, D]` with any strides (a dense LSE written
/// token-major is reordered by [`dense_stats_axes`] before it reaches an [`Operand`]).
pub fn resolve_axes(dims: &[i64; 4], strides: &[i64; 4], ragged: bool) -> Axes {
    if !ragged {
        return SEQ_AXIS_2;
    }
    match strides[1].cmp(&strides[2]) {
        std::cmp::Ordering::Greater => SEQ_AXIS_1,
        std::cmp::Ordering::Less => SEQ_AXIS_2,
        std::cmp::Ordering::Equal if dims[2] > dims[1] => SEQ_AXIS_2,
        std::cmp::Ordering::Equal => SEQ_AXIS_1,
    }
}

/// The axes of a dense LSE tensor, which upstream writes head-major `[B, H_q, S_q, 1]` or
/// token-major `[B, S_q, H_q, 1]` with any strides: its strides cannot tell the two apart (a
/// head-major LSE has its largest middle stride on the head axis), so its dims are matched
/// against Q's S_max and heads. When S_max = H the dims are the same either way and hipDNN's
/// head-major reading wins; `None` when the dims match neither order.
pub fn dense_stats_axes(dims: &[i64; 4], q_seq_max: i64, q_heads: i64) -> Option<Axes> {
    if dims[3] != 1 {
        return None;
    }
    if [dims[1], dims[2]] == [q_heads, q_seq_max] {
        Some(SEQ_AXIS_2)
    } else if [dims[1], dims[2]] == [q_seq_max, q_heads] {
        Some(SEQ_AXIS_1)
    } else {
        None
    }
}

impl Axes {
    /// `values` (dims or strides, graph order) rearranged to `[B, H, S, D]`.
    pub fn to_bhsd(&self, values: &[i64; 4]) -> [i64; 4] {
        [
            values[self.batch],
            values[self.heads],
            values[self.seq],
            values[self.dim],
        ]
    }
}
