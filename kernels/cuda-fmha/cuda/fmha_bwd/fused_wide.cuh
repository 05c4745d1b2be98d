// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the warp-specialized fused backward at D 256);
// included in that file's order, not on its own.

// fused_ws.cuh's roles and protocol at a head dim whose dK and dV (64 keys x 256 columns each) do
// not fit one warpgroup's registers: the consumer warpgroups split the columns instead of the keys.
// One block = BN = 64 keys of one batch and one KV head; per step (a query head's block of 64 rows)
// consumer warpgroup w (of two)
//   - computes S^T and dP^T for all 64 keys and its 32 query rows 32 w .. 32 w + 31 (m64n32, SS),
//     P^T and dS^T from them, and stages both, 16-bit, into [64 keys][64 queries] tiles;
//   - after both warpgroups staged theirs, dV += P^T dO, dK += dS^T Q and dQ = dS K over its 128
//     columns 128 w .. 128 w + 127 (m64n128, all three from shared memory), issued back to back;
//   - stages its half of the step's dQ (f32, accumulator order) over the Q and dO columns it alone
//     read in this step's ring slot (16 KiB of each), which the step's dQ writer adds into the blob
//     (two bulk reductions per warpgroup) and then hands back to the loader.
// The ring slot doubling as dQ's buffer is what lets two Q and two dO buffers fit beside K and V:
// at 64 x 256 a step's dQ is 64 KiB. The loader, the turn order (ORDERED) and the named barriers'
// pattern are fused_ws.cuh's; the slot's empty mbarrier takes the writer's one arrival instead of
// the consumers'.
#define RAGGED_BWD_WIDE_BAR_PDS 2  // 256 consumers: the step's P^T and dS^T staged

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <int D>
struct BwdWideTraits {
    static_assert(D == 256, "the column-split fused kernel's head dim");
    enum : int {
        HEAD_DIM = D,
        BM = RAGGED_BWD_FUSED_ROWS,  // query rows per step
        BN = 64,                     // keys per block
        P = D,                       // shared-memory row width
        HALF = P / 2,                // dK, dV and dQ columns per consumer warpgroup
        NS = BM / 2 / 8,             // S^T and dP^T: a warpgroup's 32 query columns, 4 NS accumulators
        NH = HALF / 8,               // dK, dV, dQ: 4 NH accumulators each
        NBUF = 2,                    // the loader's ring
        NDS = 2,                     // P^T / dS^T tile pairs: a warpgroup a step ahead writes the other
        BLOB_F = bwd_dq_blob_floats(D),
        STRIDE = bwd_dq_blob_stride(D),
        PRODUCER_REGS = 40,
        CONSUMER_REGS = 232,
        // Dynamic shared memory: 1024 bytes to align the first tile, K and V (BN rows), NBUF Q and
        // NBUF dO buffers (BM rows), NDS pairs of P^T and dS^T tiles, NBUF LSE and NBUF Di rows,
        // the ring's full and empty mbarriers.
        SMEM = 1024 + 2 * BN * P * 2 + 2 * NBUF * BM * P * 2 + NDS * 2 * BN * BM * 2 + 2 * NBUF * BM * 4 + 16 * NBUF,
    };
    static_assert(BLOB_F == 2 * BM * HALF, "a step's dQ is the blob");
    static_assert(BLOB_F * 4 == NBUF * BM * P * 2, "a slot's Q and dO hold the step's dQ");
    static_assert(BM == RAGGED_BWD_DI_ROWS, "a step's LSE / Di rows are one block of the Di pass");
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= setmaxnreg_pool(RAGGED_BWD_WS_THREADS),
                  "the warpgroups' registers fit what the launch allocates");
};

// Where warpgroup w's dQ half goes in slot buffers q_slot / do_slot: part 0 (accumulators j < 8)
// over Q's 64-column boxes 2 w and 2 w + 1, part 1 over dO's (the columns its dK and dV read).
template <class T>
__device__ __forceinline__ u32 bwd_wide_dq_part(u32 q_slot, u32 do_slot, int w, int part) {
    return (part == 0 ? q_slot : do_slot) + w * 2 * (T::BM * 128);
}

