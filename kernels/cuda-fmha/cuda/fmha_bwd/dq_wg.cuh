// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the Hopper wgmma dQ kernel); included in that file's order, not on its own.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One block = BM = 64 NWG query rows of one batch and one query head (the pre-pass's tile list,
// longest first), one warpgroup per 64 rows (the M of every product is queries). Per key block of
// BN keys the band admits:
//   S  = Q K^T and dP = dO V^T (SS, issued together; P computed while dP runs),
//   dS = P (dP - Di), P = exp2(S scale log2e - LSE log2e) masked,
//   dQ += dS K (RS: dS packed in registers, K read as an MN-major B from its swizzled tile).
// The next block's K and V load by cp.async under this block's products; dQ (times scale) is
// stored once. A tile with no admitted key stores zeros.
// Three K/V buffers, and dQ += dS K of block n is left running while block n + 1 issues S and dP
// (its wait for S also retires that product): the buffers block n read are refilled only at block
// n + 3.
// TMA: the K/V buffers are filled by warp 0 alone, one block ahead, by TMA through the maps tm_k,
// tm_v (box rows BN; a tail block by zero-filling cp.async, bwd_fill_pair) completing on the
// buffer's full mbarrier, released by each warp on its empty mbarrier once the dQ product that read
// it has retired; no block-wide barrier inside the loop.
// RS (with TMA, BN 64): S = Q K^T and dP = dO V^T take Q and dO from registers, loaded once per block
// (32 registers each at D 128), instead of reading them from shared memory in every product.
template <bool BF16, int D, int BN, int NWG, bool TMA, bool RS = false>
__device__ __forceinline__ void bwd_dq_wg_body(RAGGED_BWD_PARAMS, const RaggedTmaMap* tm_k = nullptr,
                                               const RaggedTmaMap* tm_v = nullptr) {
    constexpr int BM = 64 * NWG;
    constexpr int NT = 128 * NWG;
    constexpr int P = ragged_row_width(D);
    constexpr int KS = D / 16;
    constexpr int NS = BN / 8;
    constexpr int DT = P / 8;
    constexpr int NBUF = 3;
    constexpr int LA = 1;  // blocks filled ahead
    static_assert(D == P && (D == 64 || D == 128) && (BN == 64 || BN == 128), "wgmma dQ tile shapes");
    static_assert(!RS || (TMA && BN == 64), "RS is a variant of the TMA body with BN 64");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle pattern repeats every 1024 bytes
    const u32 s_do = s_q + BM * P * 2;
    const u32 s_k = s_do + BM * P * 2;        // NBUF buffers of BN rows
    const u32 s_v = s_k + NBUF * BN * P * 2;  // NBUF buffers of BN rows
    const u32 bar_full = s_v + NBUF * BN * P * 2;  // NBUF full, then NBUF empty mbarriers
    const u32 bar_empty = bar_full + 8 * NBUF;

    RAGGED_BWD_QUERY_TILE_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int lg = lane >> 2;
    const int lt = lane & 3;
    const float sl2 = scale * RAGGED_LOG2E;
    const u16* kp = k + bt.kv_tok * k_seq + (i64)g * k_head;
    const u16* vp = v + bt.kv_tok * v_seq + (i64)g * v_head;

    float acc[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; ++i) acc[i] = 0.f;
    u32 pa[BN / 16][4];  // dS as the A operand (live into the next block)

    // TMA: warp 0 fills block nb_first + f into buffer f % NBUF once every warp released its last use.
    auto fill = [&](int f) {
        const int fb = f % NBUF;
        const int j0 = (nb_first + f) * BN;
        if (f >= NBUF) mbar_wait(bar_empty + 8 * fb, (u32)((f / NBUF) & 1) ^ 1u);
        bwd_fill_pair<D, BN>(bar_full + 8 * fb, s_k + fb * (BN * P * 2), s_v + fb * (BN * P * 2), tm_k, tm_v, g,
                             (int)(bt.kv_tok + j0), bt.lkv - j0, kp + (i64)j0 * k_seq, k_seq, vp + (i64)j0 * v_seq,
                             v_seq, k, lane);
    };
    if constexpr (TMA) bwd_ring_init<NBUF, NT>(bar_full, bar_empty, tid);

    if (nb_first < nb_last) {
        RAGGED_BWD_ROW_STATS(lse2, dir);
        const int blocks = nb_last - nb_first;
        if constexpr (TMA) {
            if (warp == 0)
                for (int f = 0; f < LA && f < blocks; ++f) fill(f);
        }
        const i64 tok = bt.q_tok + i0;
        load_tile_sw128<D, P, BM, NT>(s_q, q + tok * q_seq + (i64)h * q_head, q_seq, rows, q);
        load_tile_sw128<D, P, BM, NT>(s_do, d_o + tok * do_seq + (i64)h * do_head, do_seq, rows, d_o);
        if constexpr (!TMA) {
            const int j0 = nb_first * BN;
            load_tile_sw128<D, P, BN, NT>(s_k, kp + (i64)j0 * k_seq, k_seq, bt.lkv - j0, k);
            load_tile_sw128<D, P, BN, NT>(s_v, vp + (i64)j0 * v_seq, v_seq, bt.lkv - j0, v);
        }
        cp_async_commit();
        if constexpr (TMA) {
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
        }
        u32 qa[RS ? KS : 1][4], doa[RS ? KS : 1][4];
        if constexpr (RS) load_a_frags_sw128<D, BM>(qa, s_q, warp, lane);
        if constexpr (RS) load_a_frags_sw128<D, BM>(doa, s_do, warp, lane);
#pragma unroll 1
        for (int nb = nb_first; nb < nb_last; ++nb) {
            const int it = nb - nb_first;
            const int buf = it % NBUF;
            const int next = buf + 1 == NBUF ? 0 : buf + 1;
            if constexpr (TMA) {
                if (warp == 0 && it + LA < blocks) fill(it + LA);
                mbar_wait(bar_full + 8 * buf, (u32)((it / NBUF) & 1));
                // cp.async (generic proxy) writes of a tail block, read by wgmma (async proxy).
                if (bt.lkv - nb * BN < BN) fence_proxy_async();
            }
            else {
                // Block nb has landed, and both warpgroups are done with the buffers nb + 1 reuses.
                cp_async_wait<0>();
                fence_proxy_async();
                __syncthreads();
            }
            if (!TMA && nb + 1 < nb_last) {
                const int j1 = (nb + 1) * BN;
                load_tile_sw128<D, P, BN, NT>(s_k + next * (BN * P * 2), kp + (i64)j1 * k_seq, k_seq, bt.lkv - j1,
                                              k);
                load_tile_sw128<D, P, BN, NT>(s_v + next * (BN * P * 2), vp + (i64)j1 * v_seq, v_seq, bt.lkv - j1,
                                              v);
            }
            if constexpr (!TMA) cp_async_commit();
            const u32 kb = s_k + buf * (BN * P * 2);
            const u32 vb = s_v + buf * (BN * P * 2);
            const int j0 = nb * BN;

            float s[NS * 4], dp[NS * 4];
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                const u64 da = sw128_desc(s_q + (ks >> 2) * (BM * 128) + wg * (64 * 128) + (ks & 3) * 32, 16, 1024);
                const u64 db = sw128_desc(kb + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                if constexpr (RS)
                    wgmma_rs_k<BF16, BN>(s, qa[ks], db, ks > 0);
                else
                    wgmma_ss<BF16, BN>(s, da, db, ks > 0);
            }
            wgmma_commit();
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                const u64 da = sw128_desc(s_do + (ks >> 2) * (BM * 128) + wg * (64 * 128) + (ks & 3) * 32, 16, 1024);
                const u64 db = sw128_desc(vb + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                if constexpr (RS)
                    wgmma_rs_k<BF16, BN>(dp, doa[ks], db, ks > 0);
                else
                    wgmma_ss<BF16, BN>(dp, da, db, ks > 0);
            }
            wgmma_commit();

            // P while dP is still on the tensor cores; 0 outside the band, past Lkv and past Lq.
            wgmma_wait<1>();
            fence_regs<NS * 4>(s);
            fence_regs<DT * 4>(acc);
            fence_regs_u32<BN / 4>(&pa[0][0]);
            // The previous block's buffers are free: its dQ product retired with S just now.
            if constexpr (TMA) {
                if (it > 0 && lane == 0) mbar_arrive(bar_empty + 8 * ((it + NBUF - 1) % NBUF));
            }
            const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
#pragma unroll
            for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int hr = e >> 1;
                    float p = fast_exp2(s[nt * 4 + e] * sl2 - lse2[hr]);
                    if (!full) {
                        const int i = i0 + warp * 16 + lg + hr * 8;
                        const int j = j0 + nt * 8 + 2 * lt + (e & 1);
                        if (i >= bt.lq || !band.admits(i, j)) p = 0.f;
                    }
                    s[nt * 4 + e] = p;
                }
            wgmma_wait<0>();
            fence_regs<NS * 4>(dp);
#pragma unroll
            for (int i = 0; i < NS * 4; ++i) dp[i] = s[i] * (dp[i] - dir[(i >> 1) & 1]);
            pack_a<BF16, BN / 16>(pa, (const float(*)[4])dp);
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) wgmma_pv<BF16, P, BN>(acc, pa[kc], kb, kc);
            wgmma_commit();
            // The register operands stay live across the back-edge: without these ptxas gave the dS
            // operand dO's registers at D 64 (a wrong dQ).
            if constexpr (RS) fence_regs_u32<KS * 4>(&qa[0][0]);
            if constexpr (RS) fence_regs_u32<KS * 4>(&doa[0][0]);
        }
        wgmma_wait<0>();
        fence_regs<DT * 4>(acc);
        fence_regs_u32<BN / 4>(&pa[0][0]);
        if constexpr (!TMA) cp_async_wait<0>();
    }

    __syncthreads();
    stage_acc<BF16, D, P>(s_q, (const float(*)[4])acc, warp * 16, scale);
    __syncthreads();
    store_o_tile<D, P, BM, NT>(s_q, dq + (bt.q_tok + i0) * dq_seq + (i64)h * dq_head, dq_seq, rows);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
