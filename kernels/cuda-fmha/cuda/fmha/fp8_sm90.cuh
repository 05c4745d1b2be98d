// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the Hopper FP8 forward's parts: e4m3 warpgroup MMA, P packing, scalars, O encoding, amax); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// FP8 (e4m3) forward, kernels/core/fp8-attention.md §3. The persistent kernel (kernel_sm90.cuh) runs
// it with a configuration whose `fp8` is set:
//   - Q and K hold e4m3 codes. A row of D codes has the bytes of a row of D / 2 two-byte elements, so
//     the configuration's head_dim counts two-byte units (D 128: 64; D 256: 128, two 128-byte
//     swizzle blocks per row) and Q / K travel through the same TMA maps, tail copies and
//     128-byte-swizzle tiles as a bf16 row of D / 2; one k32 step of e4m3 is 32 bytes, a bf16 k16
//     step (the same descriptor offsets).
//   - e4m3 wgmma takes B K-major only, and for O = P V the reduction runs over keys: V comes from the
//     workspace transposed (fp8_vt.cuh), one tile of head_dim_v rows of BN keys per key block, one
//     TMA box per chunk of 128 or 64 keys (fp8_fill_vt).
//   - P feeds the second product from registers. The A fragment of m64nNk32 e4m3 holds, per thread
//     (g = lane / 4, c = lane % 4, rows g and g + 8 of its warp's 16), bytes k = 4c .. 4c + 3 in its
//     first register pair and k = 16 + 4c .. 16 + 4c + 3 in its second, the lowest k in the lowest
//     byte (the PTX ISA's m16n8k32 e4m3 fragment, which each warp's 16 rows of the warpgroup shape
//     follow). The S accumulator gives the thread keys 8j + 2c, 8j + 2c + 1 of n8 chunk j instead.
//     Rather than exchange values between lanes, the transposed V orders each 16 keys so that A slot
//     4c + i (i = 0 .. 3) carries key 2c + (i & 1) + 8 (i >> 1): a thread's four bytes are then its
//     own two keys of chunk 2h and two of chunk 2h + 1, packed straight from the accumulator.
//   - Scales: S = δq δk α Q̂K̂ᵀ (folded into the softmax's scale); P̃ = sat_e4m3(p σs) with p against
//     the running max, which with a zero max slack never exceeds 1 by more than the few ulps of
//     softmax_step's fused form without slack; O' = δs δv Σ P̃ V̂ / l. Without
//     scale_s / descale_s (P exact in the definition) P still has to be e4m3 for the product: it is
//     quantized with the internal power of two RAGGED_FP8_P_SCALE and divided back.
//   - amax_o = max |O'| over the stored elements, before scale_o and rounding; amax_s = max P, the
//     normalized softmax before scale_s: with no max slack a row's largest p is its top weight p_top
//     (within ulps of 1), so its maximum is p_top / l (exactly 1 for a row with one admitted key, else
//     within l's f32 rounding; fp8_row_stats). Each
//     consumer warp keeps both in shared memory as the bits of non-negative floats (whose unsigned
//     order is the float order, NaN above everything) and writes one partial of each;
//     ragged_fmha_fp8_amax reduces them.
// ---------------------------------------------------------------------------------------------

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The power of two P is quantized with when the graph gives no scale_s: p <= 1 lands in e4m3's
// normal range down to 2^-6 / 256, well above where its subnormals lose precision.
#define RAGGED_FP8_P_SCALE 256.f
// Partials per block of the amax reduction (one per consumer warp, at most two consumer warpgroups)
// and the most blocks that write them: the forward never runs more working blocks than this. The
// amax_o partials come first, the amax_s ones RAGGED_FP8_AMAX_S_OFFSET words after them.
#define RAGGED_FP8_AMAX_WARPS 8
#define RAGGED_FP8_AMAX_BLOCKS 1024
#define RAGGED_FP8_AMAX_S_OFFSET (RAGGED_FP8_AMAX_WARPS * RAGGED_FP8_AMAX_BLOCKS)
// O's element type (f8_o_kind).
#define RAGGED_FP8_O_BF16 0
#define RAGGED_FP8_O_F16 1
#define RAGGED_FP8_O_E4M3 2

