use super::*;
use crate::device_kernels::tests::{parameters, signature};
use crate::mapping::{DeviceBuffers, shim_args};
use crate::serving_kernels::{
    FINISH_KERNEL, FINISH_SOURCE, GATHER_KERNEL, GATHER_SOURCE, STARTS_KERNEL, STARTS_SOURCE,
    ServingBuffers, finish_launch, forward_buffers, gather_launch, starts_launch,
};
use crate::workspace::WorkspacePlan;
use crate::{AiterProblem, fixtures};
use ragged_core::MaskBand;
use ragged_core::problem::test_support::{dense, packed, paged_packed};
use ragged_core::problem::{Multiplier, Offsets, Sinks};

const GFX942: &str = "gfx942:sramecc+:xnack-";
const TARGETS: &str = "gfx942;gfx950";

/// B 3, H 8/2, D 128, T_q 256, 64 pages of 16 tokens, 32 per sequence (max_seq_len_kv 512).
fn prefill() -> RaggedSdpaProblem {
    paged_packed(3, (8, 2, 128), 256, (64, 16, 32))
}

fn sinks(uid: i64, heads: i64) -> Sinks {
    Sinks {
        uid,
        heads,
        stride: 1,
        rank4: false,
        alignment: 16,
    }
}

fn accepted(p: &RaggedSdpaProblem) -> (AiterProblem, AiterPlan, ServingPlan) {
    let (f, a) = plan(p, &GpuArch::new(GFX942), TARGETS).expect("taken");
    let s = a.serving.expect("a serving plan");
    (f, a, s)
}

fn rejected(p: &RaggedSdpaProblem, uid: i64, field: &str) -> String {
    let text = plan(p, &GpuArch::new(GFX942), TARGETS)
        .expect_err("declined")
        .to_string();
    assert!(text.starts_with(&format!("tensor uid {uid}: ")), "{text}");
    assert!(text.contains(field), "{text}");
    text
}

#[test]
fn a_packed_prefill_runs_aiter_over_contiguous_gathered_kv() {
    let (f, a, s) = accepted(&prefill());
    let starts = |multiplier| RaggedAux {
        uid: 6,
        width: IndexWidth::I32,
        multiplier,
    };
    let rows = |uid| RaggedOperand {
        uid,
        heads: 8,
        head_dim: 128,
        seq_stride: 1024,
        head_stride: 128,
        dim_stride: 1,
        aux: starts(1024),
        alignment: 16,
    };
    let gathered = |uid| RaggedOperand {
        uid,
        heads: 2,
        head_dim: 128,
        seq_stride: 256,
        head_stride: 128,
        dim_stride: 1,
        aux: RaggedAux {
            uid,
            width: IndexWidth::I32,
            multiplier: 256,
        },
        alignment: 256,
    };
    assert_eq!(
        f,
        AiterProblem {
            dtype: DataType::BF16,
            o_dtype: DataType::BF16,
            batch: 3,
            s_q_max: 256,
            s_kv_max: 512,
            packed_q_rows: Some(256),
            q: rows(1),
            k: gathered(2),
            v: gathered(3),
            o: rows(4),
            seq_len_q: None,
            seq_len_kv: None,
            mask: MaskBand::none(),
            scale: 0.125,
            lse: LseLayout::None,
            fp8: None,
        }
    );
    assert!(a.use_asm_v3);
    assert_eq!(a.workspace, WorkspacePlan::for_problem(&f));
    let route = s.paged.expect("paged");
    assert_eq!(
        (route.packed, route.q_rows, route.max_kv, route.key_blocks),
        (true, 256, 512, 8)
    );
    assert_eq!(
        route.k_pool,
        PoolArgs {
            uid: 2,
            page: 4096,
            head: 128,
            slot: 256,
            dim: 1,
            pages: 64,
            page_size: 16,
        }
    );
    assert_eq!(
        (route.table_k, route.table_v.uid),
        (
            PageTableStrides {
                uid: 6,
                row: 32,
                column: 1
            },
            7
        )
    );
    assert_eq!((s.sinks, s.lse), (None, None));
}

