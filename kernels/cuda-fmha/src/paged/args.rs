//! The paged kernels' argument lists, in their signatures' order (`cuda/decode/README.md` and the
//! parameter macros of `split.cuh`, `combine.cuh` and `gather.cuh`, which the tests below compare
//! them with), and the pointers an execute needs before anything is launched.

use super::gather::GatherPlan;
use super::launcher::PagedBuffers;
use super::plan::PagedPlan;
use crate::forward::launcher::RequiredPointer;
use ragged_gpu_runtime::cuda::error::TensorRole;
use ragged_gpu_runtime::cuda::module::KernelArg;

/// The pointers the launches need, in the order their errors are reported.
pub(crate) fn required_pointers(plan: &PagedPlan, b: &PagedBuffers) -> Vec<RequiredPointer> {
    let [q_uid, o_uid] = plan.uids;
    let mut required = vec![
        (b.q, q_uid, TensorRole::Q, 16),
        (b.k, plan.k.uid, TensorRole::K, 16),
        (b.v, plan.v.uid, TensorRole::V, 16),
        (b.o, o_uid, TensorRole::O, 16),
        (b.table_k, plan.table_k.uid, TensorRole::PageTableK, 4),
        (b.table_v, plan.table_v.uid, TensorRole::PageTableV, 4),
        (
            b.seq_len_q,
            plan.seq_len_q.0,
            TensorRole::SeqLenQ,
            plan.seq_len_q.1 as u64,
        ),
        (
            b.seq_len_kv,
            plan.seq_len_kv.0,
            TensorRole::SeqLenKv,
            plan.seq_len_kv.1 as u64,
        ),
    ];
    if let Some((uid, _)) = plan.lse {
        required.push((b.lse, uid, TensorRole::Lse, 4));
    }
    if let Some((uid, _)) = plan.sinks {
        required.push((b.sinks, uid, TensorRole::Sinks, 4));
    }
    if plan.workspace_bytes() > 0 {
        required.push((b.workspace, -1, TensorRole::Workspace, 1));
    }
    required
}

/// The LSE pointer and strides both kernels take: null and zeros when no LSE is written.
fn lse_arg(plan: &PagedPlan, b: &PagedBuffers) -> (u64, super::plan::RowStrides) {
    match plan.lse {
        Some((_, s)) => (b.lse, s),
        None => (
            0,
            super::plan::RowStrides {
                batch: 0,
                seq: 0,
                head: 0,
            },
        ),
    }
}

/// Parameters of `ragged_paged_split_*` (RAGGED_PAGED_SPLIT_PARAMS), in signature order.
pub(crate) fn split_args(plan: &PagedPlan, b: &PagedBuffers, base: u64) -> Vec<KernelArg> {
    use KernelArg::{F32, I32, I64, Ptr};
    let ws = plan.workspace;
    let (ws_o, ws_lse, records) = if plan.splits > 1 {
        (base + ws.o, base + ws.lse, base + ws.records)
    } else {
        (0, 0, 0)
    };
    let (lse, lse_strides) = lse_arg(plan, b);
    let mut args = vec![
        Ptr(b.q),
        Ptr(b.k),
        Ptr(b.v),
        Ptr(b.table_k),
        Ptr(b.table_v),
        Ptr(b.seq_len_q),
        I32(plan.seq_len_q.1),
        Ptr(b.seq_len_kv),
        I32(plan.seq_len_kv.1),
        Ptr(b.o),
        Ptr(lse),
        Ptr(plan.sinks.map_or(0, |_| b.sinks)),
        Ptr(ws_o),
        Ptr(ws_lse),
        Ptr(records),
        I64(plan.q.batch),
        I64(plan.q.seq),
        I64(plan.q.head),
        I64(plan.o.batch),
        I64(plan.o.seq),
        I64(plan.o.head),
        I64(lse_strides.batch),
        I64(lse_strides.seq),
        I64(lse_strides.head),
        I64(plan.sinks.map_or(0, |s| s.1)),
    ];
    args.extend(pool_and_table_args(plan));
    args.extend([
        I32(plan.batch),
        I32(plan.heads_q),
        I32(plan.heads_kv),
        I32(plan.q_rows),
        I32(i32::from(plan.packed)),
        I32(plan.max_kv),
        I32(plan.chunk),
        I32(plan.splits),
        I32(plan.ws_rows),
        I32(plan.ws_batch),
        F32(plan.scale),
        I32(plan.mask_left),
        I32(plan.mask_right),
        I32(plan.bottom_right),
    ]);
    args
}

