use super::*;
use crate::backward::fused_abi::FUSED_BLOB_FLOATS;
use ragged_core::DataType;
use ragged_core::problem::test_support::{dense_stats, in_bhsd_order, problem, ragged};

/// The forward problem (bf16, B 3, Q 200 × 8 heads, K/V 300 × 2 heads, D 128) with a dense LSE
/// [B, H, S, 1], and its gradients uids 31..=34 on the primals' offsets.
fn backward() -> (RaggedSdpaProblem, [Operand; 4]) {
    let mut p = problem();
    p.stats = Some(dense_stats(5, [3, 8, 200, 1], [1600, 200, 1, 1]));
    let grads = [
        ragged("do_tensor_uid", 31, [3, 200, 8, 128], 10),
        ragged("dq_tensor_uid", 32, [3, 200, 8, 128], 10),
        ragged("dk_tensor_uid", 33, [3, 300, 2, 128], 11),
        ragged("dv_tensor_uid", 34, [3, 300, 2, 128], 11),
    ];
    (p, grads)
}

fn plan_of(p: &RaggedSdpaProblem, g: &[Operand; 4]) -> Result<BackwardPlan, Decline> {
    plan(
        p,
        Gradients {
            d_o: &g[0],
            dq: &g[1],
            dk: &g[2],
            dv: &g[3],
        },
    )
}

fn declined(p: &RaggedSdpaProblem, g: &[Operand; 4]) -> String {
    plan_of(p, g).expect_err("declined").to_string()
}

#[test]
fn a_gqa_problem_gets_kernels_strides_and_workspace() {
    let (p, g) = backward();
    let plan = plan_of(&p, &g).expect("bf16 D 128 GQA with an LSE plans");
    assert_eq!(plan.kernels.dkdv, "ragged_fmha_bwd_dkdv_bf16_d128");
    assert_eq!(plan.kernels.dq, "ragged_fmha_bwd_dq_bf16_d128");
    assert_eq!(plan.gradient_uids, [31, 32, 33, 34]);
    assert_eq!((plan.dq.seq, plan.dq.head), (1024, 128));
    assert_eq!((plan.dk.seq, plan.dk.head), (256, 128));
    assert_eq!(plan.forward.lse.map(|l| l.head_stride), Some(200));
    // 3 RaggedBatch (96 B) -> tiles at 256; 3 · ceil(200 / 64) = 12 tiles (96 B) -> counters at
    // 512; Di at 768 with 200 rows padded to 256 per (batch, head): 3 · 8 · 256 f32 = 24 576 B;
    // the scaled LSE as many bytes right after, at 25 344, ending at 49 920; the dQ accumulator
    // there: 8 heads · 3 batches · ceil(200 / 64) = 96 blobs of 32 KiB and 96 turn counters; plus
    // the alignment slack.
    assert_eq!(
        plan.workspace,
        BackwardWorkspace {
            batches: 0,
            tiles: 256,
            tile_count: 512,
            error_flag: 516,
            di: 768,
            lse2: 25_344,
            di_rows: 256,
            dq_acc: 49_920,
            total_bytes: 49_920 + 96 * (32_768 + 4) + 256,
        }
    );
    assert_eq!(plan.dq_form, DqForm::Deterministic);
}

#[test]
fn both_dims_orders_plan_to_the_same_strides() {
    let (mut p, g) = backward();
    let bshd = plan_of(&p, &g).expect("plans");
    in_bhsd_order(&mut p);
    let mut g2 = g;
    for t in g2.iter_mut() {
        t.dims.swap(1, 2);
        t.strides.swap(1, 2);
    }
    let bhsd = plan_of(&p, &g2).expect("plans in [B, H, S, D] order too");
    assert_eq!((bshd.dq, bshd.dk, bshd.d_o), (bhsd.dq, bhsd.dk, bhsd.d_o));
    assert_eq!(bshd.forward.q, bhsd.forward.q);
}

/// The problem and gradients of [`backward`] with Q, K, dQ, dK of head dim `d_qk` and V, O, dO, dV
/// of `d_v`, every ragged operand in token-unit offsets (multiplier = its seq stride), so that
/// tensors of different head dims share token starts.
fn with_head_dims(d_qk: i64, d_v: i64) -> (RaggedSdpaProblem, [Operand; 4]) {
    let (mut p, mut g) = backward();
    for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o]
        .into_iter()
        .chain(g.iter_mut())
    {
        let [b, s, h, _] = t.bshd();
        let aux = t.ragged.map_or(0, |o| o.uid);
        let d = if [
            "v_tensor_uid",
            "o_tensor_uid",
            "do_tensor_uid",
            "dv_tensor_uid",
        ]
        .contains(&t.role)
        {
            d_v
        } else {
            d_qk
        };
        *t = ragged(t.role, t.uid, [b, s, h, d], aux);
        let stride = t.seq_stride();
        if let Some(o) = t.ragged.as_mut() {
            o.multiplier = ragged_core::Multiplier::new(stride).expect("positive");
        }
    }
    (p, g)
}

