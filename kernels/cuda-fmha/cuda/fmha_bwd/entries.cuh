// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the entry points and their tile configurations); included in that file's order, not on its own.

// Every entry point NAME has a companion `__constant__ int NAME_config[4]` = {BM, BN, threads,
// dynamic shared-memory bytes}, read by the host as for the forward. The dot pre-pass's BM is its
// row block (RAGGED_BWD_DOT_ROWS), its BN 0. The pre-pass (ragged_fmha_prepass) is launched with
// the dQ kernel's BM and BN, so its tile list is the dQ kernel's work list.

// dK/dV: K, V (BN rows), two Q and two dO buffers (BM rows), two LSE and two Di buffers (BM f32).
#define RAGGED_BWD_DKDV_SMEM(D, BM, BN) ((2 * (BN) + 4 * (BM)) * ragged_row_width(D) * 2 + 4 * (BM) * 4)
// dQ: Q, dO (BM rows), two K and two V buffers (BN rows).
#define RAGGED_BWD_DQ_SMEM(D, BM, BN) ((2 * (BM) + 4 * (BN)) * ragged_row_width(D) * 2)

#define RAGGED_BWD_DOT_ENTRY(NAME, BF16, D)                                                                  \
    extern "C" {                                                                                           \
    __constant__ int NAME##_config[4] = {RAGGED_BWD_DOT_ROWS, 0, RAGGED_BWD_DOT_THREADS, 0};               \
    __global__ void __launch_bounds__(RAGGED_BWD_DOT_THREADS)                                              \
        NAME(const u16* __restrict__ o, const u16* __restrict__ d_o, float* __restrict__ di,               \
             const RaggedBatch* __restrict__ batches, i64 o_seq, i64 o_head, i64 do_seq, i64 do_head, int h_q, \
             int di_rows, int row_blocks) {                                                                \
        bwd_dot_body<BF16, D>(o, d_o, di, batches, o_seq, o_head, do_seq, do_head, h_q, di_rows, row_blocks); \
    }                                                                                                      \
    }

#define RAGGED_BWD_DKDV_ENTRY_P(NAME, BF16, D, BM, BN, NW, MINB, PACK_P)                          \
    extern "C" {                                                                                \
    __constant__ int NAME##_config[4] = {BM, BN, NW * 32, RAGGED_BWD_DKDV_SMEM(D, BM, BN)};     \
    __global__ void __launch_bounds__(NW * 32, MINB) NAME(RAGGED_BWD_PARAMS) {                 \
        bwd_dkdv_body<BF16, D, BM, BN, NW, PACK_P>(RAGGED_BWD_ARGS);                            \
    }                                                                                           \
    }
#define RAGGED_BWD_DKDV_ENTRY(NAME, BF16, D, BM, BN, NW, MINB) \
    RAGGED_BWD_DKDV_ENTRY_P(NAME, BF16, D, BM, BN, NW, MINB, false)

#define RAGGED_BWD_DQ_ENTRY(NAME, BF16, D, BM, BN, NW, MINB)                                  \
    extern "C" {                                                                            \
    __constant__ int NAME##_config[4] = {BM, BN, NW * 32, RAGGED_BWD_DQ_SMEM(D, BM, BN)};   \
    __global__ void __launch_bounds__(NW * 32, MINB) NAME(RAGGED_BWD_PARAMS) {             \
        bwd_dq_body<BF16, D, BM, BN, NW>(RAGGED_BWD_ARGS);                                  \
    }                                                                                       \
    }

// dK/dV keeps P^T packed (PACK_P) on sm_90, where it measured 5-9 % faster end to end on the
// H200 (bench/gpu/NOTES-backward.md, round 2); on other targets ptxas spills more with it.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RAGGED_BWD_PACK_P true
#else
#define RAGGED_BWD_PACK_P false
#endif

