// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the persistent Hopper forward's tile scheduler); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Persistent tile scheduler. P = min(SM count, grid) blocks stay resident and walk the pre-pass's
// longest-first list of query tiles (prepass.cuh, or the block's own build of it, fused_list.cuh),
// each tile once per query head: a work item is (query tile, head). A block's first item is its
// index; the producer draws every further one from a work counter (tile_count[2], zeroed by the
// pre-pass) and hands it to the consumers through two mbarrier-ordered shared-memory slots, so the
// balance never depends on the list's order, which can then serve locality: the items are walked
// by chunks of RAGGED_SCHED_HEAD_CHUNK heads, so that the blocks working at one time share the K / V
// of fewer heads.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

#define RAGGED_SCHED_HEAD_CHUNK 4

// One work item: the query tile's batch record, head h, first row i0 and row count, q0 the first
// query row its Q tile holds (sched_item) and its key blocks [nb_first, nb_last).
struct WsItem {
    RaggedBatch bt;
    int b, h, i0, rows, q0, nb_first, nb_last;
};

// The count, a tile-list entry and a batch record as plain (weak, L1-cached) loads, not through the
// read-only path the compiler picks for const __restrict__ pointers: with the fused list the block
// itself wrote them during this grid (fmha/fused_list.cuh), which the read-only path does not allow
// for.
__device__ __forceinline__ int ragged_ld_weak(const int* p) {
    int v;
    asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// The entry and the record depend on the item index, which each thread reads after an mbarrier
// wait, so these two need no memory clobber to stay after it.
__device__ __forceinline__ RaggedTile ragged_ld_weak(const RaggedTile* p) {
    RaggedTile t;
    asm volatile("ld.global.v2.s32 {%0, %1}, [%2];" : "=r"(t.batch), "=r"(t.tile) : "l"(p));
    return t;
}
__device__ __forceinline__ RaggedBatch ragged_ld_weak(const RaggedBatch* p) {
    static_assert(sizeof(RaggedBatch) == 32, "the record as two 16-byte loads");
    RaggedBatch b;
    i64 lens;
    asm volatile("ld.global.v2.s64 {%0, %1}, [%2];" : "=l"(b.q_tok), "=l"(b.kv_tok) : "l"(p));
    asm volatile("ld.global.v2.s64 {%0, %1}, [%2+16];" : "=l"(b.lse_elem), "=l"(lens) : "l"(p));
    b.lq = (int)(lens & 0xffffffffll);
    b.lkv = (int)(lens >> 32);
    return b;
}

// The item's rows and key blocks from its query tile's first row i0 and its batch record (it.bt):
// sched_item's last step, and with slot records all the consumers compute of an item.
template <bool TSQ>
__device__ __forceinline__ void sched_item_rows(WsItem& it, int i0, int mask_left, int mask_right, int bottom_right,
                                                int bm, int bn) {
    const int lq = it.bt.lq;
    const int rows = lq - i0 < bm ? lq - i0 : bm;
    it.i0 = i0;
    it.rows = rows;
    it.q0 = TSQ && rows < bm && lq >= bm ? lq - bm : i0;
    const RaggedBand band = make_band(lq, it.bt.lkv, mask_left, mask_right, bottom_right);
    key_block_range(band, i0, rows, bn, &it.nb_first, &it.nb_last);
}

// Work item w of n_tiles * h_q. The list is walked once per chunk of RAGGED_SCHED_HEAD_CHUNK heads
// (the last chunk takes the h_q % chunk left over), tiles fastest within a chunk. TAIL > 0: the
// list's last ceil(TAIL * p / h_q) tiles (about TAIL items per working block, the cheapest) are
// walked after the chunks, all heads of a tile side by side, so that the grid ends on one
// longest-first ramp over every head instead of the last chunk's own ramp.
// TSQ (tail shift of Q): a batch's partial last query tile (rows < bm) of a batch with at least bm
// query rows holds the batch's last bm rows (q0 = lq - bm, a whole TMA box inside the batch, no
// cp.async tail); the rows before i0 are computed with the item's keys and never stored. Otherwise
// q0 = i0 and rows past the tile's end are zero-filled (tma_fill_tile).
template <bool TSQ, int TAIL>
__device__ __forceinline__ WsItem sched_item(int w, const RaggedBatch* __restrict__ batches,
                                             const RaggedTile* __restrict__ tiles, int n_tiles, int h_q, int mask_left,
                                             int mask_right, int bottom_right, int bm, int bn, int p) {
    constexpr int HC = RAGGED_SCHED_HEAD_CHUNK;
    WsItem it;
    int rank;
    int nh = n_tiles;  // tiles walked in chunks
    if constexpr (TAIL > 0) {
        const int tail = (TAIL * p + h_q - 1) / h_q;
        nh = tail < n_tiles ? n_tiles - tail : 0;
    }
    const int full = h_q - h_q % HC;
    const int in_full = nh * full;
    if (TAIL > 0 && w >= nh * h_q) {
        const int w3 = w - nh * h_q;
        const int k = w3 / h_q;
        rank = nh + k;
        it.h = w3 - k * h_q;
    }
    else {
        const int hc = w < in_full ? HC : h_q - full;
        const int w2 = w < in_full ? w % (nh * HC) : w - in_full;
        const int h0 = w < in_full ? w / (nh * HC) * HC : full;
        rank = w2 / hc;
        it.h = h0 + (w2 - rank * hc);
    }
    const RaggedTile tile = ragged_ld_weak(tiles + rank);
    it.b = tile.batch;
    it.bt = ragged_ld_weak(batches + tile.batch);
    sched_item_rows<TSQ>(it, tile.tile * bm, mask_left, mask_right, bottom_right, bm, bn);
    return it;
}

// The rows of the item's Q tile that lie inside the batch (BM under TSQ's shift, else the item's own):
// what the producer fills, the rest zero.
__device__ __forceinline__ int sched_q_rows(const WsItem& it) { return it.i0 - it.q0 + it.rows; }

// The producer warp's r-th draw (all lanes get it): the block's index first, then the work counter
// (after the fused list has made it ready, fused_list.cuh).
__device__ __forceinline__ int sched_draw_item(int r, bool fused, const RaggedFusedList* fl, const int* tile_count,
                                               int p, int lane) {
    int drawn = (int)blockIdx.x;
    if (r > 0 && lane == 0) {
        if (fused && r == 1) ragged_fl_counter_ready(*fl);
        drawn = atomicAdd(const_cast<int*>(tile_count) + 2, 1) + p;
    }
    return __shfl_sync(0xffffffffu, drawn, 0);
}

// The producer's wait until slot r & 1 is free again (its consumers have released it).
__device__ __forceinline__ void sched_slot_wait_empty(int r, u32 slot_empty) {
    const int sl = r & 1;
    mbar_wait(slot_empty + 8 * sl, (u32)(((r >> 1) & 1) ^ 1));
}

// The producer warp's r-th work item without slot records: the draw handed to the consumers through
// slot r & 1 (an int at s_slot + 4 (r & 1); slot_full / slot_empty its mbarriers, 8 bytes apart per
// slot).
__device__ __forceinline__ int sched_produce_item(int r, int p, bool fused, const RaggedFusedList* fl,
                                                  const int* tile_count, u32 slot_full, u32 slot_empty, u32 s_slot,
                                                  int lane) {
    const int w = sched_draw_item(r, fused, fl, tile_count, p, lane);
    const int sl = r & 1;
    sched_slot_wait_empty(r, slot_empty);
    if (lane == 0) {
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(s_slot + 4 * sl), "r"(w) : "memory");
        mbar_arrive(slot_full + 8 * sl);
    }
    return w;
}

