// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the backward's parameters, element loads, band helpers); included in that file's order, not on its own.

// Parameters shared by the dK/dV and the dQ kernels. Every tensor has its own token (seq) and head
// strides in elements; Q, O, dO and dQ share Q's token starts (batches[b].q_tok), K, V, dK and dV
// share K's. Di is f32 workspace indexed ((b * h_q + h) * di_rows + i), di_rows = S_q_max rounded
// up to RAGGED_BWD_DI_ROWS; the same count of f32 follows it, the LSE times log2e in the same
// layout (bwd_lse2). The Di pass writes both, rows past Lq(b) of a batch's last 64-row block as
// zeros, so the TMA dK/dV kernel reads a 64-row tile of each as one bulk copy.
#define RAGGED_BWD_PARAMS                                                                                       \
    const u16 *__restrict__ q, const u16 *__restrict__ k, const u16 *__restrict__ v,                            \
        const u16 *__restrict__ d_o, const float *__restrict__ lse, const float *__restrict__ di,               \
        u16 *__restrict__ dq, u16 *__restrict__ dk, u16 *__restrict__ dv, const RaggedBatch *__restrict__ batches, \
        const RaggedTile *__restrict__ tiles, const int *__restrict__ tile_count, i64 q_seq, i64 q_head,          \
        i64 k_seq, i64 k_head, i64 v_seq, i64 v_head, i64 do_seq, i64 do_head, i64 dq_seq, i64 dq_head,           \
        i64 dk_seq, i64 dk_head, i64 dv_seq, i64 dv_head, i64 lse_seq, i64 lse_head, int di_rows, int batch,      \
        int kv_tiles, int h_q, int h_kv, float scale, int mask_left, int mask_right, int bottom_right
#define RAGGED_BWD_ARGS                                                                                         \
    q, k, v, d_o, lse, di, dq, dk, dv, batches, tiles, tile_count, q_seq, q_head, k_seq, k_head, v_seq, v_head, \
        do_seq, do_head, dq_seq, dq_head, dk_seq, dk_head, dv_seq, dv_head, lse_seq, lse_head, di_rows, batch,   \
        kv_tiles, h_q, h_kv, scale, mask_left, mask_right, bottom_right

#define RAGGED_LOG2E 1.4426950408889634f

// Rows of Di (and of the scaled LSE) per (batch, query head) are padded to a multiple of this: the
// TMA dK/dV kernel's query tile of 64 rows (a 128-row tile copies the one or two such blocks that
// hold rows < Lq), the Di pass's row block.
#define RAGGED_BWD_DI_ROWS 64

// The LSE times log2e in Di's row layout, right after Di's B * h_q * di_rows floats.
// F: float (the Di pass writes it) or const float (the dK/dV kernel reads it).
template <typename F>
__device__ __forceinline__ F* bwd_lse2(F* di, int batch, int h_q, int di_rows) {
    return di + (i64)batch * h_q * di_rows;
}

// The block prologues the mma.sync and the wgmma kernels share. Macros rather than inlined functions,
// for the reason the forward's prologue is one (fmha/block.cuh): a macro expands to the same
// statements as the hand-written form, so the band and batch record stay in registers.
//
// dK/dV: this block's (batch b, kv head g, key tile j0 of BN keys, its `cols` valid keys) and the
// query blocks [qb_first, qb_last) of BM rows the band admits for them, `items` of them over the
// group's `rep` query heads. Returns when the block has no key.
#define RAGGED_BWD_KEY_TILE_PROLOGUE(BM, BN)                                               \
    const int g = blockIdx.x % h_kv;                                                       \
    const int rank = blockIdx.x / h_kv;                                                    \
    const int b = rank / kv_tiles;                                                         \
    if (b >= batch) return;                                                                \
    const RaggedBatch bt = batches[b];                                                     \
    const int j0 = (rank - b * kv_tiles) * BN;                                             \
    const int cols = bt.lkv - j0 < BN ? bt.lkv - j0 : BN;                                  \
    if (cols <= 0) return;                                                                 \
    const RaggedBand band = make_band(bt.lq, bt.lkv, mask_left, mask_right, bottom_right); \
    int qb_first, qb_last;                                                                 \
    query_block_range(band, bt.lq, j0, cols, BM, &qb_first, &qb_last);                     \
    const int rep = h_q / h_kv;                                                            \
    const int nq = qb_last - qb_first;                                                     \
    const int items = rep * nq

// dQ: this block's query tile of the pre-pass's list (rows i0 .. i0 + rows of batch tile.batch, query
// head h of kv head g) and the key blocks [nb_first, nb_last) of BN keys the band admits for them.
// Returns past the list's end.
#define RAGGED_BWD_QUERY_TILE_PROLOGUE(BM, BN)                                             \
    const int rank = blockIdx.x / h_q;                                                     \
    const int h = blockIdx.x - rank * h_q;                                                 \
    if (rank >= *tile_count) return;                                                       \
    const RaggedTile tile = tiles[rank];                                                   \
    const RaggedBatch bt = batches[tile.batch];                                            \
    const int i0 = tile.tile * BM;                                                         \
    const int rows = bt.lq - i0 < BM ? bt.lq - i0 : BM;                                    \
    const int g = h / (h_q / h_kv);                                                        \
    const RaggedBand band = make_band(bt.lq, bt.lkv, mask_left, mask_right, bottom_right); \
    int nb_first, nb_last;                                                                 \
    key_block_range(band, i0, rows, BN, &nb_first, &nb_last)

