//! Per-tensor attention layouts (ragged-sdpa.md §1): where row s of head h of batch b starts.
//!
//! Ragged tensors are BSHD memory with batch b based at `ragged_offset[b]`, their dims in either
//! upstream order: the sequence axis is the one the tensor was built with (1 for `[B, S, H, D]`,
//! 2 for `[B, H, S, D]`, see [`axes`]) and the head axis is the other middle axis. Dense ones are hipDNN's `[B, H, S, D]` with any strides. Both reduce to a per-batch base plus three strides,
//! resolved once here so the kernel never asks a tensor anything per element.

use ragged_core::error::{KernelError, Role};
use ragged_core::problem::{Axes, SEQ_AXIS_1, SEQ_AXIS_2};
use ragged_core::tensor::Tensor;

/// Where S and H sit in a tensor of the SDK: dense ones are hipDNN's `[B, H, S, D]`, ragged ones
/// follow the sequence axis they were built with (the graph side decides that axis with
/// [`ragged_core::problem::resolve_axes`]). The one axis decision of the CPU forward and backward.
pub(crate) fn axes(role: Role, tensor: &dyn Tensor) -> Result<Axes, KernelError> {
    match tensor.ragged_iteration_info().map(|info| info.seq_axis) {
        None | Some(2) => Ok(SEQ_AXIS_2),
        Some(1) => Ok(SEQ_AXIS_1),
        Some(seq_axis) => Err(KernelError::SdpaSeqAxis { role, seq_axis }),
    }
}

/// Rows ahead of the one being staged whose lines are prefetched.
pub(crate) const AHEAD: usize = 8;

/// Asks for the cache lines of row `s` of head `h` of batch `b`: the rows of one head are a
/// whole token apart in a ragged tensor (4 KiB at H 8, D 128), too far for the hardware
/// prefetcher to follow.
#[inline(always)]
pub(crate) fn prefetch_row<T>(src: &[T], layout: &AttnLayout, (b, s, h): (usize, usize, usize)) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let first = src.as_ptr().wrapping_add(layout.position(b, s, h, 0));
        let bytes = layout.head_dim * layout.stride_d * std::mem::size_of::<T>();
        for offset in (0..bytes).step_by(64) {
            // SAFETY: SSE is part of the x86_64 baseline, and a prefetch never faults, whatever
            // the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(first.cast::<i8>().wrapping_add(offset)) };
        }
    }
}

/// Resolved geometry of one SDPA operand.
#[derive(Debug, Clone)]
pub(crate) struct AttnLayout {
    /// Based at ragged offsets, else dense `[B, H, S, D]`.
    pub ragged: bool,
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// Start of each batch in elements.
    pub base: Vec<usize>,
    /// Sequence extent of each batch in rows (S for dense tensors).
    pub extent: Vec<usize>,
    pub stride_s: usize,
    pub stride_h: usize,
    pub stride_d: usize,
    /// A paged K or V: row `s` of sequence `b` lies in page `T[b][s / ps]` of the pool at slot
    /// `s % ps` ([`PageMap`]); `base` is then unused.
    pub pages: Option<PageMap>,
}

/// The pages a paged operand's sequences read, resolved from a page table whose entries were
/// checked against the pool (paged-kv-and-sinks.md §2.5, §5.2): nothing outside the pool can be
/// addressed through it.
#[derive(Debug, Clone)]
pub(crate) struct PageMap {
    /// Tokens per page.
    pub page_size: usize,
    /// Per sequence: index of its first page in `page_base`.
    pub first: Vec<usize>,
    /// Element offset of each page a sequence reads, sequence by sequence.
    pub page_base: Vec<usize>,
}

impl AttnLayout {
    /// Position of element (b, s, h, d).
    #[inline]
    pub fn position(&self, b: usize, s: usize, h: usize, d: usize) -> usize {
        let (base, s) = match &self.pages {
            None => (self.base[b], s),
            Some(pages) => (
                pages.page_base[pages.first[b] + s / pages.page_size],
                s % pages.page_size,
            ),
        };
        base + s * self.stride_s + h * self.stride_h + d * self.stride_d
    }

