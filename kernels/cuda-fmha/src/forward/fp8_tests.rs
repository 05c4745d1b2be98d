use super::*;
use crate::forward::fp8_launch::fp8_required_pointers;
use crate::forward::plan::plan;
use crate::forward::{FmhaBuffers, FmhaPlan};
use ragged_core::problem::test_support::fp8;
use ragged_core::problem::{Amax, Fp8Scalar, Fp8Softmax};
use ragged_gpu_runtime::cuda::error::TensorRole;

fn scalar(role: &'static str, plan: ScalePlan) -> Fp8Scalar {
    Fp8Scalar { role, plan }
}

fn amax(role: &'static str, uid: i64) -> Amax {
    Amax {
        role,
        uid,
        rank4: true,
        alignment: 16,
    }
}

/// cuDNN's shape: every scalar, an e4m3 O with scale_o, both amax outputs; descale_q on the device,
/// descale_k pass-by-value, the rest baked.
fn full() -> RaggedSdpaProblem {
    let mut p = fp8(3, (200, 8), (300, 2), 128);
    p.o.dtype = DataType::Fp8(Fp8Format::E4M3);
    let f = p.fp8.as_mut().unwrap();
    f.descale_q.plan = ScalePlan::DeviceTensor {
        uid: 30,
        data_type: ragged_core::problem::ScalarType::Float,
    };
    f.descale_k.plan = ScalePlan::RuntimeHostScalar {
        uid: 31,
        data_type: ragged_core::problem::ScalarType::Float,
    };
    f.descale_v.plan = ScalePlan::Fixed(0.5);
    f.softmax = Some(Fp8Softmax {
        scale_s: scalar("scale_s_tensor_uid", ScalePlan::Fixed(448.0)),
        descale_s: scalar("descale_s_tensor_uid", ScalePlan::Fixed(1.0 / 448.0)),
    });
    f.output = Fp8OutputPlan::Fp8 {
        format: Fp8Format::E4M3,
        scale_o: scalar("scale_o_tensor_uid", ScalePlan::Fixed(2.0)),
    };
    f.amax_o = Some(amax("amax_o_tensor_uid", 40));
    f.amax_s = Some(amax("amax_s_tensor_uid", 41));
    p
}

fn declined(p: &RaggedSdpaProblem, uid: i64, field: &str) -> String {
    let text = plan(p).expect_err("declined").to_string();
    assert!(text.starts_with(&format!("tensor uid {uid}: ")), "{text}");
    assert!(text.contains(field), "{text}");
    text
}

#[test]
fn upstreams_shape_runs_on_the_e4m3_entry_point() {
    let plan = plan(&fp8(3, (200, 8), (300, 2), 128)).unwrap();
    assert_eq!(plan.kernel.name(), "ragged_fmha_fwd_e4m3_d128");
    assert!(plan.kernel.is_fp8());
    let f = plan.fp8.as_ref().unwrap();
    assert_eq!(f.output, Fp8OutputKind::Bf16);
    assert!(!f.p_scaled);
    assert_eq!(f.scalars[DESCALE_S], None);
    assert_eq!(f.scalars[SCALE_O], None);
    assert_eq!(f.values[DESCALE_Q], 1.0);
    assert_eq!(f.amax_o, None);
    // Element strides, as the pre-pass reads the offsets: bytes of e4m3 Q.
    assert_eq!((plan.q.seq, plan.q.head), (1024, 128));
    // ceil(300 / 192) = 2 blocks per (KV head, batch): 128 rows of 2 · 3 · 2 blocks of 192 keys,
    // after the pre-pass's records (counters at 512 + 48 bytes, aligned up to 768).
    assert_eq!(f.vt_keys, 192);
    assert_eq!(f.vt_blocks, 2);
    assert_eq!(f.workspace.vt, 768);
    assert_eq!(f.workspace.vt_bytes, 128 * 12 * 192);
    assert_eq!(f.workspace.amax, None);
    assert_eq!(plan.workspace_bytes(), 768 + 128 * 12 * 192 + 256);
}

#[test]
fn d64_runs_on_its_own_entry_point() {
    let plan = plan(&fp8(2, (64, 4), (64, 2), 64)).unwrap();
    assert_eq!(plan.kernel.name(), "ragged_fmha_fwd_e4m3_d64");
    // 64 rows of 2 · 2 · 1 blocks of 128 keys.
    assert_eq!(plan.fp8.unwrap().workspace.vt_bytes, 64 * 4 * 128);
}

#[test]
fn d256_runs_on_its_own_entry_point_over_blocks_of_64_keys() {
    let plan = plan(&fp8(3, (200, 8), (300, 2), 256)).unwrap();
    assert_eq!(plan.kernel.name(), "ragged_fmha_fwd_e4m3_d256");
    assert_eq!((plan.kernel.d_qk(), plan.kernel.d_v()), (256, 256));
    let f = plan.fp8.as_ref().unwrap();
    // ceil(300 / 64) = 5 blocks per (KV head, batch): 256 rows of 2 · 3 · 5 blocks of 64 keys,
    // after the same pre-pass records as D 128's.
    assert_eq!(f.vt_keys, 64);
    assert_eq!(f.vt_blocks, 5);
    assert_eq!(f.workspace.vt, 768);
    assert_eq!(f.workspace.vt_bytes, 256 * 30 * 64);
    assert_eq!(plan.workspace_bytes(), 768 + 256 * 30 * 64 + 256);
    // Rows of 256 codes: 128 two-byte units per row of Q (8 heads), K and V (2 heads).
    let view = crate::forward::fp8_launch::two_byte_view(&plan, f);
    assert_eq!((view.q.seq, view.q.head), (1024, 128));
    assert_eq!((view.k.seq, view.k.head), (256, 128));
    // D 64 keeps blocks of 128 keys, D 128 takes 192.
    for (d, keys) in [(64, 128), (128, 192)] {
        let plan = plan_d(d);
        assert_eq!(plan.fp8.unwrap().vt_keys, keys, "D {d}");
    }
}

