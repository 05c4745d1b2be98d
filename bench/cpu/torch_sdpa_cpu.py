#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention on the problem cpu_sdpa benchmarks.

Takes the same arguments as `cargo bench -p ragged-kernels --bench cpu_sdpa` and prints one
`torch ...` line in the same format. PyTorch has no ragged SDPA on the CPU, so each sequence is
one call on a [1, H, L, D] tensor, which is how a user would run a ragged batch through it.
FLOPs count only admitted (query, key) pairs, exactly as the Rust benchmark does.
"""

import argparse
import time

import torch
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lens", default="64,192,320,448,576,704,832,1024")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    parser.add_argument("--min-time", type=float, default=2.0)
    args = parser.parse_args()

    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    lens = [int(x) for x in args.lens.split(",")]
    gen = torch.Generator().manual_seed(0)
    seqs = [
        tuple(torch.rand(1, args.heads, n, args.dim, generator=gen, dtype=torch.float32).mul(2).sub(1).to(dtype)
              for _ in range(3))
        for n in lens
    ]
    scale = 1.0 / args.dim ** 0.5

    def run() -> None:
        for q, k, v in seqs:
            F.scaled_dot_product_attention(q, k, v, is_causal=args.causal, scale=scale)

    with torch.inference_mode():
        run()
        times = []
        start = time.perf_counter()
        while len(times) < 3 or time.perf_counter() - start < args.min_time:
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    best = min(times)
    pairs = [n * (n + 1) // 2 if args.causal else n * n for n in lens]
    flops = sum(4 * p * args.dim * args.heads for p in pairs)
    print(
        f"torch lens={args.lens} heads={args.heads} dim={args.dim} causal={str(args.causal).lower()} "
        f"dtype={args.dtype} gflop={flops / 1e9:.3f} best_ms={best * 1e3:.3f} gflops={flops / best / 1e9:.1f} "
        f"threads={torch.get_num_threads()}"
    )


if __name__ == "__main__":
    main()