#[test]
fn the_workspace_holds_the_starts_the_gathered_kv_and_then_the_forward() {
    let (_, a, s) = accepted(&prefill());
    let route = s.paged.expect("paged");
    let region = |offset, bytes| Region { offset, bytes };
    assert_eq!(route.q_start, region(0, 16));
    assert_eq!(route.kv_start, region(256, 16));
    assert_eq!(route.invalid, region(512, 12));
    // B · max_seq_len_kv · H_kv · D · 2 bytes = 3 · 512 · 2 · 128 · 2.
    assert_eq!(route.k, region(768, 786_432));
    assert_eq!(route.v, region(768 + 786_432, 786_432));
    assert_eq!(s.forward_at, 768 + 2 * 786_432);
    assert_eq!(s.size, s.forward_at + a.workspace.size);
    assert_eq!(a.workspace_bytes(), s.size);
}

#[test]
fn gathered_kv_above_four_gib_is_declined_naming_the_bound() {
    // 3 sequences × 512 k keys × 8 heads × 128 × 2 bytes = 3 GiB each for K and V.
    let p = paged_packed(3, (8, 8, 128), 256, (64, 16, 32 * 1024));
    let text = rejected(&p, 6, "gathered K/V bytes");
    assert!(text.contains("6442450944"), "{text}");
    assert!(text.contains("at most 4294967296 (4 GiB)"), "{text}");
    // Just under the bound: taken.
    let p = paged_packed(2, (8, 8, 128), 256, (64, 16, 32 * 1024));
    accepted(&p);
}

#[test]
fn paged_declines_name_the_uid_and_field() {
    let mut p = prefill();
    p.q.ragged = Some(Offsets {
        uid: 20,
        width: IndexWidth::I32,
        multiplier: Multiplier::ONE,
    });
    if let Some(paged) = p.paged.as_mut() {
        paged.query = QueryForm::Ragged;
    }
    rejected(
        &p,
        1,
        "q_tensor_uid ragged_offset_tensor_uid on a paged graph",
    );

    // Padded Q whose sequences do not follow each other (batch stride twice S_q rows).
    let mut p = paged_packed(3, (8, 2, 128), 64, (64, 16, 32));
    for t in [&mut p.q, &mut p.o] {
        t.dims = [3, 8, 64, 128];
        t.strides = [2 * 64 * 1024, 128, 1024, 1];
    }
    if let Some(paged) = p.paged.as_mut() {
        paged.query = QueryForm::Padded;
    }
    let text = rejected(&p, 1, "q_tensor_uid batch stride");
    assert!(text.contains("S_q · sequence stride = 65536"), "{text}");

    let mut p = prefill();
    p.seq_len_kv = None;
    rejected(&p, 1, "seq_len_kv_tensor_uid");

    let mut p = prefill();
    p.q.dtype = DataType::F32;
    rejected(&p, 1, "q_tensor_uid data type");

    let mut p = prefill();
    p.k.dtype = DataType::F16;
    rejected(&p, 2, "k_tensor_uid data type");

    let mut p = prefill();
    p.stats = Some(Operand {
        dtype: DataType::F16,
        ..dense("stats_tensor_uid", 5, [1, 8, 256, 1], [2048, 1, 8, 1])
    });
    rejected(&p, 5, "stats_tensor_uid data type");

    let p = paged_packed(70_000, (8, 2, 128), 256, (64, 16, 1));
    rejected(&p, 6, "page_table_k_tensor_uid rows (B)");

    let mut p = prefill();
    p.scale = ScalePlan::DeviceTensor {
        uid: 30,
        data_type: ragged_core::problem::ScalarType::Float,
    };
    rejected(&p, 30, "scale_tensor_uid residency");

    // AITER's own limits apply to the gathered forward: D 36 is not a CK head dim.
    let p = paged_packed(3, (8, 2, 36), 256, (64, 16, 32));
    rejected(&p, 1, "D_qk");
    let err = plan(&prefill(), &GpuArch::new("gfx90a"), TARGETS).expect_err("arch");
    assert!(err.to_string().contains("device architecture"), "{err}");
}

