// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (warp-level PTX building blocks of the mma.sync path); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Warp-level building blocks (inline PTX, sm_80+).
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// A row's sum over the quad of lanes that holds its columns (the mma.sync / wgmma accumulator layout).
__device__ __forceinline__ float quad_row_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

// The 4 x 4 transpose of a quad's 32-bit words: lane l holds x[0..3] = M[l][0..3] and gets M[0..3][l],
// in two exchange stages (the 2 x 2 blocks off the diagonal, then the words within each block), two
// shuffles each, selects on the lane's bits instead of a dynamic index (which would go to local memory).
__device__ __forceinline__ void quad_transpose4(u32 (&x)[4], int lt) {
    const bool b1 = (lt & 2) != 0, b0 = (lt & 1) != 0;
    u32 a = __shfl_xor_sync(0xffffffffu, b1 ? x[0] : x[2], 2);
    u32 b = __shfl_xor_sync(0xffffffffu, b1 ? x[1] : x[3], 2);
    x[0] = b1 ? a : x[0];
    x[1] = b1 ? b : x[1];
    x[2] = b1 ? x[2] : a;
    x[3] = b1 ? x[3] : b;
    a = __shfl_xor_sync(0xffffffffu, b0 ? x[0] : x[1], 1);
    b = __shfl_xor_sync(0xffffffffu, b0 ? x[2] : x[3], 1);
    x[0] = b0 ? a : x[0];
    x[2] = b0 ? b : x[2];
    x[1] = b0 ? x[1] : a;
    x[3] = b0 ? x[3] : b;
}

// A row's natural-log LSE from its running max m (times f: in log2 units) and its quad-summed l;
// -inf for a row that admitted no key.
__device__ __forceinline__ float row_lse(float m, float f, float l) {
    return l > 0.f ? (m * f + log2f(l)) * 0.6931471805599453f : RAGGED_NEG_INF;
}

// 16-byte async copy; when !pred nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool pred) {
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two floats to a packed pair, round to nearest even; `lo` lands at the lower address.
template <bool BF16>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    if (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Byte offset of the 16-byte chunk c of row r in a [rows][P] tile: the chunk index is XORed with
// the row's low three bits, so ldmatrix (8 rows, one chunk) and the row-wise cp.async stores both
// touch 8 distinct 16-byte bank groups. P, the row width in elements, is a multiple of 64 so that
// the XOR never leaves the row; a head dim that is not (96) is stored in a row padded to one.
template <int P>
__device__ __forceinline__ u32 swz(int r, int c) {
    static_assert(P % 64 == 0, "swizzled rows hold whole groups of 8 chunks");
    return (u32)(r * P * 2 + ((c ^ (r & 7)) << 4));
}

// Async copy of `ROWS` rows of D elements (row stride `stride` elements) into a swizzled tile of
// row width P; rows >= valid, and the padding chunks of a row wider than D, are zero-filled without
// being read (`safe` is any mapped address, never dereferenced).
template <int D, int P, int ROWS, int NT>
__device__ __forceinline__ void load_tile(u32 s_base, const u16* g, i64 stride, int valid, const u16* safe) {
    constexpr int CH = P / 8;
#pragma unroll
    for (int it = 0; it < (ROWS * CH + NT - 1) / NT; ++it) {
        int idx = it * NT + (int)threadIdx.x;
        if ((ROWS * CH) % NT == 0 || idx < ROWS * CH) {
            int r = idx / CH;
            int c = idx % CH;
            bool p = r < valid && c < D / 8;
            const u16* src = p ? g + (i64)r * stride + c * 8 : safe;
            cp_async16(s_base + swz<P>(r, c), src, p);
        }
    }
}
