// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the Hopper forward's epilogue: O and LSE stores); included in that file's order, not on its own.

// O never goes through Q's buffer, where the one-tile-per-block kernels stage it: here it may
// already hold the next item's rows. It is stored from the consumers' registers, at D 64
// (staged_o_stores) through a shared-memory slice of the warp's own, outside Q and the K / V ring.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Where one item's O (and LSE) rows go: op and lp address the Q tile's first row (lp null without an
// LSE); the item's own rows are r_lo .. r_hi - 1 of the tile (r_lo > 0 only under the Q tail shift, sched_item).
struct EpilogueRows {
    u16* op;
    float* lp;
    int r_lo, r_hi;
};

__device__ __forceinline__ EpilogueRows epilogue_rows(const WsItem& it, u16* o, float* lse, i64 o_seq, i64 o_head, i64 lse_seq,
                                          i64 lse_head) {
    EpilogueRows out;
    out.op = o + (it.bt.q_tok + it.q0) * o_seq + (i64)it.h * o_head;
    out.lp = lse != nullptr ? lse + it.bt.lse_elem + (i64)it.q0 * lse_seq + (i64)it.h * lse_head : nullptr;
    out.r_lo = it.i0 - it.q0;
    out.r_hi = out.r_lo + it.rows;
    return out;
}

// Whether this thread's row r of the tile is one of the item's own (stored) rows.
template <bool TSQ>
__device__ __forceinline__ bool epilogue_row_ok(const EpilogueRows& out, int r) {
    return r < out.r_hi && (!TSQ || r >= out.r_lo);
}

// The first half of the epilogue, taken as soon as the item's last softmax step is done: the LSE of
// this thread's two rows is stored, and inv[] receives the factor O's rows are multiplied by
// (o_scale / l; 0 for a row without admitted keys) and l[] the rows' sums. Only inv, not m_i and l_i, is kept for a
// deferred O store: read back after the next item's first S was issued, the row statistics gave an
// LSE one ulp apart between identical calls in a few rows per call (bench/DECISIONS.md), while
// values taken here are the same on every call.
template <bool TSQ>
__device__ __forceinline__ void epilogue_row_stats(const float* m_i, const float* l_i, const EpilogueRows& out,
                                                   int row_in_tile, int lt, float sl2, i64 lse_seq, float o_scale,
                                                   float* inv, float* l_row) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const float l = quad_row_sum(l_i[hr]);
        l_row[hr] = l;
        inv[hr] = l > 0.f ? o_scale / l : 0.f;
        const int r = row_in_tile + hr * 8;
        if (epilogue_row_ok<TSQ>(out, r) && out.lp != nullptr && lt == 0) {
            const float f = sl2 > 0.f ? sl2 : 1.f;
            out.lp[(i64)r * lse_seq] = row_lse(m_i[hr], f, l);
        }
    }
}

// The second half: O = acc inv for this thread's two rows of the tile; 4-byte stores, 4 lanes
// covering 16 contiguous bytes of a row, unless WO and wide.
// WO: where O's base and strides are 16-byte aligned (wide, uniform over the grid), 16-byte stores,
// the quad's words of four n-tiles transposed so that each lane holds eight consecutive columns of its
// row: a warp's store writes 64 bytes of each of 8 rows instead of 16, a quarter of the store
// instructions, which otherwise compete with the next item's first softmax for issue slots.
template <bool BF16, int DT, bool TSQ, bool WO = false>
__device__ __forceinline__ void epilogue_store_o(const float* acc, const float* inv, const EpilogueRows& out,
                                                 int row_in_tile, int lt, i64 o_seq, bool wide = false) {
    static_assert(!WO || DT % 4 == 0, "WO stores whole groups of four n-tiles");
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int r = row_in_tile + hr * 8;
        const bool row_ok = epilogue_row_ok<TSQ>(out, r);
        if (WO && wide) {
            u16* orow = out.op + (i64)r * o_seq;
#pragma unroll
            for (int g = 0; g < DT / 4; ++g) {
                u32 x[4];
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    x[j] = pack2<BF16>(acc[(4 * g + j) * 4 + 2 * hr] * inv[hr], acc[(4 * g + j) * 4 + 2 * hr + 1] * inv[hr]);
                // Every lane takes part in the shuffles; only rows of the item store.
                quad_transpose4(x, lt);
                if (row_ok)
                    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(orow + (4 * g + lt) * 8), "r"(x[0]),
                                 "r"(x[1]), "r"(x[2]), "r"(x[3])
                                 : "memory");
            }
        }
        else if (row_ok) {
            u16* orow = out.op + (i64)r * o_seq + lt * 2;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                u32 packed = pack2<BF16>(acc[dt * 4 + 2 * hr] * inv[hr], acc[dt * 4 + 2 * hr + 1] * inv[hr]);
                asm volatile("st.global.b32 [%0], %1;\n" ::"l"(orow + dt * 8), "r"(packed) : "memory");
            }
        }
    }
}

