/*
 * C ABI of the AITER shim's backward entry: ragged SDPA backward through AITER's C++
 * `aiter::mha_bwd(mha_bwd_args, ck_tile::stream_config)` (csrc/include/mha_bwd.h), group mode.
 *
 * Versioned apart from the forward (RAGGED_AITER_SHIM_BWD_ABI_VERSION): a shim without these
 * symbols, or with another version, still serves the forward and the plugin declines only the
 * backward. The shim does not link libmha_bwd.so: it opens it at run time (next to the shim, or
 * $RAGGED_SDPA_AITER_MHA_BWD) and looks the C++ symbol up, so a machine with AITER's forward
 * library alone loads the shim; ragged_aiter_mha_bwd_available says whether the backward can run.
 * The Rust mirror is kernels/aiter-fmha/src/shim_abi_bwd.rs, checked offset by offset against this
 * header by a unit test. Change both together and bump RAGGED_AITER_SHIM_BWD_ABI_VERSION.
 *
 * Units are AITER group mode's: strides in elements, token-major rows, int32 everywhere.
 */
#ifndef RAGGED_AITER_SHIM_BWD_H
#define RAGGED_AITER_SHIM_BWD_H

#include "ragged_aiter_shim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAGGED_AITER_SHIM_BWD_ABI_VERSION 2u

/* Status of ragged_aiter_mha_bwd_available / ragged_aiter_mha_bwd (next to the forward's 0..4):
 * libmha_bwd.so could not be opened, or does not export aiter::mha_bwd. */
#define RAGGED_AITER_LIBRARY_MISSING 5
/* AITER asked its workspace allocator for more device scratch than aiter_workspace_bytes; the
 * request is refused before AITER enqueues anything. */
#define RAGGED_AITER_WORKSPACE_TOO_SMALL 6

/* The C++ symbol the shim resolves in libmha_bwd.so (Itanium mangling of
 * float aiter::mha_bwd(aiter::mha_bwd_args, const ck_tile::stream_config&)). */
#define RAGGED_AITER_MHA_BWD_SYMBOL "_ZN5aiter7mha_bwdENS_12mha_bwd_argsERKN7ck_tile13stream_configE"

