// Part of kernels/cuda/ragged_fmha_fwd.cu (the offsets pre-pass and longest-first tile list); included in that file's order, not on its own.

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

// Exclusive prefix sum of v over the block's threads (one value each); *total gets the sum.
__device__ __forceinline__ int ragged_block_exclusive_scan(int v, int* warp_total, int* total) {
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
        int w = warp_total[lane];
        int wi = w;
        for (int d = 1; d < 32; d <<= 1) {
            int n = __shfl_up_sync(0xffffffffu, wi, d);
            if (lane >= d) wi += n;
        }
        warp_total[lane] = wi - w;  // exclusive prefix over warps
        if (lane == 31) warp_total[32] = wi;
    }
    __syncthreads();
    *total = warp_total[32];
    return warp_total[warp] + incl - v;
}

// The error flag; in the forward program also the work counter of the persistent bodies that draw
// their items (tile_count[2], the word after the error flag).
__device__ __forceinline__ void ragged_prepass_finish(int* tile_count, u32* err_flag, u32 err) {
    if (threadIdx.x == 0) {
        *err_flag = err;
#if defined(RAGGED_PREPASS_WORK_COUNTER)
        tile_count[2] = 0;
#endif
    }
}

// BATCH_MAJOR (batch <= RAGGED_PREPASS_THREADS): the tile list holds each batch's tiles together,
// last tile first (the costliest under a causal band), the batches in descending order of their
// total cost (ties by index), so that the blocks of a persistent grid working at the same time read
// the K / V of one or two batches rather than of every batch that has a tile of the current cost,
// and the list still ends with the cheapest batch's cheapest tiles. Otherwise (and for larger
// batch counts): a counting sort by cost, longest tiles first.
template <bool BATCH_MAJOR>
__device__ __forceinline__ void ragged_prepass_body(const void* q_off, int q_off_bytes, i64 q_mult, i64 q_seq_stride,
                                                    int s_q_max, const void* kv_off, int kv_off_bytes, i64 kv_mult,
                                                    i64 kv_seq_stride, int s_kv_max, const void* seq_len_q,
                                                    int seq_len_q_bytes, const void* seq_len_kv, int seq_len_kv_bytes,
                                                    const void* lse_off, int lse_off_bytes, i64 lse_mult,
                                                    i64 lse_batch_stride, int batch, int block_m, int block_n,
                                                    int mask_left, int mask_right, int bottom_right,
                                                    RaggedBatch* batches, RaggedTile* tiles, int* tile_count,
                                                    u32* err_flag) {
    __shared__ int base[RAGGED_COST_BUCKETS];
    __shared__ int warp_total[RAGGED_PREPASS_THREADS / 32 + 1];
    __shared__ u32 s_err;
    ragged_grid_launch_dependents();
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

    const int max_tiles = (s_q_max + block_m - 1) / block_m;
    const i64 flat = (i64)batch * max_tiles;
    if (BATCH_MAJOR && batch <= RAGGED_PREPASS_THREADS) {
        __shared__ i64 s_key[RAGGED_PREPASS_THREADS];
        __shared__ int s_first[RAGGED_PREPASS_THREADS];  // batch -> its first slot in the list
        int nt = 0, rank = 0;
        i64 key = -1;
        if (tid < batch) {
            const RaggedBatch bt = batches[tid];
            nt = bt.lq > 0 ? (bt.lq + block_m - 1) / block_m : 0;
            key = 0;
            for (int tt = 0; tt < nt; ++tt)
                key += ragged_tile_cost(bt, tt, block_m, block_n, mask_left, mask_right, bottom_right);
            s_key[tid] = key;
        }
        __syncthreads();
        if (tid < batch) {
            for (int o = 0; o < batch; ++o) rank += s_key[o] > key || (s_key[o] == key && o < tid);
        }
        // base[rank] = that batch's tile count, then its exclusive scan is each rank's first slot.
        base[tid] = 0;
        __syncthreads();
        if (tid < batch) base[rank] = nt;
        __syncthreads();
        int total;
        const int first = ragged_block_exclusive_scan(base[tid], warp_total, &total);
        __syncthreads();
        base[tid] = first;
        __syncthreads();
        if (tid < batch) s_first[tid] = base[rank];
        if (tid == 0) *tile_count = total;
        __syncthreads();
        for (i64 idx = tid; idx < flat; idx += RAGGED_PREPASS_THREADS) {
            int b = (int)(idx / max_tiles);
            int tt = (int)(idx - (i64)b * max_tiles);
            RaggedBatch bt = batches[b];
            if (tt * block_m < bt.lq) {
                const int nb = (bt.lq + block_m - 1) / block_m;
                RaggedTile entry;
                entry.batch = b;
                entry.tile = tt;
                tiles[s_first[b] + (nb - 1 - tt)] = entry;
            }
        }
        ragged_prepass_finish(tile_count, err_flag, s_err);
        return;
    }
    // Histogram of tile costs (number of key blocks), then a descending scan gives each cost
    // bucket its first slot in the tile list: a counting sort, longest tiles first.
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
    int total;
    const int excl = ragged_block_exclusive_scan(v0 + v1, warp_total, &total);
    base[hi_bucket] = excl;
    base[hi_bucket - 1] = excl + v0;
    if (tid == RAGGED_PREPASS_THREADS - 1) *tile_count = total;
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
    ragged_prepass_finish(tile_count, err_flag, s_err);
}

// The entry point under NAME, with the tile list in the order BATCH_MAJOR selects.
#define RAGGED_PREPASS_ENTRY(NAME, BATCH_MAJOR)                                                                        \
    extern "C" __global__ void __launch_bounds__(RAGGED_PREPASS_THREADS)                                             \
        NAME(const void* q_off, int q_off_bytes, i64 q_mult, i64 q_seq_stride, int s_q_max, const void* kv_off,     \
             int kv_off_bytes, i64 kv_mult, i64 kv_seq_stride, int s_kv_max, const void* seq_len_q,                 \
             int seq_len_q_bytes, const void* seq_len_kv, int seq_len_kv_bytes, const void* lse_off,                \
             int lse_off_bytes, i64 lse_mult, i64 lse_batch_stride, int batch, int block_m, int block_n,            \
             int mask_left, int mask_right, int bottom_right, RaggedBatch* batches, RaggedTile* tiles,              \
             int* tile_count, u32* err_flag) {                                                                      \
        ragged_prepass_body<BATCH_MAJOR>(q_off, q_off_bytes, q_mult, q_seq_stride, s_q_max, kv_off, kv_off_bytes,   \
                                         kv_mult, kv_seq_stride, s_kv_max, seq_len_q, seq_len_q_bytes, seq_len_kv,  \
                                         seq_len_kv_bytes, lse_off, lse_off_bytes, lse_mult, lse_batch_stride,      \
                                         batch, block_m, block_n, mask_left, mask_right, bottom_right, batches,     \
                                         tiles, tile_count, err_flag);                                              \
    }

RAGGED_PREPASS_ENTRY(ragged_fmha_prepass, false)
#if defined(RAGGED_FMHA_WST_STUDY)
// The batch-major tile list under its own name, for the persistent study (bench/gpu/fmha_wst.py).
RAGGED_PREPASS_ENTRY(ragged_fmha_prepass_bm, true)
#endif
