// Part of kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (the Hopper wgmma dK/dV kernel); included in that file's order, not on its own.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One block = BN = 128 keys of one batch and one KV head, two warpgroups of 64 key rows each (the M
// of every product is keys). Per (query head, query block of BM rows: 64, or 128 below) the band admits:
//   S^T  = K Q^T   and dP^T = V dO^T   (SS: both operands D-contiguous = K-major in shared memory),
//   P^T  = exp2(S^T scale log2e - LSE log2e), masked;  dV += P^T dO   (RS: P^T packed in registers,
//   dO [BM][D] read as an MN-major B, like the forward's P V),
//   dS^T = P^T (dP^T - Di);                            dK += dS^T Q   (RS, Q as MN-major B).
// Q and dO tiles live in the forward's 128-byte-swizzled layout, which serves both as the K-major
// B of the first two products and as the MN-major B of the last two. The next pair's cp.async runs
// under this pair's products. dS^T reads P^T back from its packed 16-bit operand (as the mma.sync
// body's PACK_P does), so the live registers per thread at D 128 are dK, dV (64 + 64 f32), dP^T
// (32) and the packed P^T (16).
// Three buffers, and dK += dS^T Q of step n is left running on the tensor cores while step n + 1
// issues S^T and dP^T (its wait for S^T also retires that dK product): the buffers step n read are
// refilled only at step n + 3. (BM 128: step n + 1 issues dP^T only after that wait, under P^T.)
// TMA: the buffers are filled by warp 0 alone, one step ahead: Q and dO by TMA through the maps
// tm_q, tm_do (box rows BM; a tail tile by zero-filling cp.async, bwd_fill_pair), the LSE (already
// times log2e) and Di rows by TMA from the Di pass's arrays through tm_stats (a box per 64-row
// block), all completing on the buffer's full mbarrier; each warp releases a buffer on its empty
// mbarrier once the dK product of its step has retired. No block-wide barrier inside the loop: the
// warpgroups drift apart by up to a step.
// BM 128 (TMA at D 64 only): the same steps over 128 query rows, so the fixed costs of a step (the
// barrier waits, the LSE / Di copies, the wgmma issue and wait latency of the short K = 64
// contractions) are paid once per 128 rows. S^T and dP^T are then 64 f32 registers each, the packed
// P^T / dS^T 32, dK and dV 32 each at D 64; Q and dO take 96 KiB of shared memory in three
// buffers. The Di pass writes the LSE / Di rows of a (batch, head) up to Lq rounded up to 64 only,
// so a tile copies min(BM, that rounded count - i0) rows; the rows of a buffer past them, all
// >= Lq, keep what an earlier tile copied there or the zeros written at the start. Their LSE only
// feeds P^T, which the mask sets to 0 there, and their Di, a finite value of the Di pass, gives
// dS^T = 0 · (0 - Di) = 0 (dO's rows past Lq are zero-filled).
// FUSE_DQ: dQ as well, in the same loop (no second pass over the scores): each step's dS^T, already
// packed in registers for dK, also gives dQ(step) = dS K, added into the f32 accumulator dq_acc
// (bwd_fused_dq_step, fmha_bwd/fused_dq.cuh) in no fixed order: not bitwise reproducible. Two
// more tiles after the mbarriers: dS^T (BN x BM 16-bit, 1024-byte aligned) and the step's dQ (8192
// f32). The step adds two block barriers and retires the dK product before the next step (the
// warpgroups then stay in step). The kernel's `dq` is unused; the convert pass writes dQ.
template <bool BF16, int D, bool TMA, bool FUSE_DQ = false, int BM = 64>
__device__ __forceinline__ void bwd_dkdv_wg_body(RAGGED_BWD_PARAMS, const RaggedTmaMap* tm_q = nullptr,
                                                 const RaggedTmaMap* tm_do = nullptr,
                                                 const RaggedTmaMap* tm_stats = nullptr, float* dq_acc = nullptr) {
    constexpr int BN = 128;
    constexpr int NT = 256;
    constexpr int P = ragged_row_width(D);
    constexpr int NS = BM / 8;
    constexpr int DT = P / 8;
    constexpr int NBUF = 3;
    constexpr int LA = 1;  // steps filled ahead
    static_assert(D == P && (D == 64 || D == 128), "wgmma dK/dV head dims");
    // The fused dQ step and its accumulator blobs are 64 query rows; BM 128's registers fit at D 64.
    static_assert(BM == 64 || (BM == 128 && D == 64 && TMA && !FUSE_DQ), "wgmma dK/dV query tiles");
    static_assert(BM % RAGGED_BWD_DI_ROWS == 0, "a tile's LSE / Di rows start a padded row block");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 base = smem_addr(smem_raw);
    const u32 s_k = (base + 1023u) & ~1023u;  // the swizzle pattern repeats every 1024 bytes
    const u32 s_v = s_k + BN * P * 2;
    const u32 s_q = s_v + BN * P * 2;          // NBUF buffers of BM rows
    const u32 s_do = s_q + NBUF * BM * P * 2;  // NBUF buffers of BM rows
    float* s_lse = (float*)(smem_raw + (s_do + NBUF * BM * P * 2 - base));  // NBUF buffers of BM
    float* s_di = s_lse + NBUF * BM;
    const u32 bar_full = smem_addr(s_di + NBUF * BM);  // NBUF full, then NBUF empty mbarriers
    const u32 bar_empty = bar_full + 8 * NBUF;
    const u32 s_ds = (bar_empty + 8 * NBUF + 1023u) & ~1023u;  // FUSE_DQ: dS^T, [BN keys][BM queries]
    const u32 s_dq = s_ds + BN * BM * 2;                        // FUSE_DQ: the step's dQ

    RAGGED_BWD_KEY_TILE_PROLOGUE(BM, BN);

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int lg = lane >> 2;
    const int lt = lane & 3;
    const int key_row = warp * 16 + lg;  // and + 8: this thread's accumulator rows in the key tile
    const float sl2 = scale * RAGGED_LOG2E;

    float acc_dk[DT * 4], acc_dv[DT * 4];
#pragma unroll
    for (int i = 0; i < DT * 4; ++i) acc_dk[i] = acc_dv[i] = 0.f;

    u32 pa[BM / 16][4];  // P^T, then dS^T, as the A operand (live into the next step)

    auto issue = [&](int it, int buf) {
        const int h = g * rep + it / nq;
        const int i0 = (qb_first + it % nq) * BM;
        const int rows = bt.lq - i0 < BM ? bt.lq - i0 : BM;
        const i64 tok = bt.q_tok + i0;
        load_tile_sw128<D, P, BM, NT>(s_q + buf * (BM * P * 2), q + tok * q_seq + (i64)h * q_head, q_seq, rows, q);
        load_tile_sw128<D, P, BM, NT>(s_do + buf * (BM * P * 2), d_o + tok * do_seq + (i64)h * do_head, do_seq, rows,
                                      d_o);
        for (int t = tid; t < BM; t += NT) {
            const bool live = t < rows;
            const i64 i = i0 + t;
            s_lse[buf * BM + t] = live ? lse[bt.lse_elem + i * lse_seq + (i64)h * lse_head] * RAGGED_LOG2E : 0.f;
            s_di[buf * BM + t] = live ? di[((i64)b * h_q + h) * di_rows + i] : 0.f;
        }
    };

    // TMA: warp 0 fills step f into buffer f % NBUF once every warp released that buffer's last use.
    // The LSE / Di rows of a tile come by TMA through tm_stats, the 2-D map (64-row blocks) over the
    // Di pass's two workspace arrays (Di, then the scaled LSE; rows past Lq up to the block's end
    // hold zeros there), counted in the buffer's expected bytes with the Q / dO tiles.
    auto fill = [&](int f) {
        const int fb = f % NBUF;
        const int h = g * rep + f / nq;
        const int i0 = (qb_first + f % nq) * BM;
        const int rows = bt.lq - i0 < BM ? bt.lq - i0 : BM;
        const i64 tok = bt.q_tok + i0;
        const u32 full = bar_full + 8 * fb;
        // The rows the Di pass wrote: up to Lq rounded up to its row block (all BM when BM is that block).
        const int stat_rows =
            BM == RAGGED_BWD_DI_ROWS ? BM : (rows + RAGGED_BWD_DI_ROWS - 1) / RAGGED_BWD_DI_ROWS * RAGGED_BWD_DI_ROWS;
        if (f >= NBUF) mbar_wait(bar_empty + 8 * fb, (u32)((f / NBUF) & 1) ^ 1u);
        bwd_fill_pair<D, BM>(full, s_q + fb * (BM * P * 2), s_do + fb * (BM * P * 2), tm_q, tm_do, h, (int)tok, rows,
                             q + tok * q_seq + (i64)h * q_head, q_seq, d_o + tok * do_seq + (i64)h * do_head, do_seq,
                             q, lane, 2 * stat_rows * 4);
        if (lane == 0) {
            // tm_stats: blocks of RAGGED_BWD_DI_ROWS f32 (i0 and di_rows are multiples of it), Di's
            // blocks then the scaled LSE's; one box per block the Di pass wrote. The host keeps the
            // block count an int.
            const int blk = ((b * h_q + h) * di_rows + i0) / RAGGED_BWD_DI_ROWS;
            const int lse_blk = batch * h_q * (di_rows / RAGGED_BWD_DI_ROWS) + blk;
            for (int k = 0; k < stat_rows / RAGGED_BWD_DI_ROWS; ++k) {
                tma_load_2d(smem_addr(s_lse + fb * BM + k * RAGGED_BWD_DI_ROWS), tm_stats, 0, lse_blk + k, full);
                tma_load_2d(smem_addr(s_di + fb * BM + k * RAGGED_BWD_DI_ROWS), tm_stats, 0, blk + k, full);
            }
        }
    };

    if constexpr (TMA && BM > RAGGED_BWD_DI_ROWS) {
        // Finite values in the LSE / Di rows a tile may not copy (see above); the async-proxy copies
        // into the same words are ordered after these writes by the fence and the ring's barrier.
        for (int t = tid; t < 2 * NBUF * BM; t += NT) s_lse[t] = 0.f;
        fence_proxy_async();
    }
    if constexpr (TMA) bwd_ring_init<NBUF, NT>(bar_full, bar_empty, tid);

    if (items > 0) {
        if constexpr (TMA) {
            if (warp == 0)
                for (int f = 0; f < LA && f < items; ++f) fill(f);
        }
        load_tile_sw128<D, P, BN, NT>(s_k, k + (bt.kv_tok + j0) * k_seq + (i64)g * k_head, k_seq, cols, k);
        load_tile_sw128<D, P, BN, NT>(s_v, v + (bt.kv_tok + j0) * v_seq + (i64)g * v_head, v_seq, cols, v);
        if constexpr (!TMA) issue(0, 0);
        cp_async_commit();
        if constexpr (TMA) {
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
        }
#pragma unroll 1
        for (int it = 0; it < items; ++it) {
            const int buf = it % NBUF;
            if constexpr (TMA) {
                if (warp == 0 && it + LA < items) fill(it + LA);
                mbar_wait(bar_full + 8 * buf, (u32)((it / NBUF) & 1));
                // cp.async (generic proxy) writes of a tail tile, read by wgmma (async proxy).
                if (bt.lq - (qb_first + it % nq) * BM < BM) fence_proxy_async();
            }
            else {
                // Pair `it` has landed, and both warpgroups are done with the buffers `it + 1` reuses.
                cp_async_wait<0>();
                fence_proxy_async();
                __syncthreads();
                if (it + 1 < items) issue(it + 1, buf + 1 == NBUF ? 0 : buf + 1);
                cp_async_commit();
            }
            const int i0 = (qb_first + it % nq) * BM;
            const u32 qb = s_q + buf * (BM * P * 2);
            const u32 dob = s_do + buf * (BM * P * 2);
            const float* lse_t = s_lse + buf * BM;
            const float* di_t = s_di + buf * BM;

            float st[NS * 4], dpt[NS * 4];
            auto issue_dpt = [&] {
                bwd_key_major_product<BF16, D, BM, BN>(dpt, s_v, dob, wg);
                wgmma_commit();
            };
            wgmma_fence();
            bwd_key_major_product<BF16, D, BM, BN>(st, s_k, qb, wg);
            wgmma_commit();
            // BM 128: dP^T is issued once S^T (and the previous step's dK product) retired, so the
            // packed dS^T operand of that product is never live beside both 64-register
            // accumulators (ptxas spilled with all three).
            if constexpr (BM == 64) issue_dpt();

            // P^T while dP^T is still on the tensor cores; 0 outside the band and past Lq / Lkv.
            // (The previous step's dK product is older than S^T and retires with it.)
            wgmma_wait<BM == 64 ? 1 : 0>();
            fence_regs<NS * 4>(st);
            fence_regs<DT * 4>(acc_dk);
            fence_regs_u32<BM / 4>(&pa[0][0]);
            if constexpr (BM > 64) {
                wgmma_fence();
                issue_dpt();
            }
            // The previous step's buffers are free: its dK product retired with S^T just now.
            if constexpr (TMA) {
                if (it > 0 && lane == 0) mbar_arrive(bar_empty + 8 * ((it + NBUF - 1) % NBUF));
            }
            const bool full = ragged_tile_full(band, bt.lq, i0, BM, j0, BN);
            bwd_pt_tile<NS>(st, sl2, lse_t, full, band, bt.lq, i0, j0, key_row, lt);
            pack_a<BF16, BM / 16>(pa, (const float(*)[4])st);
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < BM / 16; ++kc) wgmma_pv<BF16, P, BM>(acc_dv, pa[kc], dob, kc);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs<NS * 4>(dpt);
            fence_regs<DT * 4>(acc_dv);
            fence_regs_u32<BM / 4>(&pa[0][0]);

            // dS^T = P^T (dP^T - Di), P^T read back from its packed operand; then dK += dS^T Q.
#pragma unroll
            for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    dpt[nt * 4 + e] = unpack_a<BF16>(pa, nt, e) * (dpt[nt * 4 + e] - di_t[nt * 8 + 2 * lt + (e & 1)]);
            pack_a<BF16, BM / 16>(pa, (const float(*)[4])dpt);
            wgmma_fence();
#pragma unroll
            for (int kc = 0; kc < BM / 16; ++kc) wgmma_pv<BF16, P, BM>(acc_dk, pa[kc], qb, kc);
            wgmma_commit();
            if constexpr (FUSE_DQ) {
                const int h = g * rep + it / nq;
                const i64 blob = ((i64)h * batch + b) * ((di_rows + RAGGED_BWD_FUSED_ROWS - 1) / RAGGED_BWD_FUSED_ROWS) +
                                 qb_first + it % nq;
                bwd_fused_dq_step<BF16, D, BM, BN>(pa, s_ds, s_k, s_dq, dq_acc + blob * RAGGED_BWD_FUSED_BLOB, tid, wg,
                                                   key_row, lt);
            }
        }
        wgmma_wait<0>();
        fence_regs<DT * 4>(acc_dk);
        fence_regs_u32<BM / 4>(&pa[0][0]);
        if constexpr (!TMA) cp_async_wait<0>();
        // The last reduction completes before the block ends (its shared source stays valid).
        if constexpr (FUSE_DQ) {
            if (tid == 0) bulk_wait<0>();
        }
    }

    // dK (times scale) and dV staged through the K and V tiles' space (the mma.sync layout of
    // store_o_tile: a wgmma accumulator's per-warp layout is that of 16 x 8 mma.sync tiles).
    __syncthreads();
    stage_acc<BF16, D, P>(s_k, (const float(*)[4])acc_dk, warp * 16, scale);
    stage_acc<BF16, D, P>(s_v, (const float(*)[4])acc_dv, warp * 16, 1.f);
    __syncthreads();
    store_o_tile<D, P, BN, NT>(s_k, dk + (bt.kv_tok + j0) * dk_seq + (i64)g * dk_head, dk_seq, cols);
    store_o_tile<D, P, BN, NT>(s_v, dv + (bt.kv_tok + j0) * dv_seq + (i64)g * dv_head, dv_seq, cols);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
