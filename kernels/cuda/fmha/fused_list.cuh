// Part of kernels/cuda/ragged_fmha_fwd.cu (the tile list built inside the forward); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// The fused list (FL). Between two executes the pre-pass kernel costs ≈ 7 µs on the H200: it can
// only start once the previous forward has left an SM (no forward block leaves room for another
// kernel's warp, bench/gpu/NOTES.md session 19), and ≈ 2–3 µs of it is the cold start of a new
// kernel after the forward streamed its code and inputs out of L2. With FL the persistent forward
// (DYN bodies) builds the same list itself after its grid-dependency wait: the first of its blocks
// to claim the execute decodes the offsets and sorts the tiles with all its threads (the pre-pass's
// own functions, scratch in its K ring, which no fill has touched yet), writes the list, the count,
// the error flag and a zero work counter to the workspace exactly as the pre-pass would, and then
// publishes; the other blocks wait for the publication before they read any of it.
//
// The workspace is the caller's and uninitialized, and the counters must need no zeroing launch,
// so each execute carries a nonce (nonzero, new per execute from the host): a block claims the
// execute by swapping the claim word from any other value to the nonce (exactly one swap can
// succeed), and the list is published by storing the nonce into the publication word. Whatever the
// words held before (garbage, an older nonce) differs from this nonce but with probability 2^-64.
// The last block to leave the work loop resets both words to 0, so that a CUDA graph, which replays
// the nonce it captured, finds them clean again on every replay.
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

__device__ __forceinline__ u64 ragged_ld_acquire_u64(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// The list from the pre-pass's functions with NT threads and no grid-dependency wait (the forward
// has already waited): the records go to the workspace, the (lq, lkv) also to shared memory while
// every batch has a thread, as in the pre-pass.
template <int NT>
__device__ __forceinline__ void ragged_fl_build(const RaggedPrepassArgs& a, RaggedListShared<NT>& s) {
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
    ragged_prepass_finish(a, s, total);  // a barrier, then the count, the flag and the work counter
}

// Every thread of a forward block, right after the grid-dependency wait, when fl.nonce != 0.
// scratch: shared memory for RaggedListShared<NT> that no asynchronous copy writes before the
// block's next barrier; claimed: one int of shared memory that nothing else uses until then.
template <int NT>
__device__ __noinline__ void ragged_fl_obtain(const RaggedFusedList& fl, unsigned char* scratch, int* claimed) {
    if (threadIdx.x == 0) {
        u64* claim = ragged_fl_claim_word(fl.a);
        u64 seen;
        asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(claim) : "memory");
        *claimed = seen != fl.nonce && atomicCAS(reinterpret_cast<unsigned long long*>(claim), seen, fl.nonce) == seen;
    }
    __syncthreads();
    if (*claimed) {
        ragged_fl_build<NT>(fl.a, *reinterpret_cast<RaggedListShared<NT>*>(scratch));
        if (threadIdx.x == 0) *ragged_fl_left_word(fl.a) = 0;
        // Every thread's list writes before the publication; the scratch's generic-proxy writes
        // before the TMA fills that will land on the same bytes.
        __threadfence();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0)
            asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(ragged_fl_published_word(fl.a)), "l"(fl.nonce)
                         : "memory");
    }
    else {
        if (threadIdx.x == 0)
            while (ragged_ld_acquire_u64(ragged_fl_published_word(fl.a)) != fl.nonce) __nanosleep(64);
        __syncthreads();
    }
}

// One thread per block, once the block has drawn its last item (every draw from the work counter
// done): the last of the P working blocks resets the claim and publication words.
__device__ __forceinline__ void ragged_fl_leave(const RaggedFusedList& fl, int working_blocks) {
    __threadfence();
    if (atomicAdd(ragged_fl_left_word(fl.a), 1u) == (u32)(working_blocks - 1)) {
        atomicExch(reinterpret_cast<unsigned long long*>(ragged_fl_claim_word(fl.a)), 0ull);
        atomicExch(reinterpret_cast<unsigned long long*>(ragged_fl_published_word(fl.a)), 0ull);
    }
}
