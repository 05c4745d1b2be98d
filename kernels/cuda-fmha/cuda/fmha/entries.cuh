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

// Shared memory of a block of the portable kernel: Q (BM rows), two K and two V buffers (BN rows
// each), at the padded row widths of ragged_row_width.
#define RAGGED_FMHA_SMEM(DQK, DV, BM, BN) \
    ((BM + 2 * (BN)) * ragged_row_width(DQK) * 2 + 2 * (BN) * ragged_row_width(DV) * 2)

// The portable kernel (kernel_sm80.cuh): BM x BN tiles, NW warps, MINB blocks per SM.
#define RAGGED_FMHA_SM80_ENTRY(NAME, BF16, DQK, DV, BM, BN, NW, MINB)                           \
    extern "C" {                                                                              \
    __constant__ int NAME##_config[4] = {BM, BN, NW * 32, RAGGED_FMHA_SMEM(DQK, DV, BM, BN)}; \
    __constant__ int NAME##_tma[1] = {0};                                                     \
    __global__ void __launch_bounds__(NW * 32, MINB) NAME(RAGGED_FMHA_PARAMS) {               \
        fmha_fwd_body<BF16, DQK, DV, BM, BN, NW>(RAGGED_FMHA_ARGS);                           \
    }                                                                                         \
    }
#define RAGGED_FMHA_SM80_PAIR(PREFIX, DIMS, DQK, DV, BM, BN, NW, MINB)                   \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##bf16_##DIMS, true, DQK, DV, BM, BN, NW, MINB) \
    RAGGED_FMHA_SM80_ENTRY(PREFIX##f16_##DIMS, false, DQK, DV, BM, BN, NW, MINB)
#define RAGGED_FMHA_SM80_ALL(PREFIX)                                   \
    RAGGED_FMHA_SM80_PAIR(PREFIX, d64, 64, 64, 128, 64, 4, 2)          \
    RAGGED_FMHA_SM80_PAIR(PREFIX, d96, 96, 96, 64, 64, 4, 2)           \
    RAGGED_FMHA_SM80_PAIR(PREFIX, d128, 128, 128, 64, 64, 4, 2)        \
    RAGGED_FMHA_SM80_PAIR(PREFIX, d256, 256, 256, 64, 64, 4, 1)        \
    RAGGED_FMHA_SM80_PAIR(PREFIX, d192v128, 192, 128, 64, 64, 4, 1)

// The persistent Hopper kernel (kernel_sm90.cuh) with configuration CONFIG (config_sm90.cuh): one
// producer and CONFIG::consumer_warpgroups consumer warpgroups, one block per SM. After the common
// parameters it takes the tensor maps of Q, K and V (RaggedTmaMap; box rows BM for Q, BN for K and
// V; kernels/cuda-fmha/cuda/README.md), NAME_tma = {1} telling the host to pass them, then the
// pre-pass's parameters and a nonce: NAME_fl = {1} says that, handed a nonzero nonce instead of a
// pre-pass launch, the kernel builds the tile list itself (fused_list.cuh).
// Every sm_90 part's opt-in shared memory per block is 227 KB: a configuration above it would
// compile and then be refused at load, so the compiler refuses it instead.
#define RAGGED_SM90_SMEM_OPTIN (227 * 1024)
#define RAGGED_FMHA_SM90_ENTRY(NAME, CONFIG)                                                                       \
    static_assert(RAGGED_FMHA_SM90_SMEM(CONFIG) <= RAGGED_SM90_SMEM_OPTIN, "over sm_90's shared memory");        \
    extern "C" {                                                                                                  \
    __constant__ int NAME##_config[4] = {64 * CONFIG::consumer_warpgroups, CONFIG::block_n,                        \
                                         128 * (CONFIG::consumer_warpgroups + 1), RAGGED_FMHA_SM90_SMEM(CONFIG)}; \
    __constant__ int NAME##_tma[1] = {1};                                                                         \
    __constant__ int NAME##_fl[1] = {1};                                                                          \
    __global__ void __launch_bounds__(128 * (CONFIG::consumer_warpgroups + 1), 1)                                 \
        NAME(RAGGED_FMHA_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_k, \
             const __grid_constant__ RaggedTmaMap tm_v, RAGGED_PREPASS_PARAMS(fl_), u64 fl_nonce) {               \
        const RaggedFusedList fl = {RAGGED_PREPASS_ARGS(fl_), fl_nonce};                                          \
        fmha_fwd_sm90_kernel<CONFIG>(RAGGED_FMHA_ARGS, &tm_q, &tm_k, &tm_v, &fl, nullptr);                        \
    }                                                                                                             \
    }
