// Part of kernels/cuda-fmha/cuda/ragged_paged_decode.cu (the gathered prefill route: the kernels
// that copy a paged prefill's K and V into contiguous ragged buffers for the forward kernels, and
// the finish kernel: sinks folded into the forward's rows, NaN rows of sequences with an invalid page
// id); included in that file's order, not on its own.
//
// A prefill walks every key once per 128-row query tile, so the split kernel's 16-row mma.sync
// tiles, which suit decode, leave the tensor cores idle there. On this route the host copies the
// pages each sequence reads into the workspace once (one pass over K and V at memory speed) and runs
// the ragged forward (ragged_fmha_fwd.cu) over them, with these records as its offsets:
//
//   q_start[B + 1]  first Q / O row of each sequence as the split kernel places it (packed: the sum
//                   of the clamped Lq before it; padded, sequences back to back: b * S_q)
//   lq[B]           Lq(b) clamped as the split kernel clamps it (the forward's seq_len_q)
//   kv_start[B + 1] first row of each sequence in the gathered K and V: the sum of clamp(Lkv, 0,
//                   max_seq_len_kv) over the earlier sequences that have query rows
//   invalid[B]      1 when an entry of a table the sequence reads lies outside its pool (§5.3)
//
// The gathered K is [kv_start[B], H_kv, D_qk] and V [kv_start[B], H_kv, D_v], dense, so the
// forward's offsets are token counts with the row strides as multipliers.

// Keys one gather block copies.
#define RAGGED_GATHER_ROWS 64

// Inclusive sum of x over the block (RAGGED_PAGED_NW warps); `red` holds one value per warp.
__device__ __forceinline__ i64 paged_block_inclusive_sum(i64 x, i64* red) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const i64 y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) red[warp] = x;
    __syncthreads();
    i64 before = 0;
#pragma unroll
    for (int w = 0; w < RAGGED_PAGED_NW; ++w) before += w < warp ? red[w] : 0;
    __syncthreads();  // every warp has read red[] before the next call writes it
    return x + before;
}

// One block: the records above, over the batch in chunks of the block's threads (a running sum
// carries from chunk to chunk). Clears invalid[]; the gather kernel sets it.
#define RAGGED_PAGED_GATHER_STARTS_PARAMS                                                                         \
    const void *__restrict__ seq_len_q, int seq_len_q_bytes, const void *__restrict__ seq_len_kv,                  \
        int seq_len_kv_bytes, int *__restrict__ q_start, int *__restrict__ lq, int *__restrict__ kv_start,         \
        int *__restrict__ invalid, int batch, int q_rows, int packed, int max_kv

__device__ __forceinline__ void paged_gather_starts_body(RAGGED_PAGED_GATHER_STARTS_PARAMS) {
    __shared__ i64 red[RAGGED_PAGED_NW];
    __shared__ i64 chunk_total[2];
    const int nt = RAGGED_PAGED_NW * 32;
    i64 base_q = 0;
    i64 base_kv = 0;
    for (int c0 = 0; c0 <= batch; c0 += nt) {
        const int b = c0 + (int)threadIdx.x;
        const bool seq = b < batch;
        const i64 a = seq ? paged_clamp(paged_length(seq_len_q, seq_len_q_bytes, b), q_rows) : 0;
        const i64 lkv = seq ? paged_clamp(paged_length(seq_len_kv, seq_len_kv_bytes, b), max_kv) : 0;
        const i64 a_inc = paged_block_inclusive_sum(a, red);
        const i64 before = base_q + a_inc - a;
        const i64 row0 = packed ? (before < q_rows ? before : q_rows) : (i64)b * q_rows;
        const i64 len = packed ? (a < q_rows - row0 ? a : q_rows - row0) : a;
        const i64 g = len > 0 ? lkv : 0;
        const i64 g_inc = paged_block_inclusive_sum(g, red);
        if (b <= batch) {
            q_start[b] = (int)row0;
            kv_start[b] = (int)(base_kv + g_inc - g);
        }
        if (seq) {
            lq[b] = (int)len;
            invalid[b] = 0;
        }
        if (threadIdx.x == nt - 1) {
            chunk_total[0] = a_inc;
            chunk_total[1] = g_inc;
        }
        __syncthreads();
        base_q += chunk_total[0];
        base_kv += chunk_total[1];
        __syncthreads();
    }
}

