#!/usr/bin/env python3
"""Repeatability of the forward at scale: each engine called N times on the ragged mix, every output
compared bit for bit with its first call's.

A kernel that computes the same thing in the same order returns the same bits every call; a call
that differs has a race. Session 17 (bench/gpu/NOTES.md) found one this way that compute-sanitizer
and the case suite had both passed: the study form of d192/128 without EO wrote wrong values into a
few rows per call, different rows each time, on the causal ragged mix only (the race needs the
scale: 1 000+ items on every SM). The one-off script of that session ran this procedure with the
study set's names; this is its kept form, not yet run on a device in this form.

  python3 bench/gpu/fmha_repeat.py [--reps 10] [--study] [--engines NAME ...]

Default engines: the plugin set's bf16 forward for every head dim. --study builds the persistent
study set instead (fmha_wst.py's names, e.g. wspt_bf16_d192v128). Problems: the ragged mix (seed 7,
H 16, bf16) causal bottom-right, causal top-left and non-causal. Exit status 1 if any call differs.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmha_dev  # noqa: E402
from fmha_dev import Engine, ragged_mix  # noqa: E402
from fmha_wst import head_dims, ragged_problem  # noqa: E402

PLUGIN = ["ragged_fmha_fwd_bf16_d64", "ragged_fmha_fwd_bf16_d96", "ragged_fmha_fwd_bf16_d128",
          "ragged_fmha_fwd_bf16_d256", "ragged_fmha_fwd_bf16_d192v128"]
STUDY_PREFIX = "ragged_fmha_fwd_"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--study", action="store_true", help="the persistent study set and its names")
    ap.add_argument("--engines", nargs="+")
    args = ap.parse_args()
    import torch

    if args.study:
        mod = fmha_dev.compile_module(False, study=True, defines=("-DRAGGED_FMHA_WST_STUDY",))
        names = [n if n.startswith(STUDY_PREFIX) else STUDY_PREFIX + n
                 for n in (args.engines or ["wspt_bf16_" + n[len("ragged_fmha_fwd_bf16_"):] for n in PLUGIN])]
    else:
        mod = fmha_dev.compile_module(False)
        names = args.engines or PLUGIN
    lens = ragged_mix(7)
    print("ragged mix lengths:", lens, flush=True)
    torch.manual_seed(0)
    differing = 0
    for name in names:
        d, dv = head_dims(name)
        eng = Engine(mod, name, d, dv)
        for causal, br in ((1, 1), (1, 0), (0, 0)):
            p, bufs, _ = ragged_problem(torch, d, dv, lens, causal, br)
            o = bufs["o"]
            ws = eng.workspace(len(lens), max(lens))
            first, results = None, []
            for _ in range(args.reps):
                o.fill_(float("nan"))
                eng.launch(p, ws)
                torch.cuda.synchronize()
                if first is None:
                    first = o.clone()
                    results.append("first" + (" (NaN in output)" if torch.isnan(o).any().item() else ""))
                    continue
                diff = (o.float() - first.float()).abs()
                rows = int((diff.amax(dim=(1, 2)) > 0).sum())
                same = rows == 0 and not torch.isnan(o).any().item()
                differing += 0 if same else 1
                results.append("same" if same else f"DIFFERS in {rows} rows (max {diff.max().item():.1e})")
            mode = "non-causal" if not causal else ("causal-br" if br else "causal-tl")
            bad = [r for r in results[1:] if r != "same"]
            print(f"{name:<40} {mode:<10} {args.reps} calls: "
                  + ("all identical" if not bad else f"{len(bad)} differ: " + "; ".join(bad[:4])), flush=True)
    print(f"repeatability: {'ok' if differing == 0 else f'{differing} calls differ from their first'}", flush=True)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
