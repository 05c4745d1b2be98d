// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the portable mma.sync forward kernel, any sm_80+ target); included in that file's order, not on its own.

// DQK is the head dim of Q and K, DV that of V and O (DV <= DQK: O is staged where Q was).
template <bool BF16, int DQK, int DV, int BM, int BN, int NW>
__device__ __forceinline__ void fmha_fwd_body(RAGGED_FMHA_PARAMS) {
    constexpr int NT = NW * 32;
    constexpr int MT = BM / (16 * NW);
    static_assert(MT >= 1 && MT * 16 * NW == BM, "BM must be a multiple of 16 * NW");
    static_assert(DQK % 16 == 0 && DV % 16 == 0 && BN % 16 == 0 && DV <= DQK, "tile shapes");
    constexpr int PQ = ragged_row_width(DQK);  // shared-memory row widths
    constexpr int PV = ragged_row_width(DV);
    constexpr int KS = DQK / 16;  // k-steps of Q K^T
    constexpr int NS = BN / 8;    // key n-tiles of S
    constexpr int DT = DV / 8;    // head-dim n-tiles of O
    // Q stays in registers across the key loop only where that leaves room for the accumulators.
    constexpr bool Q_IN_REGS = MT == 1 && DQK <= 128;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = smem_addr(smem_raw);
    const u32 s_k = s_q + BM * PQ * 2;
    const u32 s_v = s_k + 2 * BN * PQ * 2;

    RAGGED_FMHA_BLOCK_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int lg = lane >> 2;  // row within an 8-row group of the mma fragment
    const int lt = lane & 3;   // column pair within the fragment
    const float sl2 = scale * 1.4426950408889634f;

    float acc[MT][DT][4];
    float m_i[MT][2];
    float l_i[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.f;
        m_i[mt][0] = m_i[mt][1] = RAGGED_NEG_INF;
        l_i[mt][0] = l_i[mt][1] = 0.f;
    }
    u32 qf[Q_IN_REGS ? KS : 1][4];

    if (nb_first < nb_last) {
        load_tile<DQK, PQ, BM, NT>(s_q, qp, q_seq, rows, q);
        {
            int j0 = nb_first * BN;
            load_tile<DQK, PQ, BN, NT>(s_k, kp + (i64)j0 * k_seq, k_seq, bt.lkv - j0, k);
            cp_async_commit();
            load_tile<DV, PV, BN, NT>(s_v, vp + (i64)j0 * v_seq, v_seq, bt.lkv - j0, v);
            cp_async_commit();
        }

#pragma unroll 1
        for (int nb = nb_first; nb < nb_last; ++nb) {
            const int buf = (nb - nb_first) & 1;
            const u32 kb = s_k + buf * (BN * PQ * 2);
            const u32 vb = s_v + buf * (BN * PV * 2);
            cp_async_wait<1>();
            __syncthreads();
            if (nb + 1 < nb_last) {
                int j1 = (nb + 1) * BN;
                load_tile<DQK, PQ, BN, NT>(s_k + (buf ^ 1) * (BN * PQ * 2), kp + (i64)j1 * k_seq, k_seq, bt.lkv - j1, k);
            }
            cp_async_commit();

            if (Q_IN_REGS && nb == nb_first) {
#pragma unroll
                for (int ks = 0; ks < KS; ++ks) {
                    int r = warp * 16 + (lane & 15);
                    ldsm_x4(s_q + swz<PQ>(r, ks * 2 + (lane >> 4)), qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3]);
                }
            }

            // S = Q K^T
            float s[MT][NS][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                u32 a[MT][4];
                if (Q_IN_REGS) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[0][e] = qf[Q_IN_REGS ? ks : 0][e];
                } else {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        int r = (warp * MT + mt) * 16 + (lane & 15);
                        ldsm_x4(s_q + swz<PQ>(r, ks * 2 + (lane >> 4)), a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
                    }
                }
#pragma unroll
                for (int np = 0; np < NS / 2; ++np) {
                    u32 b0, b1, b2, b3;
                    int r = np * 16 + (lane & 7) + ((lane >> 4) << 3);
                    ldsm_x4(kb + swz<PQ>(r, ks * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma16816<BF16>(s[mt][2 * np], a[mt], b0, b1);
                        mma16816<BF16>(s[mt][2 * np + 1], a[mt], b2, b3);
                    }
                }
            }

            // Scale into the base-2 domain; mask only the blocks that cut the band or Lkv.
            const int j0 = nb * BN;
            const int i_last = i0 + rows - 1;
            const bool full = j0 + BN - 1 < bt.lkv &&
                              (band.right < 0 || (i64)j0 + BN - 1 <= (i64)i0 + band.off + band.right) &&
                              (band.left < 0 || (i64)j0 >= (i64)i_last + band.off - band.left);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int rbase = i0 + (warp * MT + mt) * 16 + lg;
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float x = s[mt][nt][e] * sl2;
                        if (!full) {
                            int i = rbase + ((e >> 1) << 3);
                            int j = j0 + nt * 8 + 2 * lt + (e & 1);
                            if (!band.admits(i, j)) x = RAGGED_NEG_INF;
                        }
                        s[mt][nt][e] = x;
                    }
            }

            // Online softmax: rows lg and lg + 8 of each row group; a quad of lanes shares a row.
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    float mx = m_i[mt][hr];
#pragma unroll
                    for (int nt = 0; nt < NS; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    // A row with nothing admitted yet keeps max -inf; exponentiate against 0 so
                    // that every p is exp2(-inf) = 0 instead of NaN.
                    const float mu = mx == RAGGED_NEG_INF ? 0.f : mx;
                    const float corr = fast_exp2(m_i[mt][hr] - mu);
                    m_i[mt][hr] = mx;
                    float sum = 0.f;
#pragma unroll
                    for (int nt = 0; nt < NS; ++nt) {
                        float p0 = fast_exp2(s[mt][nt][2 * hr] - mu);
                        float p1 = fast_exp2(s[mt][nt][2 * hr + 1] - mu);
                        s[mt][nt][2 * hr] = p0;
                        s[mt][nt][2 * hr + 1] = p1;
                        sum += p0 + p1;
                    }
                    l_i[mt][hr] = l_i[mt][hr] * corr + sum;
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt) {
                        acc[mt][dt][2 * hr] *= corr;
                        acc[mt][dt][2 * hr + 1] *= corr;
                    }
                }

            cp_async_wait<1>();
            __syncthreads();
            if (nb + 1 < nb_last) {
                int j1 = (nb + 1) * BN;
                load_tile<DV, PV, BN, NT>(s_v + (buf ^ 1) * (BN * PV * 2), vp + (i64)j1 * v_seq, v_seq, bt.lkv - j1, v);
            }
            cp_async_commit();

            // O += P V, P re-packed from the S accumulators as the A operand.
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                u32 a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    a[mt][0] = pack2<BF16>(s[mt][2 * kc][0], s[mt][2 * kc][1]);
                    a[mt][1] = pack2<BF16>(s[mt][2 * kc][2], s[mt][2 * kc][3]);
                    a[mt][2] = pack2<BF16>(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
                    a[mt][3] = pack2<BF16>(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < DV / 16; ++dp) {
                    u32 b0, b1, b2, b3;
                    int r = kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    ldsm_x4_t(vb + swz<PV>(r, dp * 2 + (lane >> 4)), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma16816<BF16>(acc[mt][2 * dp], a[mt], b0, b1);
                        mma16816<BF16>(acc[mt][2 * dp + 1], a[mt], b2, b3);
                    }
                }
            }
        }
        cp_async_wait<0>();
    }

    // Epilogue: normalise, LSE, stage O through shared memory for 16-byte coalesced stores.
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int rl = (warp * MT + mt) * 16 + lg;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const float l = quad_row_sum(l_i[mt][hr]);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int r = rl + hr * 8;
            if (lse != 0 && lt == 0 && r < rows) {
                lse[bt.lse_elem + (i64)(i0 + r) * lse_seq + (i64)h * lse_head] = row_lse(m_i[mt][hr], 1.f, l);
            }
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                u32 packed = pack2<BF16>(acc[mt][dt][2 * hr] * inv, acc[mt][dt][2 * hr + 1] * inv);
                u32 addr = s_q + swz<PV>(r, dt) + lt * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed) : "memory");
            }
        }
    }
    __syncthreads();
    store_o_tile<DV, PV, BM, NT>(s_q, o + (bt.q_tok + i0) * o_seq + (i64)h * o_head, o_seq, rows);
}