#define RAGGED_BWD_ALL(DT, BF16)                                                                         \
    RAGGED_BWD_DOT_ENTRY(ragged_fmha_bwd_dot_##DT##_d64, BF16, 64)                                       \
    RAGGED_BWD_DOT_ENTRY(ragged_fmha_bwd_dot_##DT##_d128, BF16, 128)                                     \
    RAGGED_BWD_DKDV_ENTRY_P(ragged_fmha_bwd_dkdv_##DT##_d64, BF16, 64, 64, 64, 4, 2, RAGGED_BWD_PACK_P)   \
    RAGGED_BWD_DKDV_ENTRY_P(ragged_fmha_bwd_dkdv_##DT##_d128, BF16, 128, 64, 64, 4, 2, RAGGED_BWD_PACK_P) \
    RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_##DT##_d64, BF16, 64, 64, 64, 4, 2)          \
    RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_##DT##_d128, BF16, 128, 64, 64, 4, 2)

RAGGED_BWD_ALL(bf16, true)
RAGGED_BWD_ALL(f16, false)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Hopper wgmma dK/dV (fmha_bwd/dkdv_wg.cuh): BM 64, BN 128, two warpgroups; K, V, NBUF Q and NBUF
// dO buffers, NBUF LSE and NBUF Di buffers, and 1024 bytes to align the swizzled tiles.
#define RAGGED_BWD_DKDV_WG_SMEM(D, NBUF) \
    ((2 * 128 + 2 * (NBUF) * 64) * ragged_row_width(D) * 2 + 2 * (NBUF) * 64 * 4 + 1024)
#define RAGGED_BWD_DKDV_WG_ENTRY(NAME, BF16, D, PIPE)                                           \
    extern "C" {                                                                              \
    __constant__ int NAME##_config[4] = {64, 128, 256, RAGGED_BWD_DKDV_WG_SMEM(D, PIPE ? 3 : 2)}; \
    __global__ void __launch_bounds__(256, 1) NAME(RAGGED_BWD_PARAMS) {                      \
        bwd_dkdv_wg_body<BF16, D, PIPE>(RAGGED_BWD_ARGS);                                     \
    }                                                                                         \
    }
// Hopper wgmma dQ (fmha_bwd/dq_wg.cuh): BM = 64 NWG, Q and dO, NBUF K and NBUF V buffers of BN rows.
#define RAGGED_BWD_DQ_WG_SMEM(D, BN, NWG, NBUF) \
    ((2 * 64 * (NWG) + 2 * (NBUF) * (BN)) * ragged_row_width(D) * 2 + 1024)
#define RAGGED_BWD_DQ_WG_ENTRY(NAME, BF16, D, BN, NWG, PIPE)                                                 \
    extern "C" {                                                                                           \
    __constant__ int NAME##_config[4] = {64 * NWG, BN, 128 * NWG, RAGGED_BWD_DQ_WG_SMEM(D, BN, NWG, PIPE ? 3 : 2)}; \
    __global__ void __launch_bounds__(128 * NWG, 1) NAME(RAGGED_BWD_PARAMS) {                              \
        bwd_dq_wg_body<BF16, D, BN, NWG, PIPE>(RAGGED_BWD_ARGS);                                           \
    }                                                                                                      \
    }
// The same bodies with the TMA / mbarrier fill (NBUF buffers, NBUF - 2 ahead, NBUF full and NBUF empty
// mbarriers after the tiles) and two tensor maps after the common parameters: Q and dO (box rows
// 64) for dK/dV, K and V (box rows BN) for dQ. NAME_tma = {1} tells the host to pass them.
#define RAGGED_BWD_DKDV_TMA_ENTRY(NAME, BF16, D, NBUF) RAGGED_BWD_DKDV_TMA_ENTRY_F(NAME, BF16, D, NBUF, 0)
#define RAGGED_BWD_DKDV_TMA_ENTRY_F(NAME, BF16, D, NBUF, FUSE)                                               \
    extern "C" {                                                                                           \
    __constant__ int NAME##_config[4] = {64, 128, 256, RAGGED_BWD_DKDV_WG_SMEM(D, NBUF) + 16 * (NBUF)};     \
    __constant__ int NAME##_tma[1] = {1};                                                                  \
    __global__ void __launch_bounds__(256, 1)                                                              \
        NAME(RAGGED_BWD_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_do) { \
        bwd_dkdv_wg_body<BF16, D, true, NBUF, FUSE>(RAGGED_BWD_ARGS, &tm_q, &tm_do);                       \
    }                                                                                                      \
    }
#define RAGGED_BWD_DQ_TMA_ENTRY(NAME, BF16, D, BN, NWG, NBUF) RAGGED_BWD_DQ_TMA_ENTRY_R(NAME, BF16, D, BN, NWG, NBUF, 0)
#define RAGGED_BWD_DQ_TMA_ENTRY_R(NAME, BF16, D, BN, NWG, NBUF, RS)                                          \
    extern "C" {                                                                                           \
    __constant__ int NAME##_config[4] = {64 * NWG, BN, 128 * NWG,                                          \
                                         RAGGED_BWD_DQ_WG_SMEM(D, BN, NWG, NBUF) + 16 * (NBUF)};           \
    __constant__ int NAME##_tma[1] = {1};                                                                  \
    __global__ void __launch_bounds__(128 * NWG, 1)                                                        \
        NAME(RAGGED_BWD_PARAMS, const __grid_constant__ RaggedTmaMap tm_k, const __grid_constant__ RaggedTmaMap tm_v) { \
        bwd_dq_wg_body<BF16, D, BN, NWG, true, NBUF, RS>(RAGGED_BWD_ARGS, &tm_k, &tm_v);                   \
    }                                                                                                      \
    }
#define RAGGED_BWD_WG_ALL(DT, BF16)                                                        \
    RAGGED_BWD_DKDV_WG_ENTRY(ragged_fmha_bwd_dkdv_wg_##DT##_d64, BF16, 64, true)           \
    RAGGED_BWD_DKDV_WG_ENTRY(ragged_fmha_bwd_dkdv_wg_##DT##_d128, BF16, 128, true)         \
    RAGGED_BWD_DQ_WG_ENTRY(ragged_fmha_bwd_dq_wg_##DT##_d64, BF16, 64, 64, 2, true)        \
    RAGGED_BWD_DQ_WG_ENTRY(ragged_fmha_bwd_dq_wg_##DT##_d128, BF16, 128, 64, 2, true)         \
    RAGGED_BWD_DKDV_TMA_ENTRY(ragged_fmha_bwd_dkdv_tma_##DT##_d64, BF16, 64, 3)              \
    RAGGED_BWD_DKDV_TMA_ENTRY(ragged_fmha_bwd_dkdv_tma_##DT##_d128, BF16, 128, 3)            \
    RAGGED_BWD_DQ_TMA_ENTRY(ragged_fmha_bwd_dq_tma_##DT##_d64, BF16, 64, 64, 2, 3)           \
    RAGGED_BWD_DQ_TMA_ENTRY_R(ragged_fmha_bwd_dq_tma_##DT##_d128, BF16, 128, 64, 2, 3, 2)
RAGGED_BWD_WG_ALL(bf16, true)
RAGGED_BWD_WG_ALL(f16, false)
#ifdef RAGGED_FMHA_TUNING
// The same without the cross-step overlap (two buffers, every product waited for in its step),
// and the dQ kernel with BN 128 at D 64 (at D 128 its three K/V buffers exceed 227 KB).
RAGGED_BWD_DKDV_WG_ENTRY(ragged_fmha_bwd_dkdv_wg_bf16_d64_nopipe, true, 64, false)
RAGGED_BWD_DKDV_WG_ENTRY(ragged_fmha_bwd_dkdv_wg_bf16_d128_nopipe, true, 128, false)
RAGGED_BWD_DQ_WG_ENTRY(ragged_fmha_bwd_dq_wg_bf16_d64_nopipe, true, 64, 64, 2, false)
RAGGED_BWD_DQ_WG_ENTRY(ragged_fmha_bwd_dq_wg_bf16_d128_nopipe, true, 128, 64, 2, false)
RAGGED_BWD_DQ_WG_ENTRY(ragged_fmha_bwd_dq_wg_bf16_d64_n128, true, 64, 128, 2, true)
// The TMA fill four buffers deep (two steps ahead).
RAGGED_BWD_DKDV_TMA_ENTRY(ragged_fmha_bwd_dkdv_tma_bf16_d128_b4, true, 128, 4)
RAGGED_BWD_DKDV_TMA_ENTRY(ragged_fmha_bwd_dkdv_tma_bf16_d64_b4, true, 64, 4)
// dV and dK issued together, one wait per step (FUSE 1: running into the next step; 2: waited for).
RAGGED_BWD_DKDV_TMA_ENTRY_F(ragged_fmha_bwd_dkdv_tma_bf16_d128_fuse, true, 128, 3, 1)
RAGGED_BWD_DKDV_TMA_ENTRY_F(ragged_fmha_bwd_dkdv_tma_bf16_d64_fuse, true, 64, 3, 1)
RAGGED_BWD_DKDV_TMA_ENTRY_F(ragged_fmha_bwd_dkdv_tma_bf16_d128_fuse2, true, 128, 3, 2)
RAGGED_BWD_DKDV_TMA_ENTRY_F(ragged_fmha_bwd_dkdv_tma_bf16_d64_fuse2, true, 64, 3, 2)
// dQ at D 128 with only Q (rsq) or neither (rs0) in registers; the default holds Q and dO (RS 2).
// D 64 has no RS entry: ptxas gave the dS operand dO's registers there (NOTES-backward.md, round 1).
RAGGED_BWD_DQ_TMA_ENTRY_R(ragged_fmha_bwd_dq_tma_bf16_d128_rsq, true, 128, 64, 2, 3, 1)
RAGGED_BWD_DQ_TMA_ENTRY_R(ragged_fmha_bwd_dq_tma_bf16_d128_rs0, true, 128, 64, 2, 3, 0)
RAGGED_BWD_DQ_TMA_ENTRY(ragged_fmha_bwd_dq_tma_bf16_d128_b4, true, 128, 64, 2, 4)
RAGGED_BWD_DQ_TMA_ENTRY(ragged_fmha_bwd_dq_tma_bf16_d64_b4, true, 64, 64, 2, 4)
#endif
#endif

#ifdef RAGGED_FMHA_TUNING
// Alternative tile shapes, compiled only for the device harness's timing sweep.
RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_bf16_d128_m64n128w8, true, 128, 64, 128, 8, 1)
RAGGED_BWD_DKDV_ENTRY_P(ragged_fmha_bwd_dkdv_bf16_d128_plain, true, 128, 64, 64, 4, 2, false)
RAGGED_BWD_DKDV_ENTRY_P(ragged_fmha_bwd_dkdv_bf16_d64_plain, true, 64, 64, 64, 4, 2, false)
RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_bf16_d128_m32n64w4, true, 128, 32, 64, 4, 2)
RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_bf16_d64_m64n128w8, true, 64, 64, 128, 8, 1)
RAGGED_BWD_DKDV_ENTRY(ragged_fmha_bwd_dkdv_bf16_d64_m128n64w4, true, 64, 128, 64, 4, 2)
RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_bf16_d128_m128n64w8, true, 128, 128, 64, 8, 1)
RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_bf16_d128_m64n32w4, true, 128, 64, 32, 4, 2)
RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_bf16_d64_m128n64w8, true, 64, 128, 64, 8, 1)
RAGGED_BWD_DQ_ENTRY(ragged_fmha_bwd_dq_bf16_d64_m64n128w4, true, 64, 64, 128, 4, 2)
#endif
