#!/usr/bin/env python3
"""Ragged SDPA backward through the plugin's C ABI against FA2 varlen backward and cuDNN ragged backward.

For every problem that `plugin/examples/emit_bench_graphs/` wrote a training pair for (D_qk =
D_v = 64 or 128 on 8x2048, 2x8192 and the ragged mix; 96, 256 and Q/K 192 with V/O 128 on the
ragged mix; bf16, H = 16, 16 384 tokens; causal and not):

1. our forward runs once through the C ABI (`<name>_fwd_lse`: O and the LSE, packed token-major
   f32[T, H]), on random Q, K, V (uniform in [-1, 1]); dO is random too. Every engine's backward
   then reads the same Q, K, V, O, dO and that LSE, moved to the layout each engine takes: ours as
   written, FA2's [H, T] (transposed), cuDNN's padded [B, H, S_max, 1];
2. ours: one `hipdnnEnginePluginExecuteOpGraph` of `<name>_bwd` per call (dQ, dK, dV) on the
   CUDA engine, on torch's current stream; and the same graph on RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC
   (column "ours non-det.": dQ summed in no fixed order), checked against ours and timed
   interleaved with it (event_timing.interleaved_ms: the rounds alternate the two engines);
3. FA2 varlen: `torch.ops.aten._flash_attention_backward` on the same packed buffers (its
   forward runs once too, for its philox seed/offset tensors and to check our O and LSE); not
   where D_qk != D_v, which it does not run;
4. cuDNN ragged: the cuDNN frontend (`nvidia-cudnn-frontend` 1.32.0) `sdpa_backward` with int64
   element offsets on Q/K/V/O/dO/dQ/dK/dV (one tensor for the D_qk-wide rows, one for the D_v-wide
   ones) and per-sequence lengths with the padding mask; causal
   as a top-left and, separately, as a bottom-right band (equal lengths: the same pairs, but
   cuDNN skips masked tiles only top-left).

Correctness before timing: each peer's dQ, dK, dV against ours, element by element
(|ours - peer| <= 2e-2 * max|peer| + 2e-2 * |peer|, the bf16 rule of plugin/tests/gpu_backward.rs);
a miss marks the row FAIL. Timing as plugin_bench.py: median of 15 CUDA-event pairs around 10
back-to-back calls after 3 warm-ups, and the spread (max - min). FLOPs = 2.5 x the forward's.

Usage:
  python3 bench/gpu/plugin_bench_bwd.py --plugin LIB.so --graphs DIR [--only REGEX] [--first REGEX] [--only-ours]
  python3 bench/gpu/plugin_bench_bwd.py --plugin LIB.so --graphs DIR --self-check
      # anywhere, numpy only: the training pairs of DIR (emit them with --tiny) on the host
      # reference engine, O, LSE, dQ, dK, dV checked against a float64 reference.
"""

import argparse
import ctypes
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from event_timing import interleaved_ms, time_ms  # noqa: E402
from plugin_bench_abi import (  # noqa: E402  (the C ABI binding the benchmarks share)
    CUDA_ENGINE,
    CUDA_NONDETERMINISTIC_ENGINE,
    HOST_ENGINE,
    SELF_CHECK_MAX_TOKENS,
    Execution,
    Plugin,
    PluginError,
    build_cudnn_graph,
    open_cudnn,
    element_offsets,
    from_bf16_bits,
    load_problems,
    to_bf16_bits,
    token_starts,
)

# Where the benchmark's buffers live and which engine it times: the GPU and the CUDA engine, or
# (--host-dry-run, a test of this harness without a GPU) torch CPU tensors and the host engine.
DEV = {"device": "cuda", "engine": CUDA_ENGINE, "nondeterministic": CUDA_NONDETERMINISTIC_ENGINE}
TOL = 2e-2  # bf16 gradients: relative to the peer's max and to each element
NAN_BF16 = 0x7FC1  # a NaN payload: an unwritten element shows


def within(got, ref, tol=TOL):
    """(ok, max abs err, max |ref|) of the element-wise rule |got - ref| <= tol (max|ref| + |ref|)."""
    err = np.abs(got - ref)
    mag = float(np.abs(ref).max()) if ref.size else 0.0
    ok = bool(np.isfinite(got).all()) and bool((err <= tol * mag + tol * np.abs(ref)).all())
    return ok, float(err.max()) if err.size else 0.0, mag


