#!/usr/bin/env python3
"""Where an execute's time goes between two forwards: the kernels of back-to-back ExecuteOpGraph
calls, on the device's own clock, through the plugin's C ABI.

The event-timed benchmark (plugin_bench.py) says how long ten calls take; this says how much of a
call is not the forward's work. torch.profiler (CUPTI) records every kernel the process launches,
also the plugin's through the driver API, with its start and end; per call i:

  pre-pass    its kernel's duration
  lead        pre-pass (i) start - forward (i - 1) end: negative when it started in the previous
              forward's tail (a programmatic launch), positive: the launch gap
  overhead    forward (i) work start - forward (i - 1) end, where the work starts at the later of
              the forward's own start and the pre-pass's end (the forward's griddepcontrol.wait):
              the time per call that is not the forward's arithmetic
  period      forward (i) end - forward (i - 1) end

and for FlashInfer fa3 (--flashinfer; one kernel per call, its plan made once beforehand) the gap
between the end of one call's kernel and the start of the next. The programmatic launches are
set by RAGGED_SDPA_CUDA_PDL, read when the plugin loads its module, so each setting is one process:
plugin_round.sh's `timeline` step runs the settings in TIMELINE_SETTINGS. RAGGED_SDPA_CUDA_FUSED_LIST=0
keeps the pre-pass launch (kernels/cuda-fmha/src/forward/fused_list.rs); unset, the persistent forward
builds its tile list itself and no pre-pass appears in the profile (pre-pass and lead print nan).

Every call writes its own O; all of them must equal, bit for bit, the O of one call made alone
beforehand (with the stream idle), or the exit status is 1: a pre-pass that starts in the previous
forward's tail and a forward that starts during its pre-pass must not change a single bit. Two more
hand-over checks per problem, against calls made alone the same way:
  alternate    back-to-back calls alternate between two offsets tensors (the ragged mix's lengths and
               the same lengths reversed), so every pre-pass replaces the tile list the previous
               forward worked from
  late writer  before each call a kernel signals its dependents at once and only ~20 µs later
               copies that call's offsets into the one offsets tensor every call reads: a
               programmatic pre-pass reads the previous call's offsets before its wait and must
               notice the change after it

  python3 bench/gpu/plugin_timeline.py --plugin LIB.so --graphs DIR [--calls 10] [--problems NAME ...]
      [--flashinfer]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plugin_bench import FlashInferRunner, ours_execution, problem_buffers  # noqa: E402
from output_diff import describe  # noqa: E402
from plugin_bench_abi import Plugin, load_problems, token_starts, variant_pack  # noqa: E402

DEFAULT_PROBLEMS = ["ragged-mix_d64_full", "ragged-mix_d64_causal", "ragged-mix_d128_full",
                    "ragged-mix_d128_causal"]


def kernels_of(prof):
    """[(name, start µs, end µs)] of the CUDA kernels a profile recorded, in start order."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    out = [(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"]))
           for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    return sorted(out, key=lambda k: k[1])


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ours_timeline(torch, plugin, graphs, handle, meta, bufs, calls):
    """Kernel times of `calls` back-to-back executes, each into its own O, one workspace."""
    ex = ours_execution(torch, plugin, graphs, handle, meta, bufs)
    u = meta["uids"]
    base = {u["q"]: bufs["q"].data_ptr(), u["k"]: bufs["k"].data_ptr(), u["v"]: bufs["v"].data_ptr(),
            u["qo_offsets"]: bufs["offsets"].data_ptr(), u["kv_offsets"]: bufs["offsets"].data_ptr()}
    outs = [torch.full_like(bufs["o"], float("nan")) for _ in range(calls)]
    packs = [variant_pack({**base, u["o"]: o.data_ptr()}) for o in outs]

    def call(pack):
        plugin.check(ex.execute(handle, ex.ctx, ex.ws_ptr, pack, len(pack)), "ExecuteOpGraph")

    torch.cuda.synchronize()
    ex()  # alone: the reference every overlapped call must match
    torch.cuda.synchronize()
    alone = bufs["o"].clone()
    for pack in packs[:3]:
        call(pack)
    torch.cuda.synchronize()
    for o in outs:
        o.fill_(float("nan"))
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for pack in packs:
            call(pack)
        torch.cuda.synchronize()
    differing = sum(1 for i, o in enumerate(outs) if describe(torch, i, o, alone) != "same")
    ex.close()
    ks = kernels_of(prof)
    pre = [k for k in ks if k[0].startswith("ragged_fmha_prepass")]
    fwd = [k for k in ks if k[0].startswith("ragged_fmha_fwd")]
    # With the fused list (the plugin's default for the persistent entry points) no pre-pass runs:
    # the forward builds its list after its start, so "work" includes that and "overhead" is the
    # gap between two forwards; the period compares the two forms.
    if len(pre) not in (0, calls) or len(fwd) != calls:
        raise RuntimeError(f"expected {calls} forwards and as many pre-passes or none, the profile has "
                           f"{len(pre)} and {len(fwd)} ({sorted({k[0] for k in ks})})")
    fused = not pre
    work_start = [f[1] for f in fwd] if fused else [max(f[1], p[2]) for p, f in zip(pre, fwd)]
    return {
        "prepass": float("nan") if fused else med([p[2] - p[1] for p in pre]),
        "lead": float("nan") if fused else med([pre[i][1] - fwd[i - 1][2] for i in range(1, calls)]),
        "fused": fused,
        "overhead": med([work_start[i] - fwd[i - 1][2] for i in range(1, calls)]),
        "overhead_max": max(work_start[i] - fwd[i - 1][2] for i in range(1, calls)),
        "work": med([f[2] - w for f, w in zip(fwd, work_start)]),
        "period": med([fwd[i][2] - fwd[i - 1][2] for i in range(1, calls)]),
        "differing": differing,
        "kernel": fwd[0][0],
    }