typedef struct ragged_aiter_bwd_args {
    uint32_t struct_size; /* sizeof(ragged_aiter_bwd_args) as the caller sees it */
    int32_t data_type;    /* RAGGED_AITER_DTYPE_* (Q, K, V, O, dO, dQ, dK, dV share it) */

    const void* q_ptr;  /* [total_q, nhead_q, hdim_q] */
    const void* k_ptr;  /* [total_k, nhead_k, hdim_q] */
    const void* v_ptr;  /* [total_k, nhead_k, hdim_v] */
    const void* o_ptr;  /* [total_q, nhead_q, hdim_v]: the forward's output */
    const void* do_ptr; /* [total_q, nhead_q, hdim_v] */
    /* fp32 [nhead_q, seqlen_q], row (h, seqstart_q[b] + i): the forward's natural-log LSE in
     * AITER's group layout (the engine's LSE pre-pass writes it; a row with no admitted key
     * holds +inf there, so that AITER's exp(s - lse) is 0 instead of NaN). */
    const void* lse_ptr;
    void* d_ptr;  /* fp32 [nhead_q, seqlen_q] scratch, same layout: AITER writes rowsum(dO * O) */
    void* dq_ptr; /* [total_q, nhead_q, hdim_q] */
    void* dk_ptr; /* [total_k, nhead_k, hdim_q] */
    void* dv_ptr; /* [total_k, nhead_k, hdim_v] */

    const int32_t* seqstart_q_ptr;  /* [batch + 1] physical token starts */
    const int32_t* seqstart_k_ptr;  /* [batch + 1] physical token starts */
    const int32_t* cu_seqlen_q_ptr; /* [batch + 1] cumulative logical lengths, or NULL */
    const int32_t* cu_seqlen_k_ptr; /* [batch + 1] cumulative logical lengths, or NULL */
    void* stream;                   /* hipStream_t */

    int32_t batch;
    int32_t max_seqlen_q; /* upper bound of any batch's query rows */
    int32_t max_seqlen_k; /* upper bound of any batch's key rows */
    int32_t seqlen_q;     /* upper bound of total query rows (B * S_q_max) */
    int32_t seqlen_k;     /* upper bound of total key rows (B * S_kv_max) */
    int32_t hdim_q;
    int32_t hdim_v;
    int32_t nhead_q;
    int32_t nhead_k;

    int32_t stride_q; /* elements between tokens */
    int32_t stride_k;
    int32_t stride_v;
    int32_t stride_o;
    int32_t stride_do;
    int32_t stride_dq;
    int32_t stride_dk;
    int32_t stride_dv;
    int32_t nhead_stride_q; /* elements between heads */
    int32_t nhead_stride_k;
    int32_t nhead_stride_v;
    int32_t nhead_stride_o;
    int32_t nhead_stride_do;
    int32_t nhead_stride_dq;
    int32_t nhead_stride_dk;
    int32_t nhead_stride_dv;
    int32_t nhead_stride_lsed; /* of lse_ptr and d_ptr: seqlen_q */

    int32_t mask_type;         /* RAGGED_AITER_MASK_* */
    int32_t window_size_left;  /* -1: unbounded */
    int32_t window_size_right; /* -1: unbounded; causal is 0 */
    float scale;

    int32_t use_asm_v3;       /* 0 or 1: let AITER try its asm fmha_v3 backward first */
    int32_t v3_atomic_fp32;   /* 0 or 1: asm dQ accumulates in fp32 atomics */
    int32_t v3_bf16_cvt;      /* 0: round to nearest even (gfx942 asm only) */
    int32_t is_deterministic; /* 0 or 1: AITER skips its asm backward and runs CK's
                               * deterministic kernels (one writer per dQ split, splits
                               * reduced in order) */

    /* Device scratch for AITER's own workspace requests (mha_bwd_args::workspace_alloc: CK's
     * host-packed metadata and per-split dQ accumulators), carved out of the caller's workspace
     * in call order, each block 256-byte aligned; a request that does not fit fails the call
     * with RAGGED_AITER_WORKSPACE_TOO_SMALL. NULL only with aiter_workspace_bytes == 0. */
    void* aiter_workspace_ptr;
    uint64_t aiter_workspace_bytes;
} ragged_aiter_bwd_args;

/* RAGGED_AITER_SHIM_BWD_ABI_VERSION of the header the shim was compiled with. */
uint32_t ragged_aiter_shim_bwd_abi_version(void);

/* Opens libmha_bwd.so and resolves RAGGED_AITER_MHA_BWD_SYMBOL once per process: RAGGED_AITER_OK,
 * or RAGGED_AITER_LIBRARY_MISSING with the reason ("libmha_bwd.so not found at ...", "symbol
 * aiter::mha_bwd absent from ...") in ragged_aiter_shim_last_error. Launches nothing. On OK,
 * `where` (when not NULL) receives the library's path, truncated to where_size bytes. */
int32_t ragged_aiter_mha_bwd_available(char* where, uint32_t where_size);

/* Enqueues aiter::mha_bwd in group mode on args->stream; never synchronizes and allocates no
 * device memory. AITER's own device scratch comes from aiter_workspace_ptr (zeroed on
 * args->stream when AITER asks); its pinned host buffers from a shim-owned pool. Returns
 * RAGGED_AITER_UNSUPPORTED when AITER finds no kernel (mha_bwd < 0). */
int32_t ragged_aiter_mha_bwd(const ragged_aiter_bwd_args* args);

#ifdef __cplusplus
}
#endif

#endif /* RAGGED_AITER_SHIM_BWD_H */
