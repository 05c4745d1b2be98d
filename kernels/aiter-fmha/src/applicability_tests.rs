use super::*;
use crate::fixtures::{base_problem, base_ragged, operand};
use crate::problem::{IndexWidth, RaggedAux};
use ragged_core::MaskBand;
use ragged_core::problem::test_support::{in_bhsd_order, ragged};
use ragged_core::problem::{Operand, RaggedSdpaProblem};

const TARGETS: &str = "gfx942;gfx950";

fn gfx942() -> GpuArch {
    GpuArch::new("gfx942:sramecc+:xnack-")
}

fn decline(p: &AiterProblem) -> String {
    check_applicability(p, &gfx942(), TARGETS)
        .expect_err("must decline")
        .to_string()
}

/// The decline of the whole plan (contract, then this engine) on gfx942.
fn plan_decline(p: &RaggedSdpaProblem) -> String {
    plan(p, &gfx942(), TARGETS)
        .expect_err("must decline")
        .to_string()
}

/// Offsets in token units: multiplier = seqStride.
fn token_units(t: &mut Operand) {
    let stride = t.seq_stride();
    if let Some(o) = t.ragged.as_mut() {
        o.multiplier = ragged_core::Multiplier::new(stride).expect("positive");
    }
}

#[test]
fn bf16_128_unmasked_on_gfx942_is_taken_and_expected_on_asm() {
    let plan = check_applicability(&base_problem(), &gfx942(), TARGETS).expect("taken");
    assert!(plan.use_asm_v3);
    assert_eq!(plan.expected_path, ExpectedPath::AsmV3);
}

#[test]
fn fp16_is_taken_on_ck() {
    let p = AiterProblem {
        dtype: DataType::F16,
        ..base_problem()
    };
    let plan = check_applicability(&p, &gfx942(), TARGETS).expect("taken");
    assert_eq!(plan.expected_path, ExpectedPath::CkTile);
    assert!(plan.use_asm_v3, "AITER is left to fall back by itself");
}

#[test]
fn top_left_masks_never_use_asm() {
    let p = AiterProblem {
        mask: MaskBand {
            left: None,
            right: Some(0),
            alignment: DiagonalAlignment::TopLeft,
        },
        ..base_problem()
    };
    let plan = check_applicability(&p, &gfx942(), TARGETS).expect("taken");
    assert!(
        !plan.use_asm_v3,
        "pitfall 2: asm treats top-left as bottom-right"
    );
    assert_eq!(plan.expected_path, ExpectedPath::CkTile);
}

#[test]
fn bottom_right_causal_stays_on_asm_but_a_window_goes_to_ck() {
    let causal = AiterProblem {
        mask: MaskBand {
            left: None,
            right: Some(0),
            alignment: DiagonalAlignment::BottomRight,
        },
        ..base_problem()
    };
    let plan = check_applicability(&causal, &gfx942(), TARGETS).expect("taken");
    assert_eq!(
        (plan.use_asm_v3, plan.expected_path),
        (true, ExpectedPath::AsmV3)
    );
    let window = AiterProblem {
        mask: MaskBand {
            left: Some(3),
            right: Some(0),
            alignment: DiagonalAlignment::BottomRight,
        },
        ..base_problem()
    };
    let plan = check_applicability(&window, &gfx942(), TARGETS).expect("taken");
    assert_eq!(plan.expected_path, ExpectedPath::CkTile);
}

fn d192_128() -> AiterProblem {
    let mut p = base_problem();
    p.q = operand(1, 4, 192, 10);
    p.k = operand(2, 2, 192, 11);
    // Q/O and K/V share offsets in token units: multiplier = seqStride keeps them equal.
    p.q.aux.multiplier = 4 * 192;
    p.o.aux.multiplier = 4 * 128;
    p.k.aux.multiplier = 2 * 192;
    p.v.aux.multiplier = 2 * 128;
    p
}

#[test]
fn d192_128_uses_asm_on_gfx950_only() {
    let p = d192_128();
    let on_950 = check_applicability(&p, &GpuArch::new("gfx950"), TARGETS).expect("taken");
    assert_eq!(
        (on_950.use_asm_v3, on_950.expected_path),
        (true, ExpectedPath::AsmV3)
    );
    let on_942 = check_applicability(&p, &gfx942(), TARGETS).expect("taken");
    assert_eq!(
        (on_942.use_asm_v3, on_942.expected_path),
        (false, ExpectedPath::CkTile)
    );
}

