// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (Hopper warpgroup-MMA building blocks); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Hopper path (sm_90a only): warpgroup MMA. A block holds NWG warpgroups of 128 threads, each
// owning 64 query rows; S = Q K^T reads Q and K straight from shared memory, O += P V takes P from
// registers (the S accumulator layout is the A-fragment layout) and V from shared memory as a
// transposed (MN-major) operand. Tiles live in the 128-byte-swizzle canonical layout: the head dim
// is split into 64-element column blocks [D/64][rows][64], each 128-byte row's 16-byte chunks XORed
// with (row & 7), every tile 1024-byte aligned.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One wgmma.mma_async.m64nNk16 with fp32 accumulators d[0 .. N / 2) (ACC of them, the operand
// list and placeholders below), written once for every shape and operand kind: A is the A operand's
// placeholder (a shared-memory descriptor, or {four registers}), B that of B's descriptor, PRED that
// of the scale-d flag (0: D = A B, else D += A B), IMM the scale and transpose immediates, and the
// input operands follow in placeholder order. TY is the operand type, "bf16" or "f16".
#define RAGGED_ACC4(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3])
#define RAGGED_ACC16(b) RAGGED_ACC4(b), RAGGED_ACC4(b + 4), RAGGED_ACC4(b + 8), RAGGED_ACC4(b + 12)
#define RAGGED_ACC_16 RAGGED_ACC16(0)
#define RAGGED_ACC_32 RAGGED_ACC16(0), RAGGED_ACC16(16)
#define RAGGED_ACC_48 RAGGED_ACC_32, RAGGED_ACC16(32)
#define RAGGED_ACC_64 RAGGED_ACC_48, RAGGED_ACC16(48)
#define RAGGED_HOLD_16 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define RAGGED_HOLD_32                                        \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define RAGGED_HOLD_48 RAGGED_HOLD_32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
#define RAGGED_HOLD_64 RAGGED_HOLD_48 ",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define RAGGED_WGMMA(TY, N, ACC, A, B, PRED, IMM, ...)                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " PRED ", 0;\n"                                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" RAGGED_HOLD_##ACC "}, " A \
                 ", " B ", p, " IMM ";\n}\n"                                                               \
                 : RAGGED_ACC_##ACC                                                                        \
                 : __VA_ARGS__)
#define RAGGED_WGMMA_TYPED(...)               \
    if (BF16)                                 \
        RAGGED_WGMMA("bf16", __VA_ARGS__);    \
    else                                      \
        RAGGED_WGMMA("f16", __VA_ARGS__)

// D[64 x N] (+)= A[64 x 16] * B[16 x N], both from shared memory; TA / TB: the operand is stored
// MN-major (transposed) rather than K-major, the instruction's transpose immediates.
template <bool BF16, int N, int TA, int TB>
__device__ __forceinline__ void wgmma_ss_layout(float* d, u64 da, u64 db, int accumulate) {
    static_assert(N == 32 || N == 64 || N == 128, "shared-operand widths");
    static_assert((TA == 0 || TA == 1) && (TB == 0 || TB == 1), "transpose flags");
    if constexpr (N == 32) {
        RAGGED_WGMMA_TYPED(32, 16, "%16", "%17", "%18", "1, 1, %19, %20", "l"(da), "l"(db), "r"(accumulate), "n"(TA),
                           "n"(TB));
    }
    else if constexpr (N == 64) {
        RAGGED_WGMMA_TYPED(64, 32, "%32", "%33", "%34", "1, 1, %35, %36", "l"(da), "l"(db), "r"(accumulate), "n"(TA),
                           "n"(TB));
    }
    else {
        RAGGED_WGMMA_TYPED(128, 64, "%64", "%65", "%66", "1, 1, %67, %68", "l"(da), "l"(db), "r"(accumulate), "n"(TA),
                           "n"(TB));
    }
}

// D[64 x N] (+)= A[64 x 16] (K-major) * B[N x 16]^T (K-major): S = Q K^T.
template <bool BF16, int N>
__device__ __forceinline__ void wgmma_ss(float* d, u64 da, u64 db, int accumulate) {
    wgmma_ss_layout<BF16, N, 0, 0>(d, da, db, accumulate);
}

