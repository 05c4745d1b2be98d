// Ragged (varlen) fused multi-head attention, forward pass, for NVIDIA sm_80+ (tuned on sm_90 / H200).
//
// Compiled at run time by NVRTC (verified with NVRTC 13.0, `-arch=sm_90a -std=c++17`). The file
// includes no header, so the caller needs no include path: every half-precision operation is inline
// PTX on raw 16-bit storage. With sm_90a the public entry points use warpgroup MMA (wgmma); with any
// other sm_80+ target they fall back to the mma.sync path, which is always compiled as *_sm80_*.
//
// Semantics: shared/spec/ragged-sdpa.md §1–§5 (hipDNN packed BSHD ragged layout, seq_lens padding,
// GQA, band masks with TOP_LEFT / BOTTOM_RIGHT alignment, LSE, empty key sets give O = 0 and
// LSE = -inf, padding rows never written, K/V rows >= Lkv(b) never read).
//
// Launch sequence per execute (one stream, no host synchronisation):
//   1. ragged_fmha_prepass   <<<1, 1024>>>            offsets -> RaggedBatch[B], tile list, error flag
//   2. ragged_fmha_fwd_<dt>_d<D> <<<B * ceil(S_q_max / BM) * H_q, threads, smem>>>  (NAME_config)
// The forward grid is an upper bound computed from graph dims only; blocks whose rank is beyond the
// tile count written by the pre-pass exit at once. The pre-pass orders tiles by decreasing number
// of key blocks so that the longest work starts first (LPT scheduling over a ragged batch).
// The ABI (parameter order, RaggedBatch layout, tile sizes) is documented in kernels/cuda/README.md.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define RAGGED_NEG_INF __int_as_float(0xff800000u)
#define RAGGED_I64_MAX 0x7fffffffffffffffLL

// Per-batch data shared between the pre-pass and the forward kernel: 32 bytes, 8-byte aligned.
// Token starts (not element offsets) so that Q and O, K and V, may have different sequence strides.
struct RaggedBatch {
    i64 q_tok;     // first token of batch b in Q and O: element_offset_q[b] / seqStride_q
    i64 kv_tok;    // first token of batch b in K and V
    i64 lse_elem;  // element offset of batch b in the LSE buffer (ragged aux or b * batch stride)
    int lq;        // logical query length Lq(b) (seq_len_q clamped into [0, extent])
    int lkv;       // logical key length Lkv(b)
};

// One entry of the tile list: query tile `tile` (rows [tile * BM, tile * BM + BM)) of batch `batch`.
struct RaggedTile {
    int batch;
    int tile;
};

// Error-flag bits written by the pre-pass (the flag is overwritten, not accumulated, per launch).
// A batch with any offset error is treated as empty: the forward kernel writes nothing for it.
#define RAGGED_ERR_FIRST_NONZERO 1u   // offset[0] != 0
#define RAGGED_ERR_DECREASING 2u      // offset[b+1] < offset[b]
#define RAGGED_ERR_PARTIAL_ROW 4u     // (offset[b+1] - offset[b]) % seqStride != 0
#define RAGGED_ERR_EXTENT 8u          // extent(b) > S_max
#define RAGGED_ERR_OVERFLOW 16u       // stored * multiplier overflows int64
#define RAGGED_ERR_Q_SHIFT 0          // bits 0..4: Q/O offsets
#define RAGGED_ERR_KV_SHIFT 8         // bits 8..12: K/V offsets
#define RAGGED_ERR_SEQ_LEN_Q 0x10000u   // seq_len_q[b] outside [0, extent_q(b)] (clamped)
#define RAGGED_ERR_SEQ_LEN_KV 0x20000u  // seq_len_kv[b] outside [0, extent_kv(b)] (clamped)
#define RAGGED_ERR_LSE_SHIFT 24       // bits 24..28: ragged LSE offsets (first-nonzero, decreasing, overflow)

// ---------------------------------------------------------------------------------------------
// Mask band (schema.md §6.1): key j is admitted for query i iff j < Lkv and
// (right < 0 or j <= i + off + right) and (left < 0 or j >= i + off - left),
// with off = 0 (TOP_LEFT) or Lkv - Lq (BOTTOM_RIGHT).
// ---------------------------------------------------------------------------------------------

struct RaggedBand {
    i64 off;
    int left;
    int right;
    int lkv;

    __device__ __forceinline__ bool admits(int i, int j) const {
        if (j >= lkv) return false;
        if (right >= 0 && (i64)j > (i64)i + off + right) return false;
        if (left >= 0 && (i64)j < (i64)i + off - left) return false;
        return true;
    }
};

__device__ __forceinline__ RaggedBand make_band(int lq, int lkv, int left, int right, int bottom_right) {
    RaggedBand band;
    band.off = bottom_right ? (i64)lkv - (i64)lq : 0;
    band.left = left;
    band.right = right;
    band.lkv = lkv;
    return band;
}

// Key blocks [*first, *last) that hold at least one admitted key for some row of
// [i0, i0 + rows). Shared by the pre-pass (tile cost) and the forward kernel (loop bounds), so the
// schedule and the work can never disagree.
__device__ __forceinline__ void key_block_range(const RaggedBand& band, int i0, int rows, int block_n,
                                                int* first, int* last) {
    i64 i_last = (i64)i0 + rows - 1;
    i64 j_end = band.lkv;
    if (band.right >= 0) {
        i64 bound = i_last + band.off + band.right + 1;
        j_end = bound < j_end ? bound : j_end;
    }
    i64 j_begin = 0;
    if (band.left >= 0) {
        i64 bound = (i64)i0 + band.off - band.left;
        j_begin = bound > 0 ? bound : 0;
    }
    if (rows <= 0 || j_end <= j_begin) {
        *first = 0;
        *last = 0;
        return;
    }
    *first = (int)(j_begin / block_n);
    *last = (int)((j_end + block_n - 1) / block_n);
}