// The FP8 entry points' parameters after the fused list's: per scalar a device pointer (null: the
// value that follows it is used), O's type, whether P is scaled (scale_s / descale_s given), the
// transposed V's key blocks per (KV head, batch) and the batch count that index it, and the amax
// partials (null without amax outputs).
#define RAGGED_FP8_PARAMS                                                                                         \
    const float *f8_descale_q, float f8_descale_q_value, const float *f8_descale_k, float f8_descale_k_value,     \
        const float *f8_descale_v, float f8_descale_v_value, const float *f8_descale_s, float f8_descale_s_value, \
        const float *f8_scale_s, float f8_scale_s_value, const float *f8_scale_o, float f8_scale_o_value,         \
        int f8_o_kind, int f8_p_scaled, int f8_vt_blocks, int f8_batch, u32 *f8_amax
#define RAGGED_FP8_ARGS                                                                                    \
    {f8_descale_q, f8_descale_q_value, f8_descale_k, f8_descale_k_value, f8_descale_v, f8_descale_v_value, \
     f8_descale_s, f8_descale_s_value, f8_scale_s,   f8_scale_s_value,   f8_scale_o,   f8_scale_o_value,   \
     f8_o_kind,    f8_p_scaled,        f8_vt_blocks, f8_batch,           f8_amax}

struct RaggedFp8Params {
    const float* descale_q;
    float descale_q_value;
    const float* descale_k;
    float descale_k_value;
    const float* descale_v;
    float descale_v_value;
    const float* descale_s;
    float descale_s_value;
    const float* scale_s;
    float scale_s_value;
    const float* scale_o;
    float scale_o_value;
    int o_kind;
    int p_scaled;
    int vt_blocks;
    int batch;
    u32* amax;
};

// A scalar input: read through its device pointer (after the grid-dependency wait, since an earlier
// kernel on the stream may have written it), or the value the host passed.
__device__ __forceinline__ float ragged_fp8_scalar(const float* p, float value) {
    if (p == nullptr) return value;
    float x;
    asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(x) : "l"(p) : "memory");
    return x;
}

// The per-item constants a consumer derives from the scalars once per kernel.
struct RaggedFp8Scales {
    float s_scale;  // δq δk: multiplies the attention scale
    float p_scale;  // σs, or RAGGED_FP8_P_SCALE
    float o_scale;  // δs δv, or δv / RAGGED_FP8_P_SCALE: O' = o_scale Σ P̃ V̂ / l
    float o_out;    // σo for an e4m3 O (1 otherwise)
};

__device__ __forceinline__ RaggedFp8Scales ragged_fp8_scales(const RaggedFp8Params& f) {
    RaggedFp8Scales s;
    const float dq = ragged_fp8_scalar(f.descale_q, f.descale_q_value);
    const float dk = ragged_fp8_scalar(f.descale_k, f.descale_k_value);
    const float dv = ragged_fp8_scalar(f.descale_v, f.descale_v_value);
    s.s_scale = dq * dk;
    if (f.p_scaled) {
        s.p_scale = ragged_fp8_scalar(f.scale_s, f.scale_s_value);
        s.o_scale = ragged_fp8_scalar(f.descale_s, f.descale_s_value) * dv;
    }
    else {
        s.p_scale = RAGGED_FP8_P_SCALE;
        s.o_scale = dv * (1.f / RAGGED_FP8_P_SCALE);
    }
    s.o_out = f.o_kind == RAGGED_FP8_O_E4M3 ? ragged_fp8_scalar(f.scale_o, f.scale_o_value) : 1.f;
    return s;
}

// Eight words of shared memory per consumer warp (at w, 32 bytes): the warp's running amax_o and
// amax_s (ragged_amax_bits, as float bits), O's two factors o_scale and o_out, P's scale and the scores'
// scale in log2 units. Through the key loop every consumer register goes to S, P and O (at blocks of
// 192 keys, 184 of the 240 per thread), so values needed once per block or per item are loaded where
// they are used instead of held.
#define RAGGED_FP8_WORD_AMAX_O 0
#define RAGGED_FP8_WORD_AMAX_S 1
#define RAGGED_FP8_WORD_O_SCALE 2
#define RAGGED_FP8_WORD_O_OUT 3
#define RAGGED_FP8_WORD_P_SCALE 4
#define RAGGED_FP8_WORD_SL2 5

