// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the persistent warp-specialized Hopper forward kernel: its roles composed from the parts); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// One block per SM walks the work items of the tile scheduler (tile_scheduler.cuh) with one producer
// warpgroup and C::consumer_warpgroups consumers (mainloop_sm90.cuh). The producer runs ahead into
// the next item while the consumers finish the current one: Q has its own full / empty barrier pair
// (the consumers release Q after their last S = Q K^T, or with Q in registers after their first),
// the K / V ring's phases run on across items, and O goes from registers straight to global memory
// (epilogue_sm90.cuh). In the key loop:
//   - the producer fills K one block ahead of V (K (n + 1) before V (n)), so that the next K does
//     not wait behind the release of the V before it;
//   - a consumer waits for V (n - 1) between the issue of S (n) and that of P V (n - 1), so the S
//     issue does not wait behind the later of the two loads;
//   - each block's tail (P V wait, P pack) runs at the top of the next block, after its mbarrier
//     waits (loops, so basic blocks of their own): in one basic block with softmax (n), ptxas
//     schedules the wait for P V (n - 1) at the softmax's start, which serialises softmax and P V;
//   - the O rescale by corr (n - 1) runs after the issue of S (n), under that product; the P pack
//     stays before it, since S (n) overwrites the scores it packs.
// With C::deferred_o_store a consumer moves on to the next item right after issuing an item's last
// P V: the next item's slot, Q and K waits, its Q fragments and the issue of its first S overlap that
// P V, and only then does it wait (for both) and store the item's O (kept in acc, m_i and l_i until
// then). The wait covers the new S too: with a wait that leaves the S in flight, ptxas cannot match
// the commit groups across the item loop and serializes every wgmma of the kernel (C7514).
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <class C>
__device__ __forceinline__ void fmha_fwd_sm90_kernel(RAGGED_FMHA_PARAMS, const RaggedTmaMap* tm_q,
                                                     const RaggedTmaMap* tm_k, const RaggedTmaMap* tm_v,
                                                     const RaggedFusedList* fl, const RaggedFp8Params* f8) {
    constexpr bool BF16 = C::bf16, QREG = C::q_in_registers, TSQ = C::q_tail_shift, EO = C::deferred_o_store,
                   Q2 = C::double_q_buffer, F8 = C::fp8, SR = C::slot_records;
    constexpr int D = C::head_dim, DV = C::head_dim_v, BN = C::block_n, STAGES = C::kv_stages,
                  NC = C::consumer_warpgroups;
    constexpr int BM = 64 * NC;
    // Rows of Q / K are PQ columns wide in shared memory and rows of V PVS: the head dims rounded up to
    // whole 64-column swizzle blocks (d96: 128, the padding zero). S runs over the D real columns
    // only; P V over PV columns, so O's padding columns are computed (as zeros) and never stored,
    // unless the configuration narrows P V to d96's real columns.
    constexpr int PQ = ragged_row_width(D), PVS = ragged_row_width(DV), PV = C::pv_columns;
    static_assert(PV == PVS || (PV == 96 && DV == 96), "P V over V's padded width or d96's real columns");
    static_assert(128 * C::producer_registers + 128 * NC * C::consumer_registers <= setmaxnreg_pool(128 * (NC + 1)),
                  "the warpgroups' registers fit what the launch allocates");
    constexpr int KS = D / 16;
    constexpr int NS = BN / 8;
    constexpr int DT = PV / 8;   // accumulator n-tiles
    constexpr int DTO = DV / 8;  // ... of them stored
    constexpr u32 Q_BYTES = BM * PQ * 2;
    constexpr u32 K_BYTES = BN * PQ * 2;
    // FP8 (fp8_sm90.cuh): V is the workspace's transposed copy, DV rows of BN one-byte keys.
    constexpr u32 V_BYTES = F8 ? DV * BN : BN * PVS * 2;
    // FP8: P in e4m3 fragments of 32 keys, else 16-key bf16 / fp16 fragments.
    constexpr int PA = F8 ? BN / 32 : BN / 16;
    static_assert(!F8 || (!QREG && !TSQ &&
                          ((D == 128 && DV == 256 && BN == 64) ||
                           (D == 64 && DV == 128 && (BN == 128 || BN == 192)) ||
                           (D == 32 && DV == 64 && (BN == 128 || BN == 192)))),
                  "the FP8 forward: Q from shared memory; D 256 over blocks of 64 keys, D 128 or 64 of 128 or 192");
    static_assert(D % 32 == 0 && (D >= 64 || F8) && D <= 256 && (DV == 64 || DV == 96 || DV == 128 || DV == 256),
                  "head dims the P V widths cover");
    static_assert((BN == 64 || BN == 128 || (F8 && BN == 192)) && STAGES >= 2, "key-block widths of the S products");
    // Without deferred_o_store the d192 / 128 form (Q in registers, a ring of 2) wrote wrong values
    // into a few rows of the second consumer's half of short causal items. A race with the same
    // signature (Q released right after the ldmatrix, before a late warp had read it) was found and
    // fixed in d128's form; that it caused this failure too is likely but not shown, so the
    // combination stays refused.
    static_assert(EO || !QREG || STAGES > 2,
                  "Q in registers with a ring of 2 needs deferred_o_store (see above)");

    // The shared-memory layout of RAGGED_FMHA_SM90_SMEM (mainloop_sm90.cuh).
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_o = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 s_q = s_o + RAGGED_SM90_O_STAGE_BYTES(C);
    static_assert(RAGGED_SM90_O_STAGE_BYTES(C) % 1024 == 0, "Q's tiles stay 1024-byte aligned");
    static_assert(!C::staged_o_stores || (!F8 && !C::wide_o_stores && !C::q_tail_shift),
                  "the staged O store replaces the 16-byte one, for rows of the tile's own item");
    const u32 s_k = s_q + (Q2 ? 2 : 1) * Q_BYTES;
    const u32 s_v = s_k + STAGES * K_BYTES;
    const u32 bars = s_v + STAGES * V_BYTES;
    const u32 q_full = bars;
    const u32 q_empty = bars + 8;
    const u32 k_full = bars + 16;
    const u32 k_empty = k_full + 8 * STAGES;
    const u32 v_full = k_empty + 8 * STAGES;
    const u32 v_empty = v_full + 8 * STAGES;
    const u32 slot_full = v_empty + 8 * STAGES;
    const u32 slot_empty = slot_full + 16;
    // The slots are read and written at shared-memory addresses derived from slot_full, which both
    // roles keep anyway: a generic pointer to them would be one more uniform value live through both
    // loops, which d64 spilled.
    const u32 s_slot = slot_full + 32;
    const u32 q2_full = v_empty + 8 * STAGES + 48;
    const u32 q2_empty = q2_full + 8;
    // FP8: eight words per consumer warp after the spare 8 bytes (RAGGED_FMHA_SM90_SMEM).
    const u32 f8_words = q2_full + 24;
    // slot_records: the two item records after the spare 8 bytes, 16-byte aligned (bars is: s_q is
    // 1024-byte aligned and the tiles before bars are multiples of 16 bytes).
    static_assert(!SR || !F8, "the slot records take the place of the FP8 words");
    static_assert(!SR || ((Q2 ? 2 : 1) * Q_BYTES + STAGES * (K_BYTES + V_BYTES)) % 16 == 0,
                  "the mbarriers, and so the slot records, 16-byte aligned");
    const u32 s_rec = bars + RAGGED_SLOT_RECORD_OFFSET(STAGES, Q2);
    // Fill qi (items with keys, counted alike by producer and consumers): its buffer, its barriers'
    // phase.
    auto q_buf = [&](int qi) { return s_q + (Q2 ? (u32)(qi & 1) * Q_BYTES : 0u); };
    auto q_full_of = [&](int qi) { return Q2 && (qi & 1) ? q2_full : q_full; };
    auto q_empty_of = [&](int qi) { return Q2 && (qi & 1) ? q2_empty : q_empty; };
    auto q_phase = [&](int qi) { return (u32)((Q2 ? qi >> 1 : qi) & 1); };

    // One block per SM is resident (shared memory, registers): P = min(SM count, grid) blocks work,
    // the others leave before touching anything. If the grid is smaller than the SM count it is still
    // at least the item count (the host's grid bounds the tile list), so round 0 covers every item.
    u32 nsm;
    asm("mov.u32 %0, %%nsmid;\n" : "=r"(nsm));
    // FP8: at most RAGGED_FP8_AMAX_BLOCKS working blocks, each writing its amax partials.
    const u32 p_cap = F8 && gridDim.x > RAGGED_FP8_AMAX_BLOCKS ? RAGGED_FP8_AMAX_BLOCKS : gridDim.x;
    const int P = (int)(nsm < p_cap ? nsm : p_cap);
    if ((int)blockIdx.x >= P) return;
    ragged_grid_dependency_wait();
    // The next execute's pre-pass may be scheduled now: it writes nothing before its own wait for
    // this grid's completion (fmha/prepass.cuh), so it only uses this grid's tail to get ready.
    ragged_grid_launch_dependents();
    // With a nonce the host launched no pre-pass and every block builds the list itself, scratch in
    // its K ring (fmha/fused_list.cuh); the work counter is made ready before the first draw.
    const bool fused = fl != nullptr && fl->nonce != 0;
    int n_tiles;
    static_assert(sizeof(RaggedFlShared<128 * (NC + 1)>) <= STAGES * K_BYTES, "the list build's scratch fits the K ring");
    if (fused)
        n_tiles = ragged_fl_build<128 * (NC + 1)>(
            *fl, *reinterpret_cast<RaggedFlShared<128 * (NC + 1)>*>(smem_raw + (s_k - smem_addr(smem_raw))));
    else
        n_tiles = ragged_ld_weak(tile_count);
    const int total = n_tiles * h_q;
    const int tid = threadIdx.x;
    const int wg = tid >> 7;

    if (tid == 0)
        mainloop_init_barriers<STAGES, NC, Q2>(q_full, q_empty, q2_full, q2_empty, k_full, k_empty, v_full, v_empty,
                                               slot_full, slot_empty);
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer: one warp; the rest of its warpgroup leaves ----------------
        setmaxnreg_dec<C::producer_registers>();
        const int t = tid;
        if (t >= 32) return;
        KvRing<STAGES> kr, vr;  // K and V blocks filled so far (V one behind K)
        int qi = 0;             // items with key blocks so far (fills of the Q buffer)
#pragma unroll 1
        for (int r = 0;; ++r) {
            // slot_records: the item is read before the slot is handed over, so that it travels with
            // the index.
            int w;
            if constexpr (SR) {
                w = sched_draw_item(r, fused, fl, tile_count, P, t);
                sched_slot_wait_empty(r, slot_empty);
            }
            else {
                w = sched_produce_item(r, P, fused, fl, tile_count, slot_full, slot_empty, s_slot, t);
            }
            if (w >= total) {
                if constexpr (SR) sched_publish_end(r, w, slot_full, s_rec, t);
                break;
            }
            const WsItem it = sched_item<TSQ, C::tail_items_per_block>(w, batches, tiles, n_tiles, h_q, mask_left,
                                                                       mask_right, bottom_right, BM, BN, P);
            if constexpr (SR) sched_publish_record(r, w, it, slot_full, s_rec, t);
            if (it.nb_first >= it.nb_last) continue;  // no Q, no keys: the consumers only store O = 0
            // Q is free again once every consumer warp released the previous item's Q.
            const u32 qb = q_buf(qi), qf = q_full_of(qi);
            mbar_wait(q_empty_of(qi), q_phase(qi) ^ 1u);
            ++qi;
            const int g = it.h / (h_q / h_kv);
            const u16* qp = q + (it.bt.q_tok + it.q0) * q_seq + (i64)it.h * q_head;
            const int q_rows = sched_q_rows(it);
            const u16* kp = k + it.bt.kv_tok * k_seq + (i64)g * k_head;
            const u16* vp = v + it.bt.kv_tok * v_seq + (i64)g * v_head;
            tma_fill_tile<D, BM, PQ>(qf, qb, tm_q, it.h, (int)(it.bt.q_tok + it.q0), q_rows, qp, q_seq, q, t);
            // V of key block nbv into the V ring's next position.
            auto fill_v = [&](int nbv) {
                const int st = vr.stage();
                mbar_wait(v_empty + 8 * st, vr.phase() ^ 1u);
                if constexpr (F8) {
                    const int blk = (g * f8->batch + it.b) * f8->vt_blocks + nbv;
                    fp8_fill_vt<DV, BN>(v_full + 8 * st, s_v + st * V_BYTES, tm_v, blk, t);
                }
                else {
                    const int j0 = kv_tile_first_key<BN>(nbv, it.bt.lkv);
                    tma_fill_tile<DV, BN, PVS>(v_full + 8 * st, s_v + st * V_BYTES, tm_v, g,
                                               (int)(it.bt.kv_tok + j0), it.bt.lkv - j0, vp + (i64)j0 * v_seq, v_seq,
                                               v, t);
                }
                vr.advance();
            };
#pragma unroll 1
            for (int nb = it.nb_first; nb < it.nb_last; ++nb, kr.advance()) {
                const int st = kr.stage();
                const u32 ph = kr.phase();
                const int j0 = kv_tile_first_key<BN>(nb, it.bt.lkv);
                const int row = (int)(it.bt.kv_tok + j0);
                mbar_wait(k_empty + 8 * st, ph ^ 1u);
                tma_fill_tile<D, BN, PQ>(k_full + 8 * st, s_k + st * K_BYTES, tm_k, g, row, it.bt.lkv - j0,
                                         kp + (i64)j0 * k_seq, k_seq, k, t);
                if (nb > it.nb_first) fill_v(nb - 1);
            }
            fill_v(it.nb_last - 1);
        }
        if (fused && t == 0) ragged_fl_leave(*fl, P);
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<C::consumer_registers>();
    const int c = wg - 1;
    const int lane = tid & 31;
    const int row_in_tile = c * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);  // and + 8
    const int lt = lane & 3;
    // FP8: the scalars (read after the grid-dependency wait) fold δq δk into the scores' scale.
    RaggedFp8Scales f8s{};
    if constexpr (F8) f8s = ragged_fp8_scales(*f8);
    // FP8: this warp's words in shared memory (fp8_warp_words): its running amax_o and amax_s and O's
    // two factors, read where an item ends rather than held in registers through the key loop.
    const u32 f8w = f8_words + 32 * (c * 4 + ((tid >> 5) & 3));
    const float sl2_reg = (F8 ? scale * f8s.s_scale : scale) * 1.4426950408889634f;
    if constexpr (F8) fp8_warp_words_init(f8w, f8s, sl2_reg, lane);
    // The scores' scale (log2 units): for FP8 read from the warp's words at each use.
    auto scale_l2 = [&]() { return F8 ? fp8_warp_word(f8w, RAGGED_FP8_WORD_SL2) : sl2_reg; };
    KvRing<STAGES> kv;  // K / V blocks consumed so far
    int qi = 0;
    float acc[DT * 4];
    float m_i[2];
    float l_i[2];
    auto reset = [&]() {
        m_i[0] = m_i[1] = RAGGED_NEG_INF;
        l_i[0] = l_i[1] = 0.f;
#pragma unroll
        for (int i = 0; i < DT * 4; ++i) acc[i] = 0.f;
    };
    // deferred_o_store: the item whose O is still in acc (its last P V possibly in flight, its V stage
    // not yet released), stored by flush with the factors inv its row statistics left.
    bool pending = false;
    EpilogueRows pend{};
    int pend_stage = 0;
    float inv[2];
    // wide_o_stores: every row of O starts at a 16-byte boundary (rows are o_seq apart, heads o_head,
    // batches whole rows).
    const bool o_wide = (C::wide_o_stores || C::staged_o_stores) &&
                        (((u64)o | (u64)(o_seq * 2) | (u64)(o_head * 2)) & 15) == 0;
    // The item's LSE and O's factors, once its last softmax step is done (epilogue_sm90.cuh).
    auto row_stats = [&](const EpilogueRows& rows) {
        if constexpr (F8) {
            fp8_row_stats<TSQ>(m_i, l_i, rows, row_in_tile, lt, scale_l2(), lse_seq, f8w, lane, inv);
        }
        else {
            float l[2];
            epilogue_row_stats<TSQ>(m_i, l_i, rows, row_in_tile, lt, scale_l2(), lse_seq, 1.f, inv, l);
        }
    };
    // The online-softmax step of key block nb (FP8: no slack, softmax.cuh).
    auto softmax = [&](float* sc, float* corr, const RaggedBand& band, int nb, int i0, int2 fr) {
        softmax_step<NS, F8 ? 0 : RAGGED_SOFTMAX_MAX_SLACK>(sc, m_i, l_i, corr, band,
                                                            kv_tile_first_key<BN>(nb, band.lkv), BN, i0, row_in_tile,
                                                            lt, scale_l2(), nb * BN, fr);
    };
    auto store_o = [&](const EpilogueRows& rows) {
        if constexpr (F8)
            fp8_epilogue_store_o<DTO>(acc, inv, rows, row_in_tile, lt, o_seq, f8->o_kind, f8w, lane);
        else if (C::staged_o_stores && o_wide)
            epilogue_store_o_staged<BF16, DTO>(acc, inv, rows, row_in_tile, lane, o_seq,
                                               s_o + (u32)(row_in_tile - (lane >> 2)) * (DTO * 16));
        else
            epilogue_store_o<BF16, DTO, TSQ, C::wide_o_stores>(acc, inv, rows, row_in_tile, lt, o_seq, o_wide);
    };
    auto flush = [&]() {
        fence_regs<DT * 4>(acc);
        if (lane == 0) mbar_arrive(v_empty + 8 * pend_stage);
        store_o(pend);
        pending = false;
    };
    // The S product and P V of the configuration's element type.
    auto issue_s = [&](float* sc, const u32 (*qa)[4], u32 sq, u32 kb) {
        if constexpr (F8)
            fp8_issue_s<2 * D, BN, BM>(sc, sq, c, kb);
        else
            mainloop_issue_s<BF16, D, BN, BM, QREG>(sc, qa, sq, c, kb);
    };
    auto issue_pv = [&](const u32 (*pa)[4], u32 vb) {
        if constexpr (F8)
            fp8_issue_pv<DV, BN>(acc, pa, vb);
        else
            mainloop_issue_pv<BF16, PV, BN>(acc, pa, vb);
    };

    if (c == NC - 1) named_bar_arrive(RAGGED_WS_BAR_TURN + 0, 256);