// ---------------------------------------------------------------------------------------------
// Pre-pass: one block of 1024 threads.
// ---------------------------------------------------------------------------------------------

#define RAGGED_PREPASS_THREADS 1024
#define RAGGED_COST_BUCKETS 2048

__device__ __forceinline__ i64 ragged_load_int(const void* p, int bytes, i64 idx) {
    return bytes == 8 ? ((const i64*)p)[idx] : (i64)((const int*)p)[idx];
}

// Element offsets of batch b ([*lo, *hi)) from a ragged aux tensor; returns error bits (unshifted).
__device__ __forceinline__ u32 ragged_batch_range(const void* off, int bytes, i64 mult, int b, i64* lo, i64* hi) {
    u32 err = 0;
    i64 a = ragged_load_int(off, bytes, b);
    i64 c = ragged_load_int(off, bytes, b + 1);
    i64 lim = RAGGED_I64_MAX / (mult > 0 ? mult : 1);
    if (a > lim || a < -lim || c > lim || c < -lim) {
        err |= RAGGED_ERR_OVERFLOW;
        a = 0;
        c = 0;
    }
    *lo = a * mult;
    *hi = c * mult;
    if (b == 0 && *lo != 0) err |= RAGGED_ERR_FIRST_NONZERO;
    if (*hi < *lo) err |= RAGGED_ERR_DECREASING;
    return err;
}

// Token start and extent of batch b; returns error bits (unshifted).
__device__ __forceinline__ u32 ragged_tokens(const void* off, int bytes, i64 mult, i64 seq_stride, int s_max, int b,
                                             i64* tok, int* extent) {
    i64 lo, hi;
    u32 err = ragged_batch_range(off, bytes, mult, b, &lo, &hi);
    *tok = 0;
    *extent = 0;
    if (err) return err;
    i64 delta = hi - lo;
    if (lo % seq_stride != 0 || delta % seq_stride != 0) return RAGGED_ERR_PARTIAL_ROW;
    if (delta / seq_stride > s_max) return RAGGED_ERR_EXTENT;
    *tok = lo / seq_stride;
    *extent = (int)(delta / seq_stride);
    return 0;
}

__device__ __forceinline__ int ragged_logical_len(const void* seq_lens, int bytes, int b, int extent, u32* err,
                                                  u32 bit) {
    if (seq_lens == 0) return extent;
    i64 v = ragged_load_int(seq_lens, bytes, b);
    if (v < 0 || v > extent) {
        *err |= bit;
        return v < 0 ? 0 : extent;
    }
    return (int)v;
}

__device__ __forceinline__ int ragged_tile_cost(const RaggedBatch& bt, int t, int block_m, int block_n, int left,
                                                int right, int bottom_right) {
    RaggedBand band = make_band(bt.lq, bt.lkv, left, right, bottom_right);
    int i0 = t * block_m;
    int rows = bt.lq - i0 < block_m ? bt.lq - i0 : block_m;
    int first, last;
    key_block_range(band, i0, rows, block_n, &first, &last);
    int cost = last - first;
    return cost < RAGGED_COST_BUCKETS - 1 ? cost : RAGGED_COST_BUCKETS - 1;
}

