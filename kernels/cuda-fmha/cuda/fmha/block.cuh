// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (kernel parameters, the shared block prologue and the O store); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Forward kernel: one block = one (query tile of BM rows, query head). NW warps, each owning
// MT = BM / (16 NW) row groups of 16. S = Q K^T and O += P V through mma.sync m16n8k16 with fp32
// accumulators; online softmax in registers (base-2 exponent, scale folded in); K and V double
// buffered through cp.async so the next block's loads overlap this block's math.
// ---------------------------------------------------------------------------------------------

#define RAGGED_FMHA_PARAMS                                                                                        \
    const u16 *__restrict__ q, const u16 *__restrict__ k, const u16 *__restrict__ v, u16 *__restrict__ o,         \
        float *__restrict__ lse, const RaggedBatch *__restrict__ batches, const RaggedTile *__restrict__ tiles,         \
        const int *__restrict__ tile_count, i64 q_seq, i64 q_head, i64 k_seq, i64 k_head, i64 v_seq, i64 v_head, \
        i64 o_seq, i64 o_head, i64 lse_seq, i64 lse_head, int h_q, int h_kv, float scale, int mask_left,        \
        int mask_right, int bottom_right
#define RAGGED_FMHA_ARGS                                                                                       \
    q, k, v, o, lse, batches, tiles, tile_count, q_seq, q_head, k_seq, k_head, v_seq, v_head, o_seq, o_head, \
        lse_seq, lse_head, h_q, h_kv, scale, mask_left, mask_right, bottom_right

// What one block of the portable kernel works on: block x is work item x / H_q (a query tile of BM
// rows of one batch) for query head x % H_q; GQA head g serves H_q / H_kv query heads. The
// key-block range comes from the same key_block_range the pre-pass costed the tile with. A macro
// rather than a function filling a struct: with the struct the band and batch record did not stay
// in registers across the key loop, which slowed causal problems. Declares, in the body's scope:
// h, bt, i0, rows, band, nb_first, nb_last, qp, kp, vp; returns from the body past the pre-pass's
// tile count.
#define RAGGED_FMHA_BLOCK_PROLOGUE(BM, BN)                                                       \
    const int rank = blockIdx.x / h_q;                                                           \
    const int h = blockIdx.x - rank * h_q;                                                       \
    ragged_grid_dependency_wait();                                                               \
    ragged_grid_launch_dependents();                                                             \
    if (rank >= *tile_count) return;                                                             \
    const RaggedTile tile = tiles[rank];                                                         \
    const RaggedBatch bt = batches[tile.batch];                                                  \
    const int i0 = tile.tile * (BM);                                                             \
    const int rows = bt.lq - i0 < (BM) ? bt.lq - i0 : (BM);                                      \
    const int g = h / (h_q / h_kv);                                                              \
    const RaggedBand band = make_band(bt.lq, bt.lkv, mask_left, mask_right, bottom_right);       \
    int nb_first, nb_last;                                                                       \
    key_block_range(band, i0, rows, (BN), &nb_first, &nb_last);                                  \
    const u16* qp = q + (bt.q_tok + i0) * q_seq + (i64)h * q_head;                               \
    const u16* kp = k + bt.kv_tok * k_seq + (i64)g * k_head;                                     \
    const u16* vp = v + bt.kv_tok * v_seq + (i64)g * v_head

// Row width in shared memory of a tile of head dim d: the next multiple of 64 elements (swz<P>).
__host__ __device__ constexpr int ragged_row_width(int d) { return (d + 63) / 64 * 64; }

// Copies the first `rows` rows (D elements each) of the normalised O tile, staged in shared memory
// in the swz<P> layout at s_tile, to global memory at op (row stride o_seq) with 16-byte stores,
// by the NT threads threadIdx.x t0 .. t0 + NT - 1.
template <int D, int P, int BM, int NT>
__device__ __forceinline__ void store_o_tile(u32 s_tile, u16* op, i64 o_seq, int rows, int t0 = 0) {
    constexpr int CH = D / 8;
    const int tid = (int)threadIdx.x - t0;
#pragma unroll
    for (int it = 0; it < (BM * CH + NT - 1) / NT; ++it) {
        int idx = it * NT + tid;
        int r = idx / CH;
        int c = idx % CH;
        if (idx < BM * CH && r < rows) {
            u32 x0, x1, x2, x3;
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                         : "r"(s_tile + swz<P>(r, c)));
            u16* dst = op + (i64)r * o_seq + c * 8;
            asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"l"(dst), "r"(x0), "r"(x1), "r"(x2), "r"(x3)
                         : "memory");
        }
    }
}
