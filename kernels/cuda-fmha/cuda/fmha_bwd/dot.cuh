// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the Di = rowsum(dO * O) pre-pass); included in that file's order, not on its own.

// One block = 64 query rows of one batch, all heads; a group of G lanes (D / 8 rounded up to a power
// of two: 16 at D 96, whose last 4 lanes load nothing) takes one (row, head) pair with one 16-byte
// load of O and of dO per lane, and sums in f32. D is the head dim of O and dO. The same lane also
// writes the row's LSE (the forward's, in its own layout) times log2e into the array after Di
// (bwd_lse2), in Di's layout. Rows >= Lq(b) are not read; those of the batch's last block get 0 in
// both arrays (what the gradient kernels use for rows past Lq), so that every 64-row tile the TMA
// dK/dV kernel copies in bulk is defined. Blocks wholly past Lq(b) write nothing: no tile reads them.
// With dq_acc (the fused kernel's f32 dQ accumulator, fmha_bwd/fused_dq.cuh; null for the
// two-kernel backward) the block also zeroes its 64-row blob of every head, the blobs the fused
// kernels add into (laid out for dQ's head dim DQ, Q/K's), and their turn counters, so every call
// starts from zero without a memset.
#define RAGGED_BWD_DOT_ROWS 64
#define RAGGED_BWD_DOT_THREADS 256

template <bool BF16, int D, int DQ = D>
__device__ __forceinline__ void bwd_dot_body(const u16* __restrict__ o, const u16* __restrict__ d_o,
                                             const float* __restrict__ lse, float* __restrict__ di,
                                             const RaggedBatch* __restrict__ batches, i64 o_seq, i64 o_head,
                                             i64 do_seq, i64 do_head, i64 lse_seq, i64 lse_head, int h_q,
                                             int di_rows, int row_blocks, float* __restrict__ dq_acc, int batch) {
    static_assert(RAGGED_BWD_DOT_ROWS == RAGGED_BWD_FUSED_ROWS, "one Di block per accumulator blob");
    static_assert(RAGGED_BWD_DOT_ROWS == RAGGED_BWD_DI_ROWS, "a block writes whole padded row blocks");
    constexpr int CH = D / 8;  // 16-byte chunks of a row
    constexpr int G = CH <= 8 ? 8 : CH <= 16 ? 16 : 32;  // lanes per (row, head)
    static_assert(D % 8 == 0 && CH <= 32, "whole chunks, one warp per row at most");
    const int b = blockIdx.x / row_blocks;
    const int r0 = (blockIdx.x - b * row_blocks) * RAGGED_BWD_DOT_ROWS;
    const RaggedBatch bt = batches[b];
    const int rows = bt.lq - r0 < RAGGED_BWD_DOT_ROWS ? bt.lq - r0 : RAGGED_BWD_DOT_ROWS;
    if (rows <= 0) return;
    if (dq_acc != nullptr) {
        const int rb = r0 / RAGGED_BWD_DOT_ROWS;
        for (int h = 0; h < h_q; ++h) {
            float4* blob = (float4*)(dq_acc + (((i64)h * batch + b) * row_blocks + rb) * bwd_dq_blob_stride(DQ));
            for (int i = threadIdx.x; i < bwd_dq_blob_floats(DQ) / 4; i += RAGGED_BWD_DOT_THREADS)
                blob[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        int* turns = bwd_dq_turns(dq_acc, h_q, batch, row_blocks, bwd_dq_blob_stride(DQ));
        for (int h = threadIdx.x; h < h_q; h += RAGGED_BWD_DOT_THREADS)
            turns[((i64)h * batch + b) * row_blocks + rb] = 0;
    }
    float* lse2 = bwd_lse2(di, batch, h_q, di_rows);
    const int c = threadIdx.x % G;
    const int pairs = rows * h_q;
    // The trip count is the same for every lane (a block-uniform base), so the group shuffles
    // below always run with the whole warp present.
    for (int base = 0; base < pairs; base += RAGGED_BWD_DOT_THREADS / G) {
        const int p = base + threadIdx.x / G;
        const bool live = p < pairs;
        const int r = live ? p / h_q : 0;
        const int h = live ? p - r * h_q : 0;
        const i64 tok = bt.q_tok + r0 + r;
        float s = 0.f;
        float l = 0.f;
        if (live && c == 0) l = lse[bt.lse_elem + (i64)(r0 + r) * lse_seq + (i64)h * lse_head];
        if (live && (CH == G || c < CH)) {
            const u16* op = o + tok * o_seq + (i64)h * o_head + c * 8;
            const u16* dp = d_o + tok * do_seq + (i64)h * do_head + c * 8;
            u32 x[4], y[4];
            asm volatile("ld.global.nc.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]) : "l"(op));
            asm volatile("ld.global.nc.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(y[0]), "=r"(y[1]), "=r"(y[2]), "=r"(y[3]) : "l"(dp));
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s += ragged_to_f32<BF16>(x[e] & 0xffffu) * ragged_to_f32<BF16>(y[e] & 0xffffu);
                s += ragged_to_f32<BF16>(x[e] >> 16) * ragged_to_f32<BF16>(y[e] >> 16);
            }
        }
#pragma unroll
        for (int m = G / 2; m >= 1; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
        if (live && c == 0) {
            const i64 row = ((i64)b * h_q + h) * di_rows + r0 + r;
            di[row] = s;
            lse2[row] = l * RAGGED_LOG2E;
        }
    }
    // Rows [rows, 64) of a batch's last block: zeros in both arrays.
    for (int p = threadIdx.x; p < (RAGGED_BWD_DOT_ROWS - rows) * h_q; p += RAGGED_BWD_DOT_THREADS) {
        const int r = rows + p / h_q;
        const i64 row = ((i64)b * h_q + p % h_q) * di_rows + r0 + r;
        di[row] = 0.f;
        lse2[row] = 0.f;
    }
}
