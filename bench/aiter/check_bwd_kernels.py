#!/usr/bin/env python3
"""Check the AITER backward's device kernels against a NumPy model of their contract.

kernels/aiter-fmha/hip/ragged_aiter_bwd_lse.cu (hipDNN stats -> AITER's (H_q, B*S_q_max) LSE scratch,
-inf rows sent as +inf) and kernels/aiter-fmha/hip/ragged_aiter_bwd_fixup.cu (dQ = 0 for batches with
Lkv = 0, dK = dV = 0 for batches with Lq = 0) are run on many random cases and every output
buffer is compared bit for bit, guard tails included, with a model written from their documented
contract and from how kernels/aiter-fmha/src/backward_mapping.rs launches them (scratch head stride
B*S_q_max, token rows seqstart_q[b] + i, dense strides in [B, H_q, S_q, 1] order, the stats'
own offsets x multiplier, block 256, grids of ceil(items / 256) capped at 65 535).
The token starts and lengths fed in are the forward pre-pass's, from check_device_kernels'
model of it. Usage (repository root):

    python3 bench/aiter/check_bwd_kernels.py [--cases N] [--seed S] [--backend cupy|cpu] [--no-big]

`--backend cupy` (default) compiles with NVRTC and runs on an NVIDIA GPU; `--backend cpu` runs
the same sources on the host (launch_backends.CpuBackend). Exit status 0 when every case matches.
"""

import argparse
import pathlib
import sys

import numpy as np

sys.dont_write_bytecode = True  # the sibling imports below leave no __pycache__ in the tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_device_kernels import HIP, STATUS, model_side, pick_mult, random_offsets  # noqa: E402
from launch_backends import CpuBackend, CupyBackend  # noqa: E402

THREADS = 256  # BWD_THREADS
MAX_BLOCKS = 65_535  # BWD_MAX_BLOCKS
GUARD = 37  # extra elements after every output buffer, which must keep their sentinel
SCRATCH_SENTINEL = 0x7FC5A5A5  # a quiet NaN no kernel computes
NEG_INF, POS_INF = 0xFF800000, 0x7F800000
DENSE, RAGGED = 1, 2

LSE_SIG = ["ptr", "ptr", "i32", "i32", "i32", "ptr", "i32", "i64", "i64", "i64",
           "ptr", "i32", "i64", "i64", "i64", "ptr", "i64"]
FIXUP_SIG = ["ptr"] * 4 + ["i32"] * 7 + ["ptr", "i64", "i64"] * 3


