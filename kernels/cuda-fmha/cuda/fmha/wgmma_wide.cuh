// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the wide S = Q K^T warpgroup MMAs, N = 176 and 192, and S with Q in registers); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Key blocks wider than 128 (FlashAttention-3 runs D 128 non-causal as BM 128 x BN 176): fewer,
// longer turns per block amortise the per-block waits, turn hand-overs and softmax reductions over
// more MMA work. Only the S product widens; O += P V keeps N = D and takes BN / 16 k16 chunks.
// The accumulator layout is the n128 one continued: columns nt * 8 + 2 lt + {0, 1}, nt < N / 8.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

#define RAGGED_W4(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3])
#define RAGGED_W8(b) RAGGED_W4(b), RAGGED_W4(b + 4)
#define RAGGED_W16(b) RAGGED_W8(b), RAGGED_W8(b + 8)
#define RAGGED_W64(b) RAGGED_W16(b), RAGGED_W16(b + 16), RAGGED_W16(b + 32), RAGGED_W16(b + 48)
#define RAGGED_REGS64                                                   \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"            \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"  \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"  \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"

// D[64 x 176] (+)= A[64 x 16] (shared, K-major) * B[176 x 16]^T (shared, K-major); TY is the
// operand type of the instruction ("bf16" or "f16").
#define RAGGED_WGMMA_SS_N176(TY)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n176k16.f32." TY "." TY " {" RAGGED_REGS64 ","     \
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                   \
                 "%80,%81,%82,%83,%84,%85,%86,%87"                                                   \
                 "}, %88, %89, p, 1, 1, 0, 0;\n}\n"                                                  \
                 : RAGGED_W64(0), RAGGED_W16(64), RAGGED_W8(80)                                      \
                 : "l"(da), "l"(db), "r"(accumulate))
#define RAGGED_WGMMA_SS_N192(TY)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " {" RAGGED_REGS64 ","     \
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                   \
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"                   \
                 "}, %96, %97, p, 1, 1, 0, 0;\n}\n"                                                  \
                 : RAGGED_W64(0), RAGGED_W16(64), RAGGED_W16(80)                                     \
                 : "l"(da), "l"(db), "r"(accumulate))

template <bool BF16>
__device__ __forceinline__ void wgmma_ss_n176(float* d, u64 da, u64 db, int accumulate) {
    if (BF16)
        RAGGED_WGMMA_SS_N176("bf16");
    else
        RAGGED_WGMMA_SS_N176("f16");
}
template <bool BF16>
__device__ __forceinline__ void wgmma_ss_n192(float* d, u64 da, u64 db, int accumulate) {
    if (BF16)
        RAGGED_WGMMA_SS_N192("bf16");
    else
        RAGGED_WGMMA_SS_N192("f16");
}

// D[64 x N] (+)= A[64 x 16] (registers, the P V fragment layout) * B[N x 16]^T (shared, K-major):
// S = Q K^T with Q held in registers (no transpose of B, unlike the P V product).
#define RAGGED_WGMMA_RS_K_N64(TY)                                                                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {"                        \
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                            \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"                   \
                 "}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"                                        \
                 : RAGGED_W16(0), RAGGED_W16(16)                                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate))
#define RAGGED_WGMMA_RS_K_N128(TY)                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" RAGGED_REGS64         \
                 "}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"                                        \
                 : RAGGED_W64(0)                                                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate))

template <bool BF16, int N>
__device__ __forceinline__ void wgmma_rs_k(float* d, const u32* a, u64 db, int accumulate) {
    static_assert(N == 64 || N == 128, "S widths with Q in registers");
    if constexpr (N == 64) {
        if (BF16)
            RAGGED_WGMMA_RS_K_N64("bf16");
        else
            RAGGED_WGMMA_RS_K_N64("f16");
    }
    else {
        if (BF16)
            RAGGED_WGMMA_RS_K_N128("bf16");
        else
            RAGGED_WGMMA_RS_K_N128("f16");
    }
}

#undef RAGGED_WGMMA_RS_K_N64
#undef RAGGED_WGMMA_RS_K_N128
#undef RAGGED_WGMMA_SS_N176
#undef RAGGED_WGMMA_SS_N192
#undef RAGGED_REGS64
#undef RAGGED_W64
#undef RAGGED_W16
#undef RAGGED_W8
#undef RAGGED_W4

// S = Q K^T for any key-block width the warp-specialized body takes.
template <bool BF16, int N>
__device__ __forceinline__ void wgmma_ss_any(float* d, u64 da, u64 db, int accumulate) {
    static_assert(N == 64 || N == 128 || N == 176 || N == 192, "S widths");
    if constexpr (N == 176)
        wgmma_ss_n176<BF16>(d, da, db, accumulate);
    else if constexpr (N == 192)
        wgmma_ss_n192<BF16>(d, da, db, accumulate);
    else
        wgmma_ss<BF16, N>(d, da, db, accumulate);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