LATE_WRITER = r"""
extern "C" __global__ void late_writer(int* dst, const int* src, int n, long long delay_ns) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < delay_ns);
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}
"""


def handover_checks(torch, plugin, graphs, handle, meta, bufs, calls):
    """(alternate, late writer): a line per call that differs from the call alone with the same offsets."""
    import cupy as cp
    import numpy as np

    lens = meta["seq_lens"]
    unit = meta["offsets"][1] // lens[0]
    rev = [0]
    for n in reversed(lens):
        rev.append(rev[-1] + n * unit)
    sets = [bufs["offsets"], torch.tensor(rev, dtype=torch.int32, device="cuda")]
    ex = ours_execution(torch, plugin, graphs, handle, meta, bufs)
    u = meta["uids"]

    def pack(offsets, o):
        return variant_pack({u["q"]: bufs["q"].data_ptr(), u["k"]: bufs["k"].data_ptr(),
                             u["v"]: bufs["v"].data_ptr(), u["o"]: o.data_ptr(),
                             u["qo_offsets"]: offsets.data_ptr(), u["kv_offsets"]: offsets.data_ptr()})

    def call(p):
        plugin.check(ex.execute(handle, ex.ctx, ex.ws_ptr, p, len(p)), "ExecuteOpGraph")

    alone = []
    for offsets in sets:
        o = torch.full_like(bufs["o"], float("nan"))
        torch.cuda.synchronize()
        call(pack(offsets, o))
        torch.cuda.synchronize()
        alone.append(o)
    outs = [torch.full_like(bufs["o"], float("nan")) for _ in range(calls)]
    torch.cuda.synchronize()
    for i, o in enumerate(outs):
        call(pack(sets[i % 2], o))
    torch.cuda.synchronize()
    alternate = differences(torch, outs, alone)

    writer = cp.RawKernel(LATE_WRITER, "late_writer")  # cupy compiles for the device: sm_90
    shared = sets[0].clone()
    for o in outs:
        o.fill_(float("nan"))
    torch.cuda.synchronize()
    with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        for i, o in enumerate(outs):
            src = sets[i % 2]
            writer((1,), (64,), (np.uint64(shared.data_ptr()), np.uint64(src.data_ptr()), np.int32(src.numel()),
                                 np.int64(20_000)))
            call(pack(shared, o))
    torch.cuda.synchronize()
    late = differences(torch, outs, alone)
    ex.close()
    return alternate, late