// A dQ writer warp of the wide kernel: the steps of parity `par` (ring slot par), each warpgroup's
// two parts into the blob by bulk reduction once its consumers arrived on the full pair (ORDERED:
// in the blob's turn), then the slot back to the loader once the reductions have read it.
template <class T, bool ORDERED, class Head, class Block>
__device__ __forceinline__ void bwd_wide_dq_writer(int items, const Head& item_head, const Block& item_block, int par,
                                                   u32 s_q, u32 s_do, u32 bar_empty, float* dq_acc, int b, int batch,
                                                   int h_q, int row_blocks, const RaggedBand& band, int lq, int n,
                                                   int tiles_b, const int* tile_count, int lane) {
    constexpr int BM = T::BM, P = T::P, PART_F = T::BLOB_F / 4;
    static_assert(T::NBUF == 2, "writer par serves ring slot par");
    const u32 q_slot = s_q + par * (BM * P * 2);
    const u32 do_slot = s_do + par * (BM * P * 2);
    int* turns = bwd_dq_turns(dq_acc, h_q, batch, row_blocks, T::STRIDE);
    for (int it = par; it < items; it += 2) {
        const int m = item_block(it);
        const i64 blob = ((i64)item_head(it) * batch + b) * row_blocks + m;
        if constexpr (ORDERED) {
            if (lane == 0) bwd_ws_take_turn(turns + blob, bwd_ws_turn(band, lq, m, n, tiles_b, T::BN, BM), tile_count);
        }
        float* dst = dq_acc + blob * T::STRIDE;
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            named_bar_sync(RAGGED_BWD_WS_BAR_DQ_FULL + w + 2 * par, 160);
            if (lane == 0) {
#pragma unroll
                for (int part = 0; part < 2; ++part)
                    bulk_reduce_add_f32(dst + (2 * w + part) * PART_F, bwd_wide_dq_part<T>(q_slot, do_slot, w, part),
                                        PART_F * 4);
            }
        }
        if (lane == 0) {
            bulk_commit();
            bulk_wait_read<0>();
            mbar_arrive(bar_empty + 8 * par);
            if constexpr (ORDERED) bwd_ws_pass_turn(turns + blob);
        }
        __syncwarp();
    }
    if (lane == 0) bulk_wait<0>();
}

// S^T or dP^T of warpgroup wg: X^T = A B^T over D, A the block's 64-key sw128 tile, B the step's
// 64-row tile from row 32 wg (m64n32, both K-major).
template <bool BF16, int D, int BM, int BN>
__device__ __forceinline__ void bwd_wide_key_major(float* acc, u32 s_a, u32 s_b, int wg) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        const u64 da = sw128_desc(s_a + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
        const u64 db = sw128_desc(s_b + (ks >> 2) * (BM * 128) + wg * (32 * 128) + (ks & 3) * 32, 16, 1024);
        wgmma_ss<BF16, 32>(acc, da, db, ks > 0);
    }
}

// This thread's packed P^T or dS^T values (pa[kc]: key rows key_row and key_row + 8, the
// warpgroup's query columns 32 wg + 16 kc + 2 lt (+1) and + 8) into the [BN keys][64 queries] tile.
template <int BN>
__device__ __forceinline__ void bwd_wide_stage_half(u32 tile, const u32 (*pa)[4], int wg, int key_row, int lt) {
#pragma unroll
    for (int kc = 0; kc < 2; ++kc)
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int row = key_row + (w & 1) * 8;
            const int chunk = 4 * wg + 2 * kc + (w >> 1);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile + sw128<BN>(row, chunk) + lt * 4), "r"(pa[kc][w])
                         : "memory");
        }
}