#[test]
fn decode_takes_the_same_route() {
    // One query row per sequence, packed (T_q = B): correct on the gathered route, at the cost
    // of copying the keys once more than a kernel reading the pages in place would.
    let mut p = paged_packed(4, (8, 2, 128), 4, (64, 16, 16));
    p.mask = MaskBand {
        left: None,
        right: Some(0),
        alignment: ragged_core::DiagonalAlignment::BottomRight,
    };
    let (f, a, _) = accepted(&p);
    assert_eq!((f.batch, f.s_q_max, f.s_kv_max), (4, 4, 256));
    assert!(a.use_asm_v3);
}

#[test]
fn stats_of_a_paged_graph_are_addressed_through_the_q_starts() {
    let mut p = prefill();
    p.stats = Some(Operand {
        dtype: DataType::F32,
        ..dense("stats_tensor_uid", 5, [1, 8, 256, 1], [2048, 1, 8, 1])
    });
    let (f, _, s) = accepted(&p);
    assert_eq!(
        f.lse,
        LseLayout::Ragged {
            uid: 5,
            seq_stride: 8,
            head_stride: 1,
            aux: RaggedAux {
                uid: 6,
                width: IndexWidth::I32,
                multiplier: 8,
            },
            alignment: 16,
        }
    );
    let b = forward_buffers(&f, &s, &fixtures::buffers());
    let route = s.paged.expect("paged");
    assert_eq!(b.lse, fixtures::buffers().lse);
    assert_eq!(b.lse_offsets, 0x10000 + route.q_start.offset);
}

#[test]
fn sinks_without_stats_make_the_forward_write_a_workspace_lse() {
    let mut p = prefill();
    p.sinks = Some(sinks(40, 8));
    let (f, _, s) = accepted(&p);
    assert_eq!(s.sinks, Some(SinkArgs { uid: 40, stride: 1 }));
    let lse = s.lse.expect("workspace LSE");
    // f32 [T_q, H_q] after the gathered V, token-major through the Q starts.
    assert_eq!(lse.offset, 768 + 2 * 786_432);
    assert_eq!(lse.bytes, 256 * 8 * 4);
    assert_eq!(
        f.lse,
        LseLayout::Ragged {
            uid: 40,
            seq_stride: 8,
            head_stride: 1,
            aux: RaggedAux {
                uid: 6,
                width: IndexWidth::I32,
                multiplier: 8,
            },
            alignment: 256,
        }
    );
    let b = forward_buffers(&f, &s, &fixtures::buffers());
    let route = s.paged.expect("paged");
    assert_eq!(
        (b.lse, b.lse_offsets),
        (0x10000 + lse.offset, 0x10000 + route.q_start.offset)
    );
    assert_eq!(s.forward_at, lse.offset + lse.bytes);
}

#[test]
fn sinks_on_a_ragged_graph_run_the_ordinary_forward_then_the_finish() {
    let mut p = fixtures::base_ragged();
    p.sinks = Some(sinks(40, 4));
    let (f, a, s) = accepted(&p);
    let plain = AiterProblem {
        lse: f.lse,
        ..AiterProblem::from_problem(&fixtures::base_ragged())
    };
    assert_eq!(f, plain);
    assert_eq!(s.paged, None);
    assert_eq!(
        s.lse,
        Some(Region {
            offset: 0,
            bytes: 2 * 8 * 4 * 4
        })
    );
    assert_eq!(s.forward_at, 256);
    assert_eq!(s.size, 256 + a.workspace.size);
    let b = forward_buffers(&f, &s, &fixtures::buffers());
    assert_eq!(
        b,
        DeviceBuffers {
            lse: 0x10000,
            lse_offsets: 0,
            workspace: 0x10000 + 256,
            ..fixtures::buffers()
        }
    );

    // Sinks do not lift the GPU contract: a dense Q is still declined by name.
    let mut dense_q = p;
    dense_q.q.ragged = None;
    rejected(&dense_q, 1, "q_tensor_uid layout");
    let mut misaligned = p;
    misaligned.sinks = Some(Sinks {
        alignment: 2,
        ..sinks(40, 4)
    });
    rejected(&misaligned, 40, "sink_token_tensor_uid alignment");
}

