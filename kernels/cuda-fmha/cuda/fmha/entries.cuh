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
// then variants of them, each overriding one field, so that a variant and the plugin's form are
// timed in one run. What each variant measured, and the variants measured and dropped, are in
// bench/gpu/NOTES.md (the decision record).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// NOSM: the body without its softmax (timing only, its O is wrong): what the GEMMs and the
// pipeline around them allow.
template <class C, int N>
struct WspNosm : C {
    enum : int { NOSM = N };
};
// The earlier key-loop order: the V wait before both wgmma issues and the O rescale before the
// consumer turn (VW and RA off); entry names `_s14`.
template <class C>
struct WspEarlyVWait : C {
    enum : bool { VW = false, RA = false };
};
// Without ping-pong between the consumer warpgroups (PP off): not a candidate but a race
// amplifier. It exposes, about ten times as often as the plugin's form, the class of race where
// a buffer is released before a late warp has read it; fmha_repeat.py --study --alternate
// --back-to-back 50 --engines wspt_bf16_d128_nopp (plugin_round.sh's repeat step) checks for it.
template <class C>
struct WspNoPp : C {
    enum : bool { PP = false };
};
// TAIL: the list's cheapest tiles (about TAIL items per block) walked last with all heads side by
// side, after the chunks of 4 heads, so the schedule ends closer to the work-conserving bound
// (bench/gpu/schedule_model.py models it); `_t0` is the plugin's form without the tail.
template <class C, int T>
struct WspTail : C {
    enum : int { TAIL = T };
};
// WO: O stored in 16-byte pieces (wsp_store_o), the plugin's form at d128; `_o4` is d128 with
// 4-byte stores and `_wo` d64 with 16-byte ones, for the A/B.
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
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d128_s14, WspEarlyVWait<WspD128<true>>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64, WspD64<true>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_f16_d64, WspD64<false>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_nosm, WspNosm<WspD64<true>, 1>)
RAGGED_FMHA_SM90_WSPT_ENTRY(ragged_fmha_fwd_wspt_bf16_d64_s14, WspEarlyVWait<WspD64<true>>)
// The other head dims on the persistent body (WspD96, WspD256, WspD192V128), against the wgmma
// body they ran on before (the sm90_* entries below).
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