extern "C" __global__ void __launch_bounds__(RAGGED_PREPASS_THREADS)
ragged_fmha_prepass(const void* q_off, int q_off_bytes, i64 q_mult, i64 q_seq_stride, int s_q_max,
                    const void* kv_off, int kv_off_bytes, i64 kv_mult, i64 kv_seq_stride, int s_kv_max,
                    const void* seq_len_q, int seq_len_q_bytes, const void* seq_len_kv, int seq_len_kv_bytes,
                    const void* lse_off, int lse_off_bytes, i64 lse_mult, i64 lse_batch_stride, int batch,
                    int block_m, int block_n, int mask_left, int mask_right, int bottom_right,
                    RaggedBatch* batches, RaggedTile* tiles, int* tile_count, u32* err_flag) {
    __shared__ int base[RAGGED_COST_BUCKETS];
    __shared__ int warp_total[RAGGED_PREPASS_THREADS / 32];
    __shared__ u32 s_err;
    const int tid = threadIdx.x;
    if (tid == 0) s_err = 0;
    for (int i = tid; i < RAGGED_COST_BUCKETS; i += RAGGED_PREPASS_THREADS) base[i] = 0;

    u32 err = 0;
    for (int b = tid; b < batch; b += RAGGED_PREPASS_THREADS) {
        RaggedBatch bt;
        int ext_q, ext_kv;
        u32 eq = ragged_tokens(q_off, q_off_bytes, q_mult, q_seq_stride, s_q_max, b, &bt.q_tok, &ext_q);
        u32 ekv = ragged_tokens(kv_off, kv_off_bytes, kv_mult, kv_seq_stride, s_kv_max, b, &bt.kv_tok, &ext_kv);
        err |= (eq << RAGGED_ERR_Q_SHIFT) | (ekv << RAGGED_ERR_KV_SHIFT);
        bt.lq = ragged_logical_len(seq_len_q, seq_len_q_bytes, b, ext_q, &err, RAGGED_ERR_SEQ_LEN_Q);
        bt.lkv = ragged_logical_len(seq_len_kv, seq_len_kv_bytes, b, ext_kv, &err, RAGGED_ERR_SEQ_LEN_KV);
        if (lse_off != 0) {
            i64 lo, hi;
            u32 el = ragged_batch_range(lse_off, lse_off_bytes, lse_mult, b, &lo, &hi);
            err |= el << RAGGED_ERR_LSE_SHIFT;
            bt.lse_elem = lo;
            if (el) bt.lq = 0;
        } else {
            bt.lse_elem = (i64)b * lse_batch_stride;
        }
        if (eq || ekv) {
            bt.lq = 0;
            bt.lkv = 0;
        }
        batches[b] = bt;
    }
    __syncthreads();
    if (err) atomicOr(&s_err, err);

    // Histogram of tile costs (number of key blocks), then a descending scan gives each cost
    // bucket its first slot in the tile list: a counting sort, longest tiles first.
    const int max_tiles = (s_q_max + block_m - 1) / block_m;
    const i64 flat = (i64)batch * max_tiles;
    for (i64 idx = tid; idx < flat; idx += RAGGED_PREPASS_THREADS) {
        int b = (int)(idx / max_tiles);
        int t = (int)(idx - (i64)b * max_tiles);
        RaggedBatch bt = batches[b];
        if (t * block_m < bt.lq)
            atomicAdd(&base[ragged_tile_cost(bt, t, block_m, block_n, mask_left, mask_right, bottom_right)], 1);
    }
    __syncthreads();

    // Each thread owns two buckets in descending order: 2*tid and 2*tid+1 counted from the top.
    const int hi_bucket = RAGGED_COST_BUCKETS - 1 - 2 * tid;
    const int v0 = base[hi_bucket];
    const int v1 = base[hi_bucket - 1];
    int incl = v0 + v1;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    for (int d = 1; d < 32; d <<= 1) {
        int n = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += n;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = warp_total[lane];
        int wi = w;
        for (int d = 1; d < 32; d <<= 1) {
            int n = __shfl_up_sync(0xffffffffu, wi, d);
            if (lane >= d) wi += n;
        }
        warp_total[lane] = wi - w;  // exclusive prefix over warps
    }
    __syncthreads();
    const int excl = warp_total[warp] + incl - (v0 + v1);
    base[hi_bucket] = excl;
    base[hi_bucket - 1] = excl + v0;
    if (tid == RAGGED_PREPASS_THREADS - 1) *tile_count = excl + v0 + v1;
    __syncthreads();

    for (i64 idx = tid; idx < flat; idx += RAGGED_PREPASS_THREADS) {
        int b = (int)(idx / max_tiles);
        int t = (int)(idx - (i64)b * max_tiles);
        RaggedBatch bt = batches[b];
        if (t * block_m < bt.lq) {
            int c = ragged_tile_cost(bt, t, block_m, block_n, mask_left, mask_right, bottom_right);
            int pos = atomicAdd(&base[c], 1);
            RaggedTile entry;
            entry.batch = b;
            entry.tile = t;
            tiles[pos] = entry;
        }
    }
    if (tid == 0) *err_flag = s_err;
}