// D[64 x N] (+)= A[64 x 16] (registers, the P V fragment layout) * B[N x 16]^T (shared, K-major):
// S = Q K^T with Q held in registers (no transpose of B, unlike the P V product).
template <bool BF16, int N>
__device__ __forceinline__ void wgmma_rs_k(float* d, const u32* a, u64 db, int accumulate) {
    static_assert(N == 64 || N == 128, "S widths with Q in registers");
    if constexpr (N == 64) {
        RAGGED_WGMMA_TYPED(64, 32, "{%32,%33,%34,%35}", "%36", "%37", "1, 1, 0", "r"(a[0]), "r"(a[1]), "r"(a[2]),
                           "r"(a[3]), "l"(db), "r"(accumulate));
    }
    else {
        RAGGED_WGMMA_TYPED(128, 64, "{%64,%65,%66,%67}", "%68", "%69", "1, 1, 0", "r"(a[0]), "r"(a[1]), "r"(a[2]),
                           "r"(a[3]), "l"(db), "r"(accumulate));
    }
}

// D[64 x N] += A[64 x 16] (registers) * B[16 x N] (shared, MN-major: transposed), N = 64, 96, 128.
// N = 96 is O += P V at d96 over the real columns only: V's rows are padded to two 64-column
// swizzle blocks, the 96 columns are the first block and half of the second (the descriptor's LBO),
// so the padding's 32 columns are never multiplied.
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_n64(float* d, const u32* a, u64 db) {
    RAGGED_WGMMA_TYPED(64, 32, "{%32,%33,%34,%35}", "%36", "%37", "1, 1, 1", "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                       "l"(db), "r"(1));
}
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_n96(float* d, const u32* a, u64 db) {
    RAGGED_WGMMA_TYPED(96, 48, "{%48,%49,%50,%51}", "%52", "%53", "1, 1, 1", "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                       "l"(db), "r"(1));
}
template <bool BF16>
__device__ __forceinline__ void wgmma_rs_n128(float* d, const u32* a, u64 db) {
    RAGGED_WGMMA_TYPED(128, 64, "{%64,%65,%66,%67}", "%68", "%69", "1, 1, 1", "r"(a[0]), "r"(a[1]), "r"(a[2]),
                       "r"(a[3]), "l"(db), "r"(1));
}

// D[64 x N] (+)= A (MN-major) * B (MN-major): both operands transposed. The fused backward's
// dQ += dS K reads dS from the key-major tile it stages ([keys][queries]) and K as it was loaded
// ([keys][D]); N is a warpgroup's share of dQ's columns (the two-warpgroup kernel's D 64 halves:
// N = 32, B starting 64 bytes into K's 128-byte swizzle rows for the second).
template <bool BF16, int N>
__device__ __forceinline__ void wgmma_ss_tt(float* d, u64 da, u64 db, int accumulate) {
    wgmma_ss_layout<BF16, N, 1, 1>(d, da, db, accumulate);
}

// D[64 x N] (+)= A (K-major) * B (MN-major): the wide fused backward's dV += P^T dO and dK += dS^T Q
// with P^T and dS^T staged in shared memory ([keys][queries]) and dO, Q as loaded ([queries][D]),
// over a warpgroup's share of the columns.
template <bool BF16, int N>
__device__ __forceinline__ void wgmma_ss_nt(float* d, u64 da, u64 db, int accumulate) {
    wgmma_ss_layout<BF16, N, 0, 1>(d, da, db, accumulate);
}

#undef RAGGED_WGMMA_TYPED
#undef RAGGED_WGMMA
#undef RAGGED_HOLD_64
#undef RAGGED_HOLD_48
#undef RAGGED_HOLD_32
#undef RAGGED_HOLD_16
#undef RAGGED_ACC_64
#undef RAGGED_ACC_48
#undef RAGGED_ACC_32
#undef RAGGED_ACC_16
#undef RAGGED_ACC16
#undef RAGGED_ACC4

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the async MMA boundary.
template <int N>
__device__ __forceinline__ void fence_regs(float* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs_u32(u32* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
// Shared memory written by cp.async (generic proxy) is read by wgmma (async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ u64 sw128_desc(u32 addr, u32 lbo, u32 sbo) {
    u64 d = (u64)((addr & 0x3FFFFu) >> 4);
    d |= (u64)((lbo & 0x3FFFFu) >> 4) << 16;
    d |= (u64)((sbo & 0x3FFFFu) >> 4) << 32;
    d |= (u64)1 << 62;
    return d;
}

// sw128_desc(addr + off, lbo, sbo) from d = sw128_desc(addr, lbo, sbo) (off a multiple of 16): the
// start-address field is addr >> 4 in the low 14 bits and every tile ends below 256 KiB of shared
// memory, so adding off >> 4 to the low word never carries into the stride fields. One 32-bit add per
// k-step instead of sw128_desc's mask, shift and or.
__device__ __forceinline__ u64 desc_add(u64 d, u32 off) {
    return (d & 0xFFFFFFFF00000000ull) | (u64)((u32)d + (off >> 4));
}

template <int ROWS>
__device__ __forceinline__ u32 sw128(int r, int c) {
    return (u32)((((c >> 3) * ROWS + r) << 7) + (((c & 7) ^ (r & 7)) << 4));
}

// Async copy of ROWS rows of D elements into a sw128 tile of P columns (P a multiple of 64); the
// padding columns of a row wider than D are zero-filled, never read from global memory, so that an
// MMA over the padded width adds exact zeros. The NT threads are threadIdx.x t0 .. t0 + NT - 1.
template <int D, int P, int ROWS, int NT>
__device__ __forceinline__ void load_tile_sw128(u32 s_base, const u16* g, i64 stride, int valid, const u16* safe,
                                                int t0 = 0) {
    constexpr int CH = P / 8;
#pragma unroll
    for (int it = 0; it < (ROWS * CH + NT - 1) / NT; ++it) {
        int idx = it * NT + (int)threadIdx.x - t0;
        if ((ROWS * CH) % NT == 0 || idx < ROWS * CH) {
            int r = idx / CH;
            int c = idx % CH;
            bool p = r < valid && c < D / 8;
            const u16* src = p ? g + (i64)r * stride + c * 8 : safe;
            cp_async16(s_base + sw128<ROWS>(r, c), src, p);
        }
    }
}

// O[64 x P] += P_chunk[64 x 16] (registers) * V[16 x P] for one k16 chunk kc of the BN keys of the
// V tile (sw128, BN rows, P columns), whose descriptor at byte offset off is desc_at(off). P = 256 is
// two n128 products over the two halves: the accumulator of the upper half follows the lower one's 64
// registers, as the epilogue reads them. P = 96: one n96 product over the first 96 columns of a tile
// padded to 128 (wgmma_rs_n96).
template <bool BF16, int P, int BN, class DescAt>
__device__ __forceinline__ void wgmma_pv_at(float* acc, const u32* a, DescAt desc_at, int kc) {
    static_assert(P == 64 || P == 96 || P == 128 || P == 256, "wgmma P V widths");
    constexpr int N = P == 256 ? 128 : P;
#pragma unroll
    for (int half = 0; half < P / N; ++half) {
        u64 db = desc_at(half * (2 * BN * 128) + kc * (16 * 128));
        if constexpr (N == 64)
            wgmma_rs_n64<BF16>(acc + half * 32, a, db);
        else if constexpr (N == 96)
            wgmma_rs_n96<BF16>(acc, a, db);
        else
            wgmma_rs_n128<BF16>(acc + half * 64, a, db);
    }
}

// wgmma_pv_at from the V tile's address vb, each descriptor computed afresh.
template <bool BF16, int P, int BN>
__device__ __forceinline__ void wgmma_pv(float* acc, const u32* a, u32 vb, int kc) {
    wgmma_pv_at<BF16, P, BN>(acc, a, [vb](u32 off) { return sw128_desc(vb + off, BN * 128, 1024); }, kc);
}

// wgmma_pv from the V tile's base descriptor dv = sw128_desc(vb, BN * 128, 1024) (desc_add per chunk).
template <bool BF16, int P, int BN>
__device__ __forceinline__ void wgmma_pv_desc(float* acc, const u32* a, u64 dv, int kc) {
    wgmma_pv_at<BF16, P, BN>(acc, a, [dv](u32 off) { return desc_add(dv, off); }, kc);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
