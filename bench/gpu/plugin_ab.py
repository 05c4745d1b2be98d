"""Two builds of the plugin timed against each other on the device, forward and backward, in one
call: each round runs plugin_bench.py and plugin_bench_bwd.py (--only-ours) on A and on B, in the
order A B B A so that a drift of the card's clocks cancels, and the table gives each problem's
median TFLOP/s per build and B / A. With `fp8` among --passes each round also runs
plugin_bench_fp8.py (--only-ours) over the --fp8 problems (cuDNN's FP8 graph shape: e4m3 O, the six
scalars as device tensors, both amax outputs).

  python3 bench/gpu/plugin_ab.py --a OLD.so --b NEW.so --graphs .carry/bench/graphs \
      [--rounds 2] [--passes fwd bwd fp8] [--forward NAME ...] [--backward REGEX] [--fp8 NAME ...]

--a-env / --b-env KEY=VALUE set environment variables for one side's processes alone, so that
one build's two selections can be timed against each other, e.g. the D 64 backward's dK/dV
kernel with 64 query rows per step (A) against its default of 128 (B):

  python3 bench/gpu/plugin_ab.py --a P.so --b P.so --a-env RAGGED_SDPA_CUDA_BWD_D64_BM64=1 \
      --graphs .carry/bench/graphs --passes bwd --backward 'ragged-mix_d64_'

Before the rounds each build runs every pass once untimed (--calls-only 1, up to --warm-timeout
seconds; all of these processes at once), so that a build whose kernels are not yet in the NVRTC
disk cache compiles them there and not inside a timed process's --timeout (a cold backward program
takes longer than 50 s); --no-warm skips it.

Defaults: the ragged-mix problems (every forward head dim, the backward's D 64 and 128, the FP8
forward's D 64, 128 and 256), passes fwd and bwd. The FP8 forward alone, e.g. at D 128:

  python3 bench/gpu/plugin_ab.py --a OLD.so --b NEW.so --graphs .carry/bench/graphs --passes fp8 \
      --fp8 fp8_ragged-mix_d128_full fp8_ragged-mix_d128_causal
"""

import argparse
import concurrent.futures
import os
import re
import statistics
import subprocess
import sys

HERE = "bench/gpu"
ROW = re.compile(r"^\| (\S+) \| ([0-9/]+) \| (yes|no) \| ([0-9.]+)")
FORWARD = [f"ragged-mix_{d}_{m}" for d in ("d64", "d128", "d96", "d256", "d192v128")
           for m in ("full", "causal")]
FP8 = [f"fp8_ragged-mix_{d}_{m}" for d in ("d128", "d64", "d256") for m in ("full", "causal")]
PASSES = {"fwd": "plugin_bench.py", "bwd": "plugin_bench_bwd.py", "fp8": "plugin_bench_fp8.py"}


def run(script, plugin, graphs, extra, timeout, env=None, warm=False):
    """TFLOP/s of ours per problem from one run's closing table, or {} when it failed. warm: one
    untimed call of each problem (--calls-only 1) to fill the NVRTC cache; nothing is parsed."""
    cmd = [sys.executable, f"{HERE}/{script}", "--plugin", plugin, "--graphs", graphs,
           "--only-ours", *extra, *(["--calls-only", "1"] if warm else [])]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        print(f"  {script} on {plugin}{' (warm-up)' if warm else ''}: timed out after {timeout} s", flush=True)
        return {}
    out = done.stdout
    if warm:
        if done.returncode != 0:
            print(f"  {script} on {plugin} (warm-up): exit {done.returncode}; last lines:\n"
                  + "\n".join((out + done.stderr).splitlines()[-8:]), flush=True)
        return {}
    rows = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            mask = "causal" if m.group(3) == "yes" else "full"
            rows[f"{m.group(1)} D {m.group(2)} {mask}"] = float(m.group(4))
    if not rows:
        print(f"  {script} on {plugin}: no table (exit {done.returncode}); last lines:\n"
              + "\n".join((out + done.stderr).splitlines()[-8:]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the baseline plugin .so")
    ap.add_argument("--b", required=True, help="the plugin .so compared with it")
    ap.add_argument("--graphs", required=True, help="directory written by emit_bench_graphs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--forward", nargs="+", default=FORWARD, metavar="NAME")
    ap.add_argument("--backward", default=r"ragged-mix_d(64|128)_", metavar="REGEX")
    ap.add_argument("--fp8", nargs="+", default=FP8, metavar="NAME",
                    help="FP8 problems (problems_fp8.json names)")
    ap.add_argument("--passes", nargs="+", default=["fwd", "bwd"], choices=sorted(PASSES),
                    help="which benchmarks each round runs")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per benchmark process")
    ap.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True,
                    help="one untimed process per build and pass before the rounds (fills the NVRTC cache)")
    ap.add_argument("--warm-timeout", type=int, default=300, help="seconds per warm-up process")
    for side in ("a", "b"):
        ap.add_argument(f"--{side}-env", nargs="+", default=[], metavar="KEY=VALUE",
                        help=f"environment variables for {side.upper()}'s processes only")
    args = ap.parse_args()
    envs = {side: dict(kv.split("=", 1) for kv in getattr(args, f"{side}_env")) for side in ("a", "b")}

    extra = {"fwd": ["--problems", *args.forward], "bwd": ["--only", args.backward],
             "fp8": ["--problems", *args.fp8]}
    kinds = [k for k in PASSES if k in args.passes]
    runs = {k: {"a": [], "b": []} for k in kinds}
    if args.warm:
        # NVRTC compiles on the host's CPUs, one program at a time per process: warming every
        # build and pass in its own process at once takes the longest compile, not their sum.
        print("warm-up: " + ", ".join(f"{b.upper()} ({getattr(args, b)} {envs[b] or ''})"
                                      for b in ("a", "b")) + f", passes {' '.join(kinds)}, in parallel",
              flush=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2 * len(kinds)) as pool:
            jobs = [pool.submit(run, PASSES[kind], getattr(args, build), args.graphs, extra[kind],
                                args.warm_timeout, envs[build], True)
                    for build in ("a", "b") for kind in kinds]
            for job in jobs:
                job.result()
    for r in range(args.rounds):
        for build in ("a", "b", "b", "a"):
            plugin = getattr(args, build)
            print(f"round {r + 1}: {build.upper()} ({plugin} {envs[build] or ''})", flush=True)
            for kind in kinds:
                runs[kind][build].append(run(PASSES[kind], plugin, args.graphs, extra[kind],
                                             args.timeout, envs[build]))

    print("\n| pass | problem | A TFLOP/s (median) | B TFLOP/s (median) | B / A |")
    print("|---|---|---|---|---|")
    worst = None
    for kind in kinds:
        names = sorted({n for res in runs[kind]["a"] + runs[kind]["b"] for n in res})
        for name in names:
            a = [res[name] for res in runs[kind]["a"] if name in res]
            b = [res[name] for res in runs[kind]["b"] if name in res]
            if not a or not b:
                print(f"| {kind} | {name} | {len(a)} runs | {len(b)} runs | — |")
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            worst = min(worst, mb / ma) if worst is not None else mb / ma
            print(f"| {kind} | {name} | {ma:.1f} ({min(a):.1f}–{max(a):.1f}) | "
                  f"{mb:.1f} ({min(b):.1f}–{max(b):.1f}) | {mb / ma:.3f} |")
    if worst is None:
        print("no problem was timed on both builds")
        return 1
    print(f"\nlowest B / A: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
