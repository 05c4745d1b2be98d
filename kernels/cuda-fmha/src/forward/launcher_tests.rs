use super::*;
use crate::forward::plan::plan;
use ragged_core::problem::test_support::ragged;
use ragged_core::problem::{IndexInput, IndexWidth, Operand, RaggedSdpaProblem, ScalePlan};
use ragged_core::{DataType, MaskBand};

/// A packed ragged operand with int64 offsets in token units (multiplier = seqStride).
fn tokens(role: &'static str, uid: i64, dims: [i64; 4], aux: i64, dtype: DataType) -> Operand {
    let mut t = ragged(role, uid, dims, aux);
    t.dtype = dtype;
    let seq_stride = t.seq_stride();
    if let Some(o) = t.ragged.as_mut() {
        o.width = IndexWidth::I64;
        o.multiplier = ragged_core::Multiplier::new(seq_stride).expect("positive");
    }
    t
}

fn test_plan(with_lse: bool) -> FmhaPlan {
    let bf16 = DataType::BF16;
    let mut lse = tokens("stats_tensor_uid", 5, [2, 100, 4, 1], 12, DataType::F32);
    if let Some(o) = lse.ragged.as_mut() {
        o.width = IndexWidth::I32;
    }
    plan(&RaggedSdpaProblem {
        q: tokens("q_tensor_uid", 1, [2, 100, 4, 64], 10, bf16),
        k: tokens("k_tensor_uid", 2, [2, 150, 2, 64], 11, bf16),
        v: tokens("v_tensor_uid", 3, [2, 150, 2, 64], 11, bf16),
        o: tokens("o_tensor_uid", 4, [2, 100, 4, 64], 10, bf16),
        stats: with_lse.then_some(lse),
        seq_len_q: Some(IndexInput {
            role: "seq_len_q_tensor_uid",
            uid: 20,
            width: IndexWidth::I32,
        }),
        seq_len_kv: None,
        scale: ScalePlan::Fixed(0.5),
        mask: MaskBand::none(),
        paged: None,
        sinks: None,
        fp8: None,
    })
    .unwrap()
}

fn test_geometry(plan: &FmhaPlan) -> LaunchGeometry {
    plan.geometry(TileConfig::from_raw(plan.kernel.name(), [192, 64, 384, 115_712]).unwrap())
        .unwrap()
}

fn buffers(plan: &FmhaPlan) -> FmhaBuffers {
    FmhaBuffers {
        q: 0x1000,
        k: 0x2000,
        v: 0x3000,
        o: 0x4000,
        lse: 0x5000,
        q_offsets: 0x6000,
        kv_offsets: 0x7000,
        lse_offsets: 0x8000,
        seq_len_q: 0x9000,
        seq_len_kv: 0,
        workspace: 0xa010,
        workspace_bytes: plan.workspace_bytes(),
        ..FmhaBuffers::default()
    }
}

#[test]
fn prepass_arguments_follow_the_kernel_signature() {
    let plan = test_plan(true);
    let b = buffers(&plan);
    let g = test_geometry(&plan);
    let args = prepass_args(&plan, &g, &b, 0xa100);
    use KernelArg::{I32, I64, Ptr};
    // 28 parameters in ragged_fmha_prepass.
    assert_eq!(args.len(), 28);
    assert_eq!(
        args[..5],
        [Ptr(0x6000), I32(8), I64(256), I64(256), I32(100)]
    );
    assert_eq!(
        args[5..10],
        [Ptr(0x7000), I32(8), I64(128), I64(128), I32(150)]
    );
    // seq_len_q present (int32), seq_len_kv absent.
    assert_eq!(args[10..14], [Ptr(0x9000), I32(4), Ptr(0), I32(0)]);
    // Ragged LSE: its aux, int32, its multiplier (H_q · 1 = 4), batch stride unused.
    assert_eq!(args[14..19], [Ptr(0x8000), I32(4), I64(4), I64(0), I32(2)]);
    // BM and BN come from the published configuration.
    assert_eq!(args[19..24], [I32(192), I32(64), I32(-1), I32(-1), I32(0)]);
    let w = g.workspace;
    assert_eq!(
        args[24..],
        [
            Ptr(0xa100),
            Ptr(0xa100 + w.tiles),
            Ptr(0xa100 + w.tile_count),
            Ptr(0xa100 + w.error_flag)
        ]
    );
}

