//! Enqueues the ragged FMHA forward on a caller's stream with the caller's device pointers.
//!
//! Per execute: the pre-pass turns the offsets (read on the device) into per-batch token starts
//! and a longest-first tile list in the workspace, then the forward kernel runs over an upper-bound
//! grid; the persistent Hopper entry points build that list themselves instead, with no pre-pass
//! launch ([`super::fused_list`]). There is no host synchronisation unless the caller asks for [`ExecuteMode::Validate`],
//! which reads the pre-pass's error flag back before the forward kernel is launched, so that
//! invalid offsets give an error naming the tensor instead of silently skipped batches.

use ragged_core::binding::{Call, Stream};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self as cu, CUstream};

use super::device_abi;
use super::device_abi::TileConfig;
use super::fp8_launch::{execute_fp8, fp8_required_pointers};
use super::fused_list;
use super::geometry::{LaunchGeometry, WORKSPACE_ALIGNMENT};
use super::loading::{Load, LoadedKernels, ModuleCache};
use super::plan::FmhaPlan;
use super::tensor_maps::tensor_map_args;
use ragged_gpu_runtime::cuda::context::{StreamContext, context_of_stream};
use ragged_gpu_runtime::cuda::error::{DriverCall, GpuError, TensorRole};
use ragged_gpu_runtime::cuda::module::{
    KernelArg, KernelModule, LaunchConfig, launch, launch_parts, launch_parts_programmatic,
};
use ragged_gpu_runtime::cuda::nvrtc_cache::{ImageOrigin, KernelSource, NvrtcCache};
#[cfg(test)]
use ragged_gpu_runtime::cuda::runtime;

/// The kernel source, compiled at run time for the device in use: `kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu`
/// with its `fmha/` parts spliced in by `kernels/cuda-fmha/build.rs`.
pub const FMHA_SOURCE: KernelSource = KernelSource {
    name: "ragged_fmha_fwd.cu",
    text: include_str!(concat!(env!("OUT_DIR"), "/ragged_fmha_fwd.cu")),
};

/// Whether an execute checks the offsets' contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecuteMode {
    /// Enqueue and return; invalid offsets make their batches write nothing (caller precondition).
    Enqueue,
    /// Synchronise after the pre-pass and fail with [`GpuError::InvalidOffsets`] if it found any
    /// invalid offsets or lengths; the forward kernel is then not launched.
    Validate,
}

/// Device addresses from the variant pack; 0 for an absent optional tensor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FmhaBuffers {
    /// Q data.
    pub q: u64,
    /// K data.
    pub k: u64,
    /// V data.
    pub v: u64,
    /// O data.
    pub o: u64,
    /// LSE data (0 when the plan has no LSE).
    pub lse: u64,
    /// Q's (and O's) `ragged_offset` aux.
    pub q_offsets: u64,
    /// K's (and V's) `ragged_offset` aux.
    pub kv_offsets: u64,
    /// The ragged LSE's aux (0 for a dense LSE).
    pub lse_offsets: u64,
    /// `seq_len_q` (0 when absent).
    pub seq_len_q: u64,
    /// `seq_len_kv` (0 when absent).
    pub seq_len_kv: u64,
    /// Scratch of at least `plan.workspace_bytes()` bytes.
    pub workspace: u64,
    /// Its size in bytes.
    pub workspace_bytes: u64,
    /// FP8: each scalar bound as a device tensor, in the order of `fp8::DESCALE_Q` …; 0 where
    /// the scalar is absent or passed by value.
    pub fp8_scalars: [u64; 6],
    /// FP8: the amax_o output (0 when the plan has none).
    pub amax_o: u64,
    /// FP8: the amax_s output (0 when the plan has none).
    pub amax_s: u64,
}

/// Compiles, loads and launches the FMHA kernels; one per process is the norm.
pub struct FmhaEngine {
    /// Loaded modules by context id.
    modules: ModuleCache,
}

/// What [`FmhaEngine::prepare`] did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Device ordinal of the stream's context.
    pub device: i32,
    /// The NVRTC target used.
    pub arch: String,
    /// Where the image came from; `None` when the module was already loaded in this context.
    pub origin: Option<ImageOrigin>,
    /// Each forward entry point's published configuration.
    pub configs: Vec<(&'static str, TileConfig)>,
}

