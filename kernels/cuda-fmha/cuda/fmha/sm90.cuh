// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the Hopper wgmma forward body); included in that file's order, not on its own.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// 2^x for x <= 0 (or -inf) on the FMA pipe instead of the MUFU unit, whose ex2 rate (16 per clock
// per SM) is the tensor cores' score rate at D 64: the nearest integer n of x goes to the exponent
// bits, 2^(x - n) on [-1/2, 1/2] is a cubic (relative error 7.7e-5, far below the bf16 / fp16
// rounding of P); x < -126 (masked scores included) gives exactly 0, as ex2.approx.ftz does.
__device__ __forceinline__ float poly_exp2(float x) {
    const float xc = fmaxf(x, -126.f);
    const float t = xc + 12582912.f;  // 1.5 * 2^23: the sum's low mantissa bits hold round(xc)
    const float f = xc - (t - 12582912.f);
    float p = fmaf(0.0550886838f, f, 0.242604051f);
    p = fmaf(p, f, 0.693276242f);
    p = fmaf(p, f, 0.99992894f);
    const u32 bits = (u32)__float_as_int(p) + (((u32)__float_as_int(t) - 0x4B400000u) << 23);
    return x < -126.f ? 0.f : __int_as_float((int)bits);
}

// t[0] = op over t[0 .. 2 W): one pairwise level per W, unrolled at compile time (a loop halving a
// runtime width left the array in local memory).
template <int W, bool MAX>
__device__ __forceinline__ void tree_reduce(float* t) {
    if constexpr (W >= 1) {
#pragma unroll
        for (int i = 0; i < W; ++i) t[i] = MAX ? fmaxf(t[i], t[i + W]) : t[i] + t[i + W];
        tree_reduce<W / 2, MAX>(t);
    }
}

// -inf for the scores of one S block (wgmma accumulator layout, as below) whose keys the band does not
// admit or lie below k_min: per row the admitted range, shifted to the thread's first column, so that
// each score is two compares against constants (its column in the block) and a select. admits per
// score, with its 64-bit arithmetic, cost 4-5 % at d128 and d64 causal (bench/gpu/NOTES.md).
template <int NS>
__device__ __forceinline__ void wgmma_mask_block(float* s, const RaggedBand& band, int j0, int i0, int row_in_tile,
                                                 int lt, int k_min) {
    const int jb = j0 + 2 * lt;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        int lo, hi;
        band.key_range(i0 + row_in_tile + hr * 8, &lo, &hi);
        lo = lo > k_min ? lo : k_min;
        const int a = lo - jb, b = hi - jb;
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = nt * 8 + e;
                if (c < a || c >= b) s[nt * 4 + 2 * hr + e] = RAGGED_NEG_INF;
            }
    }
}

// The keys [x, y) that every query row i0 .. i_last admits: key_range's bounds are nondecreasing in
// the row, so the last row's low bound and the first row's high bound. A key block [j0, j0 + bn)
// inside it needs no mask.
__device__ __forceinline__ int2 ragged_full_keys(const RaggedBand& band, int i0, int i_last) {
    int lo, hi, unused;
    band.key_range(i_last, &lo, &unused);
    band.key_range(i0, &unused, &hi);
    return make_int2(lo, hi);
}

