// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the warp-specialized fused backward past D 128:
// D 256, and Q/K 192 with V/O 128); included in that file's order, not on its own.

// fused_ws.cuh's roles and protocol at head dims whose dK and dV (64 keys x D columns each) do not
// fit one warpgroup's registers: the consumer warpgroups split the columns instead of the keys.
// One block = BN = 64 keys of one batch and one KV head; per step (a query head's block of 64 rows)
// consumer warpgroup w (of two)
//   - computes S^T and dP^T for all 64 keys and its 32 query rows 32 w .. 32 w + 31 (m64n32, SS),
//     P^T and dS^T from them, and stages both, 16-bit, into [64 keys][64 queries] tiles;
//   - after both warpgroups staged theirs, issues its share of dV += P^T dO, dK += dS^T Q and
//     dQ = dS K back to back (all from shared memory): D 256 the columns [128 w, 128 w + 128) of all
//     three; 192/128 warpgroup 0 dK's and dQ's columns [0, 128), warpgroup 1 all of dV and dK's and
//     dQ's columns [128, 192) (256 columns of products each, in 64- and 128-column boxes);
//   - stages its dQ in 64-column parts over regions of the step's ring slot that only it read in
//     the step (BwdWideTraits::dq_part), which the step's dQ writer adds into the blob (one bulk
//     reduction per part) before it hands the slot back to the loader.
// The ring slot doubling as dQ's buffer is what lets two Q and two dO buffers fit beside K and V:
// at 64 x 256 a step's dQ is 64 KiB, the slot's Q and dO. At 192/128 the slot's Q and dO (40 KiB)
// hold two of the three 16 KiB parts; a third region per slot takes the last. The loader and the
// turn order (ORDERED) are fused_ws.cuh's. Since the slot's bytes pass from the consumers' stores to
// the loader's, each hand-over is one racecheck orders: a warpgroup's parts staged arrive on an
// mbarrier of the slot the writer waits on (not a named barrier), the slot's empty mbarrier takes
// the writer's one arrival, and the loader fills tail tiles by TMA and zeroes their rows past the
// batch itself (bwd_fill_pair_tma), no cp.async into a slot.
#define RAGGED_BWD_WIDE_BAR_PDS 2  // 256 consumers: the step's P^T and dS^T staged

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <int DQK, int DV>
struct BwdWideTraits {
    static_assert((DQK == 256 && DV == 256) || (DQK == 192 && DV == 128), "the column-split kernel's head dims");
    enum : int {
        HEAD_DIM = DQK,
        HEAD_DIM_V = DV,
        BM = RAGGED_BWD_FUSED_ROWS,  // query rows per step
        BN = 64,                     // keys per block
        P = DQK,                     // shared-memory row width of Q and K
        PV = DV,                     // of dO and V
        NS = BM / 2 / 8,             // S^T and dP^T: a warpgroup's 32 query columns, 4 NS accumulators
        // The column split: warpgroup 0 holds dK's and dQ's columns [0, K1) and dV's [0, V1),
        // warpgroup 1 the rest (BwdWideShare).
        K1 = DQK == DV ? DQK / 2 : 128,
        V1 = DQK == DV ? DV / 2 : 0,
        SYMMETRIC = 2 * K1 == DQK && 2 * V1 == DV,
        PARTS = DQK / 64,        // a step's dQ in parts of 64 columns: part i is columns [64 i, 64 i + 64)
        PART_F = BM * 64,        // floats of a part, in the blob's order (fused_dq.cuh)
        SLOT_PAD = DQK == DV ? 0 : PART_F * 4,  // bytes per slot for the part no Q or dO region takes
        NBUF = 2,                // the loader's ring
        NDS = 2,                 // P^T / dS^T tile pairs: a warpgroup a step ahead writes the other
        BLOB_F = bwd_dq_blob_floats(DQK),
        STRIDE = bwd_dq_blob_stride(DQK),
        PRODUCER_REGS = 40,
        CONSUMER_REGS = 232,
        // Dynamic shared memory: 1024 bytes to align the first tile, K and V (BN rows), NBUF Q and
        // NBUF dO buffers (BM rows), NBUF pads, NDS pairs of P^T and dS^T tiles, NBUF LSE and NBUF
        // Di rows, the ring's full and empty mbarriers, the loader's tail barrier, the slots' dQ
        // barriers (two per slot).
        SMEM = 1024 + BN * (P + PV) * 2 + NBUF * (BM * (P + PV) * 2 + SLOT_PAD) + NDS * 2 * BN * BM * 2 +
               2 * NBUF * BM * 4 + 16 * NBUF + 8 + 16 * NBUF,
    };
    static_assert(BLOB_F == PARTS * PART_F, "a step's dQ is the blob, in whole parts");
    static_assert(K1 % 64 == 0 && V1 % 64 == 0, "each warpgroup's columns are whole 64-column boxes");
    static_assert(BM == RAGGED_BWD_DI_ROWS, "a step's LSE / Di rows are one block of the Di pass");
    static_assert(SMEM <= 227 * 1024, "one block per SM");
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= setmaxnreg_pool(RAGGED_BWD_WS_THREADS),
                  "the warpgroups' registers fit what the launch allocates");

    // Where part i of a step's dQ is staged, in the step's slot (its Q, dO and pad buffers): a region
    // that only the warpgroup holding those columns read in the step's products (16 KiB: 64 rows of
    // two 64-column boxes, or the pad). D 256: warpgroup w's dK and dV read Q's and dO's boxes 2 w
    // and 2 w + 1, which take its parts 2 w and 2 w + 1. 192/128: warpgroup 0's dK reads Q's boxes 0
    // and 1 (part 0; part 1 goes to the pad), warpgroup 1's dV dO's boxes 0 and 1 (part 2).
    __device__ static __forceinline__ u32 dq_part(u32 q_slot, u32 do_slot, u32 pad_slot, int i) {
        if constexpr (SYMMETRIC) return ((i & 1) == 0 ? q_slot : do_slot) + (i >> 1) * (2 * BM * 128);
        else return i == 0 ? q_slot : i == 1 ? pad_slot : do_slot;
    }
};
using BwdWideD256 = BwdWideTraits<256, 256>;
using BwdWideD192V128 = BwdWideTraits<192, 128>;

