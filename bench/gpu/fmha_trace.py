#!/usr/bin/env python3
"""Where a persistent forward's time goes between two work items, on the device (issue 14).

Compiles the persistent TMA study set with -DRAGGED_FMHA_TRACE (fmha/sm90_wsp.cuh: the SM's clock at
each item's hand-over points, from the first consumer thread and the producer's thread 0), runs one
entry point once per problem after warm-up calls, and prints per problem:

  - a least-squares fit of each item's time (consumer, from one item's start to the next one's, on
    the same SM) against its key blocks: time = a * blocks + b. b is what an item costs beyond its
    blocks; the whole call's time is a * blocks + b * items per SM, so b * items / time is the share
    the item boundaries take;
  - the medians of the consumer's phases at an item's start (decode of the item, the wait for Q, the
    wait for the first K, the turn and the first S's issue, the wait for that S and the previous
    item's last P V with the O store, the first block's softmax) and of the producer's (the work
    counter's draw, the decode, the Q fill's wait and issue), and how far ahead of the consumers the
    producer issued Q;
  - how unevenly the blocks end (the last item's end per block against the latest).

  python3 bench/gpu/fmha_trace.py [--engine wspt_bf16_d128] [--problems ragged-mix 8x2048 2x8192]

The stamps cost a few instructions and a store each per item; the traced call's time is printed
beside the problem so that the perturbation is visible (compare with fmha_wst.py --time).
"""

import argparse
import os
import sys

import numpy as np
import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmha_dev  # noqa: E402
import fmha_wst  # noqa: E402

# fmha/sm90_wsp.cuh's layout: [block][item][event] u64.
BLOCKS, ITEMS, EVENTS = 160, 128, 16
C_START, C_DECODED, C_Q, C_K, C_S_ISSUED, C_S_DONE, C_SOFTMAX, C_LAST_PV, C_BLOCKS, C_ITEM = range(10)
P_TOP, P_DRAWN, P_DECODED, P_Q_ISSUED, P_FILLS_DONE = range(10, 15)
C_NS = 15
PROBLEMS = {
    "ragged-mix": [3874, 2585, 2823, 3682, 2396, 1024],
    "8x2048": [2048] * 8,
    "2x8192": [8192] * 2,
}


