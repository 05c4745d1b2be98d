#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention on the problem cpu_sdpa benchmarks.

Takes the same arguments as `cargo bench -p ragged-reference --bench cpu_sdpa` and prints one
`torch ...` line in the same format. PyTorch has no ragged SDPA on the CPU, so each sequence is
one call on a [1, H, L, D] tensor, which is how a user would run a ragged batch through it.
FLOPs count only admitted (query, key) pairs, exactly as the Rust benchmark does: 4·D per pair
and head forward, 2.5 times that backward. `--backward` times autograd's backward of SDPA alone
(`torch.autograd.grad` on one retained forward graph per sequence, dO random), the same work
as the Rust `sdpa_backward`: dQ, dK and dV from Q, K, V, O, LSE and dO. `--threads N` calls
`torch.set_num_threads(N)` (the Rust side reads RAYON_NUM_THREADS).
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
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    lens = [int(x) for x in args.lens.split(",")]
    gen = torch.Generator().manual_seed(0)

    def rand(n: int) -> torch.Tensor:
        x = torch.rand(1, args.heads, n, args.dim, generator=gen, dtype=torch.float32)
        return x.mul(2).sub(1).to(dtype)

    scale = 1.0 / args.dim ** 0.5
    seqs = [tuple(rand(n) for _ in range(3)) for n in lens]

    if args.backward:
        graphs = []
        for q, k, v in seqs:
            q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal, scale=scale)
            graphs.append((out, (q, k, v), rand(out.shape[2])))

        def run() -> None:
            for out, inputs, d_o in graphs:
                torch.autograd.grad(out, inputs, d_o, retain_graph=True)
    else:

        def run() -> None:
            with torch.inference_mode():
                for q, k, v in seqs:
                    F.scaled_dot_product_attention(q, k, v, is_causal=args.causal, scale=scale)

    run()
    times = []
    start, cpu0 = time.perf_counter(), time.process_time()
    while len(times) < 3 or time.perf_counter() - start < args.min_time:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    # Mean CPU time per call (all threads), as the Rust side reports it.
    cpu = (time.process_time() - cpu0) / len(times)
    best = min(times)
    pairs = [n * (n + 1) // 2 if args.causal else n * n for n in lens]
    flops = sum(4 * p * args.dim * args.heads for p in pairs) * (2.5 if args.backward else 1.0)
    direction = "backward" if args.backward else "forward"
    print(
        f"torch {direction} lens={args.lens} heads={args.heads} dim={args.dim} "
        f"causal={str(args.causal).lower()} dtype={args.dtype} gflop={flops / 1e9:.3f} "
        f"best_ms={best * 1e3:.3f} gflops={flops / best / 1e9:.1f} cpu_gflops={flops / cpu / 1e9:.1f} "
        f"threads={torch.get_num_threads()} isa={torch.backends.cpu.get_cpu_capability().lower()}"
    )


if __name__ == "__main__":
    main()