#[test]
fn padded_queries_with_stats_stay_off_asm() {
    use crate::problem::SeqLens;
    let seq_len_q = Some(SeqLens {
        uid: 30,
        width: IndexWidth::I32,
    });
    let dense = LseLayout::Dense {
        uid: 9,
        strides: [32, 8, 1, 1],
        alignment: 16,
    };
    let padded = AiterProblem {
        seq_len_q,
        ..base_problem()
    };
    let plan = check_applicability(&padded, &gfx942(), TARGETS).expect("taken");
    assert!(
        plan.use_asm_v3,
        "no stats: the LSE index question does not arise"
    );
    let with_stats = AiterProblem {
        lse: dense,
        ..padded
    };
    let plan = check_applicability(&with_stats, &gfx942(), TARGETS).expect("taken");
    assert_eq!(
        (plan.use_asm_v3, plan.expected_path),
        (false, ExpectedPath::CkTile)
    );
}

#[test]
fn the_fixtures_agree() {
    let (aiter, _) = plan(&base_ragged(), &gfx942(), TARGETS).expect("taken");
    assert_eq!(aiter, base_problem());
}

#[test]
fn q_and_o_of_different_head_dims_share_token_starts_through_multipliers() {
    let mut p = base_ragged();
    p.q = ragged("q_tensor_uid", 1, [2, 8, 4, 192], 10);
    p.k = ragged("k_tensor_uid", 2, [2, 16, 2, 192], 11);
    for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
        token_units(t);
    }
    let (aiter, _) = plan(&p, &GpuArch::new("gfx950"), TARGETS).expect("taken");
    assert_eq!(aiter, d192_128());
    if let Some(o) = p.o.ragged.as_mut() {
        o.multiplier = ragged_core::Multiplier::new(2 * 512).expect("positive");
    }
    let d = plan_decline(&p);
    assert!(
        d.contains("o_tensor_uid multiplier/seqStride = 1024/512, need q_tensor_uid's 768/768"),
        "{d}"
    );
}

#[test]
fn fp32_is_declined_naming_q() {
    let p = AiterProblem {
        dtype: DataType::F32,
        ..base_problem()
    };
    assert_eq!(
        decline(&p),
        "tensor uid 1: data type = FLOAT, need HALF or BFLOAT16 (AITER has no FLOAT FMHA)"
    );
}

#[test]
fn head_dims_outside_ck_are_declined() {
    for d in [264, 100, 0] {
        let mut p = base_problem();
        p.v = operand(3, 2, d, 11);
        p.o = operand(4, 4, d, 10);
        let text = decline(&p);
        assert!(
            text.starts_with(&format!("tensor uid 3: D_v = {d}, need a multiple of 8")),
            "{text}"
        );
    }
}

#[test]
fn gqa_and_kv_head_rules() {
    let mut p = base_ragged();
    p.q = ragged("q_tensor_uid", 1, [2, 8, 3, 128], 10);
    p.o = ragged("o_tensor_uid", 4, [2, 8, 3, 128], 10);
    let text = plan_decline(&p);
    assert!(
        text.starts_with("tensor uid 2: k_tensor_uid heads = 2, need a divisor of Q's 3 heads"),
        "{text}"
    );
    // Pitfall 15: AITER takes one KV head count, and so does every GPU engine.
    let mut p = base_ragged();
    p.v = ragged("v_tensor_uid", 3, [2, 16, 1, 128], 11);
    let text = plan_decline(&p);
    assert!(
        text.starts_with("tensor uid 3: v_tensor_uid [B, S, H, D] = [2, 16, 1, 128]"),
        "{text}"
    );
}

#[test]
fn q_and_o_on_different_offset_tensors_are_declined() {
    let mut p = base_ragged();
    if let Some(o) = p.o.ragged.as_mut() {
        o.uid = 12;
    }
    assert_eq!(
        plan_decline(&p),
        "tensor uid 4: o_tensor_uid ragged_offset_tensor_uid = 12, need q_tensor_uid's offsets \
         uid 10 (one token-start array per pair)"
    );
}

#[test]
fn alignment_rule() {
    // A multiplier below 1 cannot be made (`Multiplier::new`), so no engine checks for one.
    let mut p = base_ragged();
    p.v.alignment = 8;
    assert_eq!(
        plan_decline(&p),
        "tensor uid 3: v_tensor_uid alignment = 8, need a positive multiple of 16"
    );
}

#[test]
fn element_indices_reaching_2_pow_31_are_declined() {
    let mut p = base_problem();
    p.batch = 4096;
    p.s_kv_max = 1024; // 4096 · 1024 · 256 = 2^30: fine
    assert!(check_applicability(&p, &gfx942(), TARGETS).is_ok());
    p.s_kv_max = 2048; // 2^31
    assert_eq!(
        decline(&p),
        "tensor uid 2: B · S_max · seqStride = 2147483648, need below 2^31 elements (AITER \
         indexes with int32)"
    );
}

