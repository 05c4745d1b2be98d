// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the fused dK/dV/dQ kernel's dQ step and the
// layout of its f32 accumulator); included in that file's order, not on its own.

// The fused kernel (bwd_dkdv_wg_body with FUSE_DQ) adds each step's dQ = dS K into an f32
// accumulator in the workspace: one blob per (query head h, batch b, query block qb of 64 rows),
// blob (h * batch + b) * ceil(di_rows / 64) + qb, 8192 floats apart, in accumulator order:
// [warpgroup][j][thread t = 0..127][4], where element 4 j + e of thread t of a warpgroup is its
// wgmma accumulator register 4 j + e. Each warpgroup holds half of dQ's columns over all 128 keys:
// D 96 and 128 (rows padded to P = 128), columns [64 wg, 64 wg + 64), j = 0..7; D 64 (P = 64),
// columns [32 wg, 32 wg + 32), j = 0..3, the blob's first 4096 floats (the warp-specialized kernels
// at D 64: one warpgroup's n64 product, j = 0..7, the same floats); D 256 and Q/K 192
// (fused_wide.cuh, blobs 64 x D floats apart), the accumulators of a warpgroup's 64-column parts
// staged part by part (the blob is the same function of row and column). In every case column c of row
// r is float (c / 8) * 512 + t * 4 + ((r / 8) % 2) * 2 + c % 2 with t = (r / 16) * 32 + (r % 8) * 4
// + (c % 8) / 2 (dq_convert.cuh). The Di pass zeroes the blobs; the convert pass scales them into dQ.
#define RAGGED_BWD_FUSED_ROWS 64
#define RAGGED_BWD_FUSED_BLOB 8192

// Floats of a blob that a step adds into at Q/K head dim d (the Di pass zeroes, the convert pass
// reads): 64 rows of d's padded width, D 64's first half of the blob, D 96's and 128's whole, 64 x d
// past D 128.
__host__ __device__ constexpr int bwd_dq_blob_floats(int d) {
    return d <= 64 ? RAGGED_BWD_FUSED_ROWS * 64 : d <= 128 ? RAGGED_BWD_FUSED_BLOB : RAGGED_BWD_FUSED_ROWS * d;
}
// Floats between consecutive blobs at Q/K head dim d: RAGGED_BWD_FUSED_BLOB up to D 128, 64 x d
// past it (fmha_bwd/fused_wide.cuh; the host sizes the workspace by the same rule).
__host__ __device__ constexpr int bwd_dq_blob_stride(int d) {
    return d <= 128 ? RAGGED_BWD_FUSED_BLOB : RAGGED_BWD_FUSED_ROWS * d;
}

// The ordered kernel's turn counters (fmha_bwd/fused_ws.cuh) follow the blobs: one int per blob,
// in blob order, zeroed by the Di pass with the blobs; `stride` is bwd_dq_blob_stride(D).
__device__ __forceinline__ int* bwd_dq_turns(float* dq_acc, int h_q, int batch, int row_blocks,
                                             int stride = RAGGED_BWD_FUSED_BLOB) {
    return (int*)(dq_acc + (i64)h_q * batch * row_blocks * stride);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Issues warpgroup wg's X^T = A B^T over D for the backward's key-major products (S^T = K Q^T,
// dP^T = V dO^T): A the block's BN-row sw128 tile (its rows 64 wg ..), B a BM-row sw128 tile, both
// D-contiguous (K-major).
template <bool BF16, int D, int BM, int BN>
__device__ __forceinline__ void bwd_key_major_product(float* acc, u32 s_a, u32 s_b, int wg) {
    const u64 da = sw128_desc(s_a + wg * (64 * 128), 16, 1024);
    const u64 db = sw128_desc(s_b, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
        wgmma_ss<BF16, BM>(acc, desc_add(da, (ks >> 2) * (BN * 128) + (ks & 3) * 32),
                           desc_add(db, (ks >> 2) * (BM * 128) + (ks & 3) * 32), ks > 0);
}

// A warpgroup's 4 NJ dQ accumulators (thread t of 128) into the blob layout at s_dq (see above).
template <int NJ>
__device__ __forceinline__ void bwd_stage_dq_blob(u32 s_dq, const float* acc, int wg, int t) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(s_dq + ((wg * NJ + j) * 128 + t) * 16),
                     "f"(acc[4 * j]), "f"(acc[4 * j + 1]), "f"(acc[4 * j + 2]), "f"(acc[4 * j + 3])
                     : "memory");
}

// This thread's packed dS^T (or P^T) values (pa[kc]: key rows key_row and key_row + 8, staged query
// columns 16 kc + 2 lt (+1) and 16 kc + 8 + 2 lt (+1), kc < BM / 16) into the sw128 tile s_ds of BN
// key rows, from 16-byte chunk c0 of each row on (the column-split kernel stages a warpgroup's 32
// query columns at chunk 4 wg).
template <int BM, int BN>
__device__ __forceinline__ void bwd_stage_ds(u32 s_ds, const u32 (*pa)[4], int key_row, int lt,
                                             int c0 = 0) {
#pragma unroll
    for (int kc = 0; kc < BM / 16; ++kc)
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int row = key_row + (w & 1) * 8;
            const int chunk = c0 + 2 * kc + (w >> 1);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(s_ds + sw128<BN>(row, chunk) + lt * 4), "r"(pa[kc][w])
                         : "memory");
        }
}