/// Parameters of `ragged_paged_gather_starts` (RAGGED_PAGED_GATHER_STARTS_PARAMS).
pub(crate) fn gather_starts_args(
    plan: &PagedPlan,
    gather: &GatherPlan,
    b: &PagedBuffers,
    base: u64,
) -> Vec<KernelArg> {
    use KernelArg::{I32, Ptr};
    let w = gather.workspace;
    vec![
        Ptr(b.seq_len_q),
        I32(plan.seq_len_q.1),
        Ptr(b.seq_len_kv),
        I32(plan.seq_len_kv.1),
        Ptr(base + w.q_start),
        Ptr(base + w.lq),
        Ptr(base + w.kv_start),
        Ptr(base + w.invalid),
        I32(plan.batch),
        I32(plan.q_rows),
        I32(i32::from(plan.packed)),
        I32(plan.max_kv),
    ]
}

/// Parameters of `ragged_paged_gather` (RAGGED_PAGED_GATHER_PARAMS).
pub(crate) fn gather_args(
    plan: &PagedPlan,
    gather: &GatherPlan,
    b: &PagedBuffers,
    base: u64,
) -> Vec<KernelArg> {
    use KernelArg::{I32, Ptr};
    let w = gather.workspace;
    let mut args = vec![
        Ptr(b.k),
        Ptr(b.v),
        Ptr(b.table_k),
        Ptr(b.table_v),
        Ptr(base + w.lq),
        Ptr(base + w.kv_start),
        Ptr(base + w.invalid),
        Ptr(base + w.k),
        Ptr(base + w.v),
    ];
    args.extend(pool_and_table_args(plan));
    args.extend([
        I32(plan.heads_kv),
        I32(plan.kernel.d_qk() as i32),
        I32(plan.kernel.d_v() as i32),
    ]);
    args
}

/// The pools' and tables' strides, then the pools' page counts and page sizes: the run both the
/// split and the gather kernel take in this order.
fn pool_and_table_args(plan: &PagedPlan) -> [KernelArg; 14] {
    use KernelArg::{I32, I64};
    [
        I64(plan.k.page),
        I64(plan.k.head),
        I64(plan.k.slot),
        I64(plan.v.page),
        I64(plan.v.head),
        I64(plan.v.slot),
        I64(plan.table_k.row),
        I64(plan.table_k.column),
        I64(plan.table_v.row),
        I64(plan.table_v.column),
        I32(plan.k.pages),
        I32(plan.v.pages),
        I32(plan.k.page_size),
        I32(plan.v.page_size),
    ]
}

/// Where the gathered route's forward writes the LSE and the finish kernel reads it: the graph's
/// LSE, the workspace's (sinks without an LSE in the graph), or nowhere (0).
pub(crate) fn gather_lse(gather: &GatherPlan, b: &PagedBuffers, base: u64) -> u64 {
    match (gather.lse, gather.workspace.lse) {
        (None, _) => 0,
        (Some(_), Some(scratch)) => base + scratch,
        (Some(_), None) => b.lse,
    }
}

/// Parameters of `ragged_paged_gather_finish` (RAGGED_PAGED_GATHER_FINISH_PARAMS).
pub(crate) fn gather_finish_args(
    plan: &PagedPlan,
    gather: &GatherPlan,
    b: &PagedBuffers,
    base: u64,
) -> Vec<KernelArg> {
    use KernelArg::{I32, I64, Ptr};
    let w = gather.workspace;
    let s = gather.lse.unwrap_or(super::plan::RowStrides {
        batch: 0,
        seq: 0,
        head: 0,
    });
    vec![
        Ptr(base + w.q_start),
        Ptr(base + w.lq),
        Ptr(base + w.invalid),
        Ptr(b.o),
        Ptr(gather_lse(gather, b, base)),
        Ptr(plan.sinks.map_or(0, |_| b.sinks)),
        I64(plan.o.seq),
        I64(plan.o.head),
        I64(s.batch),
        I64(s.seq),
        I64(s.head),
        I64(plan.sinks.map_or(0, |s| s.1)),
        I32(plan.batch),
        I32(plan.q_rows),
        I32(i32::from(plan.packed)),
        I32(plan.ws_rows),
        I32(plan.heads_q),
        I32(plan.kernel.d_v() as i32),
        I32(i32::from(gather.bf16)),
        I32(gather.nan_bits),
    ]
}

