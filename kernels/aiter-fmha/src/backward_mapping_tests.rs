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

/// bf16, B = 2, H_q 4 / H_kv 2, D 128, S_q 8 / S_kv 16, bottom-right causal, dense stats;
/// dO packed like O, dQ/dK/dV with 8 extra elements per token row (strides of their own).
fn gqa_causal() -> AiterBackwardProblem {
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
fn gqa_causal_backward_maps_to_group_mode_with_each_tensors_strides() {
    let p = gqa_causal();
    let a = shim_bwd_args(&p, &plan(&p), &buffers(), 0x10000, 0x77);
    // Workspace (B = 2, stats): seqstart_q @0, seqstart_k @0x100, status @0x400,
    // LSE scratch @0x500 (4 heads × 16 rows × 4 bytes), D scratch @0x600.
    let expected = "RaggedAiterBwdArgs {
    struct_size: 264,
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
    nhead_k: 2,
    stride_q: 512,
    stride_k: 256,
    stride_v: 256,
    stride_o: 512,
    stride_do: 512,
    stride_dq: 520,
    stride_dk: 272,
    stride_dv: 280,
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
    use_asm_v3: 1,
    v3_atomic_fp32: 1,
    v3_bf16_cvt: 0,
    is_deterministic: 0,
}";
    assert_eq!(format!("{a:#?}"), expected);
}

/// Configuration 2, fp16, D 64, top-left window (4, 0), ragged stats: cumulative logical
/// lengths go to AITER, asm stays off.
#[test]
fn padded_top_left_backward_sends_cumulative_lengths_without_asm() {
    let mut p = gqa_causal();
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
    assert_eq!(a.use_asm_v3, 0);
}

#[test]
fn backward_launches_follow_the_kernel_sources() {
    let p = gqa_causal();
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
    let p = gqa_causal();
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
    let p = gqa_causal();
    let fix = bwd_fixup_launch(&p, &plan(&p), &buffers(), 0x10000);
    // 2 · 8 · 4 query items + 2 · 16 · 2 key items = 128: one block.
    assert_eq!(fix.config, LaunchConfig::linear(1, BWD_THREADS));
    let args: Vec<_> = fix.args.iter().map(|(n, v)| (*n, *v)).collect();
    assert!(args.contains(&("dq", KernelArg::Ptr(0xc000))));
    assert!(args.contains(&("dk_seq_stride", KernelArg::I64(272))));
    assert!(args.contains(&("dv", KernelArg::Ptr(0xe000))));
    assert!(args.contains(&("heads_kv", KernelArg::I32(2))));
}