#[test]
fn every_forward_head_dim_plans_its_backward_kernels() {
    for (d_qk, d_v, dims) in [
        (64, 64, "d64"),
        (96, 96, "d96"),
        (128, 128, "d128"),
        (256, 256, "d256"),
        (192, 128, "d192v128"),
    ] {
        for (dtype, dt) in [(DataType::BF16, "bf16"), (DataType::F16, "f16")] {
            let (mut p, mut g) = with_head_dims(d_qk, d_v);
            for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o]
                .into_iter()
                .chain(g.iter_mut())
            {
                t.dtype = dtype;
            }
            let plan = plan_of(&p, &g).unwrap_or_else(|e| panic!("{dt} {dims}: {e}"));
            assert_eq!(plan.kernels.dot, format!("ragged_fmha_bwd_dot_{dt}_{dims}"));
            assert_eq!(
                plan.kernels.dkdv,
                format!("ragged_fmha_bwd_dkdv_{dt}_{dims}")
            );
            assert_eq!(plan.kernels.dq, format!("ragged_fmha_bwd_dq_{dt}_{dims}"));
            // dO and dV have V/O's head dim, dQ and dK Q/K's: their strides follow.
            assert_eq!(
                (plan.d_o.seq, plan.dv.seq, plan.dq.seq, plan.dk.seq),
                (8 * d_v, 2 * d_v, 8 * d_qk, 2 * d_qk),
                "{dt} {dims}"
            );
            // The workspace depends on the head dims only through the dQ accumulator's blobs,
            // 64 × 128 f32 up to D 128 and 64 × D_qk past it.
            let base = plan_of(&backward().0, &backward().1).unwrap().workspace;
            let w = plan.workspace;
            assert_eq!(
                BackwardWorkspace {
                    total_bytes: base.total_bytes,
                    ..w
                },
                base,
                "{dt} {dims}"
            );
            let acc = |w: BackwardWorkspace| w.total_bytes - WORKSPACE_ALIGNMENT - w.dq_acc;
            let blobs = acc(base) / (FUSED_BLOB_FLOATS * 4 + 4);
            assert_eq!(acc(base), blobs * (FUSED_BLOB_FLOATS * 4 + 4));
            let extra = if d_qk > 128 {
                (64 * d_qk as u64 - FUSED_BLOB_FLOATS) * 4
            } else {
                0
            };
            assert_eq!(acc(w), acc(base) + blobs * extra, "{dt} {dims}");
        }
    }
}

#[test]
fn head_dims_without_backward_kernels_are_declined_by_uid() {
    // The forward plans the same head dims (device_abi's tests hold the tables equal), so these
    // reach the backward's own check only through `backward_kernels`.
    let (p, _) = with_head_dims(80, 80);
    assert_eq!(
        backward_kernels(&p).expect_err("declined").to_string(),
        "tensor uid 1: q_tensor_uid head dim = 80, need 64, 96, 128 or 256 with Q, K, V and O \
         alike, or Q/K 192 with V/O 128 (the compiled CUDA backward kernels)"
    );
    let (p, _) = with_head_dims(192, 192);
    let why = backward_kernels(&p).expect_err("declined").to_string();
    assert!(
        why.starts_with("tensor uid 3: v_tensor_uid head dim = 192, need "),
        "{why}"
    );
    let (p, _) = with_head_dims(128, 64);
    let why = backward_kernels(&p).expect_err("declined").to_string();
    assert!(
        why.starts_with("tensor uid 3: v_tensor_uid head dim = 64, need "),
        "{why}"
    );
    let (mut p, _) = with_head_dims(128, 128);
    p.q.dtype = DataType::F32;
    let why = backward_kernels(&p).expect_err("declined").to_string();
    assert_eq!(
        why,
        "tensor uid 1: q_tensor_uid data type = F32, need BF16 or F16 (the compiled CUDA \
         backward kernels)"
    );
    // Through the plan, the forward's own decline comes first and names the same uid.
    let (p, g) = with_head_dims(80, 80);
    assert!(declined(&p, &g).starts_with("tensor uid 1: q_tensor_uid head dim = 80"));
}

#[test]
fn a_gradient_on_other_offsets_or_type_is_declined_by_uid() {
    let (p, mut g) = backward();
    g[1].ragged = g[1].ragged.map(|o| Offsets { uid: 77, ..o });
    let why = declined(&p, &g);
    assert!(
        why.starts_with("tensor uid 32: dq_tensor_uid ragged_offset_tensor_uid = 77"),
        "{why}"
    );

    let (p, mut g) = backward();
    g[2].ragged = g[2].ragged.map(|o| Offsets { uid: 78, ..o });
    g[3].ragged = g[2].ragged;
    let why = declined(&p, &g);
    assert!(
        why.starts_with("tensor uid 33: dk_tensor_uid ragged_offset_tensor_uid = 78"),
        "{why}"
    );

    let (p, mut g) = backward();
    g[3].dtype = DataType::F16;
    let why = declined(&p, &g);
    assert!(why.starts_with("tensor uid 34: "), "{why}");

    let (p, mut g) = backward();
    g[0].ragged = None;
    let why = declined(&p, &g);
    assert!(
        why.starts_with("tensor uid 31: do_tensor_uid layout = dense"),
        "{why}"
    );
}

