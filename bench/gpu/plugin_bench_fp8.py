#!/usr/bin/env python3
"""FP8 (e4m3) ragged SDPA forward through the plugin's C ABI against cuDNN's FP8 SDPA and
FlashAttention-3's FP8 forward, with each engine's accuracy against float64 beside its speed.

The graphs are `plugin/examples/emit_bench_graphs/`'s FP8 problems (`problems_fp8.json`): cuDNN's
FP8 forward as hipDNN writes it — Q, K, V and O in FP8_E4M3, descale_q/k/v/s, scale_s and scale_o
bound as one-element FLOAT device tensors, amax_s and amax_o written, no LSE. "Ours" is one
`hipdnnEnginePluginExecuteOpGraph` on the CUDA engine. The peers, in the same process on the same
FP8 codes:

- cuDNN FP8: the frontend's `sdpa_fp8` with the same six scalars and FP8 O (the only O type cuDNN's
  Hopper FP8 SDPA writes), ragged offsets on Q/K/V/O and the padding mask; if the frontend refuses
  the ragged form, the same codes copied into padded `[B, S_max, H, D]` buffers with the padding
  mask ("cuDNN FP8 padded": it reads and writes the padding, which counts against it);
- FA3 FP8: `flash_attn_varlen_func` on float8_e4m3fn Q/K/V with per-head descales, if the carried
  `fa3-fwd` build has its FP8 kernels (it writes bf16 O and no amax: less work than the other two).

Inputs: Q, K, V uniform in [-1, 1) from a fixed seed, each quantized with its per-tensor descale
max|x| / 448 (e4m3's largest finite value). scale_s = 448 and descale_s = 1/448 (P ≤ 1); scale_o is
delayed scaling as FP8 inference uses it: one call with scale_o = 1 gives amax_o, the timed calls
use 448 / amax_o. Accuracy: max |O − O₆₄| over the last sequence's first 256 rows at heads 0 and
H − 1, where O₆₄ is exact float64 attention of the dequantized codes (the error is FP8's rounding
of P and O plus the engine's own), and the same for every engine.

Timing as plugin_bench.py: every engine of a problem interleaved, 15 rounds of CUDA-event pairs
around 10 back-to-back calls, the order rotated each round; TFLOP/s = 4 · D · H · admitted pairs /
time.

Usage:
  python3 bench/gpu/plugin_bench_fp8.py --plugin LIB.so --graphs DIR          # on the GPU machine
  python3 bench/gpu/plugin_bench_fp8.py --plugin LIB.so --graphs DIR --self-check
      # anywhere, numpy only: DIR's tiny FP8 graphs (emit_bench_graphs --tiny) on the host engine
      # through the same binding, against an FP8 pipeline written here in float64.
"""

import argparse
import ctypes
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from event_timing import call_each, interleaved_detail  # noqa: E402
from plugin_bench_abi import (  # noqa: E402
    CUDA_ENGINE,
    Execution,
    HOST_ENGINE,
    SELF_CHECK_MAX_TOKENS,
    Plugin,
    build_cudnn_graph,
    open_cudnn,
    engine_config,
    load_problems,
    token_starts,
    variant_pack,
)

LISTING = "problems_fp8.json"
E4M3_MAX = 448.0


# ------------------------------------------------------------------------------------------------
# E4M3 (OCP: bias 7, 3 mantissa bits, 0x7F / 0xFF NaN, no infinities) in numpy.
# ------------------------------------------------------------------------------------------------


def e4m3_decode_table():
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    value = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
    value = sign * value
    value[(exp == 15) & (man == 7)] = np.nan
    return value


E4M3 = e4m3_decode_table()
POSITIVE = E4M3[:0x7F]  # codes 0x00..0x7E ascending, 0 to 448