    /// Resolves `tensor` playing `role`, checking that every row it will address lies in its
    /// buffer and, when ragged, inside its own batch's offset range.
    pub fn resolve(role: Role, tensor: &dyn Tensor) -> Result<Self, KernelError> {
        let dims = tensor.dims();
        if dims.len() != 4 {
            return Err(KernelError::SdpaRank {
                role,
                rank: dims.len(),
            });
        }
        let strides = tensor.strides();
        let to_usize = |axis: usize, values: &[i64], field: &'static str| {
            usize::try_from(values[axis]).map_err(|_| KernelError::SdpaDim {
                role,
                field,
                value: values[axis],
                expected: "non-negative".to_owned(),
            })
        };
        let batch = to_usize(0, dims, "batch")?;
        let info = tensor.ragged_iteration_info();
        let Axes {
            heads: h_axis,
            seq: s_axis,
            ..
        } = axes(role, tensor)?;
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
        let heads = to_usize(h_axis, dims, "heads")?;
        let seq = to_usize(s_axis, dims, "sequence")?;
        let head_dim = to_usize(3, dims, "head_dim")?;
        let stride_h = to_usize(h_axis, strides, "head stride")?;
        let stride_s = to_usize(s_axis, strides, "sequence stride")?;
        let stride_d = to_usize(3, strides, "head_dim stride")?;
        let (base, extent, limits) = match &info {
            Some(info) => {
                let offsets = &info.row_offsets;
                let base = offsets[..batch].iter().map(|&o| o as usize).collect();
                let extent = (0..batch).map(|b| info.extent(b) as usize).collect();
                let limits = offsets[1..].iter().map(|&o| Some(o)).collect();
                (base, extent, limits)
            }
            None => {
                let stride_b = to_usize(0, strides, "batch stride")?;
                // Dense geometry bounds this product for the SDK's own tensors, but not for any
                // `Tensor` implementation; check_reach needs the true base to reject it.
                let base = (0..batch)
                    .map(|b| {
                        b.checked_mul(stride_b).ok_or_else(|| KernelError::SdpaDim {
                            role,
                            field: "batch stride",
                            value: strides[0],
                            expected: format!("(B - 1) · stride within 64 bits for B = {batch}"),
                        })
                    })
                    .collect::<Result<_, _>>()?;
                (base, vec![seq; batch], vec![None; batch])
            }
        };
        let layout = AttnLayout {
            ragged: info.is_some(),
            batch,
            heads,
            head_dim,
            base,
            extent,
            stride_s,
            stride_h,
            stride_d,
            pages: None,
        };
        layout.check_reach(role, tensor.host_data().len(), &limits)?;
        Ok(layout)
    }

    /// Every batch's last element must lie in the buffer and before the next batch's offset.
    fn check_reach(
        &self,
        role: Role,
        buffer_len: usize,
        limits: &[Option<i64>],
    ) -> Result<(), KernelError> {
        let overflow = KernelError::Overflow {
            what: "SDPA element position",
        };
        for (b, &limit) in limits.iter().enumerate() {
            if self.extent[b] == 0 || self.heads == 0 || self.head_dim == 0 {
                continue;
            }
            let reach = [
                (self.extent[b] - 1, self.stride_s),
                (self.heads - 1, self.stride_h),
                (self.head_dim - 1, self.stride_d),
            ]
            .iter()
            .try_fold(self.base[b], |acc, &(n, s)| {
                n.checked_mul(s).and_then(|x| acc.checked_add(x))
            })
            .ok_or(overflow.clone())?;
            let end = reach.checked_add(1).ok_or(overflow.clone())?;
            if let Some(limit) = limit
                && end as i64 > limit
            {
                return Err(KernelError::RowsOutsideBatch {
                    role,
                    batch: b,
                    end: end as i64,
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
