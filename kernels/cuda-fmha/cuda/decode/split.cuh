// Part of kernels/cuda-fmha/cuda/ragged_paged_decode.cu (the split kernel: one block per KV split,
// KV head and sequence); included in that file's order, not on its own.
//
// Block (s, g, b) of row group y (blockIdx.y), 4 warps. Its rows are the G query heads of GQA group
// g times the Lq(b) query tokens of sequence b, row r = token (r / G), head g G + r % G, taken 16 at
// a time (one mma.sync m16n8k16 row tile): tiles y, y + Y, ... of Y = gridDim.y row groups (decode
// with G <= 16 is one tile and Y = 1; a prefill's tiles spread over Y blocks, each walking the keys
// its tile admits). Its keys are [s chunk, min((s + 1) chunk, Lkv)) cut to what the tile's rows
// admit, in tiles of 16 keys: warp w takes tiles w, w + 4, ... and runs its own STAGES-deep
// cp.async ring of K and V tiles (16-byte copies of whole rows, page ids from shared memory, no
// block barrier inside the key loop), S = Q K^T and O += P V on tensor cores, online softmax in f32
// (base 2, scale folded in). The four warps' states are merged through shared memory at the end of a
// row tile, then written as the split's partial (normalised O in f32, base-2 LSE) or, with one
// split, finished with the sink and written as O and LSE.
//
// Before reading any pool element the block checks every page-table entry the sequence reads
// (both tables): one outside the pool makes the whole sequence invalid (§5.3), nothing of the pool
// is read for it, and its rows become NaN (here with one split, else in the combine kernel).

#define RAGGED_PAGED_SPLIT_PARAMS                                                                                    \
    const u16 *__restrict__ q, const u16 *__restrict__ kpool, const u16 *__restrict__ vpool,                         \
        const int *__restrict__ table_k, const int *__restrict__ table_v, const void *__restrict__ seq_len_q,      \
        int seq_len_q_bytes, const void *__restrict__ seq_len_kv, int seq_len_kv_bytes, u16 *__restrict__ o,        \
        float *__restrict__ lse, const float *__restrict__ sinks, float *__restrict__ ws_o,                         \
        float *__restrict__ ws_lse, PagedSeq *__restrict__ records, i64 q_batch, i64 q_seq, i64 q_head,              \
        i64 o_batch, i64 o_seq, i64 o_head, i64 lse_batch, i64 lse_seq, i64 lse_head, i64 sink_stride, i64 k_page,  \
        i64 k_head, i64 k_slot, i64 v_page, i64 v_head, i64 v_slot, i64 tk_row, i64 tk_col, i64 tv_row, i64 tv_col, \
        int pages_k, int pages_v, int ps_k, int ps_v, int batch, int h_q, int h_kv, int q_rows, int packed,         \
        int max_kv, int chunk, int splits, int ws_rows, int ws_batch, float scale, int mask_left, int mask_right,   \
        int bottom_right
#define RAGGED_PAGED_SPLIT_ARGS                                                                                      \
    q, kpool, vpool, table_k, table_v, seq_len_q, seq_len_q_bytes, seq_len_kv, seq_len_kv_bytes, o, lse, sinks, ws_o, \
        ws_lse, records, q_batch, q_seq, q_head, o_batch, o_seq, o_head, lse_batch, lse_seq, lse_head, sink_stride,   \
        k_page, k_head, k_slot, v_page, v_head, v_slot, tk_row, tk_col, tv_row, tv_col, pages_k, pages_v, ps_k, ps_v, \
        batch, h_q, h_kv, q_rows, packed, max_kv, chunk, splits, ws_rows, ws_batch, scale, mask_left, mask_right,     \
        bottom_right

// Dynamic shared memory before the page-id windows: the Q tile, the warps' K/V rings, each warp's
// 32 row offsets and the block's reduction words. The host adds (paged_ids_cap(ps_k) +
// paged_ids_cap(ps_v)) * 4 bytes for the ids.
#define RAGGED_PAGED_SMEM(DQK, DV, STAGES)                                                                    \
    (16 * ragged_row_width(DQK) * 2 +                                                                         \
     RAGGED_PAGED_NW * (STAGES) * 16 * (ragged_row_width(DQK) + ragged_row_width(DV)) * 2 +                  \
     RAGGED_PAGED_NW * 32 * 8 + RAGGED_PAGED_NW * 8)

