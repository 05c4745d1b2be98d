// Part of kernels/cuda/ragged_fmha_fwd.cu (the entry points and their tile configurations); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Entry points. Each `NAME` has a companion constant `NAME_config` = {BM, BN, threads per block,
// dynamic shared-memory bytes} that the host reads with cuModuleGetGlobal to size the pre-pass
// (block_m, block_n), the grid (B * ceil(S_q_max / BM) * H_q), the block and the shared memory.
// ---------------------------------------------------------------------------------------------

// Shared memory of a block: Q (BM rows), two K and two V buffers (BN rows each), at the padded
// row widths of ragged_row_width.
#define RAGGED_FMHA_SMEM(DQK, DV, BM, BN) \
    ((BM + 2 * (BN)) * ragged_row_width(DQK) * 2 + 2 * (BN) * ragged_row_width(DV) * 2)

#define RAGGED_FMHA_SM80_ENTRY(NAME, BF16, DQK, DV, BM, BN, NW, MINB)                    \
    extern "C" {                                                                       \
    __constant__ int NAME##_config[4] = {BM, BN, NW * 32, RAGGED_FMHA_SMEM(DQK, DV, BM, BN)}; \
    __constant__ int NAME##_tma[1] = {0};                                              \
    __global__ void __launch_bounds__(NW * 32, MINB) NAME(RAGGED_FMHA_PARAMS) {        \
        fmha_fwd_body<BF16, DQK, DV, BM, BN, NW>(RAGGED_FMHA_ARGS);                    \
    }                                                                                  \
    }

// One more KiB than the tiles: the wgmma body aligns its tiles to the 1024-byte swizzle period.
#define RAGGED_FMHA_SM90_ENTRY(NAME, BF16, DQK, DV, BN, NWG, MINB)                                          \
    extern "C" {                                                                                          \
    __constant__ int NAME##_config[4] = {64 * NWG, BN, 128 * NWG, RAGGED_FMHA_SMEM(DQK, DV, 64 * NWG, BN) + 1024}; \
    __constant__ int NAME##_tma[1] = {0};                                                                 \
    __global__ void __launch_bounds__(128 * NWG, MINB) NAME(RAGGED_FMHA_PARAMS) {                         \
        fmha_fwd_wgmma_body<BF16, DQK, DV, BN, NWG>(RAGGED_FMHA_ARGS);                                    \
    }                                                                                                     \
    }

// The warp-specialized body: 1 producer + NC consumer warpgroups (BM 64 NC), a STAGES-deep K/V ring
// and its mbarriers after the tiles; MINB blocks per SM, PREG / CREG registers after setmaxnreg.
#define RAGGED_FMHA_WS_SMEM(D, BN, STAGES, NC) \
    (1024 + 64 * (NC) * (D) * 2 + 2 * (STAGES) * (BN) * (D) * 2 + 8 * (1 + 4 * (STAGES)))
#define RAGGED_FMHA_SM90_WS_ENTRY(NAME, BF16, D, BN, STAGES, NC, PP, MINB, PREG, CREG)                      \
    extern "C" {                                                                                        \
    __constant__ int NAME##_config[4] = {64 * NC, BN, 128 * (NC + 1), RAGGED_FMHA_WS_SMEM(D, BN, STAGES, NC)}; \
    __constant__ int NAME##_tma[1] = {0};                                                               \
    __global__ void __launch_bounds__(128 * (NC + 1), MINB) NAME(RAGGED_FMHA_PARAMS) {                   \
        fmha_fwd_ws_body<BF16, D, BN, STAGES, NC, PP, PREG, CREG>(RAGGED_FMHA_ARGS);                     \
    }                                                                                                   \
    }

// The warp-specialized body with a TMA producer: the same shared memory and configuration, and three
// more parameters after the common ones, the tensor maps of Q, K and V (RaggedTmaMap; box rows BM for
// Q, BN for K and V; kernels/cuda/README.md). NAME_tma = {1} tells the host to pass them.
#define RAGGED_FMHA_SM90_WST_ENTRY(NAME, BF16, D, BN, STAGES, NC, PP, PREG, CREG, LAZY)                              \
    extern "C" {                                                                                             \
    __constant__ int NAME##_config[4] = {64 * NC, BN, 128 * (NC + 1), RAGGED_FMHA_WS_SMEM(D, BN, STAGES, NC)};    \
    __constant__ int NAME##_tma[1] = {1};                                                                    \
    __global__ void __launch_bounds__(128 * (NC + 1), 1)                                                     \
        NAME(RAGGED_FMHA_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_k, \
             const __grid_constant__ RaggedTmaMap tm_v) {                                                    \
        fmha_fwd_ws_body<BF16, D, BN, STAGES, NC, PP, PREG, CREG, true, LAZY>(RAGGED_FMHA_ARGS, &tm_q, &tm_k, &tm_v); \
    }                                                                                                        \
    }

