#!/usr/bin/env python3
"""Check the AITER engine's device kernels (kernels/aiter-fmha/hip/*.cu) against a NumPy model.

The pre-pass and fix-up kernels are written in the subset HIP and CUDA share, so NVRTC
compiles the very source that hipRTC compiles on AMD. This script compiles them with
`cupy.RawModule` (NVRTC), runs many random cases, and compares every output bit for bit with
an independent NumPy implementation of ragged-sdpa.md §7.4 / §5. Needs an NVIDIA GPU, CuPy and
NumPy. Usage (repository root):

    python3 bench/aiter/check_device_kernels.py [--cases N] [--seed S]

Exit status 0 when every case matches, 1 otherwise.
"""

import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
HIP = ROOT / "kernels" / "hip"
THREADS = 256  # RAGGED_PREPASS_THREADS

STATUS = {
    "first_nonzero": 1,
    "decrease": 2,
    "partial_row": 4,
    "extent_over_max": 8,
    "overflow": 16,
    "clamped": 32,
}
INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------- NumPy models


def model_side(stored, mult, seq_stride, s_max, seq_lens):
    """Token starts, logical lengths and status bits for one side (Q or K)."""
    batch = len(stored) - 1
    flags = 0
    starts = np.zeros(batch + 1, dtype=np.int64)
    elems = []
    for b in range(batch + 1):
        v = int(stored[b])
        if v < 0:
            flags |= STATUS["decrease"]
            e = 0
        elif v != 0 and mult > (2**63 - 1) // v:
            flags |= STATUS["overflow"]
            e = 2**63 - 1
        else:
            e = v * mult
        elems.append(e)
    if elems[0] != 0:
        flags |= STATUS["first_nonzero"]
    for b in range(batch + 1):
        e = elems[b]
        if e % seq_stride != 0:
            flags |= STATUS["partial_row"]
        tok = e // seq_stride
        if tok > INT32_MAX:
            flags |= STATUS["overflow"]
            tok = INT32_MAX
        starts[b] = tok
    lens = np.zeros(batch, dtype=np.int64)
    for b in range(batch):
        if elems[b + 1] < elems[b]:
            flags |= STATUS["decrease"]
        extent = max(int(starts[b + 1]) - int(starts[b]), 0)
        if extent > s_max:
            flags |= STATUS["extent_over_max"]
        n = extent
        if seq_lens is not None:
            want = int(seq_lens[b])
            n = min(max(want, 0), extent)
            if n != want:
                flags |= STATUS["clamped"]
        lens[b] = n
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return starts, lens, cu, flags


def row_is_empty(i, lq, lkv, left, right, bottom_right):
    if lkv <= 0:
        return True
    offset = lkv - lq if bottom_right else 0
    admitted = [
        j
        for j in range(lkv)
        if not ((right >= 0 and j > i + offset + right) or (left >= 0 and j < i + offset - left))
    ]
    return len(admitted) == 0


# ----------------------------------------------------------------------------- case builders


def random_offsets(rng, batch, s_max, seq_stride, mult, zero_prob):
    """Valid element offsets in stored units (element offset / mult)."""
    extents = rng.integers(0, s_max + 1, size=batch)
    extents[rng.random(batch) < zero_prob] = 0
    elem = np.concatenate([[0], np.cumsum(extents * seq_stride)])
    assert all(e % mult == 0 for e in elem)
    return elem // mult, extents


def pick_mult(rng, seq_stride):
    divisors = [d for d in range(1, seq_stride + 1) if seq_stride % d == 0]
    return int(rng.choice(divisors))


def corrupt(rng, stored):
    """Break one precondition on purpose so the status bits are exercised."""
    stored = stored.copy()
    kind = rng.integers(0, 3)
    if kind == 0:
        stored[0] = 3
    elif kind == 1 and len(stored) > 2:
        stored[1] = stored[2] + 5
    else:
        stored[-1] += 1
    return stored


# ----------------------------------------------------------------------------- runners


def to_dev(cp, arr, dtype):
    return cp.asarray(np.ascontiguousarray(arr, dtype=dtype))


