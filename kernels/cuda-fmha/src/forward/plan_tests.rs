use super::*;
use crate::forward::device_abi::TileConfig;
use ragged_core::MaskBand;
use ragged_core::problem::test_support::{dense_stats, in_bhsd_order, problem, ragged};
use ragged_core::problem::{IndexInput, IndexWidth};

/// The decline's text, which must name `uid` and `field`.
fn rejected(p: &RaggedSdpaProblem, uid: i64, field: &str) -> String {
    let text = plan(p).expect_err("declined").to_string();
    assert!(text.starts_with(&format!("tensor uid {uid}: ")), "{text}");
    assert!(text.contains(field), "{text}");
    text
}

fn with_head_dim(p: &mut RaggedSdpaProblem, d: i64, dtype: DataType) {
    for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
        let [b, s, h, _] = t.bshd();
        let aux = t.ragged.map_or(0, |o| o.uid);
        *t = Operand {
            dtype,
            ..ragged(t.role, t.uid, [b, s, h, d], aux)
        };
    }
}

#[test]
fn a_supported_graph_gets_its_geometry() {
    let plan = plan(&problem()).unwrap();
    assert_eq!(plan.kernel.name(), "ragged_fmha_fwd_bf16_d128");
    assert_eq!((plan.batch, plan.s_q_max, plan.s_kv_max), (3, 200, 300));
    assert_eq!((plan.heads_q, plan.heads_kv), (8, 2));
    assert_eq!(
        plan.q,
        RowStrides {
            seq: 1024,
            head: 128
        }
    );
    assert_eq!(
        plan.k,
        RowStrides {
            seq: 256,
            head: 128
        }
    );
    assert_eq!(
        (plan.mask_left, plan.mask_right, plan.bottom_right),
        (-1, -1, 0)
    );
    assert_eq!(plan.scale, 0.125);
    // Sized for BM = 64: 3 RaggedBatch (96 B) -> tiles at 256; 3 · ceil(200 / 64) = 12 tiles
    // (96 B) -> counters at 512: four i32 counters, the fused list's two u64 words and a u32
    // (48 B), then 256 B of slack for aligning the caller's pointer.
    assert_eq!(
        plan.workspace,
        WorkspaceLayout {
            batches: 0,
            tiles: 256,
            tile_count: 512,
            error_flag: 516,
            total_bytes: 560 + 256
        }
    );
    assert_eq!(plan.workspace_bytes(), 816);
}

#[test]
fn geometry_follows_the_published_tile_config() {
    let plan = plan(&problem()).unwrap();
    // The sm_90a d128 configuration: BM = 192, 384 threads.
    let tiles = TileConfig::from_raw(plan.kernel.name(), [192, 64, 384, 115_712]).unwrap();
    let g = plan.geometry(tiles).unwrap();
    // ceil(200 / 192) = 2 tiles per batch, times 3 batches, times 8 heads.
    assert_eq!((g.max_tiles, g.grid_blocks), (2, 48));
    assert_eq!(g.workspace.tiles, 256);
    // 6 tiles (48 B) still end below 512.
    assert_eq!(g.workspace.tile_count, 512);
    assert!(g.workspace.total_bytes <= plan.workspace_bytes());

    let tiles = TileConfig::from_raw(plan.kernel.name(), [64, 64, 128, 81_920]).unwrap();
    let g = plan.geometry(tiles).unwrap();
    assert_eq!((g.max_tiles, g.grid_blocks), (4, 96));
    assert_eq!(g.workspace, plan.workspace);
}

#[test]
fn fp16_d64_with_causal_bottom_right_and_seq_lens() {
    let mut p = problem();
    with_head_dim(&mut p, 64, DataType::F16);
    p.mask = MaskBand::causal_bottom_right();
    p.seq_len_q = Some(IndexInput {
        role: "seq_len_q_tensor_uid",
        uid: 20,
        width: IndexWidth::I64,
    });
    let plan = plan(&p).unwrap();
    assert_eq!(plan.kernel.name(), "ragged_fmha_fwd_f16_d64");
    assert_eq!(
        (plan.mask_left, plan.mask_right, plan.bottom_right),
        (-1, 0, 1)
    );
    assert_eq!(plan.seq_len_q, Some((20, 8)));
    assert_eq!(plan.seq_len_kv, None);
}

#[test]
fn fp32_and_other_types_are_declined() {
    let mut p = problem();
    with_head_dim(&mut p, 128, DataType::F32);
    let text = rejected(&p, 1, "data type");
    assert!(text.contains("HALF or BFLOAT16"), "{text}");
    let mut p = problem();
    p.v.dtype = DataType::F16;
    rejected(&p, 3, "data type");
}

#[test]
fn head_dims_without_a_compiled_kernel_are_declined() {
    for d in [32, 80, 160, 512] {
        let mut p = problem();
        with_head_dim(&mut p, d, DataType::BF16);
        let text = rejected(&p, 1, "head dim");
        assert!(text.contains(&format!("= {d},")), "{text}");
        assert!(text.contains("64, 96, 128, 192 or 256"), "{text}");
    }
}

#[test]
fn each_compiled_head_dim_selects_its_kernel() {
    for (d, dtype, kernel) in [
        (64, DataType::BF16, "ragged_fmha_fwd_bf16_d64"),
        (96, DataType::F16, "ragged_fmha_fwd_f16_d96"),
        (128, DataType::F16, "ragged_fmha_fwd_f16_d128"),
        (256, DataType::BF16, "ragged_fmha_fwd_bf16_d256"),
    ] {
        let mut p = problem();
        with_head_dim(&mut p, d, dtype);
        assert_eq!(plan(&p).unwrap().kernel.name(), kernel, "D = {d}");
    }
}

