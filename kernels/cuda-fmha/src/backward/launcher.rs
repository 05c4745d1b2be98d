//! Enqueues the CUDA SDPA backward on a caller's stream with the caller's device pointers.
//!
//! Per execute, four launches and no host synchronisation (unless [`ExecuteMode::Validate`]):
//! the forward's offsets pre-pass (per-batch token starts and lengths from the offsets and
//! seq_lens on the device, and the dQ kernel's longest-first tile list), Di = rowsum(dO ∘ O) into
//! the workspace, the dK/dV kernel and the dQ kernel. No atomics: each output row has one writer.
//! A plan of [`DqForm::Unordered`] on sm_90a runs the fused kernel and the dQ convert pass instead
//! of the last two ([`super::fused_launcher`]).

use ragged_core::binding::{Call, Stream};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUstream;

use super::device_abi::{self, Part};
use super::fused_abi;
use super::fused_launcher;
use super::plan::{BackwardPlan, DI_ROW_BLOCK, DqForm};
use crate::forward::ExecuteMode;
use crate::forward::device_abi::TileConfig;
use crate::forward::geometry::WORKSPACE_ALIGNMENT;
use crate::forward::launcher::{self, FmhaBuffers};
use crate::forward::loading::{LoadedKernels, ModuleCache};
use crate::forward::tensor_maps;
use ragged_gpu_runtime::cuda::context::{StreamContext, context_of_stream};
use ragged_gpu_runtime::cuda::error::{GpuError, TensorRole};
use ragged_gpu_runtime::cuda::module::{KernelArg, LaunchConfig, launch};
use ragged_gpu_runtime::cuda::nvrtc_cache::{KernelSource, NvrtcCache};
use ragged_gpu_runtime::cuda::runtime;

/// The backward's kernel source: `kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu` with its parts (the forward's
/// common records, pre-pass and warp helpers, and `fmha_bwd/`) spliced in by `kernels/cuda-fmha/build.rs`.
pub const BWD_SOURCE: KernelSource = KernelSource {
    name: "ragged_fmha_bwd.cu",
    text: include_str!(concat!(env!("OUT_DIR"), "/ragged_fmha_bwd.cu")),
};

/// Device addresses from the variant pack; 0 for an absent optional tensor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackwardBuffers {
    /// Q, K, V, O, the forward's LSE, the offsets and seq_lens in the forward's form (its pointer
    /// list and pre-pass read them), with the workspace sized for the backward plan.
    pub forward: FmhaBuffers,
    /// dO (shares Q's offsets).
    pub d_o: u64,
    /// dQ (written; Q's offsets).
    pub dq: u64,
    /// dK (written; K's offsets).
    pub dk: u64,
    /// dV (written; K's offsets).
    pub dv: u64,
}

/// Compiles, loads and launches the backward kernels; one per process is the norm.
pub struct BackwardEngine {
    /// Loaded modules by context id.
    modules: ModuleCache,
}