// Block (x, b): keys [x * RAGGED_GATHER_ROWS, ...) of sequence b, every KV head, K then V, in
// 16-byte vectors (row strides are multiples of 8 elements, plan.rs). A sequence without query rows
// or keys copies nothing. Every entry of both tables the sequence reads is checked before any pool
// element is read; one outside its pool marks the sequence invalid and nothing of it is copied.
#define RAGGED_PAGED_GATHER_PARAMS                                                                                \
    const u16 *__restrict__ kpool, const u16 *__restrict__ vpool, const int *__restrict__ table_k,                \
        const int *__restrict__ table_v, const int *__restrict__ lq, const int *__restrict__ kv_start,            \
        int *__restrict__ invalid, u16 *__restrict__ k_out, u16 *__restrict__ v_out, i64 k_page, i64 k_head,      \
        i64 k_slot, i64 v_page, i64 v_head, i64 v_slot, i64 tk_row, i64 tk_col, i64 tv_row, i64 tv_col,           \
        int pages_k, int pages_v, int ps_k, int ps_v, int h_kv, int d_k, int d_v

// 16 bytes from the (read-only) pool, and 16 bytes to the gathered buffer.
__device__ __forceinline__ void paged_ld16(const u16* p, u32 (&r)[4]) {
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "l"(p));
}
__device__ __forceinline__ void paged_st16(u16* p, const u32 (&r)[4]) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

__device__ __forceinline__ void paged_gather_body(RAGGED_PAGED_GATHER_PARAMS) {
    const int b = blockIdx.y;
    if (lq[b] == 0) return;
    const int start = kv_start[b];
    const int lkv = kv_start[b + 1] - start;
    const int t0 = (int)blockIdx.x * RAGGED_GATHER_ROWS;
    if (t0 >= lkv) return;
    const int nt = RAGGED_PAGED_NW * 32;
    const int* tk = table_k + (i64)b * tk_row;
    const int* tv = table_v + (i64)b * tv_row;
    const int nk = (lkv + ps_k - 1) / ps_k;
    const int nv = (lkv + ps_v - 1) / ps_v;
    int bad = 0;
    for (int e = threadIdx.x; e < nk; e += nt) {
        const int p = tk[(i64)e * tk_col];
        bad |= p < 0 || p >= pages_k;
    }
    for (int e = threadIdx.x; e < nv; e += nt) {
        const int p = tv[(i64)e * tv_col];
        bad |= p < 0 || p >= pages_v;
    }
    if (__syncthreads_or(bad)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) invalid[b] = 1;
        return;
    }
    const int rows = lkv - t0 < RAGGED_GATHER_ROWS ? lkv - t0 : RAGGED_GATHER_ROWS;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int vk = d_k >> 3;  // 16-byte vectors per head row
    const int vv = d_v >> 3;
    const int per_k = h_kv * vk;
    const int per_v = h_kv * vv;
    // Warp w copies rows w, w + NW, ...; its lanes walk the row's (head, vector) pairs, K's then
    // V's, four loads in flight before their stores.
    for (int r = warp; r < rows; r += RAGGED_PAGED_NW) {
        const int t = t0 + r;
        const i64 pk = tk[(i64)(t / ps_k) * tk_col];
        const i64 pv = tv[(i64)(t / ps_v) * tv_col];
        const u16* ks = kpool + pk * k_page + (i64)(t % ps_k) * k_slot;
        const u16* vs = vpool + pv * v_page + (i64)(t % ps_v) * v_slot;
        u16* kd = k_out + (i64)(start + t) * per_k * 8;
        u16* vd = v_out + (i64)(start + t) * per_v * 8;
        const int total = per_k + per_v;
        for (int i0 = lane; i0 < total; i0 += 4 * 32) {
            u32 x[4][4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = i0 + u * 32;
                if (i < per_k) {
                    const int h = i / vk;
                    paged_ld16(ks + (i64)h * k_head + (i - h * vk) * 8, x[u]);
                } else if (i < total) {
                    const int j = i - per_k;
                    const int h = j / vv;
                    paged_ld16(vs + (i64)h * v_head + (j - h * vv) * 8, x[u]);
                }
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = i0 + u * 32;
                if (i < per_k)
                    paged_st16(kd + (i64)i * 8, x[u]);
                else if (i < total)
                    paged_st16(vd + (i64)(i - per_k) * 8, x[u]);
            }
        }
    }
}

// Workspace rows one finish block takes.
#define RAGGED_GATHER_FINISH_ROWS 16

// After the forward, per query row and head (paged-kv-and-sinks.md): a sequence marked invalid gets
// quiet NaN in O and the LSE (§5.3), as the split kernel writes it; with sinks (§6), the forward's
// O and natural-log LSE over the keys become the sink-inclusive ones,
//   LSE' = ln(e^LSE + e^s_h),   O' = O · e^(LSE - LSE'),
// the split kernel's arithmetic (paged_finish) applied after the fact, so one more rounding of O. Block x
// takes workspace rows [16x, 16x + 16): the packed row (its sequence found by a binary search over
// q_start, as the combine kernel does) or b * S_q + i for padded Q; rows that belong to no
// sequence's Lq are left alone. `lse` is the graph's LSE or, with sinks and no LSE in the graph, a
// workspace copy the forward wrote; `bf16` selects O's element type, `nan_bits` its quiet NaN.
#define RAGGED_PAGED_GATHER_FINISH_PARAMS                                                                         \
    const int *__restrict__ q_start, const int *__restrict__ lq, const int *__restrict__ invalid,                 \
        u16 *__restrict__ o, float *__restrict__ lse, const float *__restrict__ sinks, i64 o_seq, i64 o_head,    \
        i64 lse_batch, i64 lse_seq, i64 lse_head, i64 sink_stride, int batch, int q_rows, int packed, int ws_rows, \
        int h_q, int d_v, int bf16, int nan_bits