// A wst entry with POLY of every 4 score n-tiles exponentiated on the FMA pipe (study build).
#define RAGGED_FMHA_SM90_WSTX_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY) \
    RAGGED_FMHA_SM90_WSTQ_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, false)
// ... and QREG (Q in registers for S = Q K^T).
#define RAGGED_FMHA_SM90_WSTQ_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG)                         \
    extern "C" {                                                                                             \
    __constant__ int NAME##_config[4] = {64 * NC, BN, 128 * (NC + 1), RAGGED_FMHA_WS_SMEM(D, BN, STAGES, NC)};    \
    __constant__ int NAME##_tma[1] = {1};                                                                    \
    __global__ void __launch_bounds__(128 * (NC + 1), 1)                                                     \
        NAME(RAGGED_FMHA_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_k, \
             const __grid_constant__ RaggedTmaMap tm_v) {                                                    \
        fmha_fwd_ws_body<BF16, D, BN, STAGES, NC, true, PREG, CREG, true, false, POLY, QREG>(RAGGED_FMHA_ARGS, &tm_q, \
                                                                                          &tm_k, &tm_v);     \
    }                                                                                                        \
    }

// The persistent variant (sm90_wsp.cuh): same shared memory plus the item slot.
#define RAGGED_FMHA_SM90_WSP_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG)                                  \
    extern "C" {                                                                                             \
    __constant__ int NAME##_config[4] = {64 * NC, BN, 128 * (NC + 1), RAGGED_FMHA_WS_SMEM(D, BN, STAGES, NC) + 16}; \
    __constant__ int NAME##_tma[1] = {0};                                                                    \
    __global__ void __launch_bounds__(128 * (NC + 1), 1) NAME(RAGGED_FMHA_PARAMS) {                         \
        fmha_fwd_wsp_body<BF16, D, BN, STAGES, NC, PREG, CREG>(RAGGED_FMHA_ARGS);                            \
    }                                                                                                        \
    }

// The persistent variant with the TMA producer: the shared memory of the persistent form, the three
// tensor maps of the wst entries.
#define RAGGED_FMHA_SM90_WSPT_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY) \
    RAGGED_FMHA_SM90_WSPTQ_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, false)
#define RAGGED_FMHA_SM90_WSPTQ_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG) \
    RAGGED_FMHA_SM90_WSPTX_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, false)
#define RAGGED_FMHA_SM90_WSPTX_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE) \
    RAGGED_FMHA_SM90_WSPTY_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, 0, false)
// ... and LZ (the lazy rescale's threshold, 0: off), DP (descriptors as base plus desc_add).
#define RAGGED_FMHA_SM90_WSPTY_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP) \
    RAGGED_FMHA_SM90_WSPTZ_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, true, false)
// ... and PP (false: no ping-pong turns between the consumers), PL (each block's P V wait, O rescale and P
// pack at the top of the next block), KA (the producer fills K one block ahead of V).
#define RAGGED_FMHA_SM90_WSPTZ_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL) \
    RAGGED_FMHA_SM90_WSPTK_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, false)
#define RAGGED_FMHA_SM90_WSPTK_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA) \
    RAGGED_FMHA_SM90_WSPTD_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, false)
// ... and DYN (items drawn from a work counter; 48 bytes more shared memory for its slots).
#define RAGGED_FMHA_SM90_WSPTD_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN) \
    RAGGED_FMHA_SM90_WSPTH_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN, 0)
// ... and HC (the item order by chunks of HC heads, ws_item; 0: all heads of a tile side by side).
#define RAGGED_FMHA_SM90_WSPTH_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN, HC) \
    RAGGED_FMHA_SM90_WSPTN_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN, HC, 0)
