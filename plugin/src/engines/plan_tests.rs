//! Each engine's plan for graphs the plugin accepts: what it takes, and what it declines naming
//! uid, field, value and need (the engines' own crates test their plans over hand-built problems).

use std::sync::Arc;

use ragged_core::engine::{Planned, Problem};
use ragged_core::problem::RaggedSdpaProblem;
use ragged_core::{DataType as K, Decline, DiagonalAlignment, MaskBand};
use ragged_engine_aiter::{
    AiterProblem, GpuArch, IndexWidth, LseLayout, RaggedAux, RaggedOperand, check_applicability,
    plan as aiter_plan,
};
use ragged_engine_cuda::adapter::{self as cuda, BackwardKernelsPlan};
use ragged_engine_cuda::forward;
use ragged_engine_cuda::nondeterministic;
use ragged_schema::Graph;

use crate::applicability;
use crate::test_graphs::{golden, sdpa};

fn sdpa_plan(graph: &Graph) -> RaggedSdpaProblem {
    applicability::problem(graph).expect("the plugin accepts the graph")
}

fn cuda_declined(graph: &Graph) -> String {
    match forward::plan(&sdpa_plan(graph)) {
        Ok(_) => "accepted".to_owned(),
        Err(reason) => reason.to_string(),
    }
}

/// A float scalar uid 30 for `scale_tensor_uid`: runtime pass-by-value, or a device tensor.
fn scale_scalar(
    pass_by_value: bool,
    data_type: ragged_schema::DataType,
) -> ragged_schema::TensorAttributes {
    ragged_schema::TensorAttributes::new()
        .set_uid(30)
        .set_data_type(data_type)
        .set_dims(vec![1])
        .set_strides(vec![1])
        .set_is_runtime_pass_by_value(pass_by_value)
}

fn with_scale_tensor(
    mut g: Graph,
    pass_by_value: bool,
    data_type: ragged_schema::DataType,
) -> Graph {
    g.tensors.push(scale_scalar(pass_by_value, data_type));
    sdpa(&mut g).scale_tensor_uid = Some(30);
    g
}

/// The golden graph at D = 64, a head dim the CUDA kernels are compiled for.
fn golden_d64() -> Graph {
    let mut g = golden();
    for t in g.tensors.iter_mut() {
        match t.uid {
            1 | 4 => t.strides = vec![3 * 2 * 64, 2 * 64, 64, 1],
            2 | 3 => t.strides = vec![4 * 64, 64, 64, 1],
            _ => continue,
        }
        t.dims[3] = 64;
    }
    g
}

#[test]
fn cuda_head_dim_16_has_no_compiled_kernel_and_d64_plans() {
    assert_eq!(
        cuda_declined(&golden()),
        "tensor uid 1: q_tensor_uid head dim = 16, need 64, 96, 128, 192 or 256 (the compiled \
         CUDA FMHA kernels)"
    );
    let fmha = forward::plan(&sdpa_plan(&golden_d64())).expect("bf16 D = 64 is compiled");
    assert!(fmha.workspace_bytes() > 0);
    assert_eq!(fmha.kernel.name(), "ragged_fmha_fwd_bf16_d64");
}

#[test]
fn cuda_declines_dense_operands_and_device_scale_tensors_by_uid() {
    let mut g = golden();
    for uid in [2, 3] {
        let t = g.tensors.iter_mut().find(|t| t.uid == uid).expect("K, V");
        t.ragged_offset_tensor_uid = None;
        t.dims = vec![2, 1, 4, 16];
    }
    let why = cuda_declined(&g);
    assert!(
        why.starts_with("tensor uid 2: k_tensor_uid layout = dense (dims [2, 1, 4, 16])"),
        "{why}"
    );
    let g = with_scale_tensor(golden(), false, ragged_schema::DataType::Float);
    let why = cuda_declined(&g);
    assert!(
        why.starts_with(
            "tensor uid 30: scale_tensor_uid residency = a device-resident tensor (no baked \
             value, not runtime pass-by-value)"
        ),
        "{why}"
    );
    let g = with_scale_tensor(golden_d64(), true, ragged_schema::DataType::Float);
    assert!(
        forward::plan(&sdpa_plan(&g)).is_ok(),
        "a pass-by-value scale plans"
    );
}