#[test]
fn forward_arguments_follow_the_kernel_signature() {
    let plan = test_plan(false);
    let g = test_geometry(&plan);
    let args = forward_args(&plan, &g, &buffers(&plan), 0xa100);
    use KernelArg::{F32, I32, I64, Ptr};
    // 24 parameters in RAGGED_FMHA_PARAMS; no LSE requested, so a null pointer.
    assert_eq!(args.len(), 24);
    assert_eq!(
        args[..5],
        [Ptr(0x1000), Ptr(0x2000), Ptr(0x3000), Ptr(0x4000), Ptr(0)]
    );
    assert_eq!(
        args[8..18],
        [
            I64(256),
            I64(64),
            I64(128),
            I64(64),
            I64(128),
            I64(64),
            I64(256),
            I64(64),
            I64(0),
            I64(0)
        ]
    );
    assert_eq!(
        args[18..],
        [I32(4), I32(2), F32(0.5), I32(-1), I32(-1), I32(0)]
    );
}

#[test]
fn buffers_are_checked_before_anything_is_enqueued() {
    let plan = test_plan(true);
    assert_eq!(check_buffers(&plan, &buffers(&plan)), Ok(()));

    let mut b = buffers(&plan);
    b.k = 0;
    let err = check_buffers(&plan, &b).unwrap_err().to_string();
    assert_eq!(err, "tensor uid 2 (K): device pointer 0x0 is null");

    let mut b = buffers(&plan);
    b.o = 0x4008;
    let err = check_buffers(&plan, &b).unwrap_err().to_string();
    assert!(
        err.contains("uid 4 (O)") && err.contains("16-byte"),
        "{err}"
    );

    let mut b = buffers(&plan);
    b.q_offsets = 0x6004;
    let err = check_buffers(&plan, &b).unwrap_err().to_string();
    assert!(err.contains("uid 10") && err.contains("8-byte"), "{err}");

    let mut b = buffers(&plan);
    b.lse_offsets = 0;
    let err = check_buffers(&plan, &b).unwrap_err().to_string();
    assert!(err.contains("uid 12 (LSE ragged_offset)"), "{err}");

    let mut b = buffers(&plan);
    b.seq_len_q = 0;
    assert!(
        check_buffers(&plan, &b)
            .unwrap_err()
            .to_string()
            .contains("uid 20")
    );

    let mut b = buffers(&plan);
    b.workspace_bytes -= 1;
    assert!(matches!(
        check_buffers(&plan, &b),
        Err(GpuError::WorkspaceTooSmall { .. })
    ));
}

#[test]
fn absent_optional_buffers_are_not_required() {
    let plan = test_plan(false);
    let mut b = buffers(&plan);
    b.lse = 0;
    b.lse_offsets = 0;
    b.seq_len_kv = 0;
    assert_eq!(check_buffers(&plan, &b), Ok(()));
}

/// Where CUDA exists, the real kernel file must compile for the probed device, load, and
/// publish a valid tile table for every forward entry point.
#[test]
fn the_kernel_file_compiles_loads_and_publishes_its_configs() {
    let Some(_) = runtime::runtime_or_skip("the_kernel_file_compiles_loads") else {
        return;
    };
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let cache: &'static NvrtcCache = Box::leak(Box::new(NvrtcCache::new(None)));
    let engine = FmhaEngine::with_cache(cache);
    // SAFETY: the null stream, with `ctx` current on this thread.
    let prepared = unsafe { engine.prepare(std::ptr::null_mut()) }.unwrap();
    assert!(matches!(
        prepared.origin,
        Some(ImageOrigin::Compiled { .. })
    ));
    let names: Vec<_> = prepared.configs.iter().map(|(k, _)| *k).collect();
    let mut expected = device_abi::FORWARD_KERNELS.to_vec();
    // The FP8 entry points exist in sm_90a modules only.
    if prepared.arch == "sm_90a" {
        expected.extend(
            device_abi::FP8_FORWARD_KERNELS
                .iter()
                .map(|(_, name)| *name),
        );
    }
    expected.sort_unstable();
    assert_eq!(names, expected);
    // SAFETY: as above.
    let again = unsafe { engine.prepare(std::ptr::null_mut()) }.unwrap();
    assert_eq!(again.origin, None);
    drop(ctx);
}