// ... and NOSM (study, timing only: 1 no softmax, the raw scores packed as P; 2 also every K / V tile
// from the item's first key block; the output is wrong).
#define RAGGED_FMHA_SM90_WSPTN_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN, HC, NOSM) \
    RAGGED_FMHA_SM90_WSPTS_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN, HC, NOSM, \
                                 false)
// ... and TS (a batch's partial last key block loaded by TMA as the batch's last BN keys, ws_key_base).
#define RAGGED_FMHA_SM90_WSPTS_ENTRY(NAME, BF16, D, BN, STAGES, NC, PREG, CREG, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN, HC, NOSM, \
                                     TS)                                                                              \
    extern "C" {                                                                                             \
    __constant__ int NAME##_config[4] = {64 * NC, BN, 128 * (NC + 1),                                        \
                                         RAGGED_FMHA_WS_SMEM(D, BN, STAGES, NC) + 16 + ((DYN) ? 48 : 0)};     \
    __constant__ int NAME##_tma[1] = {1};                                                                    \
    __global__ void __launch_bounds__(128 * (NC + 1), 1)                                                     \
        NAME(RAGGED_FMHA_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_k, \
             const __grid_constant__ RaggedTmaMap tm_v) {                                                    \
        fmha_fwd_wsp_body<BF16, D, BN, STAGES, NC, PREG, CREG, true, POLY, QREG, TREE, LZ, DP, PP, PL, KA, DYN, HC, NOSM, TS>( \
            RAGGED_FMHA_ARGS, &tm_q, &tm_k, &tm_v);                                                          \
    }                                                                                                        \
    }

// The portable path (any sm_80+ target), always compiled: on sm_90a these entry points are what
// the device tests run to keep the portable path checked.
#define RAGGED_FMHA_SM80_ALL(PREFIX)                                                   \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##bf16_d64, true, 64, 64, 128, 64, 4, 2)             \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##f16_d64, false, 64, 64, 128, 64, 4, 2)             \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##bf16_d96, true, 96, 96, 64, 64, 4, 2)              \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##f16_d96, false, 96, 96, 64, 64, 4, 2)              \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##bf16_d128, true, 128, 128, 64, 64, 4, 2)           \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##f16_d128, false, 128, 128, 64, 64, 4, 2)           \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##bf16_d256, true, 256, 256, 64, 64, 4, 1)           \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##f16_d256, false, 256, 256, 64, 64, 4, 1)           \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##bf16_d192v128, true, 192, 128, 64, 64, 4, 1)       \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##f16_d192v128, false, 192, 128, 64, 64, 4, 1)

// Which body the plugin's d64 and d128 names get on sm_90a: 0 = the wgmma body of sm90.cuh, 1 = the
// warp-specialized body of sm90_ws.cuh, 2 = its persistent form (sm90_wsp.cuh), 3 = the ws body with
// the TMA producer (d64: 3 consumer warpgroups, d128: 2), which takes three tensor maps more, 4 = the
// persistent form with the TMA producer (same shapes, same maps); bench/gpu/NOTES.md, sessions 5 to 7,
// has the measurements behind the choice. The other head dims always use the wgmma body. _POLY_: how
// many of every 4 score n-tiles the bodies 3 and 4 exponentiate on the FMA pipe (poly_exp2); _STAGES_:
// the K/V ring depth of body 4; _QREG_: whether body 4 holds Q in registers (S from the register-A
// wgmma, Q released to the producer once loaded); _LZ_: the lazy rescale's threshold in log2 units (0:
// off), _DP_: wgmma descriptors as one base per tile plus a 32-bit add per k-step, _PL_: each block's
// P V wait, O rescale and P pack at the top of the next block (the softmax overlaps P V), _KA_: the
// producer fills K one block ahead of V (all four: body 4 only, bench/gpu/NOTES.md session 8).
#define RAGGED_FMHA_SM90_WS_D64 4
#define RAGGED_FMHA_SM90_WS_D128 4
#define RAGGED_FMHA_SM90_POLY_D64 0
#define RAGGED_FMHA_SM90_POLY_D128 0
#define RAGGED_FMHA_SM90_STAGES_D64 4
#define RAGGED_FMHA_SM90_STAGES_D128 3
#define RAGGED_FMHA_SM90_QREG_D64 false
#define RAGGED_FMHA_SM90_QREG_D128 true
#define RAGGED_FMHA_SM90_LZ_D64 8
#define RAGGED_FMHA_SM90_LZ_D128 8
#define RAGGED_FMHA_SM90_DP_D64 true
#define RAGGED_FMHA_SM90_DP_D128 true
#define RAGGED_FMHA_SM90_PL_D64 true
#define RAGGED_FMHA_SM90_PL_D128 true
#define RAGGED_FMHA_SM90_KA_D64 true
#define RAGGED_FMHA_SM90_KA_D128 true
#define RAGGED_FMHA_SM90_DYN_D64 true
#define RAGGED_FMHA_SM90_DYN_D128 true
#define RAGGED_FMHA_SM90_HC_D64 4
#define RAGGED_FMHA_SM90_HC_D128 4
#define RAGGED_FMHA_SM90_TS_D64 false
#define RAGGED_FMHA_SM90_TS_D128 true

