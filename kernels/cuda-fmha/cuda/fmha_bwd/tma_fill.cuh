// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the TMA / mbarrier fills of the Hopper gradient kernels); included in that file's order, not on its own.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The NBUF-deep ring of a gradient kernel's TMA fill: full barriers take the filling warp's one
// arrival, empty ones one arrival per warp of the NT-thread block; the block waits for thread 0.
template <int NBUF, int NT>
__device__ __forceinline__ void bwd_ring_init(u32 bar_full, u32 bar_empty, int tid) {
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < NBUF; ++s) {
            mbar_init(bar_full + 8 * s, 1);
            mbar_init(bar_empty + 8 * s, NT / 32);
        }
        mbar_init_fence();
    }
    __syncthreads();
}

// One warp fills a pair of ROWS-row tiles (sw128 layout, 1024-byte aligned; the first D columns
// each in rows of P, the second DB in rows of PB <= P) that complete together on `bar` (initialised
// with count 1): rows [row, row + ROWS) of head `head` of the two tensors behind maps ma, mb. A whole
// pair (valid >= ROWS) is (P + PB) / 64 TMA boxes issued by lane 0 after one expect-tx arrival (a
// box's columns past D are the map's out of bounds: zero-filled and counted); a tail pair is copied
// by the 32 lanes with cp.async, rows >= valid and columns >= D zero-filled without being read
// (never another batch's rows, never past a buffer), each lane's copies held on the barrier and
// lane 0's arrival counted once all lanes registered theirs. `extra_tx` bytes of bulk copies the
// caller's lane 0 issues on the same barrier after this call are announced in that arrival (both
// branches), so the phase also waits for them.
template <int D, int ROWS, int P = D, int DB = D, int PB = P>
__device__ __forceinline__ void bwd_fill_pair(u32 bar, u32 dst_a, u32 dst_b, const RaggedTmaMap* ma,
                                              const RaggedTmaMap* mb, int head, int row, int valid, const u16* ga,
                                              i64 stride_a, const u16* gb, i64 stride_b, const u16* safe, int lane,
                                              u32 extra_tx = 0) {
    static_assert(PB <= P, "the second tile is the narrower");
    if (valid >= ROWS) {
        if (lane == 0) {
            mbar_arrive_expect_tx(bar, ROWS * (P + PB) * 2 + extra_tx);
#pragma unroll
            for (int cb = 0; cb < P / 64; ++cb) {
                tma_load_3d(dst_a + cb * (ROWS * 128), ma, cb * 64, head, row, bar);
                if (cb < PB / 64) tma_load_3d(dst_b + cb * (ROWS * 128), mb, cb * 64, head, row, bar);
            }
        }
    }
    else {
        constexpr int CH = P / 8;
#pragma unroll 4
        for (int it = 0; it < ROWS * CH / 32; ++it) {
            const int idx = it * 32 + lane;
            const int r = idx / CH;
            const int c = idx % CH;
            const bool p = r < valid && c < D / 8;
            cp_async16(dst_a + sw128<ROWS>(r, c), p ? ga + (i64)r * stride_a + c * 8 : safe, p);
            if (PB == P || c < PB / 8) {
                const bool pb = r < valid && c < DB / 8;
                cp_async16(dst_b + sw128<ROWS>(r, c), pb ? gb + (i64)r * stride_b + c * 8 : safe, pb);
            }
        }
        cp_async_mbar_track(bar);
        __syncwarp();
        if (lane == 0) mbar_arrive_expect_tx(bar, extra_tx);
    }
}

// bwd_fill_pair for a kernel whose consumers later write the tiles' shared memory themselves (the
// column-split fused kernel stages dQ over its ring slots): a tail pair (valid < ROWS) comes by the
// same TMA boxes as a whole one, completing on the loader's own barrier `bar_tail` (count 1, phase
// `tail_parity`), after which the warp zeroes rows >= valid, the other batches' rows or the map's
// out-of-bounds zeros the boxes read there, before its arrival on `bar`. No cp.async: racecheck
// does not order a cp.async write by the mbarrier that tracks it, and takes one as racing with the
// consumers' later writes of the same bytes. `bar` is initialised with count 32 and every lane
// arrives (lane 0 with the expected bytes), each after its own zeroing stores, so that the
// mbarrier alone orders them before the consumers' accesses, as racecheck models it.
// Columns: P = D and PB = DB (no padding columns to zero).
template <int ROWS, int P, int PB>
__device__ __forceinline__ void bwd_fill_pair_tma(u32 bar, u32 bar_tail, u32 tail_parity, u32 dst_a, u32 dst_b,
                                                  const RaggedTmaMap* ma, const RaggedTmaMap* mb, int head, int row,
                                                  int valid, int lane, u32 extra_tx) {
    static_assert(PB <= P && P % 64 == 0 && PB % 64 == 0, "whole 64-column boxes, the second tile the narrower");
    constexpr int NA = P / 64, NB = PB / 64;
    const bool tail = valid < ROWS;
    if (lane == 0) {
        const u32 box_bar = tail ? bar_tail : bar;
        mbar_arrive_expect_tx(box_bar, ROWS * (P + PB) * 2 + (tail ? 0u : extra_tx));
#pragma unroll
        for (int cb = 0; cb < NA; ++cb) {
            tma_load_3d(dst_a + cb * (ROWS * 128), ma, cb * 64, head, row, box_bar);
            if (cb < NB) tma_load_3d(dst_b + cb * (ROWS * 128), mb, cb * 64, head, row, box_bar);
        }
    }
    else if (!tail) {
        mbar_arrive(bar);
    }
    if (tail) {
        mbar_wait(bar_tail, tail_parity);
        // Row r of box cb is the 128 contiguous bytes at (cb * ROWS + r) * 128 (sw128 permutes the
        // 16-byte chunks within a row only): a row's (NA + NB) * 8 chunks, chunk c = lane + 32 j
        // of each row for lane, box c / 8.
        constexpr int CH = (NA + NB) * 8;
#pragma unroll
        for (int j = 0; j < (CH + 31) / 32; ++j) {
            const int c = lane + 32 * j;
            if (CH % 32 == 0 || c < CH) {
                const int box = c >> 3;
                u32 dst = (box < NA ? dst_a + box * (ROWS * 128) : dst_b + (box - NA) * (ROWS * 128)) + (c & 7) * 16;
                for (int r = valid; r < ROWS; ++r)
                    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst + r * 128), "r"(0u)
                                 : "memory");
            }
        }
        fence_proxy_async();
        if (lane == 0) mbar_arrive_expect_tx(bar, extra_tx);
        else mbar_arrive(bar);
    }
}

// This thread's A fragments of rows [16 w, 16 w + 16) (w = warp in the block) of a sw128 tile of ROWS
// rows and D columns: KS = D / 16 groups of four registers, by ldmatrix.
template <int D, int ROWS>
__device__ __forceinline__ void load_a_frags_sw128(u32 (*a)[4], u32 tile, int warp, int lane) {
    const int r = warp * 16 + (lane & 15);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
        ldsm_x4(tile + sw128<ROWS>(r, ks * 2 + (lane >> 4)), a[ks][0], a[ks][1], a[ks][2], a[ks][3]);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
