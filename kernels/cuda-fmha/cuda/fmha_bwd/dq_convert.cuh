// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the fused backward's dQ convert pass);
// included in that file's order, not on its own.

// dQ from the fused kernel's f32 accumulator (layout: fmha_bwd/fused_dq.cuh): one block = 64 query
// rows of one batch (the blob of each head), rows >= Lq(b) neither read nor written. Each head's
// blob (the floats a step adds into: D 96 has D 128's) is read into shared memory (coalesced), whole
// or, past D 128, in two parts of D / 2 columns (D 256's 64 KiB would pass the 48 KiB of static
// shared memory); then every thread writes 16-byte pieces of dQ rows, row r, column c from float
// (c / 8) * 512 + t * 4 + ((r / 8) % 2) * 2 + c % 2, t = (r / 16) * 32 + (r % 8) * 4 + (c % 8) / 2
// (fused_dq.cuh), times `scale`.
template <bool BF16, int D>
__device__ __forceinline__ void bwd_dq_convert_body(const float* __restrict__ dq_acc, u16* __restrict__ dq,
                                                    const RaggedBatch* __restrict__ batches, i64 dq_seq, i64 dq_head,
                                                    int h_q, int batch, int row_blocks, float scale) {
    static_assert(D == 64 || D == 96 || D == 128 || D == 192 || D == 256, "fused backward Q/K head dims");
    constexpr int NK = D > 128 ? 2 : 1;                // parts of a blob, F floats and D / NK columns each
    constexpr int F = bwd_dq_blob_floats(D) / NK;
    static_assert(F * NK == bwd_dq_blob_floats(D) && (D / 8) % NK == 0, "whole 8-column groups per part");
    __shared__ float4 s_blob[F / 4];
    const int b = blockIdx.x / row_blocks;
    const int rb = blockIdx.x - b * row_blocks;
    const RaggedBatch bt = batches[b];
    const int r0 = rb * RAGGED_BWD_FUSED_ROWS;
    const int rows = bt.lq - r0 < RAGGED_BWD_FUSED_ROWS ? bt.lq - r0 : RAGGED_BWD_FUSED_ROWS;
    if (rows <= 0) return;
    const float* sf = (const float*)s_blob;
    constexpr int G = D / 8 / NK;  // 16-byte pieces per row of a part
    for (int hk = 0; hk < h_q * NK; ++hk) {
        const int h = hk / NK, k = hk % NK;
        const float4* blob =
            (const float4*)(dq_acc + (((i64)h * batch + b) * row_blocks + rb) * bwd_dq_blob_stride(D) + k * F);
        for (int i = threadIdx.x; i < F / 4; i += RAGGED_BWD_DOT_THREADS) s_blob[i] = blob[i];
        __syncthreads();
        for (int p = threadIdx.x; p < rows * G; p += RAGGED_BWD_DOT_THREADS) {
            const int r = p / G;
            const int cg = p - r * G;  // columns 8 cg .. 8 cg + 7
            const int t = (r >> 4) * 32 + (r & 7) * 4;
            const int at0 = cg * 512 + t * 4 + ((r >> 3) & 1) * 2;
            u32 packed[4];
#pragma unroll
            for (int lt = 0; lt < 4; ++lt) {
                const int at = at0 + lt * 4;  // thread t + lt holds columns 2 lt and 2 lt + 1
                packed[lt] = pack2<BF16>(sf[at] * scale, sf[at + 1] * scale);
            }
            u16* dst = dq + (bt.q_tok + r0 + r) * dq_seq + (i64)h * dq_head + (k * G + cg) * 8;
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(packed[0]), "r"(packed[1]),
                         "r"(packed[2]), "r"(packed[3])
                         : "memory");
        }
        __syncthreads();
    }
}
