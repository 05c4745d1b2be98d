// Part of kernels/cuda-fmha/cuda/ragged_paged_decode.cu (the sequence record, lengths, the sink
// arithmetic shared by the split and combine kernels); included in that file's order, not on its own.

#define RAGGED_POS_INF __int_as_float(0x7f800000u)
#define RAGGED_LOG2E 1.4426950408889634f
#define RAGGED_LN2 0.6931471805599453f

// Warps per block of the split kernel and of the combine kernel.
#define RAGGED_PAGED_NW 4
// Keys whose page ids one window of the split kernel holds in shared memory (a multiple of 16).
#define RAGGED_PAGED_WINDOW 2048

// One sequence as the split kernel resolved it, for the combine kernel: 24 bytes, 8-byte aligned.
struct PagedSeq {
    i64 row0;   // first Q / O row of the sequence: packed Q sum_{c<b} Lq(c), padded Q 0
    int lq;     // Lq(b) clamped into the sequence's rows
    int lkv;    // Lkv(b) clamped into [0, max_seq_len_kv]
    int valid;  // 0 when a page-table entry the sequence reads lies outside its pool
    int unused;
};

// Entries of one table a window of RAGGED_PAGED_WINDOW keys can touch at page size ps (the host
// sizes the shared memory with the same formula).
__host__ __device__ constexpr int paged_ids_cap(int ps) { return RAGGED_PAGED_WINDOW / ps + 2; }

__device__ __forceinline__ i64 paged_length(const void* p, int bytes, int b) {
    return bytes == 8 ? ((const i64*)p)[b] : (i64)((const int*)p)[b];
}

__device__ __forceinline__ i64 paged_clamp(i64 x, i64 hi) { return x < 0 ? 0 : (x > hi ? hi : x); }

// The finished row from its keys' base-2 max mk (-inf: no admitted key), their sum lk of
// 2^(x - mk) and the sink in base 2 (-inf: none), paged-kv-and-sinks.md §6.2-§6.4: the factor that
// turns sum_j 2^(x_j - mk) V_j into O, and the natural-log LSE. The max includes the sink; an
// empty row gives O = 0 and LSE = sink (-inf without one); a sink of +inf gives O = 0, LSE = +inf;
// a NaN sink propagates.
__device__ __forceinline__ void paged_finish(float mk, float lk, float sink2, float* o_scale, float* lse_nat) {
    const float mm = sink2 != sink2 ? sink2 : fmaxf(mk, sink2);
    if (mm == RAGGED_NEG_INF || mm == RAGGED_POS_INF) {
        *o_scale = 0.f;
        *lse_nat = mm;
        return;
    }
    const float a = mk == RAGGED_NEG_INF ? 0.f : fast_exp2(mk - mm);
    const float den = lk * a + (sink2 == RAGGED_NEG_INF ? 0.f : fast_exp2(sink2 - mm));
    *o_scale = a / den;
    *lse_nat = (mm + log2f(den)) * RAGGED_LN2;
}

__device__ __forceinline__ float paged_sink2(const float* sinks, i64 stride, int h) {
    return sinks != 0 ? sinks[(i64)h * stride] * RAGGED_LOG2E : RAGGED_NEG_INF;
}

// Quiet NaN of the element type, for the rows of a sequence with an invalid page id (§5.3).
template <bool BF16>
__device__ __forceinline__ u16 paged_nan() {
    return BF16 ? (u16)0x7FC0 : (u16)0x7E00;
}

template <bool BF16>
__device__ __forceinline__ float paged_to_float(u16 x) {
    if (BF16) return __uint_as_float((u32)x << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x));
    return f;
}

template <bool BF16>
__device__ __forceinline__ u16 paged_from_float(float x) {
    u16 r;
    if (BF16)
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
    else
        asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}
