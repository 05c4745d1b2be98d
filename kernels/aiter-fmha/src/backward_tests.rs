use super::*;
use crate::workspace::WORKSPACE_ALIGN;
use ragged_core::problem::test_support::{dense_stats, packed, ragged};
use ragged_core::{DiagonalAlignment, MaskBand};

const TARGETS: &str = "gfx942;gfx950";
const FOUND: BackwardAvailability<'static> = Ok("/opt/aiter/libmha_bwd.so");

fn gfx942() -> GpuArch {
    GpuArch::new("gfx942:sramecc+:xnack-")
}

/// B = 2, S_q 8 × H_q 4, S_kv 16 × H_kv 4, D 128, dense stats uid 9; the gradients dO (uid 20),
/// dQ (21), dK (22), dV (23) packed on their primals' offsets (Q/O aux 10, K/V aux 11).
fn backward() -> (RaggedSdpaProblem, [Operand; 4]) {
    backward_with(4, 128, 128)
}

/// [`backward`] with `h_kv` K/V heads and head dims `d_qk × d_v`.
fn backward_with(h_kv: i64, d_qk: i64, d_v: i64) -> (RaggedSdpaProblem, [Operand; 4]) {
    let mut forward = packed(2, (8, 4), (16, h_kv), d_qk);
    if d_v != d_qk {
        forward.v = ragged("v_tensor_uid", 3, [2, 16, h_kv, d_v], 11);
        forward.o = ragged("o_tensor_uid", 4, [2, 8, 4, d_v], 10);
    }
    forward.stats = Some(dense_stats(9, [2, 4, 8, 1], [32, 8, 1, 1]));
    let mut grads = [
        ragged("do_tensor_uid", 20, [2, 8, 4, d_v], 10),
        ragged("dq_tensor_uid", 21, [2, 8, 4, d_qk], 10),
        ragged("dk_tensor_uid", 22, [2, 16, h_kv, d_qk], 11),
        ragged("dv_tensor_uid", 23, [2, 16, h_kv, d_v], 11),
    ];
    if d_v != d_qk {
        // Rows of Q and O (K and V) differ in length, so one offsets tensor gives both the same
        // token starts only in token units: multiplier = the row's elements.
        let f = &mut forward;
        for t in [&mut f.q, &mut f.k, &mut f.v, &mut f.o]
            .into_iter()
            .chain(grads.iter_mut())
        {
            let row = t.strides[1];
            if let Some(o) = t.ragged.as_mut() {
                o.multiplier = ragged_core::Multiplier::new(row).expect("positive");
            }
        }
    }
    (forward, grads)
}

fn plan_of(
    forward: &RaggedSdpaProblem,
    grads: &[Operand; 4],
    available: BackwardAvailability<'_>,
) -> Result<(AiterBackwardProblem, AiterBackwardPlan), Decline> {
    let [a, b, c, d] = grads;
    plan_backward(forward, [a, b, c, d], &gfx942(), TARGETS, available)
}

fn decline(forward: &RaggedSdpaProblem, grads: &[Operand; 4]) -> String {
    plan_of(forward, grads, FOUND)
        .expect_err("must decline")
        .to_string()
}

#[test]
fn a_packed_backward_is_taken_with_the_forwards_settings_and_cks_scratch() {
    let (forward, grads) = backward();
    let (p, plan) = plan_of(&forward, &grads, FOUND).expect("taken");
    assert_eq!((p.d_o.uid, p.dq.uid, p.dk.uid, p.dv.uid), (20, 21, 22, 23));
    assert_eq!(p.dk.heads, 4);
    assert_eq!(
        plan.ck_tile,
        CkBackwardTile {
            head_dim: 128,
            key_tile: 128
        }
    );
    // Forward layout for B = 2 with stats: seqstart_q @0, seqstart_k @256, len_q @512,
    // len_kv @768, status @1024, LSE scratch @1280 (4 heads × 16 rows × 4 bytes = 256 bytes);
    // D scratch next at 1536, the same 256 bytes; AITER's scratch at 1792: CK's host part
    // (16 + 32 + 32768 + 32 = 32848 → 9 pages = 36864) and one dQ split of 4 heads × 16 rows ×
    // 128 × 4 bytes = 32768: 69632 bytes; then 255 bytes of slack.
    let w = plan.workspace;
    assert_eq!(
        w.forward.lse_scratch.map(|r| (r.offset, r.bytes)),
        Some((1280, 256))
    );
    assert_eq!((w.d_scratch.offset, w.d_scratch.bytes), (1536, 256));
    assert_eq!(
        (w.aiter_scratch.offset, w.aiter_scratch.bytes),
        (1792, 69632)
    );
    assert_eq!(w.size, 1792 + 69632 + 255);
    assert_eq!(w.d_scratch.offset % WORKSPACE_ALIGN, 0);
    assert_eq!(w.aiter_scratch.offset % WORKSPACE_ALIGN, 0);
}

#[test]
fn gqa_and_mqa_backwards_are_declined_naming_dk_and_both_head_counts() {
    for h_kv in [2, 1] {
        let (forward, grads) = backward_with(h_kv, 128, 128);
        let d = decline(&forward, &grads);
        assert!(
            d.contains("tensor uid 22")
                && d.contains(&format!("dk_tensor_uid heads (H_kv) = {h_kv}")),
            "{d}"
        );
        assert!(d.contains("H_q = 4"), "{d}");
    }
}