// Mask, online-softmax update and exponentiation of one S block held in wgmma accumulator layout
// (rows row_in_tile and row_in_tile + 8, columns nt * 8 + 2 * lt + {0, 1}). corr[] receives the
// factor by which the running O rows must be rescaled. The running max m_i is kept on unscaled
// scores so that scaling and max subtraction fuse into one FFMA per score; a non-positive scale
// (which reverses the order of the scores) is applied up front instead.
// POLY of every 4 n-tiles exponentiate with poly_exp2 (0: all on the MUFU unit). TREE: the row max
// and row sum as pairwise trees (depth log2(2 NS)) instead of one running value (depth 2 NS), so the
// exponentials, which wait for the max, start sooner. LZ > 0: the running max moves only when the
// block's max exceeds it by more than LZ (log2 units, after the scale), so corr is exactly 1 for most
// blocks and the caller may skip the O rescale; every p stays <= 2^LZ (bench/gpu/NOTES.md has the
// bound) and O / l and the LSE are unchanged, since both use the same m_i. KFLOOR: keys below k_min
// are masked too (a tail block loaded from the batch's last BN keys starts before the block's own
// first key; sm90_wsp.cuh). FR: whether the block needs no mask is decided from fr, the keys every
// row of the tile admits (ragged_full_keys, once per tile), instead of from the band per block.
template <int NS, int POLY = 0, bool TREE = false, int LZ = 0, bool KFLOOR = false, bool FR = false>
__device__ __forceinline__ void wgmma_softmax_step(float* s, float* m_i, float* l_i, float* corr,
                                                   const RaggedBand& band, int j0, int bn, int i0, int i_last,
                                                   int row_in_tile, int lt, float sl2, int k_min = 0,
                                                   int2 fr = int2{}) {
    static_assert(!TREE || (NS & (NS - 1)) == 0, "tree reductions over a power of two");
    const float f = sl2 > 0.f ? sl2 : 1.f;
    if (!(sl2 > 0.f)) {
#pragma unroll
        for (int i = 0; i < NS * 4; ++i) s[i] *= sl2;
    }
    const bool full = FR ? j0 >= fr.x && j0 + bn <= fr.y && (!KFLOOR || j0 >= k_min)
                         : j0 + bn - 1 < band.lkv &&
                               (band.right < 0 || (i64)j0 + bn - 1 <= (i64)i0 + band.off + band.right) &&
                               (band.left < 0 || (i64)j0 >= (i64)i_last + band.off - band.left) &&
                               (!KFLOOR || j0 >= k_min);
    if (!full) wgmma_mask_block<NS>(s, band, j0, i0, row_in_tile, lt, KFLOOR ? k_min : 0);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float mx = m_i[hr];
        if constexpr (TREE) {
            float t[NS];
#pragma unroll
            for (int nt = 0; nt < NS; ++nt) t[nt] = fmaxf(s[nt * 4 + 2 * hr], s[nt * 4 + 2 * hr + 1]);
            tree_reduce<NS / 2, true>(t);
            mx = fmaxf(mx, t[0]);
        }
        else {
#pragma unroll
            for (int nt = 0; nt < NS; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * hr], s[nt * 4 + 2 * hr + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // Nothing admitted yet: exponentiate against 0 so every p is exp2(-inf) = 0, never NaN.
        // LZ: keep the old max (mx >= m_i[hr]; a NaN difference, both -inf, keeps -inf either way).
        const bool keep = LZ > 0 && (mx - m_i[hr]) * f <= (float)LZ;
        if (keep) mx = m_i[hr];
        const float mu = mx == RAGGED_NEG_INF ? 0.f : mx;
        const float neg_mu_f = -mu * f;
        corr[hr] = keep ? 1.f : fast_exp2((m_i[hr] - mu) * f);
        m_i[hr] = mx;
        float sum = 0.f;
        float ts[TREE ? NS : 1];
#pragma unroll
        for (int nt = 0; nt < NS; ++nt) {
            const bool poly = (nt & 3) >= 4 - POLY;
            float p0 = fmaf(s[nt * 4 + 2 * hr], f, neg_mu_f);
            p0 = poly ? poly_exp2(p0) : fast_exp2(p0);
            float p1 = fmaf(s[nt * 4 + 2 * hr + 1], f, neg_mu_f);
            p1 = poly ? poly_exp2(p1) : fast_exp2(p1);
            s[nt * 4 + 2 * hr] = p0;
            s[nt * 4 + 2 * hr + 1] = p1;
            if constexpr (TREE)
                ts[nt] = p0 + p1;
            else
                sum += p0 + p1;
        }
        if constexpr (TREE) {
            tree_reduce<NS / 2, false>(ts);
            sum = ts[0];
        }
        l_i[hr] = l_i[hr] * corr[hr] + sum;
    }
}

// P (fp32, accumulator layout) -> A-operand registers of the P V product, one k16 chunk per entry.
template <bool BF16, int BN>
__device__ __forceinline__ void wgmma_pack_p(const float* s, u32 (*pa)[4]) {
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
        pa[kc][0] = pack2<BF16>(s[(2 * kc) * 4 + 0], s[(2 * kc) * 4 + 1]);
        pa[kc][1] = pack2<BF16>(s[(2 * kc) * 4 + 2], s[(2 * kc) * 4 + 3]);
        pa[kc][2] = pack2<BF16>(s[(2 * kc + 1) * 4 + 0], s[(2 * kc + 1) * 4 + 1]);
        pa[kc][3] = pack2<BF16>(s[(2 * kc + 1) * 4 + 2], s[(2 * kc + 1) * 4 + 3]);
    }
}

