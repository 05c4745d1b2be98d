// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the Di = rowsum(dO * O) pre-pass); included in that file's order, not on its own.

// One block = 64 query rows of one batch, all heads; a group of G lanes (D / 8 rounded up to a power
// of two: 16 at D 96, whose last 4 lanes load nothing) takes one (row, head) pair with one 16-byte
// load of O and of dO per lane, and sums in f32. D is the head dim of O and dO. Rows >= Lq(b) are neither
// read nor written (the gradient kernels treat them as masked and never read their Di).
// With dq_acc (the fused kernel's f32 dQ accumulator, fmha_bwd/fused_dq.cuh; null for the
// two-kernel backward) the block also zeroes its 64-row blob of every head, the blobs the fused
// kernel adds into, so every call starts from zero without a memset.
#define RAGGED_BWD_DOT_ROWS 64
#define RAGGED_BWD_DOT_THREADS 256

template <bool BF16, int D>
__device__ __forceinline__ void bwd_dot_body(const u16* __restrict__ o, const u16* __restrict__ d_o,
                                             float* __restrict__ di, const RaggedBatch* __restrict__ batches,
                                             i64 o_seq, i64 o_head, i64 do_seq, i64 do_head, int h_q, int di_rows,
                                             int row_blocks, float* __restrict__ dq_acc, int batch) {
    static_assert(RAGGED_BWD_DOT_ROWS == RAGGED_BWD_FUSED_ROWS, "one Di block per accumulator blob");
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
            float4* blob = (float4*)(dq_acc + (((i64)h * batch + b) * row_blocks + rb) * RAGGED_BWD_FUSED_BLOB);
            for (int i = threadIdx.x; i < RAGGED_BWD_FUSED_BLOB / 4; i += RAGGED_BWD_DOT_THREADS)
                blob[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
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
        if (live && c == 0) di[((i64)b * h_q + h) * di_rows + r0 + r] = s;
    }
}
