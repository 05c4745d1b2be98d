#!/usr/bin/env python3
"""Repeatability of the forward at scale: each engine called N times on the ragged mix, every output
compared bit for bit with its first call's.

A kernel that computes the same thing in the same order returns the same bits every call; a call
that differs has a race. Session 17 (bench/gpu/NOTES.md) found one this way that compute-sanitizer
and the case suite had both passed: the study form of d192/128 without EO wrote wrong values into a
few rows per call, different rows each time, on the causal ragged mix only (the race needs the
scale: 1 000+ items on every SM). This is that procedure's kept form.

  python3 bench/gpu/fmha_repeat.py [--reps 10] [--engines NAME ...] [--alternate] [--modes ...]

--alternate: the calls alternate between two offsets tensors (the mix's lengths and the same lengths
reversed), each output compared with the first call of its own offsets: every call then works from
a different tile list than the call before it, which is how session 18 (NOTES.md) met a rare race in
the d128 form that ten calls of one offsets tensor had passed.

Default engines: the plugin set's bf16 forward for every head dim. Problems: the ragged mix (seed 7,
H 16, bf16) causal bottom-right, causal top-left and non-causal. Exit status 1 if any call differs.
"""

import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import fmha_dev  # noqa: E402
from fmha_dev import Engine, ragged_mix  # noqa: E402
from output_diff import describe  # noqa: E402

PLUGIN = ["ragged_fmha_fwd_bf16_d64", "ragged_fmha_fwd_bf16_d96", "ragged_fmha_fwd_bf16_d128",
          "ragged_fmha_fwd_bf16_d256", "ragged_fmha_fwd_bf16_d192v128"]


def head_dims(name):
    """(Q/K, V) head dims from an entry point's name: ..._d96..., ..._d192v128..."""
    m = re.search(r"_d(\d+)(?:v(\d+))?", name)
    d = int(m.group(1))
    return d, int(m.group(2) or d)


def ragged_problem(torch, d, dv, lens, causal, br=1, h=16):
    """One ragged-mix problem on the device: random bf16 Q, K (d) and V (dv) in [-1, 1), packed by token
    ([T, h, d]), an O and an LSE to write, and the engines' launch parameters (causal: the band's
    right edge at 0, aligned bottom-right with br = 1). Returns (params, buffers by name, token starts)."""
    B, T = len(lens), sum(lens)
    tok = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    q, k = ((torch.rand((T, h, d), device="cuda") * 2 - 1).to(torch.bfloat16) for _ in range(2))
    v = (torch.rand((T, h, dv), device="cuda") * 2 - 1).to(torch.bfloat16)
    o = torch.empty_like(v)
    lse = torch.empty((B, h, max(lens)), dtype=torch.float32, device="cuda")
    # Element offsets of Q / K rows (h d per token); V and O rows follow by token.
    off = cp.asarray((tok * h * d).astype(np.int32))
    p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(),
             q_off=off.data.ptr, q_off_bytes=4, q_mult=1, kv_off=off.data.ptr, kv_off_bytes=4, kv_mult=1,
             q_seq=h * d, q_head=d, k_seq=h * d, k_head=d, v_seq=h * dv, v_head=dv, o_seq=h * dv, o_head=dv,
             s_q_max=max(lens), s_kv_max=max(lens), batch=B, h_q=h, h_kv=h, scale=1.0 / math.sqrt(d), left=-1,
             right=0 if causal else -1, br=br, lse_bstride=h * max(lens), lse_seq=1, lse_head=max(lens))
    return p, dict(q=q, k=k, v=v, o=o, lse=lse, off=off), tok


def back_to_back(torch, eng, p, ws, o, offsets, reps, batch):
    """Calls enqueued `batch` at a time into their own O buffers, offsets alternating; each compared
    with a call made alone with the same offsets."""
    refs = []
    for off in offsets:
        p["q_off"] = p["kv_off"] = off
        p["o"] = o.data_ptr()
        o.fill_(float("nan"))
        torch.cuda.synchronize()
        eng.launch(p, ws)
        torch.cuda.synchronize()
        refs.append(o.clone())
    outs = [torch.empty_like(o) for _ in range(batch)]
    results = []
    for start in range(0, reps, batch):
        n = min(batch, reps - start)
        for j in range(n):
            outs[j].fill_(float("nan"))
        torch.cuda.synchronize()
        for j in range(n):
            i = start + j
            p["q_off"] = p["kv_off"] = offsets[i % len(offsets)]
            p["o"] = outs[j].data_ptr()
            eng.launch(p, ws)
        torch.cuda.synchronize()
        for j in range(n):
            i = start + j
            results.append(describe(torch, i, outs[j], refs[i % len(offsets)]))
    p["o"] = o.data_ptr()
    return results, sum(1 for r in results if r != "same")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--engines", nargs="+")
    ap.add_argument("--alternate", action="store_true", help="alternate two offsets tensors (see above)")
    ap.add_argument("--back-to-back", type=int, default=0, metavar="N",
                    help="enqueue the calls N at a time, each into its own O, without synchronising in "
                         "between (as an application's stream would); the references are calls made alone")
    ap.add_argument("--modes", nargs="+", default=["causal-br", "causal-tl", "non-causal"],
                    choices=["causal-br", "causal-tl", "non-causal"])
    args = ap.parse_args()
    import torch

    mod = fmha_dev.compile_module()
    names = args.engines or PLUGIN
    lens = ragged_mix(7)
    print("ragged mix lengths:", lens, flush=True)
    torch.manual_seed(0)
    differing = 0
    for name in names:
        d, dv = head_dims(name)
        eng = Engine(mod, name, d, dv)
        for mode, causal, br in (("causal-br", 1, 1), ("causal-tl", 1, 0), ("non-causal", 0, 0)):
            if mode not in args.modes:
                continue
            p, bufs, _ = ragged_problem(torch, d, dv, lens, causal, br)
            o = bufs["o"]
            ws = eng.workspace(len(lens), max(lens))
            offsets = [p["q_off"]]
            if args.alternate:
                tok = np.concatenate([[0], np.cumsum(lens[::-1])]).astype(np.int64)
                rev = cp.asarray((tok * p["q_seq"]).astype(np.int32))
                offsets.append(rev.data.ptr)
            first, results = {}, []
            if args.back_to_back:
                results, n_diff = back_to_back(torch, eng, p, ws, o, offsets, args.reps, args.back_to_back)
                differing += n_diff
                bad = [r for r in results if r != "same"]
                print(f"{name:<40} {mode:<10} {args.reps} calls, {args.back_to_back} back to back: "
                      + ("all identical" if not bad else f"{len(bad)} differ: " + "; ".join(bad[:6])), flush=True)
                continue
            for i in range(args.reps):
                which = i % len(offsets)
                p["q_off"] = p["kv_off"] = offsets[which]
                o.fill_(float("nan"))
                eng.launch(p, ws)
                torch.cuda.synchronize()
                if which not in first:
                    first[which] = o.clone()
                    results.append("first" + (" (NaN in output)" if torch.isnan(o).any().item() else ""))
                    continue
                result = describe(torch, i, o, first[which])
                differing += 0 if result == "same" else 1
                results.append(result)
            bad = [r for r in results if r not in ("same", "first")]
            print(f"{name:<40} {mode:<10} {args.reps} calls: "
                  + ("all identical" if not bad else f"{len(bad)} differ: " + "; ".join(bad[:4])), flush=True)
    print(f"repeatability: {'ok' if differing == 0 else f'{differing} calls differ from their first'}", flush=True)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