// ---------------------------------------------------------------------------------------------
// Warp-level building blocks (inline PTX, sm_80+).
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16-byte async copy; when !pred nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool pred) {
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two floats to a packed pair, round to nearest even; `lo` lands at the lower address.
template <bool BF16>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    if (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Byte offset of the 16-byte chunk c of row r in a [rows][D] tile: the chunk index is XORed with
// the row's low three bits, so ldmatrix (8 rows, one chunk) and the row-wise cp.async stores both
// touch 8 distinct 16-byte bank groups.
template <int D>
__device__ __forceinline__ u32 swz(int r, int c) {
    return (u32)(r * D * 2 + ((c ^ (r & 7)) << 4));
}

// Async copy of `ROWS` rows (row stride `stride` elements) into a swizzled tile; rows >= valid are
// zero-filled without being read (`safe` is any mapped address, never dereferenced).
template <int D, int ROWS, int NT>
__device__ __forceinline__ void load_tile(u32 s_base, const u16* g, i64 stride, int valid, const u16* safe) {
    constexpr int CH = D / 8;
#pragma unroll
    for (int it = 0; it < (ROWS * CH + NT - 1) / NT; ++it) {
        int idx = it * NT + (int)threadIdx.x;
        if ((ROWS * CH) % NT == 0 || idx < ROWS * CH) {
            int r = idx / CH;
            int c = idx % CH;
            bool p = r < valid;
            const u16* src = p ? g + (i64)r * stride + c * 8 : safe;
            cp_async16(s_base + swz<D>(r, c), src, p);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forward kernel: one block = one (query tile of BM rows, query head). NW warps, each owning
// MT = BM / (16 NW) row groups of 16. S = Q K^T and O += P V through mma.sync m16n8k16 with fp32
// accumulators; online softmax in registers (base-2 exponent, scale folded in); K and V double
// buffered through cp.async so the next block's loads overlap this block's math.
// ---------------------------------------------------------------------------------------------

#define RAGGED_FMHA_PARAMS                                                                                        \
    const u16 *__restrict__ q, const u16 *__restrict__ k, const u16 *__restrict__ v, u16 *__restrict__ o,         \
        float *__restrict__ lse, const RaggedBatch *__restrict__ batches, const RaggedTile *__restrict__ tiles,         \
        const int *__restrict__ tile_count, i64 q_seq, i64 q_head, i64 k_seq, i64 k_head, i64 v_seq, i64 v_head, \
        i64 o_seq, i64 o_head, i64 lse_seq, i64 lse_head, int h_q, int h_kv, float scale, int mask_left,        \
        int mask_right, int bottom_right
#define RAGGED_FMHA_ARGS                                                                                       \
    q, k, v, o, lse, batches, tiles, tile_count, q_seq, q_head, k_seq, k_head, v_seq, v_head, o_seq, o_head, \
        lse_seq, lse_head, h_q, h_kv, scale, mask_left, mask_right, bottom_right

// What one forward block works on, shared by the mma.sync and the wgmma bodies: block x is work
// item x / H_q (a query tile of BM rows of one batch) for query head x % H_q; GQA head g serves
// H_q / H_kv query heads. The key-block range comes from the same key_block_range the pre-pass
// costed the tile with. A macro rather than a function filling a struct: the struct version
// (measured on the H200, bench/gpu/NOTES.md) cost 6-10 % on causal problems, because the band and
// batch record no longer stayed in registers across the key loop. Declares, in the body's scope:
// h, bt, i0, rows, band, nb_first, nb_last, qp, kp, vp; returns from the body past the pre-pass's
// tile count.
#define RAGGED_FMHA_BLOCK_PROLOGUE(BM, BN)                                                       \
    const int rank = blockIdx.x / h_q;                                                           \
    const int h = blockIdx.x - rank * h_q;                                                       \
    if (rank >= *tile_count) return;                                                             \
    const RaggedTile tile = tiles[rank];                                                         \
    const RaggedBatch bt = batches[tile.batch];                                                  \
    const int i0 = tile.tile * (BM);                                                             \
    const int rows = bt.lq - i0 < (BM) ? bt.lq - i0 : (BM);                                      \
    const int g = h / (h_q / h_kv);                                                              \
    const RaggedBand band = make_band(bt.lq, bt.lkv, mask_left, mask_right, bottom_right);       \
    int nb_first, nb_last;                                                                       \
    key_block_range(band, i0, rows, (BN), &nb_first, &nb_last);                                  \
    const u16* qp = q + (bt.q_tok + i0) * q_seq + (i64)h * q_head;                               \
    const u16* kp = k + bt.kv_tok * k_seq + (i64)g * k_head;                                     \
    const u16* vp = v + bt.kv_tok * v_seq + (i64)g * v_head

// Copies the first `rows` rows of the normalised O tile, staged in shared memory in the swz<D>
// layout at s_tile, to global memory at op (row stride o_seq) with 16-byte stores.
template <int D, int BM, int NT>
__device__ __forceinline__ void store_o_tile(u32 s_tile, u16* op, i64 o_seq, int rows) {
    constexpr int CH = D / 8;
    const int tid = threadIdx.x;
#pragma unroll
    for (int it = 0; it < (BM * CH + NT - 1) / NT; ++it) {
        int idx = it * NT + tid;
        int r = idx / CH;
        int c = idx % CH;
        if (idx < BM * CH && r < rows) {
            u32 x0, x1, x2, x3;
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                         : "r"(s_tile + swz<D>(r, c)));
            u16* dst = op + (i64)r * o_seq + c * 8;
            asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"l"(dst), "r"(x0), "r"(x1), "r"(x2), "r"(x3)
                         : "memory");
        }
    }
}

template <bool BF16, int D, int BM, int BN, int NW>
__device__ __forceinline__ void fmha_fwd_body(RAGGED_FMHA_PARAMS) {
    constexpr int NT = NW * 32;
    constexpr int MT = BM / (16 * NW);
    static_assert(MT >= 1 && MT * 16 * NW == BM, "BM must be a multiple of 16 * NW");
    static_assert(D % 16 == 0 && BN % 16 == 0, "tile shapes");
    constexpr int KS = D / 16;   // k-steps of Q K^T
    constexpr int NS = BN / 8;   // key n-tiles of S
    constexpr int DT = D / 8;    // head-dim n-tiles of O
    constexpr bool Q_IN_REGS = MT == 1;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = smem_addr(smem_raw);
    const u32 s_k = s_q + BM * D * 2;
    const u32 s_v = s_k + 2 * BN * D * 2;

    RAGGED_FMHA_BLOCK_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int lg = lane >> 2;  // row within an 8-row group of the mma fragment
    const int lt = lane & 3;   // column pair within the fragment
    const float sl2 = scale * 1.4426950408889634f;

    float acc[MT][DT][4];
    float m_i[MT][2];
    float l_i[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.f;
        m_i[mt][0] = m_i[mt][1] = RAGGED_NEG_INF;
        l_i[mt][0] = l_i[mt][1] = 0.f;
    }
    u32 qf[Q_IN_REGS ? KS : 1][4];

    if (nb_first < nb_last) {
        load_tile<D, BM, NT>(s_q, qp, q_seq, rows, q);
        {
            int j0 = nb_first * BN;
            load_tile<D, BN, NT>(s_k, kp + (i64)j0 * k_seq, k_seq, bt.lkv - j0, k);
            cp_async_commit();
            load_tile<D, BN, NT>(s_v, vp + (i64)j0 * v_seq, v_seq, bt.lkv - j0, v);
            cp_async_commit();
        }

#pragma unroll 1
        for (int nb = nb_first; nb < nb_last; ++nb) {
            const int buf = (nb - nb_first) & 1;
            const u32 kb = s_k + buf * (BN * D * 2);
            const u32 vb = s_v + buf * (BN * D * 2);
            cp_async_wait<1>();
            __syncthreads();
            if (nb + 1 < nb_last) {
                int j1 = (nb + 1) * BN;
                load_tile<D, BN, NT>(s_k + (buf ^ 1) * (BN * D * 2), kp + (i64)j1 * k_seq, k_seq, bt.lkv - j1, k);
            }
            cp_async_commit();

            if (Q_IN_REGS && nb == nb_first) {
#pragma unroll
                for (int ks = 0; ks < KS; ++ks) {
                    int r = warp * 16 + (lane & 15);
                    ldsm_x4(s_q + swz<D>(r, ks * 2 + (lane >> 4)), qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3]);
                }
            }

            // S = Q K^T
            float s[MT][NS][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                u32 a[MT][4];
                if (Q_IN_REGS) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[0][e] = qf[Q_IN_REGS ? ks : 0][e];
                } else {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        int r = (warp * MT + mt) * 16 + (lane & 15);
                        ldsm_x4(s_q + swz<D>(r, ks * 2 + (lane >> 4)), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
                    }
                }
#pragma unroll
                for (int np = 0; np < NS / 2; ++np) {
                    u32 b0, b1, b2, b3;
                    int r = np * 16 + (lane & 7) + ((lane >> 4) << 3);
                    ldsm_x4(kb + swz<D>(r, ks * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma16816<BF16>(s[mt][2 * np], a[mt], b0, b1);
                        mma16816<BF16>(s[mt][2 * np + 1], a[mt], b2, b3);
                    }
                }
            }

            // Scale into the base-2 domain; mask only the blocks that cut the band or Lkv.
            const int j0 = nb * BN;
            const int i_last = i0 + rows - 1;
            const bool full = j0 + BN - 1 < bt.lkv &&
                              (band.right < 0 || (i64)j0 + BN - 1 <= (i64)i0 + band.off + band.right) &&
                              (band.left < 0 || (i64)j0 >= (i64)i_last + band.off - band.left);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int rbase = i0 + (warp * MT + mt) * 16 + lg;
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float x = s[mt][nt][e] * sl2;
                        if (!full) {
                            int i = rbase + ((e >> 1) << 3);
                            int j = j0 + nt * 8 + 2 * lt + (e & 1);
                            if (!band.admits(i, j)) x = RAGGED_NEG_INF;
                        }
                        s[mt][nt][e] = x;
                    }
            }

            // Online softmax: rows lg and lg + 8 of each row group; a quad of lanes shares a row.
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    float mx = m_i[mt][hr];
#pragma unroll
                    for (int nt = 0; nt < NS; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    // A row with nothing admitted yet keeps max -inf; exponentiate against 0 so
                    // that every p is exp2(-inf) = 0 instead of NaN.
                    const float mu = mx == RAGGED_NEG_INF ? 0.f : mx;
                    const float corr = fast_exp2(m_i[mt][hr] - mu);
                    m_i[mt][hr] = mx;
                    float sum = 0.f;
#pragma unroll
                    for (int nt = 0; nt < NS; ++nt) {
                        float p0 = fast_exp2(s[mt][nt][2 * hr] - mu);
                        float p1 = fast_exp2(s[mt][nt][2 * hr + 1] - mu);
                        s[mt][nt][2 * hr] = p0;
                        s[mt][nt][2 * hr + 1] = p1;
                        sum += p0 + p1;
                    }
                    l_i[mt][hr] = l_i[mt][hr] * corr + sum;
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt) {
                        acc[mt][dt][2 * hr] *= corr;
                        acc[mt][dt][2 * hr + 1] *= corr;
                    }
                }

            cp_async_wait<1>();
            __syncthreads();
            if (nb + 1 < nb_last) {
                int j1 = (nb + 1) * BN;
                load_tile<D, BN, NT>(s_v + (buf ^ 1) * (BN * D * 2), vp + (i64)j1 * v_seq, v_seq, bt.lkv - j1, v);
            }
            cp_async_commit();

            // O += P V, P re-packed from the S accumulators as the A operand.
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                u32 a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    a[mt][0] = pack2<BF16>(s[mt][2 * kc][0], s[mt][2 * kc][1]);
                    a[mt][1] = pack2<BF16>(s[mt][2 * kc][2], s[mt][2 * kc][3]);
                    a[mt][2] = pack2<BF16>(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
                    a[mt][3] = pack2<BF16>(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < D / 16; ++dp) {
                    u32 b0, b1, b2, b3;
                    int r = kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    ldsm_x4_t(vb + swz<D>(r, dp * 2 + (lane >> 4)), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma16816<BF16>(acc[mt][2 * dp], a[mt], b0, b1);
                        mma16816<BF16>(acc[mt][2 * dp + 1], a[mt], b2, b3);
                    }
                }
            }
        }
        cp_async_wait<0>();
    }

    // Epilogue: normalise, LSE, stage O through shared memory for 16-byte coalesced stores.
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int rl = (warp * MT + mt) * 16 + lg;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            float l = l_i[mt][hr];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int r = rl + hr * 8;
            if (lse != 0 && lt == 0 && r < rows) {
                float val = l > 0.f ? (m_i[mt][hr] + log2f(l)) * 0.6931471805599453f : RAGGED_NEG_INF;
                lse[bt.lse_elem + (i64)(i0 + r) * lse_seq + (i64)h * lse_head] = val;
            }
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                u32 packed = pack2<BF16>(acc[mt][dt][2 * hr] * inv, acc[mt][dt][2 * hr + 1] * inv);
                u32 addr = s_q + swz<D>(r, dt) + lt * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed) : "memory");
            }
        }
    }
    __syncthreads();
    store_o_tile<D, BM, NT>(s_q, o + (bt.q_tok + i0) * o_seq + (i64)h * o_head, o_seq, rows);
}

