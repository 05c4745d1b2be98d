// Ragged (varlen) fused multi-head attention, backward pass (dQ, dK, dV), for NVIDIA sm_80+.
//
// Compiled at run time by NVRTC (`-arch=sm_90a -std=c++17` on the H200, `-arch=sm_80` elsewhere).
// Like the forward, no system or CUDA header is used; the mma.sync m16n8k16 kernels run on every
// sm_80+ device, and on sm_90a wgmma kernels for dK/dV and dQ exist beside them at head dims 64 and
// 128 (fmha_bwd/README.md). bf16 and fp16 inputs, f32 accumulation, head dims 64, 96, 128 and 256
// (Q/K and V/O the same) and Q/K 192 with V/O 128: the forward's.
//
// Semantics: kernels/reference/src/sdpa_backward/README.md §2 (P recomputed from Q, K and the forward's LSE;
// Di = rowsum(dO * O); dS = P * (dP - Di); dQ = scale dS K; dK = scale dS^T Q; dV = P^T dO; GQA
// groups summed; padding rows never read or written; Lkv = 0 gives dQ = 0, Lq = 0 gives dK = dV = 0;
// a row with no admitted key contributes nothing).
//
// Launch sequence per execute (one stream, no host synchronisation):
//   1. ragged_fmha_prepass <<<1, 1024>>>  the forward's pre-pass (offsets and seq_lens read on the
//      device -> RaggedBatch[B]; query-tile list for the dQ kernel, longest first; error flag)
//   2. ragged_fmha_bwd_dot_<dt>_d<D> <<<B * ceil(S_q_max / 64), 256>>>   Di in f32 workspace
//   3. ragged_fmha_bwd_dkdv_<dt>_d<D> <<<B * ceil(S_kv_max / BN) * H_kv, ...>>>   dK, dV
//   4. ragged_fmha_bwd_dq_<dt>_d<D>   <<<B * ceil(S_q_max / BM) * H_q, ...>>>    dQ
// 3 and 4 are independent of each other, each output row has one writer (no atomics). Their tile
// shapes are in NAME_config like the forward's. On sm_90a at every head dim both engines replace
// 3 and 4 by a fused dK/dV/dQ kernel (dQ added into an f32 workspace accumulator zeroed by 2: the
// deterministic engine's in a fixed order per block of rows, the other's in any order) and the
// dQ convert pass (fmha_bwd/fused_ws.cuh, fmha_bwd/fused_wide.cuh, fmha_bwd/dq_order.cuh,
// fmha_bwd/fused_dq.cuh, fmha_bwd/README.md).
//
// This file is the table of contents; the forward's common records, pre-pass and warp-level PTX
// helpers are shared, the backward's own parts live in fmha_bwd/ (kernels/cuda-fmha/build.rs splices them).

#include "fmha/common.cuh"
#include "fmha/mask.cuh"
#include "fmha/prepass.cuh"
#include "fmha/warp_ops.cuh"
#include "fmha/block.cuh"
#include "fmha/wgmma_ops.cuh"
#include "fmha/async_ops.cuh"
#include "fmha_bwd/common.cuh"
#include "fmha_bwd/tile_ops.cuh"
#include "fmha_bwd/fused_dq.cuh"
#include "fmha_bwd/dot.cuh"
#include "fmha_bwd/dq_convert.cuh"
#include "fmha_bwd/dkdv.cuh"
#include "fmha_bwd/dq.cuh"
#include "fmha_bwd/tma_fill.cuh"
#include "fmha_bwd/dq_order.cuh"
#include "fmha_bwd/fused_ws.cuh"
#include "fmha_bwd/fused_wide.cuh"
#include "fmha_bwd/dkdv_wg.cuh"
#include "fmha_bwd/dq_wg.cuh"
#include "fmha_bwd/entries.cuh"
