#!/usr/bin/env python3
"""Launch driver for Nsight Compute: the ragged mix (16 384 tokens, H = 16, bf16) through the forward's
entry points and FA2 varlen, each launched once as a warm-up and once more to be profiled
(ncu --launch-skip 1 --launch-count 1 per kernel name, or skip / count N for N engines).

  ncu --clock-control none -k regex:'ragged_fmha_fwd_bf16_d128$' --launch-skip 1 \\
      --launch-count 1 python3 bench/lab/fmha_ncu.py --d 128 --engines ours
  ncu ... -k regex:flash_fwd python3 bench/lab/fmha_ncu.py --d 128 --engines fa2
  python3 bench/lab/fmha_ncu.py --summarize OUT.csv   # the key metrics of an `ncu --page raw --csv` file
"""

import argparse
import csv
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


KEYS = ("gpu__time_duration", "gmma", "issue_active", "warps_active", "bank_conflicts", "wavefronts_mem_shared",
        "lts__t_sectors", "lts__throughput", "dram__bytes", "per_second", "pipe_xu", "inst_executed.sum", "sm__throughput")


def summarize(path):
    """Key metrics and the six largest stall reasons per profiled kernel."""
    with open(path) as f:
        rows = [r for r in csv.reader(line for line in f if line.startswith('"'))]
    if len(rows) < 3:
        print(f"{path}: no ncu rows")
        return 1
    head, units = rows[0], rows[1]
    for r in rows[2:]:
        rec = dict(zip(head, r))
        name = rec.get("Kernel Name", "?")[:60]
        print(f"== {name}")
        keyed = [f"{h}={rec[h]}{units[i] if units[i] not in ('', '%') else '%' if units[i] == '%' else ''}"
                 for i, h in enumerate(head) if any(k in h for k in KEYS) and "stalled" not in h]
        for i in range(0, len(keyed), 3):
            print("   " + "  ".join(keyed[i:i + 3]))
        stalls = []
        for h in head:
            if "issue_stalled" in h and h.endswith("per_warp_active.pct") or ("warp_latency_issue_stalled" in h):
                try:
                    stalls.append((float(rec[h].replace(",", "")), h))
                except ValueError:
                    pass
        if not stalls:
            for h in head:
                if "issue_stalled" in h and h.endswith(".ratio"):
                    try:
                        stalls.append((float(rec[h].replace(",", "")), h))
                    except ValueError:
                        pass
        stalls.sort(reverse=True)
        print("   stalls: " + "  ".join(f"{h.split('stalled_')[-1].split('_per')[0]}={v:.2f}" for v, h in stalls[:7]))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--summarize", metavar="CSV")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--engines", nargs="+", default=["ours"],
                    help="ours (the plugin's bf16 entry point of --d), sm80 (the portable one), fa2, or a full "
                         "entry-point name")
    ap.add_argument("--reps", type=int, default=2, help="launches of each engine (the first is the warm-up)")
    args = ap.parse_args()
    if args.summarize:
        return summarize(args.summarize)
    # The launch path needs the GPU stack; --summarize reads a CSV anywhere (no cupy or torch).
    import cupy as cp
    import torch
    from fmha_dev import Engine, compile_module, ragged_mix

    d, h = args.d, 16
    lens = ragged_mix(7)
    B, T = len(lens), sum(lens)
    tok = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    q = (torch.rand((T, h, d), device="cuda") * 2 - 1).to(torch.bfloat16)
    k = (torch.rand((T, h, d), device="cuda") * 2 - 1).to(torch.bfloat16)
    v = (torch.rand((T, h, d), device="cuda") * 2 - 1).to(torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty((B, h, max(lens)), dtype=torch.float32, device="cuda")
    scale = 1.0 / math.sqrt(d)
    off = cp.asarray((tok * h * d).astype(np.int32))
    cu = torch.tensor(tok, dtype=torch.int32, device="cuda")
    p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(),
             q_off=off.data.ptr, q_off_bytes=4, q_mult=1, kv_off=off.data.ptr, kv_off_bytes=4, kv_mult=1,
             q_seq=h * d, q_head=d, k_seq=h * d, k_head=d, v_seq=h * d, v_head=d, o_seq=h * d, o_head=d,
             s_q_max=max(lens), s_kv_max=max(lens), batch=B, h_q=h, h_kv=h, scale=scale, left=-1,
             right=0 if args.causal else -1, br=1, lse_bstride=h * max(lens), lse_seq=1, lse_head=max(lens))
    calls = []
    ours = [e for e in args.engines if e != "fa2"]
    if ours:
        mod = compile_module()
        for e in ours:
            short = {"ours": f"ragged_fmha_fwd_bf16_d{d}", "sm80": f"ragged_fmha_fwd_sm80_bf16_d{d}"}
            eng = Engine(mod, short.get(e, e), d, label=e)
            ws = eng.workspace(B, max(lens))
            calls.append((e, lambda eng=eng, ws=ws: eng.launch(p, ws)))
    if "fa2" in args.engines:
        calls.append(("fa2", lambda: torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, max(lens), max(lens), 0.0, args.causal, False, scale=scale)))
    for rep in range(args.reps):
        for name, fn in calls:
            fn()
            torch.cuda.synchronize()
            print(f"launched {name} ({'warm-up' if rep == 0 else 'profiled'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
