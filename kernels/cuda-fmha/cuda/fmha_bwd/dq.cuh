// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the dQ kernel); included in that file's order, not on its own.

// One block = BM query rows of one batch and one query head (the forward pre-pass's tile list,
// longest first); NW warps, 16 rows each. Walks the key blocks the band admits for these rows (the
// forward's key_block_range), recomputing P = exp(scale Q K^T - LSE) and dS = P (dO V^T - Di), and
// accumulates dQ = scale dS K in registers. K and V are double buffered through cp.async. A tile
// with no admitted key (Lkv = 0, or fully masked rows) stores zeros. DQK is the head dim of Q, K
// (and dQ), DV that of V and dO.
template <bool BF16, int DQK, int DV, int BM, int BN, int NW>
__device__ __forceinline__ void bwd_dq_body(RAGGED_BWD_PARAMS) {
    constexpr int NT = NW * 32;
    constexpr int PQ = ragged_row_width(DQK);  // shared-memory row widths
    constexpr int PV = ragged_row_width(DV);
    constexpr int KSQ = DQK / 16;  // k-steps of S = Q K^T
    constexpr int KSV = DV / 16;   // k-steps of dP = dO V^T
    constexpr int NS = BN / 8;     // key n-tiles of S
    constexpr int DT = DQK / 8;    // head-dim n-tiles of dQ
    static_assert(BM == 16 * NW && BN % 16 == 0 && DQK % 16 == 0 && DV % 16 == 0, "tile shapes");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = smem_addr(smem_raw);
    const u32 s_do = s_q + BM * PQ * 2;
    const u32 s_k = s_do + BM * PV * 2;     // two buffers of BN rows
    const u32 s_v = s_k + 2 * BN * PQ * 2;  // two buffers of BN rows

    RAGGED_BWD_QUERY_TILE_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int lg = lane >> 2;
    const int lt = lane & 3;
    const float sl2 = scale * RAGGED_LOG2E;
    const u16* kp = k + bt.kv_tok * k_seq + (i64)g * k_head;
    const u16* vp = v + bt.kv_tok * v_seq + (i64)g * v_head;

    float acc[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[dt][e] = 0.f;

    if (nb_first < nb_last) {
        RAGGED_BWD_ROW_STATS(lse2, dir);
        const i64 tok = bt.q_tok + i0;
        load_tile<DQK, PQ, BM, NT>(s_q, q + tok * q_seq + (i64)h * q_head, q_seq, rows, q);
        load_tile<DV, PV, BM, NT>(s_do, d_o + tok * do_seq + (i64)h * do_head, do_seq, rows, d_o);
        {
            const int j0 = nb_first * BN;
            load_tile<DQK, PQ, BN, NT>(s_k, kp + (i64)j0 * k_seq, k_seq, bt.lkv - j0, k);
            load_tile<DV, PV, BN, NT>(s_v, vp + (i64)j0 * v_seq, v_seq, bt.lkv - j0, v);
        }
        cp_async_commit();
#pragma unroll 1
        for (int nb = nb_first; nb < nb_last; ++nb) {
            const int buf = (nb - nb_first) & 1;
            cp_async_wait<0>();
            __syncthreads();
            if (nb + 1 < nb_last) {
                const int j1 = (nb + 1) * BN;
                load_tile<DQK, PQ, BN, NT>(s_k + (buf ^ 1) * (BN * PQ * 2), kp + (i64)j1 * k_seq, k_seq, bt.lkv - j1,
                                           k);
                load_tile<DV, PV, BN, NT>(s_v + (buf ^ 1) * (BN * PV * 2), vp + (i64)j1 * v_seq, v_seq, bt.lkv - j1,
                                          v);
            }
            cp_async_commit();
            const u32 kb = s_k + buf * (BN * PQ * 2);
            const u32 vb = s_v + buf * (BN * PV * 2);
            const int j0 = nb * BN;

            // S = Q K^T and dP = dO V^T, this warp's 16 rows by BN keys.
            float s[NS][4], dp[NS][4];
            warp_mma_abt_pair<BF16, PQ, KSQ, PV, KSV, NS>(s, dp, s_q, s_do, warp * 16, kb, vb);

            // dS = P (dP - Di), P = 0 outside the band, past Lkv and past Lq.
            const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
#pragma unroll
            for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int hr = e >> 1;
                    float p = fast_exp2(s[nt][e] * sl2 - lse2[hr]);
                    if (!full) {
                        const int i = i0 + warp * 16 + lg + hr * 8;
                        const int j = j0 + nt * 8 + 2 * lt + (e & 1);
                        if (i >= bt.lq || !band.admits(i, j)) p = 0.f;
                    }
                    dp[nt][e] = p * (dp[nt][e] - dir[hr]);
                }

            // dQ += dS K: dS re-packed as the A operand (k = key), K read transposed.
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                u32 a[4];
                a[0] = pack2<BF16>(dp[2 * kc][0], dp[2 * kc][1]);
                a[1] = pack2<BF16>(dp[2 * kc][2], dp[2 * kc][3]);
                a[2] = pack2<BF16>(dp[2 * kc + 1][0], dp[2 * kc + 1][1]);
                a[3] = pack2<BF16>(dp[2 * kc + 1][2], dp[2 * kc + 1][3]);
#pragma unroll
                for (int dd = 0; dd < DQK / 16; ++dd) {
                    u32 b0, b1, b2, b3;
                    const int rr = kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    ldsm_x4_t(kb + swz<PQ>(rr, dd * 2 + (lane >> 4)), b0, b1, b2, b3);
                    mma16816<BF16>(acc[2 * dd], a, b0, b1);
                    mma16816<BF16>(acc[2 * dd + 1], a, b2, b3);
                }
            }
        }
        cp_async_wait<0>();
    }

    __syncthreads();
    stage_acc<BF16, DQK, PQ>(s_q, acc, warp * 16, scale);
    __syncthreads();
    store_o_tile<DQK, PQ, BM, NT>(s_q, dq + (bt.q_tok + i0) * dq_seq + (i64)h * dq_head, dq_seq, rows);
}
