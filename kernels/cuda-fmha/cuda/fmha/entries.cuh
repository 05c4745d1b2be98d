// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the entry points and their tile configurations); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Entry points. Each `NAME` has a companion constant `NAME_config` = {BM, BN, threads per block,
// dynamic shared-memory bytes} that the host reads with cuModuleGetGlobal to size the pre-pass
// (block_m, block_n), the grid (B * ceil(S_q_max / BM) * H_q), the block and the shared memory.
// ---------------------------------------------------------------------------------------------

// 1 when every forward entry point of this module waits for its pre-pass grid before reading the
// workspace (ragged_grid_dependency_wait, sm_90 and later): the host may then launch the forward
// with programmatic stream serialization. Read once per module, at load.
extern "C" __constant__ int ragged_fmha_grid_dependency[1] = {
#if __CUDA_ARCH__ >= 900
    1
#else
    0
#endif
};

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
// RAGGED_FMHA_WS_SMEM_W: the same at row widths PQ for Q and K and PV for V.
#define RAGGED_FMHA_WS_SMEM_W(PQ, PV, BN, STAGES, NC) \
    (1024 + 64 * (NC) * (PQ) * 2 + (STAGES) * (BN) * ((PQ) + (PV)) * 2 + 8 * (1 + 4 * (STAGES)))
#define RAGGED_FMHA_WS_SMEM(D, BN, STAGES, NC) RAGGED_FMHA_WS_SMEM_W(D, D, BN, STAGES, NC)
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
// Q, BN for K and V; kernels/cuda-fmha/cuda/README.md). NAME_tma = {1} tells the host to pass them.
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

// The persistent variant (sm90_wsp.cuh), configured by a WspShape type (the arguments after NAME,
// commas and all; NAME_cfg names it): the shared memory of the ws body plus the item slot (and, with
// DYN, the two-slot item ring). RAGGED_FMHA_SM90_WSPT_ENTRY: the TMA producer, with the three tensor
// maps of the wst entries after the common parameters.
// Every sm_90 part's opt-in shared memory per block (227 KB): a persistent configuration above it
// would compile and then be refused at load, so the compiler refuses it instead.
#define RAGGED_SM90_SMEM_OPTIN (227 * 1024)
// The ws body's layout at the padded row widths (Q and K rows ragged_row_width(D), V rows
// ragged_row_width(DV)), then the item slot, the DYN ring and Q2's second buffer.
#define RAGGED_FMHA_WSP_SMEM(C)                                                                                \
    (RAGGED_FMHA_WS_SMEM_W(ragged_row_width(C::D), ragged_row_width(C::DV), C::BN, C::STAGES, C::NC) + 16 +    \
     (C::DYN ? 48 : 0) + (C::Q2 ? 64 * C::NC * ragged_row_width(C::D) * 2 + 16 : 0))
