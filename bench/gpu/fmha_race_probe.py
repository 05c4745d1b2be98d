#!/usr/bin/env python3
"""Which synchronisation patterns of the warp-specialized bodies does compute-sanitizer's racecheck
model? Tiny kernels, each race-free by the PTX memory model, one pattern each; run under
`compute-sanitizer --tool racecheck` and read which kernel names it reports:

  probe_mbarrier       thread 0 writes, arrives on an mbarrier (count 1); everyone waits, then reads
  probe_named_exited   warpgroup 0 exits; warpgroups 1 and 2 write, bar.sync 3, 256, read each other's
  probe_named_alive    the same with warpgroup 0 alive (it waits at a final __syncthreads)
  probe_named_turns    probe_named_exited after the ws bodies' bar.arrive / bar.sync turn hand-over
  probe_turns_syncthreads  the turn hand-over, then probe_syncthreads's exchange (the ws epilogue now)
  probe_syncthreads    warpgroup 0 alive; 1 and 2 write, __syncthreads, read
"""

import sys

import cupy as cp

SRC = r"""
extern "C" {
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

__global__ void probe_mbarrier(int* out) {
    __shared__ int s[64];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned b = smem_u32(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 0; i < 64; ++i) s[i] = i * 3;
        asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(b) : "memory");
    }
    asm volatile("{\n.reg .pred done;\nW:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n@!done bra W;\n}\n"
                 ::"r"(b) : "memory");
    out[threadIdx.x] = s[threadIdx.x];
}

__device__ __forceinline__ void exchange_named(int* s, int* out, int t) {
    s[t] = t * 7;
    asm volatile("bar.sync 3, 256;\n" ::: "memory");
    out[t] = s[(t + 128) & 255];
}

__global__ void probe_named_exited(int* out) {
    __shared__ int s[256];
    if (threadIdx.x < 128) return;
    exchange_named(s, out, threadIdx.x - 128);
}

__global__ void probe_named_alive(int* out) {
    __shared__ int s[256];
    if (threadIdx.x >= 128) exchange_named(s, out, threadIdx.x - 128);
    __syncthreads();
}

__global__ void probe_named_turns(int* out) {
    __shared__ int s[256];
    if (threadIdx.x < 128) return;
    const int c = (threadIdx.x >> 7) - 1;  // 0 or 1
    if (c == 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    for (int i = 0; i < 3; ++i) {
        if (c == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
        else asm volatile("bar.sync 2, 256;\n" ::: "memory");
        if (c == 0) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
        else asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    }
    if (c == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
    exchange_named(s, out, threadIdx.x - 128);
}

__global__ void probe_turns_syncthreads(int* out) {
    __shared__ int s[256];
    if (threadIdx.x < 128) {
        __syncthreads();
        __syncthreads();
        return;
    }
    const int c = (threadIdx.x >> 7) - 1;
    if (c == 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    for (int i = 0; i < 3; ++i) {
        if (c == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
        else asm volatile("bar.sync 2, 256;\n" ::: "memory");
        if (c == 0) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
        else asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    }
    if (c == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
    const int t = threadIdx.x - 128;
    __syncthreads();
    s[t] = t * 5;
    __syncthreads();
    out[t] = s[(t + 128) & 255];
}

__global__ void probe_syncthreads(int* out) {
    __shared__ int s[256];
    if (threadIdx.x < 128) {
        __syncthreads();
        __syncthreads();
        return;
    }
    const int t = threadIdx.x - 128;
    __syncthreads();
    s[t] = t * 5;
    __syncthreads();
    out[t] = s[(t + 128) & 255];
}
}
"""

PROBES = [("probe_mbarrier", 64, lambda t: (t * 3) if t < 64 else None),
          ("probe_named_exited", 384, lambda t: ((t + 128) & 255) * 7),
          ("probe_named_alive", 384, lambda t: ((t + 128) & 255) * 7),
          ("probe_named_turns", 384, lambda t: ((t + 128) & 255) * 7),
          ("probe_turns_syncthreads", 384, lambda t: ((t + 128) & 255) * 5),
          ("probe_syncthreads", 384, lambda t: ((t + 128) & 255) * 5)]


def main():
    mod = cp.RawModule(code=SRC, options=("-arch=sm_90a", "-std=c++17"), backend="nvrtc")
    bad = 0
    for name, threads, want in PROBES:
        out = cp.zeros(256, dtype=cp.int32)
        mod.get_function(name)((1,), (threads,), (out,))
        cp.cuda.runtime.deviceSynchronize()
        got = out.get()
        n = 64 if name == "probe_mbarrier" else 256
        ok = all(int(got[t]) == want(t) for t in range(n))
        bad += 0 if ok else 1
        print(f"{name}: {'ok' if ok else 'WRONG VALUES'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