impl BackwardEngine {
    /// The process-wide engine, using [`NvrtcCache::global`].
    pub fn global() -> &'static BackwardEngine {
        static ENGINE: OnceLock<BackwardEngine> = OnceLock::new();
        ENGINE.get_or_init(|| BackwardEngine::with_cache(NvrtcCache::global()))
    }

    /// An engine with its own compile cache (tests, benchmarks).
    pub fn with_cache(cache: &'static NvrtcCache) -> Self {
        Self {
            modules: ModuleCache::new(cache, &BWD_SOURCE),
        }
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

    /// The loaded kernels and the NVRTC target they were compiled for: the wgmma entry points
    /// exist (and are read) only on [`device_abi::HOPPER_ARCH`].
    fn loaded(&self, ctx: &StreamContext) -> Result<(Arc<LoadedKernels>, String), GpuError> {
        let arch = runtime::probe()?
            .device(ctx.device)
            .map(|d| d.target.arch().to_owned())
            .unwrap_or_default();
        let hopper = arch == device_abi::HOPPER_ARCH;
        let entries = device_abi::ALL.iter().flat_map(|set| {
            [
                (set.dot, Part::Dot),
                (set.dkdv, Part::DkDv),
                (set.dq, Part::Dq),
            ]
        });
        let wgmma = device_abi::HOPPER_ALL
            .iter()
            .chain(device_abi::HOPPER_TMA_ALL.iter())
            .filter(|_| hopper)
            .flat_map(|set| [(set.dkdv, Part::DkDv), (set.dq, Part::Dq)])
            .chain(
                device_abi::HOPPER_TMA_BM128
                    .iter()
                    .filter(|_| hopper)
                    .map(|&name| (name, Part::DkDv)),
            );
        let fused = fused_abi::FUSED_ALL
            .iter()
            .filter(|_| hopper)
            .flat_map(|set| {
                [
                    Some((set.ordered, Part::Fused)),
                    Some((set.ws, Part::Fused)),
                    set.wg.map(|wg| (wg, Part::Fused)),
                    Some((set.convert, Part::Convert)),
                ]
                .into_iter()
                .flatten()
            });
        let load = self.modules.load(
            ctx,
            entries.chain(wgmma).chain(fused),
            device_abi::check_config,
        )?;
        Ok((load.kernels, load.arch))
    }

    /// [`Self::prepare`] on a call's stream.
    pub fn prepare_on(&self, stream: Stream<'_>) -> Result<(), GpuError> {
        // SAFETY: a call's stream is NULL or live for the call.
        unsafe { self.prepare(stream.raw().cast()) }
    }

    /// [`Self::execute`] on `call`'s stream, over buffers read from `call`.
    pub fn execute_call(
        &self,
        plan: &BackwardPlan,
        call: &Call<'_>,
        buffers: &BackwardBuffers,
        mode: ExecuteMode,
    ) -> Result<(), GpuError> {
        // SAFETY: every address in `buffers` is one of `call`'s device pointers (device memory
        // of the stream's context for its declared extent until the stream completes the work;
        // the gradients overlap no input) or 0 for a tensor the plan does not have; the workspace
        // is the call's; the stream is the call's, NULL or live.
        unsafe { self.execute(plan, call.stream().raw().cast(), buffers, mode) }
    }

    /// Enqueues the backward described by `plan` on `stream`.
    ///
    /// # Safety
    /// Every non-zero address in `buffers` must point to device memory of the stream's context
    /// holding the tensor the plan describes: Q, K, V, O, dO, the LSE, offsets and seq_lens
    /// readable; dQ, dK, dV and the workspace writable, overlapping no input, and not used by
    /// other work until this execute completes on the stream. `stream` must be live (or null).
    pub unsafe fn execute(
        &self,
        plan: &BackwardPlan,
        stream: CUstream,
        buffers: &BackwardBuffers,
        mode: ExecuteMode,
    ) -> Result<(), GpuError> {
        check_buffers(plan, buffers)?;
        // SAFETY: `stream` is null or live (this function's contract).
        let ctx = unsafe { context_of_stream(stream) }?;
        let (loaded, arch) = self.loaded(&ctx)?;
        // Current before the tensor maps are encoded: cuTensorMapEncodeTiled fails without a
        // current context, and a map that fails to encode silently selects the slower kernel.
        let _current = ctx.make_current()?;
        if let Some(fused) = fused_abi::fused_for_target(plan.kernels, &arch) {
            let kernel = match plan.dq_form {
                DqForm::Unordered => Some(fused.ws),
                DqForm::Deterministic if device_abi::pair_selected() => None,
                DqForm::Deterministic => Some(fused.ordered),
            };
            if let Some(mut kernel) = kernel {
                let maps = stream_maps(&loaded, &mut kernel, Part::Fused, plan, buffers)?;
                // The ordered kernel (and D 96's unordered one) has no twin without tensor maps:
                // the pair runs instead.
                if maps.is_some() || !device_abi::takes_tensor_maps(kernel) {
                    // SAFETY: forwarded from this function's contract; `loaded` is the module of
                    // the stream's context, compiled for sm_90a (the fused kernels exist), and
                    // `maps` are those `kernel` takes.
                    return unsafe {
                        fused_launcher::execute(
                            plan,
                            stream,
                            buffers,
                            mode,
                            &loaded,
                            (kernel, maps),
                            fused.convert,
                        )
                    };
                }
            }
        }
        let mut kernels = device_abi::for_target(plan.kernels, &arch, device_abi::selected());
        let dkdv_maps = stream_maps(&loaded, &mut kernels.dkdv, Part::DkDv, plan, buffers)?;
        let dq_maps = stream_maps(&loaded, &mut kernels.dq, Part::Dq, plan, buffers)?;
        let (dkdv, dq) = (loaded.config(kernels.dkdv)?, loaded.config(kernels.dq)?);
        let f = &plan.forward;
        let dkdv_grid = grid_blocks(
            i64::from(f.batch)
                * ceil_div(i64::from(f.s_kv_max), i64::from(dkdv.block_n))
                * i64::from(f.heads_kv),
            "dK/dV grid (B · ceil(S_kv_max / BN) · H_kv)",
        )?;
        let dq_grid = grid_blocks(
            i64::from(f.batch)
                * ceil_div(i64::from(f.s_q_max), i64::from(dq.block_m))
                * i64::from(f.heads_q),
            "dQ grid (B · ceil(S_q_max / BM) · H_q)",
        )?;
        let kv_tiles = ceil_div(i64::from(f.s_kv_max), i64::from(dkdv.block_n)) as i32;
        if mode == ExecuteMode::Validate {
            launcher::refuse_capture(stream)?;
        }
        let base = aligned_workspace(buffers);
        // SAFETY: the workspace holds the plan's layout, its tile list sized for this dQ tile (BM
        // ≥ MIN_DQ_BLOCK_M); the caller guarantees the rest. The context is current.
        unsafe { prepass_and_di(plan, stream, buffers, mode, &loaded, dq, false) }?;

        let args = gradient_args(plan, buffers, base, kv_tiles);
        for (kernel, tiles, blocks, maps) in [
            (kernels.dkdv, dkdv, dkdv_grid, dkdv_maps),
            (kernels.dq, dq, dq_grid, dq_maps),
        ] {
            let mut args = args.clone();
            args.extend(maps.into_iter().flatten());
            let function = loaded.module.function(kernel, tiles.shared_mem_bytes)?;
            let config = LaunchConfig {
                grid: (blocks, 1, 1),
                block: (tiles.threads, 1, 1),
                shared_mem_bytes: tiles.shared_mem_bytes,
            };
            // SAFETY: mirrors RAGGED_BWD_PARAMS (then, for a TMA kernel, its tensor maps over the
            // plan's buffers and workspace); the pre-pass and Di pass enqueued before on the same stream
            // filled the workspace; block and shared memory are the entry point's own published
            // values; the caller guarantees the buffers (see `# Safety`).
            unsafe { launch(function, config, stream, &args) }?;
        }
        Ok(())
    }
}