fn plan_d(d: i64) -> FmhaPlan {
    plan(&fp8(2, (64, 4), (64, 2), d)).unwrap()
}

#[test]
fn the_transposed_v_map_follows_the_entry_points_block_width() {
    use crate::forward::fp8_launch::vt_swizzle;
    use crate::forward::tensor_maps::RowSwizzle;
    let k = "ragged_fmha_fwd_e4m3_d256";
    assert_eq!(vt_swizzle(k, 64, 64).unwrap(), RowSwizzle::Bytes64);
    assert_eq!(RowSwizzle::Bytes64.box_columns(), 32);
    assert_eq!(vt_swizzle(k, 128, 128).unwrap(), RowSwizzle::Bytes128);
    assert_eq!(RowSwizzle::Bytes128.box_columns(), 64);
    // Blocks of 192 keys: three boxes of 64 keys.
    assert_eq!(
        vt_swizzle("ragged_fmha_fwd_e4m3_d128", 192, 192).unwrap(),
        RowSwizzle::Bytes64
    );
    let text = vt_swizzle(k, 64, 128).unwrap_err().to_string();
    assert!(
        text.contains("block_n 128") && text.contains("64 keys"),
        "{text}"
    );
    let text = vt_swizzle(k, 96, 96).unwrap_err().to_string();
    assert!(text.contains("96 keys"), "{text}");
}

#[test]
fn cudnns_shape_binds_every_scalar_and_both_amaxes() {
    let plan = plan(&full()).unwrap();
    let f = plan.fp8.as_ref().unwrap();
    assert_eq!(f.output, Fp8OutputKind::E4m3);
    assert!(f.p_scaled);
    assert_eq!(f.values[DESCALE_V], 0.5);
    assert_eq!(f.values[SCALE_S], 448.0);
    assert_eq!(f.values[SCALE_O], 2.0);
    assert!(matches!(
        f.scalars[DESCALE_Q],
        Some(ScalePlan::DeviceTensor { uid: 30, .. })
    ));
    let vt_end = (768 + 128 * 12 * 192u64).div_ceil(256) * 256;
    assert_eq!(f.workspace.amax, Some(vt_end));
    assert_eq!(
        plan.workspace_bytes(),
        vt_end + 2 * device_abi::FP8_AMAX_PARTIALS * 4 + 256
    );
    // The device scalar and the amax outputs are pointers the launch checks.
    let b = FmhaBuffers {
        fp8_scalars: [0x100, 0, 0, 0, 0, 0],
        amax_o: 0x204,
        amax_s: 0x208,
        ..FmhaBuffers::default()
    };
    let required = fp8_required_pointers(f, &b);
    assert_eq!(
        required,
        vec![
            (0x100, 30, TensorRole::Fp8Scalar, 4),
            (0x204, 40, TensorRole::Amax, 4),
            (0x208, 41, TensorRole::Amax, 4)
        ]
    );
}

#[test]
fn what_the_e4m3_kernels_do_not_compute_is_declined_by_name() {
    let p = fp8(2, (64, 4), (64, 2), 96);
    let text = declined(&p, 1, "head dim = 96");
    assert!(text.contains("64, 128 or 256"), "{text}");
    let mut p = fp8(2, (64, 4), (64, 2), 256);
    p.v.dims[3] = 128;
    p.o.dims[3] = 128;
    declined(&p, 3, "head dim = 128");

    let mut p = fp8(2, (64, 4), (64, 2), 128);
    let e5m2 = DataType::Fp8(Fp8Format::E5M2);
    for t in [&mut p.q, &mut p.k, &mut p.v] {
        t.dtype = e5m2;
    }
    p.fp8.as_mut().unwrap().input = Fp8Format::E5M2;
    let text = declined(&p, 1, "FP8 (fp8_e5m2)");
    assert!(text.contains("FP8_E4M3"), "{text}");

    let mut p = fp8(2, (64, 4), (64, 2), 128);
    p.o.dtype = DataType::F32;
    declined(&p, 4, "o_tensor_uid data type");
}

#[test]
fn the_two_byte_view_halves_q_k_and_an_e4m3_o() {
    let plan: FmhaPlan = plan(&full()).unwrap();
    let f = plan.fp8.clone().unwrap();
    let view = crate::forward::fp8_launch::two_byte_view(&plan, &f);
    assert_eq!((view.q.seq, view.q.head), (512, 64));
    assert_eq!((view.k.seq, view.k.head), (128, 64));
    assert_eq!((view.o.seq, view.o.head), (512, 64));
    assert_eq!(view.v, plan.v);
    let wide = crate::forward::plan::plan(&fp8(3, (200, 8), (300, 2), 128)).unwrap();
    let view = crate::forward::fp8_launch::two_byte_view(&wide, wide.fp8.as_ref().unwrap());
    assert_eq!(view.o, wide.o);
}