# ------------------------------------------------------------------------------------------------
# Self-check without a GPU: host reference engine, numpy buffers, float64 reference.
# ------------------------------------------------------------------------------------------------


def reference(q, k, v, d_o, starts, scale, causal):
    """float64 forward and backward per sequence from first principles (q, k, v, dO: [T, H, D]
    float64, V and dO D_v wide; bottom-right causal, equal lengths): O, LSE [T, H], dQ, dK, dV."""
    dq, dk, dv = (np.zeros_like(x) for x in (q, k, v))
    o = np.zeros_like(d_o)
    lse = np.zeros(q.shape[:2])
    for b in range(len(starts) - 1):
        s0, s1 = starts[b], starts[b + 1]
        if s1 == s0:
            continue
        s = np.einsum("ihd,jhd->hij", q[s0:s1], k[s0:s1]) * scale
        if causal:
            n = s1 - s0
            s = np.where(np.tril(np.ones((n, n), dtype=bool))[None], s, -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - m)
        p = e / e.sum(-1, keepdims=True)
        lse[s0:s1] = (m[..., 0] + np.log(e.sum(-1))).T
        o[s0:s1] = np.einsum("hij,jhd->ihd", p, v[s0:s1])
        dp = np.einsum("ihd,jhd->hij", d_o[s0:s1], v[s0:s1])
        di = np.einsum("ihd,ihd->hi", d_o[s0:s1], o[s0:s1])
        ds = p * (dp - di[..., None])
        dq[s0:s1] = scale * np.einsum("hij,jhd->ihd", ds, k[s0:s1])
        dk[s0:s1] = scale * np.einsum("hij,ihd->jhd", ds, q[s0:s1])
        dv[s0:s1] = np.einsum("hij,ihd->jhd", p, d_o[s0:s1])
    return o, lse, dq, dk, dv


def bindings(meta, bufs):
    """{uid: buffer} of the forward-with-LSE graph and of the backward graph (each pack holds its
    own graph's tensors only)."""
    u, bu = meta["uids"], meta["backward"]["uids"]
    forward = {u["q"]: bufs["q"], u["k"]: bufs["k"], u["v"]: bufs["v"], u["o"]: bufs["o"], bu["lse"]: bufs["lse"],
               u["qo_offsets"]: bufs["offsets"], u["kv_offsets"]: bufs["offsets"],
               bu["lse_offsets"]: bufs["lse_offsets"]}
    backward = dict(forward)
    backward.update({bu["do"]: bufs["do"], bu["dq"]: bufs["dq"], bu["dk"]: bufs["dk"], bu["dv"]: bufs["dv"]})
    return forward, backward