__device__ __forceinline__ float paged_half_to_float(u16 x, int bf16) {
    return bf16 ? paged_to_float<true>(x) : paged_to_float<false>(x);
}
__device__ __forceinline__ u16 paged_float_to_half(float x, int bf16) {
    return bf16 ? paged_from_float<true>(x) : paged_from_float<false>(x);
}

__device__ __forceinline__ void paged_gather_finish_body(RAGGED_PAGED_GATHER_FINISH_PARAMS) {
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int r0 = (int)blockIdx.x * RAGGED_GATHER_FINISH_ROWS;
    const int pairs = RAGGED_GATHER_FINISH_ROWS * h_q;
    for (int pr = warp; pr < pairs; pr += RAGGED_PAGED_NW) {
        const int r = r0 + pr / h_q;
        const int h = pr % h_q;
        if (r >= ws_rows) break;
        int b, i;
        if (packed) {
            // The last sequence whose first row is at or before r (sequences without rows share
            // their successor's start).
            int lo = 0, hi = batch - 1;
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (q_start[mid] <= r)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            b = lo;
            i = r - q_start[b];
        } else {
            b = r / q_rows;
            i = r - b * q_rows;
        }
        if (i < 0 || i >= lq[b]) continue;
        const bool bad = invalid[b] != 0;
        if (!bad && sinks == 0) continue;
        const i64 orow = (i64)(q_start[b] + i) * o_seq + (i64)h * o_head;
        float* lp = lse != 0 ? lse + (i64)b * lse_batch + (i64)(packed ? q_start[b] + i : i) * lse_seq +
                                   (i64)h * lse_head
                             : 0;
        if (bad) {
            for (int c = lane; c < d_v; c += 32) o[orow + c] = (u16)nan_bits;
            if (lp != 0 && lane == 0) *lp = __int_as_float(0x7fc00000);
            continue;
        }
        // The forward's row as one weight e^LSE over its normalized O: paged_finish with a sum of 1.
        float factor, lse_out;
        paged_finish(*lp * RAGGED_LOG2E, 1.f, paged_sink2(sinks, sink_stride, h), &factor, &lse_out);
        for (int c = lane; c < d_v; c += 32)
            o[orow + c] = paged_float_to_half(paged_half_to_float(o[orow + c], bf16) * factor, bf16);
        __syncwarp();
        if (lane == 0) *lp = lse_out;
    }
}

// The entry points: element-type free (16-byte copies; the finish kernel takes O's type and NaN bits), one
// configuration each, {0, 0, threads per block, 0} as the combine kernels publish.
extern "C" {
__constant__ int ragged_paged_gather_starts_config[4] = {0, 0, RAGGED_PAGED_NW * 32, 0};
__global__ void __launch_bounds__(RAGGED_PAGED_NW * 32) ragged_paged_gather_starts(RAGGED_PAGED_GATHER_STARTS_PARAMS) {
    paged_gather_starts_body(seq_len_q, seq_len_q_bytes, seq_len_kv, seq_len_kv_bytes, q_start, lq, kv_start, invalid,
                             batch, q_rows, packed, max_kv);
}
__constant__ int ragged_paged_gather_config[4] = {0, 0, RAGGED_PAGED_NW * 32, 0};
__global__ void __launch_bounds__(RAGGED_PAGED_NW * 32) ragged_paged_gather(RAGGED_PAGED_GATHER_PARAMS) {
    paged_gather_body(kpool, vpool, table_k, table_v, lq, kv_start, invalid, k_out, v_out, k_page, k_head, k_slot,
                      v_page, v_head, v_slot, tk_row, tk_col, tv_row, tv_col, pages_k, pages_v, ps_k, ps_v, h_kv, d_k,
                      d_v);
}
__constant__ int ragged_paged_gather_finish_config[4] = {0, 0, RAGGED_PAGED_NW * 32, 0};
__global__ void __launch_bounds__(RAGGED_PAGED_NW * 32) ragged_paged_gather_finish(RAGGED_PAGED_GATHER_FINISH_PARAMS) {
    paged_gather_finish_body(q_start, lq, invalid, o, lse, sinks, o_seq, o_head, lse_batch, lse_seq, lse_head,
                             sink_stride, batch, q_rows, packed, ws_rows, h_q, d_v, bf16, nan_bits);
}
}
