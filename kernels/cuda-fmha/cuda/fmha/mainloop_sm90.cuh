// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the Hopper forward's mainloop parts: TMA fills, the K / V ring, turn-taking, the two GEMMs); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// Warp-specialized mainloop. Warpgroup 0 is the producer: one warp of it streams Q per item and K,
// V block by block through a kv_stages-deep shared-memory ring, each fill completing on a "full"
// mbarrier (tma_fill_tile). Warpgroups 1 .. NC are consumers of 64 query rows each: per block they
// wait on K's full barrier, issue S(n) = Q K(n)^T together with O += P(n-1) V(n-1), release K(n)
// once S(n) is in registers and V(n-1) once the P V product has finished (one arrive per warp on
// the "empty" barriers). The consumers take turns issuing their MMAs through named barriers, so
// that one warpgroup's softmax runs while another's GEMMs hold the tensor cores.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Shared memory of a configuration: 1024 bytes of alignment slack, Q (two buffers with
// double_q_buffer), the K and V rings at the padded row widths (ragged_row_width; FP8: V's tiles are
// head_dim_v rows of block_n one-byte keys), the mbarriers
// (q_full, q_empty, k_full[S], k_empty[S], v_full[S], v_empty[S]), the item slots (slot_full[2],
// slot_empty[2], two ints: 48 bytes), the second Q buffer's barrier pair, 8 bytes spare, and for FP8
// the second Q buffer's pair's place (whether used or not) and eight words per consumer warp
// (fp8_warp_words); with slot_records (16-bit only) the two item records instead, 16-byte aligned.
#define RAGGED_FMHA_SM90_SMEM(C)                                                                           \
    (1024 + RAGGED_SM90_O_STAGE_BYTES(C) +                                                                 \
     ((C::double_q_buffer ? 2 : 1) * 64 * C::consumer_warpgroups + C::kv_stages * C::block_n) *            \
                ragged_row_width(C::head_dim) * 2 +                                                     \
     C::kv_stages * (C::fp8 ? C::head_dim_v * C::block_n : C::block_n * ragged_row_width(C::head_dim_v) * 2) +  \
     (C::slot_records ? RAGGED_SLOT_RECORD_OFFSET(C::kv_stages, C::double_q_buffer) +                     \
                            2 * RAGGED_SLOT_RECORD_BYTES                                                 \
                      : RAGGED_SM90_BAR_BYTES(C::kv_stages, C::double_q_buffer)) +                       \
     (C::fp8 ? 16 + 128 * C::consumer_warpgroups : 0))

// staged_o_stores: 16 rows of O per consumer warp, before Q (a multiple of 1024 bytes, so Q's
// tiles keep their alignment).
#define RAGGED_SM90_O_STAGE_BYTES(C) (C::staged_o_stores ? 64 * C::consumer_warpgroups * C::head_dim_v * 2 : 0)

// The mbarriers, the item slots, the second Q buffer's pair and the spare 8 bytes, in bytes.
#define RAGGED_SM90_BAR_BYTES(STAGES, Q2) (8 * (2 + 4 * (STAGES)) + 48 + ((Q2) ? 16 : 0) + 8)

// With slot_records, the offset of the two item records (tile_scheduler.cuh) from the mbarriers:
// past RAGGED_SM90_BAR_BYTES, rounded up to 16 bytes.
#define RAGGED_SLOT_RECORD_OFFSET(STAGES, Q2) ((RAGGED_SM90_BAR_BYTES(STAGES, Q2) + 15) / 16 * 16)