def rust_blocks(items):
    """backward_mapping.rs blocks_for."""
    return int(min(max((items + THREADS - 1) // THREADS, 1), MAX_BLOCKS))


def pick_grid(rng, items):
    return int(rng.choice([1, 2, 3, rust_blocks(items), rust_blocks(items)]))


# ----------------------------------------------------------------------------- inputs


def side(rng, batch, s_max, stride, zero_prob, full_last=False):
    """Token starts and lengths of one side, as the forward pre-pass leaves them (valid input)."""
    mult = pick_mult(rng, stride) if rng.random() < 0.5 else 1
    stored, ext = random_offsets(rng, batch, s_max, stride, mult, zero_prob)
    if full_last or rng.random() < 0.15:
        ext[-1] = s_max if full_last else 0
        if not full_last:
            ext[0] = 0
        stored = np.concatenate([[0], np.cumsum(ext * stride)]) // mult
    seq_lens = None
    if rng.random() < 0.5:
        seq_lens = (ext - rng.integers(0, 3, size=batch)).clip(min=0)
        seq_lens[rng.random(batch) < 0.15] = 0
        if full_last:
            seq_lens[-1] = s_max
    starts, lens, _, flags = model_side(stored, mult, stride, s_max, seq_lens)
    assert flags & ~STATUS["clamped"] == 0, f"generator made invalid offsets (status {flags:#x})"
    assert int(starts[-1]) <= batch * s_max
    return starts.astype(np.int32), lens.astype(np.int32)


def special_floats(rng, n):
    """fp32 bit patterns: normal values and the ones a copy must keep exactly."""
    bits = (rng.standard_normal(n).astype(np.float32) * 8).view(np.uint32)
    r = rng.random(n)
    sign = rng.integers(0, 2, size=n, dtype=np.uint32) << np.uint32(31)
    bits[r < 0.12] = NEG_INF
    bits[(r >= 0.12) & (r < 0.15)] = POS_INF
    m = (r >= 0.15) & (r < 0.18)  # NaNs with payloads, either sign
    bits[m] = (np.uint32(0x7FC00000) | rng.integers(0, 2**22, size=n, dtype=np.uint32) | sign)[m]
    m = (r >= 0.18) & (r < 0.22)  # signed zeros
    bits[m] = sign[m]
    m = (r >= 0.22) & (r < 0.26)  # subnormals
    bits[m] = (rng.integers(1, 2**23, size=n, dtype=np.uint32) | sign)[m]
    m = (r >= 0.26) & (r < 0.28)  # +-FLT_MAX
    bits[m] = (np.uint32(0x7F7FFFFF) | sign)[m]
    return bits


def strided_size(extents, strides):
    """Elements spanned by an index space of `extents` with non-negative `strides`."""
    if min(extents) <= 0:
        return 0
    return sum((e - 1) * s for e, s in zip(extents, strides)) + 1


def dense_strides(rng, b, h, s):
    """Strides of [B, H_q, S_q, 1]: contiguous, token-major, head-outermost, padded, broadcast heads."""
    kind = int(rng.integers(0, 5))
    p = int(rng.integers(0, 4))
    if kind == 0:
        return s * h + p, s, 1
    if kind == 1:
        return s * h + p, 1, h
    if kind == 2:
        return s + p, b * (s + p), 1
    if kind == 3:
        ss = int(rng.choice([1, 2, 3]))
        sh = s * ss + p
        return h * sh + int(rng.integers(0, 5)), sh, ss
    return s + p, 0, 1


# ----------------------------------------------------------------------------- LSE pre-pass


def make_lse_case(rng, big=False):
    if big:
        # > 65 535 x 256 items: the capped grid's second stride pass owns the last batch's tail
        batch, s_q, heads = 4100, 512, 8
    else:
        batch = int(rng.integers(300, 1200)) if rng.random() < 0.1 else int(rng.integers(1, 40))
        s_q, heads = int(rng.integers(1, 14)), int(rng.choice([1, 2, 3, 4, 8]))
    d = int(rng.choice([8, 64, 128]))
    seqstart, len_q = side(rng, batch, s_q, heads * d, float(rng.choice([0.0, 0.3, 0.7])), full_last=big)
    case = {"batch": batch, "s_q": s_q, "heads": heads, "seqstart": seqstart, "len_q": len_q,
            "layout": DENSE if rng.random() < 0.5 else RAGGED}
    if case["layout"] == DENSE:
        case["strides"] = dense_strides(rng, batch, heads, s_q)
        n = strided_size((batch, heads, s_q), case["strides"])
    else:
        head_stride = int(rng.choice([1, 1, 2]))
        seq_stride = heads * head_stride + int(rng.choice([0, 0, 1, 3]))
        mult = pick_mult(rng, seq_stride) if rng.random() < 0.6 else 1
        ext = len_q.astype(np.int64) + rng.integers(0, 3, size=batch) * (rng.random() < 0.5)
        gaps = rng.integers(0, 3, size=batch) * mult * (rng.random() < 0.3)
        elem = np.concatenate([[0], np.cumsum(ext * seq_stride + gaps)])
        assert all(e % mult == 0 for e in elem)
        case.update(width=int(rng.choice([4, 8])), mult=mult, seq_stride=seq_stride, head_stride=head_stride,
                    offsets=elem // mult)
        n = int(elem[-1])
    case["stats"] = special_floats(rng, n + GUARD).view(np.float32)
    case["grid"] = rust_blocks(batch * s_q * heads) if big else pick_grid(rng, batch * s_q * heads)
    return case


def model_lse(case):
    """Scratch bits after the LSE pre-pass (row seqstart_q[b] + i of head h for i < Lq(b)), and
    how many of them were -inf in the stats."""
    hs = case["batch"] * case["s_q"]
    want = np.full(case["heads"] * hs + GUARD, SCRATCH_SENTINEL, dtype=np.uint32)
    src_bits = case["stats"].view(np.uint32)
    h = np.arange(case["heads"], dtype=np.int64)[None, :]
    converted = 0
    for b in range(case["batch"]):
        n = int(case["len_q"][b])
        if n == 0:
            continue
        i = np.arange(n, dtype=np.int64)[:, None]
        if case["layout"] == DENSE:
            sb, sh, ss = case["strides"]
            src = b * sb + h * sh + i * ss
        else:
            src = int(case["offsets"][b]) * case["mult"] + i * case["seq_stride"] + h * case["head_stride"]
        v = src_bits[src]
        converted += int((v == NEG_INF).sum())
        v = np.where(v == NEG_INF, np.uint32(POS_INF), v)
        want[h * hs + int(case["seqstart"][b]) + i] = v
    return want, converted


def run_lse(backend, case):
    hs = case["batch"] * case["s_q"]
    scratch = np.full(case["heads"] * hs + GUARD, SCRATCH_SENTINEL, dtype=np.uint32).view(np.float32)
    stats = case["stats"].copy()
    seqstart, len_q = case["seqstart"].copy(), case["len_q"].copy()
    dense = case["layout"] == DENSE
    offsets = None
    if not dense:
        offsets = case["offsets"].astype(np.int32 if case["width"] == 4 else np.int64)
    sb, sh, ss = case["strides"] if dense else (0, 0, 0)
    backend.launch("ragged_aiter_bwd_lse", case["grid"], THREADS, [
        ("ptr", seqstart), ("ptr", len_q),
        ("i32", case["batch"]), ("i32", case["s_q"]), ("i32", case["heads"]),
        ("ptr", stats), ("i32", case["layout"]), ("i64", sb), ("i64", sh), ("i64", ss),
        ("ptr", offsets), ("i32", 0 if dense else case["width"]), ("i64", 0 if dense else case["mult"]),
        ("i64", 0 if dense else case["seq_stride"]), ("i64", 0 if dense else case["head_stride"]),
        ("ptr", scratch), ("i64", hs),
    ])
    errors = []
    want, _ = model_lse(case)
    got = scratch.view(np.uint32)
    if not np.array_equal(got, want):
        bad = np.nonzero(got != want)[0]
        where = [(int(p // hs), int(p % hs)) for p in bad[:4]]
        errors.append(f"scratch differs at {len(bad)} slots, first (head, row) {where}: "
                      f"got {[hex(x) for x in got[bad[:4]]]} want {[hex(x) for x in want[bad[:4]]]}")
    if stats.view(np.uint32).tobytes() != case["stats"].view(np.uint32).tobytes():
        errors.append("stats tensor was written")
    if not (np.array_equal(seqstart, case["seqstart"]) and np.array_equal(len_q, case["len_q"])):
        errors.append("seqstart_q or len_q was written")
    return errors


# ----------------------------------------------------------------------------- fix-up


def grad_layout(rng, tokens, heads, d):
    """(seq_stride, head_stride, size) of a dQ/dK/dV: packed, padded, or head planes."""
    kind = int(rng.integers(0, 3))
    if kind == 0:
        seq, head = heads * d, d
    elif kind == 1:
        head = d + int(rng.integers(0, 4))
        seq = heads * head + int(rng.integers(0, 5))
    else:
        seq = d + int(rng.integers(0, 3))
        head = max(tokens, 1) * seq
    return seq, head, strided_size((tokens, heads, d), (seq, head, 1))


def make_fixup_case(rng, big=False):
    if big:
        batch, s_q, s_kv, hq, hk = 4100, 256, 256, 8, 8
        d_qk, d_v = 8, 8
    else:
        batch = int(rng.integers(300, 1200)) if rng.random() < 0.1 else int(rng.integers(1, 40))
        s_q, s_kv = int(rng.integers(1, 14)), int(rng.integers(1, 14))
        hq = int(rng.choice([1, 2, 4, 8]))
        hk = int(rng.choice([h for h in [1, 2, 4, 8] if hq % h == 0]))
        d_qk = int(rng.choice([1, 8, 64, 128]))
        d_v = int(rng.choice([d_qk, d_qk, 8, 64]))
    zp = float(rng.choice([0.0, 0.3, 0.7]))
    sq, lq = side(rng, batch, s_q, hq * d_qk, zp)
    sk, lk = side(rng, batch, s_kv, hk * d_qk, zp, full_last=big)
    if big:
        lq[-1] = 0  # the K side's last items lie past the capped grid's first pass
        lk[batch // 2] = 0
    case = {"batch": batch, "s_q": s_q, "s_kv": s_kv, "hq": hq, "hk": hk, "d_qk": d_qk, "d_v": d_v,
            "sq": sq, "sk": sk, "lq": lq, "lk": lk}
    for name, starts, heads, d, s_max in (("dq", sq, hq, d_qk, s_q), ("dk", sk, hk, d_qk, s_kv),
                                          ("dv", sk, hk, d_v, s_kv)):
        # S_max rows past the last token: a write into the last batch's padding lands in view
        seq, head, size = grad_layout(rng, int(starts[-1]) + s_max, heads, d)
        case[name] = (seq, head, rng.integers(1, 2**16, size=size + GUARD, dtype=np.uint64).astype(np.uint16))
    items = batch * (s_q * hq + s_kv * hk)
    case["grid"] = rust_blocks(items) if big else pick_grid(rng, items)
    return case


def model_fixup(case):
    """dQ rows zeroed where Lkv(b) = 0 (i < Lq), dK and dV rows where Lq(b) = 0 (j < Lkv)."""
    out = {k: case[k][2].copy() for k in ("dq", "dk", "dv")}

    def zero(name, start, n, heads, d):
        seq, head, _ = case[name]
        t = start + np.arange(n, dtype=np.int64)[:, None, None]
        h = np.arange(heads, dtype=np.int64)[None, :, None]
        e = np.arange(d, dtype=np.int64)[None, None, :]
        out[name][(t * seq + h * head + e).ravel()] = 0

    for b in range(case["batch"]):
        lq, lk = int(case["lq"][b]), int(case["lk"][b])
        if lk == 0 and lq > 0:
            zero("dq", int(case["sq"][b]), lq, case["hq"], case["d_qk"])
        if lq == 0 and lk > 0:
            zero("dk", int(case["sk"][b]), lk, case["hk"], case["d_qk"])
            zero("dv", int(case["sk"][b]), lk, case["hk"], case["d_v"])
    return out


def run_fixup(backend, case):
    bufs = {k: case[k][2].copy() for k in ("dq", "dk", "dv")}
    ins = {k: case[k].copy() for k in ("sq", "sk", "lq", "lk")}
    args = [("ptr", ins["sq"]), ("ptr", ins["sk"]), ("ptr", ins["lq"]), ("ptr", ins["lk"])]
    args += [("i32", case[k]) for k in ("batch", "s_q", "s_kv", "hq", "hk", "d_qk", "d_v")]
    for k in ("dq", "dk", "dv"):
        args += [("ptr", bufs[k]), ("i64", case[k][0]), ("i64", case[k][1])]
    backend.launch("ragged_aiter_bwd_fixup", case["grid"], THREADS, args)
    errors = []
    want = model_fixup(case)
    for k in ("dq", "dk", "dv"):
        if not np.array_equal(bufs[k], want[k]):
            bad = np.nonzero(bufs[k] != want[k])[0]
            seq = case[k][0]
            errors.append(f"{k} differs at {len(bad)} elements, first {bad[:6]} (token {bad[:6] // seq}): "
                          f"got {bufs[k][bad[:4]]} want {want[k][bad[:4]]}")
    if any(not np.array_equal(ins[k], case[k]) for k in ins):
        errors.append("an input array (seqstart/len) was written")
    return errors


# ----------------------------------------------------------------------------- driver


def describe_lse(c):
    s = f"lse B={c['batch']} S_q={c['s_q']} H={c['heads']} grid={c['grid']} "
    if c["layout"] == DENSE:
        return s + f"dense strides={c['strides']}"
    return s + f"ragged width={c['width']} mult={c['mult']} seq/head={c['seq_stride']}/{c['head_stride']}"


def describe_fixup(c):
    return (f"fixup B={c['batch']} S={c['s_q']}/{c['s_kv']} H={c['hq']}/{c['hk']} D={c['d_qk']}/{c['d_v']} "
            f"grid={c['grid']} strides dq={c['dq'][:2]} dk={c['dk'][:2]} dv={c['dv'][:2]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=400, help="random cases per kernel")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--backend", choices=["cupy", "cpu"], default="cupy")
    ap.add_argument("--hip-dir", type=pathlib.Path, default=HIP, help="where the .cu sources are")
    ap.add_argument("--no-big", action="store_true", help="skip the two cases past the 65 535-block cap")
    args = ap.parse_args()

    sources = {"ragged_aiter_bwd_lse": args.hip_dir / "ragged_aiter_bwd_lse.cu",
               "ragged_aiter_bwd_fixup": args.hip_dir / "ragged_aiter_bwd_fixup.cu"}
    if args.backend == "cupy":
        backend = CupyBackend(sources)
    else:
        backend = CpuBackend(sources, {"ragged_aiter_bwd_lse": LSE_SIG, "ragged_aiter_bwd_fixup": FIXUP_SIG})
    print(f"backend: {backend.name}: {backend.description}")

    rng = np.random.default_rng(args.seed)
    jobs = [("lse", make_lse_case(rng)) for _ in range(args.cases)]
    jobs += [("fixup", make_fixup_case(rng)) for _ in range(args.cases)]
    if not args.no_big:
        jobs += [("lse", make_lse_case(rng, big=True)), ("fixup", make_fixup_case(rng, big=True))]
    cov = {"lse_dense": 0, "lse_ragged": 0, "ragged_int64": 0, "ragged_mult>1": 0, "rows_written": 0,
           "neg_inf_rows": 0, "small_grid": 0, "capped_grid": 0, "fixup": 0, "dq_zeroed_batches": 0,
           "dkdv_zeroed_batches": 0, "both_empty_batches": 0}
    failures = 0
    for n, (kind, case) in enumerate(jobs):
        if kind == "lse":
            errs = run_lse(backend, case)
            cov["lse_dense" if case["layout"] == DENSE else "lse_ragged"] += 1
            if case["layout"] == RAGGED:
                cov["ragged_int64"] += case["width"] == 8
                cov["ragged_mult>1"] += case["mult"] > 1
            cov["rows_written"] += int(case["len_q"].sum()) * case["heads"]
            cov["neg_inf_rows"] += model_lse(case)[1]
            items = case["batch"] * case["s_q"] * case["heads"]
        else:
            errs = run_fixup(backend, case)
            cov["fixup"] += 1
            lq, lk = case["lq"], case["lk"]
            cov["dq_zeroed_batches"] += int(((lk == 0) & (lq > 0)).sum())
            cov["dkdv_zeroed_batches"] += int(((lq == 0) & (lk > 0)).sum())
            cov["both_empty_batches"] += int(((lq == 0) & (lk == 0)).sum())
            items = case["batch"] * (case["s_q"] * case["hq"] + case["s_kv"] * case["hk"])
        cov["small_grid"] += case["grid"] * THREADS < items
        cov["capped_grid"] += case["grid"] == MAX_BLOCKS and items > MAX_BLOCKS * THREADS
        if errs:
            failures += 1
            what = describe_lse(case) if kind == "lse" else describe_fixup(case)
            print(f"case {n} FAILED (seed {args.seed}): {what}")
            for e in errs:
                print("   ", e)
    print("coverage:", ", ".join(f"{k}={v}" for k, v in cov.items()))
    print(f"{len(jobs) - failures}/{len(jobs)} cases match the NumPy model")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