__device__ __forceinline__ float fp8_warp_word(u32 w, int i) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(w + 4 * i) : "memory");
    return x;
}

__device__ __forceinline__ void fp8_set_warp_word(u32 w, int i, float x) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(w + 4 * i), "f"(x) : "memory");
}

// By the whole warp, once, before its first item.
__device__ __forceinline__ void fp8_warp_words_init(u32 w, const RaggedFp8Scales& sc, float sl2, int lane) {
    if (lane == 0) {
        fp8_set_warp_word(w, RAGGED_FP8_WORD_P_SCALE, sc.p_scale);
        fp8_set_warp_word(w, RAGGED_FP8_WORD_SL2, sl2);
        fp8_set_warp_word(w, RAGGED_FP8_WORD_AMAX_O, 0.f);
        fp8_set_warp_word(w, RAGGED_FP8_WORD_AMAX_S, 0.f);
        fp8_set_warp_word(w, RAGGED_FP8_WORD_O_SCALE, sc.o_scale);
        fp8_set_warp_word(w, RAGGED_FP8_WORD_O_OUT, sc.o_out);
    }
    __syncwarp();
}

// The warp's maximum of m (amax bits) into word i, by the whole warp.
__device__ __forceinline__ void fp8_merge_amax(u32 w, int i, u32 m, int lane) {
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0) {
        const u32 old = __float_as_uint(fp8_warp_word(w, i));
        fp8_set_warp_word(w, i, __uint_as_float(m > old ? m : old));
    }
    __syncwarp();
}

// Two floats to two e4m3 codes, round to nearest even, finite values saturated to ±448; `lo` in the
// low byte. NaN stays NaN.
__device__ __forceinline__ u32 ragged_e4m3x2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// O's code: as ragged_e4m3x2, except that an infinity (which .satfinite would clamp) becomes NaN
// with its sign, and a NaN keeps its sign (fp8-attention.md §2.4, §2.5: e4m3 has no infinity).
__device__ __forceinline__ u32 ragged_e4m3x2_out(float lo, float hi) {
    const u32 bl = __float_as_uint(lo), bh = __float_as_uint(hi);
    u32 r = ragged_e4m3x2(lo, hi);
    if ((bl & 0x7f800000u) == 0x7f800000u) r = (r & 0xff00u) | 0x7fu | ((bl >> 24) & 0x80u);
    if ((bh & 0x7f800000u) == 0x7f800000u) r = (r & 0x00ffu) | 0x7f00u | ((bh >> 16) & 0x8000u);
    return r;
}

// Four floats to one register of four e4m3 codes, x0 in the lowest byte.
__device__ __forceinline__ u32 ragged_e4m3x4(float x0, float x1, float x2, float x3) {
    return ragged_e4m3x2(x0, x1) | (ragged_e4m3x2(x2, x3) << 16);
}

// amax as the bits of |x|: unsigned comparison of these is the float order with NaN above +inf.
__device__ __forceinline__ u32 ragged_amax_bits(u32 m, float x) {
    const u32 b = __float_as_uint(x) & 0x7fffffffu;
    return b > m ? b : m;
}

#define RAGGED_F8_ACC4(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3])
#define RAGGED_F8_ACC16(b) RAGGED_F8_ACC4(b), RAGGED_F8_ACC4(b + 4), RAGGED_F8_ACC4(b + 8), RAGGED_F8_ACC4(b + 12)
#define RAGGED_F8_ACC32 RAGGED_F8_ACC16(0), RAGGED_F8_ACC16(16)
#define RAGGED_F8_ACC64 RAGGED_F8_ACC32, RAGGED_F8_ACC16(32), RAGGED_F8_ACC16(48)
#define RAGGED_F8_ACC96 RAGGED_F8_ACC64, RAGGED_F8_ACC16(64), RAGGED_F8_ACC16(80)
#define RAGGED_F8_HOLD96 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23," \
    "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71," \
    "%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
