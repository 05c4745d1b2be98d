// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the dK/dV kernel); included in that file's order, not on its own.

// One block = BN keys of one batch and one KV head; NW warps, 16 key rows each. The block walks the
// query heads of its GQA group and, for each, the query tiles of BM rows that the band admits for
// these keys (query_block_range), recomputing P^T = exp(scale K Q^T - LSE) per tile pair. dV and dK
// stay in registers (f32) for the whole walk and are written once: no atomics, no second writer.
// K and V are loaded once; Q, dO, LSE and Di of the next tile pair load while this one computes.
// PACK_P: P^T is kept only as the packed 16-bit A operand of dV += P^T dO, which runs before dP^T is
// computed, and dS^T reads P back from it: 32 fewer live f32 registers per thread at D 128.
template <bool BF16, int D, int BM, int BN, int NW, bool PACK_P = false>
__device__ __forceinline__ void bwd_dkdv_body(RAGGED_BWD_PARAMS) {
    constexpr int NT = NW * 32;
    constexpr int P = ragged_row_width(D);
    constexpr int KS = D / 16;  // k-steps over the head dim
    constexpr int NS = BM / 8;  // query n-tiles of S^T
    constexpr int DT = D / 8;   // head-dim n-tiles of dK, dV
    static_assert(BN == 16 * NW && BM % 16 == 0 && D % 16 == 0, "tile shapes");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_k = smem_addr(smem_raw);
    const u32 s_v = s_k + BN * P * 2;
    const u32 s_q = s_v + BN * P * 2;   // two buffers of BM rows
    const u32 s_do = s_q + 2 * BM * P * 2;  // two buffers of BM rows
    float* s_lse = (float*)(smem_raw + (2 * BN + 4 * BM) * P * 2);  // two buffers of BM, base 2
    float* s_di = s_lse + 2 * BM;

    RAGGED_BWD_KEY_TILE_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int lg = lane >> 2;
    const int lt = lane & 3;
    const float sl2 = scale * RAGGED_LOG2E;

    float acc_dk[DT][4], acc_dv[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dk[dt][e] = acc_dv[dt][e] = 0.f;

    // Issues the loads of tile pair `it` (query head, query tile) into buffer `buf`.
    auto issue = [&](int it, int buf) {
        const int h = g * rep + it / nq;
        const int i0 = (qb_first + it % nq) * BM;
        const int rows = bt.lq - i0 < BM ? bt.lq - i0 : BM;
        const i64 tok = bt.q_tok + i0;
        load_tile<D, P, BM, NT>(s_q + buf * (BM * P * 2), q + tok * q_seq + (i64)h * q_head, q_seq, rows, q);
        load_tile<D, P, BM, NT>(s_do + buf * (BM * P * 2), d_o + tok * do_seq + (i64)h * do_head, do_seq, rows, d_o);
        for (int t = tid; t < BM; t += NT) {
            const bool live = t < rows;
            const i64 i = i0 + t;
            s_lse[buf * BM + t] = live ? lse[bt.lse_elem + i * lse_seq + (i64)h * lse_head] * RAGGED_LOG2E : 0.f;
            s_di[buf * BM + t] = live ? di[((i64)b * h_q + h) * di_rows + i] : 0.f;
        }
    };

    if (items > 0) {
        load_tile<D, P, BN, NT>(s_k, k + (bt.kv_tok + j0) * k_seq + (i64)g * k_head, k_seq, cols, k);
        load_tile<D, P, BN, NT>(s_v, v + (bt.kv_tok + j0) * v_seq + (i64)g * v_head, v_seq, cols, v);
        issue(0, 0);
        cp_async_commit();
#pragma unroll 1
        for (int it = 0; it < items; ++it) {
            const int buf = it & 1;
            // Tile pair `it` has landed, and every warp is done with the buffer `it + 1` reuses.
            cp_async_wait<0>();
            __syncthreads();
            if (it + 1 < items) issue(it + 1, buf ^ 1);
            cp_async_commit();
            const int i0 = (qb_first + it % nq) * BM;
            const u32 qb = s_q + buf * (BM * P * 2);
            const u32 dob = s_do + buf * (BM * P * 2);
            const float* lse_t = s_lse + buf * BM;
            const float* di_t = s_di + buf * BM;

            if constexpr (PACK_P) {
                const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
                float c[NS][4];
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) c[nt][e] = 0.f;
                warp_mma_abt<BF16, P, KS, NS>(c, s_k, warp * 16, qb);
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int il = nt * 8 + 2 * lt + (e & 1);
                        float p = fast_exp2(c[nt][e] * sl2 - lse_t[il]);
                        const int i = i0 + il;
                        const int j = j0 + warp * 16 + lg + ((e >> 1) << 3);
                        if (!full && (i >= bt.lq || !band.admits(i, j))) p = 0.f;
                        c[nt][e] = p;
                    }
                u32 pa[BM / 16][4];
                pack_a<BF16, BM / 16>(pa, c);
                warp_mma_ab<BF16, P, BM / 16, DT>(acc_dv, pa, dob);
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) c[nt][e] = 0.f;
                warp_mma_abt<BF16, P, KS, NS>(c, s_v, warp * 16, dob);
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        c[nt][e] = unpack_a<BF16>(pa, nt, e) * (c[nt][e] - di_t[nt * 8 + 2 * lt + (e & 1)]);
                pack_a<BF16, BM / 16>(pa, c);
                warp_mma_ab<BF16, P, BM / 16, DT>(acc_dk, pa, qb);
            } else {
                // S^T = K Q^T and dP^T = V dO^T, this warp's 16 key rows by BM queries.
                float st[NS][4], dpt[NS][4];
                warp_mma_abt_pair<BF16, P, KS, NS>(st, dpt, s_k, s_v, warp * 16, qb, dob);

                // P^T from the LSE (0 outside the band, past Lkv and past Lq); dS^T = P^T (dP^T - Di).
                const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int il = nt * 8 + 2 * lt + (e & 1);
                        float p = fast_exp2(st[nt][e] * sl2 - lse_t[il]);
                        if (!full) {
                            const int i = i0 + il;
                            const int j = j0 + warp * 16 + lg + ((e >> 1) << 3);
                            if (i >= bt.lq || !band.admits(i, j)) p = 0.f;
                        }
                        st[nt][e] = p;
                        dpt[nt][e] = p * (dpt[nt][e] - di_t[il]);
                    }

                // dV += P^T dO and dK += dS^T Q: the accumulators re-packed as A operands (k = query).
#pragma unroll
                for (int kc = 0; kc < BM / 16; ++kc) {
                    u32 ap[4], as[4];
                    ap[0] = pack2<BF16>(st[2 * kc][0], st[2 * kc][1]);
                    ap[1] = pack2<BF16>(st[2 * kc][2], st[2 * kc][3]);
                    ap[2] = pack2<BF16>(st[2 * kc + 1][0], st[2 * kc + 1][1]);
                    ap[3] = pack2<BF16>(st[2 * kc + 1][2], st[2 * kc + 1][3]);
                    as[0] = pack2<BF16>(dpt[2 * kc][0], dpt[2 * kc][1]);
                    as[1] = pack2<BF16>(dpt[2 * kc][2], dpt[2 * kc][3]);
                    as[2] = pack2<BF16>(dpt[2 * kc + 1][0], dpt[2 * kc + 1][1]);
                    as[3] = pack2<BF16>(dpt[2 * kc + 1][2], dpt[2 * kc + 1][3]);
#pragma unroll
                    for (int dp = 0; dp < D / 16; ++dp) {
                        const int rr = kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                        const int cc = dp * 2 + (lane >> 4);
                        u32 b0, b1, b2, b3;
                        ldsm_x4_t(dob + swz<P>(rr, cc), b0, b1, b2, b3);
                        mma16816<BF16>(acc_dv[2 * dp], ap, b0, b1);
                        mma16816<BF16>(acc_dv[2 * dp + 1], ap, b2, b3);
                        ldsm_x4_t(qb + swz<P>(rr, cc), b0, b1, b2, b3);
                        mma16816<BF16>(acc_dk[2 * dp], as, b0, b1);
                        mma16816<BF16>(acc_dk[2 * dp + 1], as, b2, b3);
                    }
                }
            }
        }
        cp_async_wait<0>();
    }

    // dK (times scale) and dV through shared memory (the K and V tiles' space) for 16-byte stores
    // of the first `cols` rows; a key tile no query reaches stores zeros.
    __syncthreads();
    stage_acc<BF16, D, P>(s_k, acc_dk, warp * 16, scale);
    stage_acc<BF16, D, P>(s_v, acc_dv, warp * 16, 1.f);
    __syncthreads();
    store_o_tile<D, P, BN, NT>(s_k, dk + (bt.kv_tok + j0) * dk_seq + (i64)g * dk_head, dk_seq, cols);
    store_o_tile<D, P, BN, NT>(s_v, dv + (bt.kv_tok + j0) * dv_seq + (i64)g * dv_head, dv_seq, cols);
}