template <bool BF16, int DQK, int DV, int STAGES>
__device__ __forceinline__ void paged_split_body(RAGGED_PAGED_SPLIT_PARAMS) {
    constexpr int NW = RAGGED_PAGED_NW;
    constexpr int NT = NW * 32;
    constexpr int PQ = ragged_row_width(DQK);
    constexpr int PV = ragged_row_width(DV);
    constexpr int KS = DQK / 16;  // k-steps of Q K^T
    constexpr int DT = DV / 8;    // head-dim n-tiles of O
    constexpr int CHK = PQ / 8;   // 16-byte chunks of a shared-memory row
    constexpr int CHV = PV / 8;
    constexpr u32 K_TILE = 16 * PQ * 2;
    constexpr u32 SLOT = K_TILE + 16 * PV * 2;
    constexpr u32 RING = NW * STAGES * SLOT;
    static_assert(DQK % 16 == 0 && DV % 32 == 0 && STAGES >= 2, "tile shapes");
    static_assert(NW * 16 * (DV + 2) * 4 <= RING, "the warps' merge area fits in the ring");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 s_q = smem_addr(smem_raw);
    const u32 s_ring = s_q + 16 * PQ * 2;
    unsigned char* const p_ring = smem_raw + 16 * PQ * 2;
    i64* const row_off = (i64*)(p_ring + RING);  // [NW][32]: K rows in 0..15, V rows in 16..31
    i64* const red = row_off + NW * 32;          // [NW]
    int* const ids_k = (int*)(red + NW);
    int* const ids_v = ids_k + paged_ids_cap(ps_k);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int lg = lane >> 2;
    const int lt = lane & 3;

    const int split = (int)(blockIdx.x % (u32)splits);
    const int rest = (int)(blockIdx.x / (u32)splits);
    const int g = rest % h_kv;
    const int b = rest / h_kv;
    const int group = h_q / h_kv;
    const bool direct = splits == 1;

    const int lkv = (int)paged_clamp(paged_length(seq_len_kv, seq_len_kv_bytes, b), max_kv);
    const int n_used = (int)(((i64)lkv + chunk - 1) / chunk);
    const bool computes = direct || split < n_used;
    const bool writes_record = !direct && split == 0 && g == 0 && blockIdx.y == 0;
    if (!computes && !writes_record) return;

    // Lq(b) and, for packed Q, the sequence's first row: lengths clamped as a sequential walk
    // would clamp them (every row range inside Q's q_rows rows).
    i64 part = 0;
    if (packed) {
        for (int c = tid; c < b; c += NT) part += paged_clamp(paged_length(seq_len_q, seq_len_q_bytes, c), q_rows);
    }
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) part += __shfl_xor_sync(0xffffffffu, part, d);
    if (lane == 0) red[warp] = part;
    __syncthreads();
    i64 row0 = 0;
