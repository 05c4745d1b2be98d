// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the entry points and their tile configurations); included in that file's order, not on its own.

// Every entry point NAME has a companion `__constant__ int NAME_config[4]` = {BM, BN, threads,
// dynamic shared-memory bytes}, read by the host as for the forward. The dot pre-pass's BM is its
// row block (RAGGED_BWD_DOT_ROWS), its BN 0. The pre-pass (ragged_fmha_prepass) is launched with
// the dQ kernel's BM and BN, so its tile list is the dQ kernel's work list.

// dK/dV: K, V (BN rows), two Q and two dO buffers (BM rows), two LSE and two Di buffers (BM f32);
// Q and K rows at the padded width of DQK, V and dO rows at that of DV.
#define RAGGED_BWD_DKDV_SMEM(DQK, DV, BM, BN) \
    (((BN) + 2 * (BM)) * (ragged_row_width(DQK) + ragged_row_width(DV)) * 2 + 4 * (BM) * 4)
// dQ: Q, dO (BM rows), two K and two V buffers (BN rows).
#define RAGGED_BWD_DQ_SMEM(DQK, DV, BM, BN) (((BM) + 2 * (BN)) * (ragged_row_width(DQK) + ragged_row_width(DV)) * 2)

#define RAGGED_BWD_DOT_ENTRY(NAME, BF16, D, DQ)                                                              \
    extern "C" {                                                                                           \
    __constant__ int NAME##_config[4] = {RAGGED_BWD_DOT_ROWS, 0, RAGGED_BWD_DOT_THREADS, 0};               \
    __global__ void __launch_bounds__(RAGGED_BWD_DOT_THREADS)                                              \
        NAME(const u16* __restrict__ o, const u16* __restrict__ d_o, const float* __restrict__ lse,         \
             float* __restrict__ di, const RaggedBatch* __restrict__ batches, i64 o_seq, i64 o_head,       \
             i64 do_seq, i64 do_head, i64 lse_seq, i64 lse_head, int h_q, int di_rows, int row_blocks,     \
             float* __restrict__ dq_acc, int batch) {                                                      \
        bwd_dot_body<BF16, D, DQ>(o, d_o, lse, di, batches, o_seq, o_head, do_seq, do_head, lse_seq, lse_head, h_q, \
                              di_rows, row_blocks, dq_acc, batch);                                         \
    }                                                                                                      \
    }

// The fused backward's dQ convert pass (fmha_bwd/dq_convert.cuh): the Di pass's grid and block;
// instantiated on sm_90a only, beside the fused kernels it follows.
#define RAGGED_BWD_DQ_CONVERT_ENTRY(NAME, BF16, D)                                                              \
    extern "C" {                                                                                              \
    __constant__ int NAME##_config[4] = {RAGGED_BWD_FUSED_ROWS, 0, RAGGED_BWD_DOT_THREADS, 0};                \
    __global__ void __launch_bounds__(RAGGED_BWD_DOT_THREADS)                                                 \
        NAME(const float* __restrict__ dq_acc, u16* __restrict__ dq, const RaggedBatch* __restrict__ batches, \
             i64 dq_seq, i64 dq_head, int h_q, int batch, int row_blocks, float scale) {                      \
        bwd_dq_convert_body<BF16, D>(dq_acc, dq, batches, dq_seq, dq_head, h_q, batch, row_blocks, scale);    \
    }                                                                                                         \
    }

// The mma.sync kernels (dkdv.cuh, dq.cuh) for Q/K head dim DQK and V/O head dim DV: BM x BN tiles,
// NW warps (dK/dV: BN / 16 warps, or twice that with each 16 key rows' dK and dV columns split
// between two), MINB blocks per SM.
#define RAGGED_BWD_DKDV_ENTRY(NAME, BF16, DQK, DV, BM, BN, NW, MINB, PACK_P)                         \
    extern "C" {                                                                                   \
    __constant__ int NAME##_config[4] = {BM, BN, NW * 32, RAGGED_BWD_DKDV_SMEM(DQK, DV, BM, BN)};  \
    __global__ void __launch_bounds__(NW * 32, MINB) NAME(RAGGED_BWD_PARAMS) {                    \
        bwd_dkdv_body<BF16, DQK, DV, BM, BN, NW, PACK_P>(RAGGED_BWD_ARGS);                         \
    }                                                                                              \
    }

