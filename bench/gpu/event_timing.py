"""Device time of a callable from CUDA event pairs, shared by the harnesses under bench/gpu/ and bench/lab/.

`inner` back-to-back calls per event pair keep the queue full, so host-side call overhead (cupy's
argument packing, ctypes, Python) does not count as device time (bench/DECISIONS.md). The result
is the median per-call time over `reps` pairs and the spread (max - min), both in milliseconds.

Several callables are timed round-robin, and the order of each round is rotated by one (round r
starts with callable r mod n), so that every callable is timed at every position equally often:
with a fixed order, the callable timed first in each round ran about 2 % slower at d128 than the
same code timed third (bench/DECISIONS.md: the board is at its power cap there, and the clock
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


def call_each(torch, timed, calls):
    """For a profiler, nothing timed: each (key, label, fn, note) of `timed` called `calls` times,
    one engine after another, with a line per engine."""
    for _, label, fn, note in timed:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        print(f"  {label}: {calls} calls; {note}", flush=True)


def power_profile(torch, fn, seconds=1.5, interval_ms=50):
    """SM clock (MHz) and board power (W) while `fn` runs back to back for `seconds`, sampled by
    nvidia-smi, and the energy per call (mJ) from them. At d128 the board sits at its power cap
    (bench/DECISIONS.md), so an engine's clock follows its energy per FLOP: these figures say
    whether one engine loses to another on energy or on the clock cycles it needs.
    Returns a dict (clock_mhz, power_w, ms_per_call, mj_per_call, samples), or None without
    nvidia-smi."""
    import subprocess
    import time
    from datetime import datetime

    fields = ["power.draw.instant", "power.draw"]
    for power_field in fields:
        try:
            proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu=timestamp,clocks.sm,{power_field}", "--format=csv,noheader,nounits",
                 "-lms", str(interval_ms)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except OSError:
            return None
        time.sleep(0.6)  # nvidia-smi's start-up, before the first sample
        if proc.poll() is None:
            break
        proc.communicate()
    else:
        return None
    fn()
    torch.cuda.synchronize()
    t_start = time.time()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    calls = 0
    prev = None
    a.record()
    while time.time() - t_start < seconds:
        for _ in range(10):
            fn()
        calls += 10
        mark = torch.cuda.Event()
        mark.record()
        # At most 20 calls in flight (the queue never drains, and the loop's end is the work's end).
        if prev is not None:
            while not prev.query():
                time.sleep(0.0002)
        prev = mark
    b.record()
    b.synchronize()
    t_end = time.time()
    proc.terminate()
    out = proc.communicate()[0]
    clocks, powers = [], []
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            ts = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            clock, power = float(parts[1]), float(parts[2])
        except ValueError:
            continue
        # The middle of the load: the first 0.3 s ramps, the last sample may be after the end.
        if t_start + 0.3 <= ts <= t_end - 0.05:
            clocks.append(clock)
            powers.append(power)
    if not clocks:
        return None
    ms = a.elapsed_time(b) / calls
    power = statistics.median(powers)
    return dict(clock_mhz=statistics.median(clocks), power_w=power, ms_per_call=ms, mj_per_call=power * ms,
                samples=len(clocks))
