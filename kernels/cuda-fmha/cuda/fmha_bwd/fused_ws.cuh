// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the warp-specialized fused backward); included in that file's order, not on its own.

// One block = BN = 128 keys of one batch and one KV head, as the dK/dV kernel, in three warpgroups
// (D 64, 96 and 128; D 96 in rows padded to 128 columns, laid out and split as D 128):
//   warpgroup 0, warp 0: the loader. Q, dO (TMA, or zero-filling cp.async for a tail tile) and the
//                        LSE / Di rows of each step into an NBUF-deep ring of full / empty mbarriers.
//   warpgroup 0, warps 1 and 2: the dQ writers, of the even and the odd steps. Each adds its steps'
//                        dQ contributions, staged by the consumers in its s_dq buffer, into the
//                        f32 blob of the step's (query head, 64-row query block) with a bulk
//                        reduction; ORDERED: in a fixed order of key tiles (dq_order.cuh). Two writers and
//                        two buffers give each reduction (and, ordered, its completion and the
//                        turn it waits for) two steps of the consumers' time.
//   warpgroups 1 and 2:  the consumers, 64 keys each; per step (a query head's block of 64 rows)
//                        S^T = K Q^T, dP^T = V dO^T (SS), P^T and dS^T in registers, then
//                        dV += P^T dO and dK += dS^T Q (RS, dO and Q as MN-major B) and
//                        dQ = dS K (SS, dS^T staged in s_ds), all three issued back to back.
//                        dQ contracts all 128 keys (both halves of s_ds). D 96 / 128: each
//                        warpgroup computes half of its columns every step (n64). D 64
//                        (DQ_ALT): warpgroup it % 2 computes all of step it's columns (n64
//                        rather than two n32 halves: a fifth fewer wgmma per step, and dS read
//                        once), the other only stages its half of dS^T.
// Consumers and a dQ writer meet on named barriers (a consumer warpgroup's half of one s_dq buffer
// full / empty, one pair per warpgroup and buffer); the consumers also on one per step, both halves
// of s_ds staged. With DQ_ALT both warpgroups still pass every one of these barriers (the one
// without dQ stages nothing): compute-sanitizer's racecheck reported the dK / dV staging after the
// loop as racing its reads when only one warpgroup met the writer, or only arrived on the dS^T
// barrier. s_ds is double-buffered so that a warpgroup a step ahead never overwrites what the other
// still reads.
//
// ORDERED (the deterministic engine): the contributions to one blob are added in the fixed order of
// key tiles of fmha_bwd/dq_order.cuh, the writers waiting for and passing each blob's turn.
#define RAGGED_BWD_WS_THREADS 384
#define RAGGED_BWD_WS_NBUF 2
#define RAGGED_BWD_WS_BAR_KV 1        // 256 consumers: K, V landed / the last step's reads of them done
#define RAGGED_BWD_WS_BAR_DS 2        // 256 consumers: the step's dS^T staged
#define RAGGED_BWD_WS_BAR_DQ_FULL 4   // + warpgroup + 2 buffer: its 128 threads arrive, the writer's 32 wait
#define RAGGED_BWD_WS_BAR_DQ_EMPTY 8  // + warpgroup + 2 buffer: the writer arrives, the warpgroup's 128 wait

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One configuration of the kernel: its tiles, registers and shared-memory layout at head dim D
// (enumerators, as the forward's configurations: static constexpr members would give the module
// device variables).
template <int D>
struct BwdWsTraits {
    static_assert(D == 64 || D == 96 || D == 128, "fused head dims");
    enum : int {
        HEAD_DIM = D,
        HEAD_DIM_V = D,
        BM = RAGGED_BWD_FUSED_ROWS,    // query rows per step
        BN = 128,                      // keys per block, 64 per consumer warpgroup
        P = ragged_row_width(D),       // shared-memory row width: D 96 is padded to 128
        PV = P,                        // that of V and dO
        NS = BM / 8,                   // S^T and dP^T: 4 NS accumulators each
        DT = D / 8,                    // dK and dV: 4 DT accumulators each
        NBUF = RAGGED_BWD_WS_NBUF,     // the loader's ring
        NDS = 2,                       // dS^T tiles: read by both warpgroups
        DQ_ALT = P == 64,              // one warpgroup per step computes all of dQ (see above)
        NQ = DQ_ALT ? P / 2 : P / 4,   // dQ accumulators: 64 rows x P (DQ_ALT) or P / 2 columns, 128 threads
        BLOB_F = bwd_dq_blob_floats(D),  // floats a step adds into its blob
        // Registers after setmaxnreg: 128 PRODUCER + 256 CONSUMER within the block's launch
        // allocation (setmaxnreg_pool: 168 x 384). D 128's consumers need 232 (at 224 ptxas serializes
        // their wgmma), D 64's fit 224. With the producers at 40 ptxas (NVRTC 12.9) reports 56
        // (unordered) and 64 (ordered) bytes of spill at D 96 / 128; 48 would be over the pool
        // beside 232 consumers.
        PRODUCER_REGS = P == 128 ? 40 : 56,
        CONSUMER_REGS = P == 128 ? 232 : 224,
        // Dynamic shared memory: 1024 bytes to align the first tile, K and V (BN rows), NBUF Q and
        // NBUF dO buffers (BM rows), the dS^T tiles [BN keys][BM queries], two buffers of a step's
        // dQ (one per writer), NBUF LSE and NBUF Di rows, the ring's full and empty mbarriers.
        SMEM = 1024 + 2 * BN * P * 2 + 2 * NBUF * BM * P * 2 + NDS * BN * BM * 2 + 2 * RAGGED_BWD_FUSED_BLOB * 4 +
               2 * NBUF * BM * 4 + 16 * NBUF,
    };
    static_assert(BM == RAGGED_BWD_DI_ROWS, "a step's LSE / Di rows are one block of the Di pass");
    static_assert(BLOB_F <= RAGGED_BWD_FUSED_BLOB, "a step's dQ fits its blob and its buffer");
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= setmaxnreg_pool(RAGGED_BWD_WS_THREADS),
                  "the warpgroups' registers fit what the launch allocates");
};

