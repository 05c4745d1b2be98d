//! Enqueues the paged kernels on a caller's stream with the caller's device pointers: the split
//! kernel, then (with more than one split) the combine kernel. No host synchronisation: lengths and
//! page tables are read on the device, invalid page ids become NaN rows (paged-kv-and-sinks.md
//! §5.3).

use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUstream;
use ragged_core::binding::{Call, Stream};

use super::device_abi::{self, EntryConfig};
use super::plan::PagedPlan;
use crate::forward::device_abi::TileConfig;
use crate::forward::geometry::WORKSPACE_ALIGNMENT;
use crate::forward::launcher::{RequiredPointer, check_pointers};
use crate::forward::loading::{LoadedKernels, ModuleCache};
use ragged_gpu_runtime::cuda::context::{StreamContext, context_of_stream};
use ragged_gpu_runtime::cuda::error::{GpuError, TensorRole};
use ragged_gpu_runtime::cuda::module::{KernelArg, LaunchConfig, launch};
use ragged_gpu_runtime::cuda::nvrtc_cache::{KernelSource, NvrtcCache};
use ragged_gpu_runtime::cuda::runtime;

/// The kernel source, compiled at run time for the device in use:
/// `kernels/cuda-fmha/cuda/ragged_paged_decode.cu` with its parts spliced in by `build.rs`.
pub const PAGED_SOURCE: KernelSource = KernelSource {
    name: "ragged_paged_decode.cu",
    text: include_str!(concat!(env!("OUT_DIR"), "/ragged_paged_decode.cu")),
};

/// Device addresses from the variant pack; 0 for an absent optional tensor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PagedBuffers {
    /// Q.
    pub q: u64,
    /// K's page pool.
    pub k: u64,
    /// V's page pool.
    pub v: u64,
    /// O.
    pub o: u64,
    /// The LSE (0 when the plan has none).
    pub lse: u64,
    /// K's page table.
    pub table_k: u64,
    /// V's page table.
    pub table_v: u64,
    /// `seq_len_q`.
    pub seq_len_q: u64,
    /// `seq_len_kv`.
    pub seq_len_kv: u64,
    /// Sink logits (0 when the plan has none).
    pub sinks: u64,
    /// Scratch of at least `plan.workspace_bytes()` bytes (may be 0 when that is 0).
    pub workspace: u64,
    /// Its size in bytes.
    pub workspace_bytes: u64,
}

/// Compiles, loads and launches the paged kernels; one per process is the norm.
pub struct PagedEngine {
    modules: ModuleCache,
}

