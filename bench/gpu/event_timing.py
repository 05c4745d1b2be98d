"""Device time of a callable from CUDA event pairs, shared by every harness under bench/gpu/.

`inner` back-to-back calls per event pair keep the queue full, so host-side call overhead (cupy's
argument packing, ctypes, Python) does not count as device time (NOTES.md, version 5). The result
is the median per-call time over `reps` pairs and the spread (max - min), both in milliseconds.

Several callables are timed round-robin, and the order of each round is rotated by one (round r
starts with callable r mod n), so that every callable is timed at every position equally often:
with a fixed order, the callable timed first in each round ran about 2 % slower at d128 than the
same code timed third (NOTES.md, session 13: the board is at its power cap there, and the clock
follows what ran just before). One synchronization per round, not per callable, so the device
runs a round without idle gaps.
"""

import statistics


def time_ms(torch, fn, warm=3, reps=15, inner=10):
    return interleaved_ms(torch, [fn], warm, reps, inner)[0]


def interleaved_detail(torch, fns, warm=2, reps=15, inner=10):
    """(results, by_position): results as interleaved_ms; by_position[p] is, over the callables,
    the median of (its median time at position p) / (its median time overall): how much a
    position itself costs, which the rotation cancels out of `results`."""
    n = len(fns)
    for fn in fns:
        for _ in range(warm):
            fn()
    torch.cuda.synchronize()
    times = [[] for _ in fns]
    at = [[[] for _ in range(n)] for _ in fns]  # at[i][p]: callable i's times at position p
    for r in range(reps):
        order = [(r + j) % n for j in range(n)]
        marks = []
        for i in order:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fns[i]()
            b.record()
            marks.append((i, a, b))
        marks[-1][2].synchronize()
        for p, (i, a, b) in enumerate(marks):
            t = a.elapsed_time(b) / inner
            times[i].append(t)
            at[i][p].append(t)
    results = [(statistics.median(t), max(t) - min(t)) for t in times]
    by_position = []
    for p in range(n):
        ratios = [statistics.median(at[i][p]) / results[i][0] for i in range(n) if at[i][p]]
        by_position.append(statistics.median(ratios) if ratios else float("nan"))
    return results, by_position


def interleaved_ms(torch, fns, warm=2, reps=15, inner=10):
    """Median and spread of each callable, the reps taken round-robin over them in rotated order,
    so that clock and thermal drift during a run, and the position within a round, fall on every
    engine alike."""
    return interleaved_detail(torch, fns, warm, reps, inner)[0]