#pragma unroll 1
    for (int r = 0;; ++r) {
        int w;
        WsItem it;
        if constexpr (SR) {
            w = sched_consume_record<TSQ>(r, slot_full, slot_empty, s_rec, lane, mask_left, mask_right, bottom_right,
                                          BM, BN, &it);
            if (w >= total) break;
        }
        else {
            w = sched_consume_item(r, slot_full, slot_empty, s_slot, lane);
            if (w >= total) break;
            it = sched_item<TSQ, C::tail_items_per_block>(w, batches, tiles, n_tiles, h_q, mask_left, mask_right,
                                                          bottom_right, BM, BN, P);
        }
        // Only an item with key blocks has a Q in flight.
        const u32 sq = q_buf(qi), qe = q_empty_of(qi);
        if (it.nb_first < it.nb_last) {
            mbar_wait(q_full_of(qi), q_phase(qi));
            ++qi;
        }
        const RaggedBand band = make_band(it.bt.lq, it.bt.lkv, mask_left, mask_right, bottom_right);
        // i0: the query row of the Q tile's first row (it.q0, before the item's own under the Q tail
        // shift); the item's rows are r_lo .. r_lo + it.rows - 1 of the tile.
        const int i0 = it.q0;
        const EpilogueRows out = epilogue_rows(it, o, lse, o_seq, o_head, lse_seq, lse_head);
        if (!EO) reset();

        if (it.nb_first < it.nb_last) {
            const int i_last = it.i0 + it.rows - 1;
            const int2 fr = ragged_full_keys(band, i0, i_last);
            float s[NS * 4];
            u32 pa[PA][4];
            float corr[2];
            const int nb_first = it.nb_first, nb_last = it.nb_last;
            u32 qa[QREG ? KS : 1][4];
            if constexpr (QREG) {
                const int qr = c * 64 + ((tid >> 5) & 3) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
                for (int ks = 0; ks < KS; ++ks)
                    ldsm_x4(sq + sw128<BM>(qr, 2 * ks + (lane >> 4)), qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
                // Q is released after the first S, not here: an mbarrier arrive right after the
                // ldmatrix does not wait for its shared-memory reads, and when the producer is idle
                // (short items) the next item's Q could land over rows a late warp has not read yet.
            }

            // The first key block: S only.
            {
                const int st = kv.stage();
                mbar_wait(k_full + 8 * st, kv.phase());
                // A tile copied by cp.async (a tail: generic-proxy writes) is read by wgmma (async
                // proxy) only after this fence.
                fence_proxy_async();
                consumer_turn_wait(c);
                wgmma_fence();
                issue_s(s, qa, sq, s_k + st * K_BYTES);
                wgmma_commit();
                consumer_turn_pass<NC>(c);
                // The previous item's last P V (if any) and this S are done; unconditional, so that
                // ptxas sees no path that touches acc under an unfinished P V.
                wgmma_wait<0>();
                if constexpr (EO) {
                    if (pending) flush();
                    reset();
                }
                fence_regs<NS * 4>(s);
                if (lane == 0) {
                    mbar_arrive(k_empty + 8 * st);
                    // Q in registers: the S just waited for read every Q fragment from registers, so
                    // this warp's ldmatrix reads are complete (the whole warp's: ldmatrix and wgmma
                    // are warp-collective).
                    if (QREG || nb_first + 1 == nb_last) mbar_arrive(qe);
                }
                softmax(s, corr, band, nb_first, i0, fr);
            }
            // The previous block's tail at the top of the next one: P V (n - 2) done (none in flight
            // for the first block), its V released, O rescaled by corr (n - 1) where asked (acc is 0
            // after the first block), P (n - 1) packed. first: the tail of the item's first block,
            // with no V of this item to release yet. FP8 takes it from the flag (a count of blocks
            // kept through the loop was one register too many in its consumers' tightest spot, at
            // 192 keys); the 16-bit forms keep the count, with which they were measured faster.
            const int nb_first_kv = kv.n;
            auto pending_tail = [&](bool rescale, bool first) {
                wgmma_wait<0>();
                fence_regs<DT * 4>(acc);
                fence_regs_u32<PA * 4>(&pa[0][0]);
                const bool release = F8 ? !first : kv.n > nb_first_kv;
                if (release && lane == 0) mbar_arrive(v_empty + 8 * kv.prev_stage());
                if (rescale) softmax_rescale_o<DV>(acc, corr);
                if constexpr (F8)
                    fp8_pack_p<BN>(s, pa, fp8_warp_word(f8w, RAGGED_FP8_WORD_P_SCALE));
                else
                    softmax_pack_p<BF16, BN>(s, pa);
                // The next wgmma reads both: keep the compiler from sinking these writes past its fence.
                fence_regs<DT * 4>(acc);
                fence_regs_u32<PA * 4>(&pa[0][0]);
            };

#pragma unroll 1
            for (int nb = nb_first + 1; nb < nb_last; ++nb) {
                const int st = kv.next_stage();
                const int sp = kv.stage();
                mbar_wait(k_full + 8 * st, kv.next_phase());
                // Only a tail block comes by cp.async, and only the last K can be one.
                if (nb + 1 == nb_last) fence_proxy_async();
                pending_tail(false, nb == nb_first + 1);
                const u32 kb = s_k + st * K_BYTES;
                const u32 vb_prev = s_v + sp * V_BYTES;
                consumer_turn_wait(c);
                wgmma_fence();
                issue_s(s, qa, sq, kb);
                wgmma_commit();
                mbar_wait(v_full + 8 * sp, kv.phase());
                softmax_rescale_o<DV>(acc, corr);
                fence_regs<DT * 4>(acc);
                wgmma_fence();
                issue_pv(pa, vb_prev);
                wgmma_commit();
                consumer_turn_pass<NC>(c);
                wgmma_wait<1>();
                fence_regs<NS * 4>(s);
                if (lane == 0) {
                    mbar_arrive(k_empty + 8 * st);
                    if (!QREG && nb + 1 == nb_last) mbar_arrive(qe);
                }
                softmax(s, corr, band, nb, i0, fr);
                kv.advance();
            }

            // Last P V; its V stage is released for the producer's next item (deferred_o_store: once
            // it is done, in flush).
            {
                const int sp = kv.stage();
                mbar_wait(v_full + 8 * sp, kv.phase());
                fence_proxy_async();
                pending_tail(true, nb_last - nb_first == 1);
                consumer_turn_wait(c);
                wgmma_fence();
                issue_pv(pa, s_v + sp * V_BYTES);
                wgmma_commit();
                consumer_turn_pass<NC>(c);
                if constexpr (EO) {
                    row_stats(out);
                    pending = true;
                    pend = out;
                    pend_stage = sp;
                }
                else {
                    wgmma_wait<0>();
                    fence_regs<DT * 4>(acc);
                    fence_regs_u32<PA * 4>(&pa[0][0]);
                    if (lane == 0) mbar_arrive(v_empty + 8 * sp);
                }
                kv.advance();
            }
            if (EO) continue;
        }
        else if (EO) {
            // An item without keys stores O = 0 at once, after any O still pending.
            wgmma_wait<0>();
            if (pending) flush();
            reset();
        }
        row_stats(out);
        store_o(out);
    }
    if (EO) {
        wgmma_wait<0>();
        if (pending) flush();
    }
    if constexpr (F8) {
        // One partial of each per consumer warp (RAGGED_FP8_AMAX_WARPS per block), reduced by
        // ragged_fmha_fp8_amax.
        if (f8->amax != nullptr && lane == 0) {
            const u32 amax = __float_as_uint(fp8_warp_word(f8w, RAGGED_FP8_WORD_AMAX_O));
            const u32 amax_s = __float_as_uint(fp8_warp_word(f8w, RAGGED_FP8_WORD_AMAX_S));
            const int at = blockIdx.x * RAGGED_FP8_AMAX_WARPS + c * 4 + ((tid >> 5) & 3);
            f8->amax[at] = amax;
            f8->amax[RAGGED_FP8_AMAX_S_OFFSET + at] = amax_s;
        }
    }
    if (c == 0) named_bar_sync(RAGGED_WS_BAR_TURN + 0, 256);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