// By one thread, before the block's first barrier: full barriers take one arrival per fill (the TMA's
// expect-tx or the tracked copies' lane 0), empty ones one per consumer warp; the item slots'
// barriers likewise (tile_scheduler.cuh).
template <int STAGES, int NC, bool Q2>
__device__ __forceinline__ void mainloop_init_barriers(u32 q_full, u32 q_empty, u32 q2_full, u32 q2_empty, u32 k_full,
                                                       u32 k_empty, u32 v_full, u32 v_empty, u32 slot_full,
                                                       u32 slot_empty) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 4 * NC);
    if (Q2) {
        mbar_init(q2_full, 1);
        mbar_init(q2_empty, 4 * NC);
    }
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        mbar_init(k_full + 8 * s, 1);
        mbar_init(v_full + 8 * s, 1);
        mbar_init(k_empty + 8 * s, 4 * NC);
        mbar_init(v_empty + 8 * s, 4 * NC);
    }
    for (int s = 0; s < 2; ++s) {
        mbar_init(slot_full + 8 * s, 1);
        mbar_init(slot_empty + 8 * s, 4 * NC);
    }
    mbar_init_fence();
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
__device__ __forceinline__ void tma_fill_tile(u32 bar, u32 s_dst, const RaggedTmaMap* map, int head, int row,
                                              int valid, const u16* g, i64 stride, const u16* safe, int lane) {
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

// A position in the K / V ring, for the n-th block filled or consumed: its stage n % STAGES and the
// parity n / STAGES & 1 of its round (the mbarrier phase), both kept and advanced with a compare
// instead of computed from n at each use (at 3 stages each would be a wide multiply).
template <int STAGES>
struct KvRing {
    int n = 0, st = 0;
    u32 ph = 0;
    __device__ __forceinline__ int stage() const { return st; }
    __device__ __forceinline__ u32 phase() const { return ph; }
    __device__ __forceinline__ int next_stage() const { return st + 1 == STAGES ? 0 : st + 1; }
    __device__ __forceinline__ u32 next_phase() const { return st + 1 == STAGES ? ph ^ 1u : ph; }
    __device__ __forceinline__ int prev_stage() const { return st == 0 ? STAGES - 1 : st - 1; }
    __device__ __forceinline__ void advance() {
        ++n;
        if (++st == STAGES) {
            st = 0;
            ph ^= 1u;
        }
    }
};

// Named barriers: 0 is __syncthreads, 1 .. NC the consumers' turns.
#define RAGGED_WS_BAR_TURN 1

// The consumers' turn-taking, round robin over the NC consumers: wait for my turn (the previous
// consumer's hand-over), issue, hand over to the next.
__device__ __forceinline__ void consumer_turn_wait(int c) { named_bar_sync(RAGGED_WS_BAR_TURN + c, 256); }
template <int NC>
__device__ __forceinline__ void consumer_turn_pass(int c) {
    named_bar_arrive(RAGGED_WS_BAR_TURN + (c + 1 == NC ? 0 : c + 1), 256);
}

// S = Q K^T for one consumer (64 rows) from the K tile at kb: Q from shared memory (s_q, rows 64 c) or,
// with QREG, from the registers qa. The descriptors are one base each plus desc_add per k-step.
template <bool BF16, int D, int BN, int BM, bool QREG>
__device__ __forceinline__ void mainloop_issue_s(float* s, const u32 (*qa)[4], u32 s_q, int c, u32 kb) {
    constexpr int KS = D / 16;
    const u64 dk = sw128_desc(kb, 16, 1024);
    const u64 dq = sw128_desc(s_q + c * (64 * 128), 16, 1024);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        const u64 db = desc_add(dk, (ks >> 2) * (BN * 128) + (ks & 3) * 32);
        if constexpr (QREG) {
            wgmma_rs_k<BF16, BN>(s, qa[ks], db, ks > 0);
        }
        else {
            const u64 da = desc_add(dq, (ks >> 2) * (BM * 128) + (ks & 3) * 32);
            wgmma_ss<BF16, BN>(s, da, db, ks > 0);
        }
    }
}

// O += P V over the BN keys of the V tile at vb, PV columns (wgmma_pv_at's widths).
template <bool BF16, int PV, int BN>
__device__ __forceinline__ void mainloop_issue_pv(float* acc, const u32 (*pa)[4], u32 vb) {
    const u64 dv = sw128_desc(vb, BN * 128, 1024);
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) wgmma_pv_desc<BF16, PV, BN>(acc, pa[kc], dv, kc);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
