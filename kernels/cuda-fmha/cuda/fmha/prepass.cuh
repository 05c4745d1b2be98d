// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the offsets pre-pass and longest-first tile list); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Pre-pass: one block of 1024 threads.
//
// On sm_90 the host may launch it with programmatic stream serialization after whatever precedes
// it on the stream (ragged_fmha_prepass_grid_dependency below), typically the previous execute's
// forward, which signals its dependents right after its own wait (ragged_grid_launch_dependents).
// The pre-pass then starts as soon as an SM is wholly free (its 1 024 threads take one): in the
// forward's tail where its blocks finish unevenly, else at its end, without the launch gap. It reads
// the offsets and seq_lens and builds the cost histogram and its scan in shared memory before
// griddepcontrol.wait, reads the same inputs again after it, and recomputes only if any value
// differs (a predecessor wrote them after its signal). Every global write comes after the wait, so
// a predecessor that still reads the workspace, or any memory the caller lent it, sees nothing
// change. Launched without the attribute the wait returns at once and the second read costs one
// load per input word.
// ---------------------------------------------------------------------------------------------

#define RAGGED_PREPASS_THREADS 1024
#define RAGGED_COST_BUCKETS 2048

// 1 when this module's pre-pass writes nothing before griddepcontrol.wait and checks every input it
// read before the wait against a read after it: the host may then launch it with programmatic
// stream serialization after any kernel. Read once per module, at load.
extern "C" __constant__ int ragged_fmha_prepass_grid_dependency[1] = {
#if __CUDA_ARCH__ >= 900
    1
#else
    0
#endif
};

// The pre-pass's parameters (the entry point's signature, in order).
struct RaggedPrepassArgs {
    const void* q_off;
    int q_off_bytes;
    i64 q_mult;
    i64 q_seq_stride;
    int s_q_max;
    const void* kv_off;
    int kv_off_bytes;
    i64 kv_mult;
    i64 kv_seq_stride;
    int s_kv_max;
    const void* seq_len_q;
    int seq_len_q_bytes;
    const void* seq_len_kv;
    int seq_len_kv_bytes;
    const void* lse_off;
    int lse_off_bytes;
    i64 lse_mult;
    i64 lse_batch_stride;
    int batch;
    int block_m;
    int block_n;
    int mask_left;
    int mask_right;
    int bottom_right;
    RaggedBatch* batches;
    RaggedTile* tiles;
    int* tile_count;
    u32* err_flag;
};

// Every input word the pre-pass reads for batch b, as stored (absent tensors read as 0).
struct RaggedBatchInputs {
    i64 q_lo, q_hi, kv_lo, kv_hi, lse_lo, lse_hi, seq_len_q, seq_len_kv;
};

// One stored integer, read at device scope (ld.relaxed.gpu, served from L2, never from this SM's
// L1): the read before the wait may race with a predecessor's write, and the read after it must
// see that write, not a line the first read left in L1.
__device__ __forceinline__ i64 ragged_load_int(const void* p, int bytes, i64 idx) {
    if (bytes == 8) {
        i64 v;
        asm volatile("ld.relaxed.gpu.global.s64 %0, [%1];" : "=l"(v) : "l"((const i64*)p + idx) : "memory");
        return v;
    }
    int v;
    asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"((const int*)p + idx) : "memory");
    return v;
}

__device__ __forceinline__ RaggedBatchInputs ragged_read_inputs(const RaggedPrepassArgs& a, int b) {
    RaggedBatchInputs in;
    in.q_lo = ragged_load_int(a.q_off, a.q_off_bytes, b);
    in.q_hi = ragged_load_int(a.q_off, a.q_off_bytes, b + 1);
    in.kv_lo = ragged_load_int(a.kv_off, a.kv_off_bytes, b);
    in.kv_hi = ragged_load_int(a.kv_off, a.kv_off_bytes, b + 1);
    in.lse_lo = a.lse_off != 0 ? ragged_load_int(a.lse_off, a.lse_off_bytes, b) : 0;
    in.lse_hi = a.lse_off != 0 ? ragged_load_int(a.lse_off, a.lse_off_bytes, b + 1) : 0;
    in.seq_len_q = a.seq_len_q != 0 ? ragged_load_int(a.seq_len_q, a.seq_len_q_bytes, b) : 0;
    in.seq_len_kv = a.seq_len_kv != 0 ? ragged_load_int(a.seq_len_kv, a.seq_len_kv_bytes, b) : 0;
    return in;
}