#[test]
fn the_top_left_band_keeps_its_alignment() {
    let mut g = golden();
    let s = sdpa(&mut g);
    s.causal_mask_bottom_right = false;
    s.causal_mask = false;
    s.right_bound = Some(0);
    s.diagonal_alignment = ragged_schema::DiagonalAlignment::TopLeft;
    let p = sdpa_plan(&g);
    assert_eq!(p.mask.alignment, DiagonalAlignment::TopLeft);
    assert_eq!((p.mask.left, p.mask.right), (None, Some(0)));
}

/// The backward test graph (GQA, causal bottom-right, dense LSE) at `dtype` and head dim `d`.
fn backward_graph(dtype: ragged_schema::DataType, d: i64) -> Graph {
    let mut g = crate::backward_problem::tests::graph();
    for t in g.tensors.iter_mut() {
        if t.ragged_offset_tensor_uid.is_some() {
            let [_, s, h, _] = [t.dims[0], t.dims[1], t.dims[2], t.dims[3]];
            t.dims[3] = d;
            t.strides = vec![s * h * d, h * d, d, 1];
            t.data_type = dtype;
        }
    }
    g
}

fn cuda_backward(g: &Graph) -> Result<BackwardKernelsPlan, Decline> {
    match applicability::accept(g).expect("the plugin accepts the graph") {
        Problem::Backward(p) => cuda::plan_backward(&p),
        other => panic!("not a backward: {other:?}"),
    }
}

#[test]
fn a_bf16_d64_cuda_backward_plans_with_workspace_and_other_head_dims_decline_by_uid() {
    use ragged_schema::DataType as D;
    let plan = cuda_backward(&backward_graph(D::BFloat16, 64)).expect("bf16 D 64 has kernels");
    assert_eq!(plan.plan.kernels.dq, "ragged_fmha_bwd_dq_bf16_d64");
    assert_eq!(plan.plan.gradient_uids, [5, 7, 8, 9]);
    assert_eq!(plan.workspace_size() as u64, plan.plan.workspace_bytes());
    assert!(plan.workspace_size() > 2 * 4 * 4 * 4, "holds Di");
    let f16 = cuda_backward(&backward_graph(D::Half, 128)).expect("f16");
    assert_eq!(f16.plan.kernels.dkdv, "ragged_fmha_bwd_dkdv_f16_d128");
    for (d, dkdv) in [
        (96, "ragged_fmha_bwd_dkdv_bf16_d96"),
        (256, "ragged_fmha_bwd_dkdv_bf16_d256"),
    ] {
        let plan = cuda_backward(&backward_graph(D::BFloat16, d))
            .unwrap_or_else(|e| panic!("bf16 D {d} has kernels: {e}"));
        assert_eq!(plan.plan.kernels.dkdv, dkdv);
    }
    let why = cuda_backward(&backward_graph(D::BFloat16, 80))
        .expect_err("no D 80 kernels")
        .to_string();
    assert!(
        why.starts_with("tensor uid 1: q_tensor_uid head dim = 80, need "),
        "{why}"
    );
}

#[test]
fn the_golden_graph_maps_onto_aiter_field_by_field() {
    let p = AiterProblem::from_problem(&sdpa_plan(&golden()));
    let aux = |uid| RaggedAux {
        uid,
        width: IndexWidth::I32,
        multiplier: 1,
    };
    assert_eq!(p.dtype, K::BF16);
    assert_eq!((p.batch, p.s_q_max, p.s_kv_max), (2, 3, 4));
    assert_eq!(
        p.q,
        RaggedOperand {
            uid: 1,
            heads: 2,
            head_dim: 16,
            seq_stride: 32,
            head_stride: 16,
            dim_stride: 1,
            aux: aux(5),
            alignment: 16,
        }
    );
    assert_eq!(
        (p.k.uid, p.k.heads, p.k.seq_stride, p.k.aux),
        (2, 1, 16, aux(6))
    );
    assert_eq!((p.v.uid, p.v.aux), (3, aux(6)));
    assert_eq!((p.o.uid, p.o.aux), (4, aux(5)));
    assert_eq!(
        p.lse,
        LseLayout::Dense {
            uid: 9,
            strides: [6, 3, 1, 1],
            alignment: 16
        }
    );
    assert_eq!(p.mask, MaskBand::causal_bottom_right());
    assert_eq!(p.scale, 0.25);
}