def run_prepass(cp, fn, case):
    b = case["batch"]
    q_w, k_w = case["q_width"], case["k_width"]
    dt = {4: np.int32, 8: np.int64}
    qo = to_dev(cp, case["q_stored"], dt[q_w])
    ko = to_dev(cp, case["k_stored"], dt[k_w])
    slq = case["seq_len_q"]
    slk = case["seq_len_kv"]
    slq_d = to_dev(cp, slq, dt[case["slq_width"]]) if slq is not None else None
    slk_d = to_dev(cp, slk, dt[case["slk_width"]]) if slk is not None else None
    sentinel = -7
    seqstart_q = cp.full(b + 1, sentinel, dtype=cp.int32)
    seqstart_k = cp.full(b + 1, sentinel, dtype=cp.int32)
    len_q = cp.full(b, sentinel, dtype=cp.int32)
    len_kv = cp.full(b, sentinel, dtype=cp.int32)
    cu_q = cp.full(b + 1, sentinel, dtype=cp.int32) if slq is not None else None
    cu_k = cp.full(b + 1, sentinel, dtype=cp.int32) if slk is not None else None
    status = cp.zeros(1, dtype=cp.uint32)
    null = np.uint64(0)
    fn(
        (1,),
        (THREADS,),
        (
            qo, np.int32(q_w), np.int64(case["q_mult"]), np.int64(case["q_stride"]), np.int64(case["s_q_max"]),
            ko, np.int32(k_w), np.int64(case["k_mult"]), np.int64(case["k_stride"]), np.int64(case["s_kv_max"]),
            slq_d if slq_d is not None else null, np.int32(case["slq_width"] if slq is not None else 0),
            slk_d if slk_d is not None else null, np.int32(case["slk_width"] if slk is not None else 0),
            np.int32(b),
            seqstart_q, seqstart_k, len_q, len_kv,
            cu_q if cu_q is not None else null,
            cu_k if cu_k is not None else null,
            status,
        ),
    )
    cp.cuda.runtime.deviceSynchronize()
    out = {
        "seqstart_q": cp.asnumpy(seqstart_q),
        "seqstart_k": cp.asnumpy(seqstart_k),
        "len_q": cp.asnumpy(len_q),
        "len_kv": cp.asnumpy(len_kv),
        "status": int(cp.asnumpy(status)[0]),
    }
    if cu_q is not None:
        out["cu_q"] = cp.asnumpy(cu_q)
    if cu_k is not None:
        out["cu_k"] = cp.asnumpy(cu_k)
    return out


def check_prepass(case, got):
    sq, lq, cq, fq = model_side(case["q_stored"], case["q_mult"], case["q_stride"], case["s_q_max"], case["seq_len_q"])
    sk, lk, ck, fk = model_side(case["k_stored"], case["k_mult"], case["k_stride"], case["s_kv_max"], case["seq_len_kv"])
    errors = []
    for name, want in [("seqstart_q", sq), ("seqstart_k", sk), ("len_q", lq), ("len_kv", lk)]:
        if not np.array_equal(got[name].astype(np.int64), want):
            errors.append(f"{name}: got {got[name][:12]} want {want[:12]}")
    if "cu_q" in got and not np.array_equal(got["cu_q"].astype(np.int64), cq):
        errors.append(f"cu_seqlen_q: got {got['cu_q'][:12]} want {cq[:12]}")
    if "cu_k" in got and not np.array_equal(got["cu_k"].astype(np.int64), ck):
        errors.append(f"cu_seqlen_k: got {got['cu_k'][:12]} want {ck[:12]}")
    if got["status"] != (fq | fk):
        errors.append(f"status: got {got['status']:#x} want {(fq | fk):#x}")
    return errors