__device__ __forceinline__ bool ragged_same_inputs(const RaggedBatchInputs& x, const RaggedBatchInputs& y) {
    return x.q_lo == y.q_lo && x.q_hi == y.q_hi && x.kv_lo == y.kv_lo && x.kv_hi == y.kv_hi && x.lse_lo == y.lse_lo &&
           x.lse_hi == y.lse_hi && x.seq_len_q == y.seq_len_q && x.seq_len_kv == y.seq_len_kv;
}

// Whether a * m (m > 0) lies outside [-INT64_MAX, INT64_MAX], i.e. |a| > INT64_MAX / m, from the
// 128-bit product: a 64-bit division is a subroutine of ~70 dependent instructions, and the pre-pass
// sits between two forwards, where its latency is the cost.
__device__ __forceinline__ bool ragged_mul_overflows(i64 a, i64 m) {
    i64 hi;
    asm("mul.hi.s64 %0, %1, %2;" : "=l"(hi) : "l"(a), "l"(m));
    const i64 lo = (i64)((u64)a * (u64)m);
    return !((hi == 0 && lo >= 0) || (hi == -1 && lo < 0 && lo != -RAGGED_I64_MAX - 1));
}

// Element offsets [*lo, *hi) of batch b from its two stored offsets; returns error bits (unshifted).
__device__ __forceinline__ u32 ragged_batch_range(i64 a, i64 c, i64 mult, int b, i64* lo, i64* hi) {
    u32 err = 0;
    const i64 m = mult > 0 ? mult : 1;
    if (ragged_mul_overflows(a, m) || ragged_mul_overflows(c, m)) {
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

// x / d and x % d for d > 0 (C's truncating division): in 32 bits when x and d both lie in
// [0, 2^32), the usual case, instead of the 64-bit division subroutine; any other x (a negative
// one too) takes the 64-bit path.
__device__ __forceinline__ i64 ragged_div(i64 x, i64 d, i64* rem) {
    if (((u64)x | (u64)d) <= 0xffffffffull) {
        const u32 q = (u32)x / (u32)d;
        *rem = (i64)((u32)x - q * (u32)d);
        return q;
    }
    *rem = x % d;
    return x / d;
}

// Token start and extent of batch b; returns error bits (unshifted).
__device__ __forceinline__ u32 ragged_tokens(i64 a, i64 c, i64 mult, i64 seq_stride, int s_max, int b, i64* tok,
                                             int* extent) {
    i64 lo, hi;
    u32 err = ragged_batch_range(a, c, mult, b, &lo, &hi);
    *tok = 0;
    *extent = 0;
    if (err) return err;
    i64 lo_rem, delta_rem;
    const i64 first = ragged_div(lo, seq_stride, &lo_rem);
    const i64 rows = ragged_div(hi - lo, seq_stride, &delta_rem);
    if (lo_rem != 0 || delta_rem != 0) return RAGGED_ERR_PARTIAL_ROW;
    if (rows > s_max) return RAGGED_ERR_EXTENT;
    *tok = first;
    *extent = (int)rows;
    return 0;
}

__device__ __forceinline__ int ragged_logical_len(bool present, i64 v, int extent, u32* err, u32 bit) {
    if (!present) return extent;
    if (v < 0 || v > extent) {
        *err |= bit;
        return v < 0 ? 0 : extent;
    }
    return (int)v;
}

// Batch b's record from its inputs; returns its error bits (shifted into the flag's layout). A
// batch with an offset error gets no rows, so the forward writes nothing for it.
__device__ __forceinline__ u32 ragged_decode_batch(const RaggedPrepassArgs& a, const RaggedBatchInputs& in, int b,
                                                   RaggedBatch* out) {
    RaggedBatch bt;
    int ext_q, ext_kv;
    u32 err = 0;
    u32 eq = ragged_tokens(in.q_lo, in.q_hi, a.q_mult, a.q_seq_stride, a.s_q_max, b, &bt.q_tok, &ext_q);
    u32 ekv = ragged_tokens(in.kv_lo, in.kv_hi, a.kv_mult, a.kv_seq_stride, a.s_kv_max, b, &bt.kv_tok, &ext_kv);
    err |= (eq << RAGGED_ERR_Q_SHIFT) | (ekv << RAGGED_ERR_KV_SHIFT);
    bt.lq = ragged_logical_len(a.seq_len_q != 0, in.seq_len_q, ext_q, &err, RAGGED_ERR_SEQ_LEN_Q);
    bt.lkv = ragged_logical_len(a.seq_len_kv != 0, in.seq_len_kv, ext_kv, &err, RAGGED_ERR_SEQ_LEN_KV);
    if (a.lse_off != 0) {
        i64 lo, hi;
        u32 el = ragged_batch_range(in.lse_lo, in.lse_hi, a.lse_mult, b, &lo, &hi);
        err |= el << RAGGED_ERR_LSE_SHIFT;
        bt.lse_elem = lo;
        if (el) bt.lq = 0;
    } else {
        bt.lse_elem = (i64)b * a.lse_batch_stride;
    }
    if (eq || ekv) {
        bt.lq = 0;
        bt.lkv = 0;
    }
    *out = bt;
    return err;
}

// Number of key blocks of query tile t of a batch of lq queries and lkv keys (its sort key).
__device__ __forceinline__ int ragged_tile_cost(const RaggedPrepassArgs& a, int lq, int lkv, int t) {
    RaggedBand band = make_band(lq, lkv, a.mask_left, a.mask_right, a.bottom_right);
    int i0 = t * a.block_m;
    int rows = lq - i0 < a.block_m ? lq - i0 : a.block_m;
    int first, last;
    key_block_range<true>(band, i0, rows, a.block_n, &first, &last);
    int cost = last - first;
    return cost < RAGGED_COST_BUCKETS - 1 ? cost : RAGGED_COST_BUCKETS - 1;
}

// Exclusive prefix sum of v over the block's NT threads (one value each, NT a multiple of 32);
// *total gets the sum. warp_total holds NT / 32 + 1 ints.
template <int NT = RAGGED_PREPASS_THREADS>
__device__ __forceinline__ int ragged_block_exclusive_scan(int v, int* warp_total, int* total) {
    constexpr int WARPS = NT / 32;
    static_assert(NT % 32 == 0 && WARPS <= 32, "one warp scans the warp totals");
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    int incl = v;
    for (int d = 1; d < 32; d <<= 1) {
        int n = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += n;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = lane < WARPS ? warp_total[lane] : 0;
        int wi = w;
        for (int d = 1; d < 32; d <<= 1) {
            int n = __shfl_up_sync(0xffffffffu, wi, d);
            if (lane >= d) wi += n;
        }
        if (lane < WARPS) warp_total[lane] = wi - w;  // exclusive prefix over warps
        if (lane == 31) warp_total[WARPS] = wi;
    }
    __syncthreads();
    *total = warp_total[WARPS];
    return warp_total[warp] + incl - v;
}

// The block's shared state for NT threads: cost buckets (counts, then each bucket's next slot;
// NT * BPT >= RAGGED_COST_BUCKETS of them, BPT per thread), the scan's warp totals, the error bits,
// and the (lq, lkv) of every batch while the batch count fits the block. The pre-pass has
// RAGGED_PREPASS_THREADS threads; a forward block that builds the list itself (fmha/fused_list.cuh)
// has its own count and puts this in shared memory its ring does not use yet.
template <int NT>
struct RaggedListShared {
    enum : int { BPT = (RAGGED_COST_BUCKETS + NT - 1) / NT };
    int base[NT * BPT];
    int warp_total[NT / 32 + 1];
    int2 len[NT];
    u32 err;
};
using RaggedPrepassShared = RaggedListShared<RAGGED_PREPASS_THREADS>;

// (lq, lkv) of batch b: from shared memory when every batch has a thread, else from the records
// already written to the workspace (after the wait).
template <int NT>
__device__ __forceinline__ int2 ragged_batch_lens(const RaggedPrepassArgs& a, const RaggedListShared<NT>& s, int b) {
    if (a.batch <= NT) return s.len[b];
    return make_int2(a.batches[b].lq, a.batches[b].lkv);
}

// Query tiles of the longest batch; the flat index b * max_tiles + t walks every (batch, tile).
__device__ __forceinline__ int ragged_max_tiles(const RaggedPrepassArgs& a) {
    return (int)(((u32)a.s_q_max + (u32)a.block_m - 1) / (u32)a.block_m);
}

__device__ __forceinline__ void ragged_flat_tile(i64 idx, int max_tiles, int* b, int* t) {
    i64 rem;
    *b = (int)ragged_div(idx, max_tiles, &rem);
    *t = (int)rem;
}

template <int NT>
__device__ __forceinline__ int ragged_bucket_slots(RaggedListShared<NT>& s);

// Counting sort by cost, longest tiles first, step 1: each bucket's first slot in the tile list
// (descending cost), into s.base; returns the tile count.
template <int NT>
__device__ __forceinline__ int ragged_cost_buckets(const RaggedPrepassArgs& a, RaggedListShared<NT>& s) {
    constexpr int BPT = RaggedListShared<NT>::BPT;
    const int tid = threadIdx.x;
    for (int i = tid; i < NT * BPT; i += NT) s.base[i] = 0;
    __syncthreads();
    const int max_tiles = ragged_max_tiles(a);
    const i64 flat = (i64)a.batch * max_tiles;
    for (i64 idx = tid; idx < flat; idx += NT) {
        int b, t;
        ragged_flat_tile(idx, max_tiles, &b, &t);
        int2 l = ragged_batch_lens(a, s, b);
        if (t * a.block_m < l.x) atomicAdd(&s.base[ragged_tile_cost(a, l.x, l.y, t)], 1);
    }
    __syncthreads();
    return ragged_bucket_slots(s);
}

// Step 1's second half: the counts in s.base (complete, after a barrier) become each bucket's
// first slot, in descending order of cost; returns the tile count.
template <int NT>
__device__ __forceinline__ int ragged_bucket_slots(RaggedListShared<NT>& s) {
    constexpr int BPT = RaggedListShared<NT>::BPT;
    const int tid = threadIdx.x;
    // Each thread owns BPT buckets in descending order: BPT * tid .. BPT * tid + BPT - 1 counted
    // from the top.
    const int hi_bucket = NT * BPT - 1 - BPT * tid;
    int v[BPT];
    int sum = 0;
#pragma unroll
    for (int j = 0; j < BPT; ++j) {
        v[j] = s.base[hi_bucket - j];
        sum += v[j];
    }
    int total;
    int excl = ragged_block_exclusive_scan<NT>(sum, s.warp_total, &total);
#pragma unroll
    for (int j = 0; j < BPT; ++j) {
        s.base[hi_bucket - j] = excl;
        excl += v[j];
    }
    __syncthreads();
    return total;
}

// Step 2: every tile into its bucket's next slot.
template <int NT>
__device__ __forceinline__ void ragged_scatter_tiles(const RaggedPrepassArgs& a, RaggedListShared<NT>& s) {
    const int max_tiles = ragged_max_tiles(a);
    const i64 flat = (i64)a.batch * max_tiles;
    for (i64 idx = threadIdx.x; idx < flat; idx += NT) {
        int b, t;
        ragged_flat_tile(idx, max_tiles, &b, &t);
        int2 l = ragged_batch_lens(a, s, b);
        if (t * a.block_m < l.x) {
            int pos = atomicAdd(&s.base[ragged_tile_cost(a, l.x, l.y, t)], 1);
            RaggedTile entry;
            entry.batch = b;
            entry.tile = t;
            a.tiles[pos] = entry;
        }
    }
}

// The tile count, the error flag and, in the forward program, the work counter of the persistent
// bodies that draw their items (tile_count[2], the word after the error flag).
template <int NT>
__device__ __forceinline__ void ragged_prepass_finish(const RaggedPrepassArgs& a, RaggedListShared<NT>& s, int total) {
    __syncthreads();
    if (threadIdx.x == 0) {
        *a.tile_count = total;
        *a.err_flag = s.err;
#if defined(RAGGED_PREPASS_WORK_COUNTER)
        a.tile_count[2] = 0;
#endif
    }
}

// The cost-ordered list when every batch has a thread: inputs, records and the buckets' slots
// are built before the wait, checked after it.
__device__ __forceinline__ void ragged_prepass_speculative(const RaggedPrepassArgs& a, RaggedPrepassShared& s) {
    const int tid = threadIdx.x;
    const bool mine = tid < a.batch;
    RaggedBatchInputs in;
    RaggedBatch bt;
    u32 err = 0;
    int total = 0;
    for (bool waited = false;; waited = true) {
        if (mine) {
            in = ragged_read_inputs(a, tid);
            err = ragged_decode_batch(a, in, tid, &bt);
            s.len[tid] = make_int2(bt.lq, bt.lkv);
        }
        total = ragged_cost_buckets(a, s);  // starts with a barrier: s.len is complete
        if (waited) break;                  // built from inputs read after the wait
        ragged_grid_dependency_wait();
        const bool changed = mine && !ragged_same_inputs(in, ragged_read_inputs(a, tid));
        if (!__syncthreads_or(changed)) break;
    }
    if (tid == 0) s.err = 0;
    __syncthreads();
    if (err) atomicOr(&s.err, err);
    if (mine) a.batches[tid] = bt;
    ragged_scatter_tiles(a, s);
    ragged_prepass_finish(a, s, total);
}

// More batches than threads: the records go to the workspace first and the sort reads them back,
// all after the wait.
__device__ __forceinline__ void ragged_prepass_in_order(const RaggedPrepassArgs& a, RaggedPrepassShared& s) {
    const int tid = threadIdx.x;
    ragged_grid_dependency_wait();
    if (tid == 0) s.err = 0;
    __syncthreads();
    u32 err = 0;
    for (int b = tid; b < a.batch; b += RAGGED_PREPASS_THREADS) {
        RaggedBatch bt;
        err |= ragged_decode_batch(a, ragged_read_inputs(a, b), b, &bt);
        a.batches[b] = bt;
    }
    if (err) atomicOr(&s.err, err);
    // The block's own writes of the records are visible to it after the barrier.
    const int total = ragged_cost_buckets(a, s);
    ragged_scatter_tiles(a, s);
    ragged_prepass_finish(a, s, total);
}

// A counting sort of the tiles by cost, longest first, speculative while every batch has a thread.
__device__ __forceinline__ void ragged_prepass_body(const RaggedPrepassArgs& a) {
    __shared__ RaggedPrepassShared s;
    // Dependents (the forward) may be scheduled now; they wait for this grid's completion before
    // reading anything it writes.
    ragged_grid_launch_dependents();
    if (a.batch <= RAGGED_PREPASS_THREADS)
        ragged_prepass_speculative(a, s);
    else
        ragged_prepass_in_order(a, s);
}

// The pre-pass's parameter list, each name prefixed with P (empty for the pre-pass itself; the
// forward entry points that can build the list themselves take the same list after their own
// parameters, prefixed, fmha/fused_list.cuh), and the RaggedPrepassArgs it initializes.
#define RAGGED_PREPASS_PARAMS(P)                                                                                  \
    const void *P##q_off, int P##q_off_bytes, i64 P##q_mult, i64 P##q_seq_stride, int P##s_q_max,                \
        const void *P##kv_off, int P##kv_off_bytes, i64 P##kv_mult, i64 P##kv_seq_stride, int P##s_kv_max,      \
        const void *P##seq_len_q, int P##seq_len_q_bytes, const void *P##seq_len_kv, int P##seq_len_kv_bytes,     \
        const void *P##lse_off, int P##lse_off_bytes, i64 P##lse_mult, i64 P##lse_batch_stride, int P##batch,     \
        int P##block_m, int P##block_n, int P##mask_left, int P##mask_right, int P##bottom_right,                 \
        RaggedBatch *P##batches, RaggedTile *P##tiles, int *P##tile_count, u32 *P##err_flag
#define RAGGED_PREPASS_ARGS(P)                                                                                    \
    {P##q_off,        P##q_off_bytes,      P##q_mult,           P##q_seq_stride,  P##s_q_max,                    \
     P##kv_off,       P##kv_off_bytes,     P##kv_mult,          P##kv_seq_stride, P##s_kv_max,                   \
     P##seq_len_q,    P##seq_len_q_bytes,  P##seq_len_kv,       P##seq_len_kv_bytes,                             \
     P##lse_off,      P##lse_off_bytes,    P##lse_mult,         P##lse_batch_stride,                             \
     P##batch,        P##block_m,          P##block_n,          P##mask_left,     P##mask_right,                 \
     P##bottom_right, P##batches,          P##tiles,            P##tile_count,    P##err_flag}

extern "C" __global__ void __launch_bounds__(RAGGED_PREPASS_THREADS) ragged_fmha_prepass(RAGGED_PREPASS_PARAMS()) {
    const RaggedPrepassArgs a = RAGGED_PREPASS_ARGS();
    ragged_prepass_body(a);
}
