//! Problem → `ragged_aiter_fwd_args`, exactly as ragged-sdpa.md §7.4 tabulates it.
//!
//! This is the only module that knows AITER's conventions: group mode, token-unit starts,
//! strides in elements, bottom-right causal, the `(H_q, total_q)` LSE. It is pure (pointer
//! values are just numbers here), so every configuration is tested on machines without ROCm.

use std::ffi::c_void;

use super::applicability::AiterPlan;
use super::problem::{AiterProblem, LseLayout, is_unmasked};
use super::shim_abi::{
    DTYPE_BF16, DTYPE_FP8BF16, DTYPE_FP16, MASK_BOTTOM_RIGHT, MASK_NONE, MASK_TOP_LEFT,
    QSCALE_NONE, QSCALE_PERTENSOR, RaggedAiterFwdArgs,
};
use super::workspace::{Region, WorkspacePlan};
use ragged_core::{DataType, DiagonalAlignment};

/// Device addresses one execution uses. Plain numbers: the mapping never dereferences them.
/// The default (all 0) is for the shim's calls that read no buffer (preflight, v3 check).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceBuffers {
    /// Q's base pointer.
    pub q: usize,
    /// K's base pointer.
    pub k: usize,
    /// V's base pointer.
    pub v: usize,
    /// O's base pointer.
    pub o: usize,
    /// Q's (and O's) ragged offsets.
    pub q_offsets: usize,
    /// K's (and V's) ragged offsets.
    pub k_offsets: usize,
    /// `seq_len_q`, or 0.
    pub seq_len_q: usize,
    /// `seq_len_kv`, or 0.
    pub seq_len_kv: usize,
    /// The stats tensor, or 0.
    pub lse: usize,
    /// The stats tensor's ragged offsets, or 0.
    pub lse_offsets: usize,
    /// The workspace as the caller passed it (rounded up inside).
    pub workspace: usize,
    /// An FP8 forward's `descale_q` device tensor (one f32), or 0.
    pub q_descale: usize,
    /// `descale_k`, as `q_descale`.
    pub k_descale: usize,
    /// `descale_v`, as `q_descale`.
    pub v_descale: usize,
}