// ---------------------------------------------------------------------------------------------
// Hopper path (sm_90a only): warpgroup MMA. A block holds NWG warpgroups of 128 threads, each
// owning 64 query rows; S = Q K^T reads Q and K straight from shared memory, O += P V takes P from
// registers (the S accumulator layout is the A-fragment layout) and V from shared memory as a
// transposed (MN-major) operand. Tiles live in the 128-byte-swizzle canonical layout: the head dim
// is split into 64-element column blocks [D/64][rows][64], each 128-byte row's 16-byte chunks XORed
// with (row & 7), every tile 1024-byte aligned.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// D[64 x 64] (+)= A[64 x 16] (shared, K-major) * B[64 x 16]^T (shared, K-major).
template <bool BF16>
__device__ __forceinline__ void wgmma_ss_n64(float* d, u64 da, u64 db, int accumulate) {
    if (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
            "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(accumulate));
    }
    else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
            "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "r"(accumulate));
    }
}

// D[64 x 128] (+)= A[64 x 16] (shared, K-major) * B[128 x 16]^T (shared, K-major).
template <bool BF16>
__device__ __forceinline__ void wgmma_ss_n128(float* d, u64 da, u64 db, int accumulate) {
    if (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
            "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(accumulate));
    }
    else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
            "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(accumulate));
    }
}