/// Q and K with head dim `d_qk`, V and O with `d_v`, in token-unit offsets so that Q and O (K and
/// V) share token starts across head dims.
fn with_value_head_dim(d_qk: i64, d_v: i64) -> RaggedSdpaProblem {
    let mut p = problem();
    p.q = ragged("q_tensor_uid", 1, [3, 200, 8, d_qk], 10);
    p.k = ragged("k_tensor_uid", 2, [3, 300, 2, d_qk], 11);
    p.v = ragged("v_tensor_uid", 3, [3, 300, 2, d_v], 11);
    p.o = ragged("o_tensor_uid", 4, [3, 200, 8, d_v], 10);
    for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
        let stride = t.seq_stride();
        if let Some(o) = t.ragged.as_mut() {
            o.multiplier = ragged_core::Multiplier::new(stride).expect("positive");
        }
    }
    p
}

#[test]
fn value_head_dim_must_be_a_compiled_pair() {
    let text = rejected(&with_value_head_dim(128, 64), 3, "head dim");
    assert!(text.contains("128 with Q/K head dim 128"), "{text}");
    let text = rejected(&with_value_head_dim(192, 192), 3, "head dim");
    assert!(text.contains("128 with Q/K head dim 192"), "{text}");
}

#[test]
fn deepseek_style_192_128_is_planned() {
    let plan = plan(&with_value_head_dim(192, 128)).unwrap();
    assert_eq!(plan.kernel.name(), "ragged_fmha_fwd_bf16_d192v128");
    assert_eq!((plan.v.seq, plan.o.seq), (2 * 128, 8 * 128));
}

#[test]
fn the_shared_contract_comes_first() {
    let mut p = problem();
    p.k.alignment = 8;
    rejected(&p, 2, "alignment");
}

#[test]
fn dense_lse_maps_its_strides() {
    let mut p = problem();
    p.stats = Some(dense_stats(5, [3, 8, 200, 1], [1600, 200, 1, 1]));
    let lse = plan(&p).unwrap().lse.unwrap();
    assert_eq!(
        (lse.batch_stride, lse.head_stride, lse.seq_stride),
        (1600, 200, 1)
    );
    assert_eq!(lse.offsets, None);
}

#[test]
fn ragged_lse_is_token_major_with_its_own_offsets() {
    let mut p = problem();
    let mut lse = ragged("stats_tensor_uid", 5, [3, 200, 8, 1], 13);
    lse.dtype = DataType::F32;
    if let Some(o) = lse.ragged.as_mut() {
        o.multiplier = ragged_core::Multiplier::new(8).expect("positive");
    }
    p.stats = Some(lse);
    let args = plan(&p).unwrap().lse.unwrap();
    assert_eq!(
        (args.seq_stride, args.head_stride, args.batch_stride),
        (8, 1, 0)
    );
    assert_eq!(
        args.offsets,
        Some(OffsetsArgs {
            uid: 13,
            bytes: 4,
            multiplier: 8
        })
    );
}

#[test]
fn negative_mask_bounds_are_unbounded_and_huge_ones_declined() {
    let mut p = problem();
    p.mask.left = Some(-2);
    p.mask.right = Some(3);
    let plan = plan(&p).unwrap();
    assert_eq!((plan.mask_left, plan.mask_right), (-1, 3));
    let mut p = problem();
    p.mask.right = Some(i64::from(i32::MAX) + 1);
    rejected(&p, 1, "mask right bound");
}

#[test]
fn a_runtime_scale_plans_with_a_finite_stand_in() {
    let mut p = problem();
    p.scale = ragged_core::problem::ScalePlan::RuntimeHostScalar {
        uid: 30,
        data_type: ragged_core::problem::ScalarType::Float,
    };
    assert_eq!(plan(&p).unwrap().scale, 1.0);
}

#[test]
fn grids_beyond_int32_are_declined() {
    let mut p = problem();
    // 2^20 batches x 2^16 / 64 tiles x 4 heads = 2^32 blocks.
    p.q = ragged("q_tensor_uid", 1, [1 << 20, 1 << 16, 4, 128], 10);
    p.o = ragged("o_tensor_uid", 4, [1 << 20, 1 << 16, 4, 128], 10);
    p.k = ragged("k_tensor_uid", 2, [1 << 20, 300, 2, 128], 11);
    p.v = ragged("v_tensor_uid", 3, [1 << 20, 300, 2, 128], 11);
    let text = rejected(&p, 1, "forward grid");
    assert!(text.contains(&format!("= {},", 1u64 << 32)), "{text}");
}

#[test]
fn both_ragged_dims_orders_launch_with_the_same_arguments() {
    // S_q = 200 against H_q = 8 and S_kv = 300 against H_kv = 2: a positional reading of the
    // [B, H, S, D] order would see 200 heads against 300.
    let mut a = problem();
    a.stats = Some(dense_stats(5, [3, 8, 200, 1], [1600, 200, 1, 1]));
    let mut token_stats = ragged("stats_tensor_uid", 5, [3, 200, 8, 1], 13);
    token_stats.dtype = DataType::F32;
    for stats in [a.stats, Some(token_stats)] {
        a.stats = stats;
        let mut b = a;
        in_bhsd_order(&mut b);
        assert_ne!(a.q.dims, b.q.dims);
        assert_eq!(plan(&a).unwrap(), plan(&b).unwrap());
    }
}
