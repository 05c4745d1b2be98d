"""Device time of a callable from CUDA event pairs, shared by every harness under bench/gpu/.

`inner` back-to-back calls per event pair keep the queue full, so host-side call overhead (cupy's
argument packing, ctypes, Python) does not count as device time (NOTES.md, version 5). The result
is the median per-call time over `reps` pairs and the spread (max - min), both in milliseconds.
"""

import statistics


def time_ms(torch, fn, warm=3, reps=15, inner=10):
    return interleaved_ms(torch, [fn], warm, reps, inner)[0]


def interleaved_ms(torch, fns, warm=2, reps=15, inner=10):
    """Median and spread of each callable, the reps taken round-robin over them, so that clock
    and thermal drift during a run fall on every engine alike."""
    for fn in fns:
        for _ in range(warm):
            fn()
    torch.cuda.synchronize()
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            b.synchronize()
            times[i].append(a.elapsed_time(b) / inner)
    return [(statistics.median(t), max(t) - min(t)) for t in times]