// D[64 x 64] += A[64 x 16] (registers) * B[16 x 64] (shared, MN-major: transposed).
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_n64(float* d, const u32* a, u64 db) {
    if (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
            "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
    else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
            "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
}

// D[64 x 128] += A[64 x 16] (registers) * B[16 x 128] (shared, MN-major: transposed).
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_n128(float* d, const u32* a, u64 db) {
    if (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
            "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
    else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
            "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
}


__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the async MMA boundary.
template <int N>
__device__ __forceinline__ void fence_regs(float* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs_u32(u32* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
// Shared memory written by cp.async (generic proxy) is read by wgmma (async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ u64 sw128_desc(u32 addr, u32 lbo, u32 sbo) {
    u64 d = (u64)((addr & 0x3FFFFu) >> 4);
    d |= (u64)((lbo & 0x3FFFFu) >> 4) << 16;
    d |= (u64)((sbo & 0x3FFFFu) >> 4) << 32;
    d |= (u64)1 << 62;
    return d;
}

template <int ROWS>
__device__ __forceinline__ u32 sw128(int r, int c) {
    return (u32)((((c >> 3) * ROWS + r) << 7) + (((c & 7) ^ (r & 7)) << 4));
}

template <int D, int ROWS, int NT>
__device__ __forceinline__ void load_tile_sw128(u32 s_base, const u16* g, i64 stride, int valid, const u16* safe) {
    constexpr int CH = D / 8;
#pragma unroll
    for (int it = 0; it < (ROWS * CH + NT - 1) / NT; ++it) {
        int idx = it * NT + (int)threadIdx.x;
        if ((ROWS * CH) % NT == 0 || idx < ROWS * CH) {
            int r = idx / CH;
            int c = idx % CH;
            bool p = r < valid;
            const u16* src = p ? g + (i64)r * stride + c * 8 : safe;
            cp_async16(s_base + sw128<ROWS>(r, c), src, p);
        }
    }
}

template <bool BF16, int N>
__device__ __forceinline__ void wgmma_ss(float* d, u64 da, u64 db, int accumulate) {
    if constexpr (N == 64)
        wgmma_ss_n64<BF16>(d, da, db, accumulate);
    else
        wgmma_ss_n128<BF16>(d, da, db, accumulate);
}
template <bool BF16, int N>
__device__ __forceinline__ void wgmma_rs(float* d, const u32* a, u64 db) {
    if constexpr (N == 64)
        wgmma_rs_n64<BF16>(d, a, db);
    else
        wgmma_rs_n128<BF16>(d, a, db);
}

// Mask, online-softmax update and exponentiation of one S block held in wgmma accumulator layout
// (rows row_in_tile and row_in_tile + 8, columns nt * 8 + 2 * lt + {0, 1}). corr[] receives the
// factor by which the running O rows must be rescaled. The running max m_i is kept on unscaled
// scores so that scaling and max subtraction fuse into one FFMA per score; a non-positive scale
// (which reverses the order of the scores) is applied up front instead.
template <int NS>
__device__ __forceinline__ void wgmma_softmax_step(float* s, float* m_i, float* l_i, float* corr,
                                                   const RaggedBand& band, int j0, int bn, int i0, int i_last,
                                                   int row_in_tile, int lt, float sl2) {
    const float f = sl2 > 0.f ? sl2 : 1.f;
    if (!(sl2 > 0.f)) {
#pragma unroll
        for (int i = 0; i < NS * 4; ++i) s[i] *= sl2;
    }
    const bool full = j0 + bn - 1 < band.lkv &&
                      (band.right < 0 || (i64)j0 + bn - 1 <= (i64)i0 + band.off + band.right) &&
                      (band.left < 0 || (i64)j0 >= (i64)i_last + band.off - band.left);
    if (!full) {
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int i = i0 + row_in_tile + ((e >> 1) << 3);
                int j = j0 + nt * 8 + 2 * lt + (e & 1);
                if (!band.admits(i, j)) s[nt * 4 + e] = RAGGED_NEG_INF;
            }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float mx = m_i[hr];
#pragma unroll
        for (int nt = 0; nt < NS; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * hr], s[nt * 4 + 2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // Nothing admitted yet: exponentiate against 0 so every p is exp2(-inf) = 0, never NaN.
        const float mu = mx == RAGGED_NEG_INF ? 0.f : mx;
        const float neg_mu_f = -mu * f;
        corr[hr] = fast_exp2((m_i[hr] - mu) * f);
        m_i[hr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NS; ++nt) {
            float p0 = fast_exp2(fmaf(s[nt * 4 + 2 * hr], f, neg_mu_f));
            float p1 = fast_exp2(fmaf(s[nt * 4 + 2 * hr + 1], f, neg_mu_f));
            s[nt * 4 + 2 * hr] = p0;
            s[nt * 4 + 2 * hr + 1] = p1;
            sum += p0 + p1;
        }
        l_i[hr] = l_i[hr] * corr[hr] + sum;
    }
}

// P (fp32, accumulator layout) -> A-operand registers of the P V product, one k16 chunk per entry.
template <bool BF16, int BN>
__device__ __forceinline__ void wgmma_pack_p(const float* s, u32 (*pa)[4]) {
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
        pa[kc][0] = pack2<BF16>(s[(2 * kc) * 4 + 0], s[(2 * kc) * 4 + 1]);
        pa[kc][1] = pack2<BF16>(s[(2 * kc) * 4 + 2], s[(2 * kc) * 4 + 3]);
        pa[kc][2] = pack2<BF16>(s[(2 * kc + 1) * 4 + 0], s[(2 * kc + 1) * 4 + 1]);
        pa[kc][3] = pack2<BF16>(s[(2 * kc + 1) * 4 + 2], s[(2 * kc + 1) * 4 + 3]);
    }
}

template <bool BF16, int D, int BN, int NWG>
__device__ __forceinline__ void fmha_fwd_wgmma_body(RAGGED_FMHA_PARAMS) {
    constexpr int BM = 64 * NWG;
    constexpr int NT = 128 * NWG;
    constexpr int KS = D / 16;
    constexpr int NS = BN / 8;
    constexpr int DT = D / 8;
    static_assert((D == 64 || D == 128) && (BN == 64 || BN == 128), "wgmma tile shapes");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle pattern repeats every 1024 bytes
    const u32 s_k = s_q + BM * D * 2;
    const u32 s_v = s_k + 2 * BN * D * 2;

    RAGGED_FMHA_BLOCK_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int lane = tid & 31;
    const int row_in_tile = wg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);  // and + 8
    const int lt = lane & 3;
    const float sl2 = scale * 1.4426950408889634f;

    float acc[DT * 4];
    float m_i[2] = {RAGGED_NEG_INF, RAGGED_NEG_INF};
    float l_i[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < DT * 4; ++i) acc[i] = 0.f;

    // Software pipeline (per warpgroup): while the softmax of block n runs on the CUDA cores, the
    // tensor cores finish O += P(n-1) V(n-1), issued together with S(n) = Q K(n)^T. cp.async groups
    // in flight: {Q, K0}, {V0}, then per step {V(n)}, {K(n+1)}.
    if (nb_first < nb_last) {
        load_tile_sw128<D, BM, NT>(s_q, qp, q_seq, rows, q);
        {
            int j0 = nb_first * BN;
            load_tile_sw128<D, BN, NT>(s_k, kp + (i64)j0 * k_seq, k_seq, bt.lkv - j0, k);
            cp_async_commit();
            load_tile_sw128<D, BN, NT>(s_v, vp + (i64)j0 * v_seq, v_seq, bt.lkv - j0, v);
            cp_async_commit();
        }
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        if (nb_first + 1 < nb_last) {
            int j1 = (nb_first + 1) * BN;
            load_tile_sw128<D, BN, NT>(s_k + BN * D * 2, kp + (i64)j1 * k_seq, k_seq, bt.lkv - j1, k);
        }
        cp_async_commit();

        const int i_last = i0 + rows - 1;
        float s[NS * 4];
        u32 pa[BN / 16][4];
        float corr[2];

        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            u64 da = sw128_desc(s_q + (ks >> 2) * (BM * 128) + wg * (64 * 128) + (ks & 3) * 32, 16, 1024);
            u64 db = sw128_desc(s_k + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
            wgmma_ss<BF16, BN>(s, da, db, ks > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<NS * 4>(s);
        wgmma_softmax_step<NS>(s, m_i, l_i, corr, band, nb_first * BN, BN, i0, i_last, row_in_tile, lt, sl2);
        wgmma_pack_p<BF16, BN>(s, pa);

#pragma unroll 1
        for (int nb = nb_first + 1; nb < nb_last; ++nb) {
            const int buf = (nb - nb_first) & 1;
            cp_async_wait<0>();  // K(nb) and V(nb - 1)
            fence_proxy_async();
            __syncthreads();
            {
                int jv = (nb) * BN;
                load_tile_sw128<D, BN, NT>(s_v + buf * (BN * D * 2), vp + (i64)jv * v_seq, v_seq, bt.lkv - jv, v);
                cp_async_commit();
                if (nb + 1 < nb_last) {
                    int jk = (nb + 1) * BN;
                    load_tile_sw128<D, BN, NT>(s_k + (buf ^ 1) * (BN * D * 2), kp + (i64)jk * k_seq, k_seq,
                                               bt.lkv - jk, k);
                }
                cp_async_commit();
            }
            const u32 kb = s_k + buf * (BN * D * 2);
            const u32 vb_prev = s_v + (buf ^ 1) * (BN * D * 2);

            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                u64 da = sw128_desc(s_q + (ks >> 2) * (BM * 128) + wg * (64 * 128) + (ks & 3) * 32, 16, 1024);
                u64 db = sw128_desc(kb + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                wgmma_ss<BF16, BN>(s, da, db, ks > 0);
            }
            wgmma_commit();
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                u64 db = sw128_desc(vb_prev + kc * (16 * 128), BN * 128, 1024);
                wgmma_rs<BF16, D>(acc, pa[kc], db);
            }
            wgmma_commit();
            wgmma_wait<1>();
            fence_regs<NS * 4>(s);
            wgmma_softmax_step<NS>(s, m_i, l_i, corr, band, nb * BN, BN, i0, i_last, row_in_tile, lt, sl2);
            wgmma_wait<0>();
            fence_regs<DT * 4>(acc);
            fence_regs_u32<BN / 4>(&pa[0][0]);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                acc[dt * 4 + 0] *= corr[0];
                acc[dt * 4 + 1] *= corr[0];
                acc[dt * 4 + 2] *= corr[1];
                acc[dt * 4 + 3] *= corr[1];
            }
            wgmma_pack_p<BF16, BN>(s, pa);
        }

        // Last P V.
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        {
            const u32 vb_last = s_v + ((nb_last - 1 - nb_first) & 1) * (BN * D * 2);
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                u64 db = sw128_desc(vb_last + kc * (16 * 128), BN * 128, 1024);
                wgmma_rs<BF16, D>(acc, pa[kc], db);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs<DT * 4>(acc);
            fence_regs_u32<BN / 4>(&pa[0][0]);
        }
    }

    __syncthreads();
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float l = l_i[hr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int r = row_in_tile + hr * 8;
        if (lse != 0 && lt == 0 && r < rows) {
            const float f = sl2 > 0.f ? sl2 : 1.f;
            float val = l > 0.f ? (m_i[hr] * f + log2f(l)) * 0.6931471805599453f : RAGGED_NEG_INF;
            lse[bt.lse_elem + (i64)(i0 + r) * lse_seq + (i64)h * lse_head] = val;
        }
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            u32 packed = pack2<BF16>(acc[dt * 4 + 2 * hr] * inv, acc[dt * 4 + 2 * hr + 1] * inv);
            u32 addr = s_q + swz<D>(r, dt) + lt * 4;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed) : "memory");
        }
    }
    __syncthreads();
    store_o_tile<D, BM, NT>(s_q, o + (bt.q_tok + i0) * o_seq + (i64)h * o_head, o_seq, rows);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ---------------------------------------------------------------------------------------------
