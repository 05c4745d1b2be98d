// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the Hopper forward's online softmax); included in that file's order, not on its own.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// How far (log2 units, after the scale) a row's block max may exceed its running max before the
// running max moves. Below it corr is exactly 1, so most blocks skip the O rescale
// (softmax_rescale_o); every p stays <= 2^8, far inside fp32 and the bf16 / fp16 range of P, and
// O / l and the LSE are unchanged since both use the same running max.
#define RAGGED_SOFTMAX_MAX_SLACK 8

// Mask, online-softmax update and exponentiation of one S block held in wgmma accumulator layout
// (rows row_in_tile and row_in_tile + 8, columns nt * 8 + 2 * lt + {0, 1}). corr[] receives the
// factor by which the running O rows must be rescaled. The running max m_i is kept on unscaled
// scores so that scaling and max subtraction fuse into one FFMA per score; a non-positive scale
// (which reverses the order of the scores) is applied up front instead.
// j0 is the first key the tile holds (kv_tile_first_key) and keys below k_min, the block's own first
// key, are masked. Whether the block needs a mask at all is decided from fr, the keys every row of
// the tile admits (ragged_full_keys, once per item). SLACK is the max slack above. The FP8 forward
// takes none (every p <= 1, so that p times its P scale stays inside e4m3); its row statistics
// (fp8_row_stats) recompute the top weight as exp2(fma(m, f, c)) with this c = -m f, one FFMA and
// one EX2 per score as here, so that p_top / l is exactly 1 for a row with a single admitted key.
template <int NS, int SLACK = RAGGED_SOFTMAX_MAX_SLACK>
__device__ __forceinline__ void softmax_step(float* s, float* m_i, float* l_i, float* corr, const RaggedBand& band,
                                             int j0, int bn, int i0, int row_in_tile, int lt, float sl2, int k_min,
                                             int2 fr) {
    const float f = sl2 > 0.f ? sl2 : 1.f;
    if (!(sl2 > 0.f)) {
#pragma unroll
        for (int i = 0; i < NS * 4; ++i) s[i] *= sl2;
    }
    const bool full = j0 >= fr.x && j0 + bn <= fr.y && j0 >= k_min;
    if (!full) wgmma_mask_block<NS>(s, band, j0, i0, row_in_tile, lt, k_min);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float mx = m_i[hr];
#pragma unroll
        for (int nt = 0; nt < NS; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * hr], s[nt * 4 + 2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // Nothing admitted yet: exponentiate against 0 so every p is exp2(-inf) = 0, never NaN.
        // Keep the old max while within the slack (mx >= m_i[hr]; a NaN difference, both -inf,
        // keeps -inf either way).
        const bool keep = (mx - m_i[hr]) * f <= (float)SLACK;
        if (keep) mx = m_i[hr];
        const float mu = mx == RAGGED_NEG_INF ? 0.f : mx;
        // Without slack (FP8) rounded on its own, as fp8_row_stats computes it; with slack ptxas may
        // fuse it where that is faster.
        const float neg_mu_f = SLACK == 0 ? __fmul_rn(-mu, f) : -mu * f;
        corr[hr] = keep ? 1.f : fast_exp2((m_i[hr] - mu) * f);
        m_i[hr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NS; ++nt) {
            const float p0 = fast_exp2(fmaf(s[nt * 4 + 2 * hr], f, neg_mu_f));
            const float p1 = fast_exp2(fmaf(s[nt * 4 + 2 * hr + 1], f, neg_mu_f));
            s[nt * 4 + 2 * hr] = p0;
            s[nt * 4 + 2 * hr + 1] = p1;
            sum += p0 + p1;
        }
        l_i[hr] = l_i[hr] * corr[hr] + sum;
    }
}

// O *= corr per row, skipped when no row of the warp moved its max (every factor exactly 1).
template <int D>
__device__ __forceinline__ void softmax_rescale_o(float* acc, const float* corr) {
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            acc[dt * 4 + 0] *= corr[0];
            acc[dt * 4 + 1] *= corr[0];
            acc[dt * 4 + 2] *= corr[1];
            acc[dt * 4 + 3] *= corr[1];
        }
    }
}

// P (fp32, accumulator layout) -> A-operand registers of the P V product, one k16 chunk per entry.
template <bool BF16, int BN>
__device__ __forceinline__ void softmax_pack_p(const float* s, u32 (*pa)[4]) {
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
        pa[kc][0] = pack2<BF16>(s[(2 * kc) * 4 + 0], s[(2 * kc) * 4 + 1]);
        pa[kc][1] = pack2<BF16>(s[(2 * kc) * 4 + 2], s[(2 * kc) * 4 + 3]);
        pa[kc][2] = pack2<BF16>(s[(2 * kc + 1) * 4 + 0], s[(2 * kc + 1) * 4 + 1]);
        pa[kc][3] = pack2<BF16>(s[(2 * kc + 1) * 4 + 2], s[(2 * kc + 1) * 4 + 3]);
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
