"""The compute-sanitizer case for kernels launched directly (cupy, the study harnesses): small fp16
ragged problems with zero-length Q and K/V batches, seq_len padding and GQA 2, causal bottom-right
and a (16, 4) sliding window, checked against numpy in float64, torch-free (compute-sanitizer runs
it as a subprocess):

  compute-sanitizer --tool memcheck python3 bench/gpu/fmha_sanitize.py

The product's sanitizer check is the same case through the C ABI
(plugin/tests/gpu.rs `zero_length_batches_every_head_dim_padding_causal_and_window`), run under
memcheck and racecheck by bench/gpu/verify_build.sh; this script serves the study kernels that only
a direct launch reaches (fmha_ws.py, fmha_wst.py import sanitize_one).
"""

import sys

import numpy as np
import cupy as cp

from fmha_dev import DEFAULTS, HEAD_DIMS, Engine, compile_module, dims_name


def sanitize_case(mod):
    """Small fp16 ragged cases (every compiled head dim) with zero-length batches and padding,
    torch-free, for compute-sanitizer."""
    # Causal bottom-right, and a sliding window (left 16, right 4, bottom-right).
    bands = [(-1, 0), (16, 4)]
    return max(sanitize_one(mod, d, dv, left, right) for d, dv in HEAD_DIMS for left, right in bands)


def sanitize_one(mod, d, dv, left, right, name=None, prepass="ragged_fmha_prepass"):
    eng = Engine(mod, name or DEFAULTS[("f16", d, dv)], d, dv, prepass=prepass)
    rng = np.random.default_rng(3)
    lq, lkv = [5, 0, 37, 130], [70, 9, 0, 200]
    pad_q, pad_kv = [2, 0, 0, 3], [0, 4, 0, 1]
    h_q, h_kv = 4, 2
    ext_q = [a + b for a, b in zip(lq, pad_q)]
    ext_kv = [a + b for a, b in zip(lkv, pad_kv)]
    tq = np.concatenate([[0], np.cumsum(ext_q)])
    tk = np.concatenate([[0], np.cumsum(ext_kv)])
    q = rng.uniform(-1, 1, (tq[-1], h_q, d)).astype(np.float16)
    k = rng.uniform(-1, 1, (tk[-1], h_kv, d)).astype(np.float16)
    v = rng.uniform(-1, 1, (tk[-1], h_kv, dv)).astype(np.float16)
    # Exact-size device buffers so that any out-of-range access is an out-of-bounds error.
    dq, dk, dvv = cp.asarray(q), cp.asarray(k), cp.asarray(v)
    do = cp.full((tq[-1], h_q, dv), np.nan, dtype=cp.float16)
    dl = cp.full((len(lq), h_q, max(ext_q)), np.nan, dtype=cp.float32)
    qo = cp.asarray((tq * h_q * d).astype(np.int32))
    ko = cp.asarray((tk * h_kv * d).astype(np.int32))
    sq = cp.asarray(np.array(lq, dtype=np.int32))
    sk = cp.asarray(np.array(lkv, dtype=np.int32))
    p = dict(q=dq.data.ptr, k=dk.data.ptr, v=dvv.data.ptr, o=do.data.ptr, lse=dl.data.ptr,
             q_off=qo.data.ptr, q_off_bytes=4, q_mult=1, kv_off=ko.data.ptr, kv_off_bytes=4, kv_mult=1,
             slq=sq.data.ptr, slq_bytes=4, slkv=sk.data.ptr, slkv_bytes=4,
             q_seq=h_q * d, q_head=d, k_seq=h_kv * d, k_head=d, v_seq=h_kv * dv, v_head=dv, o_seq=h_q * dv,
             o_head=dv, lse_bstride=h_q * max(ext_q), lse_seq=1, lse_head=max(ext_q),
             s_q_max=max(ext_q), s_kv_max=max(ext_kv), batch=len(lq), h_q=h_q, h_kv=h_kv, scale=0.125,
             left=left, right=right, br=1)
    ws = eng.workspace(len(lq), max(ext_q))
    eng.launch(p, ws)
    cp.cuda.runtime.deviceSynchronize()
    out = cp.asnumpy(do).astype(np.float64)
    ok = int(ws["err"].get()[0]) == 0
    worst = 0.0
    for b in range(len(lq)):
        qb = q[tq[b]: tq[b] + lq[b]].astype(np.float64)
        kb = np.repeat(k[tk[b]: tk[b] + lkv[b]].astype(np.float64), h_q // h_kv, axis=1)
        vb = np.repeat(v[tk[b]: tk[b] + lkv[b]].astype(np.float64), h_q // h_kv, axis=1)
        got = out[tq[b]: tq[b] + lq[b]]
        if lq[b] == 0:
            continue
        ok &= bool(np.isnan(out[tq[b] + lq[b]: tq[b + 1]]).all())
        if lkv[b] == 0:
            ok &= bool((got == 0).all())
            continue
        s = np.einsum("ihd,jhd->hij", qb, kb) * 0.125
        i = np.arange(lq[b])[:, None]
        j = np.arange(lkv[b])[None, :]
        off = lkv[b] - lq[b]
        admit = np.ones((lq[b], lkv[b]), dtype=bool)
        if right >= 0:
            admit &= j <= i + off + right
        if left >= 0:
            admit &= j >= i + off - left
        s = np.where(admit, s, -np.inf)
        m = s.max(-1, keepdims=True)
        m = np.where(np.isinf(m), 0, m)
        pe = np.exp(s - m)
        l = pe.sum(-1, keepdims=True)
        ref = np.einsum("hij,jhd->ihd", pe / np.where(l > 0, l, 1), vb)
        worst = max(worst, float(np.abs(got - ref).max()))
    ok &= worst < 2e-3 + 2e-3
    band = "causal-br" if left < 0 else f"window-br({left},{right})"
    print(f"sanitize case {dims_name(d, dv)} {band}: {'ok' if ok else 'FAILED'} (max abs err {worst:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(sanitize_case(compile_module()))
