// Ragged (varlen) fused multi-head attention, forward pass, for NVIDIA sm_80+ (tuned on sm_90 / H200).
//
// Compiled at run time by NVRTC (verified with NVRTC 13.0, `-arch=sm_90a -std=c++17`). No system
// or CUDA header is used: every half-precision operation is inline PTX on raw 16-bit storage. With sm_90a the public entry points use warpgroup MMA (wgmma); with any
// other sm_80+ target they fall back to the mma.sync path, which is always compiled as *_sm80_*.
//
// Semantics: shared/spec/ragged-sdpa.md §1–§5 (hipDNN packed BSHD ragged layout, seq_lens padding,
// GQA, band masks with TOP_LEFT / BOTTOM_RIGHT alignment, LSE, empty key sets give O = 0 and
// LSE = -inf, padding rows never written, K/V rows >= Lkv(b) never read).
//
// Launch sequence per execute (one stream, no host synchronisation):
//   1. ragged_fmha_prepass   <<<1, 1024>>>            offsets -> RaggedBatch[B], tile list, error flag
//   2. ragged_fmha_fwd_<dt>_d<D> <<<B * ceil(S_q_max / BM) * H_q, threads, smem>>>  (NAME_config)
//      for D in {64, 96, 128, 256}, and ragged_fmha_fwd_<dt>_d192v128 (Q/K head dim 192, V/O 128)
// On sm_90 and later launch 2 may be programmatic (fmha/common.cuh, ragged_grid_dependency_wait).
// The TMA entry points (the persistent sm_90 kernel) also take the pre-pass's parameters and a
// nonce: with a nonzero nonce the host skips launch 1 and every block of launch 2 builds the same
// list itself (fmha/fused_list.cuh).
// The forward grid is an upper bound computed from graph dims only; blocks whose rank is beyond the
// tile count written by the pre-pass exit at once. The pre-pass orders tiles by decreasing number
// of key blocks so that the longest work starts first (LPT scheduling over a ragged batch).
// The ABI (parameter order, RaggedBatch layout, tile sizes) is documented in kernels/cuda-fmha/cuda/README.md.
//
// This file is the kernel's table of contents: its parts live in fmha/ and are pulled in, in this
// order, by the #include lines below (README.md says what each holds). nvcc and
// NVRTC with `-I kernels/cuda-fmha/cuda` read them as includes; the Rust build
// (kernels/cuda-fmha/build.rs) splices them into one source, because the plugin hands NVRTC a single
// string and ships no files.

// The forward's pre-pass also zeroes the work counter (tile_count[2]) from which the persistent
// Hopper kernel draws its items (fmha/tile_scheduler.cuh); the backward's pre-pass leaves that word
// alone.
#define RAGGED_PREPASS_WORK_COUNTER 1

// Shared by every kernel: types, records, the mask band, the pre-pass and warp-level PTX.
#include "fmha/common.cuh"
#include "fmha/mask.cuh"
#include "fmha/prepass.cuh"
#include "fmha/fused_list.cuh"
#include "fmha/warp_ops.cuh"
#include "fmha/block.cuh"
// The portable kernel (mma.sync), every sm_80+ target.
#include "fmha/kernel_sm80.cuh"
// The persistent warp-specialized Hopper kernel (sm_90a only).
#include "fmha/wgmma_ops.cuh"
#include "fmha/async_ops.cuh"
#include "fmha/softmax.cuh"
#include "fmha/tile_scheduler.cuh"
#include "fmha/mainloop_sm90.cuh"
#include "fmha/epilogue_sm90.cuh"
#include "fmha/fp8_sm90.cuh"
#include "fmha/config_sm90.cuh"
#include "fmha/kernel_sm90.cuh"
// The FP8 forward's transposition of V and amax reduction (sm_90a only).
#include "fmha/fp8_vt.cuh"
// The entry points: the instantiation list.
#include "fmha/entries.cuh"