// DQK is the head dim of Q and K, DV that of V and O (DV <= DQK: O is staged where Q was). A head
// dim that is not a multiple of 64 (96) is stored and multiplied at the padded width PQ / PV with
// zero-filled columns: the extra P V columns are computed and never stored.
template <bool BF16, int DQK, int DV, int BN, int NWG>
__device__ __forceinline__ void fmha_fwd_wgmma_body(RAGGED_FMHA_PARAMS) {
    constexpr int BM = 64 * NWG;
    constexpr int NT = 128 * NWG;
    constexpr int PQ = ragged_row_width(DQK);
    constexpr int PV = ragged_row_width(DV);
    constexpr int KS = DQK / 16;
    constexpr int NS = BN / 8;
    constexpr int DT = PV / 8;  // accumulator n-tiles (the padded width)
    static_assert(DQK % 16 == 0 && DV % 16 == 0 && DV <= DQK && (BN == 64 || BN == 128), "wgmma tile shapes");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle pattern repeats every 1024 bytes
    const u32 s_k = s_q + BM * PQ * 2;
    const u32 s_v = s_k + 2 * BN * PQ * 2;

    RAGGED_FMHA_BLOCK_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int lane = tid & 31;
    const int row_in_tile = wg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);  // and + 8
    const int lt = lane & 3;
    const float sl2 = scale * 1.4426950408889634f;

    float acc[DT * 4];
    float m_i[2] = {RAGGED_NEG_INF, RAGGED_NEG_INF};
    float l_i[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < DT * 4; ++i) acc[i] = 0.f;

    // Software pipeline (per warpgroup): while the softmax of block n runs on the CUDA cores, the
    // tensor cores finish O += P(n-1) V(n-1), issued together with S(n) = Q K(n)^T. cp.async groups
    // in flight: {Q, K0}, {V0}, then per step {V(n)}, {K(n+1)}.
    if (nb_first < nb_last) {
        load_tile_sw128<DQK, PQ, BM, NT>(s_q, qp, q_seq, rows, q);
        {
            int j0 = nb_first * BN;
            load_tile_sw128<DQK, PQ, BN, NT>(s_k, kp + (i64)j0 * k_seq, k_seq, bt.lkv - j0, k);
            cp_async_commit();
            load_tile_sw128<DV, PV, BN, NT>(s_v, vp + (i64)j0 * v_seq, v_seq, bt.lkv - j0, v);
            cp_async_commit();
        }
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        if (nb_first + 1 < nb_last) {
            int j1 = (nb_first + 1) * BN;
            load_tile_sw128<DQK, PQ, BN, NT>(s_k + BN * PQ * 2, kp + (i64)j1 * k_seq, k_seq, bt.lkv - j1, k);
        }
        cp_async_commit();

        const int i_last = i0 + rows - 1;
        float s[NS * 4];
        u32 pa[BN / 16][4];
        float corr[2];

        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            u64 da = sw128_desc(s_q + (ks >> 2) * (BM * 128) + wg * (64 * 128) + (ks & 3) * 32, 16, 1024);
            u64 db = sw128_desc(s_k + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
            wgmma_ss<BF16, BN>(s, da, db, ks > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<NS * 4>(s);
        wgmma_softmax_step<NS>(s, m_i, l_i, corr, band, nb_first * BN, BN, i0, i_last, row_in_tile, lt, sl2);
        wgmma_pack_p<BF16, BN>(s, pa);

#pragma unroll 1
        for (int nb = nb_first + 1; nb < nb_last; ++nb) {
            const int buf = (nb - nb_first) & 1;
            cp_async_wait<0>();  // K(nb) and V(nb - 1)
            fence_proxy_async();
            __syncthreads();
            {
                int jv = (nb) * BN;
                load_tile_sw128<DV, PV, BN, NT>(s_v + buf * (BN * PV * 2), vp + (i64)jv * v_seq, v_seq, bt.lkv - jv, v);
                cp_async_commit();
                if (nb + 1 < nb_last) {
                    int jk = (nb + 1) * BN;
                    load_tile_sw128<DQK, PQ, BN, NT>(s_k + (buf ^ 1) * (BN * PQ * 2), kp + (i64)jk * k_seq, k_seq,
                                               bt.lkv - jk, k);
                }
                cp_async_commit();
            }
            const u32 kb = s_k + buf * (BN * PQ * 2);
            const u32 vb_prev = s_v + (buf ^ 1) * (BN * PV * 2);

            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                u64 da = sw128_desc(s_q + (ks >> 2) * (BM * 128) + wg * (64 * 128) + (ks & 3) * 32, 16, 1024);
                u64 db = sw128_desc(kb + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                wgmma_ss<BF16, BN>(s, da, db, ks > 0);
            }
            wgmma_commit();
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                wgmma_pv<BF16, PV, BN>(acc, pa[kc], vb_prev, kc);
            }
            wgmma_commit();
            wgmma_wait<1>();
            fence_regs<NS * 4>(s);
            wgmma_softmax_step<NS>(s, m_i, l_i, corr, band, nb * BN, BN, i0, i_last, row_in_tile, lt, sl2);
            wgmma_wait<0>();
            fence_regs<DT * 4>(acc);
            fence_regs_u32<BN / 4>(&pa[0][0]);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                acc[dt * 4 + 0] *= corr[0];
                acc[dt * 4 + 1] *= corr[0];
                acc[dt * 4 + 2] *= corr[1];
                acc[dt * 4 + 3] *= corr[1];
            }
            wgmma_pack_p<BF16, BN>(s, pa);
        }

        // Last P V.
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        {
            const u32 vb_last = s_v + ((nb_last - 1 - nb_first) & 1) * (BN * PV * 2);
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                wgmma_pv<BF16, PV, BN>(acc, pa[kc], vb_last, kc);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs<DT * 4>(acc);
            fence_regs_u32<BN / 4>(&pa[0][0]);
        }
    }

    __syncthreads();
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const float l = quad_row_sum(l_i[hr]);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int r = row_in_tile + hr * 8;
        if (lse != 0 && lt == 0 && r < rows) {
            const float f = sl2 > 0.f ? sl2 : 1.f;
            lse[bt.lse_elem + (i64)(i0 + r) * lse_seq + (i64)h * lse_head] = row_lse(m_i[hr], f, l);
        }
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            u32 packed = pack2<BF16>(acc[dt * 4 + 2 * hr] * inv, acc[dt * 4 + 2 * hr + 1] * inv);
            u32 addr = s_q + swz<PV>(r, dt) + lt * 4;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed) : "memory");
        }
    }
    __syncthreads();
    store_o_tile<DV, PV, BM, NT>(s_q, o + (bt.q_tok + i0) * o_seq + (i64)h * o_head, o_seq, rows);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