impl FmhaEngine {
    /// The process-wide engine, using [`NvrtcCache::global`].
    pub fn global() -> &'static FmhaEngine {
        static ENGINE: OnceLock<FmhaEngine> = OnceLock::new();
        ENGINE.get_or_init(|| FmhaEngine::with_cache(NvrtcCache::global()))
    }

    /// An engine with its own compile cache (tests, benchmarks).
    pub fn with_cache(cache: &'static NvrtcCache) -> Self {
        Self {
            modules: ModuleCache::new(cache, &FMHA_SOURCE),
        }
    }

    /// Compiles (or fetches) and loads the kernels for `stream`'s context. Execute does this on
    /// first use; calling it at plan time moves the compile out of the first execute.
    ///
    /// # Safety
    /// `stream` must be null or a live stream.
    pub unsafe fn prepare(&self, stream: CUstream) -> Result<Prepared, GpuError> {
        // SAFETY: forwarded from this function's contract.
        let ctx = unsafe { context_of_stream(stream) }?;
        let load = self.load(&ctx)?;
        Ok(Prepared {
            device: ctx.device,
            arch: load.arch,
            origin: load.origin,
            configs: load.kernels.sorted_configs(),
        })
    }

    /// The exact launch shape `plan` gets on `stream`'s device (its workspace is never larger
    /// than [`FmhaPlan::workspace_bytes`]).
    ///
    /// # Safety
    /// `stream` must be null or a live stream.
    pub unsafe fn geometry(
        &self,
        plan: &FmhaPlan,
        stream: CUstream,
    ) -> Result<LaunchGeometry, GpuError> {
        // SAFETY: forwarded from this function's contract.
        let ctx = unsafe { context_of_stream(stream) }?;
        let loaded = self.loaded(&ctx)?;
        plan.geometry(loaded.config(plan.kernel.name())?)
    }

    /// The kernels of `ctx`. Execute needs only these: the [`Prepared`] report (a sorted copy of
    /// the tile tables) is built by [`FmhaEngine::prepare`] alone, off the per-call path.
    fn loaded(&self, ctx: &StreamContext) -> Result<Arc<LoadedKernels>, GpuError> {
        match self.modules.loaded(ctx) {
            Some(kernels) => Ok(kernels),
            None => self.load(ctx).map(|load| load.kernels),
        }
    }

    fn load(&self, ctx: &StreamContext) -> Result<Load, GpuError> {
        self.modules.load(
            ctx,
            device_abi::FORWARD_KERNELS
                .iter()
                .copied()
                .chain(
                    device_abi::FP8_FORWARD_KERNELS
                        .iter()
                        .map(|(_, name)| *name),
                )
                .map(|kernel| (kernel, ())),
            |kernel, (), raw| TileConfig::from_raw(kernel, raw),
        )
    }

    /// [`Self::prepare`] on a call's stream.
    pub fn prepare_on(&self, stream: Stream<'_>) -> Result<Prepared, GpuError> {
        // SAFETY: a call's stream is NULL or live for the call.
        unsafe { self.prepare(stream.raw().cast()) }
    }

    /// [`Self::execute`] on `call`'s stream, over buffers read from `call`.
    pub fn execute_call(
        &self,
        plan: &FmhaPlan,
        call: &Call<'_>,
        buffers: &FmhaBuffers,
        mode: ExecuteMode,
    ) -> Result<(), GpuError> {
        // SAFETY: every address in `buffers` is one of `call`'s device pointers (device memory
        // of the stream's context for its declared extent until the stream completes the work,
        // outputs overlapping no input) or 0 for a tensor the plan does not have; the workspace
        // is the call's; the stream is the call's, NULL or live.
        unsafe { self.execute(plan, call.stream().raw().cast(), buffers, mode) }
    }

    /// Enqueues the forward pass described by `plan` on `stream`.
    ///
    /// # Safety
    /// Every non-zero address in `buffers` must point to device memory of the stream's context
    /// holding the tensor the plan describes: Q, K, V (and offsets, seq lens) readable; O, LSE and
    /// the workspace writable and not read by other work until this execute completes on the
    /// stream; buffer sizes matching the offsets' final values. `stream` must be a live stream
    /// (or null for the default stream).
    pub unsafe fn execute(
        &self,
        plan: &FmhaPlan,
        stream: CUstream,
        buffers: &FmhaBuffers,
        mode: ExecuteMode,
    ) -> Result<(), GpuError> {
        check_buffers(plan, buffers)?;
        // SAFETY: `stream` is null or live (this function's contract).
        let ctx = unsafe { context_of_stream(stream) }?;
        let loaded = self.loaded(&ctx)?;
        let geometry = plan.geometry(loaded.config(plan.kernel.name())?)?;
        if geometry.workspace.total_bytes > buffers.workspace_bytes {
            return Err(GpuError::WorkspaceTooSmall {
                required: geometry.workspace.total_bytes,
                provided: buffers.workspace_bytes,
            });
        }
        let _current = ctx.make_current()?;
        if mode == ExecuteMode::Validate {
            refuse_capture(stream)?;
        }
        let base = buffers.workspace.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
        if let Some(fp8) = &plan.fp8 {
            // SAFETY: forwarded from this function's contract; the buffers were checked, the
            // context is current and `geometry` is the loaded FP8 entry point's.
            return unsafe {
                execute_fp8(plan, fp8, &loaded, &geometry, stream, buffers, mode, base)
            };
        }

        let prepass = prepass_args(plan, &geometry, buffers, base);
        // The fused list: an entry point that publishes NAME_fl builds the pre-pass's list itself
        // when handed a nonce (kernels/cuda-fmha/cuda/fmha/fused_list.cuh), for problems its blocks can sort.
        // Validation reads the error flag between the two launches, so it keeps the pre-pass.
        let takes_maps = loaded.takes_tensor_maps(plan.kernel.name());
        let fused = mode == ExecuteMode::Enqueue
            && loaded.builds_fused_list(plan.kernel.name())
            && fused_list::fits(plan.batch, geometry.max_tiles, geometry.tiles.threads)
            && fused_list::enabled();
        let nonce = if fused { fused_list::next_nonce() } else { 0 };
        if nonce == 0 {
            // SAFETY: the argument list mirrors `ragged_fmha_prepass` (kernels/cuda-fmha/cuda/README.md);
            // pointers were checked non-null where required, the workspace holds the geometry's
            // layout, and the caller guarantees the rest (see `# Safety`). The context is
            // current; a programmatic launch only where the module states that its pre-pass
            // writes nothing before waiting for the previous grid (`prepass_dependency`).
            unsafe {
                run_prepass(
                    &loaded,
                    stream,
                    &prepass,
                    mode,
                    base + geometry.workspace.error_flag,
                    plan,
                )
            }?;
        }

        let tiles = geometry.tiles;
        let forward = loaded
            .module
            .function(plan.kernel.name(), tiles.shared_mem_bytes)?;
        let forward_config = LaunchConfig {
            grid: (geometry.grid_blocks, 1, 1),
            block: (tiles.threads, 1, 1),
            shared_mem_bytes: tiles.shared_mem_bytes,
        };
        let args = forward_args(plan, &geometry, buffers, base);
        let maps = if takes_maps {
            Some(tensor_map_args(
                plan,
                &tiles,
                [buffers.q, buffers.k, buffers.v],
            )?)
        } else {
            None
        };
        let nonce_arg = [KernelArg::I64(nonce as i64)];
        let parts: [&[KernelArg]; 4] = if takes_maps {
            [
                &args,
                maps.as_ref().map_or(&[], |m| &m[..]),
                &prepass,
                &nonce_arg,
            ]
        } else {
            [&args, &[], &[], &[]]
        };
        // SAFETY: the argument list mirrors RAGGED_FMHA_PARAMS (kernels/cuda-fmha/cuda/README.md), plus, for
        // an entry point that publishes NAME_tma, the Q, K and V tensor maps, the pre-pass's
        // parameters and the nonce; either the pre-pass enqueued above on the same stream fills
        // the workspace first or (nonce != 0) one block of the forward does; the forward is a
        // programmatic launch only where the module states that every forward body waits for the
        // previous grid before touching the workspace (`grid_dependency`); block size and shared
        // memory are the entry point's own published values.
        unsafe {
            if loaded.grid_dependency() {
                launch_parts_programmatic(forward, forward_config, stream, &parts)
            } else {
                launch_parts(forward, forward_config, stream, &parts)
            }
        }
    }
}

