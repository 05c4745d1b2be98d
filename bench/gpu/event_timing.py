"""Device time of a callable from CUDA event pairs, shared by every harness under bench/gpu/.

`inner` back-to-back calls per event pair keep the queue full, so host-side call overhead (cupy's
argument packing, ctypes, Python) does not count as device time (NOTES.md, version 5). The result
is the median per-call time over `reps` pairs and the spread (max - min), both in milliseconds.
"""

import statistics


def time_ms(torch, fn, warm=3, reps=15, inner=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / inner)
    return statistics.median(times), max(times) - min(times)
