// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the FP8 forward's two helper kernels: V transposed into the workspace, and the amax reduction); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// ragged_fmha_fp8_vt: after the pre-pass (it reads the batch records), before the FP8 forward.
// Writes V^T into the workspace as a [D][H_kv * B * NB][BN] array of e4m3 codes (NB = vt_blocks,
// BN = keys, the forward's block width: 64, 128 or 192, config_sm90.cuh): for KV head g, batch b
// and key block nb, row d holds the BN keys of the block's K tile (kv_tile_first_key: a batch's
// partial last block of a batch with at least BN keys is its last BN keys) in the slot order of
// fp8_sm90.cuh (slot 4c + i of each 16 carries key 2c + (i & 1) + 8 (i >> 1)), keys past the batch's
// end zero, so that a masked key multiplies a finite zero. The forward loads one block's rows as a
// D x BN tile through a tensor map of three dims {BN bytes, H_kv * B * NB, D}, one box per chunk of its
// keys (fp8_fill_vt: 128-byte swizzle for blocks of 128 keys, else chunks of 64 keys with the 64-byte
// swizzle). Blocks past a batch's keys write nothing (the forward never reads them). Grid (NB, B,
// H_kv), RAGGED_FP8_VT_THREADS threads; a block of more than RAGGED_FP8_VT_KEYS keys is staged in
// passes of that many (the slot order only permutes keys within 16).
//
// ragged_fmha_fp8_amax: after the forward, one block: max of the P * RAGGED_FP8_AMAX_WARPS partials
// of each amax the forward's working blocks wrote (P = min(SM count, the forward's grid,
// RAGGED_FP8_AMAX_BLOCKS), exactly the forward's own count), as bits of non-negative floats (NaN
// above everything), into the amax_o and amax_s outputs (either may be null). max is exact and
// order-free, so the result does not depend on which block computed which item.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Keys staged per pass (the staged tile's rows); keys is 64, 128 or 192.
#define RAGGED_FP8_VT_KEYS 128
#define RAGGED_FP8_VT_THREADS 256
#define RAGGED_FP8_VT_MAX_D 256
// Row pitch of the staged keys: a multiple of 4 bytes that is not one of 128, so that the column
// reads of the transposition spread over the banks.
#define RAGGED_FP8_VT_PITCH (RAGGED_FP8_VT_MAX_D + 4)
// 16-byte loads per thread in one pass.
#define RAGGED_FP8_VT_LOADS (RAGGED_FP8_VT_KEYS * RAGGED_FP8_VT_MAX_D / 16 / RAGGED_FP8_VT_THREADS)

