//! The ragged-layout core shared by the owning and the shallow ragged tensor (RFC §4.5, §4.6's
//! `RaggedTensorBase<T>`): the type-erased `ragged_offset` aux, constructor-time validation,
//! per-batch addressing and the iteration snapshot.

use std::fmt;
use std::sync::Arc;

use crate::dtype::{DataType, HostData};
use crate::error::KernelError;

use super::Tensor;

/// Sequence axis of BSHD memory written with `[B, S, H, D]` dims (the RFC's order). The same
/// memory written with cuDNN's `[B, H, S, D]` dims has sequence axis 2; which one a graph tensor
/// uses is `problem::resolve_axes`'s answer, never this constant.
pub const BSHD_SEQ_AXIS: usize = 1;

/// What ragged traversal needs, snapshotted once so iteration never re-reads the aux.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaggedIterationInfo {
    /// The B + 1 batch start offsets in elements (multiplier applied).
    pub row_offsets: Arc<[i64]>,
    /// The caller-provided sequence axis.
    pub seq_axis: usize,
    /// `strides[seq_axis]`, positive.
    pub seq_stride: i64,
}

impl RaggedIterationInfo {
    /// Number of batches B.
    pub fn batch_count(&self) -> usize {
        self.row_offsets.len() - 1
    }

    /// Sequence extent of batch `b` in rows.
    pub fn extent(&self, b: usize) -> i64 {
        (self.row_offsets[b + 1] - self.row_offsets[b]) / self.seq_stride
    }
}

/// Reads `ragged_offset[b]`, widened to int64 and scaled to element units.
///
/// The one place the aux's runtime element type is looked at (RFC §4.5 item 1).
pub fn read_offset(aux: &dyn Tensor, b: usize, multiplier: i64) -> Result<i64, KernelError> {
    let stored = match aux.host_data() {
        HostData::I32(s) => s.get(b).map(|&v| i64::from(v)),
        HostData::I64(s) => s.get(b).copied(),
        other => {
            let dtype = other.data_type();
            return Err(KernelError::AuxElementType {
                dtype,
                size: dtype.size(),
            });
        }
    }
    .ok_or(KernelError::AuxElementCount {
        expected: b + 1,
        actual: aux.host_data().len(),
    })?;
    stored
        .checked_mul(multiplier)
        .ok_or(KernelError::OffsetOverflow {
            batch: b,
            stored,
            multiplier,
        })
}

/// Validated ragged geometry plus the aux it came from.
#[derive(Clone)]
pub struct RaggedLayout {
    dims: Vec<i64>,
    strides: Vec<i64>,
    seq_axis: usize,
    aux: Arc<dyn Tensor>,
    multiplier: i64,
    info: RaggedIterationInfo,
}

impl fmt::Debug for RaggedLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaggedLayout")
            .field("dims", &self.dims)
            .field("strides", &self.strides)
            .field("seq_axis", &self.seq_axis)
            .field("multiplier", &self.multiplier)
            .field("row_offsets", &self.info.row_offsets)
            .finish()
    }
}

impl RaggedLayout {
    /// Validates the geometry and the aux as RFC §4.5 item 5 lists, structural pass first so that
    /// [`read_offset`] only ever meets int32 or int64, then the content pass over the snapshot.
    ///
    /// The snapshot is what addressing uses afterwards: re-reading the aux on every access would
    /// let a caller who mutates it behind our back bypass the checks made here.
    pub fn new(
        dims: Vec<i64>,
        strides: Vec<i64>,
        seq_axis: usize,
        aux: Arc<dyn Tensor>,
        multiplier: i64,
    ) -> Result<Self, KernelError> {
        // Structural pass.
        if dims.is_empty() {
            return Err(KernelError::RaggedDimsEmpty);
        }
        if dims.len() != strides.len() {
            return Err(KernelError::StridesRankMismatch {
                dims: dims.len(),
                strides: strides.len(),
            });
        }
        for (axis, (&dim, &stride)) in dims.iter().zip(&strides).enumerate() {
            if dim < 0 {
                return Err(KernelError::NegativeDim { axis, value: dim });
            }
            if stride < 0 && axis != 0 && axis != seq_axis {
                return Err(KernelError::NegativeStride {
                    axis,
                    value: stride,
                });
            }
        }
        if seq_axis == 0 || seq_axis >= dims.len() {
            return Err(KernelError::SeqAxisOutOfRange {
                seq_axis,
                rank: dims.len(),
            });
        }
        let batches = usize::try_from(dims[0]).map_err(|_| KernelError::Overflow {
            what: "batch count",
        })?;
        if aux.element_count() != batches + 1 {
            return Err(KernelError::AuxElementCount {
                expected: batches + 1,
                actual: aux.element_count(),
            });
        }
        if aux.dims().len() != 4 {
            return Err(KernelError::AuxRank {
                rank: aux.dims().len(),
            });
        }
        if !matches!(aux.data_type(), DataType::I32 | DataType::I64) {
            return Err(KernelError::AuxElementType {
                dtype: aux.data_type(),
                size: aux.element_size(),
            });
        }
        if !aux.is_packed() {
            return Err(KernelError::AuxNotPacked {
                dims: aux.dims().to_vec(),
                strides: aux.strides().to_vec(),
            });
        }
        if multiplier < 1 {
            return Err(KernelError::MultiplierNotPositive { multiplier });
        }

        // Content pass over the snapshot.
        let offsets = (0..=batches)
            .map(|b| read_offset(aux.as_ref(), b, multiplier))
            .collect::<Result<Vec<i64>, _>>()?;
        if offsets[0] != 0 {
            return Err(KernelError::FirstOffsetNotZero { value: offsets[0] });
        }
        for b in 0..batches {
            if offsets[b + 1] < offsets[b] {
                return Err(KernelError::OffsetsDecrease {
                    batch: b,
                    value: offsets[b],
                    next_batch: b + 1,
                    next: offsets[b + 1],
                });
            }
        }
        let seq_stride = strides[seq_axis];
        if seq_stride <= 0 {
            return Err(KernelError::SeqStrideNotPositive {
                seq_axis,
                stride: seq_stride,
            });
        }
        let s_max = dims[seq_axis];
        for b in 0..batches {
            let elements = offsets[b + 1] - offsets[b];
            if elements % seq_stride != 0 {
                return Err(KernelError::PartialRow {
                    batch: b,
                    elements,
                    multiplier,
                    seq_stride,
                });
            }
            let extent = elements / seq_stride;
            if extent > s_max {
                return Err(KernelError::ExtentAboveMax {
                    batch: b,
                    extent,
                    s_max,
                });
            }
        }
        Ok(RaggedLayout {
            dims,
            strides,
            seq_axis,
            aux,
            multiplier,
            info: RaggedIterationInfo {
                row_offsets: offsets.into(),
                seq_axis,
                seq_stride,
            },
        })
    }

