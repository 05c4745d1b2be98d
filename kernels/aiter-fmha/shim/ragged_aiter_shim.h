/*
 * C ABI between the ragged-SDPA hipDNN plugin (Rust) and AITER's C++ FMHA forward.
 *
 * AITER exposes attention only as C++ (`aiter::mha_fwd(mha_fwd_args, ck_tile::stream_config)`,
 * csrc/include/mha_fwd.h), whose argument struct holds std::string and std::variant. This
 * header is the plain-C contract of the shim that bridges the two: fixed-width fields only,
 * natural alignment, no implicit padding before the tail. The Rust mirror is
 * kernels/aiter-fmha/src/shim_abi.rs; a unit test compiles this header with the system C compiler and
 * compares every offset. Change both together and bump RAGGED_AITER_SHIM_ABI_VERSION; fields are
 * only ever appended, and struct_size must equal the shim's sizeof (older layouts are refused).
 *
 * Units follow AITER group mode: strides in elements, token-major rows, int32 everywhere.
 */
#ifndef RAGGED_AITER_SHIM_H
#define RAGGED_AITER_SHIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 3: appended qscale_type and the q/k/v descale pointers (FP8, RAGGED_AITER_DTYPE_FP8BF16). */
#define RAGGED_AITER_SHIM_ABI_VERSION 3u

/* data_type */
#define RAGGED_AITER_DTYPE_FP16 0
#define RAGGED_AITER_DTYPE_BF16 1
/* FP8 Q/K/V (e4m3fnuz on gfx942, OCP e4m3 on gfx950), bf16 O: AITER's "fp8bf16". Runs only on
 * AITER's asm fmha_v3 kernels; the shim never hands it to CK. */
#define RAGGED_AITER_DTYPE_FP8BF16 2

/* qscale_type: AITER's / CK's quant_scale_enum */
#define RAGGED_AITER_QSCALE_NONE 0
#define RAGGED_AITER_QSCALE_PERTENSOR 1

/* mask_type: AITER's / CK's mask_enum */
#define RAGGED_AITER_MASK_NONE 0
#define RAGGED_AITER_MASK_TOP_LEFT 1
#define RAGGED_AITER_MASK_BOTTOM_RIGHT 2

/* return values of ragged_aiter_mha_fwd */
#define RAGGED_AITER_OK 0
#define RAGGED_AITER_UNSUPPORTED 1 /* aiter::mha_fwd returned < 0: no kernel for these args */
#define RAGGED_AITER_BAD_ARGS 2    /* null args or struct_size mismatch */
#define RAGGED_AITER_EXCEPTION 3   /* a C++ exception was caught; see ragged_aiter_shim_last_error */
/* AITER would pick an asm kernel whose .co file it cannot read ($AITER_ASM_DIR unset, or the file
 * missing): aiter::mha_fwd would call std::abort(), so the shim does not call it. */
#define RAGGED_AITER_KERNEL_FILE_MISSING 4

typedef struct ragged_aiter_fwd_args {
    uint32_t struct_size; /* sizeof(ragged_aiter_fwd_args) as the caller sees it */
    int32_t data_type;    /* RAGGED_AITER_DTYPE_* */

    const void* q_ptr; /* [total_q, nhead_q, hdim_q] */
    const void* k_ptr; /* [total_k, nhead_k, hdim_q] */
    const void* v_ptr; /* [total_k, nhead_k, hdim_v] */
    void* o_ptr;       /* [total_q, nhead_q, hdim_v] */
    void* lse_ptr;     /* fp32 [nhead_q, seqlen_q] scratch, or NULL when has_lse == 0 */

    const int32_t* seqstart_q_ptr;  /* [batch + 1] physical token starts */
    const int32_t* seqstart_k_ptr;  /* [batch + 1] physical token starts */
    const int32_t* cu_seqlen_q_ptr; /* [batch + 1] cumulative logical lengths, or NULL */
    const int32_t* cu_seqlen_k_ptr; /* [batch + 1] cumulative logical lengths, or NULL */
    void* stream;                   /* hipStream_t */

    int32_t batch;
    int32_t max_seqlen_q; /* upper bound of any batch's query rows */
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
    int32_t nhead_stride_q; /* elements between heads */
    int32_t nhead_stride_k;
    int32_t nhead_stride_v;
    int32_t nhead_stride_o;
    int32_t nhead_stride_lse;

    int32_t mask_type;         /* RAGGED_AITER_MASK_* */
    int32_t window_size_left;  /* -1: unbounded */
    int32_t window_size_right; /* -1: unbounded; causal is 0 */
    float scale_s;

    int32_t has_lse;         /* 0 or 1 */
    int32_t use_asm_v3;      /* 0 or 1: let AITER try its asm fmha_v3 kernels first */
    int32_t v3_api_check;    /* 0 or 1: only ask whether asm would run; launches nothing */
    int32_t how_v3_bf16_cvt; /* 0: round to nearest even (gfx942 asm only); AITER's gfx942
                                fp8bf16 rows are listed under 1 only */

    /* ABI 3. RAGGED_AITER_QSCALE_PERTENSOR exactly when data_type is FP8BF16, else NONE. */
    int32_t qscale_type;
    /* Device fp32 [1] each (per-tensor descales, read by the kernel on the stream), non-NULL
     * exactly when data_type is FP8BF16. */
    const float* q_descale_ptr;
    const float* k_descale_ptr;
    const float* v_descale_ptr;
} ragged_aiter_fwd_args;

/* RAGGED_AITER_SHIM_ABI_VERSION of the header the shim was compiled with. */
uint32_t ragged_aiter_shim_abi_version(void);

/* The GPU targets the shim and libmha_fwd.so were built for, e.g. "gfx942;gfx950". */
const char* ragged_aiter_shim_gpu_targets(void);

/* Enqueues aiter::mha_fwd in group mode on args->stream; never synchronizes. With
 * v3_api_check = 1 it launches nothing and returns RAGGED_AITER_OK iff asm would run. Runs the
 * preflight's file check first, so a missing .co is RAGGED_AITER_KERNEL_FILE_MISSING, not an
 * abort. */
int32_t ragged_aiter_mha_fwd(const ragged_aiter_fwd_args* args);

/* Answers, launching nothing and reading no pointer in args, whether ragged_aiter_mha_fwd(args)
 * would reach a kernel: RAGGED_AITER_OK when AITER's asm fmha_v3 would run and the .co file it
 * will open ($AITER_ASM_DIR/<arch>/<table co_name>) is readable, or when asm is not chosen and the
 * shim was built with CK; RAGGED_AITER_KERNEL_FILE_MISSING or RAGGED_AITER_UNSUPPORTED (no
 * kernel on any path) otherwise, with the reason in ragged_aiter_shim_last_error. On
 * RAGGED_AITER_OK, `choice` (when not NULL) receives a NUL-terminated description of the path,
 * e.g. "asm _ZN5aiter...E from /opt/aiter/hsa/gfx942/fmha_v3_fwd/MI300/fwd_....co" or "ck",
 * truncated to choice_size bytes. */
int32_t ragged_aiter_mha_fwd_preflight(const ragged_aiter_fwd_args* args, char* choice,
                                       uint32_t choice_size);

/* Message of the last failure on this thread ("" if none); valid until the next call. */
const char* ragged_aiter_shim_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* RAGGED_AITER_SHIM_H */
