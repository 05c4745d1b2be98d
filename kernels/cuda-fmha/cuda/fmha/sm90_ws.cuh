// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the warp-specialized Hopper forward body); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Warp-specialized wgmma body (sm_90a, D_qk = D_v in {64, 128}): 1 + NC warpgroups. Warpgroup 0 is the
// producer: it drops to a few registers (setmaxnreg) and streams Q once and K, V block by block
// through a STAGES-deep shared-memory ring, each fill completing on a "full" mbarrier: with TMA = true
// one warp issues a tensor-map copy per whole tile and copies tail tiles (rows past Lq / Lkv) with
// zero-filling cp.async (`ws_fill`), with TMA = false the whole warpgroup copies with cp.async. Either
// way no row outside the batch is ever read. Warpgroups 1 .. NC are consumers of 64 query rows each,
// with the registers the producer gave up: per block they wait on K's full barrier, issue
// S(n) = Q K(n)^T together with O += P(n-1) V(n-1), release K(n) once S(n) is in registers and V(n-1)
// once the P V product has finished (one arrive per warp on the "empty" barriers). Ping-pong: the
// consumers take turns issuing their MMAs through named barriers, so that one warpgroup's softmax
// runs while another's GEMMs hold the tensor cores. The plugin runs the persistent form of this body
// (sm90_wsp.cuh, with TMA); this one-block-per-tile form and the cp.async producer are study entries
// (bench/gpu/NOTES.md).
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// load_tile_sw128 for the producer's 128 threads (thread index t), not the whole block.
template <int D, int ROWS>
__device__ __forceinline__ void ws_load_tile(u32 s_base, const u16* g, i64 stride, int valid, const u16* safe, int t) {
    constexpr int CH = D / 8;
    static_assert((ROWS * CH) % 128 == 0, "whole producer passes");
#pragma unroll 4
    for (int it = 0; it < ROWS * CH / 128; ++it) {
        int idx = it * 128 + t;
        int r = idx / CH;
        int c = idx % CH;
        bool p = r < valid;
        const u16* src = p ? g + (i64)r * stride + c * 8 : safe;
        cp_async16(s_base + sw128<ROWS>(r, c), src, p);
    }
}

// One producer warp fills a ROWS-row tile (D columns, stored P columns wide: P = D rounded up to a
// whole 64-column swizzle block) and completes it on `bar` (initialised with count 1). A whole tile
// (valid >= ROWS) is P / 64 TMA boxes issued by lane 0: columns from D to P lie past the map's head
// dim and arrive as the tensor-map fill's zeros (counted in the transaction bytes like the rest of
// the box); a tail tile is copied with cp.async by the 32 lanes so that rows >= valid and the
// padding columns are zero-filled without being read (never another batch's rows or another head's
// columns, never past the buffer), each lane's copies tracked by the barrier and lane 0's plain
// arrival counted once every lane has registered its copies.
template <int D, int ROWS, int P = D>
__device__ __forceinline__ void ws_fill(u32 bar, u32 s_dst, const RaggedTmaMap* map, int head, int row, int valid,
                                        const u16* g, i64 stride, const u16* safe, int lane) {
    static_assert(P % 64 == 0 && P >= D && P - D < 64, "a padded row is D rounded up to whole swizzle blocks");
    if (valid >= ROWS) {
        if (lane == 0) {
            mbar_arrive_expect_tx(bar, ROWS * P * 2);
#pragma unroll
            for (int cb = 0; cb < P / 64; ++cb) tma_load_3d(s_dst + cb * (ROWS * 128), map, cb * 64, head, row, bar);
        }
    }
    else {
        constexpr int CH = P / 8;
#pragma unroll 4
        for (int it = 0; it < ROWS * CH / 32; ++it) {
            int idx = it * 32 + lane;
            int r = idx / CH;
            int c = idx % CH;
            bool p = r < valid && c < D / 8;
            cp_async16(s_dst + sw128<ROWS>(r, c), p ? g + (i64)r * stride + c * 8 : safe, p);
        }
        cp_async_mbar_track(bar);
        __syncwarp();
        if (lane == 0) mbar_arrive(bar);
    }
}

// Named barriers: 0 is __syncthreads, 1 .. NC the consumers' turns, NC + 1 the persistent producer's own
// (sm90_wsp.cuh), NC + 2 and NC + 3 its item slot's hand-over.
#define RAGGED_WS_BAR_TURN 1

