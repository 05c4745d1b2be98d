use super::*;
use crate::applicability::GpuArch;
use crate::backward::check_backward;
use crate::device_kernels::tests::{parameters, signature};
use crate::fixtures::{self, base_problem};
use crate::problem::{AiterProblem, IndexWidth, LseLayout, RaggedAux, RaggedOperand, SeqLens};
use crate::shim_abi::DTYPE_FP16;
use ragged_core::{DiagonalAlignment, MaskBand};

fn buffers() -> BackwardBuffers {
    BackwardBuffers {
        forward: DeviceBuffers {
            seq_len_q: 0,
            seq_len_kv: 0,
            lse_offsets: 0,
            ..fixtures::buffers()
        },
        d_o: 0xb000,
        dq: 0xc000,
        dk: 0xd000,
        dv: 0xe000,
    }
}

/// bf16, B = 2, H_q = H_kv = 4, D 128, S_q 8 / S_kv 16, bottom-right causal, dense stats;
/// dO packed like O, dQ/dK/dV with 8 extra elements per token row (strides of their own).
fn mha_causal() -> AiterBackwardProblem {
    let pad = |mut t: RaggedOperand, uid: i64, extra: i64| {
        t.uid = uid;
        t.seq_stride += extra;
        // same token starts: element offsets scale with the row stride
        t.aux.multiplier = t.seq_stride;
        t
    };
    let mut forward = AiterProblem {
        mask: MaskBand {
            left: None,
            right: Some(0),
            alignment: DiagonalAlignment::BottomRight,
        },
        lse: LseLayout::Dense {
            uid: 9,
            strides: [32, 8, 1, 1],
            alignment: 16,
        },
        k: fixtures::operand(2, 4, 128, 11),
        v: fixtures::operand(3, 4, 128, 11),
        ..base_problem()
    };
    for t in [
        &mut forward.q,
        &mut forward.k,
        &mut forward.v,
        &mut forward.o,
    ] {
        t.aux.multiplier = t.seq_stride;
    }
    AiterBackwardProblem {
        forward,
        d_o: pad(forward.o, 20, 0),
        dq: pad(forward.q, 21, 8),
        dk: pad(forward.k, 22, 16),
        dv: pad(forward.v, 23, 24),
    }
}

fn plan(p: &AiterBackwardProblem) -> AiterBackwardPlan {
    check_backward(p, &GpuArch::new("gfx942:sramecc+:xnack-"), "gfx942;gfx950").expect("taken")
}

#[test]
fn causal_backward_maps_to_deterministic_group_mode_with_each_tensors_strides() {
    let p = mha_causal();
    let a = shim_bwd_args(&p, &plan(&p), &buffers(), 0x10000, 0x77);
    // Workspace (B = 2, stats): seqstart_q @0, seqstart_k @0x100, status @0x400,
    // LSE scratch @0x500 (4 heads × 16 rows × 4 bytes), D scratch @0x600, AITER's @0x700:
    // CK's host part 4·2 → 16, 8·3 → 32, 32·1024 = 32768, 16·2 = 32: 32848 → 36864 (9 pages),
    // then f32 dQ splits 4 heads × ceil(16 / 128) = 1 split × 16 rows × 128 = 32768 bytes:
    // 69632 bytes in all.
    let expected = "RaggedAiterBwdArgs {
    struct_size: 280,
    data_type: 1,
    q_ptr: 0x0000000000001000,
    k_ptr: 0x0000000000002000,
    v_ptr: 0x0000000000003000,
    o_ptr: 0x0000000000004000,
    do_ptr: 0x000000000000b000,
    lse_ptr: 0x0000000000010500,
    d_ptr: 0x0000000000010600,
    dq_ptr: 0x000000000000c000,
    dk_ptr: 0x000000000000d000,
    dv_ptr: 0x000000000000e000,
    seqstart_q_ptr: 0x0000000000010000,
    seqstart_k_ptr: 0x0000000000010100,
    cu_seqlen_q_ptr: 0x0000000000000000,
    cu_seqlen_k_ptr: 0x0000000000000000,
    stream: 0x0000000000000077,
    batch: 2,
    max_seqlen_q: 8,
    max_seqlen_k: 16,
    seqlen_q: 16,
    seqlen_k: 32,
    hdim_q: 128,
    hdim_v: 128,
    nhead_q: 4,
    nhead_k: 4,
    stride_q: 512,
    stride_k: 512,
    stride_v: 512,
    stride_o: 512,
    stride_do: 512,
    stride_dq: 520,
    stride_dk: 528,
    stride_dv: 536,
    nhead_stride_q: 128,
    nhead_stride_k: 128,
    nhead_stride_v: 128,
    nhead_stride_o: 128,
    nhead_stride_do: 128,
    nhead_stride_dq: 128,
    nhead_stride_dk: 128,
    nhead_stride_dv: 128,
    nhead_stride_lsed: 16,
    mask_type: 2,
    window_size_left: -1,
    window_size_right: 0,
    scale: 0.125,
    use_asm_v3: 0,
    v3_atomic_fp32: 0,
    v3_bf16_cvt: 0,
    is_deterministic: 1,
    aiter_workspace_ptr: 0x0000000000010700,
    aiter_workspace_bytes: 69632,
}";
    assert_eq!(format!("{a:#?}"), expected);
}

