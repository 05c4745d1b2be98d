// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu and ragged_fmha_bwd.cu (scalar types, the per-batch records, error bits, programmatic dependent launch); included in that file's order, not on its own.

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
#define RAGGED_ERR_DQ_ORDER 0x40000000u  // the ordered backward took a dQ turn out of order (a stall)

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