// Slot records (slot_records): the producer, which reads an item's tile entry and batch record from
// global memory anyway, hands them to the consumers with the item index, so that a consumer warp
// takes its item from shared memory: no dependent global loads (the tile entry, then the record it
// names) and no index divisions at each item start. Slot r & 1 is RAGGED_SLOT_RECORD_BYTES at
// s_rec + RAGGED_SLOT_RECORD_BYTES (r & 1), 16-byte aligned: {w, h, batch, the tile's first row}
// then the record's four 8-byte words as ragged_ld_weak reads them. Only w is meaningful for
// w >= total (the end).
#define RAGGED_SLOT_RECORD_BYTES 48

// The producer's hand-over of draw r after sched_slot_wait_empty (which comes before the item is
// read, so that the producer holds the record in registers only from its loads to its stores): the
// index with the item decoded by sched_item, or the index alone where it ends the walk (w >= total).
__device__ __forceinline__ void sched_publish_record(int r, int w, const WsItem& it, u32 slot_full, u32 s_rec,
                                                     int lane) {
    const int sl = r & 1;
    const u32 a = s_rec + RAGGED_SLOT_RECORD_BYTES * sl;
    if (lane == 0) {
        const i64 lens = (i64)(u32)it.bt.lq | ((i64)it.bt.lkv << 32);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(w), "r"(it.h), "r"(it.b), "r"(it.i0)
                     : "memory");
        asm volatile("st.shared.v2.b64 [%0+16], {%1, %2};\n" ::"r"(a), "l"(it.bt.q_tok), "l"(it.bt.kv_tok)
                     : "memory");
        asm volatile("st.shared.v2.b64 [%0+32], {%1, %2};\n" ::"r"(a), "l"(it.bt.lse_elem), "l"(lens) : "memory");
        mbar_arrive(slot_full + 8 * sl);
    }
}
__device__ __forceinline__ void sched_publish_end(int r, int w, u32 slot_full, u32 s_rec, int lane) {
    const int sl = r & 1;
    if (lane == 0) {
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(s_rec + RAGGED_SLOT_RECORD_BYTES * sl), "r"(w) : "memory");
        mbar_arrive(slot_full + 8 * sl);
    }
}