    /// Padded dims (S_max on the sequence axis).
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// Strides; `strides[0]` is never used (and not validated): batches start at their offsets.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// The caller-provided sequence axis.
    pub fn seq_axis(&self) -> usize {
        self.seq_axis
    }

    /// The aux this layout was built from (never reseated).
    pub fn ragged_offset(&self) -> &Arc<dyn Tensor> {
        &self.aux
    }

    /// ragged_offset_multiplier.
    pub fn multiplier(&self) -> i64 {
        self.multiplier
    }

    /// Number of batches B.
    pub fn batch_count(&self) -> usize {
        self.info.batch_count()
    }

    /// Start of batch `b` in elements.
    pub fn offset(&self, b: usize) -> i64 {
        self.info.row_offsets[b]
    }

    /// Sequence extent of batch `b` in rows.
    pub fn extent(&self, b: usize) -> i64 {
        self.info.extent(b)
    }

    /// `ragged_offset[B]` in elements: what the tensor iterates and the buffer must hold.
    pub fn total_elements(&self) -> i64 {
        self.info.row_offsets[self.batch_count()]
    }

    /// The iteration snapshot.
    pub fn iteration_info(&self) -> RaggedIterationInfo {
        self.info.clone()
    }

    /// Fails unless a buffer of `buffer_len` elements holds every batch.
    pub fn check_buffer(&self, buffer_len: usize) -> Result<(), KernelError> {
        let total = self.total_elements();
        if usize::try_from(total).map_or(true, |t| t > buffer_len) {
            return Err(KernelError::OffsetsBeyondBuffer { total, buffer_len });
        }
        Ok(())
    }

    /// Buffer position of `{b, s, …}`: `offset(b) + Σ_{axis ≥ 1} index·stride`, with the sequence
    /// index checked against the batch's own extent rather than S_max (the RFC leaves that access
    /// unspecified; reading the next batch's rows silently would hide bugs).
    ///
    /// Construction only proves that whole rows tile each batch; the other strides come from the
    /// caller unchecked, so the sum is checked arithmetic and the result must still fall inside
    /// the batch's own offset range: a head stride wider than the sequence stride would otherwise
    /// address the next batch's rows without an error.
    pub fn index(&self, index: &[i64]) -> Result<usize, KernelError> {
        let b = index[0];
        if b < 0 || b >= self.dims[0] {
            return Err(KernelError::IndexOutOfBounds {
                axis: 0,
                index: b,
                extent: self.dims[0],
            });
        }
        let batch = b as usize;
        let mut position = self.offset(batch);
        for (axis, &i) in index.iter().enumerate().skip(1) {
            if axis == self.seq_axis {
                let extent = self.extent(batch);
                if i < 0 || i >= extent {
                    return Err(KernelError::SeqIndexOutOfBounds {
                        batch,
                        index: i,
                        extent,
                    });
                }
            } else if i < 0 || i >= self.dims[axis] {
                return Err(KernelError::IndexOutOfBounds {
                    axis,
                    index: i,
                    extent: self.dims[axis],
                });
            }
            position = i
                .checked_mul(self.strides[axis])
                .and_then(|step| position.checked_add(step))
                .ok_or(KernelError::Overflow {
                    what: "element position",
                })?;
        }
        let (start, limit) = (self.offset(batch), self.offset(batch + 1));
        if position < start || position >= limit {
            return Err(KernelError::ElementOutsideBatch {
                index: index.to_vec(),
                batch,
                position,
                start,
                next_batch: batch + 1,
                limit,
            });
        }
        usize::try_from(position).map_err(|_| KernelError::Overflow {
            what: "element position",
        })
    }
}