#[test]
fn the_head_dims_of_cks_buckets_are_taken_on_both_architectures() {
    for arch in ["gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-"] {
        for (d_qk, d_v, bucket) in [
            (64, 64, 64),
            (128, 128, 128),
            (192, 128, 256),
            (192, 192, 256),
            (256, 256, 256),
        ] {
            let (forward, grads) = backward_with(4, d_qk, d_v);
            let [a, b, c, d] = &grads;
            let (_, plan) =
                plan_backward(&forward, [a, b, c, d], &GpuArch::new(arch), TARGETS, FOUND)
                    .unwrap_or_else(|e| panic!("{arch} {d_qk}×{d_v}: {e}"));
            assert_eq!(plan.ck_tile.head_dim, bucket, "{arch} {d_qk}×{d_v}");
        }
    }
}

#[test]
fn head_dims_outside_the_forwards_rule_are_declined_naming_the_field() {
    let (forward, grads) = backward_with(4, 264, 264);
    let d = decline(&forward, &grads);
    assert!(
        d.contains("264") && d.contains("multiple of 8 ≤ 256"),
        "{d}"
    );
}

#[test]
fn without_aiters_backward_library_every_backward_is_declined_by_name() {
    let (forward, grads) = backward();
    let reason = "symbol aiter::mha_bwd (_ZN5aiter7mha_bwd…) absent from /opt/aiter/libmha_bwd.so";
    let d = plan_of(&forward, &grads, Err(reason))
        .expect_err("declined")
        .to_string();
    assert!(
        d.starts_with("AITER backward (aiter::mha_bwd in libmha_bwd.so)"),
        "{d}"
    );
    assert!(d.contains(reason), "{d}");
}

#[test]
fn a_backward_needs_the_forwards_stats() {
    let (mut forward, grads) = backward();
    forward.stats = None;
    let d = decline(&forward, &grads);
    assert!(
        d.contains("tensor uid 1") && d.contains("stats_tensor_uid"),
        "{d}"
    );
}

#[test]
fn a_gradient_on_other_offsets_than_its_primal_is_declined() {
    let (forward, mut grads) = backward();
    // dO and dQ on a third offsets tensor (uid 12), consistent with each other (the GPU
    // contract's pair rule holds), while O and Q are on 10: AITER has one seqstart_q for all four.
    grads[0] = ragged("do_tensor_uid", 20, [2, 8, 4, 128], 12);
    grads[1] = ragged("dq_tensor_uid", 21, [2, 8, 4, 128], 12);
    let d = decline(&forward, &grads);
    assert!(
        d.contains("tensor uid 20") && d.contains("do_tensor_uid ragged_offset_tensor_uid = 12"),
        "{d}"
    );
    assert!(d.contains("o_tensor_uid's offsets uid 10"), "{d}");
    // dQ alone on another tensor: the pair rule (dQ with dO) declines it first.
    let (forward, mut grads) = backward();
    grads[1] = ragged("dq_tensor_uid", 21, [2, 8, 4, 128], 12);
    assert!(decline(&forward, &grads).contains("ragged_offset_tensor_uid"));
}

#[test]
fn a_gradient_whose_token_starts_differ_is_declined() {
    let (forward, mut grads) = backward();
    // dV with token-unit offsets (multiplier H·D) on the same aux as V (element units).
    if let Some(o) = grads[3].ragged.as_mut() {
        o.multiplier = ragged_core::Multiplier::new(256).expect("positive");
    }
    let d = decline(&forward, &grads);
    assert!(
        d.contains("tensor uid 23") && d.contains("dv_tensor_uid multiplier/seqStride"),
        "{d}"
    );
}

#[test]
fn a_gradient_of_other_dims_than_its_primal_is_declined() {
    let (forward, mut grads) = backward();
    // dK with 2 heads where K has 4 (a gradient reduced to fewer heads than its primal).
    grads[2] = ragged("dk_tensor_uid", 22, [2, 16, 2, 128], 11);
    grads[3] = ragged("dv_tensor_uid", 23, [2, 16, 2, 128], 11);
    let d = decline(&forward, &grads);
    assert!(d.contains("tensor uid 22") && d.contains("2 × 128"), "{d}");
    assert!(d.contains("k_tensor_uid's 4 × 128"), "{d}");
}

#[test]
fn the_forwards_limits_apply_to_the_backward() {
    let (mut forward, grads) = backward();
    for t in [
        &mut forward.q,
        &mut forward.k,
        &mut forward.v,
        &mut forward.o,
    ] {
        t.dtype = ragged_core::DataType::F32;
    }
    let d = decline(&forward, &grads);
    assert!(d.contains("FLOAT") && d.contains("HALF or BFLOAT16"), "{d}");
}

#[test]
fn every_band_gets_the_same_deterministic_ck_plan() {
    let (mut forward, grads) = backward();
    let (_, unmasked) = plan_of(&forward, &grads, FOUND).expect("taken");
    for alignment in [DiagonalAlignment::TopLeft, DiagonalAlignment::BottomRight] {
        forward.mask = MaskBand {
            left: None,
            right: Some(0),
            alignment,
        };
        let (_, plan) = plan_of(&forward, &grads, FOUND).expect("taken");
        assert_eq!(plan.ck_tile, unmasked.ck_tile, "{alignment:?}");
        assert_eq!(plan.workspace, unmasked.workspace, "{alignment:?}");
    }
}
