// Part of kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu and ragged_fmha_bwd.cu (Hopper asynchronous-pipeline primitives); included in those files' order, not on its own.

// ---------------------------------------------------------------------------------------------
// The pieces a warp-specialized Hopper kernel pipelines with, shared by the forward's ws bodies and
// the backward's kernels: mbarriers (init, parity wait, plain / cp.async / expect-tx arrivals), the
// TMA tile load from a driver tensor map, the plain bulk copy, named barriers between warpgroups,
// and setmaxnreg to move registers from a producer warpgroup to its consumers.
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised mbarriers visible to the other threads (and the async proxy) before use.
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives on the barrier once every cp.async this thread issued so far has landed.
__device__ __forceinline__ void cp_async_mbar_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Without .noinc: the barrier's pending count is raised by one now and lowered by one when this
// thread's copies have landed, so the copies hold the phase open without counting as an arrival.
__device__ __forceinline__ void cp_async_mbar_track(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also announces `bytes` of asynchronous (TMA) writes the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// The driver's CUtensorMap (128 opaque bytes, 64-byte aligned), declared here because NVRTC sees no
// CUDA header. Built on the host by cuTensorMapEncodeTiled over a packed [T, H, D] buffer as a
// 3-D map {D, H, T} (strides: head and sequence stride in bytes), box {64, 1, rows}, 128-byte
// swizzle, and passed as a __grid_constant__ kernel parameter.
struct __align__(64) RaggedTmaMap {
    u64 opaque[16];
};

// TMA: rows [row, row + box rows) of columns [c0, c0 + 64) of head `head` into shared memory at
// dst (1024-byte aligned: the 128-byte swizzle then matches sw128), completing on bar.
__device__ __forceinline__ void tma_load_3d(u32 dst, const RaggedTmaMap* map, int c0, int head, int row, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
            dst),
        "l"((u64)map), "r"(c0), "r"(head), "r"(row), "r"(bar)
        : "memory");
}

// TMA: the box of a 2-D map at (c0, c1) into shared memory at dst (16-byte aligned), completing on
// bar. The backward's row statistics come this way rather than by a plain cp.async.bulk: both are
// the same copy engine, but compute-sanitizer's racecheck attributes a plain bulk copy's writes to
// the issuing thread and does not take the mbarrier's completion as ordering them before the other
// warps' reads (a reported hazard on correct code), while it leaves tensor copies to the unit.
__device__ __forceinline__ void tma_load_2d(u32 dst, const RaggedTmaMap* map, int c0, int c1, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// Bulk asynchronous reduction: `bytes` (a multiple of 16) of f32 at shared address src added
// element-wise into global memory at dst, in this thread's current bulk group.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's bulk groups are incomplete (their global writes performed).
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Until at most N of this thread's bulk groups still read their shared source (which may then be
// rewritten).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void named_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
// Registers a block of `threads` holds from launch under __launch_bounds__(threads, 1): 64 Ki per
// SM over its threads, in ptxas's granules of 8 per thread. setmaxnreg moves registers between the
// block's warpgroups within this pool only: a budget over it leaves setmaxnreg.inc waiting forever.
__host__ __device__ constexpr int setmaxnreg_pool(int threads) { return 65536 / threads / 8 * 8 * threads; }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
