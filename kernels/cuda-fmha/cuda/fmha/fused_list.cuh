// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the tile list built inside the forward); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// The fused list. Between two executes the pre-pass kernel can only start once the previous
// forward has left an SM (no forward block leaves room for another kernel's warp), pays the cold
// start of a new kernel, and the forward's blocks then read the count, a list entry and a record,
// three more round trips. With the fused list the persistent forward (kernel_sm90.cuh) has no
// pre-pass before it: after its grid-dependency
// wait every block decodes the offsets and sorts the tiles itself, with all its threads (the
// pre-pass's decode and cost, scratch in its K ring, which no fill has touched yet), and writes
// the records and the list to the workspace as the pre-pass would. Ties in cost are ordered by
// (batch, tile), so every block writes the same bytes to the same addresses and reads back only
// after its own barrier: no block waits for another, and the list costs one round trip for the
// inputs plus the sort, on every block at once. The host uses it where every batch has a thread of
// the block and B * ceil(S_q_max / BM) <= RAGGED_FL_MAX_TILES; larger problems keep the pre-pass.
//
// What the blocks must agree on is the work counter, which has to be zero before any block draws
// from it (at its second item) and which nobody may zero once drawing has begun. The workspace is
// the caller's and uninitialized, and there is no zeroing launch, so each execute carries a nonce
// (nonzero, new per execute from the host): before its first draw (or as it leaves, if it never
// draws) a block tries to swap the claim word from any other value to the nonce (exactly one swap
// can succeed); the block that did zeroes the counter and the count of blocks that left, then
// stores the nonce into the publication word, and every block waits for that store before it draws.
// Whatever the words held before (garbage, an older nonce) differs from this nonce but with
// probability 2^-64. The last block to leave resets both words to 0, so that a CUDA graph, which
// replays the nonce it captured, finds them clean on every replay.
//
// Workspace words after the counters (tile_count[0..3]): the claim word at byte 16, the publication
// word at 24 (u64 each), the count of blocks that left at 32 (u32); kernels/cuda-fmha/src/forward/geometry.rs.
// ---------------------------------------------------------------------------------------------

// The forward's copy of the pre-pass's parameters plus the execute's nonce (0: the host ran the
// pre-pass and the forward only reads its list).
struct RaggedFusedList {
    RaggedPrepassArgs a;
    u64 nonce;
};

__device__ __forceinline__ u64* ragged_fl_claim_word(const RaggedPrepassArgs& a) {
    return reinterpret_cast<u64*>(a.tile_count + 4);
}
__device__ __forceinline__ u64* ragged_fl_published_word(const RaggedPrepassArgs& a) {
    return reinterpret_cast<u64*>(a.tile_count + 6);
}
__device__ __forceinline__ u32* ragged_fl_left_word(const RaggedPrepassArgs& a) {
    return reinterpret_cast<u32*>(a.tile_count + 8);
}

