#!/usr/bin/env python3
"""Where the warps of one kernel wait, per SASS instruction: reads the CSV of Nsight Compute's source
page (`ncu --import R.ncu-rep --page source --csv --print-source sass`, a report taken with
`--section SourceCounters --section WarpStateStats`) and prints

  * the sampled warp states summed per instruction class (HGMMA issue, wgmma wait, mbarrier try_wait,
    named barrier, MUFU, FP32, ...), as shares of all samples;
  * the stall reasons over the whole kernel (the page's stall_* columns);
  * the instructions with the most samples, with their address, text and two largest stall reasons.

  python3 bench/lab/fmha_ncu_src.py SRC.csv [--top 25]
"""

import argparse
import csv
import re
import sys

# Instruction classes, first match wins (the opcode is the first word after an optional predicate).
CLASSES = [
    ("wgmma issue", r"^HGMMA"),
    ("wgmma wait", r"^WARPGROUP\.(DEPBAR|ARRIVE)"),
    ("mbarrier wait", r"^SYNCS\.PHASECHK"),
    ("mbarrier arrive / tx", r"^SYNCS\."),
    ("named barrier", r"^BAR\."),
    ("MUFU", r"^MUFU"),
    ("FP32 (FFMA/FADD/FMUL/FMNMX)", r"^(FFMA|FADD|FMUL|FMNMX|FSEL|FSETP)"),
    ("convert / pack", r"^(F2FP|F2F|I2F|F2I)"),
    ("uniform datapath", r"^U"),
    ("shuffle / vote", r"^(SHFL|VOTE)"),
    ("load / store", r"^(LD|ST|LDS|STS|LDSM|LDG|STG|LDGSTS|UTMALDG)"),
    ("branch / sync", r"^(BRA|BSSY|BSYNC|WARPSYNC|EXIT|RET|CALL|NANOSLEEP|YIELD)"),
    ("integer / other", r"."),
]


def opcode(src):
    s = src.strip()
    s = re.sub(r"^@!?U?P\w+\s+", "", s)
    return s.split(" ")[0] if s else ""


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    hi = next((i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)), None)
    if hi is None:
        print(f"{args.csv}: no 'Source' column ({len(rows)} rows)")
        return 1
    head = [c.strip() for c in rows[hi]]
    src_i = head.index("Source")
    addr_i = next((i for i, h in enumerate(head) if h.lower().startswith("address")), None)
    samp = [i for i, h in enumerate(head) if "Sampling" in h and "All" in h] or \
        [i for i, h in enumerate(head) if "Sampling" in h]
    execd = next((i for i, h in enumerate(head) if h.startswith("Instructions Executed")), None)
    if not samp:
        print("columns:", head[:40])
        return 1
    si = samp[0]
    ni = next((i for i, h in enumerate(head) if "Sampling" in h and "Not" in h), None)
    body = [r for r in rows[hi + 1:] if len(r) > max(src_i, si)]
    total = sum(num(r[si]) for r in body) or 1.0
    print(f"{len(body)} SASS lines, {total:.0f} samples ({head[si]})")
    per = {}
    for r in body:
        op = opcode(r[src_i])
        cls = next(name for name, pat in CLASSES if re.match(pat, op))
        a = per.setdefault(cls, [0.0, 0.0, 0.0])
        a[0] += num(r[si])
        a[1] += num(r[ni]) if ni is not None else 0.0
        a[2] += num(r[execd]) if execd is not None else 0.0
    print("class                          samples  not-issued  warp-instr executed")
    for cls, (s, n, e) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        if s < 0.01 * total:
            continue
        print(f"  {cls:<28} {100 * s / total:6.1f} %  {100 * n / total:6.1f} %  {e:12.0f}")
    # The source page's per-reason columns (stall_wait, stall_long_sb, ...; not the "(Not Issued)" ones).
    reasons = [i for i, h in enumerate(head) if h.startswith("stall_") and "Not Issued" not in h]
    if reasons:
        tot = {i: sum(num(r[i]) for r in body) for i in reasons}
        rt = sum(tot.values()) or 1.0
        print("stall reasons: " + "  ".join(f"{head[i][6:]}={100 * v / rt:.1f}%"
                                            for i, v in sorted(tot.items(), key=lambda kv: -kv[1])[:8]))
    body.sort(key=lambda r: -num(r[si]))
    print(f"top {args.top} instructions by samples:")
    for r in body[:args.top]:
        a = r[addr_i] if addr_i is not None else "?"
        why = sorted(((num(r[i]), head[i][6:]) for i in reasons), reverse=True)[:2]
        why = " ".join(f"{k}={100 * v / total:.1f}" for v, k in why if v > 0)
        print(f"  {a[-6:]:>6} {100 * num(r[si]) / total:5.1f} %  {' '.join(r[src_i].split())[:60]:<60} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
