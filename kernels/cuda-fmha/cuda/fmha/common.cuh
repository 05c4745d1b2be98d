// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (scalar types, the per-batch records, error bits, the mask band); included in that file's order, not on its own.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define RAGGED_NEG_INF __int_as_float(0xff800000u)
#define RAGGED_I64_MAX 0x7fffffffffffffffLL

// Per-batch data shared between the pre-pass and the forward kernel: 32 bytes, 8-byte aligned.
// Token starts (not element offsets) so that Q and O, K and V, may have different sequence strides.
struct RaggedBatch {
    i64 q_tok;     // first token of batch b in Q and O: element_offset_q[b] / seqStride_q
    i64 kv_tok;    // first token of batch b in K and V
    i64 lse_elem;  // element offset of batch b in the LSE buffer (ragged aux or b * batch stride)
    int lq;        // logical query length Lq(b) (seq_len_q clamped into [0, extent])
    int lkv;       // logical key length Lkv(b)
};

// One entry of the tile list: query tile `tile` (rows [tile * BM, tile * BM + BM)) of batch `batch`.
struct RaggedTile {
    int batch;
    int tile;
};

// Error-flag bits written by the pre-pass (the flag is overwritten, not accumulated, per launch).
// A batch with any offset error is treated as empty: the forward kernel writes nothing for it.
#define RAGGED_ERR_FIRST_NONZERO 1u   // offset[0] != 0
#define RAGGED_ERR_DECREASING 2u      // offset[b+1] < offset[b]
#define RAGGED_ERR_PARTIAL_ROW 4u     // (offset[b+1] - offset[b]) % seqStride != 0
#define RAGGED_ERR_EXTENT 8u          // extent(b) > S_max
#define RAGGED_ERR_OVERFLOW 16u       // stored * multiplier overflows int64
#define RAGGED_ERR_Q_SHIFT 0          // bits 0..4: Q/O offsets
#define RAGGED_ERR_KV_SHIFT 8         // bits 8..12: K/V offsets
#define RAGGED_ERR_SEQ_LEN_Q 0x10000u   // seq_len_q[b] outside [0, extent_q(b)] (clamped)
#define RAGGED_ERR_SEQ_LEN_KV 0x20000u  // seq_len_kv[b] outside [0, extent_kv(b)] (clamped)
#define RAGGED_ERR_LSE_SHIFT 24       // bits 24..28: ragged LSE offsets (first-nonzero, decreasing, overflow)

// ---------------------------------------------------------------------------------------------
// Mask band (schema.md §6.1): key j is admitted for query i iff j < Lkv and
// (right < 0 or j <= i + off + right) and (left < 0 or j >= i + off - left),
// with off = 0 (TOP_LEFT) or Lkv - Lq (BOTTOM_RIGHT).
// ---------------------------------------------------------------------------------------------

struct RaggedBand {
    i64 off;
    int left;
    int right;
    int lkv;

    __device__ __forceinline__ bool admits(int i, int j) const {
        if (j >= lkv) return false;
        if (right >= 0 && (i64)j > (i64)i + off + right) return false;
        if (left >= 0 && (i64)j < (i64)i + off - left) return false;
        return true;
    }

    // The keys row i admits, as the range [*lo, *hi) within [0, lkv] (empty when *lo >= *hi): the
    // same set as admits(i, .), computed once per row so that a masked block costs two integer
    // compares per score instead of admits' 64-bit arithmetic.
    __device__ __forceinline__ void key_range(int i, int* lo, int* hi) const {
        i64 h = lkv;
        if (right >= 0) {
            const i64 r = (i64)i + off + right + 1;
            h = r < h ? r : h;
        }
        i64 l = 0;
        if (left >= 0) {
            const i64 r = (i64)i + off - left;
            l = r > 0 ? r : 0;
        }
        *lo = (int)(l < lkv ? l : lkv);
        *hi = (int)(h > 0 ? h : 0);
    }
};

__device__ __forceinline__ RaggedBand make_band(int lq, int lkv, int left, int right, int bottom_right) {
    RaggedBand band;
    band.off = bottom_right ? (i64)lkv - (i64)lq : 0;
    band.left = left;
    band.right = right;
    band.lkv = lkv;
    return band;
}

// Key blocks [*first, *last) that hold at least one admitted key for some row of
// [i0, i0 + rows). Shared by the pre-pass (tile cost) and the forward kernel (loop bounds), so the
// schedule and the work can never disagree. U32_DIV (the pre-pass): the two quotients in 32-bit
// unsigned arithmetic, the same values (0 <= j_begin < j_end <= lkv there) without the 64-bit
// division subroutine, whose latency the pre-pass pays between two forwards; the kernels keep the
// 64-bit form, with which their register allocation was measured (inlining the 32-bit division
// made the backward's d128 dQ kernels spill).
template <bool U32_DIV = false>
__device__ __forceinline__ void key_block_range(const RaggedBand& band, int i0, int rows, int block_n,
                                                int* first, int* last) {
    i64 i_last = (i64)i0 + rows - 1;
    i64 j_end = band.lkv;
    if (band.right >= 0) {
        i64 bound = i_last + band.off + band.right + 1;
        j_end = bound < j_end ? bound : j_end;
    }
    i64 j_begin = 0;
    if (band.left >= 0) {
        i64 bound = (i64)i0 + band.off - band.left;
        j_begin = bound > 0 ? bound : 0;
    }
    if (rows <= 0 || j_end <= j_begin) {
        *first = 0;
        *last = 0;
        return;
    }
    if (U32_DIV) {
        *first = (int)((u32)j_begin / (u32)block_n);
        *last = (int)(((u32)j_end + (u32)block_n - 1) / (u32)block_n);
    } else {
        *first = (int)(j_begin / block_n);
        *last = (int)((j_end + block_n - 1) / block_n);
    }
}

// Programmatic dependent launch (sm_90 and later). The host launches the forward with programmatic
// stream serialization when its module publishes ragged_fmha_grid_dependency = 1 (fmha/entries.cuh),
// so the forward's blocks are scheduled and set up while the pre-pass still runs, instead of after
// the launch gap that follows its completion; every forward body therefore waits here before its
// first read of the pre-pass's workspace, until the pre-pass grid has completed and its writes are
// visible. Launched without the attribute, the wait returns at once. The pre-pass signals at its
// start that its dependents may launch, and the forward right after its wait (the next execute's
// pre-pass, launched the same way where the module publishes ragged_fmha_prepass_grid_dependency,
// writes nothing before its own wait): a signal only lets the dependents be scheduled, their waits
// still cover every write of this grid.
__device__ __forceinline__ void ragged_grid_dependency_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void ragged_grid_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