/// The tensor maps a TMA gradient kernel streams (dK/dV and fused: Q and dO, boxes of its BM rows,
/// then the 2-D map over the Di pass's Di and scaled-LSE arrays, one box per 64-row block; dQ: K
/// and V, boxes of its BN rows), `None` for a kernel without maps. A layout the driver cannot
/// describe as a tensor map (a stride that is not a multiple of 16 bytes, say) switches `kernel`
/// to the wgmma kernel it was derived from, which copies the same tiles with cp.async, so such a
/// problem still runs, with the same results; any other encoding failure is returned.
pub(super) fn stream_maps(
    loaded: &LoadedKernels,
    kernel: &mut &'static str,
    part: Part,
    plan: &BackwardPlan,
    b: &BackwardBuffers,
) -> Result<Option<Vec<KernelArg>>, GpuError> {
    if !device_abi::takes_tensor_maps(kernel) {
        return Ok(None);
    }
    let tiles = loaded.config(kernel)?;
    let (d_qk, d_v) =
        device_abi::head_dims(plan.kernels).ok_or_else(|| GpuError::KernelContract {
            kernel: (*kernel).to_owned(),
            detail: "takes tensor maps but its set has no head dim in the host's table".to_owned(),
        })?;
    let f = &plan.forward;
    let rows = |v: i32| u32::try_from(v).unwrap_or(0);
    let (first, second) = match part {
        Part::DkDv | Part::Fused => {
            let bm = rows(tiles.block_m);
            (
                tensor_maps::encode(kernel, b.forward.q, d_qk, f.heads_q, f.q, bm),
                tensor_maps::encode(kernel, b.d_o, d_v, f.heads_q, plan.d_o, bm),
            )
        }
        _ => {
            let bn = rows(tiles.block_n);
            (
                tensor_maps::encode(kernel, b.forward.k, d_qk, f.heads_kv, f.k, bn),
                tensor_maps::encode(kernel, b.forward.v, d_v, f.heads_kv, f.v, bn),
            )
        }
    };
    let mut maps = match (first, second) {
        (Ok(a), Ok(c)) => vec![KernelArg::TensorMap(a), KernelArg::TensorMap(c)],
        (Err(e), _) | (_, Err(e)) if !layout_refused(&e) => return Err(e),
        _ => {
            *kernel = device_abi::without_tensor_maps(kernel);
            return Ok(None);
        }
    };
    if matches!(part, Part::DkDv | Part::Fused) {
        // Di, then the scaled LSE of the same size right after it (`BackwardWorkspace::lse2`), in
        // blocks of the Di pass's row block (a BM 128 tile copies one or two). The workspace's layout is the plan's own, so only a block
        // count past int coordinates switches kernels; a driver refusal here is a defect, not a
        // layout to serve another way.
        let w = plan.workspace;
        let block = DI_ROW_BLOCK as u32;
        let blocks = (2 * (w.lse2 - w.di) / 4)
            .checked_div(u64::from(block))
            .unwrap_or(0);
        match tensor_maps::encode_f32_blocks(kernel, aligned_workspace(b) + w.di, block, blocks) {
            Ok(stats) => maps.push(KernelArg::TensorMap(stats)),
            Err(GpuError::KernelContract { .. }) => {
                *kernel = device_abi::without_tensor_maps(kernel);
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(maps))
}

/// Whether a tensor map failed over its layout (the encoder's own extent and stride checks, or the
/// driver's CUDA_ERROR_INVALID_VALUE for strides it cannot describe), which the cp.async kernel
/// serves; any other failure (no current context, say) is an error, not a reason to switch.
fn layout_refused(e: &GpuError) -> bool {
    match e {
        GpuError::KernelContract { .. } => true,
        GpuError::Driver { source, .. } => {
            source.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE
        }
        _ => false,
    }
}

/// ceil(n / tile) for a non-negative `n` and a positive tile (published tiles are checked ≥ 16).
pub(super) fn ceil_div(n: i64, tile: i64) -> i64 {
    (n.max(0) + tile - 1) / tile
}

/// A grid of `blocks` blocks, refused past `i32::MAX` (the kernels index blocks in int).
pub(super) fn grid_blocks(blocks: i64, what: &'static str) -> Result<u32, GpuError> {
    u32::try_from(blocks)
        .ok()
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or(GpuError::TooLarge {
            what,
            value: blocks.unsigned_abs().into(),
            limit: i32::MAX as u128,
        })
}

/// The caller's workspace pointer aligned up to [`WORKSPACE_ALIGNMENT`] (the plan's offsets are
/// from there; its size includes the slack).
pub(super) fn aligned_workspace(buffers: &BackwardBuffers) -> u64 {
    buffers.forward.workspace.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT
}

/// The offsets pre-pass (its tile list for `tiles`), then Di = rowsum(dO ∘ O), which with
/// `zero_acc` also zeroes the fused kernels' dQ accumulator and its turn counters.
///
/// # Safety
/// As [`BackwardEngine::execute`], with the stream's context current and `loaded` its module; the
/// workspace holds the plan's layout with a tile list sized for `tiles`.
pub(super) unsafe fn prepass_and_di(
    plan: &BackwardPlan,
    stream: CUstream,
    buffers: &BackwardBuffers,
    mode: ExecuteMode,
    loaded: &LoadedKernels,
    tiles: TileConfig,
    zero_acc: bool,
) -> Result<(), GpuError> {
    let f = &plan.forward;
    let w = plan.workspace;
    let base = aligned_workspace(buffers);
    let dot = loaded.config(plan.kernels.dot)?;
    let row_blocks = ceil_div(i64::from(f.s_q_max), i64::from(dot.block_m));
    let grid = grid_blocks(
        i64::from(f.batch) * row_blocks,
        "Di grid (B · ceil(S_q_max / 64))",
    )?;
    let args = prepass_args(plan, tiles, buffers, base);
    // SAFETY: the arguments mirror `ragged_fmha_prepass` (kernels/cuda-fmha/cuda/README.md); the
    // workspace holds the plan's layout (this function's contract).
    // Plain stream order: the backward has not been measured with a programmatic pre-pass.
    unsafe { launcher::launch_prepass(&loaded.module, stream, &args, false) }?;
    if mode == ExecuteMode::Validate {
        launcher::check_flag(stream, base + w.error_flag, f)?;
    }
    use KernelArg::{I32, I64, Ptr};
    let (lse_seq, lse_head) = lse_strides(plan);
    let dot_args = [
        Ptr(buffers.forward.o),
        Ptr(buffers.d_o),
        Ptr(buffers.forward.lse),
        Ptr(base + w.di),
        Ptr(base + w.batches),
        I64(f.o.seq),
        I64(f.o.head),
        I64(plan.d_o.seq),
        I64(plan.d_o.head),
        I64(lse_seq),
        I64(lse_head),
        I32(f.heads_q),
        I32(w.di_rows),
        I32(row_blocks as i32),
        Ptr(if zero_acc { base + w.dq_acc } else { 0 }),
        I32(f.batch),
    ];
    let function = loaded.module.function(plan.kernels.dot, 0)?;
    let config = LaunchConfig {
        grid: (grid, 1, 1),
        block: (dot.threads, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: mirrors RAGGED_BWD_DOT_ENTRY's parameters; O, dO and the LSE hold the plan's rows,
    // the pre-pass enqueued before it on this stream wrote the batch records it reads; Di and the
    // scaled LSE after it (B · H_q · di_rows f32 each) and the accumulator, when given, are the
    // workspace's regions of the plan's layout.
    unsafe { launch(function, config, stream, &dot_args) }
}

/// Parameters of `ragged_fmha_prepass`, in signature order, with the dQ kernel's tile.
fn prepass_args(
    plan: &BackwardPlan,
    dq: TileConfig,
    b: &BackwardBuffers,
    base: u64,
) -> [KernelArg; launcher::PREPASS_PARAMETERS] {
    let w = plan.workspace;
    let records = [w.batches, w.tiles, w.tile_count, w.error_flag];
    launcher::prepass_args_for(&plan.forward, dq, &b.forward, base, records)
}

/// The LSE's (seq, head) element strides (a backward plan always has an LSE).
fn lse_strides(plan: &BackwardPlan) -> (i64, i64) {
    plan.forward
        .lse
        .map_or((0, 0), |l| (l.seq_stride, l.head_stride))
}

/// Parameters of the dK/dV, dQ and fused kernels (RAGGED_BWD_PARAMS), in signature order.
pub(super) fn gradient_args(
    plan: &BackwardPlan,
    b: &BackwardBuffers,
    base: u64,
    kv_tiles: i32,
) -> Vec<KernelArg> {
    use KernelArg::{F32, I32, I64, Ptr};
    let f = &plan.forward;
    let w = plan.workspace;
    let (lse_seq, lse_head) = lse_strides(plan);
    vec![
        Ptr(b.forward.q),
        Ptr(b.forward.k),
        Ptr(b.forward.v),
        Ptr(b.d_o),
        Ptr(b.forward.lse),
        Ptr(base + w.di),
        Ptr(b.dq),
        Ptr(b.dk),
        Ptr(b.dv),
        Ptr(base + w.batches),
        Ptr(base + w.tiles),
        Ptr(base + w.tile_count),
        I64(f.q.seq),
        I64(f.q.head),
        I64(f.k.seq),
        I64(f.k.head),
        I64(f.v.seq),
        I64(f.v.head),
        I64(plan.d_o.seq),
        I64(plan.d_o.head),
        I64(plan.dq.seq),
        I64(plan.dq.head),
        I64(plan.dk.seq),
        I64(plan.dk.head),
        I64(plan.dv.seq),
        I64(plan.dv.head),
        I64(lse_seq),
        I64(lse_head),
        I32(w.di_rows),
        I32(f.batch),
        I32(kv_tiles),
        I32(f.heads_q),
        I32(f.heads_kv),
        F32(f.scale),
        I32(f.mask_left),
        I32(f.mask_right),
        I32(f.bottom_right),
    ]
}

/// Rejects null or misaligned pointers before anything is enqueued: a fault inside a kernel
/// would poison the caller's context for good. The forward's tensors are checked by the
/// forward's own list, then the gradients.
pub fn check_buffers(plan: &BackwardPlan, b: &BackwardBuffers) -> Result<(), GpuError> {
    let mut required = launcher::required_pointers(&plan.forward, &b.forward);
    let [do_uid, dq_uid, dk_uid, dv_uid] = plan.gradient_uids;
    required.extend([
        (b.d_o, do_uid, TensorRole::DO, 16),
        (b.dq, dq_uid, TensorRole::DQ, 16),
        (b.dk, dk_uid, TensorRole::DK, 16),
        (b.dv, dv_uid, TensorRole::DV, 16),
    ]);
    launcher::check_pointers(required, plan.workspace_bytes(), b.forward.workspace_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::DriverError;
    use cudarc::driver::sys::CUresult;

    /// A layout the encoder or the driver refuses selects the cp.async kernel; a missing context
    /// (what the fused path once hit) or an uninitialised driver is an error.
    #[test]
    fn only_a_refused_layout_falls_back_to_the_cp_async_kernel() {
        let driver = |status| GpuError::Driver {
            call: "cuTensorMapEncodeTiled",
            source: DriverError(status),
        };
        assert!(layout_refused(&GpuError::KernelContract {
            kernel: "k".to_owned(),
            detail: "tensor-map stride -1 elements".to_owned(),
        }));
        assert!(layout_refused(&driver(CUresult::CUDA_ERROR_INVALID_VALUE)));
        assert!(!layout_refused(&driver(
            CUresult::CUDA_ERROR_INVALID_CONTEXT
        )));
        assert!(!layout_refused(&driver(
            CUresult::CUDA_ERROR_NOT_INITIALIZED
        )));
    }
}