/// A count or stride as the shim's `int`, saturating (applicability keeps real ones in range).
pub(super) fn clamp_i32(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// The shim's `data_type` code. Applicability admits HALF, BFLOAT16 and the FP8 formats it
/// pairs with AITER's `fp8bf16` kernels, so everything else is HALF's branch.
pub(super) fn shim_data_type(dtype: DataType) -> i32 {
    match dtype {
        DataType::BF16 => DTYPE_BF16,
        DataType::Fp8(_) => DTYPE_FP8BF16,
        _ => DTYPE_FP16,
    }
}

/// Absolute address of a workspace region, given the aligned workspace base.
pub fn region_address(base: usize, region: Region) -> usize {
    base + region.offset
}

fn ptr_i32(address: usize) -> *const i32 {
    address as *const i32
}

/// `(mask_type, window_size_left, window_size_right)` for AITER (§7.4 `mask_type` row).
pub fn aiter_mask(problem: &AiterProblem) -> (i32, i32, i32) {
    let mask = &problem.mask;
    if is_unmasked(mask) {
        return (MASK_NONE, -1, -1);
    }
    let left = mask.left.map_or(-1, clamp_i32);
    let right = mask.right.map_or(-1, clamp_i32);
    let kind = match mask.alignment {
        DiagonalAlignment::TopLeft => MASK_TOP_LEFT,
        DiagonalAlignment::BottomRight => MASK_BOTTOM_RIGHT,
    };
    (kind, left, right)
}

/// Builds the shim arguments. `aligned_workspace` is the workspace base after
/// [`aligned_base`](super::workspace::aligned_base); `stream` is the `hipStream_t`.
pub fn shim_args(
    problem: &AiterProblem,
    plan: &AiterPlan,
    buffers: &DeviceBuffers,
    aligned_workspace: usize,
    stream: usize,
) -> RaggedAiterFwdArgs {
    let ws: &WorkspacePlan = &plan.workspace;
    let at = |r: Region| region_address(aligned_workspace, r);
    let (mask_type, window_size_left, window_size_right) = aiter_mask(problem);
    let has_lse = !matches!(problem.lse, LseLayout::None);
    // Per-tensor descales: AITER reads element 0 of each (batch and head strides 0).
    let (qscale_type, [q_descale_ptr, k_descale_ptr, v_descale_ptr]) = match plan.fp8 {
        Some(_) => (
            QSCALE_PERTENSOR,
            [buffers.q_descale, buffers.k_descale, buffers.v_descale].map(|a| a as *const f32),
        ),
        None => (QSCALE_NONE, [std::ptr::null(); 3]),
    };
    RaggedAiterFwdArgs {
        struct_size: u32::try_from(std::mem::size_of::<RaggedAiterFwdArgs>()).unwrap_or(0),
        data_type: shim_data_type(problem.dtype),
        q_ptr: buffers.q as *const c_void,
        k_ptr: buffers.k as *const c_void,
        v_ptr: buffers.v as *const c_void,
        o_ptr: buffers.o as *mut c_void,
        lse_ptr: ws
            .lse_scratch
            .map_or(std::ptr::null_mut(), |r| at(r) as *mut c_void),
        seqstart_q_ptr: ptr_i32(at(ws.seqstart_q)),
        seqstart_k_ptr: ptr_i32(at(ws.seqstart_k)),
        cu_seqlen_q_ptr: ws.cu_seqlen_q.map_or(std::ptr::null(), |r| ptr_i32(at(r))),
        cu_seqlen_k_ptr: ws.cu_seqlen_k.map_or(std::ptr::null(), |r| ptr_i32(at(r))),
        stream: stream as *mut c_void,
        batch: clamp_i32(problem.batch),
        max_seqlen_q: clamp_i32(problem.s_q_max),
        seqlen_q: clamp_i32(problem.q_rows_total()),
        seqlen_k: clamp_i32(problem.batch.saturating_mul(problem.s_kv_max)),
        hdim_q: clamp_i32(problem.q.head_dim),
        hdim_v: clamp_i32(problem.v.head_dim),
        nhead_q: clamp_i32(problem.q.heads),
        nhead_k: clamp_i32(problem.k.heads),
        stride_q: clamp_i32(problem.q.seq_stride),
        stride_k: clamp_i32(problem.k.seq_stride),
        stride_v: clamp_i32(problem.v.seq_stride),
        stride_o: clamp_i32(problem.o.seq_stride),
        nhead_stride_q: clamp_i32(problem.q.head_stride),
        nhead_stride_k: clamp_i32(problem.k.head_stride),
        nhead_stride_v: clamp_i32(problem.v.head_stride),
        nhead_stride_o: clamp_i32(problem.o.head_stride),
        nhead_stride_lse: if has_lse {
            clamp_i32(WorkspacePlan::scratch_head_stride(problem))
        } else {
            0
        },
        mask_type,
        window_size_left,
        window_size_right,
        scale_s: problem.scale,
        has_lse: i32::from(has_lse),
        use_asm_v3: i32::from(plan.use_asm_v3),
        v3_api_check: 0,
        how_v3_bf16_cvt: plan.how_v3_bf16_cvt,
        qscale_type,
        q_descale_ptr,
        k_descale_ptr,
        v_descale_ptr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability::{GpuArch, check_applicability};
    use crate::fixtures::{self, base_problem, operand};
    use crate::problem::{IndexWidth, RaggedAux, SeqLens};
    use ragged_core::MaskBand;

    fn map(p: &AiterProblem, base: usize, stream: usize) -> RaggedAiterFwdArgs {
        let plan = check_applicability(p, &GpuArch::new("gfx942:sramecc+:xnack-"), "gfx942")
            .expect("taken");
        shim_args(p, &plan, &fixtures::buffers(), base, stream)
    }

    /// The configuration of `shared/testdata/wire/graph.json`: bf16, B = 2, H_q = 2, H_kv = 1,
    /// D = 16, Q/O on aux 5 and K/V on aux 6 (int32, element units), causal bottom-right,
    /// scale 0.25, dense stats uid 9 with strides [6, 3, 1, 1].
    fn golden_wire_graph() -> AiterProblem {
        AiterProblem {
            batch: 2,
            s_q_max: 3,
            s_kv_max: 4,
            q: operand(1, 2, 16, 5),
            k: operand(2, 1, 16, 6),
            v: operand(3, 1, 16, 6),
            o: operand(4, 2, 16, 5),
            mask: MaskBand {
                left: None,
                right: Some(0),
                alignment: DiagonalAlignment::BottomRight,
            },
            scale: 0.25,
            lse: LseLayout::Dense {
                uid: 9,
                strides: [6, 3, 1, 1],
                alignment: 16,
            },
            ..base_problem()
        }
    }

    #[test]
    fn golden_wire_graph_maps_to_group_mode_bottom_right_causal() {
        // Workspace (B = 2): seqstart_q @0, seqstart_k @256, len_q @512, len_kv @768,
        // status @1024, LSE scratch @1280 = 0x500 (2 heads × 6 rows × 4 bytes).
        let expected = "RaggedAiterFwdArgs {
    struct_size: 216,
    data_type: 1,
    q_ptr: 0x0000000000001000,
    k_ptr: 0x0000000000002000,
    v_ptr: 0x0000000000003000,
    o_ptr: 0x0000000000004000,
    lse_ptr: 0x0000000000010500,
    seqstart_q_ptr: 0x0000000000010000,
    seqstart_k_ptr: 0x0000000000010100,
    cu_seqlen_q_ptr: 0x0000000000000000,
    cu_seqlen_k_ptr: 0x0000000000000000,
    stream: 0x0000000000000077,
    batch: 2,
    max_seqlen_q: 3,
    seqlen_q: 6,
    seqlen_k: 8,
    hdim_q: 16,
    hdim_v: 16,
    nhead_q: 2,
    nhead_k: 1,
    stride_q: 32,
    stride_k: 16,
    stride_v: 16,
    stride_o: 32,
    nhead_stride_q: 16,
    nhead_stride_k: 16,
    nhead_stride_v: 16,
    nhead_stride_o: 16,
    nhead_stride_lse: 6,
    mask_type: 2,
    window_size_left: -1,
    window_size_right: 0,
    scale_s: 0.25,
    has_lse: 1,
    use_asm_v3: 1,
    v3_api_check: 0,
    how_v3_bf16_cvt: 0,
    qscale_type: 0,
    q_descale_ptr: 0x0000000000000000,
    k_descale_ptr: 0x0000000000000000,
    v_descale_ptr: 0x0000000000000000,
}";
        assert_eq!(
            format!("{:#?}", map(&golden_wire_graph(), 0x10000, 0x77)),
            expected
        );
    }

    /// Configuration 2 (seq_lens), fp16, GQA 8:2, D = 64, Q/O offsets in token units
    /// (multiplier H·D), top-left sliding window (left 4, causal right), ragged stats.
    fn padded_top_left() -> AiterProblem {
        let mut q = operand(1, 8, 64, 20);
        let mut o = operand(4, 8, 64, 20);
        q.aux.multiplier = 512;
        o.aux.multiplier = 512;
        AiterProblem {
            dtype: DataType::F16,
            o_dtype: DataType::F16,
            batch: 3,
            s_q_max: 5,
            s_kv_max: 7,
            packed_q_rows: None,
            q,
            k: operand(2, 2, 64, 21),
            v: operand(3, 2, 64, 21),
            o,
            seq_len_q: Some(SeqLens {
                uid: 30,
                width: IndexWidth::I64,
            }),
            seq_len_kv: Some(SeqLens {
                uid: 31,
                width: IndexWidth::I32,
            }),
            mask: MaskBand {
                left: Some(4),
                right: Some(0),
                alignment: DiagonalAlignment::TopLeft,
            },
            scale: 0.125,
            lse: LseLayout::Ragged {
                uid: 9,
                seq_stride: 8,
                head_stride: 1,
                aux: RaggedAux {
                    uid: 22,
                    width: IndexWidth::I32,
                    multiplier: 8,
                },
                alignment: 256,
            },
            fp8: None,
        }
    }

    #[test]
    fn padded_batches_map_to_cumulative_logical_lengths_and_top_left_without_asm() {
        // Workspace (B = 3): seqstart_q @0, seqstart_k @256, len_q @512, len_kv @768,
        // cu_seqlen_q @1024, cu_seqlen_k @1280, status @1536, scratch @1792 = 0x700.
        let expected = "RaggedAiterFwdArgs {
    struct_size: 216,
    data_type: 0,
    q_ptr: 0x0000000000001000,
    k_ptr: 0x0000000000002000,
    v_ptr: 0x0000000000003000,
    o_ptr: 0x0000000000004000,
    lse_ptr: 0x0000000000020700,
    seqstart_q_ptr: 0x0000000000020000,
    seqstart_k_ptr: 0x0000000000020100,
    cu_seqlen_q_ptr: 0x0000000000020400,
    cu_seqlen_k_ptr: 0x0000000000020500,
    stream: 0x0000000000000000,
    batch: 3,
    max_seqlen_q: 5,
    seqlen_q: 15,
    seqlen_k: 21,
    hdim_q: 64,
    hdim_v: 64,
    nhead_q: 8,
    nhead_k: 2,
    stride_q: 512,
    stride_k: 128,
    stride_v: 128,
    stride_o: 512,
    nhead_stride_q: 64,
    nhead_stride_k: 64,
    nhead_stride_v: 64,
    nhead_stride_o: 64,
    nhead_stride_lse: 15,
    mask_type: 1,
    window_size_left: 4,
    window_size_right: 0,
    scale_s: 0.125,
    has_lse: 1,
    use_asm_v3: 0,
    v3_api_check: 0,
    how_v3_bf16_cvt: 0,
    qscale_type: 0,
    q_descale_ptr: 0x0000000000000000,
    k_descale_ptr: 0x0000000000000000,
    v_descale_ptr: 0x0000000000000000,
}";
        assert_eq!(
            format!("{:#?}", map(&padded_top_left(), 0x20000, 0)),
            expected
        );
    }

    #[test]
    fn without_stats_there_is_no_lse_scratch() {
        let a = map(&base_problem(), 0x40000, 0);
        assert!(a.lse_ptr.is_null());
        assert_eq!((a.has_lse, a.nhead_stride_lse), (0, 0));
        assert!(a.cu_seqlen_q_ptr.is_null() && a.cu_seqlen_k_ptr.is_null());
        assert_eq!(
            (a.mask_type, a.window_size_left, a.window_size_right),
            (0, -1, -1)
        );
    }

    #[test]
    fn mask_table_of_section_7_4() {
        let band = |left, right, alignment| AiterProblem {
            mask: MaskBand {
                left,
                right,
                alignment,
            },
            ..base_problem()
        };
        use DiagonalAlignment::{BottomRight as Br, TopLeft as Tl};
        let cases = [
            (band(None, None, Tl), (MASK_NONE, -1, -1)),
            (band(None, None, Br), (MASK_NONE, -1, -1)),
            (band(None, Some(0), Tl), (MASK_TOP_LEFT, -1, 0)),
            (band(None, Some(0), Br), (MASK_BOTTOM_RIGHT, -1, 0)),
            (band(Some(3), Some(2), Br), (MASK_BOTTOM_RIGHT, 3, 2)),
            (band(Some(5), None, Tl), (MASK_TOP_LEFT, 5, -1)),
        ];
        for (p, want) in cases {
            assert_eq!(aiter_mask(&p), want, "{:?}", p.mask);
        }
    }

    #[test]
    fn only_bf16_is_sent_as_bf16() {
        assert_eq!(map(&base_problem(), 0, 0).data_type, DTYPE_BF16);
        let half = AiterProblem {
            dtype: DataType::F16,
            o_dtype: DataType::F16,
            ..base_problem()
        };
        assert_eq!(map(&half, 0, 0).data_type, DTYPE_FP16);
    }

    /// FP8 on gfx942: AITER's "fp8bf16" with per-tensor descales, the descale addresses the
    /// call bound, and the bf16_cvt its table lists for those kernels; the rest as for bf16.
    #[test]
    fn fp8_sends_fp8bf16_per_tensor_descales_and_gfx942s_bf16_cvt() {
        let p = fixtures::fp8_problem();
        let a = map(&p, 0x40000, 0x77);
        assert_eq!(
            (a.data_type, a.qscale_type, a.how_v3_bf16_cvt),
            (DTYPE_FP8BF16, QSCALE_PERTENSOR, 1)
        );
        assert_eq!(
            [a.q_descale_ptr, a.k_descale_ptr, a.v_descale_ptr].map(|p| p as usize),
            [0xf100, 0xf200, 0xf300]
        );
        let bf16 = map(&base_problem(), 0x40000, 0x77);
        assert_eq!(
            RaggedAiterFwdArgs {
                data_type: DTYPE_BF16,
                qscale_type: QSCALE_NONE,
                how_v3_bf16_cvt: 0,
                q_descale_ptr: std::ptr::null(),
                k_descale_ptr: std::ptr::null(),
                v_descale_ptr: std::ptr::null(),
                ..a
            },
            bf16,
            "only the FP8 fields differ from the same problem in bf16"
        );
        let gfx950 = AiterProblem {
            dtype: DataType::Fp8(ragged_core::Fp8Format::E4M3),
            fp8: p.fp8.map(|f| ragged_core::problem::Fp8Forward {
                input: ragged_core::Fp8Format::E4M3,
                ..f
            }),
            ..p
        };
        let plan = check_applicability(&gfx950, &GpuArch::new("gfx950"), "gfx950").expect("taken");
        let a = shim_args(&gfx950, &plan, &fixtures::buffers(), 0, 0);
        assert_eq!((a.data_type, a.how_v3_bf16_cvt), (DTYPE_FP8BF16, 0));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use crate::applicability::{GpuArch, check_applicability};
    use crate::fixtures::operand;
    use crate::problem::{IndexWidth, SeqLens};
    use proptest::prelude::*;
    use ragged_core::MaskBand;

    prop_compose! {
        fn problems()(
            batch in prop_oneof![1i64..16, 1i64..5000],
            s_q_max in prop_oneof![1i64..64, 1i64..70_000],
            s_kv_max in prop_oneof![1i64..64, 1i64..70_000],
            heads_kv in 1i64..9,
            group in 1i64..9,
            d_qk in prop::sample::select(vec![8i64, 64, 96, 128, 192, 256, 264]),
            d_v in prop::sample::select(vec![8i64, 64, 128, 256]),
            seq_lens in any::<bool>(),
            mask in prop::sample::select(vec![None, Some((None, Some(0))), Some((Some(7), Some(3)))]),
            bottom_right in any::<bool>(),
            stats in 0u8..3,
        ) -> AiterProblem {
            let heads_q = heads_kv * group;
            let mut q = operand(1, heads_q, d_qk, 10);
            let mut o = operand(4, heads_q, d_v, 10);
            let mut k = operand(2, heads_kv, d_qk, 11);
            let mut v = operand(3, heads_kv, d_v, 11);
            // token-unit offsets keep Q/O and K/V on one aux each whatever the head dims
            q.aux.multiplier = q.seq_stride;
            o.aux.multiplier = o.seq_stride;
            k.aux.multiplier = k.seq_stride;
            v.aux.multiplier = v.seq_stride;
            let lens = seq_lens.then_some(SeqLens { uid: 30, width: IndexWidth::I64 });
            AiterProblem {
                dtype: DataType::BF16,
                o_dtype: DataType::BF16,
                batch,
                s_q_max,
                s_kv_max,
                packed_q_rows: None,
                q,
                k,
                v,
                o,
                seq_len_q: lens,
                seq_len_kv: lens,
                mask: match mask {
                    None => MaskBand::none(),
                    Some((left, right)) => MaskBand {
                        left,
                        right,
                        alignment: if bottom_right {
                            DiagonalAlignment::BottomRight
                        } else {
                            DiagonalAlignment::TopLeft
                        },
                    },
                },
                scale: 0.1,
                lse: match stats {
                    0 => LseLayout::None,
                    1 => LseLayout::Dense {
                        uid: 9,
                        strides: [heads_q * s_q_max, s_q_max, 1, 1],
                        alignment: 16,
                    },
                    _ => LseLayout::Ragged {
                        uid: 9,
                        seq_stride: heads_q,
                        head_stride: 1,
                        aux: crate::problem::RaggedAux {
                            uid: 12,
                            width: IndexWidth::I32,
                            multiplier: heads_q,
                        },
                        alignment: 16,
                    },
                },
                fp8: None,
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever applicability accepts maps without truncation into AITER's int32 fields,
        /// and its workspace regions are aligned, disjoint and inside the requested size.
        #[test]
        fn accepted_problems_map_exactly(p in problems()) {
            let Ok(plan) = check_applicability(&p, &GpuArch::new("gfx950"), "gfx950") else {
                return Ok(());
            };
            let b = DeviceBuffers {
                q: 1 << 20, k: 2 << 20, v: 3 << 20, o: 4 << 20, q_offsets: 5 << 20,
                k_offsets: 6 << 20, seq_len_q: 7 << 20, seq_len_kv: 8 << 20, lse: 9 << 20,
                lse_offsets: 10 << 20, workspace: 0, q_descale: 11 << 20, k_descale: 12 << 20,
                v_descale: 13 << 20,
            };
            let a = shim_args(&p, &plan, &b, 0, 0);
            prop_assert_eq!(i64::from(a.seqlen_q), p.batch * p.s_q_max);
            prop_assert_eq!(i64::from(a.seqlen_k), p.batch * p.s_kv_max);
            prop_assert_eq!(i64::from(a.max_seqlen_q), p.s_q_max);
            prop_assert_eq!(i64::from(a.stride_q), p.q.seq_stride);
            prop_assert_eq!(i64::from(a.stride_o), p.o.seq_stride);
            prop_assert_eq!(i64::from(a.nhead_q), p.q.heads);
            if a.has_lse != 0 {
                prop_assert_eq!(i64::from(a.nhead_stride_lse), p.batch * p.s_q_max);
            }
            let w = plan.workspace;
            let mut regions = vec![w.seqstart_q, w.seqstart_k, w.len_q, w.len_kv, w.status];
            regions.extend(w.cu_seqlen_q);
            regions.extend(w.cu_seqlen_k);
            regions.extend(w.lse_scratch);
            regions.sort_by_key(|r| r.offset);
            for pair in regions.windows(2) {
                prop_assert!(pair[0].offset + pair[0].bytes <= pair[1].offset);
            }
            for r in &regions {
                prop_assert_eq!(r.offset % crate::workspace::WORKSPACE_ALIGN, 0);
                prop_assert!(r.offset + r.bytes + 255 <= w.size);
            }
            if let Some(s) = w.lse_scratch {
                prop_assert_eq!(s.bytes as i64, p.q.heads * p.batch * p.s_q_max * 4);
            }
        }
    }
}