def analyse(tr, label, call_ms):
    """tr: [BLOCKS, ITEMS, EVENTS] uint64; prints the fit and the phase medians."""
    items, phases, producer, ahead, ends = [], {k: [] for k in range(7)}, {k: [] for k in range(3)}, [], []
    rates = []
    for b in range(BLOCKS):
        t = tr[b].astype(np.int64)
        # An item the consumer started has its start stamp; an item with key blocks has its block count.
        started = np.nonzero(t[:, C_START])[0]
        if len(started) == 0:
            continue
        n = started[-1] + 1
        if n >= ITEMS:
            print(f"  block {b}: more than {ITEMS} items, the rest untraced")
        ns = t[:n, C_NS]
        if n > 1 and ns[n - 1] > ns[0]:
            rates.append((t[n - 1, C_START] - t[0, C_START]) / (ns[n - 1] - ns[0]))
        for r in range(n - 1):
            if t[r, C_BLOCKS] > 0 and t[r + 1, C_START] > 0:
                items.append((t[r, C_BLOCKS], t[r + 1, C_START] - t[r, C_START]))
        for r in range(n):
            if t[r, C_BLOCKS] == 0:
                continue
            seq = [t[r, C_START], t[r, C_DECODED], t[r, C_Q], t[r, C_K], t[r, C_S_ISSUED], t[r, C_S_DONE],
                   t[r, C_SOFTMAX]]
            for k in range(6):
                phases[k].append(seq[k + 1] - seq[k])
            if t[r, P_DRAWN] and t[r, P_DECODED] and t[r, P_Q_ISSUED]:
                producer[0].append(t[r, P_DRAWN] - t[r, P_TOP])
                producer[1].append(t[r, P_DECODED] - t[r, P_DRAWN])
                producer[2].append(t[r, P_Q_ISSUED] - t[r, P_DECODED])
                ahead.append(t[r, C_Q] - t[r, P_Q_ISSUED])
        last = max((r for r in range(n) if t[r, C_LAST_PV]), default=None)
        if last is not None:
            ends.append(t[last, C_LAST_PV])
    if not items:
        print(f"{label}: no items traced")
        return
    ghz = float(np.median(rates)) if rates else float("nan")
    us = lambda cycles: cycles / ghz / 1e3  # noqa: E731
    x = np.array([i[0] for i in items], dtype=np.float64)
    y = np.array([i[1] for i in items], dtype=np.float64)
    if len(np.unique(x)) < 2:
        print(f"{label}: every item has {int(x[0])} key blocks, so a and b cannot be separated; median item "
              f"{np.median(y) / ghz / 1e3 if rates else float('nan'):.2f} us")
        return
    a, b0 = np.linalg.lstsq(np.stack([x, np.ones_like(x)], 1), y, rcond=None)[0]
    resid = y - (a * x + b0)
    n_items = len(items)
    blocks_total = x.sum()
    print(f"{label}: traced call {call_ms:.3f} ms; SM clock {ghz:.3f} GHz (clock64 against globaltimer); "
          f"{n_items} consecutive item pairs on {len(ends)} blocks")
    print(f"  item time = a * key blocks + b: a = {us(a):.3f} us per block, b = {us(b0):.2f} us per item "
          f"(residual median |{us(np.median(np.abs(resid))):.2f}| us); b's share of these items' time "
          f"{b0 * n_items / y.sum() * 100:.1f} %, a's {a * blocks_total / y.sum() * 100:.1f} %")
    for lo, hi in ((1, 2), (2, 4), (4, 8), (8, 16), (16, 1 << 30)):
        sel = (x >= lo) & (x < hi)
        if sel.any():
            print(f"    items of {lo}-{hi - 1 if hi < 1 << 30 else 'more'} blocks: {int(sel.sum())}, median "
                  f"{us(np.median(y[sel])):.2f} us, beyond a * blocks {us(np.median(resid[sel] + b0)):.2f} us")
    names = ["decode", "wait Q", "wait K0", "turn + issue S0", "wait S0 / last P V + O store", "softmax 0"]
    print("  consumer at an item's start (median / p90 us): "
          + "; ".join(f"{nm} {us(np.median(phases[k])):.2f} / {us(np.percentile(phases[k], 90)):.2f}"
                      for k, nm in enumerate(names)))
    pnames = ["draw", "decode", "Q wait + issue"]
    if producer[0]:
        print("  producer per item (median / p90 us): "
              + "; ".join(f"{nm} {us(np.median(producer[k])):.2f} / {us(np.percentile(producer[k], 90)):.2f}"
                          for k, nm in enumerate(pnames))
              + f"; Q issued before the consumer had it: median {us(np.median(ahead)):.2f} us, "
              f"p10 {us(np.percentile(ahead, 10)):.2f} us")
    e = np.array(ends, dtype=np.float64)
    print(f"  block ends: latest - median {us(e.max() - np.median(e)):.1f} us, latest - earliest "
          f"{us(e.max() - e.min()):.1f} us (clocks of different SMs: approximate)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default="wspt_bf16_d128")
    ap.add_argument("--problems", nargs="+", default=["ragged-mix", "8x2048", "2x8192"])
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args()
    import torch

    fmha_dev.PROGRESS = False
    mod = fmha_dev.compile_module(False, study=True, defines=("-DRAGGED_FMHA_WST_STUDY", "-DRAGGED_FMHA_TRACE"))
    eng = fmha_wst.engine(mod, fmha_wst.PREFIX + args.engine)
    d, dv = fmha_wst.head_dims(eng.name)
    trace = cp.ndarray((BLOCKS, ITEMS, EVENTS), cp.uint64, mod.get_global("ragged_fmha_trace"))
    for prob in args.problems:
        lens = PROBLEMS[prob]
        for causal in (False, True):
            p, bufs, _ = fmha_wst.ragged_problem(torch, d, dv, lens, causal, h=args.heads)
            ws = eng.workspace(len(lens), max(lens))
            for _ in range(5):
                eng.launch(p, ws)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            trace.fill(0)
            torch.cuda.synchronize()
            start.record()
            eng.launch(p, ws)
            stop.record()
            torch.cuda.synchronize()
            label = f"{args.engine} {prob} H={args.heads} causal={int(causal)}"
            analyse(trace.get(), label, start.elapsed_time(stop))
            del bufs
    return 0


if __name__ == "__main__":
    sys.exit(main())