extern "C" __global__ void __launch_bounds__(RAGGED_FP8_VT_THREADS)
    ragged_fmha_fp8_vt(const unsigned char* __restrict__ v, i64 v_seq, i64 v_head,
                       const RaggedBatch* __restrict__ batches, unsigned char* __restrict__ vt, int batch, int h_kv,
                       int vt_blocks, int head_dim, int keys) {
    __shared__ __align__(16) unsigned char tile[RAGGED_FP8_VT_KEYS * RAGGED_FP8_VT_PITCH];
    ragged_grid_dependency_wait();
    // The forward that follows may be scheduled now: it reads nothing this grid writes before its
    // own wait for this grid's completion, so it only uses the transposition's tail to get ready.
    ragged_grid_launch_dependents();
    const int nb = blockIdx.x, b = blockIdx.y, g = blockIdx.z;
    const RaggedBatch bt = batches[b];
    if ((keys != 64 && keys != 128 && keys != 192) || nb * keys >= bt.lkv || head_dim > RAGGED_FP8_VT_MAX_D ||
        (head_dim & 15) != 0)
        return;
    const int j0 = kv_tile_first_key(nb, bt.lkv, keys);
    const int valid = bt.lkv - j0 < keys ? bt.lkv - j0 : keys;
    const unsigned char* src = v + (bt.kv_tok + j0) * v_seq + (i64)g * v_head;
    const int chunks = head_dim / 16;
    const i64 plane = (i64)h_kv * batch * vt_blocks * keys;
    unsigned char* out = vt + (((i64)g * batch + b) * vt_blocks + nb) * keys;
    for (int k0 = 0; k0 < keys; k0 += RAGGED_FP8_VT_KEYS) {
        const int n = keys - k0 < RAGGED_FP8_VT_KEYS ? keys - k0 : RAGGED_FP8_VT_KEYS;
        // Every load of the pass is issued before the first shared store, so a block keeps its
        // whole tile in flight rather than one 16-byte piece per thread.
        uint4 x[RAGGED_FP8_VT_LOADS];
#pragma unroll
        for (int i = 0; i < RAGGED_FP8_VT_LOADS; ++i) {
            const int idx = threadIdx.x + i * RAGGED_FP8_VT_THREADS;
            const int j = idx / chunks, ch = idx - j * chunks;
            x[i] = make_uint4(0u, 0u, 0u, 0u);
            if (idx < n * chunks && k0 + j < valid)
                x[i] = *reinterpret_cast<const uint4*>(src + (i64)(k0 + j) * v_seq + ch * 16);
        }
        if (k0 > 0) __syncthreads();  // the previous pass's reads of the tile are done
#pragma unroll
        for (int i = 0; i < RAGGED_FP8_VT_LOADS; ++i) {
            const int idx = threadIdx.x + i * RAGGED_FP8_VT_THREADS;
            const int j = idx / chunks, ch = idx - j * chunks;
            if (idx < n * chunks) {
                u32* dst = reinterpret_cast<u32*>(tile + j * RAGGED_FP8_VT_PITCH + ch * 16);
                dst[0] = x[i].x;
                dst[1] = x[i].y;
                dst[2] = x[i].z;
                dst[3] = x[i].w;
            }
        }
        __syncthreads();
        // One item: a group of 16 keys at four columns, read as four words of each of its 16 rows
        // and byte-transposed in registers; the four columns' 16 slots leave as one 16-byte store
        // each. A warp spans two groups and 16 column quads: its row reads hit 32 distinct banks
        // (the pitch is one word more than a multiple of 32), and each column's two groups are one
        // 32-byte sector. The stores are 16-byte aligned: the transposed region starts on the
        // workspace's alignment and BN, the plane and k0 are multiples of 64.
        const int groups = n / 16, quads = head_dim / 4, quad_warps = (quads + 15) / 16;
        for (int item = threadIdx.x; item < groups * quad_warps * 16; item += RAGGED_FP8_VT_THREADS) {
            const int lane = item & 31, wi = item >> 5;
            const int q = (lane & 15) + 16 * (wi % quad_warps);
            const int grp = (lane >> 4) + 2 * (wi / quad_warps);
            if (q >= quads) continue;
            const unsigned char* rows = tile + 16 * grp * RAGGED_FP8_VT_PITCH + 4 * q;
            u32 o[4][4];  // o[k][c]: column 4q + k, slots 4c .. 4c + 3
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                // Slots 4c .. 4c + 3 carry keys 2c, 2c + 1, 2c + 8, 2c + 9 of the group.
                const u32 r0 = *reinterpret_cast<const u32*>(rows + (2 * c) * RAGGED_FP8_VT_PITCH);
                const u32 r1 = *reinterpret_cast<const u32*>(rows + (2 * c + 1) * RAGGED_FP8_VT_PITCH);
                const u32 r2 = *reinterpret_cast<const u32*>(rows + (2 * c + 8) * RAGGED_FP8_VT_PITCH);
                const u32 r3 = *reinterpret_cast<const u32*>(rows + (2 * c + 9) * RAGGED_FP8_VT_PITCH);
                const u32 lo01 = __byte_perm(r0, r1, 0x5140), hi01 = __byte_perm(r0, r1, 0x7362);
                const u32 lo23 = __byte_perm(r2, r3, 0x5140), hi23 = __byte_perm(r2, r3, 0x7362);
                o[0][c] = __byte_perm(lo01, lo23, 0x5410);
                o[1][c] = __byte_perm(lo01, lo23, 0x7632);
                o[2][c] = __byte_perm(hi01, hi23, 0x5410);
                o[3][c] = __byte_perm(hi01, hi23, 0x7632);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k)
                *reinterpret_cast<uint4*>(out + (i64)(4 * q + k) * plane + k0 + 16 * grp) =
                    make_uint4(o[k][0], o[k][1], o[k][2], o[k][3]);
        }
    }
}

// The max of n partials at part, by the block's 256 threads; the result in thread 0.
__device__ __forceinline__ u32 ragged_fp8_amax_block(const u32* __restrict__ part, int n, u32* warp_max) {
    u32 m = 0;
    for (int i = threadIdx.x; i < n; i += 256) m = m > part[i] ? m : part[i];
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 0; w < 8; ++w) m = m > warp_max[w] ? m : warp_max[w];
    __syncthreads();
    return m;
}

extern "C" __global__ void __launch_bounds__(256) ragged_fmha_fp8_amax(const u32* __restrict__ part, int grid,
                                                                     float* __restrict__ amax_o,
                                                                     float* __restrict__ amax_s) {
    __shared__ u32 warp_max[8];
    ragged_grid_dependency_wait();
    u32 nsm;
    asm("mov.u32 %0, %%nsmid;\n" : "=r"(nsm));
    int p = (int)nsm < grid ? (int)nsm : grid;
    p = p < RAGGED_FP8_AMAX_BLOCKS ? p : RAGGED_FP8_AMAX_BLOCKS;
    const u32 o = ragged_fp8_amax_block(part, p * RAGGED_FP8_AMAX_WARPS, warp_max);
    const u32 s = ragged_fp8_amax_block(part + RAGGED_FP8_AMAX_S_OFFSET, p * RAGGED_FP8_AMAX_WARPS, warp_max);
    if (threadIdx.x == 0) {
        if (amax_o != nullptr) *amax_o = __uint_as_float(o);
        if (amax_s != nullptr) *amax_s = __uint_as_float(s);
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