#if defined(RAGGED_FMHA_WS_STUDY) && defined(RAGGED_FMHA_WST_STUDY)
// The persistent TMA study (bench/gpu/fmha_wst.py): the plugin's shapes first (d128: Q in registers,
// 3 K / V stages; d64: 3 consumers, 4 stages; both with KA, PL, LZ 8 and DP), then the shapes they
// replaced or were measured against in session 9: d128 with 2 stages (the plugin's until then), Q in
// shared memory, BN 176 / 192 with Q in shared memory (no spills at 240 registers), and dyn (items
// drawn from a work counter, the lead of session 9 with the batch-major pre-pass). Measured and
// dropped in sessions 7 to 9 (bench/gpu/NOTES.md): BN 176 / 192 (again in session 9, with every
// session-8 change), the 24 / 240 split on the non-persistent body, poly_exp2, tree reductions, pl
// without lz / dp, a speculative softmax (exponentials against the running max before the row max).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
RAGGED_FMHA_SM90_WSPTK_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3, true, 128, 128, 3, 2, 24, 240, 0, true, false, 8,
                             true, true, true, true)
RAGGED_FMHA_SM90_WSPTK_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaall, true, 128, 128, 2, 2, 24, 240, 0, true, false, 8, true,
                             true, true, true)
RAGGED_FMHA_SM90_WSPTD_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dyn, true, 128, 128, 3, 2, 24, 240, 0, true, false, 8,
                             true, true, true, true, true)
RAGGED_FMHA_SM90_WSPTD_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_c3s4kaalldyn, true, 64, 128, 4, 3, 24, 160, 0, false, false, 8,
                             true, true, true, true, true)
RAGGED_FMHA_SM90_WSPTH_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynh4, true, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 4)
RAGGED_FMHA_SM90_WSPTH_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynh8, true, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 8)
RAGGED_FMHA_SM90_WSPTN_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynnosm, true, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 0, 1)
RAGGED_FMHA_SM90_WSPTN_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynnosml2, true, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 0, 2)
RAGGED_FMHA_SM90_WSPTN_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynnosmnopp, true, 128, 128, 3, 2, 24, 240, 0, true,
                             false, 8, true, false, true, true, true, 0, 1)
RAGGED_FMHA_SM90_WSPTN_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_kaalls3dynnosm, true, 128, 128, 3, 2, 24, 240, 0, false, false,
                             8, true, true, true, true, true, 0, 1)
RAGGED_FMHA_SM90_WSPTN_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_n176kaalldynnosm, true, 128, 176, 2, 2, 24, 240, 0, false, false,
                             8, true, true, true, true, true, 0, 1)
RAGGED_FMHA_SM90_WSPTN_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_c3s4kaalldynnosm, true, 64, 128, 4, 3, 24, 160, 0, false, false,
                             8, true, true, true, true, true, 0, 1)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynts, true, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 0, 0, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_f16_d128_qrkaalls3dynts, false, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 0, 0, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynh4ts, true, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 4, 0, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_qrkaalls3dynnosmts, true, 128, 128, 3, 2, 24, 240, 0, true,
                             false, 8, true, true, true, true, true, 0, 1, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_c3s4kaalldynts, true, 64, 128, 4, 3, 24, 160, 0, false, false,
                             8, true, true, true, true, true, 0, 0, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_f16_d64_c3s4kaalldynts, false, 64, 128, 4, 3, 24, 160, 0, false, false,
                             8, true, true, true, true, true, 0, 0, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_c3s4kaalldynh4ts, true, 64, 128, 4, 3, 24, 160, 0, false, false,
                             8, true, true, true, true, true, 4, 0, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_f16_d128_qrkaalls3dynh4ts, false, 128, 128, 3, 2, 24, 240, 0, true, false,
                             8, true, true, true, true, true, 4, 0, true)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_wspt_f16_d64_c3s4kaalldynh4ts, false, 64, 128, 4, 3, 24, 160, 0, false, false,
                             8, true, true, true, true, true, 4, 0, true)