// Entry points. Each `NAME` has a companion constant `NAME_config` = {BM, BN, threads per block,
// dynamic shared-memory bytes} that the host reads with cuModuleGetGlobal to size the pre-pass
// (block_m, block_n), the grid (B * ceil(S_q_max / BM) * H_q), the block and the shared memory.
// ---------------------------------------------------------------------------------------------

#define RAGGED_FMHA_SM80_ENTRY(NAME, BF16, D, BM, BN, NW, MINB)                                         \
    extern "C" {                                                                                      \
    __constant__ int NAME##_config[4] = {BM, BN, NW * 32, (BM + 4 * BN) * D * 2};                     \
    __global__ void __launch_bounds__(NW * 32, MINB) NAME(RAGGED_FMHA_PARAMS) {                       \
        fmha_fwd_body<BF16, D, BM, BN, NW>(RAGGED_FMHA_ARGS);                                         \
    }                                                                                                 \
    }

#define RAGGED_FMHA_SM90_ENTRY(NAME, BF16, D, BN, NWG, MINB)                                            \
    extern "C" {                                                                                      \
    __constant__ int NAME##_config[4] = {64 * NWG, BN, 128 * NWG, (64 * NWG + 4 * BN) * D * 2 + 1024}; \
    __global__ void __launch_bounds__(128 * NWG, MINB) NAME(RAGGED_FMHA_PARAMS) {                     \
        fmha_fwd_wgmma_body<BF16, D, BN, NWG>(RAGGED_FMHA_ARGS);                                      \
    }                                                                                                 \
    }