#[test]
fn the_mapped_golden_graph_is_applicable_to_aiter_on_gfx942_and_declined_elsewhere() {
    let sdpa = sdpa_plan(&golden());
    let plan = aiter_plan(
        &sdpa,
        &GpuArch::new("gfx942:sramecc+:xnack-"),
        "gfx942;gfx950",
    );
    assert!(plan.is_ok_and(|(_, plan)| plan.workspace.size > 0));
    let other = aiter_plan(&sdpa, &GpuArch::new("gfx1100"), "gfx942;gfx950")
        .err()
        .map(|d| d.to_string());
    assert!(other.is_some_and(|d| d.contains("gfx1100")));
}

#[test]
fn aiter_takes_a_pass_by_value_scale_and_declines_a_device_resident_one_by_uid() {
    let arch = GpuArch::new("gfx942");
    let g = with_scale_tensor(golden(), true, ragged_schema::DataType::Half);
    let (planned, _) = aiter_plan(&sdpa_plan(&g), &arch, "gfx942").expect("plans");
    assert!(check_applicability(&planned, &arch, "gfx942").is_ok());

    let g = with_scale_tensor(golden(), false, ragged_schema::DataType::Half);
    let why = aiter_plan(&sdpa_plan(&g), &arch, "gfx942")
        .err()
        .map(|d| d.to_string());
    assert!(
        why.as_deref().is_some_and(|w| w
            .starts_with("tensor uid 30: scale_tensor_uid residency = a device-resident tensor")),
        "{why:?}"
    );
}

#[test]
fn fp32_graphs_map_and_are_declined_by_aiter_naming_q() {
    let mut g = golden();
    for t in g.tensors.iter_mut().filter(|t| (1..=4).contains(&t.uid)) {
        t.data_type = ragged_schema::DataType::Float;
    }
    let why = aiter_plan(&sdpa_plan(&g), &GpuArch::new("gfx942"), "gfx942")
        .err()
        .map(|d| d.to_string())
        .unwrap_or_default();
    assert!(why.starts_with("tensor uid 1: data type = FLOAT"), "{why}");
}

#[test]
fn gpu_engines_decline_multi_node_graphs_and_the_host_engine_plans_every_kind() {
    let graph = Problem::Graph(Arc::new(ragged_core::graph::ExecGraph::default()));
    for engine in [
        &super::CUDA_FMHA,
        &super::CUDA_FMHA_NONDETERMINISTIC,
        &super::AITER_FMHA,
    ] {
        assert!(engine.plan(&graph).is_err(), "{}", engine.name_str());
    }
    let forward = Problem::Forward(Arc::new(sdpa_plan(&golden())));
    for problem in [&graph, &forward] {
        let plan = super::HOST_REFERENCE
            .plan(problem)
            .expect("the host engine plans it");
        assert_eq!(plan.workspace_size(), 0);
    }
}

#[test]
fn the_nondeterministic_engine_plans_the_same_backwards_and_declines_forwards() {
    use ragged_schema::DataType as D;
    for (dtype, d) in [
        (D::BFloat16, 64),
        (D::Half, 64),
        (D::BFloat16, 128),
        (D::Half, 128),
        (D::BFloat16, 96),
    ] {
        let g = backward_graph(dtype, d);
        let problem = applicability::accept(&g).expect("accepted");
        let det = super::CUDA_FMHA.plan(&problem);
        let unordered = super::CUDA_FMHA_NONDETERMINISTIC.plan(&problem);
        match (det, unordered) {
            (Ok(a), Ok(b)) => assert_eq!(
                b.workspace_size(),
                a.workspace_size(),
                "{dtype:?} D {d}: both forms carry the fused kernels' accumulator"
            ),
            (Err(a), Err(b)) => {
                assert_eq!(d, 96);
                assert_eq!(a.to_string(), b.to_string());
            }
            (a, b) => panic!(
                "{dtype:?} D {d}: {:?} against {:?}",
                a.map(|_| ()),
                b.map(|_| ())
            ),
        }
    }
    let forward = Problem::Forward(Arc::new(sdpa_plan(&golden_d64())));
    assert!(super::CUDA_FMHA.plan(&forward).is_ok());
    let why = super::CUDA_FMHA_NONDETERMINISTIC
        .plan(&forward)
        .map(|_| ())
        .expect_err("a forward is not this engine's")
        .to_string();
    assert_eq!(why, nondeterministic::forward_declined().to_string());
    assert!(why.contains("RAGGED_SDPA_CUDA_FMHA runs it"), "{why}");
}