// Issues warpgroup wg's dQ(step) = dS K (both operands MN-major: dS^T as staged, K as loaded), its
// half of the columns over all BN keys (P / 4 accumulators): P 128, columns [64 wg, 64 wg + 64)
// (K's second 64-column block); P 64, columns [32 wg, 32 wg + 32) (64 bytes into K's rows), or with
// WHOLE all 64 (P / 2 accumulators, `wg` unused).
template <bool BF16, int P, int BN, bool WHOLE = false>
__device__ __forceinline__ void bwd_dq_product(float* acc, u32 s_ds, u32 s_k, int wg) {
    static_assert(P == 64 || P == 128, "dQ column halves");
    static_assert(!WHOLE || P == 64, "one warpgroup's n64 product");
    constexpr int N = WHOLE ? 64 : P / 2;
    const u64 da = sw128_desc(s_ds, BN * 128, 1024);
    const u64 db = sw128_desc(s_k + (WHOLE ? 0 : P == 128 ? wg * (BN * 128) : wg * 64), BN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
        wgmma_ss_tt<BF16, N>(acc, desc_add(da, kk * (16 * 128)), desc_add(db, kk * (16 * 128)), kk > 0);
}

// One step's dQ, after dK += dS^T Q was issued from the packed dS^T (pa): dS^T into s_ds (sw128,
// BN key rows of BM query columns), dQ(step) = dS K on the tensor cores (both operands MN-major),
// its accumulators into s_dq in accumulator order, and one bulk reduction of them into `blob` by
// thread 0. The blocks of different key tiles add into one blob in whatever order they reach
// it, so the f32 sums (and dQ) are not bitwise reproducible from call to call.
// Two block barriers: s_ds written (and the previous step's reduction done reading s_dq), s_dq
// written. Returns with every wgmma of the step retired, the dK product included.
template <bool BF16, int D, int BM, int BN>
__device__ __forceinline__ void bwd_fused_dq_step(u32 (*pa)[4], u32 s_ds, u32 s_k, u32 s_dq, float* blob, int tid,
                                                  int wg, int key_row, int lt) {
    static_assert(BM == RAGGED_BWD_FUSED_ROWS && BN == 128, "one m64 product per warpgroup over 128 keys");
    bwd_stage_ds<BM, BN>(s_ds, pa, key_row, lt);
    fence_proxy_async();
    if (tid == 0) bulk_wait_read<0>();
    __syncthreads();
    constexpr int NA = D / 4;  // accumulators: 64 rows x D / 2 columns over 128 threads (D 64, 128)
    float acc[NA];
    wgmma_fence();
    bwd_dq_product<BF16, D, BN>(acc, s_ds, s_k, wg);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs<NA>(acc);
    bwd_stage_dq_blob<NA / 4>(s_dq, acc, wg, tid & 127);
    fence_proxy_async();
    __syncthreads();
    if (tid == 0) {
        bulk_reduce_add_f32(blob, s_dq, bwd_dq_blob_floats(D) * 4);
        bulk_commit();
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
