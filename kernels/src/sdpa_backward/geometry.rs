//! Where token s of head h of batch b lives in each backward operand.
//!
//! Ragged operands come in either upstream form over the same token-major memory: dims
//! `[B, S, H, D]` (sequence axis 1) or `[B, H, S, D]` (sequence axis 2); the ragged layout
//! names its sequence axis and the head axis is the other one. Dense operands are hipDNN's
//! `[B, H, S, D]` with any strides. Either way an operand reduces to a base per batch plus three
//! strides, resolved here once so the passes never consult a tensor per element.

use crate::error::{KernelError, Role};
use crate::tensor::Tensor;

/// Resolved geometry of one operand.
#[derive(Debug, Clone)]
pub(super) struct Geometry {
    pub ragged: bool,
    pub batch: usize,
    pub heads: usize,
    /// The last dim: D_qk, D_v, or 1 for the LSE.
    pub width: usize,
    /// First element of each batch.
    pub base: Vec<usize>,
    /// Rows each batch holds (S for dense operands).
    pub extent: Vec<usize>,
    pub stride_s: usize,
    pub stride_h: usize,
    pub stride_d: usize,
}

/// `(head axis, sequence axis)` of a rank-4 operand: the one place that decides which is which.
fn axes(role: Role, tensor: &dyn Tensor) -> Result<(usize, usize), KernelError> {
    match tensor.ragged_iteration_info().map(|info| info.seq_axis) {
        None => Ok((1, 2)),
        Some(1) => Ok((2, 1)),
        Some(2) => Ok((1, 2)),
        Some(seq_axis) => Err(KernelError::BackwardSeqAxis { role, seq_axis }),
    }
}

impl Geometry {
    /// Buffer position of (b, s, h, d).
    #[inline]
    pub fn at(&self, b: usize, s: usize, h: usize, d: usize) -> usize {
        self.base[b] + s * self.stride_s + h * self.stride_h + d * self.stride_d
    }

    /// Resolves `tensor` in `role` and proves that every row it holds stays inside its buffer
    /// and, when ragged, inside its own batch's `[offset[b], offset[b + 1])`.
    pub fn of(role: Role, tensor: &dyn Tensor) -> Result<Self, KernelError> {
        let dims = tensor.dims();
        if dims.len() != 4 {
            return Err(KernelError::SdpaRank {
                role,
                rank: dims.len(),
            });
        }
        let strides = tensor.strides();
        let (h_axis, s_axis) = axes(role, tensor)?;
        let non_negative = |values: &[i64], axis: usize, field: &'static str| {
            usize::try_from(values[axis]).map_err(|_| KernelError::SdpaDim {
                role,
                field,
                value: values[axis],
                expected: "non-negative".to_owned(),
            })
        };
        let batch = non_negative(dims, 0, "batch")?;
        let heads = non_negative(dims, h_axis, "heads")?;
        let seq = non_negative(dims, s_axis, "sequence")?;
        let width = non_negative(dims, 3, "head_dim")?;
        let stride_s = non_negative(strides, s_axis, "sequence stride")?;
        let stride_h = non_negative(strides, h_axis, "head stride")?;
        let stride_d = non_negative(strides, 3, "head_dim stride")?;
        let info = tensor.ragged_iteration_info();
        if let Some(info) = &info
            && info.batch_count() != batch
        {
            return Err(KernelError::SdpaDim {
                role,
                field: "ragged_offset entries",
                value: info.row_offsets.len() as i64,
                expected: format!("B + 1 = {}", batch + 1),
            });
        }
        let (base, extent, ends): (Vec<usize>, Vec<usize>, Vec<Option<i64>>) = match &info {
            Some(info) => (
                info.row_offsets[..batch]
                    .iter()
                    .map(|&o| o as usize)
                    .collect(),
                (0..batch).map(|b| info.extent(b) as usize).collect(),
                info.row_offsets[1..=batch]
                    .iter()
                    .map(|&o| Some(o))
                    .collect(),
            ),
            None => {
                let stride_b = non_negative(strides, 0, "batch stride")?;
                let base = (0..batch)
                    .map(|b| {
                        b.checked_mul(stride_b).ok_or(KernelError::Overflow {
                            what: "SDPA backward batch base",
                        })
                    })
                    .collect::<Result<_, _>>()?;
                (base, vec![seq; batch], vec![None; batch])
            }
        };
        let geometry = Geometry {
            ragged: info.is_some(),
            batch,
            heads,
            width,
            base,
            extent,
            stride_s,
            stride_h,
            stride_d,
        };
        geometry.check_bounds(role, tensor.host_data().len(), &ends)?;
        Ok(geometry)
    }

    /// The last element of each non-empty batch, computed without overflow, must lie below the
    /// buffer length and (ragged) below the next batch's offset.
    fn check_bounds(
        &self,
        role: Role,
        buffer_len: usize,
        ends: &[Option<i64>],
    ) -> Result<(), KernelError> {
        if self.heads == 0 || self.width == 0 {
            return Ok(());
        }
        let overflow = || KernelError::Overflow {
            what: "SDPA backward element position",
        };
        for (b, end_of_batch) in ends.iter().enumerate() {
            let Some(last_row) = self.extent[b].checked_sub(1) else {
                continue;
            };
            let mut last = self.base[b];
            for (count, stride) in [
                (last_row, self.stride_s),
                (self.heads - 1, self.stride_h),
                (self.width - 1, self.stride_d),
            ] {
                last = count
                    .checked_mul(stride)
                    .and_then(|step| last.checked_add(step))
                    .ok_or_else(overflow)?;
            }
            let end = last.checked_add(1).ok_or_else(overflow)?;
            if let Some(limit) = *end_of_batch
                && i64::try_from(end).map_or(true, |e| e > limit)
            {
                return Err(KernelError::RowsOutsideBatch {
                    role,
                    batch: b,
                    end: i64::try_from(end).unwrap_or(i64::MAX),
                    next_batch: b + 1,
                    limit,
                });
            }
            if end > buffer_len {
                return Err(KernelError::BufferTooSmall {
                    required: end,
                    available: buffer_len,
                });
            }
        }
        Ok(())
    }
}
