// Part of kernels/cuda/ragged_fmha_fwd.cu (the tile list built inside the forward); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// The fused list (FL). Between two executes the pre-pass kernel costs ≈ 7 µs on the H200: it can
// only start once the previous forward has left an SM (no forward block leaves room for another
// kernel's warp, bench/gpu/NOTES.md session 19), ≈ 2–3 µs of it is the cold start of a new kernel,
// and the forward's blocks then read the count, a list entry and a record, three more round trips.
// With FL the persistent forward (DYN bodies) has no pre-pass before it: after its grid-dependency
// wait every block decodes the offsets and sorts the tiles itself, with all its threads (the
// pre-pass's own functions, scratch in its K ring, which no fill has touched yet), and writes the
// records and the list to the workspace exactly as the pre-pass would. Every block writes the same
// bytes to the same addresses and reads back only after its own barrier, so no block waits for
// another: the list costs one round trip for the inputs plus the sort, on every block at once.
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
// word at 24 (u64 each), the count of blocks that left at 32 (u32); kernels/src/cuda_fmha/geometry.rs.
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

// Every thread of a forward block, right after the grid-dependency wait, when the nonce is not 0:
// the pre-pass's list with NT threads and no wait, into the workspace; returns the tile count (to
// every thread). The work counter is not touched (other blocks may already draw from it). Ends
// with a barrier: the block's records and list are then visible to all its threads, and its scratch
// writes (generic proxy) are ordered before the TMA fills that will land on the same bytes.
// Not inlined: inlined, the build's registers made the d64 and d192 / 128 bodies spill.
template <int NT>
__device__ __noinline__ int ragged_fl_build(const RaggedPrepassArgs& a, RaggedListShared<NT>& s) {
    const int tid = threadIdx.x;
    if (tid == 0) s.err = 0;
    u32 err = 0;
    for (int b = tid; b < a.batch; b += NT) {
        RaggedBatch bt;
        err |= ragged_decode_batch(a, ragged_read_inputs(a, b), b, &bt);
        a.batches[b] = bt;
        if (a.batch <= NT) s.len[b] = make_int2(bt.lq, bt.lkv);
    }
    // Starts with a barrier: s.len, s.err = 0 and the records are complete.
    const int total = ragged_cost_buckets(a, s);
    if (err) atomicOr(&s.err, err);
    ragged_scatter_tiles(a, s);
    __syncthreads();
    if (tid == 0) {
        *a.tile_count = total;
        *a.err_flag = s.err;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    return total;
}

__device__ __forceinline__ u64 ragged_ld_acquire_u64(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
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