// A consumer warp's r-th item from slot record r & 1 (sched_publish_record); the warp's lane 0
// releases the slot once every lane has read it. Returns w; *it is the item when w < total.
template <bool TSQ>
__device__ __forceinline__ int sched_consume_record(int r, u32 slot_full, u32 slot_empty, u32 s_rec, int lane,
                                                    int mask_left, int mask_right, int bottom_right, int bm, int bn,
                                                    WsItem* it) {
    const int sl = r & 1;
    const u32 a = s_rec + RAGGED_SLOT_RECORD_BYTES * sl;
    int w, i0;
    i64 lens;
    mbar_wait(slot_full + 8 * sl, (u32)((r >> 1) & 1));
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w), "=r"(it->h), "=r"(it->b), "=r"(i0)
                 : "r"(a)
                 : "memory");
    asm volatile("ld.shared.v2.b64 {%0, %1}, [%2+16];\n" : "=l"(it->bt.q_tok), "=l"(it->bt.kv_tok) : "r"(a) : "memory");
    asm volatile("ld.shared.v2.b64 {%0, %1}, [%2+32];\n" : "=l"(it->bt.lse_elem), "=l"(lens) : "r"(a) : "memory");
    __syncwarp();
    if (lane == 0) mbar_arrive(slot_empty + 8 * sl);
    it->bt.lq = (int)(lens & 0xffffffffll);
    it->bt.lkv = (int)(lens >> 32);
    sched_item_rows<TSQ>(*it, i0, mask_left, mask_right, bottom_right, bm, bn);
    return w;
}

// A consumer warp's r-th work item, from slot r & 1; the warp's lane 0 releases the slot.
__device__ __forceinline__ int sched_consume_item(int r, u32 slot_full, u32 slot_empty, u32 s_slot, int lane) {
    int w;
    const int sl = r & 1;
    mbar_wait(slot_full + 8 * sl, (u32)((r >> 1) & 1));
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w) : "r"(s_slot + 4 * sl) : "memory");
    __syncwarp();
    if (lane == 0) mbar_arrive(slot_empty + 8 * sl);
    return w;
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