#define RAGGED_F8_HOLD32 \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
    "%27,%28,%29,%30,%31"
#define RAGGED_F8_HOLD64                                                                                     \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
    "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"  \
    "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"

// D[64 x 192] (+)= A[64 x 32] (shared, K-major e4m3) * B[192 x 32]^T (shared, K-major e4m3).
__device__ __forceinline__ void wgmma_e4m3_ss_n192(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {" RAGGED_F8_HOLD96
                 "}, %96, %97, p, 1, 1;\n}\n"
                 : RAGGED_F8_ACC96
                 : "l"(da), "l"(db), "r"(accumulate));
}

// D[64 x 128] (+)= A[64 x 32] (shared, K-major e4m3) * B[128 x 32]^T (shared, K-major e4m3).
__device__ __forceinline__ void wgmma_e4m3_ss_n128(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" RAGGED_F8_HOLD64
                 "}, %64, %65, p, 1, 1;\n}\n"
                 : RAGGED_F8_ACC64
                 : "l"(da), "l"(db), "r"(accumulate));
}

// D[64 x 64] (+)= A[64 x 32] (shared, K-major e4m3) * B[64 x 32]^T (shared, K-major e4m3).
__device__ __forceinline__ void wgmma_e4m3_ss_n64(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" RAGGED_F8_HOLD32
                 "}, %32, %33, p, 1, 1;\n}\n"
                 : RAGGED_F8_ACC32
                 : "l"(da), "l"(db), "r"(accumulate));
}