def e4m3_encode(x):
    """float64 → e4m3 codes: round to nearest, ties to the even code, saturating at ±448 (the
    satfinite conversion the spec's FP8 steps use); NaN → 0x7F."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.minimum(np.abs(np.nan_to_num(x, nan=0.0)), E4M3_MAX)
    hi = np.clip(np.searchsorted(POSITIVE, mag, side="left"), 0, len(POSITIVE) - 1)
    lo = np.maximum(hi - 1, 0)
    d_hi, d_lo = POSITIVE[hi] - mag, mag - POSITIVE[lo]
    pick = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = pick.astype(np.uint8) | np.where(np.signbit(x) & (pick > 0), 0x80, 0).astype(np.uint8)
    return np.where(np.isnan(x), 0x7F, code).astype(np.uint8)


def e4m3_step(v):
    """The spacing of e4m3 values at magnitude |v| (one rounding step)."""
    mag = np.maximum(np.abs(v), 2.0 ** -6)
    return 2.0 ** (np.floor(np.log2(mag)) - 3)


def fp8_pipeline(qv, kv, vv, starts, scale, causal, scalars):
    """The FP8 forward of kernels/core/fp8-attention.md in float64 over dequantized-code inputs
    (qv = descale_q · Q codes' values etc. are NOT applied here: the descales are in `scalars`):
    S = descale_q·descale_k·scale·QKᵀ, P = softmax(S), amax_s = max P, P8 = e4m3(P·scale_s),
    O' = descale_s·descale_v·P8·V, amax_o = max |O'|, O = e4m3(O'·scale_o). Returns (O codes, amax_s,
    amax_o)."""
    t, h, dv = vv.shape[0], vv.shape[1], vv.shape[2]
    o_wide = np.zeros((t, h, dv))
    amax_s = amax_o = 0.0
    for b in range(len(starts) - 1):
        s0, s1 = starts[b], starts[b + 1]
        if s1 == s0:
            continue
        s = np.einsum("ihd,jhd->hij", qv[s0:s1], kv[s0:s1]) * (scalars["descale_q"] * scalars["descale_k"] * scale)
        if causal:
            n = s1 - s0
            s = np.where(np.tril(np.ones((n, n), dtype=bool))[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        amax_s = max(amax_s, float(p.max()))
        p8 = E4M3[e4m3_encode(p * scalars["scale_s"])]
        o = np.einsum("hij,jhd->ihd", p8, vv[s0:s1]) * (scalars["descale_s"] * scalars["descale_v"])
        amax_o = max(amax_o, float(np.abs(o).max()))
        o_wide[s0:s1] = o
    return e4m3_encode(o_wide * scalars["scale_o"]), amax_s, amax_o


SELF_CHECK_SCALARS = {"descale_q": 0.5, "descale_k": 0.25, "descale_v": 0.75, "descale_s": 1 / 448.0,
                      "scale_s": 448.0, "scale_o": 8.0}


def self_check(plugin, graphs):
    """Every tiny FP8 graph on the host engine through the C ABI against fp8_pipeline: O codes within
    one e4m3 step (the pipeline is float64, the engine rounds P and O from its own float sums, so a
    value on a rounding boundary may land one code away), amax_s and amax_o to 1e-5 relative."""
    print("plugin:", plugin.string(plugin.GetName), plugin.string(plugin.GetVersion), "API",
          plugin.string(plugin.GetApiVersion))
    names = {i: plugin.engine_name(i) for i in plugin.engine_ids()}
    handle = plugin.create()
    rng = np.random.default_rng(17)
    failures = 0
    for meta in load_problems(graphs, LISTING):
        listed = [names.get(i, i) for i in plugin.applicable(handle, meta["graph"])]
        if HOST_ENGINE not in listed:
            print(f"FAIL {meta['name']}: host engine not applicable (applicable: {listed}); "
                  f"log: {plugin.log_lines[-3:]}")
            failures += 1
            continue
        t, h, d = meta["tokens"], meta["heads"], meta["head_dim"]
        if t > SELF_CHECK_MAX_TOKENS:
            ctx, _ = plugin.context(handle, engine_config(graphs, HOST_ENGINE), meta["graph"])
            plugin.check(plugin.DestroyExecutionContext(handle, ctx), "DestroyExecutionContext")
            print(f"PASS {meta['name']}: applicable {listed}, execution context made (not executed: {t} tokens)")
            continue
        q, k, v = (e4m3_encode(rng.uniform(-4, 4, (t, h, d))) for _ in range(3))
        o = np.full((t, h, d), 0x7F, dtype=np.uint8)
        offsets = np.asarray(meta["offsets"], dtype=np.int32)
        scalars = {name: np.array([value], dtype=np.float32) for name, value in SELF_CHECK_SCALARS.items()}
        amax = {"amax_s": np.array([np.nan], dtype=np.float32), "amax_o": np.array([np.nan], dtype=np.float32)}
        u, f = meta["uids"], meta["fp8"]
        pointers = {u["q"]: q.ctypes.data, u["k"]: k.ctypes.data, u["v"]: v.ctypes.data, u["o"]: o.ctypes.data,
                    u["qo_offsets"]: offsets.ctypes.data, u["kv_offsets"]: offsets.ctypes.data}
        pointers.update({f[name]: buf.ctypes.data for name, buf in {**scalars, **amax}.items()})
        ctx, ws_bytes = plugin.context(handle, engine_config(graphs, HOST_ENGINE), meta["graph"])
        workspace = np.zeros(max(ws_bytes, 1), dtype=np.uint8)
        pack = variant_pack(pointers)
        plugin.check(plugin.ExecuteOpGraph(handle, ctx, workspace.ctypes.data if ws_bytes else None, pack,
                                           len(pack)), f"ExecuteOpGraph({meta['name']})")
        plugin.check(plugin.DestroyExecutionContext(handle, ctx), "DestroyExecutionContext")
        want_o, want_s, want_o_amax = fp8_pipeline(E4M3[q], E4M3[k], E4M3[v], token_starts(meta), meta["scale"],
                                                   meta["causal"], {n: float(x[0]) for n, x in scalars.items()})
        got, want = E4M3[o], E4M3[want_o]
        off = np.abs(got - want) / e4m3_step(want)
        ok = (not np.isnan(got).any() and bool((off <= 1.0 + 1e-9).all())
              and abs(amax["amax_s"][0] - want_s) <= 1e-5 * want_s
              and abs(amax["amax_o"][0] - want_o_amax) <= 1e-5 * want_o_amax)
        failures += 0 if ok else 1
        print(f"{'PASS' if ok else 'FAIL'} {meta['name']}: host engine through the ABI, {t} tokens "
              f"{meta['seq_lens']}: O codes equal {np.mean(got == want) * 100:.1f} %, at most "
              f"{off.max():.0f} step away; amax_s {amax['amax_s'][0]:.6g} (want {want_s:.6g}), "
              f"amax_o {amax['amax_o'][0]:.6g} (want {want_o_amax:.6g})")
    plugin.check(plugin.Destroy(handle), "Destroy")
    print(f"FP8 self-check: {'ok' if failures == 0 else f'{failures} failed'}")
    return 1 if failures else 0


# ------------------------------------------------------------------------------------------------
# GPU benchmark.
# ------------------------------------------------------------------------------------------------


def fp8_inputs(torch, meta):
    """Q, K, V as e4m3 codes ([T, H, D], uniform in [-1, 1) from a fixed seed, each scaled by its
    descale max|x| / 448) and the descales as floats."""
    t, h, d = meta["tokens"], meta["heads"], meta["head_dim"]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    codes, descales = {}, {}
    for x in ("q", "k", "v"):
        wide = torch.rand((t, h, d), generator=gen, device="cuda") * 2 - 1
        descale = wide.abs().max().item() / E4M3_MAX
        codes[x] = (wide / descale).to(torch.float8_e4m3fn)
        descales[x] = descale
    return codes, descales


def f64_rows(torch, codes, descales, meta):
    """Exact float64 attention of the dequantized codes for the last sequence's first 256 rows at
    heads 0 and H-1: {head: [n, D]}."""
    starts = token_starts(meta)
    s0, s1 = starts[-2], starts[-1]
    n = min(256, s1 - s0)
    out = {}
    for hh in (0, meta["heads"] - 1):
        q = codes["q"][s0:s0 + n, hh].double() * descales["q"]
        k = codes["k"][s0:s1, hh].double() * descales["k"]
        v = codes["v"][s0:s1, hh].double() * descales["v"]
        s = q @ k.T * meta["scale"]
        if meta["causal"]:
            i = torch.arange(n, device="cuda")[:, None]
            j = torch.arange(s1 - s0, device="cuda")[None, :]
            s = s.masked_fill(j > i, -math.inf)
        out[hh] = torch.softmax(s, -1) @ v
    return out, s0, n


def f64_error(torch, o_values, ref, s0, n):
    """max |O − O₆₄| over the reference rows; o_values: [T, H, D] float (dequantized)."""
    return max((o_values[s0:s0 + n, hh].double() - r).abs().max().item() for hh, r in ref.items())


class Scalars:
    """The six FP8 scalars as one-element device tensors (what the graph binds) and the two amax
    outputs."""

    def __init__(self, torch, descales):
        one = lambda x: torch.tensor([x], dtype=torch.float32, device="cuda")  # noqa: E731
        self.t = {"descale_q": one(descales["q"]), "descale_k": one(descales["k"]),
                  "descale_v": one(descales["v"]), "descale_s": one(1.0 / E4M3_MAX),
                  "scale_s": one(E4M3_MAX), "scale_o": one(1.0),
                  "amax_s": one(float("nan")), "amax_o": one(float("nan"))}


def ours_execution(torch, plugin, graphs, handle, meta, codes, o, scalars):
    u, f = meta["uids"], meta["fp8"]
    offsets = torch.tensor(meta["offsets"], dtype=torch.int32, device="cuda")
    pointers = {u["q"]: codes["q"].data_ptr(), u["k"]: codes["k"].data_ptr(), u["v"]: codes["v"].data_ptr(),
                u["o"]: o.data_ptr(), u["qo_offsets"]: offsets.data_ptr(), u["kv_offsets"]: offsets.data_ptr()}
    pointers.update({f[name]: tensor.data_ptr() for name, tensor in scalars.t.items()})

    def alloc(n):
        ws = torch.empty(n, dtype=torch.uint8, device="cuda")
        return ws, ws.data_ptr()

    ex = Execution(plugin, handle, graphs, CUDA_ENGINE, meta["graph"], pointers, alloc)
    ex.keep = offsets
    return ex


def cudnn_fp8_graph(cudnn, handle, meta, ragged):
    """cuDNN frontend `sdpa_fp8` over [B, H, S, D] dims on BSHD memory: with `ragged`, element offsets
    (int64, uid 10) on Q/K/V/O over the packed buffers; either way per-sequence lengths and the
    padding mask; causal top-left (`sdpa_fp8` takes only the two causal flags, and cuDNN 9.19 runs
    the bottom-right one in FP8 on Blackwell only; every problem here has equal query and key
    lengths, where the two admit the same pairs)."""
    b, h, s, d = meta["batch"], meta["heads"], meta["s_max"], meta["head_dim"]
    e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    stride = [s * h * d, d, h * d, 1]
    g = cudnn.pygraph(handle=handle, io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32)
    qt, kt, vt = (g.tensor(name=n, uid=uid, dim=[b, h, s, d], stride=stride, data_type=e4m3)
                  for n, uid in (("q", 1), ("k", 2), ("v", 3)))
    scalar = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
    sc = {n: g.tensor(name=n, uid=uid, **scalar) for n, uid in
          (("descale_q", 30), ("descale_k", 31), ("descale_v", 32), ("descale_s", 33), ("scale_s", 34),
           ("scale_o", 35))}
    lens = dict(dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
    slq, slkv = g.tensor(name="seq_len_q", uid=20, **lens), g.tensor(name="seq_len_kv", uid=21, **lens)
    ro = None
    if ragged:
        ro = g.tensor(name="ragged", uid=10, dim=[b + 1, 1, 1, 1], stride=[1, 1, 1, 1],
                      data_type=cudnn.data_type.INT64)
        for x in (qt, kt, vt):
            x.set_ragged_offset(ro)
    o, _, amax_s, amax_o = g.sdpa_fp8(
        name="sdpa_fp8", q=qt, k=kt, v=vt, descale_q=sc["descale_q"], descale_k=sc["descale_k"],
        descale_v=sc["descale_v"], descale_s=sc["descale_s"], scale_s=sc["scale_s"], scale_o=sc["scale_o"],
        is_inference=True, attn_scale=meta["scale"], use_padding_mask=True, seq_len_q=slq, seq_len_kv=slkv,
        use_causal_mask=meta["causal"])
    o.set_uid(4).set_output(True).set_dim([b, h, s, d]).set_stride(stride).set_data_type(e4m3)
    if ragged:
        o.set_ragged_offset(ro)
    amax_s.set_uid(40).set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
    amax_o.set_uid(41).set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
    return build_cudnn_graph(cudnn, g)


def padded(torch, x, meta):
    """Packed [T, H, D] → padded [B, S_max, H, D] (zeros past each sequence's length)."""
    b, s = meta["batch"], meta["s_max"]
    out = torch.zeros((b, s) + tuple(x.shape[1:]), dtype=x.dtype, device="cuda")
    starts = token_starts(meta)
    for i in range(b):
        out[i, :starts[i + 1] - starts[i]] = x[starts[i]:starts[i + 1]]
    return out


def unpadded(torch, x, meta):
    starts = token_starts(meta)
    return torch.cat([x[i, :starts[i + 1] - starts[i]] for i in range(meta["batch"])])


def benchmark(torch, plugin, graphs, problems, only_ours=False, calls_only=0):
    stream = torch.cuda.current_stream()
    handle = plugin.create()
    plugin.check(plugin.SetStream(handle, ctypes.c_void_p(stream.cuda_stream)), "SetStream")
    cudnn = cudnn_handle = fa3 = None
    if not only_ours:
        cudnn, cudnn_handle = open_cudnn(stream.cuda_stream)
        try:
            import fa3_fwd_interface as fa3_mod

            fa3 = fa3_mod
        except Exception as e:  # noqa: BLE001
            print(f"FlashAttention-3 unavailable: {type(e).__name__}: {str(e)[:400]}", flush=True)

    rows = []
    for meta in problems:
        name, h, d, causal = meta["name"], meta["heads"], meta["head_dim"], meta["causal"]
        lens, t, b, s = meta["seq_lens"], meta["tokens"], meta["batch"], meta["s_max"]
        flops = float(meta["flops"])
        tflops = lambda ms: flops / ms / 1e9  # noqa: E731
        codes, descales = fp8_inputs(torch, meta)
        ref, s0, n = f64_rows(torch, codes, descales, meta)
        starts = token_starts(meta)
        cu = torch.tensor(starts, dtype=torch.int32, device="cuda")
        row = {"name": name, "problem": meta["problem"], "d": d, "causal": causal}
        print(f"== {name}: B={b} lens={lens} {flops / 1e9:.1f} GFLOP", flush=True)
        timed, keep = [], []

        # Ours: one call with scale_o = 1 measures amax_o, then scale_o = 448 / amax_o.
        try:
            o = torch.zeros((t, h, d), dtype=torch.float8_e4m3fn, device="cuda")
            scalars = Scalars(torch, descales)
            ours = ours_execution(torch, plugin, graphs, handle, meta, codes, o, scalars)
            keep += [ours, o, scalars]
            ours()
            torch.cuda.synchronize()
            scalars.t["scale_o"].fill_(E4M3_MAX / scalars.t["amax_o"].item())
            ours()
            torch.cuda.synchronize()
            o_values = o.float() / scalars.t["scale_o"].item()
            err = f64_error(torch, o_values, ref, s0, n)
            row["ours_err"] = err
            timed.append(("ours", "ours (C ABI)", ours,
                          f"workspace {ours.ws_bytes} B; amax_s {scalars.t['amax_s'].item():.4g}, amax_o "
                          f"{scalars.t['amax_o'].item():.4g}; vs float64: max abs err {err:.2e}"))
        except Exception as e:  # noqa: BLE001
            print(f"  ours FAILED: {type(e).__name__}: {str(e)[:600]}", flush=True)

        if cudnn is not None:
            for ragged in (True, False):
                label = "cuDNN FP8 ragged" if ragged else "cuDNN FP8 padded"
                try:
                    t0 = time.perf_counter()
                    g = cudnn_fp8_graph(cudnn, cudnn_handle, meta, ragged)
                    build_s = time.perf_counter() - t0
                    ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
                    if ragged:
                        q, k, v = codes["q"], codes["k"], codes["v"]
                        o_c = torch.zeros((t, h, d), dtype=torch.float8_e4m3fn, device="cuda")
                    else:
                        q, k, v = (padded(torch, codes[x], meta) for x in ("q", "k", "v"))
                        o_c = torch.zeros((b, s, h, d), dtype=torch.float8_e4m3fn, device="cuda")
                    sc = Scalars(torch, descales)
                    seq = torch.tensor(lens, dtype=torch.int32, device="cuda").view(b, 1, 1, 1)
                    pack = {1: q, 2: k, 3: v, 4: o_c, 20: seq, 21: seq, 40: sc.t["amax_s"], 41: sc.t["amax_o"]}
                    pack.update({uid: sc.t[n] for uid, n in ((30, "descale_q"), (31, "descale_k"),
                                                             (32, "descale_v"), (33, "descale_s"),
                                                             (34, "scale_s"), (35, "scale_o"))})
                    if ragged:
                        pack[10] = torch.tensor([x * h * d for x in starts], dtype=torch.int64, device="cuda")
                    keep += [g, ws, pack, sc]

                    def cudnn_run(g=g, pack=pack, ws=ws):
                        g.execute(pack, ws, handle=cudnn_handle)
                    cudnn_run()
                    torch.cuda.synchronize()
                    sc.t["scale_o"].fill_(E4M3_MAX / sc.t["amax_o"].item())
                    cudnn_run()
                    torch.cuda.synchronize()
                    packed_o = o_c if ragged else unpadded(torch, o_c, meta)
                    err = f64_error(torch, packed_o.float() / sc.t["scale_o"].item(), ref, s0, n)
                    row["cudnn_err"] = err
                    timed.append(("cudnn", label, cudnn_run,
                                  f"amax_s {sc.t['amax_s'].item():.4g}, amax_o {sc.t['amax_o'].item():.4g}; "
                                  f"vs float64: max abs err {err:.2e}; graph build {build_s:.1f} s"))
                    row["cudnn_form"] = "ragged" if ragged else "padded"
                    break
                except Exception as e:  # noqa: BLE001
                    print(f"  {label} FAILED: {type(e).__name__}: {str(e)[:500]}", flush=True)

        if fa3 is not None:
            try:
                dq, dk, dv = (torch.full((b, h), descales[x], dtype=torch.float32, device="cuda")
                              for x in ("q", "k", "v"))

                def fa3_run(q=codes["q"], k=codes["k"], v=codes["v"], dq=dq, dk=dk, dv=dv):
                    with torch.inference_mode():
                        return fa3.flash_attn_varlen_func(q, k, v, cu, cu, s, s, softmax_scale=meta["scale"],
                                                          causal=causal, q_descale=dq, k_descale=dk, v_descale=dv)
                out3 = fa3_run()
                out3 = out3[0] if isinstance(out3, tuple) else out3
                err = f64_error(torch, out3.float(), ref, s0, n)
                row["fa3_err"] = err
                timed.append(("fa3", "FA3 FP8 (bf16 O)", fa3_run, f"vs float64: max abs err {err:.2e}"))
            except Exception as e:  # noqa: BLE001
                print(f"  FA3 FP8 FAILED: {type(e).__name__}: {str(e)[:400]}", flush=True)

        if timed and calls_only:
            call_each(torch, timed, calls_only)
        elif timed:
            results, _ = interleaved_detail(torch, [fn for _, _, fn, _ in timed], warm=3)
            for (key, label, _, note), (ms, spread) in zip(timed, results):
                row[key] = tflops(ms)
                print(f"  {label}: {ms:.3f} ms {tflops(ms):.1f} TFLOP/s (spread {spread:.3f} ms); {note}",
                      flush=True)
        for x in keep:
            if isinstance(x, Execution):
                x.close()
        del timed, keep
        rows.append(row)
        torch.cuda.empty_cache()
    plugin.check(plugin.Destroy(handle), "Destroy")
    return rows


def print_table(rows):
    cell = lambda x: f"{x:.1f}" if x is not None else "—"  # noqa: E731
    err = lambda x: f"{x:.1e}" if x is not None else "—"  # noqa: E731
    print("\n=== FP8 e4m3 forward, TFLOP/s (max abs err vs float64); ours = one ExecuteOpGraph ===")
    print("| problem | D | causal | ours | cuDNN FP8 | FA3 FP8 (bf16 O) | ours / best peer |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ours = r.get("ours")
        best = max((r.get(p) or 0.0) for p in ("cudnn", "fa3"))
        form = f" {r['cudnn_form']}" if "cudnn_form" in r else ""
        print(f"| {r['problem']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {cell(ours)} ({err(r.get('ours_err'))}) "
              f"| {cell(r.get('cudnn'))}{form} ({err(r.get('cudnn_err'))}) | {cell(r.get('fa3'))} ({err(r.get('fa3_err'))}) "
              f"| {f'{ours / best:.2f}' if ours and best else '—'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plugin", required=True, help="path to libhipdnn_provider_ragged_sdpa.so")
    ap.add_argument("--graphs", required=True, help="directory written by emit_bench_graphs")
    ap.add_argument("--self-check", action="store_true", help="host engine on numpy buffers, no GPU")
    ap.add_argument("--only-ours", action="store_true", help="skip the peers")
    ap.add_argument("--problems", nargs="+", metavar="NAME", help="only these problems (problems_fp8.json names)")
    ap.add_argument("--calls-only", type=int, default=0, metavar="N",
                    help="no timing: call each engine N times (for ncu: bench/lab/run_peer_ncu.sh --fp8)")
    args = ap.parse_args()
    plugin = Plugin(args.plugin)
    if args.self_check:
        return self_check(plugin, args.graphs)
    try:
        import torch
    except ImportError:
        print("plugin_bench_fp8.py: the benchmark needs torch with CUDA (use --self-check without a GPU)",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("plugin_bench_fp8.py: no CUDA device (use --self-check without a GPU)", file=sys.stderr)
        return 2
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    problems = [m for m in load_problems(args.graphs, LISTING) if not args.problems or m["name"] in args.problems]
    if not problems:
        print(f"plugin_bench_fp8.py: no FP8 problems selected from {args.graphs}/{LISTING}", file=sys.stderr)
        return 2
    rows = benchmark(torch, plugin, args.graphs, problems, only_ours=args.only_ours, calls_only=args.calls_only)
    if args.calls_only:
        return 0 if rows and all("ours_err" in r for r in rows) else 1
    print_table(rows)
    return 0 if rows and all("ours" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