__device__ __forceinline__ u64 ragged_ld_acquire_u64(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Tiles the per-block build sorts at most (its stable ranks cost O(T^2 / NT) comparisons); the host
// keeps the pre-pass for larger problems.
#define RAGGED_FL_MAX_TILES 768

// A forward block's scratch for the fused list (in its K ring, which no fill has touched yet).
template <int NT>
struct RaggedFlShared {
    RaggedListShared<NT> list;
    int start[NT];                    // each batch's first index among the tiles in (batch, tile) order
    int cost[RAGGED_FL_MAX_TILES];    // each tile's cost, in that order
};

// The batch of tile i in (batch, tile) order: the last b with start[b] <= i (a batch with no tile
// shares its start with the next one, so the last such b has tiles).
template <int NT>
__device__ __forceinline__ int ragged_fl_batch_of(const RaggedFlShared<NT>& s, int batch, int i) {
    int lo = 0, hi = batch;  // start[lo] <= i < start[hi] (start[batch] = total)
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (s.start[mid] <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}

// The per-block form: while every batch has a thread and the tiles fit RAGGED_FL_MAX_TILES, the
// list sorted by cost with ties in (batch, tile) order, so that every block writes the same bytes to
// the same addresses (a scatter by shared-memory atomics would order ties differently per block,
// and the blocks would overwrite one another's lists: tiles lost, others done twice). Returns the
// tile count, or -1 (the same in every block) where the problem is outside those limits.
template <int NT>
__device__ __forceinline__ int ragged_fl_build_stable(const RaggedPrepassArgs& a, RaggedFlShared<NT>& s) {
    constexpr int BPT = RaggedListShared<NT>::BPT;
    const int tid = threadIdx.x;
    if (a.batch > NT) return -1;
    if (tid == 0) s.list.err = 0;
    for (int i = tid; i < NT * BPT; i += NT) s.list.base[i] = 0;
    u32 err = 0;
    int tiles = 0;
    if (tid < a.batch) {
        RaggedBatch bt;
        err = ragged_decode_batch(a, ragged_read_inputs(a, tid), tid, &bt);
        a.batches[tid] = bt;
        s.list.len[tid] = make_int2(bt.lq, bt.lkv);
        tiles = bt.lq > 0 ? (int)(((u32)bt.lq + (u32)a.block_m - 1) / (u32)a.block_m) : 0;
    }
    int total;
    const int first = ragged_block_exclusive_scan<NT>(tiles, s.list.warp_total, &total);
    if (total > RAGGED_FL_MAX_TILES) return -1;  // total is the same for every thread
    if (tid < a.batch) s.start[tid] = first;
    __syncthreads();
    for (int i = tid; i < total; i += NT) {
        const int b = ragged_fl_batch_of(s, a.batch, i);
        const int2 l = s.list.len[b];
        const int c = ragged_tile_cost(a, l.x, l.y, i - s.start[b]);
        s.cost[i] = c;
        atomicAdd(&s.list.base[c], 1);
    }
    __syncthreads();
    ragged_bucket_slots(s.list);
    for (int i = tid; i < total; i += NT) {
        const int c = s.cost[i];
        int rank = 0;
        for (int j = 0; j < i; ++j) rank += s.cost[j] == c;
        const int b = ragged_fl_batch_of(s, a.batch, i);
        RaggedTile entry;
        entry.batch = b;
        entry.tile = i - s.start[b];
        a.tiles[s.list.base[c] + rank] = entry;
    }
    if (err) atomicOr(&s.list.err, err);
    __syncthreads();
    if (tid == 0) {
        *a.tile_count = total;
        *a.err_flag = s.list.err;
    }
    return total;
}

// Every thread of a forward block, right after the grid-dependency wait, when the nonce is not 0:
// the list in the workspace, its tile count returned to every thread. Ends with a barrier: the
// list is then visible to all the block's threads, and its scratch writes (generic proxy) are
// ordered before the TMA fills that will land on the same bytes. (A fallback in which one block
// builds any size of list with the pre-pass's functions and publishes it made ptxas spill 104–284
// bytes in the persistent bodies' consumer code; larger problems keep the pre-pass launch.)
template <int NT>
__device__ __forceinline__ int ragged_fl_build(const RaggedFusedList& fl, RaggedFlShared<NT>& s) {
    const int total = ragged_fl_build_stable(fl.a, s);
    // The host hands a nonce only where B <= NT and B * ceil(S_q_max / BM) <= RAGGED_FL_MAX_TILES
    // (kernels/cuda-fmha/src/forward/fused_list.rs), so the per-block form always applies; anything else is
    // a host bug, which must not pass as a forward that silently wrote nothing.
    if (total < 0) __trap();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    return total;
}

// One thread per block, before the block's first draw from the work counter and before it leaves:
// returns once the counter has been zeroed for this execute (by this block, if its claim wins).
__device__ __forceinline__ void ragged_fl_counter_ready(const RaggedFusedList& fl) {
    u64* published = ragged_fl_published_word(fl.a);
    if (ragged_ld_acquire_u64(published) == fl.nonce) return;
    u64* claim = ragged_fl_claim_word(fl.a);
    u64 seen;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(claim) : "memory");
    if (seen != fl.nonce && atomicCAS(reinterpret_cast<unsigned long long*>(claim), seen, fl.nonce) == seen) {
        fl.a.tile_count[2] = 0;
        *ragged_fl_left_word(fl.a) = 0;
        asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(published), "l"(fl.nonce) : "memory");
        return;
    }
    while (ragged_ld_acquire_u64(published) != fl.nonce) __nanosleep(32);
}

// One thread per block, once the block has drawn its last item (every draw from the work counter
// done): the last of the P working blocks resets the claim and publication words.
__device__ __forceinline__ void ragged_fl_leave(const RaggedFusedList& fl, int working_blocks) {
    ragged_fl_counter_ready(fl);
    __threadfence();
    if (atomicAdd(ragged_fl_left_word(fl.a), 1u) == (u32)(working_blocks - 1)) {
        atomicExch(reinterpret_cast<unsigned long long*>(ragged_fl_claim_word(fl.a)), 0ull);
        atomicExch(reinterpret_cast<unsigned long long*>(ragged_fl_published_word(fl.a)), 0ull);
    }
}