def differences(torch, outs, alone):
    """One line per call whose O differs from the call alone with its offsets (call i used set i % 2)."""
    lines = (describe(torch, i, o, alone[i % 2]) for i, o in enumerate(outs))
    return [line for line in lines if line != "same"]


def flashinfer_timeline(torch, flashinfer, meta, bufs, calls):
    runner = FlashInferRunner(torch, flashinfer, meta, token_starts(meta))
    q, k, v = bufs["q"], bufs["k"], bufs["v"]
    for _ in range(3):
        runner(q, k, v)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            runner(q, k, v)
        torch.cuda.synchronize()
    ks = kernels_of(prof)
    if len(ks) != calls:
        return {"note": f"{len(ks)} kernels for {calls} calls: {sorted({k[0][:60] for k in ks})}"}
    return {"gap": med([ks[i][1] - ks[i - 1][2] for i in range(1, calls)]),
            "work": med([x[2] - x[1] for x in ks]),
            "period": med([ks[i][2] - ks[i - 1][2] for i in range(1, calls)])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--graphs", required=True)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--problems", nargs="+", default=DEFAULT_PROBLEMS)
    ap.add_argument("--handover-calls", type=int, default=10, help="calls of each hand-over check")
    ap.add_argument("--flashinfer", action="store_true", help="FlashInfer fa3's gap between calls too")
    args = ap.parse_args()
    import ctypes

    import torch

    plugin = Plugin(args.plugin)
    stream = torch.cuda.current_stream()
    handle = plugin.create()
    plugin.check(plugin.SetStream(handle, ctypes.c_void_p(stream.cuda_stream)), "SetStream")
    flashinfer = None
    if args.flashinfer:
        try:
            import flashinfer as flashinfer_mod

            flashinfer = flashinfer_mod
        except Exception as e:  # noqa: BLE001 - report and carry on without this peer
            print(f"FlashInfer unavailable: {type(e).__name__}: {str(e)[:300]}", flush=True)
    setting = os.environ.get("RAGGED_SDPA_CUDA_PDL")
    fused_setting = os.environ.get("RAGGED_SDPA_CUDA_FUSED_LIST")
    print(f"RAGGED_SDPA_CUDA_PDL={setting if setting is not None else '(unset)'}, RAGGED_SDPA_CUDA_FUSED_LIST="
          f"{fused_setting if fused_setting is not None else '(unset)'}, {args.calls} calls per "
          f"problem, µs (median over calls 2..{args.calls})", flush=True)
    status = 0
    for meta in load_problems(args.graphs):
        if meta["name"] not in args.problems:
            continue
        bufs = problem_buffers(torch, meta)
        r = ours_timeline(torch, plugin, args.graphs, handle, meta, bufs, args.calls)
        same = ("all calls identical to the call alone" if r["differing"] == 0
                else f"{r['differing']} CALLS DIFFER from the call alone")
        status |= 1 if r["differing"] else 0
        alternate, late = handover_checks(torch, plugin, args.graphs, handle, meta, bufs, args.handover_calls)
        status |= 1 if alternate or late else 0
        same += (f"; alternate offsets: {'all identical' if not alternate else f'{len(alternate)} CALLS DIFFER'}"
                 f"; late writer: {'all identical' if not late else f'{len(late)} CALLS DIFFER'}")
        for what, lines in (("alternate", alternate), ("late writer", late)):
            for line in lines[:6]:
                print(f"    {meta['name']} {what}: {line}", flush=True)
        form = "fused list" if r["fused"] else "pre-pass"
        print(f"{meta['name']:<26} ours ({form}): pre-pass {r['prepass']:6.2f}  lead {r['lead']:7.2f}  overhead "
              f"{r['overhead']:6.2f} (max {r['overhead_max']:6.2f})  work {r['work']:8.1f}  period "
              f"{r['period']:8.1f}  [{same}]", flush=True)
        if flashinfer is not None:
            try:
                f = flashinfer_timeline(torch, flashinfer, meta, bufs, args.calls)
                if "note" in f:
                    print(f"{'':<26} FlashInfer fa3: {f['note']}", flush=True)
                else:
                    print(f"{'':<26} FlashInfer fa3: gap {f['gap']:6.2f}  work {f['work']:8.1f}  period "
                          f"{f['period']:8.1f}", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"{'':<26} FlashInfer fa3 failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
