// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu and ragged_fmha_bwd.cu (the mask band, the key blocks a query tile needs, and the Hopper forward's score mask); included in that file's order, not on its own.

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

    // The keys row i admits, as the range [*lo, *hi) within [0, lkv] (empty when *lo >= *hi): the
    // same set as admits(i, .), computed once per row so that a masked block costs two integer
    // compares per score instead of admits' 64-bit arithmetic.
    __device__ __forceinline__ void key_range(int i, int* lo, int* hi) const {
        i64 h = lkv;
        if (right >= 0) {
            const i64 r = (i64)i + off + right + 1;
            h = r < h ? r : h;
        }
        i64 l = 0;
        if (left >= 0) {
            const i64 r = (i64)i + off - left;
            l = r > 0 ? r : 0;
        }
        *lo = (int)(l < lkv ? l : lkv);
        *hi = (int)(h > 0 ? h : 0);
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
// schedule and the work can never disagree. U32_DIV (the pre-pass): the two quotients in 32-bit
// unsigned arithmetic, the same values (0 <= j_begin < j_end <= lkv there) without the 64-bit
// division subroutine, whose latency the pre-pass pays between two forwards; the kernels keep the
// 64-bit form, with which their register allocation was tuned (inlining the 32-bit division
// made the backward's d128 dQ kernels spill).
template <bool U32_DIV = false>
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
    if (U32_DIV) {
        *first = (int)((u32)j_begin / (u32)block_n);
        *last = (int)(((u32)j_end + (u32)block_n - 1) / (u32)block_n);
    } else {
        *first = (int)(j_begin / block_n);
        *last = (int)((j_end + block_n - 1) / block_n);
    }
}


#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---------------------------------------------------------------------------------------------
// The Hopper forward's score mask, on one S block in the wgmma accumulator layout (rows row_in_tile
// and row_in_tile + 8 of the tile, columns nt * 8 + 2 lt + {0, 1}).
// ---------------------------------------------------------------------------------------------

// -inf for the scores whose keys the band does not admit or lie below k_min: per row the admitted
// range, shifted to the thread's first column, so that each score is two compares against
// constants (its column in the block) and a select instead of admits' 64-bit arithmetic per score.
template <int NS>
__device__ __forceinline__ void wgmma_mask_block(float* s, const RaggedBand& band, int j0, int i0, int row_in_tile,
                                                 int lt, int k_min) {
    const int jb = j0 + 2 * lt;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        int lo, hi;
        band.key_range(i0 + row_in_tile + hr * 8, &lo, &hi);
        lo = lo > k_min ? lo : k_min;
        const int a = lo - jb, b = hi - jb;
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = nt * 8 + e;
                if (c < a || c >= b) s[nt * 4 + 2 * hr + e] = RAGGED_NEG_INF;
            }
    }
}

// The keys [x, y) that every query row i0 .. i_last admits: key_range's bounds are nondecreasing in
// the row, so the last row's low bound and the first row's high bound. A key block inside it needs
// no mask; computed once per work item.
__device__ __forceinline__ int2 ragged_full_keys(const RaggedBand& band, int i0, int i_last) {
    int lo, hi, unused;
    band.key_range(i_last, &lo, &unused);
    band.key_range(i0, &unused, &hi);
    return make_int2(lo, hi);
}

// The first key of the K / V tile of key block nb. A batch's last, partial block (lkv - nb BN < BN
// keys) of a batch with at least BN keys is loaded as the batch's last BN keys, a whole box inside
// the batch, so the TMA path serves it (no row past the batch is read); its keys before nb BN are
// masked (the softmax's k_min). Otherwise, and for shorter batches (a zero-filling cp.async tail,
// mainloop_sm90.cuh), the block's own first key.
// With the block width bn a run-time value (the FP8 V transposition serves several).
__device__ __forceinline__ int kv_tile_first_key(int nb, int lkv, int bn) {
    const int j0 = nb * bn;
    return lkv >= bn && lkv - j0 < bn ? lkv - bn : j0;
}
template <int BN>
__device__ __forceinline__ int kv_tile_first_key(int nb, int lkv) {
    return kv_tile_first_key(nb, lkv, BN);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