// The loader warp: each step's Q and dO tiles and its LSE / Di rows into ring slot it % NBUF, once
// the slot was released (`item_head(it)`, `item_block(it)`: step it's query head and query block).
// T: a fused kernel's configuration (BwdWsTraits, BwdWideTraits), Q rows of P, dO rows of PV.
// TAIL_TMA: tail tiles by bwd_fill_pair_tma on the loader's own barrier `bar_tail` (the column-split
// kernel, whose consumers write the slots), else by bwd_fill_pair's cp.async.
template <class T, bool TAIL_TMA = false, class Head, class Block>
__device__ __forceinline__ void bwd_ws_loader(int items, const Head& item_head, const Block& item_block,
                                              const RaggedBatch& bt, const u16* q, i64 q_seq, i64 q_head,
                                              const u16* d_o, i64 do_seq, i64 do_head, const RaggedTmaMap* tm_q,
                                              const RaggedTmaMap* tm_do, const RaggedTmaMap* tm_stats, u32 s_q,
                                              u32 s_do, float* s_lse, float* s_di, u32 bar_full, u32 bar_empty,
                                              int b, int batch, int h_q, int di_rows, int row_blocks, int lane,
                                              u32 bar_tail = 0) {
    constexpr int BM = T::BM, P = T::P, PV = T::PV, NBUF = T::NBUF;
    u32 tail_parity = 0;
    for (int f = 0; f < items; ++f) {
        const int fb = f % NBUF;
        const int h = item_head(f);
        const int i0 = item_block(f) * BM;
        const int rows = bt.lq - i0 < BM ? bt.lq - i0 : BM;
        const i64 tok = bt.q_tok + i0;
        const u32 full = bar_full + 8 * fb;
        if (f >= NBUF) mbar_wait(bar_empty + 8 * fb, (u32)((f / NBUF) & 1) ^ 1u);
        if constexpr (TAIL_TMA) {
            static_assert(T::HEAD_DIM == P && T::HEAD_DIM_V == PV, "no padding columns");
            bwd_fill_pair_tma<BM, P, PV>(full, bar_tail, tail_parity, s_q + fb * (BM * P * 2),
                                         s_do + fb * (BM * PV * 2), tm_q, tm_do, h, (int)tok, rows, lane, 2 * BM * 4);
            tail_parity ^= rows < BM ? 1u : 0u;
        }
        else {
            bwd_fill_pair<T::HEAD_DIM, BM, P, T::HEAD_DIM_V, PV>(
                full, s_q + fb * (BM * P * 2), s_do + fb * (BM * PV * 2), tm_q, tm_do, h, (int)tok, rows,
                q + tok * q_seq + (i64)h * q_head, q_seq, d_o + tok * do_seq + (i64)h * do_head, do_seq, q, lane,
                2 * BM * 4);
        }
        if (lane == 0) {
            // Di's block, then the scaled LSE's (tm_stats: 64-row blocks of both arrays).
            const int blk = ((b * h_q + h) * di_rows + i0) / RAGGED_BWD_DI_ROWS;
            const int lse_blk = batch * h_q * row_blocks + blk;
            tma_load_2d(smem_addr(s_lse + fb * BM), tm_stats, 0, lse_blk, full);
            tma_load_2d(smem_addr(s_di + fb * BM), tm_stats, 0, blk, full);
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// A dQ writer warp: the steps of parity `par`, each one's two warpgroup halves (DQ_ALT: the whole
// dQ of one) from its dQ buffer into the step's blob by bulk reduction, ORDERED in the blob's turn
// (dq_order.cuh; a turn taken late sets RAGGED_ERR_DQ_ORDER in the error flag after tile_count).
// The named barriers' protocol: the writer arrives on its empty pair once before its first step and
// after each step but its last; the consumers wait on it before they write the buffer and arrive on
// the full pair after (both warpgroups, with DQ_ALT too).
template <class T, bool ORDERED, class Head, class Block>
__device__ __forceinline__ void bwd_ws_dq_writer(int items, const Head& item_head, const Block& item_block, int par,
                                                 u32 s_dq, float* dq_acc, int b, int batch, int h_q, int row_blocks,
                                                 const RaggedBand& band, int lq, int n, int tiles_b,
                                                 const int* tile_count, int lane) {
    constexpr int BLOB_F = T::BLOB_F;
    const u32 dq_buf = s_dq + par * (RAGGED_BWD_FUSED_BLOB * 4);
    const int full_bar = RAGGED_BWD_WS_BAR_DQ_FULL + 2 * par;
    const int empty_bar = RAGGED_BWD_WS_BAR_DQ_EMPTY + 2 * par;
    if (items > par) {
        named_bar_arrive(empty_bar + 0, 160);
        named_bar_arrive(empty_bar + 1, 160);
    }
    int* turns = bwd_dq_turns(dq_acc, h_q, batch, row_blocks);
    for (int it = par; it < items; it += 2) {
        const int m = item_block(it);
        const i64 blob = ((i64)item_head(it) * batch + b) * row_blocks + m;
        if constexpr (ORDERED) {
            if (lane == 0) bwd_ws_take_turn(turns + blob, bwd_ws_turn(band, lq, m, n, tiles_b, T::BN, T::BM), tile_count);
        }
        float* dst = dq_acc + blob * RAGGED_BWD_FUSED_BLOB;
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            named_bar_sync(full_bar + w, 160);
            if (lane == 0 && !T::DQ_ALT)
                bulk_reduce_add_f32(dst + w * (BLOB_F / 2), dq_buf + w * (BLOB_F * 2), BLOB_F * 2);
        }
        if (lane == 0 && T::DQ_ALT) bulk_reduce_add_f32(dst, dq_buf, BLOB_F * 4);
        if (lane == 0) {
            bulk_commit();
            bulk_wait_read<0>();
        }
        __syncwarp();
        if (it + 2 < items) {
            named_bar_arrive(empty_bar + 0, 160);
            named_bar_arrive(empty_bar + 1, 160);
        }
        if constexpr (ORDERED) {
            if (lane == 0) bwd_ws_pass_turn(turns + blob);
        }
    }
    if (lane == 0) bulk_wait<0>();
}

// The kernel: one block per (batch, KV head, key tile), its warps in the roles above; the loop of
// the consumers below is the mainloop.
template <bool BF16, class T, bool ORDERED>
__device__ __forceinline__ void bwd_fused_ws_body(RAGGED_BWD_PARAMS, const RaggedTmaMap* tm_q,
                                                  const RaggedTmaMap* tm_do, const RaggedTmaMap* tm_stats,
                                                  float* dq_acc) {
    constexpr int D = T::HEAD_DIM;
    constexpr int BM = T::BM, BN = T::BN, P = T::P, NS = T::NS, DT = T::DT, NBUF = T::NBUF, NDS = T::NDS;
    constexpr int NQ = T::NQ;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 base = smem_addr(smem_raw);
    const u32 s_k = (base + 1023u) & ~1023u;
    const u32 s_v = s_k + BN * P * 2;
    const u32 s_q = s_v + BN * P * 2;          // NBUF buffers of BM rows
    const u32 s_do = s_q + NBUF * BM * P * 2;  // NBUF buffers of BM rows
    const u32 s_ds = s_do + NBUF * BM * P * 2; // NDS tiles [BN keys][BM queries]
    const u32 s_dq = s_ds + NDS * BN * BM * 2; // 2 buffers of a step's dQ, RAGGED_BWD_FUSED_BLOB f32
    float* s_lse = (float*)(smem_raw + (s_dq + 2 * RAGGED_BWD_FUSED_BLOB * 4 - base));  // NBUF x BM
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
    // Step it's query head and query block.
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
            mbar_init(bar_empty + 8 * s, 8);  // one arrival per consumer warp
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
        else if (warp <= 2) {  // the dQ writers: warp 1 the even steps, warp 2 the odd ones
            bwd_ws_dq_writer<T, ORDERED>(items, item_head, item_block, warp - 1, s_dq, dq_acc, b, batch, h_q,
                                         row_blocks, band, bt.lq, n, tiles_b, tile_count, lane);
        }
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<T::CONSUMER_REGS>();
    const int ct = tid - 128;  // 0 .. 255
    const int ws = ct >> 7;    // consumer warpgroup: keys [64 ws, 64 ws + 64)
    const int cw = ct >> 5;    // consumer warp 0 .. 7
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

    float acc_dk[DT * 4], acc_dv[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; ++i) acc_dk[i] = acc_dv[i] = 0.f;

#pragma unroll 1
    for (int it = 0; it < items; ++it) {
        const int buf = it % NBUF;
        const int i0 = item_block(it) * BM;
        mbar_wait(bar_full + 8 * buf, (u32)((it / NBUF) & 1));
        // A tail tile came by cp.async (generic proxy) and is read by wgmma (async proxy).
        if (bt.lq - i0 < BM) fence_proxy_async();
        const u32 qb = s_q + buf * (BM * P * 2);
        const u32 dob = s_do + buf * (BM * P * 2);
        const float* lse_t = s_lse + buf * BM;
        const float* di_t = s_di + buf * BM;
        const u32 ds = s_ds + (it & 1) * (BN * BM * 2);

        float st[NS * 4], dpt[NS * 4];
        wgmma_fence();
        bwd_key_major_product<BF16, D, BM, BN>(st, s_k, qb, ws);
        wgmma_commit();
        bwd_key_major_product<BF16, D, BM, BN>(dpt, s_v, dob, ws);
        wgmma_commit();

        // P^T while dP^T is on the tensor cores; 0 outside the band and past Lq / Lkv.
        wgmma_wait<1>();
        fence_regs<NS * 4>(st);
        const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
        bwd_pt_tile<NS>(st, sl2, lse_t, full, band, bt.lq, i0, j0, key_row, lt);
        wgmma_wait<0>();
        fence_regs<NS * 4>(dpt);
        bwd_ds_tile<NS>(dpt, st, di_t, lt);
        u32 pa[BM / 16][4], pds[BM / 16][4];
        pack_a<BF16, BM / 16>(pa, (const float(*)[4])st);
        pack_a<BF16, BM / 16>(pds, (const float(*)[4])dpt);

        // dV += P^T dO, while dS^T goes to shared memory for dQ.
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < BM / 16; ++kc)
            wgmma_pv_desc<BF16, D, BM>(acc_dv, pa[kc], sw128_desc(dob, BM * 128, 1024), kc);
        wgmma_commit();
        bwd_stage_ds<BM, BN>(ds, pds, key_row, lt);
        fence_proxy_async();
        named_bar_sync(RAGGED_BWD_WS_BAR_DS, 256);

        // dQ(step) = dS K (DQ_ALT: by warpgroup it % 2 only), then dK += dS^T Q; dV and dQ retire first.
        const int par = it & 1;
        const bool dq_here = !T::DQ_ALT || ws == par;
        const u64 dqa = sw128_desc(qb, BM * 128, 1024);
        float acc_dq[NQ];
        if (dq_here) {
            wgmma_fence();
            bwd_dq_product<BF16, P, BN, T::DQ_ALT>(acc_dq, ds, s_k, ws);
            wgmma_commit();
#pragma unroll
            for (int kc = 0; kc < BM / 16; ++kc) wgmma_pv_desc<BF16, D, BM>(acc_dk, pds[kc], dqa, kc);
            wgmma_commit();
            wgmma_wait<1>();
            fence_regs<NQ>(acc_dq);
        }
        else {  // each branch whole from fence to wait: ptxas serializes wgmma split across a branch
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < BM / 16; ++kc) wgmma_pv_desc<BF16, D, BM>(acc_dk, pds[kc], dqa, kc);
            wgmma_commit();
            wgmma_wait<1>();
        }
        fence_regs<DT * 4>(acc_dv);
        fence_regs_u32<BM / 4>(&pa[0][0]);

        // This warpgroup's half of the step's dQ (DQ_ALT: all of it, or nothing), in accumulator
        // order, for the step's writer.
        named_bar_sync(RAGGED_BWD_WS_BAR_DQ_EMPTY + ws + 2 * par, 160);
        if (dq_here) {
            bwd_stage_dq_blob<NQ / 4>(s_dq + par * (RAGGED_BWD_FUSED_BLOB * 4), acc_dq, T::DQ_ALT ? 0 : ws,
                                      ct & 127);
            fence_proxy_async();
        }
        named_bar_arrive(RAGGED_BWD_WS_BAR_DQ_FULL + ws + 2 * par, 160);

        wgmma_wait<0>();
        fence_regs<DT * 4>(acc_dk);
        fence_regs_u32<BM / 4>(&pds[0][0]);
        if (lane == 0) mbar_arrive(bar_empty + 8 * buf);
    }

    // dK (times scale) and dV staged through the K and V tiles once both warpgroups are done with them.
    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);
    stage_acc<BF16, D, P>(s_k, (const float(*)[4])acc_dk, cw * 16, scale);
    stage_acc<BF16, D, P>(s_v, (const float(*)[4])acc_dv, cw * 16, 1.f);
    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);
    store_o_tile<D, P, BN, 256>(s_k, dk + (bt.kv_tok + j0) * dk_seq + (i64)g * dk_head, dk_seq, cols, 128);
    store_o_tile<D, P, BN, 256>(s_v, dv + (bt.kv_tok + j0) * dv_seq + (i64)g * dv_head, dv_seq, cols, 128);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