RAGGED_FMHA_SM90_WSPTH_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_c3s4kaalldynh4, true, 64, 128, 4, 3, 24, 160, 0, false, false,
                             8, true, true, true, true, true, 4)
RAGGED_FMHA_SM90_WSPTD_ENTRY(ragged_fmha_fwd_wspt_f16_d128_qrkaalls3dyn, false, 128, 128, 3, 2, 24, 240, 0, true, false, 8,
                             true, true, true, true, true)
RAGGED_FMHA_SM90_WSPTK_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_kaall, true, 128, 128, 2, 2, 24, 240, 0, false, false, 8, true,
                             true, true, true)
RAGGED_FMHA_SM90_WSPTK_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_n176kaall, true, 128, 176, 2, 2, 24, 240, 0, false, false, 8,
                             true, true, true, true)
RAGGED_FMHA_SM90_WSPTK_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_n192kaall, true, 128, 192, 2, 2, 24, 240, 0, false, false, 8,
                             true, true, true, true)
RAGGED_FMHA_SM90_WSPTK_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_c3s4kaall, true, 64, 128, 4, 3, 24, 160, 0, false, false, 8, true,
                             true, true, true)
#endif
#elif defined(RAGGED_FMHA_WS_STUDY)
// Only what the benchmark's warp-specialization study needs (a quick compile on the device): the
// wgmma body and the ws bodies of d64 / d128 under their own names, and the ws variants; with
// -DRAGGED_FMHA_WS_SANITIZE only the fp16 entries of the sanitizer case (fmha_ws.py --sanitize).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_f16_d64, false, 64, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_f16_d128, false, 128, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_f16_d64, false, 64, 128, 2, 2, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_f16_d128, false, 128, 128, 2, 2, 40, 232)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_f16_d64, false, 64, 128, 2, 2, true, 40, 232, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_f16_d128, false, 128, 128, 2, 2, true, 40, 232, false)
#if !defined(RAGGED_FMHA_WS_SANITIZE)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64, true, 64, 64, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128, true, 128, 128, 64, 3, 1)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_bf16_d64, true, 64, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_bf16_d128, true, 128, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_bf16_d64, true, 64, 128, 2, 2, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_bf16_d128, true, 128, 128, 2, 2, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_bf16_d64_c3, true, 64, 128, 2, 3, true, 1, 24, 160)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_bf16_d128_nopp, true, 128, 128, 2, 2, false, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_bf16_d128_c3, true, 128, 64, 2, 3, true, 1, 24, 160)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d64, true, 64, 128, 2, 2, true, 40, 232, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d128, true, 128, 128, 2, 2, true, 40, 232, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d64_c3, true, 64, 128, 2, 3, true, 24, 160, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d128_c3, true, 128, 64, 3, 3, true, 24, 160, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d128_s3, true, 128, 128, 3, 2, true, 40, 232, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d128_nopp, true, 128, 128, 2, 2, false, 40, 232, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d128_lz, true, 128, 128, 2, 2, true, 40, 232, true)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_bf16_d64_lz, true, 64, 128, 2, 2, true, 40, 232, true)
#endif
#endif
#else  // the plugin's set

RAGGED_FMHA_SM80_ALL(ragged_fmha_fwd_sm80_)

