//! Enqueues the fused backward on sm_90a: the offsets pre-pass, Di (which also zeroes the f32 dQ
//! accumulator and its turn counters), a fused dK/dV/dQ kernel and the dQ convert pass, four
//! launches and no host synchronisation (unless validating).
//!
//! The fused kernel's blocks (one per key tile of 128 keys, 64 at D 256, KV head and batch) add each step's
//! dQ contribution into the accumulator blob of its (query head, 64-row query block) with a bulk
//! asynchronous reduction: the ordered kernel (the deterministic engine's) in a fixed order of key
//! tiles, so dQ has the same bits on every call; the others in whatever order they get there (f32
//! addition is not associative: dQ may differ in its last bits from call to call). dK and dV have
//! one writer per row.

use cudarc::driver::sys::CUstream;

use super::fused_abi::FUSED_BLOCK_M;
use super::launcher::{
    BackwardBuffers, aligned_workspace, ceil_div, gradient_args, grid_blocks, prepass_and_di,
};
use super::plan::BackwardPlan;
use crate::forward::ExecuteMode;
use crate::forward::launcher;
use crate::forward::loading::LoadedKernels;
use ragged_gpu_runtime::cuda::error::GpuError;
use ragged_gpu_runtime::cuda::module::{KernelArg, LaunchConfig, launch};

/// The fused form of [`super::BackwardEngine::execute`]: `kernel` (one of a set's
/// [`FusedKernels`](super::fused_abi::FusedKernels)) with the tensor maps it takes, then `convert`.
///
/// # Safety
/// As [`super::BackwardEngine::execute`], with the stream's context current; `loaded` is its
/// module, compiled for sm_90a, and `maps` are the maps `kernel` takes over `buffers`.
pub(super) unsafe fn execute(
    plan: &BackwardPlan,
    stream: CUstream,
    buffers: &BackwardBuffers,
    mode: ExecuteMode,
    loaded: &LoadedKernels,
    (kernel, maps): (&'static str, Option<Vec<KernelArg>>),
    convert_kernel: &'static str,
) -> Result<(), GpuError> {
    let w = plan.workspace;
    let tiles = loaded.config(kernel)?;
    let convert = loaded.config(convert_kernel)?;
    let f = &plan.forward;
    let kv_tiles = ceil_div(i64::from(f.s_kv_max), i64::from(tiles.block_n));
    let row_blocks = ceil_div(i64::from(f.s_q_max), FUSED_BLOCK_M);
    let fused_grid = grid_blocks(
        i64::from(f.batch) * kv_tiles * i64::from(f.heads_kv),
        "fused dK/dV/dQ grid (B · ceil(S_kv_max / BN) · H_kv)",
    )?;
    let convert_grid = grid_blocks(
        i64::from(f.batch) * row_blocks,
        "dQ convert grid (B · ceil(S_q_max / 64))",
    )?;
    if mode == ExecuteMode::Validate {
        launcher::refuse_capture(stream)?;
    }
    let base = aligned_workspace(buffers);
    // SAFETY: the workspace holds the plan's layout, its tile list sized for any BM ≥ 64 and its
    // accumulator with the turn counters; the caller guarantees the rest. The context is current.
    unsafe { prepass_and_di(plan, stream, buffers, mode, loaded, tiles, true) }?;

    let mut args = gradient_args(plan, buffers, base, kv_tiles as i32);
    args.extend(maps.into_iter().flatten());
    args.push(KernelArg::Ptr(base + w.dq_acc));
    let function = loaded.module.function(kernel, tiles.shared_mem_bytes)?;
    let config = LaunchConfig {
        grid: (fused_grid, 1, 1),
        block: (tiles.threads, 1, 1),
        shared_mem_bytes: tiles.shared_mem_bytes,
    };
    // SAFETY: mirrors RAGGED_BWD_FUSED_{WG,WS}_ENTRY (RAGGED_BWD_PARAMS, a TMA kernel's three
    // maps over the plan's buffers and workspace, the accumulator); the pre-pass and Di pass
    // enqueued before on the same stream filled the records and zeroed every blob a block of this
    // grid adds into (one per head and 64-row query block below Lq of each batch) and its turn
    // counter; block and shared memory are the entry point's published values; the caller
    // guarantees the buffers.
    unsafe { launch(function, config, stream, &args) }?;
    if mode == ExecuteMode::Validate {
        // The ordered kernel flags a dQ turn it took out of order (fmha_bwd/fused_ws.cuh).
        launcher::check_flag(stream, base + w.error_flag, f)?;
    }

    use KernelArg::{F32, I32, I64, Ptr};
    let convert_args = [
        Ptr(base + w.dq_acc),
        Ptr(buffers.dq),
        Ptr(base + w.batches),
        I64(plan.dq.seq),
        I64(plan.dq.head),
        I32(f.heads_q),
        I32(f.batch),
        I32(row_blocks as i32),
        F32(f.scale),
    ];
    let function = loaded.module.function(convert_kernel, 0)?;
    let config = LaunchConfig {
        grid: (convert_grid, 1, 1),
        block: (convert.threads, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: mirrors RAGGED_BWD_DQ_CONVERT_ENTRY; the fused kernel enqueued before on the same
    // stream completed every blob it reads; dQ holds the plan's rows (the caller's contract).
    unsafe { launch(function, config, stream, &convert_args) }
}
