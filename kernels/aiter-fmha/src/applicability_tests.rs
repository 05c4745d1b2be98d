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

mod fp8 {
    use super::*;
    use ragged_core::problem::test_support::fp8;
    use ragged_core::problem::{Amax, Fp8Softmax, ScalarType};

    fn gfx950() -> GpuArch {
        GpuArch::new("gfx950:sramecc+:xnack-")
    }

    fn device(uid: i64) -> ScalePlan {
        ScalePlan::DeviceTensor {
            uid,
            data_type: ScalarType::Float,
        }
    }

    /// FP8 Q/K/V of `format` with D = `d`, a BFLOAT16 O and device descales uids 40, 41, 42:
    /// B 2, S_q 8 / S_kv 16, H_q 4 / H_kv 2, no mask, no stats.
    fn problem(format: Fp8Format, d: i64) -> RaggedSdpaProblem {
        let mut p = fp8(2, (8, 4), (16, 2), d);
        for t in [&mut p.q, &mut p.k, &mut p.v] {
            t.dtype = DataType::Fp8(format);
        }
        let f = p.fp8.as_mut().expect("fp8");
        f.input = format;
        f.descale_q.plan = device(40);
        f.descale_k.plan = device(41);
        f.descale_v.plan = device(42);
        p
    }

    fn fp8_mut(p: &mut RaggedSdpaProblem) -> &mut Fp8Forward {
        p.fp8.as_mut().expect("fp8")
    }

    fn declined_on(p: &RaggedSdpaProblem, arch: &GpuArch) -> Decline {
        plan(p, arch, TARGETS).expect_err("must decline")
    }

    #[test]
    fn e4m3fnuz_hd128_on_gfx942_runs_on_asm_with_aiters_bf16_cvt() {
        let (aiter, plan) =
            plan(&problem(Fp8Format::E4M3Fnuz, 128), &gfx942(), TARGETS).expect("taken");
        assert_eq!(
            plan.fp8,
            Some(AiterFp8Plan {
                descale_uids: [40, 41, 42]
            })
        );
        assert_eq!(plan.how_v3_bf16_cvt, 1);
        assert!(plan.use_asm_v3);
        assert_eq!(plan.expected_path, ExpectedPath::AsmV3);
        assert_eq!(
            (aiter.dtype, aiter.o_dtype),
            (DataType::Fp8(Fp8Format::E4M3Fnuz), DataType::BF16)
        );
        let bf16 = check_applicability(&base_problem(), &gfx942(), TARGETS).expect("taken");
        assert_eq!((bf16.fp8, bf16.how_v3_bf16_cvt), (None, 0));
    }

    #[test]
    fn ocp_e4m3_hd128_and_hd256_on_gfx950_run_on_asm() {
        for d in [128, 256] {
            let (_, plan) = plan(&problem(Fp8Format::E4M3, d), &gfx950(), TARGETS)
                .unwrap_or_else(|e| panic!("D {d}: {e}"));
            assert_eq!(plan.how_v3_bf16_cvt, 0, "D {d}");
            assert_eq!(plan.expected_path, ExpectedPath::AsmV3, "D {d}");
            assert!(plan.fp8.is_some());
        }
    }

    #[test]
    fn head_dims_outside_the_fp8bf16_table_are_declined() {
        let d = declined_on(&problem(Fp8Format::E4M3Fnuz, 256), &gfx942());
        assert_eq!(d.uid, Some(1));
        assert_eq!(
            d.to_string(),
            "tensor uid 1: D_qk/D_v with FP8 = 256/256, need 128/128 on gfx942 (AITER's asm \
             fp8bf16 group-mode kernels)"
        );
        let d = declined_on(&problem(Fp8Format::E4M3, 64), &gfx950());
        assert!(
            d.to_string()
                .contains("= 64/64, need 128/128 or 256/256 on gfx950"),
            "{d}"
        );
    }

    #[test]
    fn a_format_the_architectures_kernels_do_not_read_is_declined() {
        for (format, arch, name, want) in [
            (
                Fp8Format::E4M3,
                gfx942(),
                "FP8_E4M3",
                "FP8_E4M3_FNUZ on gfx942",
            ),
            (
                Fp8Format::E4M3Fnuz,
                gfx950(),
                "FP8_E4M3_FNUZ",
                "FP8_E4M3 on gfx950",
            ),
            (Fp8Format::E5M2, gfx950(), "FP8_E5M2", "FP8_E4M3 on gfx950"),
            (
                Fp8Format::E5M2Fnuz,
                gfx942(),
                "FP8_E5M2_FNUZ",
                "FP8_E4M3_FNUZ on gfx942",
            ),
        ] {
            let text = declined_on(&problem(format, 128), &arch).to_string();
            assert!(
                text.starts_with(&format!(
                    "tensor uid 1: q_tensor_uid data type = {name}, need {want}"
                )),
                "{text}"
            );
        }
        let other = GpuArch::new("gfx90a:sramecc+:xnack-");
        let d = plan(&problem(Fp8Format::E4M3Fnuz, 128), &other, "gfx90a;gfx942")
            .expect_err("no fp8bf16 kernels there");
        assert!(d.to_string().contains("device architecture for FP8"), "{d}");
    }