// staged_o_stores: O = acc inv through the warp's own 16-row slice of shared memory at s_warp (rows
// of DT 16-byte chunks, chunk c of row r at position c ^ (r % 8), so that the eight rows of an
// 8 x 8 block and a row's chunks fall in distinct bank groups). The accumulators go in by stmatrix,
// four 8 x 8 blocks per instruction in exactly their register layout; then each lane reads 16-byte
// chunks back and stores them, eight lanes covering a 128-byte row of O. A quarter of the 4-byte
// form's store instructions, without the 16-byte form's register transposition (which spilled at
// D 64's 160 registers). Only the warp touches its slice, so __syncwarp orders it. Needs O's rows
// 16-byte aligned (the caller's `wide`).
template <bool BF16, int DT>
__device__ __forceinline__ void epilogue_store_o_staged(const float* acc, const float* inv, const EpilogueRows& out,
                                                        int row_in_tile, int lane, i64 o_seq, u32 s_warp) {
    static_assert(DT % 2 == 0 && (16 * DT) % 32 == 0, "pairs of n-tiles per stmatrix; whole passes of the warp");
    constexpr int ROW_BYTES = DT * 16;
    // Lane l addresses row l % 8 of block l / 8: (rows 0-7, tile j), (8-15, j), (0-7, j + 1), (8-15, j + 1).
    const int blk = lane >> 3;
    const int srow = (blk & 1) * 8 + (lane & 7);
#pragma unroll
    for (int j = 0; j < DT; j += 2) {
        const u32 r0 = pack2<BF16>(acc[j * 4] * inv[0], acc[j * 4 + 1] * inv[0]);
        const u32 r1 = pack2<BF16>(acc[j * 4 + 2] * inv[1], acc[j * 4 + 3] * inv[1]);
        const u32 r2 = pack2<BF16>(acc[j * 4 + 4] * inv[0], acc[j * 4 + 5] * inv[0]);
        const u32 r3 = pack2<BF16>(acc[j * 4 + 6] * inv[1], acc[j * 4 + 7] * inv[1]);
        const int chunk = j + (blk >> 1);
        const u32 addr = s_warp + srow * ROW_BYTES + ((chunk ^ (srow & 7)) * 16);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                     "r"(r1), "r"(r2), "r"(r3)
                     : "memory");
    }
    __syncwarp();
    const int row0 = row_in_tile - (lane >> 2);  // the warp's first row of the tile
#pragma unroll
    for (int k = 0; k < 16 * DT / 32; ++k) {
        const int idx = k * 32 + lane;
        const int row = idx / DT, chunk = idx % DT;
        u32 x0, x1, x2, x3;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                     : "r"(s_warp + row * ROW_BYTES + ((chunk ^ (row & 7)) * 16))
                     : "memory");
        if (epilogue_row_ok<false>(out, row0 + row))
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(out.op + (i64)(row0 + row) * o_seq + chunk * 8),
                         "r"(x0), "r"(x1), "r"(x2), "r"(x3)
                         : "memory");
    }
    __syncwarp();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