// The portable path (any sm_80+ target), always compiled.
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_bf16_d64, true, 64, 128, 64, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_f16_d64, false, 64, 128, 64, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_bf16_d128, true, 128, 64, 64, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_f16_d128, false, 128, 64, 64, 4, 2)

// The names the plugin launches: the fastest path the compile target allows.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 64, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 64, 3, 1)
#else
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_bf16_d64, true, 64, 128, 64, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_f16_d64, false, 64, 128, 64, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_bf16_d128, true, 128, 64, 64, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_f16_d128, false, 128, 64, 64, 4, 2)
#endif

#ifdef RAGGED_FMHA_TUNING
// Alternative tile shapes, compiled only for the benchmark's tuning sweep.
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_bf16_d128_m128n32w4, true, 128, 128, 32, 4, 2)
RAGGED_FMHA_SM80_ENTRY(ragged_fmha_fwd_sm80_bf16_d64_m64n64w4, true, 64, 64, 64, 4, 2)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64_n128, true, 64, 128, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64_n128w3, true, 64, 128, 3, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d64_n64w1, true, 64, 64, 1, 3)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n128, true, 128, 128, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n64, true, 128, 64, 2, 1)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n64x2, true, 128, 64, 2, 2)
RAGGED_FMHA_SM90_ENTRY(ragged_fmha_fwd_sm90_bf16_d128_n64w1, true, 128, 64, 1, 2)
#endif
#endif