#define RAGGED_FMHA_SM90_PAIR(DIMS, CONFIG)                            \
    RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_##DIMS, CONFIG<true>) \
    RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_##DIMS, CONFIG<false>)

// The FP8 forward (fp8_sm90.cuh) with configuration CONFIG: the persistent kernel's parameters, then
// RAGGED_FP8_PARAMS; tm_v maps the workspace's transposed V (fp8_vt.cuh), not V. NAME_fl = {0}: the
// transposition reads the pre-pass's batch records, so the pre-pass always runs and the nonce is 0.
#define RAGGED_FMHA_SM90_FP8_ENTRY(NAME, CONFIG)                                                                  \
    static_assert(RAGGED_FMHA_SM90_SMEM(CONFIG) <= RAGGED_SM90_SMEM_OPTIN, "over sm_90's shared memory");        \
    extern "C" {                                                                                                  \
    __constant__ int NAME##_config[4] = {64 * CONFIG::consumer_warpgroups, CONFIG::block_n,                        \
                                         128 * (CONFIG::consumer_warpgroups + 1), RAGGED_FMHA_SM90_SMEM(CONFIG)}; \
    __constant__ int NAME##_tma[1] = {1};                                                                         \
    __constant__ int NAME##_fl[1] = {0};                                                                          \
    __global__ void __launch_bounds__(128 * (CONFIG::consumer_warpgroups + 1), 1)                                 \
        NAME(RAGGED_FMHA_PARAMS, const __grid_constant__ RaggedTmaMap tm_q, const __grid_constant__ RaggedTmaMap tm_k, \
             const __grid_constant__ RaggedTmaMap tm_v, RAGGED_PREPASS_PARAMS(fl_), u64 fl_nonce,                  \
             RAGGED_FP8_PARAMS) {                                                                                 \
        const RaggedFusedList fl = {RAGGED_PREPASS_ARGS(fl_), fl_nonce};                                          \
        const RaggedFp8Params f8 = RAGGED_FP8_ARGS;                                                               \
        fmha_fwd_sm90_kernel<CONFIG>(RAGGED_FMHA_ARGS, &tm_q, &tm_k, &tm_v, &fl, &f8);                            \
    }                                                                                                             \
    }

// 1 where this module has the FP8 entry points (sm_90a): the host loads them, and their helper
// kernels, only then.
extern "C" __constant__ int ragged_fmha_fp8[1] = {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    1
#else
    0
#endif
};

// The instantiation list. The portable kernels are compiled for every target (on sm_90a the device
// tests run them under their sm80_ names to keep the portable path checked); the names the plugin
// launches get the fastest kernel the compile target allows.
RAGGED_FMHA_SM80_ALL(ragged_fmha_fwd_sm80_)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
RAGGED_FMHA_SM90_PAIR(d64, FmhaSm90ConfigD64)
RAGGED_FMHA_SM90_PAIR(d96, FmhaSm90ConfigD96)
RAGGED_FMHA_SM90_PAIR(d128, FmhaSm90ConfigD128)
RAGGED_FMHA_SM90_PAIR(d256, FmhaSm90ConfigD256)
RAGGED_FMHA_SM90_PAIR(d192v128, FmhaSm90ConfigD192V128)
RAGGED_FMHA_SM90_FP8_ENTRY(ragged_fmha_fwd_e4m3_d64, FmhaSm90Fp8ConfigD64)
RAGGED_FMHA_SM90_FP8_ENTRY(ragged_fmha_fwd_e4m3_d128, FmhaSm90Fp8ConfigD128)
RAGGED_FMHA_SM90_FP8_ENTRY(ragged_fmha_fwd_e4m3_d256, FmhaSm90Fp8ConfigD256)
#else
RAGGED_FMHA_SM80_ALL(ragged_fmha_fwd_)
#endif
