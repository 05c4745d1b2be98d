#!/usr/bin/env python3
"""Where the forward's pre-pass spends its time: %globaltimer at the phase boundaries of its
speculative path (prepass.cuh, built with -DRAGGED_PREPASS_STAMPS: entry, first read decoded, cost
buckets built, griddepcontrol.wait returned, inputs re-read and checked, tile list scattered, count
and flag stored), beside the kernel's duration as CUPTI records it (torch.profiler), so the time
before the entry stamp and after the last one (launch, the end-of-kernel flush) shows as well.

Launched through cupy, in plain stream order (the wait returns at once): two settings per problem,
  after forward  the pre-pass right after a forward on the ragged mix (its inputs evicted from L2 by
                 the forward's stream of K / V, as between two executes)
  back to back   the pre-pass right after another pre-pass (its inputs in L2)

With --ab DIR (a copy of another tree's kernels/cuda-fmha/cuda), that tree's pre-pass is measured in the same
process, its calls alternating with this tree's, so that a change to the pre-pass is compared on one
machine and one GPU state (the cold-start phases moved by up to 2 µs between machines in session 19).

  python3 bench/gpu/prepass_phases.py [--calls 20] [--ab DIR]
"""

import argparse
import os
import statistics
import sys

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fmha_dev import Engine, compile_module, ragged_mix  # noqa: E402
from fmha_wst import ragged_problem  # noqa: E402
from plugin_timeline import kernels_of  # noqa: E402

PHASES = ["first read", "buckets", "wait", "re-read", "scatter", "finish"]


def stamps(mod):
    return cp.ndarray((7,), cp.uint64, mod.get_global("ragged_prepass_stamps")).get().astype(float)


def one_setting(torch, forms, p, calls, after_forward):
    """forms: [(label, module, engine, workspace)]; each call runs every form in turn."""
    rows = {label: [] for label, *_ in forms}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            for label, mod, eng, ws in forms:
                if after_forward:
                    eng.launch(p, ws)
                else:
                    eng.launch_prepass(p, ws)
                eng.launch_prepass(p, ws)
                cp.cuda.runtime.deviceSynchronize()
                rows[label].append(stamps(mod))
    pre = [k for k in kernels_of(prof) if k[0].startswith("ragged_fmha_prepass")]
    # Per call and form two pre-passes, the second one measured; forms in turn.
    n = len(forms)
    for f, (label, *_) in enumerate(forms):
        durations = [e - s for _, s, e in pre[2 * f + 1::2 * n]]
        deltas = [[(r[i + 1] - r[i]) / 1000.0 for i in range(6)] for r in rows[label]]
        inside = [(r[6] - r[0]) / 1000.0 for r in rows[label]]
        med = [statistics.median(col) for col in zip(*deltas)]
        d_med = statistics.median(durations) if durations else float("nan")
        i_med = statistics.median(inside)
        cells = "  ".join(f"{name} {v:5.2f}" for name, v in zip(PHASES, med))
        setting = "after forward" if after_forward else "back to back "
        print(f"  {label:<5} {setting}: {cells}  | inside {i_med:5.2f}, CUPTI duration {d_med:5.2f}, "
              f"outside the stamps {d_med - i_med:5.2f} µs", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--ab", metavar="DIR", help="another tree's kernels/cuda-fmha/cuda, measured alternately")
    args = ap.parse_args()
    import torch

    modules = [("tree", compile_module(False, defines=("-DRAGGED_PREPASS_STAMPS",)))]
    if args.ab:
        other = os.path.join(os.path.abspath(args.ab), "ragged_fmha_fwd.cu")
        modules.append(("ab", compile_module(False, defines=("-DRAGGED_PREPASS_STAMPS",), source=other)))
    lens = ragged_mix(7)
    print("ragged mix lengths:", lens, "; µs, medians over", args.calls, "calls", flush=True)
    for d in (128, 64):
        engines = [(label, mod, Engine(mod, f"ragged_fmha_fwd_bf16_d{d}", d)) for label, mod in modules]
        for causal in (False, True):
            p, bufs, _ = ragged_problem(torch, d, d, lens, causal)
            forms = [(label, mod, eng, eng.workspace(len(lens), max(lens))) for label, mod, eng in engines]
            for _, _, eng, ws in forms:
                eng.launch(p, ws)
            cp.cuda.runtime.deviceSynchronize()
            print(f"d{d} causal={int(causal)}", flush=True)
            for after_forward in (True, False):
                one_setting(torch, forms, p, args.calls, after_forward)
            del bufs
    return 0


if __name__ == "__main__":
    sys.exit(main())