#[test]
fn top_left_with_one_query_row_is_declined() {
    let p = AiterProblem {
        s_q_max: 1,
        mask: MaskBand {
            left: None,
            right: Some(0),
            alignment: DiagonalAlignment::TopLeft,
        },
        ..base_problem()
    };
    let text = decline(&p);
    assert!(
        text.starts_with("tensor uid 1: S_q_max with a top-left mask = 1, need more than one"),
        "{text}"
    );
    assert!(text.contains("pitfall 3"), "{text}");
    let br = AiterProblem {
        mask: MaskBand {
            alignment: DiagonalAlignment::BottomRight,
            ..p.mask
        },
        ..p
    };
    assert!(check_applicability(&br, &gfx942(), TARGETS).is_ok());
}

#[test]
fn negative_mask_bounds_are_declined() {
    let p = AiterProblem {
        mask: MaskBand {
            left: Some(-2),
            right: None,
            alignment: DiagonalAlignment::BottomRight,
        },
        ..base_problem()
    };
    assert_eq!(
        decline(&p),
        "tensor uid 1: mask left bound = -2, need 0 to 2^31 - 1 (AITER's window sizes; \
         unbounded is no bound)"
    );
}

fn dense_stats(strides: [i64; 4]) -> Operand {
    ragged_core::problem::test_support::dense_stats(9, [2, 4, 8, 1], strides)
}

#[test]
fn stats_layouts() {
    let mut p = base_ragged();
    p.stats = Some(dense_stats([32, 8, 1, 1]));
    let (aiter, plan_) = plan(&p, &gfx942(), TARGETS).expect("taken");
    assert!(plan_.workspace.lse_scratch.is_some());
    assert_eq!(
        aiter.lse,
        LseLayout::Dense {
            uid: 9,
            strides: [32, 8, 1, 1],
            alignment: 16
        }
    );
    let ragged_stats = |head_stride| {
        let mut t = ragged("stats_tensor_uid", 9, [2, 8, 4, 1], 13);
        t.dtype = DataType::F32;
        t.strides[2] = head_stride;
        if let Some(o) = t.ragged.as_mut() {
            o.width = IndexWidth::I64;
        }
        t
    };
    p.stats = Some(ragged_stats(1));
    let (aiter, _) = plan(&p, &gfx942(), TARGETS).expect("taken");
    assert_eq!(
        aiter.lse,
        LseLayout::Ragged {
            uid: 9,
            seq_stride: 4,
            head_stride: 1,
            aux: RaggedAux {
                uid: 13,
                width: IndexWidth::I64,
                multiplier: 1,
            },
            alignment: 16,
        }
    );
    p.stats = Some(ragged_stats(2));
    assert_eq!(
        plan_decline(&p),
        "tensor uid 9: stats_tensor_uid head stride = 2, need 1 (packed token-major ragged stats)"
    );
    p.stats = Some(dense_stats([32, -8, 1, 1]));
    let text = plan_decline(&p);
    assert!(
        text.starts_with("tensor uid 9: stats_tensor_uid stride"),
        "{text}"
    );
    assert!(text.contains("= -8, need non-negative"), "{text}");
}

#[test]
fn an_arch_the_shim_was_not_built_for_is_declined() {
    let d = check_applicability(&base_problem(), &GpuArch::new("gfx90a:xnack-"), TARGETS)
        .expect_err("not built");
    assert_eq!(
        d.to_string(),
        "tensor uid 1: device architecture = gfx90a:xnack-, need one of the AITER shim's build \
         targets (gfx942;gfx950)"
    );
}

#[test]
fn empty_dims_and_bad_scales_are_declined() {
    let mut p = base_ragged();
    for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
        t.dims[0] = 0;
    }
    assert_eq!(
        plan_decline(&p),
        "tensor uid 1: q_tensor_uid batch B = 0, need at least 1"
    );
    let p = AiterProblem {
        scale: f32::NAN,
        ..base_problem()
    };
    assert_eq!(
        decline(&p),
        "tensor uid 1: attention scale = NaN, need a finite value"
    );
}

#[test]
fn both_ragged_dims_orders_map_to_the_same_aiter_arguments() {
    // S_q = 8 against H_q = 4 and S_kv = 16 against H_kv = 2.
    let mut a = base_ragged();
    for stats in [None, Some(dense_stats([32, 8, 1, 1]))] {
        a.stats = stats;
        let mut b = a;
        in_bhsd_order(&mut b);
        assert_ne!(a.k.dims, b.k.dims);
        let (x, y) = (plan(&a, &gfx942(), TARGETS), plan(&b, &gfx942(), TARGETS));
        assert!(x.is_ok(), "{:?}", x.err());
        assert_eq!(x.map_err(|d| d.to_string()), y.map_err(|d| d.to_string()));
    }
}
