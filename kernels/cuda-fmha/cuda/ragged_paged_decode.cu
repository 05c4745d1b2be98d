// Paged K/V attention with attention sinks (split-KV decode), for NVIDIA sm_80+ (sm_90a included),
// and the page gather of the prefill route.
//
// Compiled at run time by NVRTC like the forward (`-arch=sm_90a -std=c++17` on H100/H200,
// `-arch=sm_XY` elsewhere), no system or CUDA header. Semantics: kernels/core/paged-kv-and-sinks.md
// (page pools addressed through page tables, packed or padded queries, top-left / bottom-right
// band masks, §5.3 invalid input on GPU engines, §6 sinks) on top of shared/spec/ragged-sdpa.md.
//
// Launch sequence per execute (one stream, no host synchronisation, no atomics: deterministic):
//   1. ragged_paged_split_<dt>_d<D> <<<splits * H_kv * B, 128, smem>>>
//        block (split s, KV head g, sequence b): the rows G x Lq(b) of GQA group g (G = H_q / H_kv),
//        keys [s * chunk, (s + 1) * chunk) of the sequence walked page by page; with splits == 1 it
//        writes O and the LSE itself (sinks folded in), otherwise partial O (f32) and partial LSE to
//        the workspace and, from block (0, 0, b), the sequence's record.
//   2. ragged_paged_combine_<dt>_d<D> <<<(ws_rows, ceil(H_q / 4)), 128>>>   only when splits > 1:
//        merges the splits of each (row, head) in split order, folds the sink in, writes O and LSE.
// A prefill takes the gathered route instead (decode/gather.cuh, chosen at plan time):
//   1. ragged_paged_gather_starts <<<1, 128>>>: row and key starts, clamped lengths;
//   2. ragged_paged_gather <<<(ceil(max_seq_len_kv / 64), B), 128>>>: the pages each sequence
//        reads, copied into contiguous K and V in the workspace;
//   3. the ragged forward (ragged_fmha_fwd.cu, its own module) over Q, the gathered K and V and O;
//   4. ragged_paged_gather_finish <<<ceil(ws_rows / 16), 128>>>: sinks folded into O and the LSE,
//        NaN rows for sequences with an invalid page id.
// The ABI (parameters, workspace layout) is in decode/README.md; the host's copy of it is
// kernels/cuda-fmha/src/paged/.
//
// This file is the table of contents; kernels/cuda-fmha/build.rs splices the parts into one source.

#include "fmha/common.cuh"
#include "fmha/mask.cuh"
#include "fmha/warp_ops.cuh"
#include "fmha/block.cuh"
#include "decode/common.cuh"
#include "decode/split.cuh"
#include "decode/combine.cuh"
#include "decode/gather.cuh"
#include "decode/entries.cuh"