#[test]
fn without_an_lse_there_is_nothing_to_recompute_p_from() {
    let (mut p, g) = backward();
    p.stats = None;
    assert!(declined(&p, &g).contains("stats_tensor_uid"));
}

#[test]
fn workspace_overflow_is_none() {
    assert_eq!(workspace(i64::MAX / 2, i64::MAX / 2, 8, 128), None);
    assert!(workspace(1, 1, 1, 128).is_some());
    // The accumulator alone overflows: Di and the scaled LSE 2^60 bytes each, 2^52 blobs of 32 KiB.
    assert_eq!(workspace(1 << 24, 1 << 24, 1 << 10, 128), None);
    assert!(workspace(1 << 20, 1 << 20, 1 << 10, 128).is_some());
}

#[test]
fn di_rows_are_whole_64_row_tiles() {
    for (s_q, rows) in [(1, 64), (64, 64), (65, 128), (200, 256)] {
        let w = workspace(2, s_q, 3, 128).expect("fits");
        assert_eq!(w.di_rows, rows, "S_q_max {s_q}");
        // The scaled LSE right after Di's 2 batches · 3 heads · rows f32.
        assert_eq!(w.lse2, w.di + 2 * 3 * rows as u64 * 4, "S_q_max {s_q}");
    }
    // The kernels take the row count as an int: 2^31 - 64 rows stay, 2^31 - 63 would round to 2^31.
    let rows = |s_q| workspace(1, s_q, 1, 128).map(|w| w.di_rows);
    assert_eq!(rows((1 << 31) - 64), Some(i32::MAX - 63));
    assert_eq!(rows((1 << 31) - 63), None);
    let common = include_str!("../../cuda/fmha_bwd/common.cuh");
    assert!(common.contains(&format!("#define RAGGED_BWD_DI_ROWS {DI_ROW_BLOCK}\n")));
}

fn plan_in(form: DqForm, p: &RaggedSdpaProblem, g: &[Operand; 4]) -> Result<BackwardPlan, Decline> {
    plan_with_form(
        p,
        Gradients {
            d_o: &g[0],
            dq: &g[1],
            dk: &g[2],
            dv: &g[3],
        },
        form,
    )
}

#[test]
fn the_forms_differ_only_in_the_form() {
    let (p, g) = backward();
    let det = plan_in(DqForm::Deterministic, &p, &g).expect("plans");
    let unordered = plan_in(DqForm::Unordered, &p, &g).expect("plans");
    assert_eq!(unordered.dq_form, DqForm::Unordered);
    assert_eq!(
        BackwardPlan {
            dq_form: DqForm::Deterministic,
            ..unordered.clone()
        },
        det,
        "only the form differs"
    );
}

#[test]
fn both_forms_accept_and_decline_the_same_problems() {
    type Edit = Box<dyn Fn(&mut RaggedSdpaProblem, &mut [Operand; 4])>;
    let head_dim = |d: i64| -> Edit {
        Box::new(move |p, g| {
            for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o]
                .into_iter()
                .chain(g.iter_mut())
            {
                let [b, s, h, _] = t.bshd();
                let aux = t.ragged.map_or(0, |o| o.uid);
                *t = ragged(t.role, t.uid, [b, s, h, d], aux);
            }
        })
    };
    let cases: [(&str, Edit, bool); 12] = [
        ("D 128 GQA", Box::new(|_, _| {}), true),
        ("D 64", head_dim(64), true),
        ("D 128 again", head_dim(128), true),
        ("D 96", head_dim(96), true),
        ("D 256", head_dim(256), true),
        (
            "Q/K 192, V/O 128",
            Box::new(|p, g| (*p, *g) = with_head_dims(192, 128)),
            true,
        ),
        ("D 80", head_dim(80), false),
        (
            "Q/K 192, V/O 192",
            Box::new(|p, g| (*p, *g) = with_head_dims(192, 192)),
            false,
        ),
        ("no LSE", Box::new(|p, _| p.stats = None), false),
        (
            "dQ on other offsets",
            Box::new(|_, g| g[1].ragged = g[1].ragged.map(|o| Offsets { uid: 77, ..o })),
            false,
        ),
        (
            "dV in f16",
            Box::new(|_, g| g[3].dtype = DataType::F16),
            false,
        ),
        ("dense dO", Box::new(|_, g| g[0].ragged = None), false),
    ];
    for (what, edit, accepted) in cases {
        let (mut p, mut g) = backward();
        edit(&mut p, &mut g);
        let det = plan_in(DqForm::Deterministic, &p, &g);
        let unordered = plan_in(DqForm::Unordered, &p, &g);
        assert_eq!(det.is_ok(), accepted, "{what}: {det:?}");
        match (det, unordered) {
            (Ok(a), Ok(b)) => assert_eq!(a.kernels, b.kernels, "{what}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}"),
            (a, b) => panic!("{what}: the forms disagree: {a:?} against {b:?}"),
        }
    }
}
