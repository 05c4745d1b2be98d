#!/usr/bin/env python3
"""Warp-specialization study of issue 14 (bench/gpu/NOTES.md, sessions 5-6), on the device.

Compiles the -DRAGGED_FMHA_WS_STUDY build once and, in one process, checks the warp-specialized entry
points (cp.async producer `ws`, TMA producer `wst`, persistent `wsp`) with fmha_dev's correctness
suite and times them beside the wgmma body and FA2 varlen.

Usage:
  python3 bench/gpu/fmha_ws.py --round [--check-only] [--tma-only] [--problems ragged-mix ...]
  python3 bench/gpu/fmha_ws.py --one NAME         # two small cases on one entry (hang diagnosis)
  python3 bench/gpu/fmha_ws.py --sanitize [--with-persist]   # the compute-sanitizer case
"""

import argparse
import os
import sys
import time

import numpy as np
import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmha_dev  # noqa: E402
from fmha_dev import Engine, benchmark, compile_module, correctness, print_table, run_case  # noqa: E402
from fmha_sanitize import sanitize_one  # noqa: E402

# The warp-specialized body (issue 14): default shapes and tuning variants.
WS = {(dt, d, d): f"ragged_fmha_fwd_ws_{dt}_d{d}" for d in (64, 128) for dt in ("bf16", "f16")}
WS_EXTRA = {
    64: ["ragged_fmha_fwd_ws_bf16_d64_c3"],
    128: ["ragged_fmha_fwd_ws_bf16_d128_nopp", "ragged_fmha_fwd_ws_bf16_d128_c3"],
}
# The persistent variant (a static snake order over the longest-first item list).
WSP = {("bf16", d, d): f"ragged_fmha_fwd_wsp_bf16_d{d}" for d in (64, 128)}
WSP_F16 = {("f16", d, d): f"ragged_fmha_fwd_wsp_f16_d{d}" for d in (64, 128)}  # sanitizer case only
# The wgmma body of sm90.cuh under its own name in the study build (the plugin's body before session 5).
WGMMA = {d: f"ragged_fmha_fwd_sm90_bf16_d{d}" for d in (64, 128)}
# The warp-specialized body with the TMA producer (one warp, tensor maps; fmha_tma.py) and its variants.
WST = {(dt, d, d): f"ragged_fmha_fwd_wst_{dt}_d{d}" for d in (64, 128) for dt in ("bf16", "f16")}
WST_EXTRA = {
    64: ["ragged_fmha_fwd_wst_bf16_d64_c3"],
    128: ["ragged_fmha_fwd_wst_bf16_d128_s3", "ragged_fmha_fwd_wst_bf16_d128_c3"],
}


def sanitize_ws(with_persist):
    """The sanitizer case on the warp-specialized entry points, TMA ones included (and the persistent ones);
    only their fp16 entries are compiled."""
    mod = compile_module(False, study=True, defines=("-DRAGGED_FMHA_WS_SANITIZE",))
    tables = (WS, WST, WSP_F16) if with_persist else (WS, WST)
    return max(sanitize_one(mod, d, d, left, right, name=table[("f16", d, d)])
               for table in tables for d in (64, 128) for left, right in [(-1, 0), (16, 4)])


def ws_one(name, seed):
    """Two small cases on one entry point, each result printed as soon as it is known."""
    import torch

    fmha_dev.PROGRESS = True
    mod = compile_module(False, study=True)
    d = 64 if "_d64" in name else 128
    dtype = "f16" if "_f16_" in name else "bf16"
    eng = Engine(mod, name, d)
    rng = np.random.default_rng(seed)
    bad = 0
    for mname, right, br in [("none", -1, 0), ("causal-br", 0, 1)]:
        ok, msg = run_case(torch, eng, dtype, rng, lq=[100, 0, 300], lkv=[200, 5, 300], h_q=4, h_kv=2, right=right,
                           br=br, label=f"{name} {mname}")
        print(("PASS " if ok else "FAIL ") + msg, flush=True)
        bad += 0 if ok else 1
    return 1 if bad else 0