// D[64 x 128] += A[64 x 32] (registers, e4m3 fragment) * B[128 x 32]^T (shared, K-major e4m3).
__device__ __forceinline__ void wgmma_e4m3_rs_n128(float* d, const u32* a, u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" RAGGED_F8_HOLD64
                 "}, {%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
                 : RAGGED_F8_ACC64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// D[64 x 64] += A[64 x 32] (registers, e4m3 fragment) * B[64 x 32]^T (shared, K-major e4m3).
__device__ __forceinline__ void wgmma_e4m3_rs_n64(float* d, const u32* a, u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" RAGGED_F8_HOLD32
                 "}, {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                 : RAGGED_F8_ACC32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

#undef RAGGED_F8_HOLD32
#undef RAGGED_F8_HOLD64
#undef RAGGED_F8_HOLD96
#undef RAGGED_F8_ACC96
#undef RAGGED_F8_ACC32
#undef RAGGED_F8_ACC64
#undef RAGGED_F8_ACC16
#undef RAGGED_F8_ACC4

// S = Q K^T for one consumer (64 rows): Q from shared memory (rows 64 c of the BM-row Q tile), K from
// the tile at kb (BN rows), DB real bytes per row, one k32 step of 32 bytes each. A row lives in
// 128-byte swizzle blocks, each block a tile of its own (Q's second block BM * 128 bytes after the
// first, K's BN * 128): DB = 256 is eight steps over both blocks, DB = 128 the four of one, DB = 64
// the first two (the rest of the row the loads' zero padding, never read).
template <int DB, int BN, int BM>
__device__ __forceinline__ void fp8_issue_s(float* s, u32 s_q, int c, u32 kb) {
    static_assert((DB == 64 || DB == 128 || DB == 256) && (BN == 64 || BN == 128 || BN == 192),
                  "the FP8 S product: rows of one or two 128-byte swizzle blocks, n64, n128 or n192");
    const u64 dk = sw128_desc(kb, 16, 1024);
    const u64 dq = sw128_desc(s_q + c * (64 * 128), 16, 1024);
#pragma unroll
    for (int ks = 0; ks < DB / 32; ++ks) {
        const u64 da = desc_add(dq, (ks >> 2) * (BM * 128) + (ks & 3) * 32);
        const u64 db = desc_add(dk, (ks >> 2) * (BN * 128) + (ks & 3) * 32);
        if constexpr (BN == 192)
            wgmma_e4m3_ss_n192(s, da, db, ks > 0);
        else if constexpr (BN == 128)
            wgmma_e4m3_ss_n128(s, da, db, ks > 0);
        else
            wgmma_e4m3_ss_n64(s, da, db, ks > 0);
    }
}

// The transposed V tile is made of chunks of VK keys (fp8_vt_chunk_keys): 128 for blocks of 128 keys,
// else 64 (a block of 192 keys is three). A chunk holds the tile's DV rows of VK one-byte keys, K-major,
// and the chunks follow each other (chunk kc DV * VK bytes on). Rows of 128 keys are 128-byte swizzle
// rows (8-row groups 1024 bytes apart); rows of 64 keys use the 64-byte swizzle (layout type 2 in bits
// 62-63, 8-row groups 512 bytes apart), the pattern the tensor map of such a chunk writes
// (fp8_vt.cuh): a TMA box of 64-byte swizzle rows is at most 64 bytes wide, so a block of 192 keys
// cannot be one box of 128-byte rows.
template <int BN>
__device__ __forceinline__ constexpr int fp8_vt_chunk_keys() {
    return BN == 128 ? 128 : 64;
}

template <int BN>
__device__ __forceinline__ u64 fp8_vt_desc(u32 vb) {
    static_assert(BN == 64 || BN == 128 || BN == 192, "transposed V rows of 64, 128 or 192 keys");
    if constexpr (fp8_vt_chunk_keys<BN>() == 128)
        return sw128_desc(vb, 16, 1024);
    else
        return (sw128_desc(vb, 16, 512) & ~(3ull << 62)) | (2ull << 62);
}

// O += P V from the transposed V tile at vb: DV rows (head-dim columns of O) of BN keys in chunks of VK,
// one k32 step per 32 keys (step kc in chunk kc * 32 / VK, kc * 32 % VK bytes into its rows). DV = 256
// is two n128 products per step over each chunk's two halves of 128 rows (the upper half 128 * VK bytes
// on), the upper half's accumulator after the lower one's 64 registers, where the epilogue reads
// columns 128 .. 255 (as the bf16 / fp16 d256 P V).
template <int DV, int BN>
__device__ __forceinline__ void fp8_issue_pv(float* acc, const u32 (*pa)[4], u32 vb) {
    static_assert(DV == 64 || DV == 128 || DV == 256, "the FP8 P V product: n64, n128 or two n128");
    constexpr int VK = fp8_vt_chunk_keys<BN>();
    const u64 dv = fp8_vt_desc<BN>(vb);
#pragma unroll
    for (int kc = 0; kc < BN / 32; ++kc) {
        const u32 at = (kc * 32 / VK) * (DV * VK) + (kc * 32) % VK;
        if constexpr (DV == 64) {
            wgmma_e4m3_rs_n64(acc, pa[kc], desc_add(dv, at));
        }
        else {
#pragma unroll
            for (int half = 0; half < DV / 128; ++half)
                wgmma_e4m3_rs_n128(acc + half * 64, pa[kc], desc_add(dv, at + half * (128 * VK)));
        }
    }
}

// The producer's fill of one transposed V block (fp8_vt.cuh): DV rows of BN bytes, always whole, one
// TMA box of the workspace's tensor map per chunk of VK keys (the map's box is VK bytes wide), at block
// blk, completing on bar.
template <int DV, int BN>
__device__ __forceinline__ void fp8_fill_vt(u32 bar, u32 s_dst, const RaggedTmaMap* map, int blk, int lane) {
    constexpr int VK = fp8_vt_chunk_keys<BN>();
    if (lane == 0) {
        mbar_arrive_expect_tx(bar, DV * BN);
#pragma unroll
        for (int ch = 0; ch < BN / VK; ++ch) tma_load_3d(s_dst + ch * (DV * VK), map, ch * (VK / 2), blk, 0, bar);
    }
}

// P (fp32, accumulator layout) times p_scale -> the e4m3 A fragments of the P V product, one k32
// chunk per entry, in the key order of the transposed V (see the top of this file).
template <int BN>
__device__ __forceinline__ void fp8_pack_p(const float* s, u32 (*pa)[4], float p_scale) {
#pragma unroll
    for (int kc = 0; kc < BN / 32; ++kc) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float* a = s + (4 * kc + 2 * h) * 4;  // n8 chunk 4 kc + 2 h
            const float* b = a + 4;                     // and the next
            pa[kc][2 * h + 0] = ragged_e4m3x4(a[0] * p_scale, a[1] * p_scale, b[0] * p_scale, b[1] * p_scale);
            pa[kc][2 * h + 1] = ragged_e4m3x4(a[2] * p_scale, a[3] * p_scale, b[2] * p_scale, b[3] * p_scale);
        }
    }
}