// Warpgroup W's share of the products: K_COLS of dK's and dQ's columns from W · K1, V_COLS of dV's
// from W · V1. W < 0: the symmetric split, both warpgroups one code and W their index at run time.
template <class T, int W>
struct BwdWideShare {
    enum : int {
        WG = W,
        K_COLS = W == 1 ? T::HEAD_DIM - T::K1 : T::K1,
        V_COLS = W == 1 ? T::HEAD_DIM_V - T::V1 : T::V1,
    };
    static_assert(W >= 0 || T::SYMMETRIC, "a run-time share only where both are alike");
};

// A dQ writer warp of the wide kernel: the steps of parity `par` (ring slot par), each warpgroup's
// parts into the blob by bulk reduction once its 128 consumers arrived on the slot's dQ mbarrier of
// that warpgroup (`bar_dq`; ORDERED: in the blob's turn), then the slot back to the loader once the
// reductions have read it. mbarriers rather than fused_ws.cuh's named-barrier pair: the slot's bytes
// go from the consumers' stores through this warp to the loader's, and racecheck does not take a
// bar.arrive / bar.sync hand-over as ordering them (it reported the loader's stores as racing).
template <class T, bool ORDERED, class Head, class Block>
__device__ __forceinline__ void bwd_wide_dq_writer(int items, const Head& item_head, const Block& item_block, int par,
                                                   u32 s_q, u32 s_do, u32 s_pad, u32 bar_empty, u32 bar_dq,
                                                   float* dq_acc, int b,
                                                   int batch, int h_q, int row_blocks, const RaggedBand& band, int lq,
                                                   int n, int tiles_b, const int* tile_count, int lane) {
    constexpr int BM = T::BM;
    static_assert(T::NBUF == 2, "writer par serves ring slot par");
    const u32 q_slot = s_q + par * (BM * T::P * 2);
    const u32 do_slot = s_do + par * (BM * T::PV * 2);
    const u32 pad_slot = s_pad + par * T::SLOT_PAD;
    int* turns = bwd_dq_turns(dq_acc, h_q, batch, row_blocks, T::STRIDE);
    u32 phase = 0;  // of this slot's dQ mbarriers: one completion per step of parity par
    for (int it = par; it < items; it += 2, phase ^= 1u) {
        const int m = item_block(it);
        const i64 blob = ((i64)item_head(it) * batch + b) * row_blocks + m;
        if constexpr (ORDERED) {
            if (lane == 0) bwd_ws_take_turn(turns + blob, bwd_ws_turn(band, lq, m, n, tiles_b, T::BN, BM), tile_count);
        }
        float* dst = dq_acc + blob * T::STRIDE;
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            mbar_wait(bar_dq + 8 * (w + 2 * par), phase);
            if (lane == 0) {
#pragma unroll
                for (int i = w == 0 ? 0 : T::K1 / 64; i < (w == 0 ? T::K1 / 64 : T::PARTS); ++i)
                    bulk_reduce_add_f32(dst + i * T::PART_F, T::dq_part(q_slot, do_slot, pad_slot, i), T::PART_F * 4);
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
    const u64 da = sw128_desc(s_a, 16, 1024);
    const u64 db = sw128_desc(s_b + wg * (32 * 128), 16, 1024);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
        wgmma_ss<BF16, 32>(acc, desc_add(da, (ks >> 2) * (BN * 128) + (ks & 3) * 32),
                           desc_add(db, (ks >> 2) * (BM * 128) + (ks & 3) * 32), ks > 0);
}

// The shared-memory layout of the wide kernel (T a BwdWideTraits), from the dynamic allocation.
struct BwdWideSmem {
    u32 k, v;        // the block's K and V tiles (BN rows)
    u32 q, d_o, pad;  // NBUF buffers each: the ring's Q (BM rows), dO (BM rows), pads (SLOT_PAD bytes)
    u32 pds;          // NDS pairs of [BN][BM] tiles: P^T, then dS^T
    float* lse;       // NBUF x BM
    float* di;        // NBUF x BM
    u32 bar_full, bar_empty;  // the ring's mbarriers
    u32 bar_tail;             // the loader's own: a tail tile's boxes landed (bwd_fill_pair_tma)
    u32 bar_dq;               // [slot][warpgroup]: the warpgroup's dQ parts staged (128 arrivals)
};
template <class T>
__device__ __forceinline__ BwdWideSmem bwd_wide_smem(unsigned char* smem_raw) {
    constexpr int BM = T::BM, BN = T::BN, P = T::P, PV = T::PV, NBUF = T::NBUF;
    BwdWideSmem sm;
    const u32 base = smem_addr(smem_raw);
    sm.k = (base + 1023u) & ~1023u;
    sm.v = sm.k + BN * P * 2;
    sm.q = sm.v + BN * PV * 2;
    sm.d_o = sm.q + NBUF * BM * P * 2;
    sm.pad = sm.d_o + NBUF * BM * PV * 2;
    sm.pds = sm.pad + NBUF * T::SLOT_PAD;
    sm.lse = (float*)(smem_raw + (sm.pds + T::NDS * 2 * BN * BM * 2 - base));
    sm.di = sm.lse + NBUF * BM;
    sm.bar_full = smem_addr(sm.di + NBUF * BM);
    sm.bar_empty = sm.bar_full + 8 * NBUF;
    sm.bar_tail = sm.bar_empty + 8 * NBUF;
    sm.bar_dq = sm.bar_tail + 8;
    return sm;
}

// The consumers' mainloop and epilogue for warpgroup share S (BwdWideShare) of consumer thread ct
// (0 .. 255): the steps' products, dQ parts handed to the writers, and dK (times scale) and dV of
// the share's columns staged through the K and V tiles once both warpgroups are done with them
// (the caller stores the tiles).
template <bool BF16, class T, class S, class Block>
__device__ __forceinline__ void bwd_wide_consumer(const BwdWideSmem& sm, int items, const Block& item_block,
                                                  const RaggedBatch& bt, const RaggedBand& band, int j0, float scale,
                                                  int ct) {
    constexpr int D = T::HEAD_DIM, DV = T::HEAD_DIM_V;
    constexpr int BM = T::BM, BN = T::BN, P = T::P, PV = T::PV, NS = T::NS, NBUF = T::NBUF;
    constexpr int NK = S::K_COLS / 8, NV = S::V_COLS / 8;  // n8 accumulators of dK (and dQ), of dV
    const int ws = ct >> 7;        // consumer warpgroup: query rows [32 ws, 32 ws + 32) of S^T and dP^T
    const int cw = (ct >> 5) & 3;  // warp within the warpgroup: key rows [16 cw, 16 cw + 16)
    const int lane = ct & 31;
    const int lt = lane & 3;
    const int key_row = cw * 16 + (lane >> 2);  // and + 8
    const float sl2 = scale * RAGGED_LOG2E;
    const int w = S::WG < 0 ? ws : S::WG;
    const int k0 = w * T::K1, v0 = w * T::V1;  // the share's first columns

    float acc_dk[NK * 4], acc_dv[(NV > 0 ? NV : 1) * 4];
#pragma unroll
    for (int i = 0; i < NK * 4; ++i) acc_dk[i] = 0.f;
#pragma unroll
    for (int i = 0; i < NV * 4; ++i) acc_dv[i] = 0.f;

#pragma unroll 1
    for (int it = 0; it < items; ++it) {
        const int buf = it % NBUF;
        const int i0 = item_block(it) * BM;
        mbar_wait(sm.bar_full + 8 * buf, (u32)((it / NBUF) & 1));
        if (bt.lq - i0 < BM) fence_proxy_async();
        const u32 qb = sm.q + buf * (BM * P * 2);
        const u32 dob = sm.d_o + buf * (BM * PV * 2);
        const u32 padb = sm.pad + buf * T::SLOT_PAD;
        const float* lse_t = sm.lse + buf * BM + 32 * ws;
        const float* di_t = sm.di + buf * BM + 32 * ws;
        const u32 pt = sm.pds + (it & 1) * (2 * BN * BM * 2);
        const u32 dst = pt + BN * BM * 2;

        float st[NS * 4], dpt[NS * 4];
        wgmma_fence();
        bwd_wide_key_major<BF16, D, BM, BN>(st, sm.k, qb, ws);
        wgmma_commit();
        bwd_wide_key_major<BF16, DV, BM, BN>(dpt, sm.v, dob, ws);
        wgmma_commit();

        wgmma_wait<1>();
        fence_regs<NS * 4>(st);
        const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
        bwd_pt_tile<NS>(st, sl2, lse_t, full, band, bt.lq, i0 + 32 * ws, j0, key_row, lt);
        wgmma_wait<0>();
        fence_regs<NS * 4>(dpt);
        bwd_ds_tile<NS>(dpt, st, di_t, lt);
        {
            u32 pa[2][4], pds[2][4];
            pack_a<BF16, 2>(pa, (const float(*)[4])st);
            pack_a<BF16, 2>(pds, (const float(*)[4])dpt);
            bwd_stage_ds<BM / 2, BN>(pt, pa, key_row, lt, 4 * ws);
            bwd_stage_ds<BM / 2, BN>(dst, pds, key_row, lt, 4 * ws);
        }
        fence_proxy_async();
        named_bar_sync(RAGGED_BWD_WIDE_BAR_PDS, 256);

        // dV += P^T dO, dK += dS^T Q, dQ(step) = dS K over the share's columns (64-column boxes
        // of BM rows in Q and dO, of BN rows in K).
        float acc_dq[NK * 4];
        wgmma_fence();
        if constexpr (NV > 0) {
#pragma unroll
            for (int kc = 0; kc < BM / 16; ++kc)
                wgmma_ss_nt<BF16, S::V_COLS>(acc_dv, sw128_desc(pt + kc * 32, 16, 1024),
                                             sw128_desc(dob + (v0 / 64) * (BM * 128) + kc * (16 * 128), BM * 128,
                                                        1024),
                                             1);
        }
#pragma unroll
        for (int kc = 0; kc < BM / 16; ++kc)
            wgmma_ss_nt<BF16, S::K_COLS>(acc_dk, sw128_desc(dst + kc * 32, 16, 1024),
                                         sw128_desc(qb + (k0 / 64) * (BM * 128) + kc * (16 * 128), BM * 128, 1024),
                                         1);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            wgmma_ss_tt<BF16, S::K_COLS>(acc_dq, sw128_desc(dst + kk * (16 * 128), BN * 128, 1024),
                                         sw128_desc(sm.k + (k0 / 64) * (BN * 128) + kk * (16 * 128), BN * 128, 1024),
                                         kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        if constexpr (NV > 0) fence_regs<NV * 4>(acc_dv);
        fence_regs<NK * 4>(acc_dk);
        fence_regs<NK * 4>(acc_dq);

        // The share's dQ parts over the slot regions only this warpgroup read, for the writer.
        const int par = it & 1;
#pragma unroll
        for (int p = 0; p < NK / 8; ++p)
            bwd_stage_dq_blob<8>(T::dq_part(qb, dob, padb, k0 / 64 + p), acc_dq + 32 * p, 0, ct & 127);
        fence_proxy_async();
        mbar_arrive(sm.bar_dq + 8 * (w + 2 * par));
    }

    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);
    stage_acc<BF16, S::K_COLS, P>(sm.k, (const float(*)[4])acc_dk, cw * 16, scale, k0 / 8);
    if constexpr (NV > 0) stage_acc<BF16, S::V_COLS, PV>(sm.v, (const float(*)[4])acc_dv, cw * 16, 1.f, v0 / 8);
}

// The kernel: one block per (batch, KV head, 64-key tile), fused_ws.cuh's roles; T a
// BwdWideTraits.
template <bool BF16, class T, bool ORDERED>
__device__ __forceinline__ void bwd_fused_wide_body(RAGGED_BWD_PARAMS, const RaggedTmaMap* tm_q,
                                                    const RaggedTmaMap* tm_do, const RaggedTmaMap* tm_stats,
                                                    float* dq_acc) {
    constexpr int D = T::HEAD_DIM, DV = T::HEAD_DIM_V;
    constexpr int BM = T::BM, BN = T::BN, P = T::P, PV = T::PV, NBUF = T::NBUF;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const BwdWideSmem sm = bwd_wide_smem<T>(smem_raw);

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
            mbar_init(sm.bar_full + 8 * s, 32);  // every loader lane (bwd_fill_pair_tma)
            mbar_init(sm.bar_empty + 8 * s, 1);   // the slot's dQ writer
        }
        mbar_init(sm.bar_tail, 1);
#pragma unroll
        for (int i = 0; i < 2 * NBUF; ++i) mbar_init(sm.bar_dq + 8 * i, 128);
        mbar_init_fence();
    }
    __syncthreads();

    if (warp < 4) {
        setmaxnreg_dec<T::PRODUCER_REGS>();
        if (warp == 0) {
            bwd_ws_loader<T, true>(items, item_head, item_block, bt, q, q_seq, q_head, d_o, do_seq, do_head, tm_q,
                                   tm_do, tm_stats, sm.q, sm.d_o, sm.lse, sm.di, sm.bar_full, sm.bar_empty, b, batch,
                                   h_q, di_rows, row_blocks, lane, sm.bar_tail);
        }
        else if (warp <= 2) {
            bwd_wide_dq_writer<T, ORDERED>(items, item_head, item_block, warp - 1, sm.q, sm.d_o, sm.pad, sm.bar_empty,
                                           sm.bar_dq, dq_acc, b, batch, h_q, row_blocks, band, bt.lq, n, tiles_b,
                                           tile_count, lane);
        }
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<T::CONSUMER_REGS>();
    const int ct = tid - 128;  // 0 .. 255
    load_tile_sw128<D, P, BN, 256>(sm.k, k + (bt.kv_tok + j0) * k_seq + (i64)g * k_head, k_seq, cols, k, 128);
    load_tile_sw128<DV, PV, BN, 256>(sm.v, v + (bt.kv_tok + j0) * v_seq + (i64)g * v_head, v_seq, cols, v, 128);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);

    // Each warpgroup its share: one code for both where the split is symmetric, one each otherwise.
    if constexpr (T::SYMMETRIC) {
        bwd_wide_consumer<BF16, T, BwdWideShare<T, -1>>(sm, items, item_block, bt, band, j0, scale, ct);
    }
    else if (ct < 128) {
        bwd_wide_consumer<BF16, T, BwdWideShare<T, 0>>(sm, items, item_block, bt, band, j0, scale, ct);
    }
    else {
        bwd_wide_consumer<BF16, T, BwdWideShare<T, 1>>(sm, items, item_block, bt, band, j0, scale, ct);
    }

    named_bar_sync(RAGGED_BWD_WS_BAR_KV, 256);
    store_o_tile<D, P, BN, 256>(sm.k, dk + (bt.kv_tok + j0) * dk_seq + (i64)g * dk_head, dk_seq, cols, 128);
    store_o_tile<DV, PV, BN, 256>(sm.v, dv + (bt.kv_tok + j0) * dv_seq + (i64)g * dv_head, dv_seq, cols, 128);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