def ws_round(args):
    """One process, one compile (the study build): correctness of the warp-specialized entry points
    (full suite for the ws and wsp defaults, a short one for the variants), then the three problems
    at D = 128 and 64 for the wgmma body, every ws entry and FA2 varlen on the same buffers."""
    import torch

    fmha_dev.PROGRESS = True
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__, "cupy", cp.__version__,
          "seed", args.seed, flush=True)
    mod = compile_module(False, study=True)
    ws = {key: Engine(mod, name, key[1], key[2]) for key, name in WS.items()}
    wst = {key: Engine(mod, name, key[1], key[2]) for key, name in WST.items()}
    wsp = {key: Engine(mod, name, key[1], key[2]) for key, name in WSP.items()}
    extra = {d: [Engine(mod, n, d) for n in WST_EXTRA[d] + WS_EXTRA[d]] for d in (64, 128)}
    wgmma = {d: Engine(mod, n, d) for d, n in WGMMA.items()}
    results = correctness(torch, wst, args.seed + 7)
    if not args.tma_only:
        results += correctness(torch, ws, args.seed)
        results += correctness(torch, wsp, args.seed + 5)
    rng = np.random.default_rng(args.seed + 1)
    for d, engs in extra.items():
        for eng in engs:
            for mname, left, right, br in [("causal-br", -1, 0, 1), ("window-tl", 50, 3, 0), ("none", -1, -1, 0),
                                           ("window-br", 300, 0, 1)]:
                lq = [int(x) for x in rng.integers(0, 700, 5)]
                lkv = [int(x) for x in rng.integers(0, 700, 5)]
                lq[2] = 0
                results.append(run_case(torch, eng, "bf16", rng, lq=lq, lkv=lkv, h_q=4, h_kv=2, left=left,
                                        right=right, br=br, label=f"{eng.name} {mname}"))
    n_bad = 0
    for ok, msg in results:
        print(("PASS " if ok else "FAIL ") + msg, flush=True)
        n_bad += 0 if ok else 1
    print(f"correctness (ws): {len(results) - n_bad}/{len(results)} passed", flush=True)
    if args.check_only:
        return 1 if n_bad else 0
    if n_bad:
        print("WARNING: correctness failures above; timings below include a wrong kernel", flush=True)
    by_d = {d: [wgmma[d], ws[("bf16", d, d)], wst[("bf16", d, d)], wsp[("bf16", d, d)]] + extra[d] for d in (128, 64)}
    rows = benchmark(torch, mod, by_d, cudnn=False, problems_only=args.problems)
    print_table(rows, by_d)
    return 1 if n_bad else 0


def ws_focus(args):
    """--round --engines NAME...: the full suite on the named bf16 entry points only, then their timing
    next to the wgmma body and the cp.async ws body of the same head dim."""
    import torch

    fmha_dev.PROGRESS = True
    mod = compile_module(False, study=True)
    named = [Engine(mod, n, 64 if "_d64" in n else 128) for n in args.engines]
    results = correctness(torch, {("bf16", e.d, e.d, e.name): e for e in named}, args.seed + 9)
    n_bad = 0
    for ok, msg in results:
        print(("PASS " if ok else "FAIL ") + msg, flush=True)
        n_bad += 0 if ok else 1
    print(f"correctness (focus): {len(results) - n_bad}/{len(results)} passed", flush=True)
    if args.check_only:
        return 1 if n_bad else 0
    dims = sorted({e.d for e in named}, reverse=True)
    by_d = {d: [Engine(mod, WGMMA[d], d), Engine(mod, WS[("bf16", d, d)], d)] + [e for e in named if e.d == d]
            for d in dims}
    rows = benchmark(torch, mod, by_d, cudnn=False, problems_only=args.problems)
    print_table(rows, by_d)
    return 1 if n_bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", nargs="+", help="--round on these bf16 entry points only")
    ap.add_argument("--round", action="store_true")
    ap.add_argument("--one", metavar="NAME")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--with-persist", action="store_true", help="--sanitize also on the persistent entries")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--tma-only", action="store_true", help="--round: the full suite on the TMA entries only")
    ap.add_argument("--problems", nargs="*", default=None, help="benchmark problems (default: all three)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    if args.sanitize:
        return sanitize_ws(args.with_persist)
    if args.one:
        return ws_one(args.one, args.seed)
    if args.round and args.engines:
        return ws_focus(args)
    if args.round:
        return ws_round(args)
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
