// Part of kernels/cuda-fmha/cuda/ragged_paged_decode.cu (the entry points and their
// configurations); included in that file's order, not on its own.
//
// Each split entry point publishes NAME_config = {rows per tile, keys per tile, threads per block,
// dynamic shared memory before the page-id windows} (the host adds the windows' bytes); each
// combine entry point {0, 0, threads per block, 0}. Every head-dim pair of the forward is
// compiled, for bf16 and fp16; the same code serves every sm_80+ target (mma.sync m16n8k16,
// cp.async), sm_90a included.

#define RAGGED_PAGED_ENTRY(DTN, BF16, DIMS, DQK, DV, STAGES, MINB)                                               \
    extern "C" {                                                                                               \
    __constant__ int ragged_paged_split_##DTN##_##DIMS##_config[4] = {16, 16, RAGGED_PAGED_NW * 32,            \
                                                                      RAGGED_PAGED_SMEM(DQK, DV, STAGES)};     \
    __global__ void __launch_bounds__(RAGGED_PAGED_NW * 32, MINB)                                              \
        ragged_paged_split_##DTN##_##DIMS(RAGGED_PAGED_SPLIT_PARAMS) {                                         \
        paged_split_body<BF16, DQK, DV, STAGES>(RAGGED_PAGED_SPLIT_ARGS);                                      \
    }                                                                                                          \
    __constant__ int ragged_paged_combine_##DTN##_##DIMS##_config[4] = {0, 0, RAGGED_PAGED_NW * 32, 0};        \
    __global__ void __launch_bounds__(RAGGED_PAGED_NW * 32)                                                    \
        ragged_paged_combine_##DTN##_##DIMS(RAGGED_PAGED_COMBINE_PARAMS) {                                     \
        paged_combine_body<BF16, DV>(RAGGED_PAGED_COMBINE_ARGS);                                               \
    }                                                                                                          \
    }
#define RAGGED_PAGED_PAIR(DIMS, DQK, DV, STAGES, MINB)                \
    RAGGED_PAGED_ENTRY(bf16, true, DIMS, DQK, DV, STAGES, MINB) \
    RAGGED_PAGED_ENTRY(f16, false, DIMS, DQK, DV, STAGES, MINB)

// Stages of each warp's K/V ring: at D = 128 three 8 KB stages per warp (100 KB a block, two
// blocks per H100 SM, 64 KB of K/V in flight per block); d256 keeps two so that a block fits
// an A100's 163 KB.
RAGGED_PAGED_PAIR(d64, 64, 64, 4, 2)
RAGGED_PAGED_PAIR(d96, 96, 96, 3, 2)
RAGGED_PAGED_PAIR(d128, 128, 128, 3, 2)
RAGGED_PAGED_PAIR(d256, 256, 256, 2, 1)
RAGGED_PAGED_PAIR(d192v128, 192, 128, 3, 1)