/// Configuration 2, fp16, top-left window (4, 0): cumulative logical lengths go to AITER, still
/// deterministic with asm off.
#[test]
fn padded_top_left_backward_sends_cumulative_lengths_deterministically() {
    let mut p = mha_causal();
    let f = &mut p.forward;
    f.dtype = ragged_core::DataType::F16;
    f.seq_len_q = Some(SeqLens {
        uid: 30,
        width: IndexWidth::I64,
    });
    f.seq_len_kv = Some(SeqLens {
        uid: 31,
        width: IndexWidth::I32,
    });
    f.mask = MaskBand {
        left: Some(4),
        right: Some(0),
        alignment: DiagonalAlignment::TopLeft,
    };
    let a = shim_bwd_args(&p, &plan(&p), &buffers(), 0x20000, 0);
    // B = 2: seqstart_q @0, seqstart_k @0x100, len_q @0x200, len_kv @0x300, cu_seqlen_q @0x400,
    // cu_seqlen_k @0x500.
    assert_eq!(a.data_type, DTYPE_FP16);
    assert_eq!(a.cu_seqlen_q_ptr as usize, 0x20400);
    assert_eq!(a.cu_seqlen_k_ptr as usize, 0x20500);
    assert_eq!(
        (a.mask_type, a.window_size_left, a.window_size_right),
        (1, 4, 0)
    );
    assert_eq!((a.use_asm_v3, a.is_deterministic), (0, 1));
    // Two more cumulative regions move D to 0x800 and AITER's scratch to 0x900.
    assert_eq!(a.d_ptr as usize, 0x20800);
    assert_eq!(a.aiter_workspace_ptr as usize, 0x20900);
}

/// Every head dim the forward takes maps to a CK bucket whose key tile sizes AITER's scratch.
#[test]
fn head_dims_map_to_cks_buckets_and_size_its_dq_splits() {
    let cases = [
        // (D_qk, D_v, bucket, kN0)
        (32, 32, 32, 128),
        (64, 64, 64, 128),
        (72, 72, 96, 128),
        (96, 96, 96, 128),
        (128, 128, 128, 128),
        (128, 64, 128, 128),
        (136, 128, 256, 64),
        (192, 128, 256, 64),
        (192, 192, 256, 64),
        (256, 256, 256, 64),
    ];
    for (d_qk, d_v, bucket, key_tile) in cases {
        let mut p = mha_causal();
        let f = &mut p.forward;
        for t in [&mut f.q, &mut f.k] {
            t.head_dim = d_qk;
        }
        for t in [&mut f.v, &mut f.o] {
            t.head_dim = d_v;
        }
        p.dq.head_dim = d_qk;
        p.dk.head_dim = d_qk;
        p.d_o.head_dim = d_v;
        p.dv.head_dim = d_v;
        let plan = plan(&p);
        assert_eq!(
            (plan.ck_tile.head_dim, plan.ck_tile.key_tile),
            (bucket, key_tile),
            "{d_qk} × {d_v}"
        );
        let a = shim_bwd_args(&p, &plan, &buffers(), 0x10000, 0);
        assert_eq!(
            (a.hdim_q, a.hdim_v, a.is_deterministic),
            (d_qk as i32, d_v as i32, 1)
        );
        // 36864 host bytes, then 4 heads × ceil(16 / kN0) = 1 split × 16 rows × D_qk × 4 bytes.
        assert_eq!(
            a.aiter_workspace_bytes,
            36864 + 4 * 16 * d_qk as u64 * 4,
            "{d_qk}"
        );
    }
}