#[test]
fn a_cuda_backward_execute_without_its_workspace_is_bad_param_before_any_launch() {
    let g = backward_graph(ragged_schema::DataType::Half, 64);
    let problem = applicability::accept(&g).expect("accepted");
    let Problem::Backward(p) = &problem else {
        panic!("not a backward");
    };
    let text = execute_without_workspace(&problem, &cuda::plan_backward(p).expect("plans"));
    assert!(text.starts_with("RAGGED_SDPA_CUDA_FMHA: "), "{text}");
    let plan = nondeterministic::plan_backward(p).expect("plans");
    let text = execute_without_workspace(&problem, &plan);
    assert!(
        text.starts_with("RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC: "),
        "{text}"
    );
}

/// The error of an execute of `plan` with every buffer bound and no workspace (BAD_PARAM, naming
/// the workspace).
fn execute_without_workspace(problem: &Problem, plan: &BackwardKernelsPlan) -> String {
    use crate::abi::types::{DeviceBuffer, Status};
    use crate::binder::{self, Pack, host_memory::Staged};

    let signature = problem.signature();
    // Every buffer bound to one aligned host word: the workspace check comes before anything
    // is read or launched.
    let mut word = [0u64; 1];
    let entries: Vec<DeviceBuffer> = signature
        .buffers()
        .iter()
        .map(|d| DeviceBuffer {
            uid: d.uid,
            ptr: word.as_mut_ptr().cast(),
        })
        .collect();
    let pack = Pack {
        entries: &entries,
        stream: std::ptr::null_mut(),
        workspace: std::ptr::null_mut(),
    };
    let mut staged = Staged::default();
    // SAFETY: nothing bound is dereferenced: the execute fails on the NULL workspace first.
    let call = unsafe {
        binder::bind(
            &signature,
            plan.reach(),
            pack,
            plan.workspace_size(),
            &mut staged,
            &mut crate::binder::BindScratch::default(),
        )
    };
    let error = plan
        .execute(&mut call.expect("binds"))
        .map_err(crate::PluginError::from)
        .expect_err("no workspace");
    assert_eq!(error.status(), Status::BAD_PARAM);
    let text = error.to_string();
    assert!(
        text.contains("(workspace)") && text.contains("is null"),
        "{text}"
    );
    text
}

/// Paged K/V and sinks: the CUDA engine plans upstream's paged bundle on its split-KV paged
/// kernels and declines sinks on a graph without page tables, naming the field; AITER's plain
/// forward plan declines both naming the field, and its serving plan (the route the engine takes
/// for them: pages gathered into the workspace, sinks folded in after the forward) takes both;
/// the host engine plans both.
#[test]
fn gpu_engines_on_paged_and_sink_graphs() {
    use ragged_core::engine::Planner;
    let paged = crate::test_graphs::paged_bundle();
    let mut sinks = golden_d64();
    sinks.tensors.push(
        ragged_schema::TensorAttributes::new()
            .set_uid(31)
            .set_data_type(ragged_schema::DataType::Float)
            .set_dims(vec![2])
            .set_strides(vec![1]),
    );
    sdpa(&mut sinks).sink_token_tensor_uid = Some(31);
    let arch = GpuArch::new("gfx942");
    let cuda = |graph: &Graph| {
        let problem = Problem::Forward(Arc::new(sdpa_plan(graph)));
        ragged_engine_cuda::adapter::CudaFmha
            .plan(&problem)
            .map(|plan| plan.workspace_size())
            .map_err(|d| d.to_string())
    };
    // Three sequences of at most 512 keys over 2 KV heads: two splits of 256 keys, whose
    // partials need workspace.
    assert!(
        cuda(&paged).is_ok_and(|bytes| bytes > 0),
        "{:?}",
        cuda(&paged)
    );
    let why = cuda(&sinks).err().unwrap_or_default();
    assert!(
        why.starts_with(
            "tensor uid 31: sink_token_tensor_uid = per-head sink logits on a graph \
                         without page tables"
        ),
        "CUDA: {why}"
    );
    for (graph, field) in [
        (&paged, "tensor uid 5: page_table_k_tensor_uid = "),
        (&sinks, "tensor uid 31: sink_token_tensor_uid = "),
    ] {
        let why = aiter_plan(&sdpa_plan(graph), &arch, "gfx942")
            .err()
            .map(|d| d.to_string())
            .unwrap_or_default();
        assert!(why.starts_with(field), "AITER: {why}");
        let served = ragged_engine_aiter::serving::plan(&sdpa_plan(graph), &arch, "gfx942")
            .map(|(_, plan)| plan.workspace_bytes())
            .map_err(|d| d.to_string());
        assert!(
            served.as_ref().is_ok_and(|bytes| *bytes > 0),
            "AITER serving: {served:?}"
        );
        let problem = Problem::Forward(Arc::new(sdpa_plan(graph)));
        assert!(ragged_engine_host::HostReference.plan(&problem).is_ok());
    }
}