// The consumers' turn-taking, round robin over the NC consumers: wait for my turn (the previous
// consumer's hand-over), issue, hand over to the next (PINGPONG = false: everyone issues as soon as
// its operands are ready).
template <bool PINGPONG, int NC>
__device__ __forceinline__ void ws_turn_wait(int c) {
    if (PINGPONG) named_bar_sync(RAGGED_WS_BAR_TURN + c, 256);
}
template <bool PINGPONG, int NC>
__device__ __forceinline__ void ws_turn_pass(int c) {
    if (PINGPONG) named_bar_arrive(RAGGED_WS_BAR_TURN + (c + 1 == NC ? 0 : c + 1), 256);
}

// NC consumer warpgroups (BM = 64 NC); PREG / CREG: the producer's and the consumers' register
// counts after setmaxnreg (128 PREG + 128 NC CREG must fit the block's launch allocation).
// TMA: the producer is one warp issuing TMA loads through the tensor maps tm_q / tm_k / tm_v (whole
// tiles) and cp.async for tail tiles (ws_fill); otherwise its 128 threads copy every tile with
// cp.async and the maps are not used (null).
// LAZY: skip the O rescale of a block when no row of the warp changed its running max (every corr
// factor exactly 1, so the product would be the identity).
// POLY: how many of every 4 score n-tiles are exponentiated on the FMA pipe (poly_exp2).
// QREG: each consumer loads its 64 Q rows into registers once (ldmatrix, the A-fragment layout) and
// S = Q K^T reads only K from shared memory, which removes the A operand's shared-memory reads
// (a third of S's operand traffic at BN 128) for D / 2 registers per thread.
template <bool BF16, int D, int BN, int STAGES, int NC, bool PINGPONG, int PREG, int CREG, bool TMA = false,
          bool LAZY = false, int POLY = 0, bool QREG = false>