#define RAGGED_BWD_DQ_ENTRY(NAME, BF16, DQK, DV, BM, BN, NW, MINB)                               \
    extern "C" {                                                                               \
    __constant__ int NAME##_config[4] = {BM, BN, NW * 32, RAGGED_BWD_DQ_SMEM(DQK, DV, BM, BN)}; \
    __global__ void __launch_bounds__(NW * 32, MINB) NAME(RAGGED_BWD_PARAMS) {                \
        bwd_dq_body<BF16, DQK, DV, BM, BN, NW>(RAGGED_BWD_ARGS);                               \
    }                                                                                          \
    }

// dK/dV at D 64 and 128 keeps P^T packed (PACK_P) on sm_90, where it is faster; on other targets
// ptxas spills more with it.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RAGGED_BWD_PACK_P true
#else
#define RAGGED_BWD_PACK_P false
#endif

// D 64, 128 and 96 (rows padded to 128 columns in shared memory): one warp per 16 rows. D 256 and
// Q/K 192 with V/O 128: dK/dV with two warps per 16 key rows (each with half of the columns) and
// BM 32, so the accumulators and the score tiles fit a thread's registers; their dQ kernels take
// smaller key tiles (BN 16 at D 256, 32 at 192/128) for the same reason, one block per SM. These
// three dK/dV kernels keep P^T unpacked on every target: with PACK_P ptxas spilled 80-170 bytes on
// sm_90a (NVRTC 12.9), without it 0-16. The Di pass of 192/128 sums over V/O's 128 columns and
// zeroes dQ's blobs at Q's 192 (RAGGED_BWD_DOT_ENTRY's D, then DQ).
#define RAGGED_BWD_ALL(DT, BF16)                                                                               \
    RAGGED_BWD_DOT_ENTRY(ragged_fmha_bwd_dot_##DT##_d64, BF16, 64, 64)                                         \
    RAGGED_BWD_DOT_ENTRY(ragged_fmha_bwd_dot_##DT##_d128, BF16, 128, 128)                                      \
    RAGGED_BWD_DOT_ENTRY(ragged_fmha_bwd_dot_##DT##_d96, BF16, 96, 96)                                         \
    RAGGED_BWD_DOT_ENTRY(ragged_fmha_bwd_dot_##DT##_d256, BF16, 256, 256)                                      \
    RAGGED_BWD_DOT_ENTRY(ragged_fmha_bwd_dot_##DT##_d192v128, BF16, 128, 192)                                  \
    RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_##DT##_d64, BF16, 64, 64, 64, 64, 4, 2, RAGGED_BWD_PACK_P)     \
    RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_##DT##_d128, BF16, 128, 128, 64, 64, 4, 2, RAGGED_BWD_PACK_P)  \
    RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_##DT##_d96, BF16, 96, 96, 64, 64, 4, 2, false)                 \
    RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_##DT##_d256, BF16, 256, 256, 32, 64, 8, 1, false)              \
    RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_##DT##_d192v128, BF16, 192, 128, 32, 64, 8, 1, false)          \
    RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_##DT##_d64, BF16, 64, 64, 64, 64, 4, 2)                             \
    RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_##DT##_d128, BF16, 128, 128, 64, 64, 4, 2)                          \
    RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_##DT##_d96, BF16, 96, 96, 64, 64, 4, 2)                             \
    RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_##DT##_d256, BF16, 256, 256, 64, 16, 4, 1)                          \
    RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_##DT##_d192v128, BF16, 192, 128, 64, 32, 4, 1)

RAGGED_BWD_ALL(bf16, true)
RAGGED_BWD_ALL(f16, false)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Hopper wgmma dK/dV (fmha_bwd/dkdv_wg.cuh): BM query rows per step (64; the TMA kernel at D 64
// also 128), BN 128, two warpgroups; K, V, three Q and three dO buffers, three LSE and three Di
// buffers, and 1024 bytes to align the swizzled tiles. TMA: the TMA / mbarrier fill (three full and
// three empty mbarriers after the tiles) and two tensor maps after the common parameters, Q and dO
// (box rows BM); NAME_tma = {1} tells the host to pass them. D 64, BM 128: 132 KiB.
#define RAGGED_BWD_DKDV_WG_SMEM(D, BM) \
    ((2 * 128 + 2 * 3 * (BM)) * ragged_row_width(D) * 2 + 2 * 3 * (BM) * 4 + 1024)
#define RAGGED_BWD_DKDV_WG_ENTRY(NAME, BF16, D)                                           \
    extern "C" {                                                                        \
    __constant__ int NAME##_config[4] = {64, 128, 256, RAGGED_BWD_DKDV_WG_SMEM(D, 64)}; \
    __global__ void __launch_bounds__(256, 1) NAME(RAGGED_BWD_PARAMS) {                \
        bwd_dkdv_wg_body<BF16, D, false>(RAGGED_BWD_ARGS);                              \
    }                                                                                   \
    }
#define RAGGED_BWD_DKDV_TMA_ENTRY(NAME, BF16, D, BM)                                                               \
    extern "C" {                                                                                                 \
    __constant__ int NAME##_config[4] = {BM, 128, 256, RAGGED_BWD_DKDV_WG_SMEM(D, BM) + 16 * 3};                 \
    __constant__ int NAME##_tma[1] = {1};                                                                        \
    __global__ void __launch_bounds__(256, 1)                                                                    \
        NAME(RAGGED_BWD_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_do, \
             const __grid_constant__ RaggedTmaMap tm_stats) {                                                    \
        bwd_dkdv_wg_body<BF16, D, true, false, BM>(RAGGED_BWD_ARGS, &tm_q, &tm_do, &tm_stats);                   \
    }                                                                                                            \
    }
// Hopper wgmma dQ (fmha_bwd/dq_wg.cuh): BM = 64 NWG, Q and dO, three K and three V buffers of BN rows.
// TMA: as for dK/dV, with the maps of K and V (box rows BN); RS: Q and dO held in registers.
#define RAGGED_BWD_DQ_WG_SMEM(D, BN, NWG) ((2 * 64 * (NWG) + 2 * 3 * (BN)) * ragged_row_width(D) * 2 + 1024)
#define RAGGED_BWD_DQ_WG_ENTRY(NAME, BF16, D, BN, NWG)                                                \
    extern "C" {                                                                                    \
    __constant__ int NAME##_config[4] = {64 * NWG, BN, 128 * NWG, RAGGED_BWD_DQ_WG_SMEM(D, BN, NWG)}; \
    __global__ void __launch_bounds__(128 * NWG, 1) NAME(RAGGED_BWD_PARAMS) {                       \
        bwd_dq_wg_body<BF16, D, BN, NWG, false>(RAGGED_BWD_ARGS);                                   \
    }                                                                                               \
    }
#define RAGGED_BWD_DQ_TMA_ENTRY(NAME, BF16, D, BN, NWG, RS)                                                        \
    extern "C" {                                                                                                 \
    __constant__ int NAME##_config[4] = {64 * NWG, BN, 128 * NWG, RAGGED_BWD_DQ_WG_SMEM(D, BN, NWG) + 16 * 3};   \
    __constant__ int NAME##_tma[1] = {1};                                                                        \
    __global__ void __launch_bounds__(128 * NWG, 1)                                                              \
        NAME(RAGGED_BWD_PARAMS, const __grid_constant__ RaggedTmaMap tm_k, const __grid_constant__ RaggedTmaMap tm_v) { \
        bwd_dq_wg_body<BF16, D, BN, NWG, true, RS>(RAGGED_BWD_ARGS, &tm_k, &tm_v);                               \
    }                                                                                                            \
    }
// At D 64 the dQ kernel keeps Q and dO in shared memory: with them in registers ptxas gave the dS
// operand dO's registers.
#define RAGGED_BWD_WG_ALL(DT, BF16)                                              \
    RAGGED_BWD_DKDV_WG_ENTRY(ragged_fmha_bwd_dkdv_wg_##DT##_d64, BF16, 64)       \
    RAGGED_BWD_DKDV_WG_ENTRY(ragged_fmha_bwd_dkdv_wg_##DT##_d128, BF16, 128)     \
    RAGGED_BWD_DQ_WG_ENTRY(ragged_fmha_bwd_dq_wg_##DT##_d64, BF16, 64, 64, 2)    \
    RAGGED_BWD_DQ_WG_ENTRY(ragged_fmha_bwd_dq_wg_##DT##_d128, BF16, 128, 64, 2)  \
    RAGGED_BWD_DKDV_TMA_ENTRY(ragged_fmha_bwd_dkdv_tma_##DT##_d64, BF16, 64, 64)        \
    RAGGED_BWD_DKDV_TMA_ENTRY(ragged_fmha_bwd_dkdv_tma_bm128_##DT##_d64, BF16, 64, 128) \
    RAGGED_BWD_DKDV_TMA_ENTRY(ragged_fmha_bwd_dkdv_tma_##DT##_d128, BF16, 128, 64)      \
    RAGGED_BWD_DQ_TMA_ENTRY(ragged_fmha_bwd_dq_tma_##DT##_d64, BF16, 64, 64, 2, false) \
    RAGGED_BWD_DQ_TMA_ENTRY(ragged_fmha_bwd_dq_tma_##DT##_d128, BF16, 128, 64, 2, true)
RAGGED_BWD_WG_ALL(bf16, true)
RAGGED_BWD_WG_ALL(f16, false)

// Fused dK/dV/dQ on two warpgroups (bwd_dkdv_wg_body with FUSE_DQ, cp.async fills): the
// non-deterministic engine's kernel for a layout tensor maps cannot describe. The dK/dV kernel's
// tiles and mbarriers, then 1024 bytes of alignment, the dS^T tile (128 x 64 16-bit) and the step's
// dQ (8192 f32); after RAGGED_BWD_PARAMS the f32 dQ accumulator. Its `dq` parameter is unused: the
// convert pass writes dQ.
#define RAGGED_BWD_FUSED_SMEM(D) \
    (RAGGED_BWD_DKDV_WG_SMEM(D, 64) + 16 * 3 + 1024 + 128 * RAGGED_BWD_FUSED_ROWS * 2 + RAGGED_BWD_FUSED_BLOB * 4)
#define RAGGED_BWD_FUSED_WG_ENTRY(NAME, BF16, D)                                                         \
    extern "C" {                                                                                       \
    __constant__ int NAME##_config[4] = {RAGGED_BWD_FUSED_ROWS, 128, 256, RAGGED_BWD_FUSED_SMEM(D)};   \
    __global__ void __launch_bounds__(256, 1) NAME(RAGGED_BWD_PARAMS, float* __restrict__ dq_acc) {   \
        bwd_dkdv_wg_body<BF16, D, false, true>(RAGGED_BWD_ARGS, nullptr, nullptr, nullptr, dq_acc);          \
    }                                                                                                  \
    }
#define RAGGED_BWD_FUSED_ALL(DT, BF16)                                          \
    RAGGED_BWD_FUSED_WG_ENTRY(ragged_fmha_bwd_fused_wg_##DT##_d64, BF16, 64)    \
    RAGGED_BWD_FUSED_WG_ENTRY(ragged_fmha_bwd_fused_wg_##DT##_d128, BF16, 128)
RAGGED_BWD_FUSED_ALL(bf16, true)
RAGGED_BWD_FUSED_ALL(f16, false)

// The warp-specialized fused backward: a loader warp, two dQ-writer warps, two consumer
// warpgroups; tiles and shared memory from the configuration TRAITS (a type), the body
// BODY<BF16, TRAITS, ORDERED>: fmha_bwd/fused_ws.cuh (BwdWsTraits<D>; D 96 and 128: 231 456 bytes,
// D 64: 165 920) and, with the columns split between the consumers, fmha_bwd/fused_wide.cuh
// (BwdWideD256: 231 496 bytes; BwdWideD192V128: 190 536; BN 64). After RAGGED_BWD_PARAMS the maps
// of Q and dO (box rows 64) and tm_stats, then the f32 dQ accumulator (its turn counters after the
// blobs). `_fused_ws_`: unordered (the non-deterministic engine); `_ordered_`: each blob's
// contributions in a fixed order.
#define RAGGED_BWD_FUSED_WS_ENTRY(NAME, BF16, ORDERED, TRAITS, BODY)                                               \
    extern "C" {                                                                                                 \
    __constant__ int NAME##_config[4] = {TRAITS::BM, TRAITS::BN, RAGGED_BWD_WS_THREADS, TRAITS::SMEM};           \
    __constant__ int NAME##_tma[1] = {1};                                                                        \
    __global__ void __launch_bounds__(RAGGED_BWD_WS_THREADS, 1)                                                  \
        NAME(RAGGED_BWD_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_do, \
             const __grid_constant__ RaggedTmaMap tm_stats, float* __restrict__ dq_acc) {                        \
        BODY<BF16, TRAITS, ORDERED>(RAGGED_BWD_ARGS, &tm_q, &tm_do, &tm_stats, dq_acc);                          \
    }                                                                                                            \
    }
#define RAGGED_BWD_FUSED_WS_ALL(DT, BF16)                                                                              \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_fused_ws_##DT##_d64, BF16, false, BwdWsTraits<64>, bwd_fused_ws_body)     \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_fused_ws_##DT##_d128, BF16, false, BwdWsTraits<128>, bwd_fused_ws_body)   \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_ordered_##DT##_d64, BF16, true, BwdWsTraits<64>, bwd_fused_ws_body)       \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_ordered_##DT##_d128, BF16, true, BwdWsTraits<128>, bwd_fused_ws_body)     \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_fused_ws_##DT##_d96, BF16, false, BwdWsTraits<96>, bwd_fused_ws_body)     \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_ordered_##DT##_d96, BF16, true, BwdWsTraits<96>, bwd_fused_ws_body)       \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_fused_ws_##DT##_d256, BF16, false, BwdWideD256, bwd_fused_wide_body)      \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_ordered_##DT##_d256, BF16, true, BwdWideD256, bwd_fused_wide_body)        \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_fused_ws_##DT##_d192v128, BF16, false, BwdWideD192V128, bwd_fused_wide_body) \
    RAGGED_BWD_FUSED_WS_ENTRY(ragged_fmha_bwd_ordered_##DT##_d192v128, BF16, true, BwdWideD192V128, bwd_fused_wide_body)
RAGGED_BWD_FUSED_WS_ALL(bf16, true)
RAGGED_BWD_FUSED_WS_ALL(f16, false)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_bf16_d64, true, 64)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_f16_d64, false, 64)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_bf16_d128, true, 128)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_f16_d128, false, 128)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_bf16_d96, true, 96)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_f16_d96, false, 96)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_bf16_d256, true, 256)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_f16_d256, false, 256)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_bf16_d192v128, true, 192)
RAGGED_BWD_DQ_CONVERT_ENTRY(ragged_fmha_bwd_dq_convert_f16_d192v128, false, 192)
#endif