def self_check(plugin, graphs):
    print("plugin:", plugin.string(plugin.GetName), plugin.string(plugin.GetVersion), "API",
          plugin.string(plugin.GetApiVersion))
    handle = plugin.create()
    rng = np.random.default_rng(13)
    failures = checked = 0

    def numpy_ws(n):
        ws = np.zeros(n, dtype=np.uint8)
        return ws, ws.ctypes.data

    for meta in load_problems(graphs):
        back = meta.get("backward")
        if not back:
            continue
        checked += 1
        name, t, h, d = meta["name"], meta["tokens"], meta["heads"], meta["head_dim"]
        backwards = [("backward", back["graph_bytes"])]
        if back.get("top_left_bytes"):
            backwards.append(("backward causal top-left", back["top_left_bytes"]))
        try:
            if t > SELF_CHECK_MAX_TOKENS:
                # A benchmark-size pair: only the plan path (the CPU backward would take minutes).
                for g in [back["forward_bytes"]] + [g for _, g in backwards]:
                    Execution(plugin, handle, graphs, HOST_ENGINE, g, {}, numpy_ws).close()
                print(f"PASS {name}: forward-with-LSE and {len(backwards)} backward graph(s) applicable on the host "
                      f"engine, execution contexts made (not executed: {t} tokens)")
                continue
            dv = meta.get("value_dim", d)
            bufs = {x: to_bf16_bits(rng.uniform(-1, 1, (t, h, w))) for x, w in (("q", d), ("k", d), ("v", dv),
                                                                                ("do", dv))}
            bufs["o"] = np.full((t, h, dv), NAN_BF16, dtype=np.uint16)
            bufs["lse"] = np.full((t, h), np.nan, dtype=np.float32)
            bufs["offsets"] = np.asarray(meta["offsets"], dtype=np.int32)
            bufs["lse_offsets"] = np.asarray(token_starts(meta), dtype=np.int32)

            def execute(graph, bound):
                run = Execution(plugin, handle, graphs, HOST_ENGINE, graph,
                                {uid: arr.ctypes.data for uid, arr in bound.items()}, numpy_ws)
                run()
                run.close()

            f64 = lambda x: from_bf16_bits(bufs[x]).astype(np.float64)  # noqa: E731
            for label, graph in backwards:
                for x, w in (("dq", d), ("dk", d), ("dv", dv)):
                    bufs[x] = np.full((t, h, w), NAN_BF16, dtype=np.uint16)
                fwd_bound, bwd_bound = bindings(meta, bufs)
                if label == "backward":
                    execute(back["forward_bytes"], fwd_bound)
                    ref = reference(f64("q"), f64("k"), f64("v"), f64("do"), token_starts(meta), meta["scale"],
                                    meta["causal"])
                execute(graph, bwd_bound)
                cells, ok_all = [], True
                for what, got, want, tol in (("O", f64("o"), ref[0], 1e-2), ("LSE", bufs["lse"], ref[1], 1e-3),
                                             ("dQ", f64("dq"), ref[2], TOL), ("dK", f64("dk"), ref[3], TOL),
                                             ("dV", f64("dv"), ref[4], TOL)):
                    ok, err, mag = within(np.asarray(got, dtype=np.float64), want, tol)
                    ok_all &= ok
                    cells.append(f"{what} {err:.1e}/{mag:.1e}{'' if ok else ' FAIL'}")
                failures += 0 if ok_all else 1
                print(f"{'PASS' if ok_all else 'FAIL'} {name}: host engine, forward-with-LSE then {label} through "
                      f"the ABI, {t} tokens {meta['seq_lens']}; max abs err / max |ref|: {', '.join(cells)}")
        except PluginError as e:
            failures += 1
            print(f"FAIL {name}: {e}")
    plugin.check(plugin.Destroy(handle), "Destroy")
    if checked == 0:
        print(f"self-check: no training pairs in {graphs} (emit_bench_graphs writes them for D 64, 96, 128, 256 "
              "and 192/128)")
        return 1
    print(f"self-check: {checked} training pairs, {'ok' if failures == 0 else f'{failures} failed'}")
    return 1 if failures else 0


# ------------------------------------------------------------------------------------------------
# GPU benchmark.
# ------------------------------------------------------------------------------------------------


def compare(torch, ours, peer):
    """[(ok, max abs err, max |peer|)] for dQ, dK, dV under the TOL rule, on the GPU."""
    out = []
    for a, b in zip(ours, peer):
        a, b = a.float(), b.float()
        err = (a - b).abs()
        mag = b.abs().max().item()
        ok = bool(torch.isfinite(a).all().item()) and bool((err <= TOL * mag + TOL * b.abs()).all().item())
        out.append((ok, err.max().item(), mag))
    return out


def describe(checks):
    return ", ".join(f"{n} {e:.1e}/{m:.1e}{'' if ok else ' FAIL'}" for n, (ok, e, m) in zip(("dQ", "dK", "dV"),
                                                                                             checks))


def lse_for_fa2(torch, lse, lse_fa, starts):
    """Our token-major LSE [T, H] in the layout of FA2's own forward LSE: [H, T] (varlen) or
    [B, H, S_max] (padded, older builds)."""
    t, h = lse.shape
    if tuple(lse_fa.shape) == (h, t):
        return lse.t().contiguous()
    if lse_fa.dim() == 3 and lse_fa.shape[1] == h:
        out = torch.zeros_like(lse_fa)
        for b in range(len(starts) - 1):
            out[b, :, : starts[b + 1] - starts[b]] = lse[starts[b]: starts[b + 1]].t()
        return out
    raise ValueError(f"FA2 LSE shape {tuple(lse_fa.shape)} not understood (ours {tuple(lse.shape)})")


def lse_padded(torch, lse, meta):
    """Our token-major LSE [T, H] as cuDNN's padded stats [B, H, S_max, 1] (padding rows 0, not read)."""
    starts, b, s = token_starts(meta), meta["batch"], meta["s_max"]
    out = torch.zeros((b, meta["heads"], s, 1), dtype=torch.float32, device=lse.device)
    for i in range(b):
        out[i, :, : starts[i + 1] - starts[i], 0] = lse[starts[i]: starts[i + 1]].t()
    return out