/// The golden graph at D = 128 (K/V strides scaled alike) with Q, K, V in `format`, a
/// BFLOAT16 O, and `descale_q/k/v` as FLOAT `[1]` device tensors uids 40, 41, 42: upstream's
/// FP8 shape, with the golden graph's bottom-right causal mask and dense stats.
fn fp8_golden(format: ragged_schema::DataType) -> Graph {
    let mut g = golden();
    for t in g.tensors.iter_mut() {
        match t.uid {
            1 | 4 => t.strides = vec![3 * 2 * 128, 2 * 128, 128, 1],
            2 | 3 => t.strides = vec![4 * 128, 128, 128, 1],
            _ => continue,
        }
        t.dims[3] = 128;
        if t.uid != 4 {
            t.data_type = format;
        }
    }
    for uid in [40, 41, 42] {
        g.tensors
            .push(scale_scalar(false, ragged_schema::DataType::Float).set_uid(uid));
    }
    let s = sdpa(&mut g);
    (
        s.descale_q_tensor_uid,
        s.descale_k_tensor_uid,
        s.descale_v_tensor_uid,
    ) = (Some(40), Some(41), Some(42));
    g
}

/// The plugin accepts every FP8 graph below (the host engine runs them); AITER takes each only
/// on the architecture whose fp8bf16 kernels read its format, and CUDA none.
#[test]
fn aiter_takes_fp8_graphs_only_where_its_fp8bf16_kernels_exist() {
    use ragged_schema::DataType::{Fp8E4m3, Fp8E4m3Fnuz, Fp8E5m2};
    let (gfx942, gfx950) = (
        GpuArch::new("gfx942:sramecc+:xnack-"),
        GpuArch::new("gfx950:sramecc+:xnack-"),
    );
    let targets = "gfx942;gfx950";
    let aiter = |g: &Graph, arch: &GpuArch| aiter_plan(&sdpa_plan(g), arch, targets);

    let fnuz = fp8_golden(Fp8E4m3Fnuz);
    let (problem, plan) = aiter(&fnuz, &gfx942).expect("e4m3fnuz D 128 on gfx942");
    assert_eq!(plan.fp8.map(|f| f.descale_uids), Some([40, 41, 42]));
    assert_eq!(
        (problem.dtype, problem.o_dtype),
        (K::Fp8(ragged_core::Fp8Format::E4M3Fnuz), K::BF16)
    );
    let ocp = fp8_golden(Fp8E4m3);
    assert!(aiter(&ocp, &gfx950).is_ok(), "OCP e4m3 D 128 on gfx950");

    for (g, arch, uid, field) in [
        (&fnuz, &gfx950, 1, "q_tensor_uid data type"),
        (&ocp, &gfx942, 1, "q_tensor_uid data type"),
        (&fp8_golden(Fp8E5m2), &gfx950, 1, "q_tensor_uid data type"),
    ] {
        let d = aiter(g, arch).expect_err("format the arch's kernels do not read");
        assert_eq!((d.uid, d.field.as_str()), (Some(uid), field), "{d}");
    }

    let mut with_amax = fp8_golden(Fp8E4m3);
    with_amax
        .tensors
        .push(scale_scalar(false, ragged_schema::DataType::Float).set_uid(45));
    sdpa(&mut with_amax).amax_o_tensor_uid = Some(45);
    let d = aiter(&with_amax, &gfx950).expect_err("AITER reports no amax");
    assert_eq!((d.uid, d.field.as_str()), (Some(45), "amax_o_tensor_uid"));

    // The CUDA engine's FP8 forward takes OCP e4m3 at D 128 (amax_o included), not FNUZ.
    let cuda = cuda_declined(&fnuz);
    assert!(cuda.contains("FP8 (fp8_e4m3_fnuz)"), "{cuda}");
    assert!(cuda.contains("FP8_E4M3"), "{cuda}");
    assert_eq!(cuda_declined(&ocp), "accepted");
    assert_eq!(cuda_declined(&with_amax), "accepted");
}