/// The pre-pass launch (programmatic where the module allows it) and, in validating mode, the
/// read-back of its offsets flag at `flag_address`, which turns bad offsets into an error before
/// the forward is enqueued.
///
/// # Safety
/// As [`launch_prepass`], with `loaded` the module of the stream's context.
pub(crate) unsafe fn run_prepass(
    loaded: &LoadedKernels,
    stream: CUstream,
    args: &[KernelArg],
    mode: ExecuteMode,
    flag_address: u64,
    plan: &FmhaPlan,
) -> Result<(), GpuError> {
    // SAFETY: forwarded from this function's contract.
    unsafe { launch_prepass(&loaded.module, stream, args, loaded.prepass_dependency()) }?;
    if mode == ExecuteMode::Validate {
        check_flag(stream, flag_address, plan)?;
    }
    Ok(())
}

/// Enqueues `ragged_fmha_prepass` (one block of `PREPASS_THREADS`, no dynamic shared memory)
/// from `module` on `stream`; `programmatic`: with programmatic stream serialization, so that it
/// may start in the tail of the stream's previous kernel.
///
/// # Safety
/// `args` must mirror the pre-pass's parameters, with every pointer valid for what the pre-pass
/// reads and writes until it completes; `stream` must be live (or null) and `module`'s context
/// current; `programmatic` only where the module publishes
/// [`device_abi::PREPASS_DEPENDENCY_SYMBOL`] = 1.
pub(crate) unsafe fn launch_prepass(
    module: &KernelModule,
    stream: CUstream,
    args: &[KernelArg],
    programmatic: bool,
) -> Result<(), GpuError> {
    let prepass = module.function(device_abi::PREPASS_KERNEL, 0)?;
    let config = LaunchConfig {
        grid: (1, 1, 1),
        block: (device_abi::PREPASS_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: forwarded from this function's contract.
    unsafe {
        if programmatic {
            launch_parts_programmatic(prepass, config, stream, &[args])
        } else {
            launch(prepass, config, stream, args)
        }
    }
}

/// Fails with [`GpuError::ValidatingUnderCapture`] when `stream` is being captured into a CUDA
/// graph: validating mode must synchronise the stream after its pre-pass, which capture forbids
/// (the synchronisation would fail and invalidate the caller's capture), so the check comes before
/// anything is enqueued.
pub(crate) fn refuse_capture(stream: CUstream) -> Result<(), GpuError> {
    let mut status = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: `stream` is null or live (caller contract); `status` is a live out-pointer.
    unsafe { cu::cuStreamIsCapturing(stream, &mut status) }
        .result()
        .call("cuStreamIsCapturing")?;
    match status {
        cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Ok(()),
        cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => {
            Err(GpuError::ValidatingUnderCapture { status: "active" })
        }
        _ => Err(GpuError::ValidatingUnderCapture {
            status: "invalidated",
        }),
    }
}

/// Fails with [`GpuError::InvalidOffsets`] when the pre-pass's error flag at `address` is set
/// (stream-ordered: synchronises the stream).
pub(crate) fn check_flag(stream: CUstream, address: u64, plan: &FmhaPlan) -> Result<(), GpuError> {
    let flag = read_flag(stream, address)?;
    if flag != 0 {
        return Err(GpuError::InvalidOffsets {
            flag,
            problems: device_abi::decode_error_flag(flag, &plan.flag_uids()),
        });
    }
    Ok(())
}

/// Reads the pre-pass's error flag (stream-ordered), synchronising the stream.
fn read_flag(stream: CUstream, address: u64) -> Result<u32, GpuError> {
    let mut flag = 0u32;
    // SAFETY: `address` is the 4-byte flag inside the checked workspace; `flag` is a live host
    // u32 and the stream is synchronised before it goes out of scope.
    unsafe { cu::cuMemcpyDtoHAsync_v2(std::ptr::from_mut(&mut flag).cast(), address, 4, stream) }
        .result()
        .call("cuMemcpyDtoHAsync")?;
    // SAFETY: `stream` is live (caller contract).
    unsafe { cu::cuStreamSynchronize(stream) }
        .result()
        .call("cuStreamSynchronize")?;
    Ok(flag)
}

/// Parameters of `ragged_fmha_prepass`, in signature order.
pub(crate) fn prepass_args(
    plan: &FmhaPlan,
    geometry: &LaunchGeometry,
    b: &FmhaBuffers,
    workspace: u64,
) -> [KernelArg; PREPASS_PARAMETERS] {
    let layout = geometry.workspace;
    let records = [
        layout.batches,
        layout.tiles,
        layout.tile_count,
        layout.error_flag,
    ];
    prepass_args_for(plan, geometry.tiles, b, workspace, records)
}

/// Parameters of `ragged_fmha_prepass`, in signature order, for a tile list of `tiles`' BM and
/// BN; `records` are the byte offsets from `workspace` of the batch records, the tile list, the
/// tile count and the error flag. The backward runs the same pre-pass with its dQ tile.
pub(crate) fn prepass_args_for(
    plan: &FmhaPlan,
    tiles: TileConfig,
    b: &FmhaBuffers,
    workspace: u64,
    records: [u64; 4],
) -> [KernelArg; PREPASS_PARAMETERS] {
    use KernelArg::{I32, I64, Ptr};
    let [batches, tile_list, tile_count, error_flag] = records;
    let (lse_off, lse_bytes, lse_mult, lse_batch_stride) = match plan.lse {
        Some(lse) => match lse.offsets {
            Some(o) => (b.lse_offsets, o.bytes, o.multiplier, 0),
            None => (0, 0, 1, lse.batch_stride),
        },
        None => (0, 0, 1, 0),
    };
    [
        Ptr(b.q_offsets),
        I32(plan.q_offsets.bytes),
        I64(plan.q_offsets.multiplier),
        I64(plan.q.seq),
        I32(plan.s_q_max),
        Ptr(b.kv_offsets),
        I32(plan.kv_offsets.bytes),
        I64(plan.kv_offsets.multiplier),
        I64(plan.k.seq),
        I32(plan.s_kv_max),
        Ptr(plan.seq_len_q.map_or(0, |_| b.seq_len_q)),
        I32(plan.seq_len_q.map_or(0, |s| s.1)),
        Ptr(plan.seq_len_kv.map_or(0, |_| b.seq_len_kv)),
        I32(plan.seq_len_kv.map_or(0, |s| s.1)),
        Ptr(lse_off),
        I32(lse_bytes),
        I64(lse_mult),
        I64(lse_batch_stride),
        I32(plan.batch),
        I32(tiles.block_m),
        I32(tiles.block_n),
        I32(plan.mask_left),
        I32(plan.mask_right),
        I32(plan.bottom_right),
        Ptr(workspace + batches),
        Ptr(workspace + tile_list),
        Ptr(workspace + tile_count),
        Ptr(workspace + error_flag),
    ]
}

/// Parameters of `ragged_fmha_prepass`.
pub(crate) const PREPASS_PARAMETERS: usize = 28;

/// Parameters of every forward entry point before its tensor maps (RAGGED_FMHA_PARAMS).
const FORWARD_PARAMETERS: usize = 24;

/// Parameters of `ragged_fmha_fwd_*` (RAGGED_FMHA_PARAMS), in signature order.
pub(crate) fn forward_args(
    plan: &FmhaPlan,
    geometry: &LaunchGeometry,
    b: &FmhaBuffers,
    workspace: u64,
) -> [KernelArg; FORWARD_PARAMETERS] {
    use KernelArg::{F32, I32, I64, Ptr};
    let layout = geometry.workspace;
    let (lse, lse_seq, lse_head) = match plan.lse {
        Some(l) => (b.lse, l.seq_stride, l.head_stride),
        None => (0, 0, 0),
    };
    [
        Ptr(b.q),
        Ptr(b.k),
        Ptr(b.v),
        Ptr(b.o),
        Ptr(lse),
        Ptr(workspace + layout.batches),
        Ptr(workspace + layout.tiles),
        Ptr(workspace + layout.tile_count),
        I64(plan.q.seq),
        I64(plan.q.head),
        I64(plan.k.seq),
        I64(plan.k.head),
        I64(plan.v.seq),
        I64(plan.v.head),
        I64(plan.o.seq),
        I64(plan.o.head),
        I64(lse_seq),
        I64(lse_head),
        I32(plan.heads_q),
        I32(plan.heads_kv),
        F32(plan.scale),
        I32(plan.mask_left),
        I32(plan.mask_right),
        I32(plan.bottom_right),
    ]
}

/// Rejects null or misaligned pointers before anything is enqueued: a fault inside a kernel
/// would poison the caller's context for good.
pub fn check_buffers(plan: &FmhaPlan, b: &FmhaBuffers) -> Result<(), GpuError> {
    check_pointers(
        required_pointers(plan, b),
        plan.workspace_bytes(),
        b.workspace_bytes,
    )
}

/// One pointer a launch reads or writes: address, tensor uid (-1 for the workspace), role and
/// the alignment its kernel loads assume.
pub(crate) type RequiredPointer = (u64, i64, TensorRole, u64);

/// The pointers the forward's launches need, in the order their errors are reported; the
/// backward extends this list with its gradients.
pub(crate) fn required_pointers(plan: &FmhaPlan, b: &FmhaBuffers) -> Vec<RequiredPointer> {
    let [q_uid, k_uid, v_uid, o_uid] = plan.uids;
    let mut required = vec![
        (b.q, q_uid, TensorRole::Q, 16),
        (b.k, k_uid, TensorRole::K, 16),
        (b.v, v_uid, TensorRole::V, 16),
        (b.o, o_uid, TensorRole::O, 16),
        (
            b.q_offsets,
            plan.q_offsets.uid,
            TensorRole::QOffsets,
            plan.q_offsets.bytes as u64,
        ),
        (
            b.kv_offsets,
            plan.kv_offsets.uid,
            TensorRole::KvOffsets,
            plan.kv_offsets.bytes as u64,
        ),
        (b.workspace, -1, TensorRole::Workspace, 1),
    ];
    if let Some((uid, bytes)) = plan.seq_len_q {
        required.push((b.seq_len_q, uid, TensorRole::SeqLenQ, bytes as u64));
    }
    if let Some((uid, bytes)) = plan.seq_len_kv {
        required.push((b.seq_len_kv, uid, TensorRole::SeqLenKv, bytes as u64));
    }
    if let Some(lse) = plan.lse {
        required.push((b.lse, lse.uid, TensorRole::Lse, 4));
        if let Some(o) = lse.offsets {
            required.push((b.lse_offsets, o.uid, TensorRole::LseOffsets, o.bytes as u64));
        }
    }
    if let Some(fp8) = &plan.fp8 {
        required.extend(fp8_required_pointers(fp8, b));
    }
    required
}

/// The first null or misaligned pointer of `required`, or a workspace smaller than `needed`.
pub(crate) fn check_pointers(
    required: Vec<RequiredPointer>,
    needed: u64,
    provided: u64,
) -> Result<(), GpuError> {
    for (address, uid, role, align) in required {
        let problem = if address == 0 {
            "is null"
        } else if address % align != 0 {
            match align {
                16 => "is not 16-byte aligned",
                8 => "is not 8-byte aligned",
                _ => "is not 4-byte aligned",
            }
        } else {
            continue;
        };
        return Err(GpuError::BadPointer {
            uid,
            role,
            address,
            problem,
        });
    }
    if provided < needed {
        return Err(GpuError::WorkspaceTooSmall {
            required: needed,
            provided,
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "launcher_tests.rs"]
mod tests;