/// Parameters of `ragged_paged_combine_*` (RAGGED_PAGED_COMBINE_PARAMS), in signature order.
pub(crate) fn combine_args(plan: &PagedPlan, b: &PagedBuffers, base: u64) -> Vec<KernelArg> {
    use KernelArg::{I32, I64, Ptr};
    let ws = plan.workspace;
    let (lse, s) = lse_arg(plan, b);
    vec![
        Ptr(b.o),
        Ptr(lse),
        Ptr(plan.sinks.map_or(0, |_| b.sinks)),
        Ptr(base + ws.o),
        Ptr(base + ws.lse),
        Ptr(base + ws.records),
        I64(plan.o.batch),
        I64(plan.o.seq),
        I64(plan.o.head),
        I64(s.batch),
        I64(s.seq),
        I64(s.head),
        I64(plan.sinks.map_or(0, |s| s.1)),
        I32(plan.batch),
        I32(plan.heads_q),
        I32(plan.ws_rows),
        I32(plan.ws_batch),
        I32(i32::from(plan.packed)),
        I32(plan.chunk),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::launcher::check_pointers;
    use crate::paged::launcher::PAGED_SOURCE;
    use ragged_gpu_runtime::cuda::error::GpuError;

    /// The C types of a parameter macro of the kernel source, in order: "ptr", "int", "long long"
    /// or "float" (as [`KernelArg::c_type`] names them).
    fn macro_types(name: &str) -> Vec<&'static str> {
        let text = PAGED_SOURCE.text;
        let start = text
            .find(&format!("#define {name}"))
            .unwrap_or_else(|| panic!("{name} in the source"));
        let mut body = String::new();
        for line in text[start..].lines() {
            body.push_str(line.trim_end_matches('\\'));
            if !line.ends_with('\\') {
                break;
            }
        }
        let list = body.trim_start_matches(&format!("#define {name}"));
        list.split(',')
            .map(|p| {
                let p = p.trim();
                if p.contains('*') {
                    "ptr"
                } else if p.starts_with("i64 ") {
                    "long long"
                } else if p.starts_with("int ") {
                    "int"
                } else if p.starts_with("float ") {
                    "float"
                } else {
                    panic!("parameter {p:?} of {name}")
                }
            })
            .collect()
    }

    fn types(args: &[KernelArg]) -> Vec<&'static str> {
        args.iter().map(KernelArg::c_type).collect()
    }

    /// [`a_plan`]'s pools behind 2 sequences of 256 packed query rows: a prefill.
    fn a_prefill_plan() -> PagedPlan {
        let mut p = a_problem();
        for t in [&mut p.q, &mut p.o] {
            t.dims = [1, 16, 512, 128];
            t.strides = [512 * 16 * 128, 128, 16 * 128, 1];
        }
        if let Some(paged) = p.paged.as_mut() {
            paged.table_k.rows = 2;
            paged.table_v.rows = 2;
        }
        super::super::plan(&p).expect("planned")
    }

    fn a_plan() -> PagedPlan {
        super::super::plan(&a_problem()).expect("planned")
    }

    fn a_problem() -> ragged_core::problem::RaggedSdpaProblem {
        use ragged_core::problem::test_support::problem;
        let mut p = problem();
        // Any paged plan will do; the packed bundle shape of plan_tests.rs in short.
        let q_strides = [64 * 16 * 128, 128, 16 * 128, 1];
        for t in [&mut p.q, &mut p.o] {
            t.dims = [1, 16, 64, 128];
            t.strides = q_strides;
            t.ragged = None;
        }
        for t in [&mut p.k, &mut p.v] {
            t.dims = [128, 2, 16, 128];
            t.strides = [4096, 128, 256, 1];
            t.ragged = None;
        }
        let table = |role, uid| ragged_core::problem::PageTable {
            role,
            uid,
            rows: 3,
            columns: 32,
            row_stride: 32,
            column_stride: 1,
            rank4: false,
            alignment: 4,
        };
        let index = |role, uid| ragged_core::problem::IndexInput {
            role,
            uid,
            width: ragged_core::problem::IndexWidth::I32,
        };
        p.seq_len_q = Some(index("seq_len_q_tensor_uid", 8));
        p.seq_len_kv = Some(index("seq_len_kv_tensor_uid", 9));
        p.paged = Some(ragged_core::problem::PagedKv {
            table_k: table("page_table_k_tensor_uid", 6),
            table_v: table("page_table_v_tensor_uid", 7),
            max_seq_len_kv: 512,
            query: ragged_core::problem::QueryForm::Packed,
        });
        p
    }

    #[test]
    fn argument_lists_mirror_the_kernels_parameters() {
        let plan = a_plan();
        let b = PagedBuffers::default();
        assert_eq!(
            types(&split_args(&plan, &b, 0)),
            macro_types("RAGGED_PAGED_SPLIT_PARAMS")
        );
        assert_eq!(
            types(&combine_args(&plan, &b, 0)),
            macro_types("RAGGED_PAGED_COMBINE_PARAMS")
        );
        let gathered = a_prefill_plan();
        let g = gathered.gather.as_ref().expect("the gathered route");
        assert_eq!(
            types(&gather_starts_args(&gathered, g, &b, 0)),
            macro_types("RAGGED_PAGED_GATHER_STARTS_PARAMS")
        );
        assert_eq!(
            types(&gather_args(&gathered, g, &b, 0)),
            macro_types("RAGGED_PAGED_GATHER_PARAMS")
        );
        assert_eq!(
            types(&gather_finish_args(&gathered, g, &b, 0)),
            macro_types("RAGGED_PAGED_GATHER_FINISH_PARAMS")
        );
    }

    #[test]
    fn the_gathered_route_hands_the_forward_its_own_workspace_regions() {
        let plan = a_prefill_plan();
        let g = plan.gather.as_ref().expect("the gathered route");
        let b = PagedBuffers {
            seq_len_q: 12,
            seq_len_kv: 16,
            k: 512,
            v: 768,
            ..PagedBuffers::default()
        };
        let base = 1 << 20;
        let starts = gather_starts_args(&plan, g, &b, base);
        let copy = gather_args(&plan, g, &b, base);
        // The gather writes K and V where the starts kernel's records say, inside the workspace;
        // the records the starts kernel writes are the ones the gather reads.
        assert_eq!(starts[5], KernelArg::Ptr(base + g.workspace.lq));
        assert_eq!(copy[4], KernelArg::Ptr(base + g.workspace.lq));
        assert_eq!(starts[6], copy[5]);
        assert_eq!(copy[7], KernelArg::Ptr(base + g.workspace.k));
        assert_eq!(copy[8], KernelArg::Ptr(base + g.workspace.v));
        assert_eq!(copy[0], KernelArg::Ptr(512));
        assert!(g.workspace.forward > g.workspace.v);
        assert_eq!(plan.workspace_bytes(), g.workspace.total_bytes);
    }

    #[test]
    fn null_and_misaligned_pointers_are_refused_before_any_launch() {
        let plan = a_plan();
        let good = PagedBuffers {
            q: 256,
            k: 512,
            v: 768,
            o: 1024,
            table_k: 4,
            table_v: 8,
            seq_len_q: 12,
            seq_len_kv: 16,
            workspace: 4096,
            workspace_bytes: plan.workspace_bytes(),
            ..PagedBuffers::default()
        };
        let check = |b: &PagedBuffers| {
            check_pointers(
                required_pointers(&plan, b),
                plan.workspace_bytes(),
                b.workspace_bytes,
            )
        };
        assert_eq!(check(&good), Ok(()));
        let text = check(&PagedBuffers { table_v: 0, ..good })
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("uid 7") && text.contains("page_table_v"),
            "{text}"
        );
        let text = check(&PagedBuffers { k: 520, ..good })
            .unwrap_err()
            .to_string();
        assert!(text.contains("16-byte"), "{text}");
        let short = PagedBuffers {
            workspace_bytes: plan.workspace_bytes() - 1,
            ..good
        };
        assert!(matches!(
            check(&short),
            Err(GpuError::WorkspaceTooSmall { .. })
        ));
    }
}