#pragma unroll
    for (int w = 0; w < NW; ++w) row0 += red[w];
    row0 = packed ? (row0 < q_rows ? row0 : q_rows) : 0;
    const int lq = (int)paged_clamp(paged_length(seq_len_q, seq_len_q_bytes, b), q_rows - row0);

    // Every entry the sequence reads, both tables, before any pool element is read.
    const int nk = (int)(((i64)lkv + ps_k - 1) / ps_k);
    const int nv = (int)(((i64)lkv + ps_v - 1) / ps_v);
    int bad = 0;
    if (lq > 0) {
        const int* tk = table_k + (i64)b * tk_row;
        const int* tv = table_v + (i64)b * tv_row;
        for (int e = tid; e < nk; e += NT) {
            const int p = tk[(i64)e * tk_col];
            bad |= p < 0 || p >= pages_k;
        }
        for (int e = tid; e < nv; e += NT) {
            const int p = tv[(i64)e * tv_col];
            bad |= p < 0 || p >= pages_v;
        }
    }
    const bool valid = __syncthreads_or(bad) == 0;
    if (writes_record && tid == 0) {
        PagedSeq rec;
        rec.row0 = row0;
        rec.lq = lq;
        rec.lkv = lkv;
        rec.valid = valid ? 1 : 0;
        rec.unused = 0;
        records[b] = rec;
    }
    if (!computes || lq == 0) return;
    const int rows = group * lq;
    if (!valid) {
        if (direct && blockIdx.y == 0) {
            for (int idx = tid; idx < rows * DV; idx += NT) {
                const int r = idx / DV, c = idx - r * DV;
                const int i = r / group, h = g * group + r % group;
                o[(i64)b * o_batch + (row0 + i) * o_seq + (i64)h * o_head + c] = paged_nan<BF16>();
                if (lse != 0 && c == 0)
                    lse[(i64)b * lse_batch + (row0 + i) * lse_seq + (i64)h * lse_head] = __int_as_float(0x7fc00000);
            }
        }
        return;
    }

    const RaggedBand band = make_band(lq, lkv, mask_left, mask_right, bottom_right);
    const int c0 = direct ? 0 : split * chunk;
    const int c1 = direct ? lkv : (int)((i64)c0 + chunk < lkv ? c0 + chunk : lkv);
    const float sl2 = scale * RAGGED_LOG2E;
    const u16* const kbase = kpool + (i64)g * k_head;
    const u16* const vbase = vpool + (i64)g * v_head;
    const int* const tk = table_k + (i64)b * tk_row;
    const int* const tv = table_v + (i64)b * tv_row;
    const u32 my_ring = s_ring + (u32)warp * STAGES * SLOT;
    i64* const my_off = row_off + warp * 32;

