// Part of kernels/cuda/ragged_fmha_bwd.cu (the TMA / mbarrier fills of the Hopper gradient kernels); included in that file's order, not on its own.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// 4-byte async copy (one f32 row statistic); when !pred nothing is read and the word is zero-filled.
__device__ __forceinline__ void cp_async4(u32 dst, const void* src, bool pred) {
    int n = pred ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

// One warp fills a pair of ROWS-row tiles (D columns each, sw128 layout, 1024-byte aligned) that
// complete together on `bar` (initialised with count 1): rows [row, row + ROWS) of head `head` of
// the two tensors behind maps ma, mb. A whole pair (valid >= ROWS) is 2 D / 64 TMA boxes issued by
// lane 0 after one expect-tx arrival; a tail pair is copied by the 32 lanes with cp.async, rows
// >= valid zero-filled without being read (never another batch's rows, never past a buffer), each
// lane's copies held on the barrier and lane 0's arrival counted once all lanes registered theirs.
// Copies the caller issued before (and registered with cp_async_mbar_track, then __syncwarp) are
// covered by the same phase.
template <int D, int ROWS>
__device__ __forceinline__ void bwd_fill_pair(u32 bar, u32 dst_a, u32 dst_b, const RaggedTmaMap* ma,
                                              const RaggedTmaMap* mb, int head, int row, int valid, const u16* ga,
                                              i64 stride_a, const u16* gb, i64 stride_b, const u16* safe, int lane) {
    if (valid >= ROWS) {
        if (lane == 0) {
            mbar_arrive_expect_tx(bar, 2 * ROWS * D * 2);
#pragma unroll
            for (int cb = 0; cb < D / 64; ++cb) {
                tma_load_3d(dst_a + cb * (ROWS * 128), ma, cb * 64, head, row, bar);
                tma_load_3d(dst_b + cb * (ROWS * 128), mb, cb * 64, head, row, bar);
            }
        }
    }
    else {
        constexpr int CH = D / 8;
#pragma unroll 4
        for (int it = 0; it < ROWS * CH / 32; ++it) {
            const int idx = it * 32 + lane;
            const int r = idx / CH;
            const int c = idx % CH;
            const bool p = r < valid;
            cp_async16(dst_a + sw128<ROWS>(r, c), p ? ga + (i64)r * stride_a + c * 8 : safe, p);
            cp_async16(dst_b + sw128<ROWS>(r, c), p ? gb + (i64)r * stride_b + c * 8 : safe, p);
        }
        cp_async_mbar_track(bar);
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
