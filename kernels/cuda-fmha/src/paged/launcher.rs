//! Enqueues the paged kernels on a caller's stream with the caller's device pointers: the split
//! kernel, then (with more than one split) the combine kernel; or, on the gathered route, the
//! starts and gather kernels, the ragged forward and the finish kernel ([`super::gather`]). No host
//! synchronisation: lengths and page tables are read on the device, invalid page ids become NaN
//! rows (paged-kv-and-sinks.md §5.3).

use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUstream;
use ragged_core::binding::{Call, Stream};

use super::device_abi::{self, EntryConfig};
use super::gather::GatherPlan;
use super::plan::PagedPlan;
use crate::forward::device_abi::TileConfig;
use crate::forward::geometry::WORKSPACE_ALIGNMENT;
use crate::forward::launcher::{ExecuteMode, FmhaBuffers, FmhaEngine};
use crate::forward::launcher::{RequiredPointer, check_pointers};
use crate::forward::loading::{LoadedKernels, ModuleCache};
use crate::forward::plan::FmhaPlan;
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
    /// Runs the gathered route's forward.
    forward: &'static FmhaEngine,
}

impl PagedEngine {
    /// The process-wide engine, using [`NvrtcCache::global`].
    /// The gathered route shares [`FmhaEngine::global`], so a process loads the forward's module
    /// once per context whichever graphs it runs.
    pub fn global() -> &'static PagedEngine {
        static ENGINE: OnceLock<PagedEngine> = OnceLock::new();
        ENGINE.get_or_init(|| PagedEngine {
            modules: ModuleCache::new(NvrtcCache::global(), &PAGED_SOURCE),
            forward: FmhaEngine::global(),
        })
    }

    /// An engine with its own compile cache (tests, benchmarks); its forward engine, with the same
    /// cache, lives as long as the process.
    pub fn with_cache(cache: &'static NvrtcCache) -> Self {
        Self {
            modules: ModuleCache::new(cache, &PAGED_SOURCE),
            forward: Box::leak(Box::new(FmhaEngine::with_cache(cache))),
        }
    }

    fn loaded(&self, ctx: &StreamContext) -> Result<Arc<LoadedKernels>, GpuError> {
        if let Some(kernels) = self.modules.loaded(ctx) {
            return Ok(kernels);
        }
        let entries = device_abi::KERNELS
            .iter()
            .flat_map(|&(split, combine)| [(split, ()), (combine, ())])
            .chain(
                device_abi::GATHER_KERNELS
                    .iter()
                    .map(|&kernel| (kernel, ())),
            );
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

    /// Compiles (or fetches) and loads the kernels `plan` launches for `stream`'s context: the
    /// paged module, and on the gathered route the forward's too.
    ///
    /// # Safety
    /// `stream` must be null or a live stream.
    pub unsafe fn prepare(&self, plan: &PagedPlan, stream: CUstream) -> Result<(), GpuError> {
        // SAFETY: forwarded from this function's contract.
        let ctx = unsafe { context_of_stream(stream) }?;
        self.loaded(&ctx)?;
        if plan.gather.is_some() {
            // SAFETY: forwarded from this function's contract.
            unsafe { self.forward.prepare(stream) }?;
        }
        Ok(())
    }

    /// [`Self::prepare`] on a call's stream.
    pub fn prepare_on(&self, plan: &PagedPlan, stream: Stream<'_>) -> Result<(), GpuError> {
        // SAFETY: a call's stream is NULL or live for the call.
        unsafe { self.prepare(plan, stream.raw().cast()) }
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
        if let Some(gather) = &plan.gather {
            let _current = ctx.make_current()?;
            // SAFETY: forwarded from this function's contract; the pointers were checked above
            // and the workspace holds the gathered route's layout.
            return unsafe { self.execute_gathered(&loaded, plan, gather, stream, b) };
        }
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

    /// The gathered route: starts, gather, the forward over the gathered K and V, finish.
    ///
    /// # Safety
    /// As [`Self::execute`], with the pointers already checked against `plan` and the loaded
    /// module's context current.
    unsafe fn execute_gathered(
        &self,
        loaded: &LoadedKernels,
        plan: &PagedPlan,
        gather: &GatherPlan,
        stream: CUstream,
        b: &PagedBuffers,
    ) -> Result<(), GpuError> {
        let base = b.workspace.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
        let block = (device_abi::THREADS, 1, 1);
        let config = |grid| LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        };
        let [starts, copy, finish] = device_abi::GATHER_KERNELS;
        let starts = loaded.module.function(starts, 0)?;
        // SAFETY: the argument list mirrors RAGGED_PAGED_GATHER_STARTS_PARAMS; the lengths were
        // checked non-null, the workspace holds the gathered route's records.
        unsafe {
            launch(
                starts,
                config((1, 1, 1)),
                stream,
                &gather_starts_args(plan, gather, b, base),
            )
        }?;
        let copy = loaded.module.function(copy, 0)?;
        // SAFETY: the argument list mirrors RAGGED_PAGED_GATHER_PARAMS; the starts kernel
        // enqueued before it wrote the records it reads, pools and tables were checked non-null
        // and aligned, and the gathered buffers hold B · max_seq_len_kv rows.
        unsafe {
            launch(
                copy,
                config((gather.key_blocks, plan.batch as u32, 1)),
                stream,
                &gather_args(plan, gather, b, base),
            )
        }?;
        let forward = FmhaPlan {
            scale: plan.scale,
            ..gather.forward.clone()
        };
        let w = gather.workspace;
        let lse_offsets = forward.lse.and_then(|l| l.offsets).is_some();
        let lse = gather_lse(gather, b, base);
        let buffers = FmhaBuffers {
            q: b.q,
            k: base + w.k,
            v: base + w.v,
            o: b.o,
            lse,
            q_offsets: base + w.q_start,
            kv_offsets: base + w.kv_start,
            lse_offsets: if lse_offsets { base + w.q_start } else { 0 },
            seq_len_q: base + w.lq,
            seq_len_kv: 0,
            workspace: base + w.forward,
            workspace_bytes: forward.workspace_bytes(),
        };
        // SAFETY: Q, O and the LSE are the caller's (this function's contract); K, V, the offsets
        // and the lengths are the workspace regions the two launches above fill on the same
        // stream, the forward's workspace its own region after them; offsets and lengths are
        // well-formed by construction, so the enqueueing mode loses nothing.
        unsafe {
            self.forward
                .execute(&forward, stream, &buffers, ExecuteMode::Enqueue)
        }?;
        let finish = loaded.module.function(finish, 0)?;
        // SAFETY: the argument list mirrors RAGGED_PAGED_GATHER_FINISH_PARAMS; it runs after the
        // forward on the same stream and rewrites only the rows of O and the LSE that the forward
        // wrote (sinks) or that belong to a sequence the gather marked invalid.
        unsafe {
            launch(
                finish,
                config((gather.finish_blocks, 1, 1)),
                stream,
                &gather_finish_args(plan, gather, b, base),
            )
        }
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
fn gather_lse(gather: &GatherPlan, b: &PagedBuffers, base: u64) -> u64 {
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
