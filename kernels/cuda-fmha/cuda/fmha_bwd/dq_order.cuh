// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the fixed order in which the deterministic fused
// backward adds dQ's contributions); included in that file's order, not on its own.

// ORDERED (the deterministic engine): the contributions to one blob are added in a fixed order of
// key tiles, so dQ's f32 sums have the same bits on every call. The writer waits until the blob's
// turn counter (an int after the blobs, zeroed by the Di pass) has counted the contributions that
// precede its own, adds, waits for its reduction to complete and counts itself. The order and the
// walk are chosen so that in steady state a tile's predecessor has already been there:
//   - a band with a bound (causal, windows): descending key tiles. Tile n walks its query blocks
//     upwards from the first its band admits, which for tile n + 1 is no earlier, so n + 1 reaches
//     each block first. The grid launches a batch's key tiles in descending order, so a tile's
//     predecessor is always resident or finished (in-order dispatch: no block waits on one that
//     cannot start).
//   - no band and at most RAGGED_BWD_WS_ROT_MAX key tiles: every tile walks all M query blocks,
//     tile n starting at s_n = floor(n M / J) and wrapping; blob m's order is descending and cyclic
//     from the highest tile with s_n <= m, which is the order the walks reach it in. The
//     dependency is cyclic across a (batch, head)'s tiles, so it needs them all resident at once:
//     hence the cap, and the grid's order, whose consecutive blocks are one (batch, KV head)'s tiles.
//   - no band and more tiles: descending, unrotated; tile n then trails n + 1 by the reduction's
//     latency, a one-time lag.
// A turn that has not come after RAGGED_BWD_WS_TURN_NS (a scheduling the reasoning above excludes:
// other work holding most SMs) is taken anyway: dQ stays correct, only its last bits may differ,
// and the error flag gets RAGGED_ERR_DQ_ORDER so a validating execute reports it. A turn counter is
// compared with >=, so the ones after such a turn do not wait as well.
#define RAGGED_BWD_WS_ROT_MAX 32
#define RAGGED_BWD_WS_TURN_NS 200000000ull

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ u64 global_timer_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %globaltimer;\n" : "=l"(t));
    return t;
}
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_gpu_add(int* p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Orders global accesses of the generic proxy (the turn counter) with those of the bulk copies.
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Where a key tile's walk over its query blocks starts (see above): 0 for a band with a bound or
// more than RAGGED_BWD_WS_ROT_MAX tiles.
__device__ __forceinline__ int bwd_ws_rotation(const RaggedBand& band, int n, int tiles, int nq) {
    if (band.left >= 0 || band.right >= 0 || tiles > RAGGED_BWD_WS_ROT_MAX) return 0;
    return (int)(((i64)n * nq) / tiles);
}

// The number of contributions to query block m (rows i0 .. i0 + rows) that precede key tile n's.
__device__ __forceinline__ int bwd_ws_turn(const RaggedBand& band, int lq, int m, int n, int tiles, int bn,
                                           int bm) {
    const int i0 = m * bm;
    const int rows = lq - i0 < bm ? lq - i0 : bm;
    if (band.left < 0 && band.right < 0 && tiles <= RAGGED_BWD_WS_ROT_MAX) {
        // Highest tile whose walk starts at or before m: floor(((m + 1) J - 1) / M), M = blocks.
        const int blocks = (lq + bm - 1) / bm;
        const int first = (int)(((i64)(m + 1) * tiles - 1) / blocks);
        return (first - n + tiles) % tiles;
    }
    int lo, hi;
    key_block_range(band, i0, rows, bn, &lo, &hi);
    return hi - 1 - n;
}

// A dQ writer's lane 0 before adding into a blob: waits until the blob's turn counter reaches
// `turn` (or RAGGED_BWD_WS_TURN_NS passed: RAGGED_ERR_DQ_ORDER into the error flag), then orders
// the bulk reduction after it.
__device__ __forceinline__ void bwd_ws_take_turn(const int* counter, int turn, const int* tile_count) {
    if (ld_acquire_gpu(counter) < turn) {
        const u64 t0 = global_timer_ns();
        while (ld_acquire_gpu(counter) < turn) {
            if (global_timer_ns() - t0 > RAGGED_BWD_WS_TURN_NS) {
                asm volatile("red.global.or.b32 [%0], %1;\n" ::"l"(tile_count + 1), "r"(RAGGED_ERR_DQ_ORDER)
                             : "memory");
                break;
            }
            asm volatile("nanosleep.u32 64;\n" ::: "memory");
        }
    }
    fence_proxy_async_global();
}

// The same lane after its reduction was committed: waits for it to complete and passes the turn.
__device__ __forceinline__ void bwd_ws_pass_turn(int* counter) {
    bulk_wait<0>();
    fence_proxy_async_global();
    red_release_gpu_add(counter, 1);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