/// The gathered problem maps to exactly the shim arguments of the same problem written as a
/// contiguous ragged graph whose K/V and token starts sit where the gather put them.
#[test]
fn aiter_gets_the_arguments_of_the_equivalent_contiguous_graph() {
    let (f, a, s) = accepted(&prefill());
    let route = s.paged.expect("paged");
    let paged_buffers = forward_buffers(&f, &s, &fixtures::buffers());
    let base = 0x10000;
    assert_eq!(paged_buffers.k, base + route.k.offset);
    assert_eq!(paged_buffers.v, base + route.v.offset);
    assert_eq!(paged_buffers.q_offsets, base + route.q_start.offset);
    assert_eq!(paged_buffers.k_offsets, base + route.kv_start.offset);
    assert_eq!((paged_buffers.seq_len_q, paged_buffers.seq_len_kv), (0, 0));
    assert_eq!(paged_buffers.workspace, base + s.forward_at);

    let contiguous = packed(3, (256, 8), (512, 2), 128);
    let (cf, ca) = crate::applicability::plan(&contiguous, &GpuArch::new(GFX942), TARGETS)
        .expect("contiguous taken");
    assert_eq!(ca.use_asm_v3, a.use_asm_v3);
    assert_eq!(ca.workspace, a.workspace);
    let contiguous_buffers = DeviceBuffers {
        seq_len_q: 0,
        seq_len_kv: 0,
        ..paged_buffers
    };
    let got = shim_args(&f, &a, &paged_buffers, paged_buffers.workspace, 0x5717);
    let mut want = shim_args(
        &cf,
        &ca,
        &contiguous_buffers,
        paged_buffers.workspace,
        0x5717,
    );
    // The one difference: the packed sequences share T_q rows, so the row total AITER gets is
    // T_q, where the contiguous graph's padded dims only bound it by B · T_q.
    assert_eq!(want.seqlen_q, 768);
    want.seqlen_q = 256;
    assert_eq!(format!("{got:?}"), format!("{want:?}"));
    // The values the shim case `paged_gathered_gfx942_causal` sends (shim/ci/shim_cases.cpp).
    assert_eq!(
        (got.batch, got.max_seqlen_q, got.seqlen_q, got.seqlen_k),
        (3, 256, 256, 1536)
    );
    assert_eq!(
        (got.stride_q, got.stride_k, got.stride_v, got.stride_o),
        (1024, 256, 256, 1024)
    );
    assert_eq!(
        (got.nhead_q, got.nhead_k, got.hdim_q, got.hdim_v),
        (8, 2, 128, 128)
    );
}

