// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (warp-level tile products of the backward); included in that file's order, not on its own.

// c[16 x 8 NS] += A B^T for one warp: A = 16 rows (a_row + 0..15) of the swizzled tile `a`, B = rows
// 0 .. 8 NS of the swizzled tile `b`, contracting their columns 16 KS0 .. 16 KS.
template <bool BF16, int P, int KS, int NS, int KS0 = 0>
__device__ __forceinline__ void warp_mma_abt(float (*c)[4], u32 a, int a_row, u32 b) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int ks = KS0; ks < KS; ++ks) {
        u32 fa[4];
        ldsm_x4(a + swz<P>(a_row + (lane & 15), ks * 2 + (lane >> 4)), fa[0], fa[1], fa[2], fa[3]);
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
            u32 b0, b1, b2, b3;
            ldsm_x4(b + swz<P>(np * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)), b0, b1, b2,
                    b3);
            mma16816<BF16>(c[2 * np], fa, b0, b1);
            mma16816<BF16>(c[2 * np + 1], fa, b2, b3);
        }
    }
}

// Two products against B tiles of the same rows, interleaved for the tensor pipe: c1 = A1 B1^T and
// c2 = A2 B2^T for one warp (rows a_row + 0..15 of the swizzled tiles a1, a2; rows 0 .. 8 NS of b1,
// b2), contracting 16 KS1 columns of a1, b1 (row width P1) and 16 KS2 of a2, b2 (row width P2).
// Both passes of the backward recompute a score tile and its dP this way: S = Q K^T with dP = dO
// V^T (dQ), S^T = K Q^T with dP^T = V dO^T (dK/dV); the two contractions differ where the Q/K head
// dim does from the V/O one (192 and 128).
template <bool BF16, int P1, int KS1, int P2, int KS2, int NS>
__device__ __forceinline__ void warp_mma_abt_pair(float (*c1)[4], float (*c2)[4], u32 a1, u32 a2, int a_row, u32 b1,
                                                  u32 b2) {
    constexpr int KSC = KS1 < KS2 ? KS1 : KS2;  // the k-steps both products take, interleaved
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int nt = 0; nt < NS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) c1[nt][e] = c2[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSC; ++ks) {
        u32 f1[4], f2[4];
        const int r = a_row + (lane & 15);
        ldsm_x4(a1 + swz<P1>(r, ks * 2 + (lane >> 4)), f1[0], f1[1], f1[2], f1[3]);
        ldsm_x4(a2 + swz<P2>(r, ks * 2 + (lane >> 4)), f2[0], f2[1], f2[2], f2[3]);
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
            const int rr = np * 16 + (lane & 7) + ((lane >> 4) << 3);
            const int cc = ks * 2 + ((lane >> 3) & 1);
            u32 r0, r1, r2, r3;
            ldsm_x4(b1 + swz<P1>(rr, cc), r0, r1, r2, r3);
            mma16816<BF16>(c1[2 * np], f1, r0, r1);
            mma16816<BF16>(c1[2 * np + 1], f1, r2, r3);
            ldsm_x4(b2 + swz<P2>(rr, cc), r0, r1, r2, r3);
            mma16816<BF16>(c2[2 * np], f2, r0, r1);
            mma16816<BF16>(c2[2 * np + 1], f2, r2, r3);
        }
    }
    // The longer contraction's remaining steps (none where the head dims agree).
    warp_mma_abt<BF16, P1, KS1, NS, KSC>(c1, a1, a_row, b1);
    warp_mma_abt<BF16, P2, KS2, NS, KSC>(c2, a2, a_row, b2);
}

// acc[16 x 8 DT] += A B for one warp: A = packed 16-bit fragments pa[KC] (16 x 16 KC), B = rows
// 0 .. 16 KC of the swizzled tile `b` (k-major, read transposed), 8 DT columns from 16-byte chunk
// c0 on (a warp that owns part of a wider accumulator's columns starts past the others').
template <bool BF16, int P, int KC, int DT>
__device__ __forceinline__ void warp_mma_ab(float (*acc)[4], const u32 (*pa)[4], u32 b, int c0 = 0) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc)
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
            u32 b0, b1, b2, b3;
            ldsm_x4_t(b + swz<P>(kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), c0 + dp * 2 + (lane >> 4)), b0, b1,
                      b2, b3);
            mma16816<BF16>(acc[2 * dp], pa[kc], b0, b1);
            mma16816<BF16>(acc[2 * dp + 1], pa[kc], b2, b3);
        }
}

// Accumulator tiles c[2 KC][4] as A fragments pa[KC][4] (k = the accumulators' columns).
template <bool BF16, int KC>
__device__ __forceinline__ void pack_a(u32 (*pa)[4], const float (*c)[4]) {
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
        pa[kc][0] = pack2<BF16>(c[2 * kc][0], c[2 * kc][1]);
        pa[kc][1] = pack2<BF16>(c[2 * kc][2], c[2 * kc][3]);
        pa[kc][2] = pack2<BF16>(c[2 * kc + 1][0], c[2 * kc + 1][1]);
        pa[kc][3] = pack2<BF16>(c[2 * kc + 1][2], c[2 * kc + 1][3]);
    }
}

// Element e of accumulator tile nt, read back from its packed fragment (pack_a's layout).
template <bool BF16>
__device__ __forceinline__ float unpack_a(const u32 (*pa)[4], int nt, int e) {
    const u32 word = pa[nt >> 1][(nt & 1) * 2 + (e >> 1)];
    return ragged_to_f32<BF16>((e & 1) ? word >> 16 : word & 0xffffu);
}
