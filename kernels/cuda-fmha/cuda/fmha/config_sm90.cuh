// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu (the Hopper forward's configuration per head dim); included in that file's order, not on its own.

// ---------------------------------------------------------------------------------------------
// One configuration struct per head dim of the persistent Hopper kernel (kernel_sm90.cuh), its
// fields compile-time constants (enumerators: unlike static constexpr members, they give the module
// no device variables). The fields the kernel reads:
//   bf16                   bf16 (true) or fp16 inputs and output
//   fp8                    e4m3 Q, K, V (fp8_sm90.cuh): head_dim then counts two-byte units of a Q / K
//                          row (D / 2), V comes transposed from the workspace, O's type is a parameter
//   head_dim, head_dim_v   Q / K and V / O head dims
//   block_n                keys per K / V tile
//   kv_stages              depth of the K / V shared-memory ring
//   consumer_warpgroups    consumer warpgroups of 64 query rows each (BM = 64 of them)
//   producer_registers, consumer_registers
//                          per-thread registers after setmaxnreg (one producer warpgroup)
//   pv_columns             width of the P V product: V's padded row width, or at d96 the 96 real
//                          columns (one n96 product that skips the padding)
//   q_in_registers         each consumer holds its Q rows in registers (S from the register-A
//                          wgmma) and releases Q to the producer after its first S of an item
//   q_tail_shift           a batch's partial last query tile is loaded as the batch's last BM rows
//                          (one whole TMA box; the rows before the tile are computed, never stored)
//   deferred_o_store       a consumer issues the next item's first S before storing this item's O,
//                          so that the epilogue overlaps the last P V and the next item's start
//   double_q_buffer        two Q buffers, items alternating, so the producer fills the next item's
//                          Q while this item (Q read from shared memory by every S) still runs
//   wide_o_stores          O stored in 16-byte pieces where its layout allows (epilogue_sm90.cuh)
//   staged_o_stores        O through a shared-memory slice per consumer warp, then stored in whole
//                          16-byte pieces where its layout allows (epilogue_sm90.cuh)
//   tail_items_per_block   the list's cheapest tiles, about this many items per block, walked last
//                          with all heads side by side (tile_scheduler.cuh; 0: none)
//   slot_records           the producer hands each item's tile entry and batch record to the
//                          consumers with its index (tile_scheduler.cuh), which then read no global
//                          memory at an item's start
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// d64: three consumer warpgroups (BM 192) over a 4-stage ring; Q stays in shared memory, so it has
// a second buffer to be refilled early.
template <bool BF16>
struct FmhaSm90ConfigD64 {
    enum : bool { bf16 = BF16, fp8 = false };
    enum : int { head_dim = 64, head_dim_v = 64, pv_columns = 64 };
    enum : int { block_n = 128, kv_stages = 4, consumer_warpgroups = 3 };
    enum : int { producer_registers = 24, consumer_registers = 160 };
    enum : bool { q_in_registers = false, q_tail_shift = false, deferred_o_store = true };
    enum : bool { double_q_buffer = true, wide_o_stores = false, staged_o_stores = true };
    enum : int { tail_items_per_block = 4 };
    enum : bool { slot_records = true };
};

// d128: two consumer warpgroups (BM 128) over a 3-stage ring, Q in registers.
template <bool BF16>
struct FmhaSm90ConfigD128 {
    enum : bool { bf16 = BF16, fp8 = false };
    enum : int { head_dim = 128, head_dim_v = 128, pv_columns = 128 };
    enum : int { block_n = 128, kv_stages = 3, consumer_warpgroups = 2 };
    enum : int { producer_registers = 24, consumer_registers = 240 };
    enum : bool { q_in_registers = true, q_tail_shift = true, deferred_o_store = true };
    enum : bool { double_q_buffer = false, wide_o_stores = true, staged_o_stores = false };
    enum : int { tail_items_per_block = 4 };
    enum : bool { slot_records = false };
};

// d96: d128's arrangement over rows padded to 128 columns (the same shared memory; S over the 96
// real columns) with P V over the 96 real columns too.
template <bool BF16>
struct FmhaSm90ConfigD96 {
    enum : bool { bf16 = BF16, fp8 = false };
    enum : int { head_dim = 96, head_dim_v = 96, pv_columns = 96 };
    enum : int { block_n = 128, kv_stages = 3, consumer_warpgroups = 2 };
    enum : int { producer_registers = 24, consumer_registers = 240 };
    enum : bool { q_in_registers = true, q_tail_shift = true, deferred_o_store = true };
    enum : bool { double_q_buffer = false, wide_o_stores = false, staged_o_stores = false };
    enum : int { tail_items_per_block = 4 };
    enum : bool { slot_records = false };
};