    #[test]
    fn p_quantization_fp8_output_and_amax_are_declined_naming_the_field() {
        let mut p = problem(Fp8Format::E4M3Fnuz, 128);
        fp8_mut(&mut p).softmax = Some(Fp8Softmax {
            scale_s: Fp8Scalar {
                role: "scale_s_tensor_uid",
                plan: device(43),
            },
            descale_s: Fp8Scalar {
                role: "descale_s_tensor_uid",
                plan: device(44),
            },
        });
        let d = declined_on(&p, &gfx942());
        assert_eq!((d.uid, d.field.as_str()), (Some(43), "scale_s_tensor_uid"));

        let mut p = problem(Fp8Format::E4M3Fnuz, 128);
        p.o.dtype = DataType::Fp8(Fp8Format::E4M3Fnuz);
        fp8_mut(&mut p).output = Fp8OutputPlan::Fp8 {
            format: Fp8Format::E4M3Fnuz,
            scale_o: Fp8Scalar {
                role: "scale_o_tensor_uid",
                plan: device(46),
            },
        };
        let d = declined_on(&p, &gfx942());
        assert_eq!(
            d.to_string(),
            "tensor uid 4: o_tensor_uid data type = FP8_E4M3_FNUZ with scale_o_tensor_uid, need \
             BFLOAT16: AITER's fp8bf16 kernels write bf16 O and take no output scale"
        );

        let mut p = problem(Fp8Format::E4M3, 128);
        p.o.dtype = DataType::F16;
        let d = declined_on(&p, &gfx950());
        assert_eq!((d.uid, d.value.as_str()), (Some(4), "HALF"));

        let mut p = problem(Fp8Format::E4M3, 128);
        fp8_mut(&mut p).amax_o = Some(Amax {
            role: "amax_o_tensor_uid",
            uid: 45,
            rank4: true,
            alignment: 16,
        });
        let d = declined_on(&p, &gfx950());
        assert_eq!((d.uid, d.field.as_str()), (Some(45), "amax_o_tensor_uid"));
    }

    #[test]
    fn descales_must_be_device_tensors() {
        let mut p = problem(Fp8Format::E4M3Fnuz, 128);
        fp8_mut(&mut p).descale_k.plan = ScalePlan::Fixed(0.5);
        let d = declined_on(&p, &gfx942());
        assert_eq!((d.uid, d.field.as_str()), (Some(1), "descale_k_tensor_uid"));
        assert!(d.value.contains("baked"), "{d}");

        let mut p = problem(Fp8Format::E4M3Fnuz, 128);
        fp8_mut(&mut p).descale_v.plan = ScalePlan::RuntimeHostScalar {
            uid: 47,
            data_type: ScalarType::Float,
        };
        let d = declined_on(&p, &gfx942());
        assert_eq!(
            (d.uid, d.field.as_str()),
            (Some(47), "descale_v_tensor_uid residency")
        );
    }

    fn band(left: Option<i64>, right: Option<i64>, alignment: DiagonalAlignment) -> MaskBand {
        MaskBand {
            left,
            right,
            alignment,
        }
    }

    #[test]
    fn only_no_mask_and_bottom_right_causal_are_taken() {
        use DiagonalAlignment::{BottomRight, TopLeft};
        let mut p = problem(Fp8Format::E4M3, 128);
        p.mask = band(None, Some(0), BottomRight);
        plan(&p, &gfx950(), TARGETS).expect("bottom-right causal");
        for mask in [
            band(None, Some(0), TopLeft),
            band(Some(32), Some(0), BottomRight),
            band(Some(4), Some(4), TopLeft),
        ] {
            p.mask = mask;
            let d = declined_on(&p, &gfx950());
            assert_eq!(
                (d.uid, d.field.as_str()),
                (Some(1), "mask with FP8"),
                "{mask:?}"
            );
        }
        p.mask = band(Some(32), None, BottomRight);
        assert_eq!(
            declined_on(&p, &gfx950()).value,
            "BottomRight-aligned band (left 32, right unbounded)"
        );
    }

    #[test]
    fn stats_are_taken_except_with_padded_queries() {
        let stats = || Some(dense_stats([32, 8, 1, 1]));
        let seq_len = || {
            Some(ragged_core::problem::IndexInput {
                role: "seq_len_q_tensor_uid",
                uid: 30,
                width: IndexWidth::I32,
            })
        };
        let mut p = problem(Fp8Format::E4M3Fnuz, 128);
        p.stats = stats();
        let (_, with_stats) = plan(&p, &gfx942(), TARGETS).expect("stats");
        assert!(with_stats.use_asm_v3);
        p.stats = None;
        p.seq_len_q = seq_len();
        plan(&p, &gfx942(), TARGETS).expect("padded");
        p.stats = stats();
        let d = declined_on(&p, &gfx942());
        assert_eq!(
            (d.uid, d.field.as_str()),
            (Some(9), "stats_tensor_uid with FP8 and seq_len_q")
        );
    }
}