// The kernel: one block per (batch, KV head, 64-key tile), fused_ws.cuh's roles.
template <bool BF16, int D, bool ORDERED>
__device__ __forceinline__ void bwd_fused_wide_body(RAGGED_BWD_PARAMS, const RaggedTmaMap* tm_q,
                                                    const RaggedTmaMap* tm_do, const RaggedTmaMap* tm_stats,
                                                    float* dq_acc) {
    using T = BwdWideTraits<D>;
    constexpr int BM = T::BM, BN = T::BN, P = T::P, NS = T::NS, NH = T::NH, NBUF = T::NBUF;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 base = smem_addr(smem_raw);
    const u32 s_k = (base + 1023u) & ~1023u;
    const u32 s_v = s_k + BN * P * 2;
    const u32 s_q = s_v + BN * P * 2;          // NBUF buffers of BM rows
    const u32 s_do = s_q + NBUF * BM * P * 2;  // NBUF buffers of BM rows
    const u32 s_pds = s_do + NBUF * BM * P * 2;  // NDS pairs: P^T [BN][BM], then dS^T
    float* s_lse = (float*)(smem_raw + (s_pds + T::NDS * 2 * BN * BM * 2 - base));  // NBUF x BM
    float* s_di = s_lse + NBUF * BM;
    const u32 bar_full = smem_addr(s_di + NBUF * BM);
    const u32 bar_empty = bar_full + 8 * NBUF;

    // Grid: batch, then KV head, then key tile in descending order (fmha_bwd/dq_order.cuh).
    const int per_batch = h_kv * kv_tiles;
    const int b = blockIdx.x / per_batch;
    if (b >= batch) return;
    const int g = (blockIdx.x - b * per_batch) / kv_tiles;
    const int n = kv_tiles - 1 - (blockIdx.x - b * per_batch - g * kv_tiles);
    const RaggedBatch bt = batches[b];
    const int j0 = n * BN;
    const int cols = bt.lkv - j0 < BN ? bt.lkv - j0 : BN;
    if (cols <= 0) return;
    const RaggedBand band = make_band(bt.lq, bt.lkv, mask_left, mask_right, bottom_right);
    int qb_first, qb_last;
    query_block_range(band, bt.lq, j0, cols, BM, &qb_first, &qb_last);
    const int rep = h_q / h_kv;
    const int nq = qb_last - qb_first;
    const int items = rep * nq;
    const int tiles_b = (bt.lkv + BN - 1) / BN;
    const int rot = bwd_ws_rotation(band, n, tiles_b, nq);
    const int row_blocks = di_rows / BM;
    auto item_head = [&](int it) { return g * rep + it / nq; };
    auto item_block = [&](int it) {
        const int r = it % nq + rot;
        return qb_first + (r >= nq ? r - nq : r);
    };

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < NBUF; ++s) {
            mbar_init(bar_full + 8 * s, 1);
            mbar_init(bar_empty + 8 * s, 1);  // the slot's dQ writer
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (warp < 4) {
        setmaxnreg_dec<T::PRODUCER_REGS>();
        if (warp == 0) {
            bwd_ws_loader<T>(items, item_head, item_block, bt, q, q_seq, q_head, d_o, do_seq, do_head, tm_q, tm_do,
                             tm_stats, s_q, s_do, s_lse, s_di, bar_full, bar_empty, b, batch, h_q, di_rows, row_blocks,
                             lane);
        }
        else if (warp <= 2) {
            bwd_wide_dq_writer<T, ORDERED>(items, item_head, item_block, warp - 1, s_q, s_do, bar_empty, dq_acc, b,
                                           batch, h_q, row_blocks, band, bt.lq, n, tiles_b, tile_count, lane);
        }
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<T::CONSUMER_REGS>();
    const int ct = tid - 128;  // 0 .. 255
    const int ws = ct >> 7;    // consumer warpgroup: query rows [32 ws, 32 ws + 32), columns [128 ws, 128 ws + 128)
    const int cw = (ct >> 5) & 3;  // warp within the warpgroup: key rows [16 cw, 16 cw + 16)
    const int lg = lane >> 2;
    const int lt = lane & 3;
    const int key_row = cw * 16 + lg;  // and + 8
    const float sl2 = scale * RAGGED_LOG2E;

    load_tile_sw128<D, P, BN, 256>(s_k, k + (bt.kv_tok + j0) * k_seq + (i64)g * k_head, k_seq, cols, k, 128);
    load_tile_sw128<D, P, BN, 256>(s_v, v + (bt.kv_tok + j0) * v_seq + (i64)g * v_head, v_seq, cols, v, 128);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);

    float acc_dk[NH * 4], acc_dv[NH * 4];
#pragma unroll
    for (int i = 0; i < NH * 4; ++i) acc_dk[i] = acc_dv[i] = 0.f;

#pragma unroll 1
    for (int it = 0; it < items; ++it) {
        const int buf = it % NBUF;
        const int i0 = item_block(it) * BM;
        mbar_wait(bar_full + 8 * buf, (u32)((it / NBUF) & 1));
        if (bt.lq - i0 < BM) fence_proxy_async();
        const u32 qb = s_q + buf * (BM * P * 2);
        const u32 dob = s_do + buf * (BM * P * 2);
        const float* lse_t = s_lse + buf * BM + 32 * ws;
        const float* di_t = s_di + buf * BM + 32 * ws;
        const u32 pt = s_pds + (it & 1) * (2 * BN * BM * 2);
        const u32 dst = pt + BN * BM * 2;

        float st[NS * 4], dpt[NS * 4];
        wgmma_fence();
        bwd_wide_key_major<BF16, D, BM, BN>(st, s_k, qb, ws);
        wgmma_commit();
        bwd_wide_key_major<BF16, D, BM, BN>(dpt, s_v, dob, ws);
        wgmma_commit();

        wgmma_wait<1>();
        fence_regs<NS * 4>(st);
        const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
        bwd_pt_tile<NS>(st, sl2, lse_t, full, band, bt.lq, i0 + 32 * ws, j0, key_row, lt);
        wgmma_wait<0>();
        fence_regs<NS * 4>(dpt);
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                dpt[nt * 4 + e] = st[nt * 4 + e] * (dpt[nt * 4 + e] - di_t[nt * 8 + 2 * lt + (e & 1)]);
        {
            u32 pa[2][4], pds[2][4];
            pack_a<BF16, 2>(pa, (const float(*)[4])st);
            pack_a<BF16, 2>(pds, (const float(*)[4])dpt);
            bwd_wide_stage_half<BN>(pt, pa, ws, key_row, lt);
            bwd_wide_stage_half<BN>(dst, pds, ws, key_row, lt);
        }
        fence_proxy_async();
        named_bar_sync(RAGGED_BWD_WIDE_BAR_PDS, 256);

        // dV += P^T dO, dK += dS^T Q, dQ(step) = dS K over this warpgroup's 128 columns.
        float acc_dq[NH * 4];
        const u32 half = ws * 2 * (BM * 128);  // the columns' first 64-column box, in a BM-row tile
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < BM / 16; ++kc)
            wgmma_ss_nt_n128<BF16>(acc_dv, sw128_desc(pt + kc * 32, 16, 1024),
                                   sw128_desc(dob + half + kc * (16 * 128), BM * 128, 1024), 1);
#pragma unroll
        for (int kc = 0; kc < BM / 16; ++kc)
            wgmma_ss_nt_n128<BF16>(acc_dk, sw128_desc(dst + kc * 32, 16, 1024),
                                   sw128_desc(qb + half + kc * (16 * 128), BM * 128, 1024), 1);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            wgmma_ss_tt_n128<BF16>(acc_dq, sw128_desc(dst + kk * (16 * 128), BN * 128, 1024),
                                   sw128_desc(s_k + ws * 2 * (BN * 128) + kk * (16 * 128), BN * 128, 1024), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<NH * 4>(acc_dv);
        fence_regs<NH * 4>(acc_dk);
        fence_regs<NH * 4>(acc_dq);

        // This warpgroup's half of the step's dQ over the slot's columns it read, for the writer.
        const int par = it & 1;
        bwd_stage_dq_blob<NH / 2>(bwd_wide_dq_part<T>(qb, dob, ws, 0), acc_dq, 0, ct & 127);
        bwd_stage_dq_blob<NH / 2>(bwd_wide_dq_part<T>(qb, dob, ws, 1), acc_dq + NH * 2, 0, ct & 127);
        fence_proxy_async();
        named_bar_arrive(RAGGED_BWD_WS_BAR_DQ_FULL + ws + 2 * par, 160);
    }

    // dK (times scale) and dV, each warpgroup's columns, staged through the K and V tiles once both
    // warpgroups are done with them.
    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);
    stage_acc<BF16, T::HALF, P>(s_k, (const float(*)[4])acc_dk, cw * 16, scale, ws * NH);
    stage_acc<BF16, T::HALF, P>(s_v, (const float(*)[4])acc_dv, cw * 16, 1.f, ws * NH);
    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);
    store_o_tile<D, P, BN, 256>(s_k, dk + (bt.kv_tok + j0) * dk_seq + (i64)g * dk_head, dk_seq, cols, 128);
    store_o_tile<D, P, BN, 256>(s_v, dv + (bt.kv_tok + j0) * dv_seq + (i64)g * dv_head, dv_seq, cols, 128);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