// d256: Q read from shared memory (in registers it would leave too few for the 128 accumulator
// registers per thread), O stored at the item's end (deferring it needs a second Q buffer, for which
// there is no room); blocks of 64 keys in a ring of 2 (193 KB).
template <bool BF16>
struct FmhaSm90ConfigD256 {
    enum : bool { bf16 = BF16, fp8 = false };
    enum : int { head_dim = 256, head_dim_v = 256, pv_columns = 256 };
    enum : int { block_n = 64, kv_stages = 2, consumer_warpgroups = 2 };
    enum : int { producer_registers = 24, consumer_registers = 240 };
    enum : bool { q_in_registers = false, q_tail_shift = false, deferred_o_store = false };
    enum : bool { double_q_buffer = false, wide_o_stores = false, staged_o_stores = false };
    enum : int { tail_items_per_block = 0 };
    enum : bool { slot_records = false };
};

// d192 / 128: d128's arrangement (Q in registers) with blocks of 128 keys in a ring of 2 (209 KB).
template <bool BF16>
struct FmhaSm90ConfigD192V128 {
    enum : bool { bf16 = BF16, fp8 = false };
    enum : int { head_dim = 192, head_dim_v = 128, pv_columns = 128 };
    enum : int { block_n = 128, kv_stages = 2, consumer_warpgroups = 2 };
    enum : int { producer_registers = 24, consumer_registers = 240 };
    enum : bool { q_in_registers = true, q_tail_shift = true, deferred_o_store = true };
    enum : bool { double_q_buffer = false, wide_o_stores = false, staged_o_stores = false };
    enum : int { tail_items_per_block = 0 };
    enum : bool { slot_records = false };
};

// FP8 e4m3, D 128: rows of Q and K are 128 bytes (head_dim 64 two-byte units), the transposed V
// tiles 128 rows of 192 keys (three 64-key chunks, fp8_sm90.cuh); d64's arrangement for the loads (Q
// from shared memory, double-buffered) with two consumers, whose accumulators (S 96 and O 64
// registers, P 24) need d128's register budget. Blocks of 192 keys rather than 128: with e4m3 the
// tensor cores take half the time per key, so the per-block work outside the products (O's rescale,
// the row reductions, the barrier waits) weighs twice as much, and a wider block spreads it over more
// keys. 2 x 16 KB of Q and a ring of 4 x (24 KB of K, 24 KB of V^T): 225 KB.
struct FmhaSm90Fp8ConfigD128 {
    enum : bool { bf16 = true, fp8 = true };
    enum : int { head_dim = 64, head_dim_v = 128, pv_columns = 128 };
    enum : int { block_n = 192, kv_stages = 4, consumer_warpgroups = 2 };
    enum : int { producer_registers = 24, consumer_registers = 240 };
    enum : bool { q_in_registers = false, q_tail_shift = false, deferred_o_store = true };
    enum : bool { double_q_buffer = true, wide_o_stores = false, staged_o_stores = false };
    enum : int { tail_items_per_block = 4 };
    enum : bool { slot_records = false };
};

// FP8 e4m3, D 64: rows of Q and K are 64 bytes (head_dim 32 two-byte units) held in 128-byte rows
// whose second half the loads zero-fill (as d96 pads to 128 columns), S over the 64 real bytes; the
// transposed V tiles are 64 rows of 128 keys. D 128's arrangement otherwise.
struct FmhaSm90Fp8ConfigD64 {
    enum : bool { bf16 = true, fp8 = true };
    enum : int { head_dim = 32, head_dim_v = 64, pv_columns = 64 };
    enum : int { block_n = 128, kv_stages = 4, consumer_warpgroups = 2 };
    enum : int { producer_registers = 24, consumer_registers = 240 };
    enum : bool { q_in_registers = false, q_tail_shift = false, deferred_o_store = true };
    enum : bool { double_q_buffer = true, wide_o_stores = false, staged_o_stores = false };
    enum : int { tail_items_per_block = 4 };
    enum : bool { slot_records = false };
};

// FP8 e4m3, D 256: rows of Q and K are 256 bytes (head_dim 128 two-byte units: two 128-byte swizzle
// blocks, as a bf16 row of 128), the transposed V tiles 256 rows of 64 keys (64-byte swizzle rows).
// D 128's arrangement (Q from shared memory, double-buffered, O stored deferred) over blocks of 64
// keys: per consumer thread the O accumulator takes 128 registers, and with blocks of 128 keys S (64)
// and P (16) left too few of the 240 (ptxas serialized the warpgroup MMAs); S 32 and P 8 fit.
// 2 x 32 KB of Q and a ring of 4 x (16 KB of K, 16 KB of V^T): 193 KB.
struct FmhaSm90Fp8ConfigD256 {
    enum : bool { bf16 = true, fp8 = true };
    enum : int { head_dim = 128, head_dim_v = 256, pv_columns = 256 };
    enum : int { block_n = 64, kv_stages = 4, consumer_warpgroups = 2 };
    enum : int { producer_registers = 24, consumer_registers = 240 };
    enum : bool { q_in_registers = false, q_tail_shift = false, deferred_o_store = true };
    enum : bool { double_q_buffer = true, wide_o_stores = false, staged_o_stores = false };
    enum : int { tail_items_per_block = 4 };
    enum : bool { slot_records = false };
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