#pragma unroll 1
    for (int r_base = (int)blockIdx.y * 16; r_base < rows; r_base += (int)gridDim.y * 16) {
        const int rows_here = rows - r_base < 16 ? rows - r_base : 16;
        // Q rows of this tile (zero past the last row).
#pragma unroll
        for (int it = 0; it < (16 * CHK + NT - 1) / NT; ++it) {
            const int idx = it * NT + tid;
            if (idx < 16 * CHK) {
                const int r = idx / CHK, c = idx - (idx / CHK) * CHK;
                const int rr = r_base + r;
                const bool p = r < rows_here && c < DQK / 8;
                const int i = rr / group, h = g * group + rr % group;
                const u16* src = p ? q + (i64)b * q_batch + (row0 + i) * q_seq + (i64)h * q_head + c * 8 : q;
                cp_async16(s_q + swz<PQ>(r, c), src, p);
            }
        }
        cp_async_commit();

        // The key tiles any row of this tile admits, inside this split's keys.
        const int i_first = r_base / group;
        const int i_last = (r_base + rows_here - 1) / group;
        int t_first, t_last;
        key_block_range(band, i_first, i_last - i_first + 1, 16, &t_first, &t_last);
        t_first = t_first > c0 / 16 ? t_first : c0 / 16;
        t_last = t_last < (c1 + 15) / 16 ? t_last : (c1 + 15) / 16;
        // This thread's two rows' admitted keys (none for rows past the tile's end).
        int lo[2], hi[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int rr = r_base + lg + 8 * hr;
            if (rr < rows) {
                band.key_range(rr / group, &lo[hr], &hi[hr]);
            } else {
                lo[hr] = 0;
                hi[hr] = 0;
            }
        }

        float acc[DT][4];
        float m_i[2] = {RAGGED_NEG_INF, RAGGED_NEG_INF};
        float l_i[2] = {0.f, 0.f};
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[dt][e] = 0.f;

        cp_async_wait<0>();
        __syncthreads();

#pragma unroll 1
        for (int w_first = t_first; w_first < t_last; w_first += RAGGED_PAGED_WINDOW / 16) {
            const int w_last = t_last - w_first < RAGGED_PAGED_WINDOW / 16 ? t_last : w_first + RAGGED_PAGED_WINDOW / 16;
            const int j_end = w_last * 16 < lkv ? w_last * 16 : lkv;
            // The window's page ids (both tables) into shared memory.
            const int ek0 = w_first * 16 / ps_k, ek1 = (j_end - 1) / ps_k + 1;
            const int ev0 = w_first * 16 / ps_v, ev1 = (j_end - 1) / ps_v + 1;
            __syncthreads();  // the previous window's ids are no longer read
            for (int e = ek0 + tid; e < ek1; e += NT) ids_k[e - ek0] = tk[(i64)e * tk_col];
            for (int e = ev0 + tid; e < ev1; e += NT) ids_v[e - ev0] = tv[(i64)e * tv_col];
            __syncthreads();

            // This warp's tiles of the window: w_first + warp + NW n.
            const int mine = w_first + warp < w_last ? (w_last - w_first - warp + NW - 1) / NW : 0;

            // Issues tile n of this warp into ring slot n % STAGES: lane r < 16 resolves K row r of
            // the tile, lane 16 + r V row r, through the page ids (-1: past Lkv, zero-filled).
            auto issue = [&](int n) {
                const int j0 = (w_first + warp + n * NW) * 16;
                const int j = j0 + (lane & 15);
                i64 off = -1;
                if (j < lkv) {
                    if (lane < 16) {
                        const int e = j / ps_k;
                        off = (i64)ids_k[e - ek0] * k_page + (i64)(j - e * ps_k) * k_slot;
                    } else {
                        const int e = j / ps_v;
                        off = (i64)ids_v[e - ev0] * v_page + (i64)(j - e * ps_v) * v_slot;
                    }
                }
                my_off[lane] = off;
                __syncwarp();
                const u32 kd = my_ring + (u32)(n % STAGES) * SLOT;
                const u32 vd = kd + K_TILE;
#pragma unroll
                for (int it = 0; it < CHK / 2; ++it) {
                    const int idx = it * 32 + lane;
                    const int r = idx / CHK, c = idx % CHK;
                    const i64 ro = my_off[r];
                    const bool p = ro >= 0 && c < DQK / 8;
                    cp_async16(kd + swz<PQ>(r, c), p ? kbase + ro + c * 8 : kbase, p);
                }
#pragma unroll
                for (int it = 0; it < CHV / 2; ++it) {
                    const int idx = it * 32 + lane;
                    const int r = idx / CHV, c = idx % CHV;
                    const i64 ro = my_off[16 + r];
                    const bool p = ro >= 0 && c < DV / 8;
                    cp_async16(vd + swz<PV>(r, c), p ? vbase + ro + c * 8 : vbase, p);
                }
                __syncwarp();
            };

#pragma unroll
            for (int n = 0; n < STAGES - 1; ++n) {
                if (n < mine) issue(n);
                cp_async_commit();
            }
#pragma unroll 1
            for (int n = 0; n < mine; ++n) {
                if (n + STAGES - 1 < mine) issue(n + STAGES - 1);
                cp_async_commit();
                cp_async_wait<STAGES - 1>();
                __syncwarp();
                const u32 kb = my_ring + (u32)(n % STAGES) * SLOT;
                const u32 vb = kb + K_TILE;
                const int j0 = (w_first + warp + n * NW) * 16;

                // S = Q K^T: 16 rows x 16 keys.
                float s[2][4];
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
                for (int ks = 0; ks < KS; ++ks) {
                    u32 a[4];
                    ldsm_x4(s_q + swz<PQ>(lane & 15, ks * 2 + (lane >> 4)), a[0], a[1], a[2], a[3]);
                    u32 b0, b1, b2, b3;
                    const int r = (lane & 7) + ((lane >> 4) << 3);
                    ldsm_x4(kb + swz<PQ>(r, ks * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
                    mma16816<BF16>(s[0], a, b0, b1);
                    mma16816<BF16>(s[1], a, b2, b3);
                }

                // Scale into base 2, mask per row, online softmax (a quad of lanes shares a row).
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int a_lo = lo[hr] - j0 - 2 * lt, a_hi = hi[hr] - j0 - 2 * lt;
                    float mx = m_i[hr];
#pragma unroll
                    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int c = nt * 8 + e;
                            float x = s[nt][2 * hr + e] * sl2;
                            if (c < a_lo || c >= a_hi) x = RAGGED_NEG_INF;
                            s[nt][2 * hr + e] = x;
                            mx = fmaxf(mx, x);
                        }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mu = mx == RAGGED_NEG_INF ? 0.f : mx;
                    const float corr = fast_exp2(m_i[hr] - mu);
                    m_i[hr] = mx;
                    float sum = 0.f;
#pragma unroll
                    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float p = fast_exp2(s[nt][2 * hr + e] - mu);
                            s[nt][2 * hr + e] = p;
                            sum += p;
                        }
                    l_i[hr] = l_i[hr] * corr + sum;
#pragma unroll
                    for (int dt = 0; dt < DT; ++dt) {
                        acc[dt][2 * hr] *= corr;
                        acc[dt][2 * hr + 1] *= corr;
                    }
                }

                // O += P V, P re-packed from the S accumulators as the A operand.
                u32 a[4];
                a[0] = pack2<BF16>(s[0][0], s[0][1]);
                a[1] = pack2<BF16>(s[0][2], s[0][3]);
                a[2] = pack2<BF16>(s[1][0], s[1][1]);
                a[3] = pack2<BF16>(s[1][2], s[1][3]);
#pragma unroll
                for (int dp = 0; dp < DV / 16; ++dp) {
                    u32 b0, b1, b2, b3;
                    const int r = (lane & 7) + (((lane >> 3) & 1) << 3);
                    ldsm_x4_t(vb + swz<PV>(r, dp * 2 + (lane >> 4)), b0, b1, b2, b3);
                    mma16816<BF16>(acc[2 * dp], a, b0, b1);
                    mma16816<BF16>(acc[2 * dp + 1], a, b2, b3);
                }
                __syncwarp();
            }
            cp_async_wait<0>();
        }

        // Merge the warps' states through shared memory (the ring is free now).
        __syncthreads();
        float* const mw = (float*)p_ring;  // [NW][16]
        float* const lw = mw + NW * 16;     // [NW][16]
        float* const aw = lw + NW * 16;     // [NW][16][DV]
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const float l = quad_row_sum(l_i[hr]);
            const int r = lg + 8 * hr;
            if (lt == 0) {
                mw[warp * 16 + r] = m_i[hr];
                lw[warp * 16 + r] = l;
            }
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                float2 v2 = make_float2(acc[dt][2 * hr], acc[dt][2 * hr + 1]);
                *(float2*)&aw[(warp * 16 + r) * DV + dt * 8 + 2 * lt] = v2;
            }
        }
        __syncthreads();
        for (int idx = tid; idx < 16 * (DV / 4); idx += NT) {
            const int r = idx / (DV / 4), c4 = idx - r * (DV / 4);
            const int rr = r_base + r;
            if (rr >= rows) continue;
            float mk = RAGGED_NEG_INF;
#pragma unroll
            for (int w = 0; w < NW; ++w) mk = fmaxf(mk, mw[w * 16 + r]);
            float lk = 0.f;
            float4 o4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int w = 0; w < NW; ++w) {
                const float mw_ = mw[w * 16 + r];
                const float wt = mw_ == RAGGED_NEG_INF ? 0.f : fast_exp2(mw_ - mk);
                lk += lw[w * 16 + r] * wt;
                const float4 x = *(const float4*)&aw[(w * 16 + r) * DV + c4 * 4];
                o4.x += x.x * wt;
                o4.y += x.y * wt;
                o4.z += x.z * wt;
                o4.w += x.w * wt;
            }
            const int i = rr / group, h = g * group + rr % group;
            if (!direct) {
                const i64 wr = ((i64)split * ws_rows + (i64)b * ws_batch + row0 + i) * h_q + h;
                const float inv = lk > 0.f ? 1.f / lk : 0.f;
                *(float4*)&ws_o[wr * DV + c4 * 4] = make_float4(o4.x * inv, o4.y * inv, o4.z * inv, o4.w * inv);
                if (c4 == 0) ws_lse[wr] = lk > 0.f ? mk + log2f(lk) : RAGGED_NEG_INF;
            } else {
                float f, row_lse;
                paged_finish(mk, lk, paged_sink2(sinks, sink_stride, h), &f, &row_lse);
                const u32 w0 = pack2<BF16>(o4.x * f, o4.y * f);
                const u32 w1 = pack2<BF16>(o4.z * f, o4.w * f);
                u16* dst = o + (i64)b * o_batch + (row0 + i) * o_seq + (i64)h * o_head + c4 * 4;
                asm volatile("st.global.v2.b32 [%0], {%1,%2};\n" ::"l"(dst), "r"(w0), "r"(w1) : "memory");
                if (lse != 0 && c4 == 0) lse[(i64)b * lse_batch + (row0 + i) * lse_seq + (i64)h * lse_head] = row_lse;
            }
        }
        __syncthreads();  // the merge area and the Q tile are reused by the next row tile
    }
}
