//! Device workspace of one execution (ragged-sdpa.md §7.4, "Workspace").
//!
//! AITER needs int32 token starts (and, in configuration 2, cumulative logical lengths) that
//! exist nowhere in the graph, plus an LSE scratch in its own `(H_q, total_q)` layout; the
//! fix-up needs per-batch logical lengths. All of it lives in the hipDNN workspace so that an
//! execution allocates nothing. Regions are 256-byte aligned, which every AMD and NVIDIA
//! load width is content with, and the plan carries 255 bytes of slack so that a workspace
//! pointer of any alignment can be rounded up instead of rejected.

use super::problem::{AiterProblem, LseLayout};

/// Alignment of every region, and of the base after rounding.
pub const WORKSPACE_ALIGN: usize = 256;

/// A byte range of the workspace, relative to the aligned base.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    /// Offset from the aligned base, a multiple of [`WORKSPACE_ALIGN`].
    pub offset: usize,
    /// Bytes used (the next region starts at the next aligned offset).
    pub bytes: usize,
}

/// Where each array lives. Sizes come from graph dims only: nothing is read from the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspacePlan {
    /// int32 `[B+1]`: physical token starts of Q (AITER `seqstart_q_ptr`).
    pub seqstart_q: Region,
    /// int32 `[B+1]`: physical token starts of K/V (AITER `seqstart_k_ptr`).
    pub seqstart_k: Region,
    /// int32 `[B]`: Lq(b), read by the fix-up.
    pub len_q: Region,
    /// int32 `[B]`: Lkv(b), read by the fix-up.
    pub len_kv: Region,
    /// int32 `[B+1]` cumulative Lq (AITER `cu_seqlen_q_ptr`), only with `seq_len_q`.
    pub cu_seqlen_q: Option<Region>,
    /// int32 `[B+1]` cumulative Lkv (AITER `cu_seqlen_k_ptr`), only with `seq_len_kv`.
    pub cu_seqlen_k: Option<Region>,
    /// u32: the pre-pass's precondition bits (`RAGGED_STATUS_*` in the kernel source).
    pub status: Region,
    /// f32 `[H_q, B·S_q_max]` (`[H_q, T_q]` for packed paged Q): AITER's LSE output, only when
    /// stats are requested.
    pub lse_scratch: Option<Region>,
    /// Bytes the caller must provide, slack for base alignment included.
    pub size: usize,
}

fn align_up(n: usize) -> usize {
    n.div_ceil(WORKSPACE_ALIGN).saturating_mul(WORKSPACE_ALIGN)
}

struct Cursor(usize);

impl Cursor {
    fn take(&mut self, bytes: usize) -> Region {
        let region = Region {
            offset: self.0,
            bytes,
        };
        self.0 = align_up(self.0.saturating_add(bytes));
        region
    }
}

impl WorkspacePlan {
    /// Lays out the workspace. Callers have already checked the problem with
    /// [`check_applicability`](super::check_applicability), so the products fit (the engine
    /// declines any problem whose element indices reach 2³¹).
    pub fn for_problem(problem: &AiterProblem) -> Self {
        let batch = usize::try_from(problem.batch).unwrap_or(0);
        let rows = usize::try_from(problem.q_rows_total()).unwrap_or(0);
        let heads = usize::try_from(problem.q.heads).unwrap_or(0);
        let int = std::mem::size_of::<i32>();
        let mut cursor = Cursor(0);
        let seqstart_q = cursor.take(batch.saturating_add(1).saturating_mul(int));
        let seqstart_k = cursor.take(batch.saturating_add(1).saturating_mul(int));
        let len_q = cursor.take(batch.saturating_mul(int));
        let len_kv = cursor.take(batch.saturating_mul(int));
        let cu_seqlen_q = problem
            .seq_len_q
            .map(|_| cursor.take(batch.saturating_add(1).saturating_mul(int)));
        let cu_seqlen_k = problem
            .seq_len_kv
            .map(|_| cursor.take(batch.saturating_add(1).saturating_mul(int)));
        let status = cursor.take(std::mem::size_of::<u32>());
        let lse_scratch = match problem.lse {
            LseLayout::None => None,
            LseLayout::Dense { .. } | LseLayout::Ragged { .. } => Some(
                cursor.take(
                    heads
                        .saturating_mul(rows)
                        .saturating_mul(std::mem::size_of::<f32>()),
                ),
            ),
        };
        Self {
            seqstart_q,
            seqstart_k,
            len_q,
            len_kv,
            cu_seqlen_q,
            cu_seqlen_k,
            status,
            lse_scratch,
            size: cursor.0.saturating_add(WORKSPACE_ALIGN - 1),
        }
    }

    /// AITER's LSE scratch row stride (`nhead_stride_lse`): one slot per physical query row.
    pub fn scratch_head_stride(problem: &AiterProblem) -> i64 {
        problem.q_rows_total()
    }
}

/// Rounds a workspace pointer up to [`WORKSPACE_ALIGN`]; the plan's slack pays for it.
pub fn aligned_base(address: usize) -> usize {
    address
        .div_ceil(WORKSPACE_ALIGN)
        .saturating_mul(WORKSPACE_ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::base_problem;
    use crate::problem::{IndexWidth, SeqLens};

    #[test]
    fn regions_are_256_aligned_and_sized_from_dims() {
        // B = 2, H_q = 4, S_q_max = 8, dense stats.
        let p = AiterProblem {
            lse: LseLayout::Dense {
                uid: 9,
                strides: [32, 8, 1, 1],
                alignment: 16,
            },
            seq_len_q: Some(SeqLens {
                uid: 30,
                width: IndexWidth::I32,
            }),
            ..base_problem()
        };
        let w = WorkspacePlan::for_problem(&p);
        assert_eq!(
            w.seqstart_q,
            Region {
                offset: 0,
                bytes: 12
            }
        );
        assert_eq!(
            w.seqstart_k,
            Region {
                offset: 256,
                bytes: 12
            }
        );
        assert_eq!(
            w.len_q,
            Region {
                offset: 512,
                bytes: 8
            }
        );
        assert_eq!(
            w.len_kv,
            Region {
                offset: 768,
                bytes: 8
            }
        );
        assert_eq!(
            w.cu_seqlen_q,
            Some(Region {
                offset: 1024,
                bytes: 12
            })
        );
        assert_eq!(w.cu_seqlen_k, None);
        assert_eq!(
            w.status,
            Region {
                offset: 1280,
                bytes: 4
            }
        );
        // 4 heads × 16 padded rows × 4 bytes
        assert_eq!(
            w.lse_scratch,
            Some(Region {
                offset: 1536,
                bytes: 256
            })
        );
        assert_eq!(w.size, 1792 + 255);
        assert_eq!(WorkspacePlan::scratch_head_stride(&p), 16);
    }

    #[test]
    fn no_stats_no_scratch() {
        let w = WorkspacePlan::for_problem(&base_problem());
        assert_eq!(w.lse_scratch, None);
        assert_eq!(w.size, 1280 + 255);
    }

    #[test]
    fn base_rounding_stays_within_the_slack() {
        assert_eq!(aligned_base(0x1000), 0x1000);
        assert_eq!(aligned_base(0x1001), 0x1100);
        for addr in [0x1001usize, 0x10ff, 0x1100] {
            assert!(aligned_base(addr) - addr < WORKSPACE_ALIGN);
        }
    }
}
