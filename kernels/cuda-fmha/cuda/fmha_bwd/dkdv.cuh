// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the dK/dV kernel); included in that file's order, not on its own.

// One block = BN keys of one batch and one KV head; NW warps, 16 key rows each. The block walks the
// query heads of its GQA group and, for each, the query tiles of BM rows that the band admits for
// these keys (query_block_range), recomputing P^T = exp(scale K Q^T - LSE) per tile pair. dV and dK
// stay in registers (f32) for the whole walk and are written once: no atomics, no second writer.
// K and V are loaded once; Q, dO, LSE and Di of the next tile pair load while this one computes.
// DQK is the head dim of Q and K (and dK), DV that of V and dO (and dV).
// With NW = 2 BN / 16 (CS = 2), two warps share each 16 key rows and each holds half of dK's and
// half of dV's columns: both recompute the rows' S^T and dP^T, so the accumulators of a head dim of
// 256 (or 192 and 128) fit the registers of one thread.
// PACK_P: P^T is kept only as the packed 16-bit A operand of dV += P^T dO, which runs before dP^T is
// computed, and dS^T reads P back from it: 32 fewer live f32 registers per thread at D 128.
template <bool BF16, int DQK, int DV, int BM, int BN, int NW, bool PACK_P = false>
__device__ __forceinline__ void bwd_dkdv_body(RAGGED_BWD_PARAMS) {
    constexpr int NT = NW * 32;
    constexpr int RW = BN / 16;  // warps of distinct key rows
    constexpr int CS = NW / RW;  // warps sharing each 16 key rows, one column share each
    constexpr int PQ = ragged_row_width(DQK);  // shared-memory row widths
    constexpr int PV = ragged_row_width(DV);
    constexpr int KSQ = DQK / 16;  // k-steps of S^T = K Q^T
    constexpr int KSV = DV / 16;   // k-steps of dP^T = V dO^T
    constexpr int NS = BM / 8;     // query n-tiles of S^T
    constexpr int DKT = DQK / 8 / CS;  // this warp's n-tiles of dK
    constexpr int DVT = DV / 8 / CS;   // and of dV
    static_assert(BN % 16 == 0 && NW % RW == 0 && (CS == 1 || CS == 2) && BM % 16 == 0, "tile shapes");
    static_assert(DQK % (16 * CS) == 0 && DV % (16 * CS) == 0, "whole 16-column pairs per warp");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_k = smem_addr(smem_raw);
    const u32 s_v = s_k + BN * PQ * 2;
    const u32 s_q = s_v + BN * PV * 2;       // two buffers of BM rows
    const u32 s_do = s_q + 2 * BM * PQ * 2;  // two buffers of BM rows
    float* s_lse = (float*)(smem_raw + (BN + 2 * BM) * (PQ + PV) * 2);  // two buffers of BM, base 2
    float* s_di = s_lse + 2 * BM;

    RAGGED_BWD_KEY_TILE_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int lg = lane >> 2;
    const int lt = lane & 3;
    const float sl2 = scale * RAGGED_LOG2E;
    const int wr = CS == 1 ? warp : warp % RW;  // this warp's 16 key rows
    const int ck = CS == 1 ? 0 : warp / RW * DKT;  // its first 16-byte chunk of dK's columns
    const int cv = CS == 1 ? 0 : warp / RW * DVT;  // and of dV's

    float acc_dk[DKT][4], acc_dv[DVT][4];
#pragma unroll
    for (int dt = 0; dt < DKT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dk[dt][e] = 0.f;
#pragma unroll
    for (int dt = 0; dt < DVT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dv[dt][e] = 0.f;

    // Issues the loads of tile pair `it` (query head, query tile) into buffer `buf`.
    auto issue = [&](int it, int buf) {
        const int h = g * rep + it / nq;
        const int i0 = (qb_first + it % nq) * BM;
        const int rows = bt.lq - i0 < BM ? bt.lq - i0 : BM;
        const i64 tok = bt.q_tok + i0;
        load_tile<DQK, PQ, BM, NT>(s_q + buf * (BM * PQ * 2), q + tok * q_seq + (i64)h * q_head, q_seq, rows, q);
        load_tile<DV, PV, BM, NT>(s_do + buf * (BM * PV * 2), d_o + tok * do_seq + (i64)h * do_head, do_seq, rows,
                                  d_o);
        for (int t = tid; t < BM; t += NT) {
            const bool live = t < rows;
            const i64 i = i0 + t;
            s_lse[buf * BM + t] = live ? lse[bt.lse_elem + i * lse_seq + (i64)h * lse_head] * RAGGED_LOG2E : 0.f;
            s_di[buf * BM + t] = live ? di[((i64)b * h_q + h) * di_rows + i] : 0.f;
        }
    };

    if (items > 0) {
        load_tile<DQK, PQ, BN, NT>(s_k, k + (bt.kv_tok + j0) * k_seq + (i64)g * k_head, k_seq, cols, k);
        load_tile<DV, PV, BN, NT>(s_v, v + (bt.kv_tok + j0) * v_seq + (i64)g * v_head, v_seq, cols, v);
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
            const u32 qb = s_q + buf * (BM * PQ * 2);
            const u32 dob = s_do + buf * (BM * PV * 2);
            const float* lse_t = s_lse + buf * BM;
            const float* di_t = s_di + buf * BM;

            if constexpr (PACK_P) {
                const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
                float c[NS][4];
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) c[nt][e] = 0.f;
                warp_mma_abt<BF16, PQ, KSQ, NS>(c, s_k, wr * 16, qb);
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int il = nt * 8 + 2 * lt + (e & 1);
                        float p = fast_exp2(c[nt][e] * sl2 - lse_t[il]);
                        const int i = i0 + il;
                        const int j = j0 + wr * 16 + lg + ((e >> 1) << 3);
                        if (!full && (i >= bt.lq || !band.admits(i, j))) p = 0.f;
                        c[nt][e] = p;
                    }
                u32 pa[BM / 16][4];
                pack_a<BF16, BM / 16>(pa, c);
                warp_mma_ab<BF16, PV, BM / 16, DVT>(acc_dv, pa, dob, cv);
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) c[nt][e] = 0.f;
                warp_mma_abt<BF16, PV, KSV, NS>(c, s_v, wr * 16, dob);
#pragma unroll
                for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        c[nt][e] = unpack_a<BF16>(pa, nt, e) * (c[nt][e] - di_t[nt * 8 + 2 * lt + (e & 1)]);
                pack_a<BF16, BM / 16>(pa, c);
                warp_mma_ab<BF16, PQ, BM / 16, DKT>(acc_dk, pa, qb, ck);
            } else {
                // S^T = K Q^T and dP^T = V dO^T, this warp's 16 key rows by BM queries.
                float st[NS][4], dpt[NS][4];
                warp_mma_abt_pair<BF16, PQ, KSQ, PV, KSV, NS>(st, dpt, s_k, s_v, wr * 16, qb, dob);

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
                            const int j = j0 + wr * 16 + lg + ((e >> 1) << 3);
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
                    for (int dp = 0; dp < (DVT > DKT ? DVT : DKT) / 2; ++dp) {
                        const int rr = kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                        const int cc = dp * 2 + (lane >> 4);
                        u32 b0, b1, b2, b3;
                        if (dp < DVT / 2) {
                            ldsm_x4_t(dob + swz<PV>(rr, cv + cc), b0, b1, b2, b3);
                            mma16816<BF16>(acc_dv[2 * dp], ap, b0, b1);
                            mma16816<BF16>(acc_dv[2 * dp + 1], ap, b2, b3);
                        }
                        if (dp < DKT / 2) {
                            ldsm_x4_t(qb + swz<PQ>(rr, ck + cc), b0, b1, b2, b3);
                            mma16816<BF16>(acc_dk[2 * dp], as, b0, b1);
                            mma16816<BF16>(acc_dk[2 * dp + 1], as, b2, b3);
                        }
                    }
                }
            }
        }
        cp_async_wait<0>();
    }

    // dK (times scale) and dV through shared memory (the K and V tiles' space) for 16-byte stores
    // of the first `cols` rows; a key tile no query reaches stores zeros.
    __syncthreads();
    stage_acc<BF16, DKT * 8, PQ>(s_k, acc_dk, wr * 16, scale, ck);
    stage_acc<BF16, DVT * 8, PV>(s_v, acc_dv, wr * 16, 1.f, cv);
    __syncthreads();
    store_o_tile<DQK, PQ, BN, NT>(s_k, dk + (bt.kv_tok + j0) * dk_seq + (i64)g * dk_head, dk_seq, cols);
    store_o_tile<DV, PV, BN, NT>(s_v, dv + (bt.kv_tok + j0) * dv_seq + (i64)g * dv_head, dv_seq, cols);
}