// The names the plugin launches: the fastest path the compile target allows.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if RAGGED_FMHA_SM90_WS_D64 == 4
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 128, RAGGED_FMHA_SM90_STAGES_D64, 3, 24, 160,
                             RAGGED_FMHA_SM90_POLY_D64, RAGGED_FMHA_SM90_QREG_D64, false, RAGGED_FMHA_SM90_LZ_D64,
                             RAGGED_FMHA_SM90_DP_D64, true, RAGGED_FMHA_SM90_PL_D64, RAGGED_FMHA_SM90_KA_D64,
                             RAGGED_FMHA_SM90_DYN_D64,
                             RAGGED_FMHA_SM90_HC_D64, 0, RAGGED_FMHA_SM90_TS_D64)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 128, RAGGED_FMHA_SM90_STAGES_D64, 3, 24, 160,
                             RAGGED_FMHA_SM90_POLY_D64, RAGGED_FMHA_SM90_QREG_D64, false, RAGGED_FMHA_SM90_LZ_D64,
                             RAGGED_FMHA_SM90_DP_D64, true, RAGGED_FMHA_SM90_PL_D64, RAGGED_FMHA_SM90_KA_D64,
                             RAGGED_FMHA_SM90_DYN_D64,
                             RAGGED_FMHA_SM90_HC_D64, 0, RAGGED_FMHA_SM90_TS_D64)
#elif RAGGED_FMHA_SM90_WS_D64 == 3
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 128, 2, 3, 24, 160, RAGGED_FMHA_SM90_POLY_D64)
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 128, 2, 3, 24, 160, RAGGED_FMHA_SM90_POLY_D64)
#elif RAGGED_FMHA_SM90_WS_D64 == 2
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 128, 2, 2, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 128, 2, 2, 40, 232)
#elif RAGGED_FMHA_SM90_WS_D64 == 1
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 128, 2, 2, true, 1, 40, 232)
#else
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 64, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 64, 64, 2, 2)
#endif
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d96, true, 96, 96, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d96, false, 96, 96, 64, 3, 1)
#if RAGGED_FMHA_SM90_WS_D128 == 4
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, RAGGED_FMHA_SM90_STAGES_D128, 2, 24, 240,
                             RAGGED_FMHA_SM90_POLY_D128, RAGGED_FMHA_SM90_QREG_D128, false, RAGGED_FMHA_SM90_LZ_D128,
                             RAGGED_FMHA_SM90_DP_D128, true, RAGGED_FMHA_SM90_PL_D128, RAGGED_FMHA_SM90_KA_D128,
                             RAGGED_FMHA_SM90_DYN_D128,
                             RAGGED_FMHA_SM90_HC_D128, 0, RAGGED_FMHA_SM90_TS_D128)
RAGGED_FMHA_SM90_WSPTS_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, RAGGED_FMHA_SM90_STAGES_D128, 2, 24, 240,
                             RAGGED_FMHA_SM90_POLY_D128, RAGGED_FMHA_SM90_QREG_D128, false, RAGGED_FMHA_SM90_LZ_D128,
                             RAGGED_FMHA_SM90_DP_D128, true, RAGGED_FMHA_SM90_PL_D128, RAGGED_FMHA_SM90_KA_D128,
                             RAGGED_FMHA_SM90_DYN_D128,
                             RAGGED_FMHA_SM90_HC_D128, 0, RAGGED_FMHA_SM90_TS_D128)
#elif RAGGED_FMHA_SM90_WS_D128 == 3
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, 2, 2, 40, 232, RAGGED_FMHA_SM90_POLY_D128)
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, 2, 2, 40, 232, RAGGED_FMHA_SM90_POLY_D128)
#elif RAGGED_FMHA_SM90_WS_D128 == 2
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, 2, 2, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, 2, 2, 40, 232)
#elif RAGGED_FMHA_SM90_WS_D128 == 1
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, 2, 2, true, 1, 40, 232)
#else
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, 64, 3, 1)
#endif
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d256, true, 256, 256, 64, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d256, false, 256, 256, 64, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d192v128, true, 192, 128, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d192v128, false, 192, 128, 64, 3, 1)
#else
RAGGED_FMHA_SM80_ALL(ragged_fmha_fwd_)
#endif

#ifdef RAGGED_FMHA_TUNING
// Alternative tile shapes, compiled only for the benchmark's tuning sweep.
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_bf16_d128_m128n32w4, true, 128, 128, 128, 32, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_bf16_d64_m64n64w4, true, 64, 64, 64, 64, 4, 2)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64_n128, true, 64, 64, 128, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64_n128w3, true, 64, 64, 128, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64_n64w1, true, 64, 64, 64, 1, 3)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n128, true, 128, 128, 128, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n64, true, 128, 128, 64, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n64x2, true, 128, 128, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n64w1, true, 128, 128, 64, 1, 2)
#endif
#endif
#endif  // RAGGED_FMHA_WS_STUDY