def run_and_check_fixup(cp, fn, rng, case, pre):
    """Fix-up on the pre-pass outputs of a valid case; compares O and LSE bit for bit."""
    b, hq, sq_max = case["batch"], case["heads_q"], case["s_q_max"]
    dv, elem = case["d_v"], case["o_elem_bytes"]
    seqstart_q = pre["seqstart_q"].astype(np.int64)
    len_q, len_kv = pre["len_q"].astype(np.int64), pre["len_kv"].astype(np.int64)
    total_q = int(seqstart_q[-1])
    o_seq_stride = hq * dv
    o_dtype = np.uint16 if elem == 2 else np.uint32
    o_init = rng.integers(1, 2 ** (8 * elem) - 1, size=max(total_q, 1) * o_seq_stride, dtype=np.uint64).astype(o_dtype)
    scratch_stride = b * sq_max
    scratch = rng.standard_normal(hq * scratch_stride).astype(np.float32)
    scratch[rng.random(scratch.size) < 0.05] = np.inf  # what AITER writes for empty batches
    nan = np.frombuffer(np.uint32(0x7FC0DEAD).tobytes(), dtype=np.float32)[0]
    layout = case["lse_layout"]
    left, right, br = case["left"], case["right"], case["bottom_right"]

    if layout == 1:
        # dense [B, H, S, 1], sometimes with padded strides
        pad = int(rng.integers(0, 3))
        ss = 1
        sh = sq_max + pad
        sb = hq * sh + pad
        lse_size = b * sb
        lse_args = (np.int64(sb), np.int64(sh), np.int64(ss))
        lse_w, lse_mult, lse_seq, lse_head = 0, 1, 0, 0
    elif layout == 2:
        # ragged token-major [B, S, H, 1], own aux in elements (or tokens with mult = H)
        ext = np.diff(seqstart_q)
        lse_mult = int(rng.choice([1, hq]))
        elem_off = np.concatenate([[0], np.cumsum(ext * hq)])
        lse_w = int(rng.choice([4, 8]))
        lse_offsets_h = elem_off // lse_mult
        lse_size = int(elem_off[-1])
        lse_args = (np.int64(0), np.int64(0), np.int64(0))
        lse_seq, lse_head = hq, 1
    else:
        lse_size = 0
        lse_args = (np.int64(0), np.int64(0), np.int64(0))
        lse_w, lse_mult, lse_seq, lse_head = 0, 1, 0, 0

    lse_init = np.full(max(lse_size, 1), nan, dtype=np.float32)

    # ---- model
    o_want = o_init.copy()
    lse_want = lse_init.copy()
    for bb in range(b):
        for i in range(int(len_q[bb])):
            row = int(seqstart_q[bb]) + i
            empty = row_is_empty(i, int(len_q[bb]), int(len_kv[bb]), left, right, br)
            for h in range(hq):
                if empty:
                    o_want[row * o_seq_stride + h * dv : row * o_seq_stride + h * dv + dv] = 0
                if layout == 0:
                    continue
                v = np.float32(-np.inf) if empty else scratch[h * scratch_stride + row]
                if layout == 1:
                    sb_, sh_, ss_ = (int(x) for x in lse_args)
                    lse_want[bb * sb_ + h * sh_ + i * ss_] = v
                else:
                    lse_want[int(elem_off[bb]) + i * lse_seq + h * lse_head] = v

    # ---- device
    dt = {4: np.int32, 8: np.int64}
    d_seqstart = cp.asarray(pre["seqstart_q"])
    d_lq = cp.asarray(pre["len_q"])
    d_lkv = cp.asarray(pre["len_kv"])
    d_o = cp.asarray(o_init)
    d_scratch = cp.asarray(scratch) if layout != 0 else None
    d_lse = cp.asarray(lse_init) if layout != 0 else None
    d_lse_off = cp.asarray(lse_offsets_h.astype(dt[lse_w])) if layout == 2 else None
    null = np.uint64(0)
    total = b * sq_max * hq
    blocks = max(1, min((total + 255) // 256, int(rng.choice([1, 3, 1024]))))
    fn(
        (blocks,),
        (256,),
        (
            d_seqstart, d_lq, d_lkv, np.int32(b), np.int32(sq_max), np.int32(hq),
            np.int64(left), np.int64(right), np.int32(1 if br else 0),
            d_o, np.int32(elem), np.int64(o_seq_stride), np.int64(dv), np.int32(dv),
            d_scratch if d_scratch is not None else null, np.int64(scratch_stride),
            d_lse if d_lse is not None else null, np.int32(layout),
            *lse_args,
            d_lse_off if d_lse_off is not None else null, np.int32(lse_w), np.int64(lse_mult),
            np.int64(lse_seq), np.int64(lse_head),
        ),
    )
    cp.cuda.runtime.deviceSynchronize()
    errors = []
    o_got = cp.asnumpy(d_o)
    if not np.array_equal(o_got, o_want):
        bad = np.nonzero(o_got != o_want)[0]
        errors.append(f"O differs at {len(bad)} elements, first {bad[:8]}")
    if layout != 0:
        lse_got = cp.asnumpy(d_lse)
        if lse_got.tobytes() != lse_want.tobytes():
            bad = np.nonzero(lse_got.view(np.uint32) != lse_want.view(np.uint32))[0]
            errors.append(f"LSE differs at {len(bad)} positions, first {bad[:8]}: got {lse_got[bad[:4]]} want {lse_want[bad[:4]]}")
    return errors


def make_case(rng, idx):
    big = idx % 10 == 0
    batch = int(rng.integers(300, 1500)) if big else int(rng.integers(1, 40))
    heads_q = int(rng.choice([1, 2, 4, 8]))
    heads_k = int(rng.choice([h for h in [1, 2, 4, 8] if heads_q % h == 0]))
    d = int(rng.choice([8, 16, 64]))
    s_q_max = int(rng.integers(1, 12))
    s_kv_max = int(rng.integers(1, 12))
    q_stride, k_stride = heads_q * d, heads_k * d
    q_mult = pick_mult(rng, q_stride) if rng.random() < 0.5 else 1
    k_mult = pick_mult(rng, k_stride) if rng.random() < 0.5 else 1
    zp = float(rng.choice([0.0, 0.2, 0.6]))
    q_stored, q_ext = random_offsets(rng, batch, s_q_max, q_stride, q_mult, zp)
    k_stored, k_ext = random_offsets(rng, batch, s_kv_max, k_stride, k_mult, zp)
    if rng.random() < 0.15:
        # first and last batch empty (pitfall 5)
        for stored, ext, stride, mult in ((q_stored, q_ext, q_stride, q_mult), (k_stored, k_ext, k_stride, k_mult)):
            ext[0] = ext[-1] = 0
            stored[:] = np.concatenate([[0], np.cumsum(ext * stride)]) // mult
    slq = slk = None
    if rng.random() < 0.5:
        slq = (q_ext - rng.integers(0, 3, size=batch)).clip(min=0)
        slk = (k_ext - rng.integers(0, 3, size=batch)).clip(min=0)
        if rng.random() < 0.3:
            slq[rng.integers(0, batch)] += 4  # over extent: clamped, flagged
            slk[rng.integers(0, batch)] = -2  # negative: clamped, flagged
    broken = rng.random() < 0.1
    if broken:
        q_stored = corrupt(rng, q_stored)
    left = int(rng.choice([-1, -1, 0, 1, 3]))
    right = int(rng.choice([-1, 0, 0, 2]))
    return {
        "batch": batch, "heads_q": heads_q, "d_v": d, "s_q_max": s_q_max, "s_kv_max": s_kv_max,
        "q_stored": q_stored, "k_stored": k_stored,
        "q_width": int(rng.choice([4, 8])), "k_width": int(rng.choice([4, 8])),
        "q_mult": q_mult, "k_mult": k_mult, "q_stride": q_stride, "k_stride": k_stride,
        "seq_len_q": slq, "seq_len_kv": slk,
        "slq_width": int(rng.choice([4, 8])), "slk_width": int(rng.choice([4, 8])),
        "broken": broken,
        "left": left, "right": right, "bottom_right": bool(rng.random() < 0.5),
        "lse_layout": int(rng.choice([0, 1, 2])), "o_elem_bytes": int(rng.choice([2, 4])),
    }


def fixed_cases():
    """Hand-written edge cases (pitfall 5): first/last batch empty, total tokens < B, int64 aux."""
    out = []
    base = dict(heads_q=2, d_v=8, q_width=8, k_width=4, q_mult=1, k_mult=16, slq_width=4, slk_width=8,
                broken=False, o_elem_bytes=2, lse_layout=1)
    # B = 4, Q tokens [0, 2, 0, 1], K tokens [0, 3, 1, 0] (K stored in token units, mult = H*D = 16)
    q = np.array([0, 0, 2, 2, 3]) * 16
    k = np.array([0, 0, 3, 4, 4])
    out.append(dict(base, batch=4, s_q_max=2, s_kv_max=3, q_stored=q, k_stored=k, q_stride=16, k_stride=16,
                    seq_len_q=None, seq_len_kv=None, left=-1, right=0, bottom_right=True))
    out.append(dict(base, batch=4, s_q_max=2, s_kv_max=3, q_stored=q, k_stored=k, q_stride=16, k_stride=16,
                    seq_len_q=np.array([0, 1, 0, 1]), seq_len_kv=np.array([0, 2, 1, 0]),
                    left=-1, right=0, bottom_right=False, lse_layout=2))
    # cuDNN docs example: aabbb, D = 64 => [0, 128, 320]; aa00bbb => [0, 256, 448], seq_len_q = [2, 3]
    ex = dict(base, heads_q=1, d_v=64, q_stride=64, k_stride=64, k_mult=1, s_q_max=4, s_kv_max=4,
              left=-1, right=-1, bottom_right=False)
    out.append(dict(ex, batch=2, q_stored=np.array([0, 128, 320]), k_stored=np.array([0, 128, 320]),
                    seq_len_q=None, seq_len_kv=None))
    out.append(dict(ex, batch=2, q_stored=np.array([0, 256, 448]), k_stored=np.array([0, 256, 448]),
                    seq_len_q=np.array([2, 3]), seq_len_kv=np.array([2, 3])))
    # offsets whose element or token value overflows (pitfall 6): flagged, clamped, never wrapped
    out.append(dict(base, batch=1, s_q_max=4, s_kv_max=4, q_stored=np.array([0, 2**62]), q_mult=4,
                    k_stored=np.array([0, 2**33]), k_width=8, k_mult=16, q_stride=16, k_stride=16,
                    seq_len_q=None, seq_len_kv=None, left=-1, right=-1, bottom_right=False, broken=True))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args()

    import cupy as cp

    src_pre = (HIP / "ragged_aiter_prepass.cu").read_text()
    src_fix = (HIP / "ragged_aiter_fixup.cu").read_text()
    mod_pre = cp.RawModule(code=src_pre, backend="nvrtc", options=("-std=c++14",))
    mod_fix = cp.RawModule(code=src_fix, backend="nvrtc", options=("-std=c++14",))
    prepass = mod_pre.get_function("ragged_aiter_prepass")
    fixup = mod_fix.get_function("ragged_aiter_fixup")
    dev = cp.cuda.Device(0)
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()} (cc {dev.compute_capability}),"
          f" cupy {cp.__version__}, nvrtc {cp.cuda.nvrtc.getVersion()}")

    rng = np.random.default_rng(args.seed)
    cases = fixed_cases() + [make_case(rng, i) for i in range(args.cases)]
    failures = 0
    stats = {"prepass": 0, "fixup": 0, "broken": 0, "int64_aux": 0, "mult>1": 0, "seq_lens": 0,
             "zero_len_q": 0, "zero_len_kv": 0, "empty_rows": 0, "big_batch": 0}
    for n, case in enumerate(cases):
        pre = run_prepass(cp, prepass, case)
        errs = check_prepass(case, pre)
        stats["prepass"] += 1
        stats["broken"] += case["broken"]
        stats["int64_aux"] += case["q_width"] == 8 or case["k_width"] == 8
        stats["mult>1"] += case["q_mult"] > 1 or case["k_mult"] > 1
        stats["seq_lens"] += case["seq_len_q"] is not None
        stats["big_batch"] += case["batch"] > THREADS
        if not case["broken"] and not errs:
            stats["zero_len_q"] += int((pre["len_q"] == 0).sum())
            stats["zero_len_kv"] += int(((pre["len_kv"] == 0) & (pre["len_q"] > 0)).sum())
            errs += run_and_check_fixup(cp, fixup, rng, case, pre)
            stats["fixup"] += 1
            for bb in range(case["batch"]):
                for i in range(int(pre["len_q"][bb])):
                    stats["empty_rows"] += row_is_empty(i, int(pre["len_q"][bb]), int(pre["len_kv"][bb]),
                                                        case["left"], case["right"], case["bottom_right"])
        if errs:
            failures += 1
            print(f"case {n} FAILED (batch={case['batch']}, widths={case['q_width']}/{case['k_width']}, "
                  f"mult={case['q_mult']}/{case['k_mult']}, seq_lens={case['seq_len_q'] is not None}, "
                  f"mask=({case['left']},{case['right']},br={case['bottom_right']}), lse={case['lse_layout']})")
            for e in errs:
                print("   ", e)
    print("coverage:", ", ".join(f"{k}={v}" for k, v in stats.items()))
    print(f"{len(cases) - failures}/{len(cases)} cases match the NumPy model")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
