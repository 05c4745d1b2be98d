#!/usr/bin/env python3
"""How close the persistent forward's item order can end to the work-conserving bound (no GPU).

The persistent forward's blocks draw items from a work counter in list order (fmha/tile_scheduler.cuh,
sched_item): the tile list sorted longest first, walked in chunks of HC heads (HC 4: for L2 reuse of
K / V) and, with TAIL T, the cheapest ceil(T * P / H) tiles walked last over every head. This model
replays that draw on P blocks with an item costing its key blocks + C0, each cost scaled by a random
factor (1 + N(0, JITTER)), and prints the mean efficiency = total work / (P * makespan) over TRIALS.
It knows nothing of L2 (which is why HC 4 exists), so it rates only the end of the schedule.

  python3 bench/lab/schedule_model.py [--bm 128] [--bn 128] [--sms 132] [--heads 16]
"""

import argparse
import heapq
import math
import random

RAGGED_MIX = [3874, 2585, 2823, 3682, 2396, 1024]  # fmha_dev.ragged_mix(7)


def tile_costs(lens, bm, bn, causal):
    """Key blocks per query tile, longest first (ties keep (batch, tile) order, as the list does)."""
    costs = []
    for length in lens:
        for t in range(math.ceil(length / bm)):
            last = min(length, (t + 1) * bm)
            costs.append(math.ceil((last if causal else length) / bn))
    return sorted(costs, reverse=True)


def item_order(costs, heads, hc, tail_tiles, c0):
    """Item costs in draw order: chunks of hc heads over the head part, then the tail over all."""
    head = 0 if hc == 0 else len(costs) - min(tail_tiles, len(costs))
    out = []
    for h0 in range(0, heads if head else 0, hc or 1):
        for c in costs[:head]:
            out += [c + c0] * min(hc, heads - h0)
    for c in costs[head:]:
        out += [c + c0] * heads
    return out


def efficiency(items, sms):
    free = [(0.0, b) for b in range(sms)]
    for c in items:
        t, b = heapq.heappop(free)
        heapq.heappush(free, (t + c, b))
    return sum(items) / (sms * max(t for t, _ in free))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bm", type=int, default=128)
    ap.add_argument("--bn", type=int, default=128)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--c0", type=float, default=1.0, help="per-item cost beyond its key blocks")
    ap.add_argument("--jitter", type=float, default=0.03)
    ap.add_argument("--trials", type=int, default=40)
    args = ap.parse_args()
    tail4 = math.ceil(4 * args.sms / args.heads)
    forms = [("HC 0 (one walk)", 0, 0), ("HC 4", 4, 0), ("HC 4, TAIL 4", 4, tail4), ("HC 4, TAIL 8", 4, 2 * tail4)]
    for causal in (False, True):
        costs = tile_costs(RAGGED_MIX, args.bm, args.bn, causal)
        cells = []
        for label, hc, tail in forms:
            items = item_order(costs, args.heads, hc, tail, args.c0)
            total = 0.0
            for trial in range(args.trials):
                rng = random.Random(trial)
                total += efficiency([c * (1 + rng.gauss(0, args.jitter)) for c in items], args.sms)
            cells.append(f"{label} {total / args.trials:.4f}")
        print(f"BM {args.bm} BN {args.bn} causal={int(causal)} ({len(costs)} tiles): " + ", ".join(cells))


if __name__ == "__main__":
    main()
