//! Multi-index traversal: dense over `dims`, ragged batch by batch (RFC `RaggedCompositeIndex`).

use super::ragged_layout::RaggedIterationInfo;

/// Iterator over every addressable multi-index of a tensor, in row-major order.
///
/// For ragged tensors the sequence axis of batch b is bounded by `extent(b)` and every other
/// non-batch axis by its dim, from offsets snapshotted when the iterator was made; the count of
/// visited indices is `ragged_offset[B]` whenever rows are packed (`seq_stride` = product of the
/// other non-batch dims), which BSHD packing guarantees.
#[derive(Debug, Clone)]
pub struct TensorIndices {
    dims: Vec<i64>,
    ragged: Option<RaggedIterationInfo>,
    current: Vec<i64>,
    done: bool,
}

impl TensorIndices {
    pub(super) fn new(dims: &[i64], ragged: Option<RaggedIterationInfo>) -> Self {
        let mut it = TensorIndices {
            dims: dims.to_vec(),
            ragged,
            current: vec![0; dims.len()],
            done: false,
        };
        if dims.is_empty() {
            return it;
        }
        it.settle_batch(0);
        it
    }

    fn bound(&self, batch: i64, axis: usize) -> i64 {
        match &self.ragged {
            Some(info) if axis == info.seq_axis => info.extent(batch as usize),
            _ => self.dims[axis],
        }
    }

    /// Moves to the first batch at or after `batch` that has at least one index.
    fn settle_batch(&mut self, mut batch: i64) {
        let rank = self.dims.len();
        while batch < self.dims[0] && (1..rank).any(|axis| self.bound(batch, axis) <= 0) {
            batch += 1;
        }
        if batch >= self.dims[0] {
            self.done = true;
        } else {
            self.current.fill(0);
            self.current[0] = batch;
        }
    }
}

impl Iterator for TensorIndices {
    type Item = Vec<i64>;

    fn next(&mut self) -> Option<Vec<i64>> {
        if self.done {
            return None;
        }
        let out = self.current.clone();
        if self.dims.is_empty() {
            self.done = true;
            return Some(out);
        }
        let batch = self.current[0];
        for axis in (1..self.dims.len()).rev() {
            self.current[axis] += 1;
            if self.current[axis] < self.bound(batch, axis) {
                return Some(out);
            }
            self.current[axis] = 0;
        }
        self.settle_batch(batch + 1);
        Some(out)
    }
}
