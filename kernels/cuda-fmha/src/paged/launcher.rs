//! Enqueues the paged kernels on a caller's stream with the caller's device pointers: the split
//! kernel, then (with more than one split) the combine kernel; or, on the gathered route, the
//! starts and gather kernels, the ragged forward and the finish kernel ([`super::gather`]). No host
//! synchronisation: lengths and page tables are read on the device, invalid page ids become NaN
//! rows (paged-kv-and-sinks.md §5.3).

use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUstream;
use ragged_core::binding::{Call, Stream};

use super::args::{
    combine_args, gather_args, gather_finish_args, gather_lse, gather_starts_args,
    required_pointers, split_args,
};
use super::device_abi::{self, EntryConfig};
use super::gather::GatherPlan;
use super::plan::PagedPlan;
use crate::forward::device_abi::TileConfig;
use crate::forward::geometry::WORKSPACE_ALIGNMENT;
use crate::forward::launcher::check_pointers;
use crate::forward::launcher::{ExecuteMode, FmhaBuffers, FmhaEngine};
use crate::forward::loading::{LoadedKernels, ModuleCache};
use crate::forward::plan::FmhaPlan;
use ragged_gpu_runtime::cuda::context::{StreamContext, context_of_stream};
use ragged_gpu_runtime::cuda::error::GpuError;
use ragged_gpu_runtime::cuda::module::{LaunchConfig, launch};
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
            ..FmhaBuffers::default()
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