// The FP8 forward's row statistics (epilogue_row_stats: the LSE and O's factors), and amax_s takes the
// normalized maximum p_top / l of each of this thread's stored rows with an admitted key, p_top the
// row's top weight as softmax_step (no slack) computed it; by the whole warp, into its word at w.
template <bool TSQ>
__device__ __forceinline__ void fp8_row_stats(const float* m_i, const float* l_i, const EpilogueRows& out,
                                              int row_in_tile, int lt, float sl2, i64 lse_seq, u32 w, int lane,
                                              float* inv) {
    float l[2];
    epilogue_row_stats<TSQ>(m_i, l_i, out, row_in_tile, lt, sl2, lse_seq, fp8_warp_word(w, RAGGED_FP8_WORD_O_SCALE),
                            inv, l);
    const float f = sl2 > 0.f ? sl2 : 1.f;
    u32 amax_s = 0;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        if (row_in_tile + hr * 8 < out.r_hi && !(l[hr] == 0.f)) {
            const float m = m_i[hr];
            const float p_top = fast_exp2(__fmaf_rn(m, f, __fmul_rn(-m, f)));
            amax_s = ragged_amax_bits(amax_s, p_top / l[hr]);
        }
    }
    fp8_merge_amax(w, RAGGED_FP8_WORD_AMAX_S, amax_s, lane);
}

// The FP8 forward's O store (its row statistics and LSE: epilogue_row_stats with AMAX_S): O' = acc inv for
// this thread's two rows, as bf16 / fp16 (4-byte stores) or e4m3 of O' σo (2-byte stores). O's
// pointer and strides count two-byte units (an e4m3 O's byte strides halved: the plan keeps them
// even), the row's columns bytes for e4m3. The warp's amax_o word at w (fp8_warp_words) takes max |O'|
// of every stored element; by the whole warp.
template <int DT>
__device__ __forceinline__ void fp8_epilogue_store_o(const float* acc, const float* inv, const EpilogueRows& out,
                                                     int row_in_tile, int lt, i64 o_seq, int o_kind, u32 w,
                                                     int lane) {
    const float o_out = fp8_warp_word(w, RAGGED_FP8_WORD_O_OUT);
    u32 amax = 0;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int r = row_in_tile + hr * 8;
        if (r >= out.r_hi) continue;
        u16* orow = out.op + (i64)r * o_seq;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            const float x0 = acc[dt * 4 + 2 * hr] * inv[hr];
            const float x1 = acc[dt * 4 + 2 * hr + 1] * inv[hr];
            amax = ragged_amax_bits(ragged_amax_bits(amax, x0), x1);
            if (o_kind == RAGGED_FP8_O_E4M3) {
                const unsigned short code = (unsigned short)ragged_e4m3x2_out(x0 * o_out, x1 * o_out);
                unsigned char* ob = reinterpret_cast<unsigned char*>(orow) + dt * 8 + lt * 2;
                asm volatile("st.global.b16 [%0], %1;\n" ::"l"(ob), "h"(code) : "memory");
            }
            else {
                const u32 packed = o_kind == RAGGED_FP8_O_BF16 ? pack2<true>(x0, x1) : pack2<false>(x0, x1);
                asm volatile("st.global.b32 [%0], %1;\n" ::"l"(orow + dt * 8 + lt * 2), "r"(packed) : "memory");
            }
        }
    }
    fp8_merge_amax(w, RAGGED_FP8_WORD_AMAX_O, amax, lane);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