#[test]
fn launch_arguments_follow_the_kernel_sources() {
    let mut p = prefill();
    p.sinks = Some(sinks(40, 8));
    let (f, a, s) = accepted(&p);
    let b = fixtures::buffers();
    let tables = ServingBuffers {
        table_k: 0xb000,
        table_v: 0xc000,
        sinks: 0xd000,
    };
    let starts = starts_launch(&f, &s, &b).expect("paged");
    let gather = gather_launch(&f, &s, &b, &tables).expect("paged");
    let fwd = forward_buffers(&f, &s, &b);
    let finish = finish_launch(&f, &a.workspace, &s, &fwd, b.workspace, &tables);
    for (launch, source, kernel) in [
        (&starts, STARTS_SOURCE, STARTS_KERNEL),
        (&gather, GATHER_SOURCE, GATHER_KERNEL),
        (&finish, FINISH_SOURCE, FINISH_KERNEL),
    ] {
        assert_eq!(launch.kernel, kernel);
        assert_eq!(signature(launch), parameters(source, kernel), "{kernel}");
    }
    let arg = |l: &crate::device_kernels::Launch, name: &str| {
        l.args
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
            .expect(name)
    };
    let route = s.paged.expect("paged");
    assert_eq!(gather.config.grid, (8, 3, 1));
    assert_eq!(arg(&gather, "k_pool"), KernelArg::ptr(b.k));
    assert_eq!(
        arg(&gather, "k_out"),
        KernelArg::ptr(0x10000 + route.k.offset)
    );
    assert_eq!(arg(&gather, "k_slot"), KernelArg::I64(256));
    assert_eq!(arg(&starts, "q_rows"), KernelArg::I64(256));
    assert_eq!(arg(&starts, "max_kv"), KernelArg::I64(512));
    assert_eq!(arg(&finish, "sinks"), KernelArg::ptr(0xd000));
    assert_eq!(
        arg(&finish, "invalid"),
        KernelArg::ptr(0x10000 + route.invalid.offset)
    );
    assert_eq!(
        arg(&finish, "lse"),
        KernelArg::ptr(0x10000 + s.lse.expect("lse").offset)
    );
    assert_eq!(arg(&finish, "lse_layout"), KernelArg::I32(2));
    assert_eq!(
        arg(&finish, "lse_offsets"),
        KernelArg::ptr(0x10000 + route.q_start.offset)
    );
    assert_eq!(
        arg(&finish, "seqstart_q"),
        KernelArg::ptr(fwd.workspace + a.workspace.seqstart_q.offset)
    );
    // A graph without sinks passes none; a ragged graph has no invalid marks.
    let (f2, a2, s2) = accepted(&prefill());
    let fwd2 = forward_buffers(&f2, &s2, &b);
    let finish2 = finish_launch(&f2, &a2.workspace, &s2, &fwd2, b.workspace, &tables);
    assert_eq!(arg(&finish2, "sinks"), KernelArg::ptr(0));
    assert_eq!(arg(&finish2, "lse_layout"), KernelArg::I32(0));
}

use crate::device_kernels::KernelArg;

fn fake_engine() -> crate::AiterEngine {
    use crate::detection::{ProbeConfig, probe};
    use crate::shim_library::ShimSearch;
    let f = fixtures::fake_rocm();
    let c = ProbeConfig {
        hip_candidates: vec![f.hip.clone()],
        hiprtc_candidates: vec![f.hiprtc.clone()],
        shim: ShimSearch {
            env_override: Some(f.shim.clone()),
            plugin_dir: None,
        },
    };
    probe(&c).engine().expect("fakes are complete")
}

fn fake_hip_log() -> String {
    // SAFETY: test-only: opens the fake HIP runtime compiled by this crate's fixtures, whose
    // `fake_hip_log` is `const char* (void)` returning a static buffer.
    unsafe {
        let lib = libloading::Library::new(&fixtures::fake_rocm().hip).expect("fake loads");
        let f = lib
            .get::<unsafe extern "C" fn() -> *const std::ffi::c_char>(b"fake_hip_log\0")
            .expect("fake symbol");
        std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned()
    }
}

