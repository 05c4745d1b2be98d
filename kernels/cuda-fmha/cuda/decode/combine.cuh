// Part of kernels/cuda-fmha/cuda/ragged_paged_decode.cu (the combine kernel: the splits of each
// row merged in split order, the sink folded in); included in that file's order, not on its own.
//
// Block (x, y): workspace row x, query heads 4y .. 4y + 3, one warp each; lane l owns the columns
// l, l + 32, ... of the head. A workspace row is b ws_batch + row0(b) + i (packed Q: the sequence's
// packed row, found by a binary search over the records' row0; padded Q: b S_q + i). Rows that
// belong to no sequence's Lq are skipped: nothing is written there.

#define RAGGED_PAGED_COMBINE_PARAMS                                                                               \
    u16 *__restrict__ o, float *__restrict__ lse, const float *__restrict__ sinks, const float *__restrict__ ws_o, \
        const float *__restrict__ ws_lse, const PagedSeq *__restrict__ records, i64 o_batch, i64 o_seq,           \
        i64 o_head, i64 lse_batch, i64 lse_seq, i64 lse_head, i64 sink_stride, int batch, int h_q, int ws_rows,   \
        int ws_batch, int packed, int chunk
#define RAGGED_PAGED_COMBINE_ARGS                                                                              \
    o, lse, sinks, ws_o, ws_lse, records, o_batch, o_seq, o_head, lse_batch, lse_seq, lse_head, sink_stride, \
        batch, h_q, ws_rows, ws_batch, packed, chunk

template <bool BF16, int DV>
__device__ __forceinline__ void paged_combine_body(RAGGED_PAGED_COMBINE_PARAMS) {
    constexpr int CPL = DV / 32;  // columns per lane
    const int lane = threadIdx.x & 31;
    const int h = (int)blockIdx.y * RAGGED_PAGED_NW + (int)(threadIdx.x >> 5);
    if (h >= h_q) return;
    const int row = (int)blockIdx.x;
    int b;
    if (packed) {
        // The last sequence whose first row is at or before `row` (sequences with Lq = 0 share
        // their successor's row0; the last of equal row0 is the one that owns the rows).
        int lo = 0, hi = batch - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (records[mid].row0 <= row) lo = mid;
            else hi = mid - 1;
        }
        b = lo;
    } else {
        b = row / ws_batch;
    }
    const PagedSeq rec = records[b];
    const i64 i = packed ? (i64)row - rec.row0 : (i64)(row - b * ws_batch);
    if (i < 0 || i >= rec.lq) return;
    u16* const orow = o + (i64)b * o_batch + (rec.row0 + i) * o_seq + (i64)h * o_head;
    float* const lrow = lse != 0 ? lse + (i64)b * lse_batch + (rec.row0 + i) * lse_seq + (i64)h * lse_head : 0;
    if (!rec.valid) {
#pragma unroll
        for (int k = 0; k < CPL; ++k) orow[lane + 32 * k] = paged_nan<BF16>();
        if (lrow != 0 && lane == 0) *lrow = __int_as_float(0x7fc00000);
        return;
    }
    const int n = (int)(((i64)rec.lkv + chunk - 1) / chunk);
    const i64 stride = (i64)ws_rows * h_q;  // between splits, in (row, head) entries
    const i64 base = (i64)row * h_q + h;
    float mk = RAGGED_NEG_INF;
    for (int s = 0; s < n; ++s) mk = fmaxf(mk, ws_lse[base + s * stride]);
    float lk = 0.f;
    float acc[CPL];
#pragma unroll
    for (int k = 0; k < CPL; ++k) acc[k] = 0.f;
    if (mk != RAGGED_NEG_INF) {
        for (int s = 0; s < n; ++s) {
            const float ls = ws_lse[base + s * stride];
            if (ls == RAGGED_NEG_INF) continue;
            const float wt = fast_exp2(ls - mk);
            lk += wt;
            const float* src = ws_o + (base + s * stride) * DV;
#pragma unroll
            for (int k = 0; k < CPL; ++k) acc[k] += wt * src[lane + 32 * k];
        }
    }
    float f, row_lse;
    paged_finish(mk, lk, paged_sink2(sinks, sink_stride, h), &f, &row_lse);
#pragma unroll
    for (int k = 0; k < CPL; ++k) orow[lane + 32 * k] = paged_from_float<BF16>(acc[k] * f);
    if (lrow != 0 && lane == 0) *lrow = row_lse;
}