__device__ __forceinline__ void fmha_fwd_ws_body(RAGGED_FMHA_PARAMS, const RaggedTmaMap* tm_q = nullptr,
                                                 const RaggedTmaMap* tm_k = nullptr,
                                                 const RaggedTmaMap* tm_v = nullptr) {
    constexpr int BM = 64 * NC;
    constexpr u32 FILL_ARRIVALS = TMA ? 1 : 128;
    constexpr int KS = D / 16;
    constexpr int NS = BN / 8;
    constexpr int DT = D / 8;
    constexpr u32 Q_BYTES = BM * D * 2;
    constexpr u32 KV_BYTES = BN * D * 2;
    static_assert((D == 64 || D == 128) && (BN == 64 || BN == 128 || (TMA && (BN == 176 || BN == 192))) && STAGES >= 2,
                  "ws tile shapes");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 s_k = s_q + Q_BYTES;
    const u32 s_v = s_k + STAGES * KV_BYTES;
    // mbarriers: q_full, k_full[S], k_empty[S], v_full[S], v_empty[S]
    const u32 bars = s_v + STAGES * KV_BYTES;
    const u32 q_full = bars;
    const u32 k_full = bars + 8;
    const u32 k_empty = k_full + 8 * STAGES;
    const u32 v_full = k_empty + 8 * STAGES;
    const u32 v_empty = v_full + 8 * STAGES;

    RAGGED_FMHA_BLOCK_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    if (tid == 0) {
        mbar_init(q_full, FILL_ARRIVALS);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(k_full + 8 * s, FILL_ARRIVALS);
            mbar_init(v_full + 8 * s, FILL_ARRIVALS);
            mbar_init(k_empty + 8 * s, 4 * NC);  // one arrive per consumer warp
            mbar_init(v_empty + 8 * s, 4 * NC);
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer ----------------
        setmaxnreg_dec<PREG>();
        const int t = tid;
        if (TMA && t < 32 && nb_first < nb_last) {
            ws_fill<D, BM>(q_full, s_q, tm_q, h, (int)(bt.q_tok + i0), rows, qp, q_seq, q, t);
#pragma unroll 1
            for (int nb = nb_first; nb < nb_last; ++nb) {
                const int it = nb - nb_first;
                const int st = it % STAGES;
                const u32 ph = (u32)((it / STAGES) & 1);
                const int j0 = nb * BN;
                const int row = (int)(bt.kv_tok + j0);
                mbar_wait(k_empty + 8 * st, ph ^ 1u);
                ws_fill<D, BN>(k_full + 8 * st, s_k + st * KV_BYTES, tm_k, g, row, bt.lkv - j0, kp + (i64)j0 * k_seq,
                               k_seq, k, t);
                mbar_wait(v_empty + 8 * st, ph ^ 1u);
                ws_fill<D, BN>(v_full + 8 * st, s_v + st * KV_BYTES, tm_v, g, row, bt.lkv - j0, vp + (i64)j0 * v_seq,
                               v_seq, v, t);
            }
        }
        if (!TMA && nb_first < nb_last) {
            ws_load_tile<D, BM>(s_q, qp, q_seq, rows, q, t);
            cp_async_mbar_arrive(q_full);
#pragma unroll 1
            for (int nb = nb_first; nb < nb_last; ++nb) {
                const int it = nb - nb_first;
                const int st = it % STAGES;
                const u32 ph = (u32)((it / STAGES) & 1);
                const int j0 = nb * BN;
                mbar_wait(k_empty + 8 * st, ph ^ 1u);
                ws_load_tile<D, BN>(s_k + st * KV_BYTES, kp + (i64)j0 * k_seq, k_seq, bt.lkv - j0, k, t);
                cp_async_mbar_arrive(k_full + 8 * st);
                mbar_wait(v_empty + 8 * st, ph ^ 1u);
                ws_load_tile<D, BN>(s_v + st * KV_BYTES, vp + (i64)j0 * v_seq, v_seq, bt.lkv - j0, v, t);
                cp_async_mbar_arrive(v_full + 8 * st);
            }
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        // Nothing after this point waits for the producer: the consumers store O straight from
        // their registers, so the block needs no epilogue barrier.
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<CREG>();
    const int c = wg - 1;  // consumer index: rows [64 c, 64 c + 64) of the tile
    const int lane = tid & 31;
    const int row_in_tile = c * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);  // and + 8
    const int lt = lane & 3;
    const float sl2 = scale * 1.4426950408889634f;

    float acc[DT * 4];
    float m_i[2] = {RAGGED_NEG_INF, RAGGED_NEG_INF};
    float l_i[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < DT * 4; ++i) acc[i] = 0.f;

    // The last consumer lets consumer 0 issue first; each turn is "wait for mine, issue, hand over".
    if (PINGPONG && c == NC - 1) named_bar_arrive(RAGGED_WS_BAR_TURN + 0, 256);

    if (nb_first < nb_last) {
        const int i_last = i0 + rows - 1;
        float s[NS * 4];
        u32 pa[BN / 16][4];
        float corr[2];

        mbar_wait(q_full, 0);
        u32 qa[QREG ? KS : 1][4];
        if constexpr (QREG) {
            static_assert(BN == 64 || BN == 128, "Q in registers: S widths");
            // ldmatrix x4: lanes 0-7 / 8-15 address rows 0-7 / 8-15 of the warp's 16 at chunk 2 ks,
            // lanes 16-31 the same rows at chunk 2 ks + 1: registers a0..a3 of the k16 fragment.
            const int qr = c * 64 + ((tid >> 5) & 3) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks)
                ldsm_x4(s_q + sw128<BM>(qr, 2 * ks + (lane >> 4)), qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
        }
        mbar_wait(k_full, 0);
        fence_proxy_async();
        ws_turn_wait<PINGPONG, NC>(c);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            if constexpr (QREG) {
                u64 db = sw128_desc(s_k + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                wgmma_rs_k<BF16, (QREG ? BN : 64)>(s, qa[ks], db, ks > 0);
            }
            else {
                u64 da = sw128_desc(s_q + (ks >> 2) * (BM * 128) + c * (64 * 128) + (ks & 3) * 32, 16, 1024);
                u64 db = sw128_desc(s_k + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                wgmma_ss_any<BF16, BN>(s, da, db, ks > 0);
            }
        }
        wgmma_commit();
        ws_turn_pass<PINGPONG, NC>(c);
        wgmma_wait<0>();
        fence_regs<NS * 4>(s);
        if (lane == 0) mbar_arrive(k_empty);
        wgmma_softmax_step<NS, POLY>(s, m_i, l_i, corr, band, nb_first * BN, BN, i0, i_last, row_in_tile, lt, sl2);
        wgmma_pack_p<BF16, BN>(s, pa);

#pragma unroll 1
        for (int nb = nb_first + 1; nb < nb_last; ++nb) {
            const int it = nb - nb_first;
            const int st = it % STAGES;
            const int sp = (it - 1) % STAGES;
            mbar_wait(k_full + 8 * st, (u32)((it / STAGES) & 1));
            mbar_wait(v_full + 8 * sp, (u32)(((it - 1) / STAGES) & 1));
            // Only cp.async (generic proxy) fills need the fence before wgmma reads them: with TMA
            // that is the last K block alone (every earlier one is whole), the V of the loop never.
            if (!TMA || nb + 1 == nb_last) fence_proxy_async();
            const u32 kb = s_k + st * KV_BYTES;
            const u32 vb_prev = s_v + sp * KV_BYTES;

            ws_turn_wait<PINGPONG, NC>(c);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                if constexpr (QREG) {
                    u64 db = sw128_desc(kb + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                    wgmma_rs_k<BF16, (QREG ? BN : 64)>(s, qa[ks], db, ks > 0);
                }
                else {
                    u64 da = sw128_desc(s_q + (ks >> 2) * (BM * 128) + c * (64 * 128) + (ks & 3) * 32, 16, 1024);
                    u64 db = sw128_desc(kb + (ks >> 2) * (BN * 128) + (ks & 3) * 32, 16, 1024);
                    wgmma_ss_any<BF16, BN>(s, da, db, ks > 0);
                }
            }
            wgmma_commit();
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) wgmma_pv<BF16, D, BN>(acc, pa[kc], vb_prev, kc);
            wgmma_commit();
            ws_turn_pass<PINGPONG, NC>(c);
            wgmma_wait<1>();
            fence_regs<NS * 4>(s);
            if (lane == 0) mbar_arrive(k_empty + 8 * st);
            wgmma_softmax_step<NS, POLY>(s, m_i, l_i, corr, band, nb * BN, BN, i0, i_last, row_in_tile, lt, sl2);
            wgmma_wait<0>();
            fence_regs<DT * 4>(acc);
            fence_regs_u32<BN / 4>(&pa[0][0]);
            if (lane == 0) mbar_arrive(v_empty + 8 * sp);
            if (!LAZY || __any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
                for (int dt = 0; dt < DT; ++dt) {
                    acc[dt * 4 + 0] *= corr[0];
                    acc[dt * 4 + 1] *= corr[0];
                    acc[dt * 4 + 2] *= corr[1];
                    acc[dt * 4 + 3] *= corr[1];
                }
            }
            wgmma_pack_p<BF16, BN>(s, pa);
        }

        // Last P V.
        {
            const int it = nb_last - 1 - nb_first;
            const int sp = it % STAGES;
            mbar_wait(v_full + 8 * sp, (u32)((it / STAGES) & 1));
            fence_proxy_async();
            ws_turn_wait<PINGPONG, NC>(c);
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) wgmma_pv<BF16, D, BN>(acc, pa[kc], s_v + sp * KV_BYTES, kc);
            wgmma_commit();
            ws_turn_pass<PINGPONG, NC>(c);
            wgmma_wait<0>();
            fence_regs<DT * 4>(acc);
            fence_regs_u32<BN / 4>(&pa[0][0]);
        }
    }
    // Consumer 0 takes the turn the last consumer handed over last, so no arrival is left pending.
    if (PINGPONG && c == 0) named_bar_sync(RAGGED_WS_BAR_TURN + 0, 256);

    // Epilogue: O goes from the accumulators straight to global memory, four bytes per store (a
    // quad of threads writes 16 contiguous bytes of a row). Staging it through Q's shared memory
    // would coalesce the stores but needs block-wide barriers that compute-sanitizer's racecheck
    // did not accept as ordering the staging; the direct form has no shared memory access left to
    // order (bench/gpu/NOTES.md has the racecheck report and the cost of the direct form).
    u16* op = o + (bt.q_tok + i0) * o_seq + (i64)h * o_head;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const float l = quad_row_sum(l_i[hr]);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int r = row_in_tile + hr * 8;
        if (lse != 0 && lt == 0 && r < rows) {
            const float f = sl2 > 0.f ? sl2 : 1.f;
            lse[bt.lse_elem + (i64)(i0 + r) * lse_seq + (i64)h * lse_head] = row_lse(m_i[hr], f, l);
        }
        if (r < rows) {
            u16* dst = op + (i64)r * o_seq + lt * 2;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                u32 packed = pack2<BF16>(acc[dt * 4 + 2 * hr] * inv, acc[dt * 4 + 2 * hr + 1] * inv);
                asm volatile("st.global.b32 [%0], %1;\n" ::"l"(dst + dt * 8), "r"(packed) : "memory");
            }
        }
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