#[test]
fn execute_enqueues_starts_gather_forward_and_finish_in_order_on_one_stream() {
    let engine = fake_engine();
    let mut graph = prefill();
    graph.sinks = Some(sinks(40, 8));
    let (p, plan) = engine.plan(&graph, 0).expect("taken");
    let s = plan.serving.expect("serving");
    let buffers = DeviceBuffers {
        lse: 0,
        lse_offsets: 0,
        q_offsets: 0,
        k_offsets: 0,
        workspace: 0x100_0010, // rounded up to 0x1000100
        ..fixtures::buffers()
    };
    let tables = ServingBuffers {
        table_k: 0xb000,
        table_v: 0xc000,
        sinks: 0xd000,
    };
    let size = plan.workspace_bytes();
    // SAFETY: the fakes never dereference device addresses.
    let short = unsafe { engine.execute_serving(&p, &plan, &buffers, &tables, size - 1, 0xcafe) };
    assert!(short.is_err());
    // SAFETY: as above (refused before anything is enqueued).
    let plain = unsafe { engine.execute(&p, &plan, &buffers, size, 0xcafe) };
    assert_eq!(
        plain.expect_err("plain execute").to_string(),
        "a paged or sink plan runs only through AiterEngine::execute_serving"
    );
    let no_table = ServingBuffers {
        table_v: 0,
        ..tables
    };
    // SAFETY: as above.
    let err = unsafe { engine.execute_serving(&p, &plan, &buffers, &no_table, size, 0xcafe) }
        .expect_err("null table");
    assert_eq!(
        err.to_string(),
        "device pointer for page_table_v (tensor uid 7) is null"
    );
    // SAFETY: as above.
    unsafe {
        engine
            .execute_serving(&p, &plan, &buffers, &tables, size, 0xcafe)
            .expect("fake execute");
    }
    let log = fake_hip_log();
    let steps: Vec<&str> = log
        .split(';')
        .filter(|s| s.contains("stream=0xcafe"))
        .collect();
    let base = 0x100_0100;
    let route = s.paged.expect("paged");
    let forward = base + s.forward_at;
    let status = forward + plan.workspace.status.offset;
    assert_eq!(
        steps,
        [
            format!(
                "launch ragged_aiter_paged_starts grid=1,1,1 block=256,1,1 shm=0 stream=0xcafe arg0={:#x} extra=(nil)",
                fixtures::buffers().seq_len_q
            ),
            format!(
                "launch ragged_aiter_paged_gather grid=8,3,1 block=256,1,1 shm=0 stream=0xcafe arg0={:#x} extra=(nil)",
                fixtures::buffers().k
            ),
            format!("memset {status:#x} value=0 bytes=4 stream=0xcafe"),
            format!(
                "launch ragged_aiter_prepass grid=1,1,1 block=256,1,1 shm=0 stream=0xcafe arg0={:#x} extra=(nil)",
                base + route.q_start.offset
            ),
            // 3 · 256 · 8 rows over 256 threads: 24 blocks, the forward's seqstart_q first.
            format!(
                "launch ragged_aiter_fixup grid=24,1,1 block=256,1,1 shm=0 stream=0xcafe arg0={forward:#x} extra=(nil)"
            ),
            format!(
                "launch ragged_aiter_sink_finish grid=24,1,1 block=256,1,1 shm=0 stream=0xcafe arg0={forward:#x} extra=(nil)"
            ),
        ]
    );
}

#[test]
fn padded_q_keeps_its_lengths_and_a_dense_lse() {
    let mut p = paged_packed(3, (8, 2, 128), 64, (64, 16, 32));
    for t in [&mut p.q, &mut p.o] {
        t.dims = [3, 8, 64, 128];
        t.strides = [64 * 1024, 128, 1024, 1];
    }
    p.stats = Some(Operand {
        dtype: DataType::F32,
        ..dense("stats_tensor_uid", 5, [3, 8, 64, 1], [512, 1, 8, 1])
    });
    if let Some(paged) = p.paged.as_mut() {
        paged.query = QueryForm::Padded;
    }
    let (f, a, s) = accepted(&p);
    assert_eq!(
        f.seq_len_q,
        Some(SeqLens {
            uid: 8,
            width: IndexWidth::I32
        })
    );
    assert_eq!((f.s_q_max, f.q.aux.multiplier), (64, 1024));
    assert_eq!(
        f.lse,
        LseLayout::Dense {
            uid: 5,
            strides: [512, 1, 8, 1],
            alignment: 16,
        }
    );
    // A padded batch with stats keeps AITER off its asm path, as for a ragged graph.
    assert!(!a.use_asm_v3);
    let b = fixtures::buffers();
    let fwd = forward_buffers(&f, &s, &b);
    assert_eq!(
        (fwd.seq_len_q, fwd.seq_len_kv, fwd.lse_offsets),
        (b.seq_len_q, 0, 0)
    );
    let starts = starts_launch(&f, &s, &b).expect("paged");
    assert!(starts.args.contains(&("packed", KernelArg::I32(0))));
}
