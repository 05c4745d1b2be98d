// Part of kernels/cuda/ragged_fmha_bwd.cu (warp-level tile products of the backward); included in that file's order, not on its own.

// c[16 x 8 NS] += A B^T for one warp: A = 16 rows (a_row + 0..15) of the swizzled tile `a`, B = rows
// 0 .. 8 NS of the swizzled tile `b`, both with 16 KS columns (the contracted dim).
template <bool BF16, int P, int KS, int NS>
__device__ __forceinline__ void warp_mma_abt(float (*c)[4], u32 a, int a_row, u32 b) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
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

// acc[16 x 8 DT] += A B for one warp: A = packed 16-bit fragments pa[KC] (16 x 16 KC), B = rows
// 0 .. 16 KC of the swizzled tile `b` (k-major, read transposed), 8 DT columns.
template <bool BF16, int P, int KC, int DT>
__device__ __forceinline__ void warp_mma_ab(float (*acc)[4], const u32 (*pa)[4], u32 b) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc)
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
            u32 b0, b1, b2, b3;
            ldsm_x4_t(b + swz<P>(kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)), b0, b1, b2,
                      b3);
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