// dQ: this thread's two rows (warp * 16 + lg and + 8) — LSE in base 2 and Di; rows past Lq are
// masked by the caller and their values never read from memory.
#define RAGGED_BWD_ROW_STATS(lse2, dir)                                                                   \
    float lse2[2], dir[2];                                                                                \
    _Pragma("unroll") for (int hr = 0; hr < 2; ++hr) {                                                    \
        const int rl = warp * 16 + lg + hr * 8;                                                           \
        const i64 i = i0 + rl;                                                                            \
        const bool live = rl < rows;                                                                      \
        lse2[hr] = live ? lse[bt.lse_elem + i * lse_seq + (i64)h * lse_head] * RAGGED_LOG2E : 0.f;        \
        dir[hr] = live ? di[((i64)tile.batch * h_q + h) * di_rows + i] : 0.f;                             \
    }

// One 16-bit element to f32.
template <bool BF16>
__device__ __forceinline__ float ragged_to_f32(u32 bits) {
    if (BF16) return __uint_as_float(bits << 16);
    float f;
    unsigned short h = (unsigned short)bits;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
}

// Query blocks [*first, *last) of size block_m that hold at least one row admitting some key of
// [j0, j0 + cols): the transpose of key_block_range, for the dK/dV kernel's loop over queries.
// Row i admits key j iff i < lq, j < lkv and j - off - right <= i <= j - off + left (each side only
// when its bound is set).
__device__ __forceinline__ void query_block_range(const RaggedBand& band, int lq, int j0, int cols, int block_m,
                                                  int* first, int* last) {
    i64 i_begin = 0;
    i64 i_end = lq;
    if (band.right >= 0) {
        i64 bound = (i64)j0 - band.off - band.right;
        i_begin = bound > 0 ? bound : 0;
    }
    if (band.left >= 0) {
        i64 bound = (i64)j0 + cols - 1 - band.off + band.left + 1;
        i_end = bound < i_end ? bound : i_end;
    }
    if (cols <= 0 || i_end <= i_begin) {
        *first = 0;
        *last = 0;
        return;
    }
    *first = (int)(i_begin / block_m);
    *last = (int)((i_end + block_m - 1) / block_m);
}

// Whether every (i, j) of rows [i0, i0 + rows) x keys [j0, j0 + cols) is admitted (no per-element
// mask needed): the tile is whole on both sides and inside the band.
__device__ __forceinline__ bool ragged_tile_full(const RaggedBand& band, int lq, int i0, int rows, int j0, int cols) {
    const i64 i_last = (i64)i0 + rows - 1;
    const i64 j_last = (i64)j0 + cols - 1;
    return i_last < lq && j_last < band.lkv && (band.right < 0 || j_last <= (i64)i0 + band.off + band.right) &&
           (band.left < 0 || (i64)j0 >= i_last + band.off - band.left);
}

// P^T of one warpgroup's S^T tile in place (rows: keys key_row and key_row + 8 of the block's
// tile at j0; columns: the NS * 8 query rows from i0, LSE2 rows lse_t): exp2(S^T scale log2e -
// LSE log2e), 0 outside the band and past Lq / Lkv unless the tile is `full`.
template <int NS>
__device__ __forceinline__ void bwd_pt_tile(float* st, float sl2, const float* lse_t, bool full,
                                            const RaggedBand& band, int lq, int i0, int j0, int key_row, int lt) {
#pragma unroll
    for (int nt = 0; nt < NS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int il = nt * 8 + 2 * lt + (e & 1);
            float p = fast_exp2(st[nt * 4 + e] * sl2 - lse_t[il]);
            if (!full) {
                const int i = i0 + il;
                const int j = j0 + key_row + ((e >> 1) << 3);
                if (i >= lq || !band.admits(i, j)) p = 0.f;
            }
            st[nt * 4 + e] = p;
        }
}

// dS^T = P^T (dP^T - Di) in place of dP^T over a warpgroup's NS groups of 8 query columns (Di rows
// di_t, this thread's columns 2 lt and 2 lt + 1 of each group).
template <int NS>
__device__ __forceinline__ void bwd_ds_tile(float* dpt, const float* st, const float* di_t, int lt) {
#pragma unroll
    for (int nt = 0; nt < NS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            dpt[nt * 4 + e] = st[nt * 4 + e] * (dpt[nt * 4 + e] - di_t[nt * 8 + 2 * lt + (e & 1)]);
}

// Stages one warp's 16 rows of a [rows][P] f32 accumulator tile (times `mul`) as T in shared memory
// in the swz<P> layout, at rows warp_row0 + lg and + 8, its D columns from 16-byte chunk c0 on (a
// warp holding part of the columns); the caller stores the tile with store_o_tile.
template <bool BF16, int D, int P>
__device__ __forceinline__ void stage_acc(u32 s_tile, const float (*acc)[4], int warp_row0, float mul, int c0 = 0) {
    const int lane = threadIdx.x & 31;
    const int lg = lane >> 2, lt = lane & 3;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int r = warp_row0 + lg + hr * 8;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            u32 packed = pack2<BF16>(acc[dt][2 * hr] * mul, acc[dt][2 * hr + 1] * mul);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(s_tile + swz<P>(r, c0 + dt) + lt * 4), "r"(packed) : "memory");
        }
    }
}