#define RAGGED_FMHA_SM90_WSP_ENTRY(NAME, ...)                                                                      \
    using NAME##_cfg = __VA_ARGS__;                                                                               \
    static_assert(!NAME##_cfg::TMA, "a TMA configuration takes the maps: RAGGED_FMHA_SM90_WSPT_ENTRY");           \
    static_assert(RAGGED_FMHA_WSP_SMEM(NAME##_cfg) <= RAGGED_SM90_SMEM_OPTIN, "over sm_90's shared memory");     \
    extern "C" {                                                                                                  \
    __constant__ int NAME##_config[4] = {64 * NAME##_cfg::NC, NAME##_cfg::BN, 128 * (NAME##_cfg::NC + 1),          \
                                         RAGGED_FMHA_WSP_SMEM(NAME##_cfg)};                                        \
    __constant__ int NAME##_tma[1] = {0};                                                                         \
    __global__ void __launch_bounds__(128 * (NAME##_cfg::NC + 1), 1) NAME(RAGGED_FMHA_PARAMS) {                   \
        fmha_fwd_wsp_body<NAME##_cfg>(RAGGED_FMHA_ARGS);                                                          \
    }                                                                                                             \
    }
#define RAGGED_FMHA_SM90_WSPT_ENTRY(NAME, ...)                                                                     \
    using NAME##_cfg = __VA_ARGS__;                                                                               \
    static_assert(NAME##_cfg::TMA, "a cp.async configuration takes no maps: RAGGED_FMHA_SM90_WSP_ENTRY");         \
    static_assert(RAGGED_FMHA_WSP_SMEM(NAME##_cfg) <= RAGGED_SM90_SMEM_OPTIN, "over sm_90's shared memory");     \
    extern "C" {                                                                                                  \
    __constant__ int NAME##_config[4] = {64 * NAME##_cfg::NC, NAME##_cfg::BN, 128 * (NAME##_cfg::NC + 1),          \
                                         RAGGED_FMHA_WSP_SMEM(NAME##_cfg)};                                        \
    __constant__ int NAME##_tma[1] = {1};                                                                         \
    __constant__ int NAME##_fl[1] = {NAME##_cfg::FL && NAME##_cfg::DYN};                                           \
    __global__ void __launch_bounds__(128 * (NAME##_cfg::NC + 1), 1)                                              \
        NAME(RAGGED_FMHA_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_k, \
             const __grid_constant__ RaggedTmaMap tm_v, RAGGED_PREPASS_PARAMS(fl_), u64 fl_nonce) {               \
        const RaggedFusedList fl = {RAGGED_PREPASS_ARGS(fl_), fl_nonce};                                          \
        fmha_fwd_wsp_body<NAME##_cfg>(RAGGED_FMHA_ARGS, &tm_q, &tm_k, &tm_v, &fl);                                \
    }                                                                                                             \
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
// persistent form with the TMA producer (same maps), configured by WspD64 / WspD128 below;
// bench/gpu/NOTES.md has the measurements behind the choice. The other head dims
// always use the wgmma body.
#define RAGGED_FMHA_SM90_WS_D64 4
#define RAGGED_FMHA_SM90_WS_D128 4
// 1: d96, d256 and d192 / 128 on the persistent TMA body too (WspD96, WspD256, WspD192V128); 0: the
// wgmma body of sm90.cuh.
#define RAGGED_FMHA_SM90_WSP_OTHER_DIMS 1

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The plugin's persistent bodies; bench/gpu/NOTES.md records the measurements behind each switch
// (its A/B against the form without it, on the ragged mix). d64: 3 consumer warpgroups (BM 192),
// a 4-stage ring; d128: 2 (BM 128), 3 stages, Q held in registers (S from the register-A wgmma,
// Q released to the producer once loaded).
template <bool B>
struct WspD64 : WspShape<B, 64, 128, 4, 3, 24, 160> {
    enum : bool {
        DP = true, PL = true, KA = true, DYN = true, TS = true, EO = true, Q2 = true, RING = true, FR = true, VW = true,
        RA = true
    };
    enum : bool { FL = true };
    enum : int { LZ = 8, HC = 4, TAIL = 4 };
};
template <bool B>
struct WspD128 : WspShape<B, 128, 128, 3, 2, 24, 240> {
    enum : bool {
        QREG = true, DP = true, PL = true, KA = true, DYN = true, TS = true, TSQ = true, EO = true, RING = true, FR = true,
        VW = true, RA = true
    };
    enum : bool { FL = true, WO = true };
    enum : int { LZ = 8, HC = 4, TAIL = 4 };
};
// The other head dims on the same body (bench/gpu/NOTES.md). d96: d128's configuration
// over rows padded to 128 columns (the same shared memory; S over the 96 real columns) with P V over
// the 96 real columns too (PVN: +4.2 / +2.9 % over P V across the padding). d256: Q read from shared
// memory (in registers it would leave too few for the 128 accumulator registers per thread), so
// without EO, which lost there (0.968 / 0.942) as it did at d64 until Q had a second buffer, and
// there is no room for one; blocks of 64 keys in a ring of 2 (193 KB). d192 / 128: d128's
// arrangement (Q in registers, TSQ, EO; +2.4 / +0.0 % over Q from shared memory) with blocks of 128
// keys in a ring of 2 (209 KB).
template <bool B>
struct WspD96 : WspD128<B> {
    enum : int { D = 96, DV = 96, PVN = 96 };
    enum : bool { WO = false };  // not measured at d96
};
template <bool B>
struct WspD256 : WspShape<B, 256, 64, 2, 2, 24, 240> {
    enum : bool { DP = true, PL = true, KA = true, DYN = true, TS = true, RING = true, FR = true, VW = true, RA = true };
    enum : bool { FL = true };
    enum : int { LZ = 8, HC = 4 };
};
template <bool B>
struct WspD192V128 : WspShape<B, 192, 128, 2, 2, 24, 240, 128> {
    enum : bool {
        QREG = true, DP = true, PL = true, KA = true, DYN = true, TS = true, TSQ = true, EO = true, RING = true, FR = true,
        VW = true, RA = true
    };
    enum : bool { FL = true };
    enum : int { LZ = 8, HC = 4 };
};
// The persistent body with the cp.async producer (body 2 above; the ws study's wsp entries).
template <bool B, int D>
struct WspCpAsync : WspShape<B, D, 128, 2, 2, 40, 232> {
    enum : bool { TMA = false };
};
#endif

#if defined(RAGGED_FMHA_WS_STUDY) && defined(RAGGED_FMHA_WST_STUDY)
// The persistent TMA study (bench/gpu/fmha_wst.py): the plugin's configurations under study names,
// then variants of them, each overriding one field. Measured and dropped in sessions 7 to 10
// (bench/gpu/NOTES.md; the switches are still in the body): BN 176 / 192, the 24 / 240 split on the
// non-persistent body, poly_exp2, tree reductions, pl without lz / dp, a speculative softmax, the
// static snake and the batch-major list, Q in shared memory at d128, 2 stages at d128; in session 11
// chunks of 8 heads (HC 8: +0.6 / +0.1 % at d128, -0.3 / +1.5 % at d64, one run); in session 12 tree
// reductions again (-1 to -3 % at both dims), TS off (no longer timed: 0.88 at d128) and the decoded
// item handed through the slot (SI: -2 to -4 %, the one-warp producer's 24 registers spilled); in
// session 13 TSQ at d64 and without it at d128 (no longer timed: within +-1 % in six runs); in
// session 15, with the rotated order, session 11's to 13's forms (RING, FR and PF within +-0.6 % at
// d64) and key blocks of 160 (two Q buffers), 176 and 192 with Q read from shared memory and 2
// stages (FlashInfer fa3's d128 non-causal shape is 128 x 192): -1.2 to -4 % non-causal and -4 to
// -7 % causal at d128 in two runs (at BN 160 with Q in registers ptxas serializes every wgmma, C7512);
// KW, the previous block's tail (P V wait, V release, P pack) before the wait for the next K instead
// of after it: 0.998 / 1.009 at d128, 0.997 / 1.008 at d64, one run.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <class C, int N>
struct WspNosm : C {
    enum : int { NOSM = N };
};
// The plugin's form before session 15 (the V wait before both issues, the O rescale before the turn).
template <class C>
struct WspSession14 : C {
    enum : bool { VW = false, RA = false };
};
// Without ping-pong (PP off): not a candidate, a race amplifier. Session 18's race (Q released
// before a late warp's ldmatrix had read it; bench/gpu/NOTES.md) showed in 4 to 16 of 1 000
// back-to-back causal calls of this form and in at most 2 of 200 of the plugin's d128, and in none
// of either once Q was released after the first S: fmha_repeat.py --study --alternate
// --back-to-back 50 --engines wspt_bf16_d128_nopp (plugin_round.sh's repeat step) keeps it that way.
template <class C>
struct WspNoPp : C {
    enum : bool { PP = false };
};
// Session 21: TAIL, the list's cheapest tiles (about TAIL items per block) walked last with all
// heads side by side, after the chunks of 4 heads: bench/gpu/schedule_model.py puts HC 4's end on the
// ragged mix at 98.6 % of the work-conserving bound at d128 and 96.4 % at d64 (BM 192), against
// 99.2 % and 98.4 % with this tail.
template <class C, int T>
struct WspTail : C {
    enum : int { TAIL = T };
};
// Measured and dropped (NOTES.md session 21): TAIL 8 (d128 0.976 / 0.981, d64 0.984 / 1.011 of TAIL
// 4), HC 0 (one walk over every head: d128 +1.7 / -3.1 % over the chunks to the end, below TAIL 4),
// and TAIL 4 at d256 (0.939 / 0.974: its blocks of 64 keys over 256 columns are twice the K / V
// per head, which the tail's 16 heads side by side no longer share in L2) and d192 / 128 (1.004 /
// 0.996: noise). _t0 is the plugin's form without the tail, for the A/B.
// Session 22 (NOTES.md): WO, O stored in 16-byte pieces (wsp_store_o), in the plugin's d128 since:
// +2.2 / +4.6 % in the study; _o4 is d128 with the 4-byte stores, for the A/B. Measured and dropped:
// WO at d64 (0.930 / 0.944: its body spilled 40 bytes), and ST, each consumer storing the previous
// item's O before the item's first S instead of after it (d128 0.994-0.996 / 1.005-1.006, d64 0.995 /
// 0.998); storing first in all consumers but one serialized every wgmma (C7514, C7515) or spilled
// 0.7-1.1 KB. ST's switch was removed after the measurement (NOTES.md describes it).
template <class C, bool W>
struct WspWideO : C {
    enum : bool { WO = W };
};
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_o4, WspWideO<WspD128<true>, false>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_wo, WspWideO<WspD64<true>, true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_t0, WspTail<WspD128<true>, 0>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_t0, WspTail<WspD64<true>, 0>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d96_t0, WspTail<WspD96<true>, 0>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_nopp, WspNoPp<WspD128<true>>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d128, WspD128<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_f16_d128, WspD128<false>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_nosm, WspNosm<WspD128<true>, 1>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_s14, WspSession14<WspD128<true>>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64, WspD64<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_f16_d64, WspD64<false>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_nosm, WspNosm<WspD64<true>, 1>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_s14, WspSession14<WspD64<true>>)
// Session 16: the other head dims on the persistent body (WspD96, WspD256, WspD192V128), against the
// wgmma body they ran on before (sm90_*). Measured and dropped (NOTES.md session 16): EO without a
// second Q buffer at d256 (0.968 / 0.942) and at d192 / 128 with Q from shared memory (0.985 /
// 0.990); d192 / 128 in blocks of 64 keys, with a ring of 3, two Q buffers and EO (0.866 / 0.888)
// and with Q in registers and a ring of 4 (0.968 / 0.953 of Q in registers at 128 keys); KA off
// with the ring of 2 (d256 0.902 / 0.929, d192 / 128 0.989 / 0.989); chunks of 2 heads (d256 0.998 /
// 1.013, d192 / 128 1.007 / 1.005: noise) and of 8 (0.978 / 0.966, 0.996 / 0.982) instead of 4.
// Session 17 (NOTES.md; the code is in commit 17d6a2c): TW, the key loop's K / V waits tested at the
// top of a block (mbarrier.test_wait) and waited for only where needed: +0.4 / +1.7 % at d128 and
// +1.8 / +1.0 % at d64 in one run, -0.6 / -1.3 % and -0.1 / +0.4 % in the next (noise), d256 0.950 /
// 0.997; QA, the producer filling the next item's Q during this item's key loop (0.978 to 1.009,
// its producer spilled at 24 registers); LS, the quad sum of l right after an item's last softmax
// (d128 0.966 / 0.991, d64 0.980 / 0.988); NW, a narrow last key block (S and P V over 64 keys where
// a batch's last block holds at most 64): ptxas serialized every wgmma of the body (C7511 / C7512),
// so never timed; at the two dims with a ring of 2, session 14's key-loop order (VW and RA off):
// d256 0.936 / 0.980, d192 / 128 0.973 / 0.988; d192 / 128 without EO: 0.999 / 1.013, and wrong (see
// fmha_fwd_wsp_body's assertion).
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d96, WspD96<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_f16_d96, WspD96<false>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d256, WspD256<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_f16_d256, WspD256<false>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d192v128, WspD192V128<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_f16_d192v128, WspD192V128<false>)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d96, true, 96, 96, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d256, true, 256, 256, 64, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d192v128, true, 192, 128, 64, 3, 1)
#endif
#elif defined(RAGGED_FMHA_WS_STUDY)
// Only what the benchmark's warp-specialization study needs (a quick compile on the device): the
// wgmma body and the ws bodies of d64 / d128 under their own names, and the ws variants; with
// -DRAGGED_FMHA_WS_SANITIZE only the fp16 entries of the sanitizer case (fmha_ws.py --sanitize).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_f16_d64, false, 64, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_f16_d128, false, 128, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_f16_d64, WspCpAsync<false, 64>)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_f16_d128, WspCpAsync<false, 128>)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_f16_d64, false, 64, 128, 2, 2, true, 40, 232, false)
RAGGED_FMHA_SM90_WST_ENTRY(ragged_fmha_fwd_wst_f16_d128, false, 128, 128, 2, 2, true, 40, 232, false)
#if !defined(RAGGED_FMHA_WS_SANITIZE)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64, true, 64, 64, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128, true, 128, 128, 64, 3, 1)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_bf16_d64, true, 64, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_ws_bf16_d128, true, 128, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_bf16_d64, WspCpAsync<true, 64>)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_wsp_bf16_d128, WspCpAsync<true, 128>)
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
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_bf16_d64, WspD64<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_f16_d64, WspD64<false>)
#elif RAGGED_FMHA_SM90_WS_D64 == 3
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 128, 2, 3, 24, 160, 0)
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 128, 2, 3, 24, 160, 0)
#elif RAGGED_FMHA_SM90_WS_D64 == 2
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_bf16_d64, WspCpAsync<true, 64>)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_f16_d64, WspCpAsync<false, 64>)
#elif RAGGED_FMHA_SM90_WS_D64 == 1
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 128, 2, 2, true, 1, 40, 232)
#else
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 64, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 64, 64, 2, 2)
#endif
#if RAGGED_FMHA_SM90_WSP_OTHER_DIMS
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_bf16_d96, WspD96<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_f16_d96, WspD96<false>)
#else
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d96, true, 96, 96, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d96, false, 96, 96, 64, 3, 1)
#endif
#if RAGGED_FMHA_SM90_WS_D128 == 4
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_bf16_d128, WspD128<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_f16_d128, WspD128<false>)
#elif RAGGED_FMHA_SM90_WS_D128 == 3
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, 2, 2, 40, 232, 0)
RAGGED_FMHA_SM90_WSTX_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, 2, 2, 40, 232, 0)
#elif RAGGED_FMHA_SM90_WS_D128 == 2
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_bf16_d128, WspCpAsync<true, 128>)
RAGGED_FMHA_SM90_WSP_ENTRY(ragged_fmha_fwd_f16_d128, WspCpAsync<false, 128>)
#elif RAGGED_FMHA_SM90_WS_D128 == 1
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, 2, 2, true, 1, 40, 232)
RAGGED_FMHA_SM90_WS_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, 2, 2, true, 1, 40, 232)
#else
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 128, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 128, 64, 3, 1)
#endif
#if RAGGED_FMHA_SM90_WSP_OTHER_DIMS
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_bf16_d256, WspD256<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_f16_d256, WspD256<false>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_bf16_d192v128, WspD192V128<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_f16_d192v128, WspD192V128<false>)
#else
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d256, true, 256, 256, 64, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d256, false, 256, 256, 64, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d192v128, true, 192, 128, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d192v128, false, 192, 128, 64, 3, 1)
#endif
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