def cudnn_backward_graph(cudnn, handle, meta, top_left):
    """cuDNN frontend SDPA backward on the packed layout: [B, H, S, D] dims over BSHD memory, int64
    element offsets for the D_qk-wide token tensors (uid 10: Q, K, dQ, dK) and the D_v-wide ones
    (uid 11: V, O, dO, dV; the same tensor when D_qk = D_v), lengths with the padding mask, padded
    stats [B, H, S, 1]; causal as a band with right bound 0 in the asked alignment."""
    b, h, s, d = meta["batch"], meta["heads"], meta["s_max"], meta["head_dim"]
    dv = meta.get("value_dim", d)
    bf16, f32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
    stride = {d: [s * h * d, d, h * d, 1], dv: [s * h * dv, dv, h * dv, 1]}
    g = cudnn.pygraph(handle=handle, io_data_type=bf16, intermediate_data_type=f32, compute_data_type=f32)
    aux = dict(dim=[b + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT64)
    ragged = {d: g.tensor(name="ragged_qk", uid=10, **aux)}
    ragged[dv] = ragged[d] if dv == d else g.tensor(name="ragged_vo", uid=11, **aux)
    lens = dict(dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
    seq_q = g.tensor(name="seq_len_q", uid=20, **lens)
    seq_kv = g.tensor(name="seq_len_kv", uid=21, **lens)
    io = {}
    for name, uid, w in (("q", 1, d), ("k", 2, d), ("v", 3, dv), ("o", 4, dv), ("dO", 5, dv)):
        io[name] = g.tensor(name=name, uid=uid, dim=[b, h, s, w], stride=stride[w], data_type=bf16)
        io[name].set_ragged_offset(ragged[w])
    stats = g.tensor(name="stats", uid=6, dim=[b, h, s, 1], stride=[h * s, s, 1, 1], data_type=f32)
    align = cudnn.diagonal_alignment.TOP_LEFT if top_left else cudnn.diagonal_alignment.BOTTOM_RIGHT
    total = -(-meta["tokens"] // 64) * 64
    grads = g.sdpa_backward(name="sdpa_backward", q=io["q"], k=io["k"], v=io["v"], o=io["o"], dO=io["dO"],
                            stats=stats, attn_scale=meta["scale"], use_padding_mask=True, seq_len_q=seq_q,
                            seq_len_kv=seq_kv, max_total_seq_len_q=total, max_total_seq_len_kv=total,
                            diagonal_alignment=align, diagonal_band_right_bound=0 if meta["causal"] else None)
    for grad, uid, w in zip(grads[:3], (7, 8, 9), (d, d, dv)):
        grad.set_uid(uid).set_output(True).set_dim([b, h, s, w]).set_stride(stride[w]).set_data_type(bf16)
        grad.set_ragged_offset(ragged[w])
    return build_cudnn_graph(cudnn, g)


def torch_ws(torch):
    def alloc(n):
        ws = torch.empty(n, dtype=torch.uint8, device=DEV["device"])
        return ws, ws.data_ptr()
    return alloc


def sync(torch):
    if DEV["device"] == "cuda":
        torch.cuda.synchronize()


def timer(torch, fn):
    """CUDA events on the GPU; on the host dry run, wall time of the same call pattern. With
    --calls-only N, N plain calls and no timing (NaN): a profiler's run."""
    if DEV.get("calls_only"):
        for _ in range(DEV["calls_only"]):
            fn()
        sync(torch)
        return float("nan"), float("nan")
    if DEV["device"] == "cuda":
        return time_ms(torch, fn)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[1], max(times) - min(times)


def timer_pair(torch, fns):
    """[(median ms, spread)] of each callable, interleaved on the GPU; one after the other on the
    host dry run."""
    if DEV["device"] == "cuda" and not DEV.get("calls_only"):
        return interleaved_ms(torch, fns, warm=3)
    return [timer(torch, fn) for fn in fns]


def run_problem(torch, plugin, handle, graphs, meta, cudnn, cudnn_handle, only_ours):
    name, h, d, causal = meta["name"], meta["heads"], meta["head_dim"], meta["causal"]
    dv = meta.get("value_dim", d)
    lens, t, s = meta["seq_lens"], meta["tokens"], meta["s_max"]
    back = meta["backward"]
    flops = float(back["flops"])
    starts = token_starts(meta)
    row = {"name": name, "problem": meta["problem"], "d": d if dv == d else f"{d}/{dv}", "causal": causal,
           "fail": []}
    print(f"== {name}: lens={lens if len(lens) <= 8 else str(lens[:8]) + '...'} backward {flops / 1e9:.1f} GFLOP",
          flush=True)
    gen = torch.Generator(device=DEV["device"])
    gen.manual_seed(4321)
    width = {"q": d, "k": d, "v": dv, "do": dv, "o": dv, "dq": d, "dk": d, "dv": dv}
    bufs = {x: (torch.rand((t, h, width[x]), generator=gen, device=DEV["device"]) * 2 - 1).to(torch.bfloat16)
            for x in ("q", "k", "v", "do")}
    for x in ("o", "dq", "dk", "dv"):
        bufs[x] = torch.full((t, h, width[x]), float("nan"), dtype=torch.bfloat16, device=DEV["device"])
    bufs["lse"] = torch.full((t, h), float("nan"), dtype=torch.float32, device=DEV["device"])
    bufs["offsets"] = torch.tensor(meta["offsets"], dtype=torch.int32, device=DEV["device"])
    bufs["lse_offsets"] = torch.tensor(starts, dtype=torch.int32, device=DEV["device"])
    fwd_ptrs, bwd_ptrs = ({uid: x.data_ptr() for uid, x in bound.items()} for bound in bindings(meta, bufs))
    q, k, v, d_o = bufs["q"], bufs["k"], bufs["v"], bufs["do"]
    ours = (bufs["dq"], bufs["dk"], bufs["dv"])
    tf = lambda ms: flops / ms / 1e9  # noqa: E731

    # Our forward, once: O and the LSE every backward reads.
    fwd = Execution(plugin, handle, graphs, DEV["engine"], back["forward_bytes"], fwd_ptrs, torch_ws(torch))
    t0 = time.perf_counter()
    fwd()
    sync(torch)
    fwd_first = time.perf_counter() - t0
    fwd_ms, _ = timer(torch, fwd)
    fwd.close()
    if torch.isnan(bufs["o"].float()).any() or not torch.isfinite(bufs["lse"]).all():
        raise PluginError("forward-with-LSE left O or the LSE unwritten (NaN)")
    print(f"  our forward with LSE: CreateExecutionContext {fwd.create_s:.2f} s, first call {fwd_first:.2f} s, "
          f"then {fwd_ms:.3f} ms "
          f"({flops / 2.5 / fwd_ms / 1e9:.1f} TFLOP/s)", flush=True)

    # Ours: correctness run, then timing; the non-deterministic engine checked against it and
    # timed in the same interleaved rounds.
    bwd = nd = None
    try:
        bwd = Execution(plugin, handle, graphs, DEV["engine"], back["graph_bytes"], bwd_ptrs, torch_ws(torch))
        t0 = time.perf_counter()
        bwd()
        sync(torch)
        first = time.perf_counter() - t0
        if any(torch.isnan(g.float()).any().item() for g in ours):
            raise PluginError("dQ, dK or dV still holds NaN after execute (rows left unwritten)")
        ours = tuple(g.clone() for g in ours)  # the reference for the peers; timing rewrites the buffers
        timed = [bwd]
        if DEV["nondeterministic"]:
            try:
                nd = Execution(plugin, handle, graphs, DEV["nondeterministic"], back["graph_bytes"], bwd_ptrs,
                               torch_ws(torch))
                for g in (bufs["dq"], bufs["dk"], bufs["dv"]):
                    g.fill_(float("nan"))
                nd()
                sync(torch)
                checks = compare(torch, (bufs["dq"], bufs["dk"], bufs["dv"]), ours)
                row["nd_check"] = describe(checks)
                if not all(c[0] for c in checks):
                    row["fail"].append("ours_nd")
                print(f"  ours non-deterministic vs ours (max abs err / max |ours|): {row['nd_check']}; "
                      f"workspace {nd.ws_bytes} B", flush=True)
                timed.append(nd)
            except Exception as e:  # noqa: BLE001 - report, time the deterministic engine anyway
                row["fail"].append("ours_nd")
                print(f"  ours non-deterministic FAILED: {type(e).__name__}: {str(e)[:600]}", flush=True)
        results = timer_pair(torch, timed)
        ms, spread = results[0]
        row["ours"], row["ours_spread"] = tf(ms), tf(ms) - flops / (ms + spread) / 1e9
        print(f"  ours backward (C ABI): {ms:.3f} ms {row['ours']:.1f} TFLOP/s (spread {spread:.3f} ms); "
              f"CreateExecutionContext {bwd.create_s:.2f} s, first call {first:.2f} s, workspace {bwd.ws_bytes} B",
              flush=True)
        if len(results) > 1:
            ms, spread = results[1]
            row["ours_nd"] = tf(ms)
            print(f"  ours non-deterministic backward (C ABI, interleaved with ours): {ms:.3f} ms "
                  f"{row['ours_nd']:.1f} TFLOP/s (spread {spread:.3f} ms); {row['ours_nd'] / row['ours']:.2f}x ours",
                  flush=True)
    except Exception as e:  # noqa: BLE001 - report, time the peers anyway
        row["fail"].append("ours")
        print(f"  ours FAILED: {type(e).__name__}: {str(e)[:600]}", flush=True)
        ours = None
    finally:
        for run in (bwd, nd):
            if run is not None:
                run.close()
    if ours is not None and back.get("top_left_bytes"):
        # The same causal pairs as a top-left band: ours should run at the same speed.
        tl = None
        try:
            tl = Execution(plugin, handle, graphs, DEV["engine"], back["top_left_bytes"], bwd_ptrs, torch_ws(torch))
            tl()
            sync(torch)
            checks = compare(torch, (bufs["dq"], bufs["dk"], bufs["dv"]), ours)
            if not all(c[0] for c in checks):
                row["fail"].append("ours_tl")
            ms, spread = timer(torch, tl)
            row["ours_tl"] = tf(ms)
            print(f"  ours backward, causal top-left: {ms:.3f} ms {row['ours_tl']:.1f} TFLOP/s "
                  f"(spread {spread:.3f} ms); vs bottom-right: {describe(checks)}", flush=True)
        except Exception as e:  # noqa: BLE001
            row["fail"].append("ours_tl")
            print(f"  ours causal top-left FAILED: {type(e).__name__}: {str(e)[:600]}", flush=True)
        finally:
            if tl is not None:
                tl.close()
    if only_ours:
        return row

    # FA2 varlen backward on our O and LSE (its forward runs once for seed/offset and a check).
    cu = torch.tensor(starts, dtype=torch.int32, device=DEV["device"])
    if dv != d:
        print(f"  FA2 varlen: not run: it takes one head dim for Q/K and V/O (here {d} and {dv})", flush=True)
    else:
        try:
            f = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, s, s, 0.0, causal, False, scale=meta["scale"])
            o_fa, lse_fa, seed, offset = f[0], f[1], f[2], f[3]
            lse_fa_ours = lse_for_fa2(torch, bufs["lse"], lse_fa, starts)
            valid = torch.isfinite(lse_fa) & (lse_fa_ours != 0) if lse_fa.dim() == 3 else torch.isfinite(lse_fa)
            o_err = (bufs["o"].float() - o_fa.float()).abs().max().item()
            lse_err = (lse_fa_ours - lse_fa)[valid].abs().max().item()
            # bf16 O: 2e-2 as the forward benchmark; the LSE is f32 from the same bf16 inputs.
            fwd_ok = o_err <= 2e-2 and lse_err <= 1e-3
            if not fwd_ok:
                row["fail"].append("forward vs FA2")
            print(f"  our forward vs FA2's: max |O - O_fa2| {o_err:.2e}, max |LSE - LSE_fa2| {lse_err:.2e} "
                  f"(FA2 LSE {tuple(lse_fa.shape)}){'' if fwd_ok else '  <-- ABOVE TOLERANCE'}", flush=True)

            def fa2():
                return torch.ops.aten._flash_attention_backward(d_o, q, k, v, bufs["o"], lse_fa_ours, cu, cu, s, s, 0.0,
                                                                causal, seed, offset, scale=meta["scale"])
            ref = fa2()[:3]
            if ours is not None:
                checks = compare(torch, ours, ref)
                row["fa2_check"] = describe(checks)
                if not all(c[0] for c in checks):
                    row["fail"].append("fa2")
                print(f"  ours vs FA2 (max abs err / max |FA2|): {row['fa2_check']}", flush=True)
            ms, spread = timer(torch, fa2)
            row["fa2"] = tf(ms)
            print(f"  FA2 varlen backward: {ms:.3f} ms {row['fa2']:.1f} TFLOP/s (spread {spread:.3f} ms)", flush=True)
            del ref, f, o_fa
        except Exception as e:  # noqa: BLE001
            print(f"  FA2 varlen backward FAILED: {type(e).__name__}: {str(e)[:400]}", flush=True)

    # cuDNN ragged backward: causal in both alignments (top-left is where cuDNN skips tiles).
    if cudnn is not None:
        stats = lse_padded(torch, bufs["lse"], meta)
        ragged = {w: torch.tensor(element_offsets(meta, w), dtype=torch.int64, device=DEV["device"])
                  for w in (d, dv)}
        seq = torch.tensor(lens, dtype=torch.int32, device=DEV["device"]).view(-1, 1, 1, 1)
        for key, top_left in (("cudnn_tl", True), ("cudnn_br", False)) if causal else (("cudnn_tl", True),):
            band = (" causal top-left" if top_left else " causal bottom-right") if causal else ""
            label = f"cuDNN ragged backward{band}"
            try:
                t0 = time.perf_counter()
                g = cudnn_backward_graph(cudnn, cudnn_handle, meta, top_left)
                build_s = time.perf_counter() - t0
                ws = torch.empty(max(g.get_workspace_size(), 1), dtype=torch.uint8, device=DEV["device"])
                grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
                pack = {1: q, 2: k, 3: v, 4: bufs["o"], 5: d_o, 6: stats, 7: grads[0], 8: grads[1], 9: grads[2],
                        10: ragged[d], 20: seq, 21: seq}
                if dv != d:
                    pack[11] = ragged[dv]

                def cudnn_b():
                    g.execute(pack, ws, handle=cudnn_handle)
                cudnn_b()
                sync(torch)
                if ours is not None:
                    checks = compare(torch, ours, grads)
                    row[key + "_check"] = describe(checks)
                    if not all(c[0] for c in checks):
                        row["fail"].append(key)
                    print(f"  ours vs {label} (max abs err / max |cuDNN|): {row[key + '_check']}", flush=True)
                ms, spread = timer(torch, cudnn_b)
                row[key] = tf(ms)
                plan = ""
                try:
                    plan = g.get_plan_name_at_index(0)
                except Exception:  # noqa: BLE001 - the plan name is informative only
                    pass
                print(f"  {label}: {ms:.3f} ms {row[key]:.1f} TFLOP/s (spread {spread:.3f} ms); graph build "
                      f"{build_s:.1f} s; plan {plan}", flush=True)
                del g, ws, grads, pack
            except Exception as e:  # noqa: BLE001
                print(f"  {label} FAILED: {type(e).__name__}: {str(e)[:600]}", flush=True)
    return row


def benchmark(torch, plugin, graphs, problems, only_ours=False):
    on_gpu = DEV["device"] == "cuda"
    stream = torch.cuda.current_stream() if on_gpu else None
    handle = plugin.create()
    if on_gpu:
        plugin.check(plugin.SetStream(handle, ctypes.c_void_p(stream.cuda_stream)), "SetStream")
    print("plugin engines:", {i: plugin.engine_name(i) for i in plugin.engine_ids()}, flush=True)
    print("FA2 backward:", torch.ops.aten._flash_attention_backward.default._schema, flush=True)
    cudnn = cudnn_handle = None
    if not only_ours and on_gpu:
        cudnn, cudnn_handle = open_cudnn(stream.cuda_stream)
    rows = []
    start = time.perf_counter()
    for meta in problems:
        try:
            rows.append(run_problem(torch, plugin, handle, graphs, meta, cudnn, cudnn_handle, only_ours))
        except Exception as e:  # noqa: BLE001 - the forward failed: no inputs for any backward
            print(f"  {meta['name']} FAILED before any backward: {type(e).__name__}: {str(e)[:600]}", flush=True)
            rows.append({"name": meta["name"], "problem": meta["problem"], "d": meta["head_dim"],
                         "causal": meta["causal"], "fail": ["forward"]})
        if on_gpu:
            torch.cuda.empty_cache()
        print_table(rows, header=False)  # the table so far: a timeout still leaves results
        print(f"  ({time.perf_counter() - start:.1f} s since the first problem)", flush=True)
    plugin.check(plugin.Destroy(handle), "Destroy")
    for sev, line in plugin.log_lines:
        if sev > 0:
            print(f"plugin log [{sev}]: {line}", flush=True)
    return rows


PEERS = ("fa2", "cudnn_tl", "cudnn_br")


def print_table(rows, header=True):
    def cell(x):
        return f"{x:.1f}" if x is not None else "—"

    def ratio(a, b):
        return f"{a / b:.2f}" if a is not None and b else "—"

    if not header:
        r = rows[-1]
        print(f"  row: {r['name']} ours {cell(r.get('ours'))} ours_nd {cell(r.get('ours_nd'))} "
              f"ours_tl {cell(r.get('ours_tl'))} "
              f"fa2 {cell(r.get('fa2'))} cudnn_tl {cell(r.get('cudnn_tl'))} cudnn_br {cell(r.get('cudnn_br'))} "
              f"{'FAIL ' + ','.join(r['fail']) if r['fail'] else 'ok'}", flush=True)
        return
    print("\n=== backward TFLOP/s (dQ, dK, dV; FLOPs = 2.5 x forward), bf16, H = 16, 16 384 tokens; "
          "ours = one ExecuteOpGraph through the C ABI ===")
    print("| Problem | D | causal | ours (C ABI) ± spread | ours non-det. | non-det. / ours | ours causal top-left "
          "| FA2 varlen | cuDNN ragged (causal top-left) | cuDNN ragged causal bottom-right | ours / FA2 | best peer "
          "| ours / best peer | check |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours = r.get("ours")
        best = max(((r[p], p) for p in PEERS if r.get(p)), default=(None, "—"))
        spread = f" ± {r['ours_spread']:.1f}" if "ours_spread" in r else ""
        print(f"| {r['problem']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {cell(ours)}{spread} | "
              f"{cell(r.get('ours_nd'))} | {ratio(r.get('ours_nd'), ours)} | {cell(r.get('ours_tl'))} | "
              + " | ".join(cell(r.get(p)) for p in PEERS)
              + f" | {ratio(ours, r.get('fa2'))} | {best[1]} | {ratio(ours, best[0])} | "
              + ("FAIL " + ", ".join(r["fail"]) if r["fail"] else "ok") + " |")
    for r in rows:
        if r["problem"] == "ragged-mix" and r["d"] == 128 and r.get("ours") and r.get("fa2"):
            x = r["ours"] / r["fa2"]
            print(f"target >= 1.0x FA2 varlen, ragged mix D=128 causal={r['causal']}: {x:.2f}x "
                  f"({'met' if x >= 1.0 else 'NOT met'})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plugin", required=True, help="path to libhipdnn_provider_ragged_sdpa.so")
    ap.add_argument("--graphs", required=True, help="directory written by emit_bench_graphs")
    ap.add_argument("--self-check", action="store_true", help="host engine on numpy buffers, no GPU")
    ap.add_argument("--only-ours", action="store_true", help="skip the peers")
    ap.add_argument("--host-dry-run", action="store_true",
                    help="the benchmark's code path on torch CPU tensors and the host engine (tiny graphs; no GPU, "
                         "no peers, nothing meaningful timed): a test of this harness")
    ap.add_argument("--only", default=None, help="regex: run the problems whose name matches")
    ap.add_argument("--first", default=None, help="regex: run the matching problems first (a timeout cuts the rest)")
    ap.add_argument("--calls-only", type=int, default=0, metavar="N",
                    help="call every engine N times after its check, time nothing (for a profiler: "
                         "bench/lab/run_peer_ncu.sh --bwd)")
    args = ap.parse_args()

    plugin = Plugin(args.plugin)
    if args.self_check:
        return self_check(plugin, args.graphs)

    import torch

    if args.host_dry_run:
        DEV.update(device="cpu", engine=HOST_ENGINE, nondeterministic=None)
    DEV["calls_only"] = args.calls_only
    print("device:", torch.cuda.get_device_name() if not args.host_dry_run else "cpu (host dry run)", "torch",
          torch.__version__, flush=True)
    print("plugin:", plugin.string(plugin.GetName), plugin.string(plugin.GetVersion), "API",
          plugin.string(plugin.GetApiVersion), flush=True)
    problems = [m for m in load_problems(args.graphs) if m.get("backward")
                and (args.only is None or re.search(args.only, m["name"]))]
    if args.first:
        problems.sort(key=lambda m: re.search(args.first, m["name"]) is None)
    if not problems:
        print(f"no training pairs in {args.graphs} match {args.only!r}")
        return 1
    rows = benchmark(torch, plugin, args.graphs, problems, only_ours=args.only_ours)
    if args.calls_only:
        return 0 if rows and all(not r["fail"] for r in rows) else 1
    print_table(rows)
    return 0 if rows and all("ours" in r and not r["fail"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