impl PagedEngine {
    /// The process-wide engine, using [`NvrtcCache::global`].
    pub fn global() -> &'static PagedEngine {
        static ENGINE: OnceLock<PagedEngine> = OnceLock::new();
        ENGINE.get_or_init(|| PagedEngine::with_cache(NvrtcCache::global()))
    }

    /// An engine with its own compile cache (tests, benchmarks).
    pub fn with_cache(cache: &'static NvrtcCache) -> Self {
        Self {
            modules: ModuleCache::new(cache, &PAGED_SOURCE),
        }
    }

    fn loaded(&self, ctx: &StreamContext) -> Result<Arc<LoadedKernels>, GpuError> {
        if let Some(kernels) = self.modules.loaded(ctx) {
            return Ok(kernels);
        }
        let entries = device_abi::KERNELS
            .iter()
            .flat_map(|&(split, combine)| [(split, ()), (combine, ())]);
        let parse = |kernel: &'static str, (), raw: [i32; 4]| {
            let EntryConfig {
                threads,
                shared_mem_bytes,
            } = device_abi::entry_config(kernel, raw)?;
            Ok(TileConfig {
                block_m: 16,
                block_n: 16,
                threads,
                shared_mem_bytes,
            })
        };
        Ok(self.modules.load(ctx, entries, parse)?.kernels)
    }

    /// Compiles (or fetches) and loads the kernels for `stream`'s context.
    ///
    /// # Safety
    /// `stream` must be null or a live stream.
    pub unsafe fn prepare(&self, stream: CUstream) -> Result<(), GpuError> {
        // SAFETY: forwarded from this function's contract.
        let ctx = unsafe { context_of_stream(stream) }?;
        self.loaded(&ctx).map(|_| ())
    }

    /// [`Self::prepare`] on a call's stream.
    pub fn prepare_on(&self, stream: Stream<'_>) -> Result<(), GpuError> {
        // SAFETY: a call's stream is NULL or live for the call.
        unsafe { self.prepare(stream.raw().cast()) }
    }

    /// [`Self::execute`] on `call`'s stream, over buffers read from `call`.
    pub fn execute_call(
        &self,
        plan: &PagedPlan,
        call: &Call<'_>,
        buffers: &PagedBuffers,
    ) -> Result<(), GpuError> {
        // SAFETY: every address in `buffers` is one of `call`'s device pointers (device memory of
        // the stream's context for its declared extent until the stream completes the work,
        // outputs overlapping no input) or 0 for a tensor the plan does not have; the workspace
        // is the call's; the stream is the call's, NULL or live.
        unsafe { self.execute(plan, call.stream().raw().cast(), buffers) }
    }

    /// Enqueues the paged attention described by `plan` on `stream`.
    ///
    /// # Safety
    /// Every non-zero address in `buffers` must point to device memory of the stream's context
    /// holding the tensor the plan describes (Q, pools, tables, lengths and sinks readable; O, the
    /// LSE and the workspace writable and not used by other work until this execute completes);
    /// tables and lengths may hold any values, but every pool must hold the pages its dims declare.
    /// `stream` must be live (or null for the default stream).
    pub unsafe fn execute(
        &self,
        plan: &PagedPlan,
        stream: CUstream,
        b: &PagedBuffers,
    ) -> Result<(), GpuError> {
        check_pointers(
            required_pointers(plan, b),
            plan.workspace_bytes(),
            b.workspace_bytes,
        )?;
        // SAFETY: `stream` is null or live (this function's contract).
        let ctx = unsafe { context_of_stream(stream) }?;
        let loaded = self.loaded(&ctx)?;
        let split_name = plan.kernel.split();
        let published = loaded.config(split_name)?;
        let shared = device_abi::split_shared_bytes(
            published.shared_mem_bytes,
            i64::from(plan.k.page_size),
            i64::from(plan.v.page_size),
        );
        let available = runtime::probe()?.device(ctx.device).map_or(0, |d| {
            u32::try_from(d.max_shared_per_block_optin).unwrap_or(0)
        });
        let shared = u32::try_from(shared).unwrap_or(u32::MAX);
        if shared > available {
            return Err(GpuError::SharedMemory {
                kernel: split_name.to_owned(),
                required: shared,
                available,
                device: ctx.device,
            });
        }
        let _current = ctx.make_current()?;
        let base = b.workspace.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
        let split = loaded.module.function(split_name, shared)?;
        let config = LaunchConfig {
            grid: (plan.split_blocks(), plan.row_groups as u32, 1),
            block: (device_abi::THREADS, 1, 1),
            shared_mem_bytes: shared,
        };
        let args = split_args(plan, b, base);
        // SAFETY: the argument list mirrors RAGGED_PAGED_SPLIT_PARAMS (cuda/decode/README.md);
        // pointers were checked non-null and aligned, the workspace holds the plan's layout (or
        // is unused with one split), the context is current and the shared memory is within the
        // device's opt-in limit.
        unsafe { launch(split, config, stream, &args) }?;
        if plan.splits > 1 {
            let combine = loaded.module.function(plan.kernel.combine(), 0)?;
            let (rows, groups) = plan.combine_grid();
            let config = LaunchConfig {
                grid: (rows, groups, 1),
                block: (device_abi::THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let args = combine_args(plan, b, base);
            // SAFETY: the argument list mirrors RAGGED_PAGED_COMBINE_PARAMS; the split kernel
            // enqueued before it on the same stream wrote the records and partials it reads.
            unsafe { launch(combine, config, stream, &args) }?;
        }
        Ok(())
    }
}

/// The pointers the launches need, in the order their errors are reported.
fn required_pointers(plan: &PagedPlan, b: &PagedBuffers) -> Vec<RequiredPointer> {
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
    vec![
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

    fn a_plan() -> PagedPlan {
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
        super::super::plan(&p).expect("planned")
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