#[test]
fn a_head_dim_above_cks_largest_bucket_is_declined_naming_it() {
    let p = mha_causal();
    let mut q = p.forward.q;
    q.head_dim = 264;
    let d = crate::backward::ck_backward_tile(&q, &p.forward.v)
        .expect_err("no bucket")
        .to_string();
    assert!(
        d.contains("tensor uid 1") && d.contains("q_tensor_uid head dim (D_qk) = 264"),
        "{d}"
    );
    let mut v = p.forward.v;
    v.head_dim = 320;
    let d = crate::backward::ck_backward_tile(&p.forward.q, &v)
        .expect_err("no bucket")
        .to_string();
    assert!(
        d.contains("tensor uid 3") && d.contains("v_tensor_uid head dim (D_v) = 320"),
        "{d}"
    );
}

/// Long keys: CK's upper bound of dQ splits is ceil(S_kv_max / kN0), over B·S_q_max rows.
#[test]
fn the_dq_split_bound_follows_the_key_length_and_tile() {
    let mut p = mha_causal();
    p.forward.s_kv_max = 1000;
    let long_keys = plan(&p);
    // D 128: kN0 128 → ceil(1000 / 128) = 8 splits; 4 heads × 8 × 16 rows × 128 × 4 bytes.
    assert_eq!(long_keys.workspace.aiter_scratch.bytes, 36864 + 262_144);
    // B = 300: host part 1200 → 1200, 2408 → 2416, 32768, 4800: 41184 → 45056 (11 pages).
    p.forward.batch = 300;
    let many = plan(&p);
    assert_eq!(
        many.workspace.aiter_scratch.bytes,
        45056 + 4 * 8 * (300 * 8) * 128 * 4
    );
}

#[test]
fn backward_launches_follow_the_kernel_sources() {
    let p = mha_causal();
    let plan = plan(&p);
    let lse = lse_launch(&p, &plan, &buffers(), 0x10000);
    assert_eq!(signature(&lse), parameters(BWD_LSE_SOURCE, BWD_LSE_KERNEL));
    let fix = bwd_fixup_launch(&p, &plan, &buffers(), 0x10000);
    assert_eq!(
        signature(&fix),
        parameters(BWD_FIXUP_SOURCE, BWD_FIXUP_KERNEL)
    );
}

#[test]
fn the_lse_prepass_reads_the_stats_in_their_layout_into_the_scratch() {
    let p = mha_causal();
    let plan = plan(&p);
    let value = |l: &Launch, name: &str| {
        l.args
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let dense = lse_launch(&p, &plan, &buffers(), 0x10000);
    assert_eq!(value(&dense, "stats"), KernelArg::Ptr(0x9000));
    assert_eq!(value(&dense, "stats_layout"), KernelArg::I32(1));
    assert_eq!(value(&dense, "stride_h"), KernelArg::I64(8));
    assert_eq!(value(&dense, "stats_offsets"), KernelArg::Ptr(0));
    assert_eq!(value(&dense, "scratch"), KernelArg::Ptr(0x10500));
    assert_eq!(value(&dense, "scratch_head_stride"), KernelArg::I64(16));
    // 2 · 8 · 4 = 64 rows: one block
    assert_eq!(dense.config, LaunchConfig::linear(1, BWD_THREADS));

    let mut ragged = p;
    ragged.forward.lse = LseLayout::Ragged {
        uid: 9,
        seq_stride: 4,
        head_stride: 1,
        aux: RaggedAux {
            uid: 12,
            width: IndexWidth::I64,
            multiplier: 4,
        },
        alignment: 16,
    };
    let mut b = buffers();
    b.forward.lse_offsets = 0xa000;
    let r = lse_launch(&ragged, &plan, &b, 0x10000);
    assert_eq!(value(&r, "stats_layout"), KernelArg::I32(2));
    assert_eq!(value(&r, "stats_offsets"), KernelArg::Ptr(0xa000));
    assert_eq!(value(&r, "stats_offset_width"), KernelArg::I32(8));
    assert_eq!(value(&r, "stats_multiplier"), KernelArg::I64(4));
    assert_eq!(value(&r, "stats_seq_stride"), KernelArg::I64(4));
}

#[test]
fn the_fixup_covers_both_sides_and_writes_the_gradients() {
    let p = mha_causal();
    let fix = bwd_fixup_launch(&p, &plan(&p), &buffers(), 0x10000);
    // 2 · 8 · 4 query items + 2 · 16 · 4 key items = 192: one block.
    assert_eq!(fix.config, LaunchConfig::linear(1, BWD_THREADS));
    let args: Vec<_> = fix.args.iter().map(|(n, v)| (*n, *v)).collect();
    assert!(args.contains(&("dq", KernelArg::Ptr(0xc000))));
    assert!(args.contains(&("dk_seq_stride", KernelArg::I64(528))));
    assert!(args.contains(&("dv", KernelArg::Ptr(0xe000))));
    assert!(args.contains(&("heads_kv", KernelArg::I32(4))));
}
