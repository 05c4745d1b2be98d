#!/usr/bin/env python3
"""Device-side development harness for kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu (SDPA backward).

Runs on the GPU machine only (cupy + torch with CUDA). In one process it
  1. compiles the kernel file with NVRTC (through cupy) as the Rust runtime layer does;
  2. checks dQ, dK, dV against a float64 torch autograd reference of a masked softmax attention
     per batch, on fresh random inputs (every band and alignment, GQA/MQA, seq_len padding,
     zero-length batches, dense and ragged LSE, int32/int64 and token-unit offsets), with NaN in
     every padding input row and a poison pattern in every output position that must stay unwritten;
  3. times the engine (pre-pass, Di, dK/dV, dQ) against FA2 varlen backward
     (torch.ops.aten._flash_attention_backward) on the same packed buffers.

Usage:
  python3 bench/lab/bwd_dev.py                # correctness + benchmark
  python3 bench/lab/bwd_dev.py --check-only
  python3 bench/lab/bwd_dev.py --quick         # a few cases of the bf16 defaults (for compute-sanitizer)
  python3 bench/lab/bwd_dev.py --tiny          # two small cases (racecheck)
  python3 bench/lab/bwd_dev.py --hopper-only   # only the wgmma and TMA kernels (checked and timed)
  python3 bench/lab/bwd_dev.py --fused-only    # only the fused dK/dV/dQ kernels of the
                                               # non-deterministic engine, timed against the pair
The Hopper wgmma entry points (ragged_fmha_bwd_dkdv_wg_<dt>_d<D>, ragged_fmha_bwd_dq_wg_<dt>_d<D>)
get the full correctness suite beside the defaults and are timed next to them.
"""

import argparse
import ctypes
import math
import os
import sys
import time

import numpy as np
import cupy as cp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))  # event_timing.py
sys.path.insert(0, HERE)
from packing import packed_layout  # noqa: E402
from event_timing import time_ms as event_time_ms  # noqa: E402
from bwd_tma import grad_maps, launch_grad_tma  # noqa: E402

SRC = os.path.normpath(os.path.join(HERE, "..", "..", "kernels", "cuda-fmha", "cuda", "ragged_fmha_bwd.cu"))
NVRTC_OPTIONS = ("-arch=sm_90a", "-std=c++17")
PREPASS_THREADS = 1024
BATCH_INFO_BYTES = 32
POISON = {"bf16": 0x7FC1, "f16": 0x7E01}
DEV = "cuda"  # the tests of this harness itself run it on "cpu" with a stand-in engine
MIX = [3874, 2585, 2823, 3682, 2396, 1024]


def di_rows(s_q_max):
    """Rows of Di (and of the scaled LSE after it) per (batch, head): S_q_max rounded up to 64."""
    return (s_q_max + 63) // 64 * 64


def compile_module():
    with open(SRC) as f:
        src = f.read()
    opts = NVRTC_OPTIONS + ("-I" + os.path.dirname(SRC),)
    t0 = time.time()
    mod = cp.RawModule(code=src, options=opts, backend="nvrtc")
    mod.compile()
    print(f"NVRTC compile {opts}: {time.time() - t0:.1f} s", flush=True)
    return mod


def wg_name(dt, d, part="dkdv"):
    return f"ragged_fmha_bwd_{part}_wg_{dt}_d{d}"


def fused_name(dt, d, part="dkdv"):
    """The fused dK/dV/dQ kernel ("dkdv") and its dQ convert pass ("dq")."""
    return f"ragged_fmha_bwd_fused_wg_{dt}_d{d}" if part == "dkdv" else f"ragged_fmha_bwd_dq_convert_{dt}_d{d}"


def fused_ws_name(dt, d, part="dkdv"):
    """The warp-specialized fused kernel, unordered."""
    return f"ragged_fmha_bwd_fused_ws_{dt}_d{d}" if part == "dkdv" else f"ragged_fmha_bwd_dq_convert_{dt}_d{d}"


def ordered_name(dt, d, part="dkdv"):
    """The warp-specialized fused kernel adding dQ in a fixed order (the deterministic engine's)."""
    return f"ragged_fmha_bwd_ordered_{dt}_d{d}" if part == "dkdv" else f"ragged_fmha_bwd_dq_convert_{dt}_d{d}"


def tma_name(dt, d, part="dkdv"):
    """The TMA-fill variants of the wgmma kernels: they take two tensor maps (bwd_tma.py)."""
    return f"ragged_fmha_bwd_{part}_tma_{dt}_d{d}"


def takes_maps(mod, name):
    """Only names with `_tma_` are asked for NAME_tma: a failed lookup is an error under compute-sanitizer."""
    if "_tma_" not in name:
        return False
    return int(cp.ndarray((1,), cp.int32, mod.get_global(name + "_tma")).get()[0]) != 0


def function(mod, name):
    fn = mod.get_function(name)
    cfg = [int(x) for x in cp.ndarray((4,), cp.int32, mod.get_global(name + "_config")).get()]
    if cfg[3] > 0:
        fn.max_dynamic_shared_size_bytes = cfg[3]
    print(f"{name}: BM={cfg[0]} BN={cfg[1]} threads={cfg[2]} smem={cfg[3]} "
          f"regs={getattr(fn, 'num_regs', '?')} local={getattr(fn, 'local_size_bytes', '?')}", flush=True)
    return fn, cfg


class Backward:
    """Pre-pass + Di + dK/dV + dQ, launched with raw device pointers as the plugin does."""

    def __init__(self, mod, dt, d, dkdv=None, dq=None):
        self.dt, self.d = dt, d
        self.pre = mod.get_function("ragged_fmha_prepass")
        self.dot, self.dot_cfg = function(mod, f"ragged_fmha_bwd_dot_{dt}_d{d}")
        self.dkdv_name = dkdv or f"ragged_fmha_bwd_dkdv_{dt}_d{d}"
        self.dq_name = dq or f"ragged_fmha_bwd_dq_{dt}_d{d}"
        self.dkdv, self.dkdv_cfg = function(mod, self.dkdv_name)
        self.dq, self.dq_cfg = function(mod, self.dq_name)
        self.tma = {"dkdv": takes_maps(mod, self.dkdv_name), "dq": takes_maps(mod, self.dq_name)}
        self.maps = {}
        self.name = f"{self.dkdv_name.replace('ragged_fmha_bwd_', '')}+{self.dq_name.replace('ragged_fmha_bwd_', '')}"
        # The fused dK/dV/dQ kernel: dQ through an f32 accumulator the Di pass zeroes and the
        # convert pass (the "dq" part) writes out.
        self.fused = "_fused_" in self.dkdv_name or "_ordered_" in self.dkdv_name

    def workspace(self, batch, h_q, s_q_max):
        bm = self.dq_cfg[0]
        max_tiles = (s_q_max + bm - 1) // bm
        return {
            "batches": cp.zeros(batch * BATCH_INFO_BYTES // 8, dtype=cp.int64),
            "tiles": cp.zeros(max(1, batch * max_tiles) * 2, dtype=cp.int32),
            # The ordered kernel flags a late turn in the word after the count (the plugin's error flag).
            "count": cp.zeros(2, dtype=cp.int32),
            "err": cp.zeros(1, dtype=cp.uint32),
            # Di, then the LSE times log2(e) in its layout (rows padded to 64), poisoned: a kernel
            # reading a row the dot pass did not write gets NaN.
            "di": cp.full(max(1, 2 * batch * h_q * di_rows(s_q_max)), np.nan, dtype=cp.float32),
        } | ({"dq_acc": cp.full(max(1, h_q * batch * ((s_q_max + 63) // 64)) * 8193, np.nan, dtype=cp.float32)}
             if self.fused else {})  # 8192 f32 per blob, then a turn counter per blob

    def launch(self, p, ws, parts=("pre", "dot", "dkdv", "dq")):
        u64, i32, i64, f32 = np.uint64, np.int32, np.int64, np.float32
        bm, bn = (64, 128) if self.fused else (self.dq_cfg[0], self.dq_cfg[1])
        B = p["batch"]
        if "pre" in parts:
            self.pre((1,), (PREPASS_THREADS,), (
                u64(p["q_off"]), i32(p["q_off_bytes"]), i64(p["q_mult"]), i64(p["q_seq"]), i32(p["s_q_max"]),
                u64(p["kv_off"]), i32(p["kv_off_bytes"]), i64(p["kv_mult"]), i64(p["k_seq"]), i32(p["s_kv_max"]),
                u64(p.get("slq", 0)), i32(p.get("slq_bytes", 4)), u64(p.get("slkv", 0)), i32(p.get("slkv_bytes", 4)),
                u64(p.get("lse_off", 0)), i32(p.get("lse_off_bytes", 4)), i64(p.get("lse_mult", 1)),
                i64(p.get("lse_bstride", 0)),
                i32(B), i32(bm), i32(bn), i32(p["left"]), i32(p["right"]), i32(p["br"]),
                u64(ws["batches"].data.ptr), u64(ws["tiles"].data.ptr), u64(ws["count"].data.ptr),
                u64(ws["err"].data.ptr)))
        if "dot" in parts:
            rb = (p["s_q_max"] + self.dot_cfg[0] - 1) // self.dot_cfg[0]
            self.dot((B * rb,), (self.dot_cfg[2],), (
                u64(p["o"]), u64(p["do"]), u64(p["lse"]), u64(ws["di"].data.ptr), u64(ws["batches"].data.ptr),
                i64(p["o_seq"]), i64(p["o_head"]), i64(p["do_seq"]), i64(p["do_head"]), i64(p["lse_seq"]),
                i64(p["lse_head"]), i32(p["h_q"]), i32(di_rows(p["s_q_max"])), i32(rb), u64(ws["dq_acc"].data.ptr if self.fused else 0), i32(B)))
        kv_tiles = (p["s_kv_max"] + self.dkdv_cfg[1] - 1) // self.dkdv_cfg[1]
        args = (
            u64(p["q"]), u64(p["k"]), u64(p["v"]), u64(p["do"]), u64(p["lse"]), u64(ws["di"].data.ptr),
            u64(p["dq"]), u64(p["dk"]), u64(p["dv"]), u64(ws["batches"].data.ptr), u64(ws["tiles"].data.ptr),
            u64(ws["count"].data.ptr),
            i64(p["q_seq"]), i64(p["q_head"]), i64(p["k_seq"]), i64(p["k_head"]), i64(p["v_seq"]), i64(p["v_head"]),
            i64(p["do_seq"]), i64(p["do_head"]), i64(p["dq_seq"]), i64(p["dq_head"]), i64(p["dk_seq"]),
            i64(p["dk_head"]), i64(p["dv_seq"]), i64(p["dv_head"]), i64(p["lse_seq"]), i64(p["lse_head"]),
            i32(di_rows(p["s_q_max"])), i32(B), i32(kv_tiles), i32(p["h_q"]), i32(p["h_kv"]), f32(p["scale"]),
            i32(p["left"]), i32(p["right"]), i32(p["br"]))
        q_tiles = (p["s_q_max"] + bm - 1) // bm
        if self.fused:
            acc = u64(ws["dq_acc"].data.ptr)
            rb = (p["s_q_max"] + 63) // 64
            if "dkdv" in parts:
                grid, cfg = B * kv_tiles * p["h_kv"], self.dkdv_cfg
                if self.tma["dkdv"]:
                    maps = grad_maps("dkdv", p, self.dt, self.d, cfg, self.maps)
                    launch_grad_tma(self.dkdv, grid, cfg, args, list(maps) + [ctypes.c_uint64(int(acc))])
                else:
                    self.dkdv((grid,), (cfg[2],), args + (acc,), shared_mem=cfg[3])
            if "dq" in parts:
                self.dq((B * rb,), (self.dq_cfg[2],), (
                    acc, u64(p["dq"]), u64(ws["batches"].data.ptr), i64(p["dq_seq"]), i64(p["dq_head"]),
                    i32(p["h_q"]), i32(B), i32(rb), f32(p["scale"])))
            return
        for part, fn, cfg, grid in (("dkdv", self.dkdv, self.dkdv_cfg, B * kv_tiles * p["h_kv"]),
                                    ("dq", self.dq, self.dq_cfg, B * q_tiles * p["h_q"])):
            if part not in parts:
                continue
            if self.tma[part]:
                launch_grad_tma(fn, grid, cfg, args, grad_maps(part, p, self.dt, self.d, cfg, self.maps))
            else:
                fn((grid,), (cfg[2],), args, shared_mem=cfg[3])


# ----------------------------------------------------------------------------------------------
# Reference: float64 autograd per batch.
# ----------------------------------------------------------------------------------------------


def band_mask(torch, lq, lkv, left, right, br, dev):
    i = torch.arange(lq, device=dev)[:, None]
    j = torch.arange(lkv, device=dev)[None, :]
    off = (lkv - lq) if br else 0
    m = torch.ones((lq, lkv), dtype=torch.bool, device=dev)
    if right >= 0:
        m &= j <= i + off + right
    if left >= 0:
        m &= j >= i + off - left
    return m


def ref_batch(torch, qb, kb, vb, dob, h_q, h_kv, scale, left, right, br):
    """float64 [L, H, D] inputs -> (O, LSE [H, Lq], dQ, dK, dV) by autograd of masked softmax attention."""
    lq, lkv = qb.shape[0], kb.shape[0]
    if lq == 0 or lkv == 0:
        return (qb.new_zeros(qb.shape), qb.new_full((h_q, lq), -math.inf), qb.new_zeros(qb.shape),
                kb.new_zeros(kb.shape), vb.new_zeros(vb.shape))
    q = qb.clone().requires_grad_(True)
    k = kb.clone().requires_grad_(True)
    v = vb.clone().requires_grad_(True)
    rep = h_q // h_kv
    kx = k.repeat_interleave(rep, dim=1)
    vx = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, kx) * scale
    mask = band_mask(torch, lq, lkv, left, right, br, qb.device)
    s = s.masked_fill(~mask, -math.inf)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    pe = torch.exp(s - m)
    l = pe.sum(-1, keepdim=True)
    p = pe / torch.where(l > 0, l, torch.ones_like(l))
    o = torch.einsum("hij,jhd->ihd", p, vx)
    lse = torch.where(l > 0, m + torch.log(l), torch.full_like(l, -math.inf))[..., 0]
    o.backward(dob)
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


def run_case(torch, eng, rng, *, lq, lkv, pad_q=None, pad_kv=None, h_q=4, h_kv=4, left=-1, right=-1, br=0,
             off_bytes=4, token_units=False, lse_mode="dense", slack=0, scale=None, label=""):
    d = eng.d
    dtype = eng.dt
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    dev = DEV
    B = len(lq)
    (use_sl, pad_q, pad_kv, ext_q, ext_kv, s_q_max, s_kv_max, tok_q, tok_kv, tq, tkv) = packed_layout(
        lq, lkv, pad_q, pad_kv, slack
    )
    scale = 1.0 / math.sqrt(d) if scale is None else scale

    gen = torch.Generator(device=dev)
    gen.manual_seed(int(rng.integers(1 << 62)))

    def rand(shape):
        return (torch.rand(shape, generator=gen, device=dev) * 2 - 1).to(tdt)

    q, do_ = rand((max(tq, 1), h_q, d)), rand((max(tq, 1), h_q, d))
    k, v = rand((max(tkv, 1), h_kv, d)), rand((max(tkv, 1), h_kv, d))
    o = torch.zeros_like(q)
    refs = []
    lse_rows = []
    for b in range(B):
        sq = slice(int(tok_q[b]), int(tok_q[b]) + lq[b])
        skv = slice(int(tok_kv[b]), int(tok_kv[b]) + lkv[b])
        r = ref_batch(torch, q[sq].double(), k[skv].double(), v[skv].double(), do_[sq].double(), h_q, h_kv,
                      scale, left, right, br)
        o[sq] = r[0].to(tdt)
        refs.append(r)
        lse_rows.append(r[1])
    # Padding rows of every input hold NaN: a kernel that reads one poisons its output.
    for b in range(B):
        for t, tok, n in ((q, tok_q, lq), (do_, tok_q, lq), (o, tok_q, lq), (k, tok_kv, lkv), (v, tok_kv, lkv)):
            t[int(tok[b]) + n[b]: int(tok[b + 1])] = float("nan")
    dq = torch.full((max(tq, 1), h_q, d), POISON[dtype], dtype=torch.int16, device=dev).view(tdt)
    dk = torch.full((max(tkv, 1), h_kv, d), POISON[dtype], dtype=torch.int16, device=dev).view(tdt)
    dv = torch.full((max(tkv, 1), h_kv, d), POISON[dtype], dtype=torch.int16, device=dev).view(tdt)

    odt = np.int64 if off_bytes == 8 else np.int32
    if token_units:
        q_off_host, q_mult, kv_off_host, kv_mult = tok_q, h_q * d, tok_kv, h_kv * d
    else:
        q_off_host, q_mult, kv_off_host, kv_mult = tok_q * h_q * d, 1, tok_kv * h_kv * d, 1
    q_off = cp.asarray(q_off_host.astype(odt))
    kv_off = cp.asarray(kv_off_host.astype(odt))
    row_q, row_kv = h_q * d, h_kv * d
    p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), do=do_.data_ptr(),
             dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr(),
             q_off=q_off.data.ptr, q_off_bytes=off_bytes, q_mult=q_mult,
             kv_off=kv_off.data.ptr, kv_off_bytes=off_bytes, kv_mult=kv_mult,
             q_seq=row_q, q_head=d, k_seq=row_kv, k_head=d, v_seq=row_kv, v_head=d, o_seq=row_q, o_head=d,
             do_seq=row_q, do_head=d, dq_seq=row_q, dq_head=d, dk_seq=row_kv, dk_head=d, dv_seq=row_kv, dv_head=d,
             s_q_max=s_q_max, s_kv_max=s_kv_max, batch=B, h_q=h_q, h_kv=h_kv, scale=scale,
             left=left, right=right, br=br)
    keep = [q_off, kv_off]
    if use_sl:
        slq = cp.asarray(np.array(lq, dtype=odt))
        slkv = cp.asarray(np.array(lkv, dtype=odt))
        keep += [slq, slkv]
        p.update(slq=slq.data.ptr, slq_bytes=off_bytes, slkv=slkv.data.ptr, slkv_bytes=off_bytes)
    if lse_mode == "dense":
        lse = torch.full((B, h_q, s_q_max), float("nan"), dtype=torch.float32, device=dev)
        for b in range(B):
            lse[b, :, : lq[b]] = lse_rows[b].float()
        p.update(lse=lse.data_ptr(), lse_bstride=h_q * s_q_max, lse_seq=1, lse_head=s_q_max)
    else:
        lse = torch.full((max(tq, 1), h_q), float("nan"), dtype=torch.float32, device=dev)
        for b in range(B):
            lse[int(tok_q[b]): int(tok_q[b]) + lq[b]] = lse_rows[b].T.float()
        lse_off = cp.asarray((tok_q * h_q).astype(odt))
        keep.append(lse_off)
        p.update(lse=lse.data_ptr(), lse_off=lse_off.data.ptr, lse_off_bytes=off_bytes, lse_mult=1,
                 lse_seq=h_q, lse_head=1)

    ws = eng.workspace(B, h_q, s_q_max)
    eng.launch(p, ws)
    cp.cuda.runtime.deviceSynchronize()
    err = int(ws["err"].get()[0])
    if err != 0:
        return False, f"{label}: device error flag {err:#x} on valid input"

    tol = 2e-2 if dtype == "bf16" else 5e-3
    worst = {"dq": 0.0, "dk": 0.0, "dv": 0.0}
    for name, got_all, tok, lens, idx in (("dq", dq, tok_q, lq, 2), ("dk", dk, tok_kv, lkv, 3),
                                          ("dv", dv, tok_kv, lkv, 4)):
        bits = got_all.view(torch.int16)
        for b in range(B):
            lo, n, hi = int(tok[b]), lens[b], int(tok[b + 1])
            if not bool((bits[lo + n: hi] == POISON[dtype]).all()):
                return False, f"{label}: padding rows of {name} written in batch {b}"
            if n == 0:
                continue
            got = got_all[lo: lo + n].double()
            ref = refs[b][idx]
            if torch.isnan(got).any():
                return False, f"{label}: NaN in {name} rows of batch {b}"
            if (name == "dq" and lkv[b] == 0) or (name != "dq" and lq[b] == 0):
                if not bool((got == 0).all()):
                    return False, f"{label}: {name} of batch {b} is not exactly 0 (zero-length partner)"
                continue
            scale_ref = ref.abs().max().item()
            diff = (got - ref).abs()
            # The 1e-4 floor covers batches whose exact gradient is 0 everywhere (one admitted key
            # per row: dP = Di exactly), where rounding leaves ~1e-6.
            bad = diff > tol * scale_ref + tol * ref.abs() + 1e-4
            if bad.any():
                return False, (f"{label}: {name} mismatch batch {b}: max abs err {diff.max().item():.3e} "
                               f"(max |ref| {scale_ref:.3e}, {int(bad.sum())} elements)")
            # Exactly 0 where no (row, key) pair contributes: rows the band gives no key (dQ),
            # keys no row admits (dK, dV). A reference 0 that only comes from dP = Di (a row with
            # one key) is not exact in rounded arithmetic and is left to the tolerance.
            mask = band_mask(torch, lq[b], lkv[b], left, right, br, got.device)
            isolated = ~mask.any(1) if name == "dq" else ~mask.any(0)
            if isolated.any() and not bool((got[isolated] == 0).all()):
                return False, f"{label}: {name} rows with no contribution not exactly 0 in batch {b}"
            if scale_ref > 0:
                worst[name] = max(worst[name], diff.max().item() / scale_ref)
    return True, (f"{label}: ok (max err / max|ref|: dq {worst['dq']:.1e} dk {worst['dk']:.1e} "
                  f"dv {worst['dv']:.1e})")


MASKS = [("none", -1, -1, 0), ("causal-tl", -1, 0, 0), ("causal-br", -1, 0, 1), ("window-tl", 37, 5, 0),
         ("window-br", 100, 0, 1), ("left-only", 64, -1, 0)]


def correctness(torch, engines, seed, quick=False):
    rng = np.random.default_rng(seed)
    results = []
    for eng in engines:
        tag = f"{eng.dt} d{eng.d} {eng.name}"
        for mname, left, right, br in (MASKS if not quick else MASKS[:3]):
            lq = [int(x) for x in rng.integers(0, 300, 6)]
            lkv = [int(x) for x in rng.integers(0, 300, 6)]
            lq[0], lkv[3], lq[5] = 0, 0, 0  # an empty batch, an empty key set, an empty last batch
            results.append(run_case(torch, eng, rng, lq=lq, lkv=lkv, h_q=8, h_kv=2, left=left, right=right, br=br,
                                    label=f"{tag} {mname} gqa4 lse-dense i32"))
        if quick:
            continue
        lq = [int(x) for x in rng.integers(1, 260, 5)]
        lkv = [int(x) for x in rng.integers(1, 260, 5)]
        results.append(run_case(torch, eng, rng, lq=lq, lkv=lkv, pad_q=[3, 0, 17, 1, 128], pad_kv=[0, 9, 64, 2, 5],
                                h_q=4, h_kv=4, right=0, br=1, off_bytes=8, lse_mode="ragged",
                                label=f"{tag} seq_lens i64 lse-ragged causal-br"))
        results.append(run_case(torch, eng, rng, lq=lq, lkv=lkv, pad_q=[0, 5, 0, 7, 0], pad_kv=[11, 0, 3, 0, 1],
                                h_q=6, h_kv=1, token_units=True, slack=77, label=f"{tag} seq_lens mqa token-units"))
        results.append(run_case(torch, eng, rng, lq=[200, 3, 0, 1], lkv=[50, 0, 0, 1], h_q=2, h_kv=2, right=0, br=1,
                                label=f"{tag} lkv<lq causal-br"))
        results.append(run_case(torch, eng, rng, lq=[40, 300], lkv=[260, 20], h_q=2, h_kv=1, right=3, left=2, br=0,
                                label=f"{tag} narrow window-tl (rows without keys)"))
        results.append(run_case(torch, eng, rng, lq=[0, 1, 0, 0, 1], lkv=[1, 0, 0, 0, 2], h_q=2, h_kv=1,
                                label=f"{tag} tiny totals"))
        results.append(run_case(torch, eng, rng, lq=[130, 0, 64], lkv=[190, 7, 64], h_q=2, h_kv=2, right=0,
                                scale=-0.4, label=f"{tag} negative scale causal-tl"))
        results.append(run_case(torch, eng, rng, lq=[1100], lkv=[1500], h_q=2, h_kv=1, right=0, br=1, scale=0.3,
                                label=f"{tag} long causal-br scale0.3"))
    return results


# ----------------------------------------------------------------------------------------------
# Benchmark
# ----------------------------------------------------------------------------------------------


def time_ms(torch, fn):
    """The development harness's shorter timing (7 pairs of 5 calls): ratios, not the record."""
    return event_time_ms(torch, fn, warm=2, reps=7, inner=5)


def benchmark(torch, engines_by_d, h=16, lens=MIX, ab=(), parts_of=None):
    print("FA2 bwd schema:", torch.ops.aten._flash_attention_backward.default._schema, flush=True)
    print("ragged mix lengths:", lens, flush=True)
    rows = []
    B, T, S = len(lens), sum(lens), max(lens)
    tok = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    cu = torch.tensor(tok, dtype=torch.int32, device="cuda")
    for d, engs in engines_by_d.items():
        for causal in (False, True):
            q, k, v, do_ = ((torch.rand((T, h, d), device="cuda") * 2 - 1).to(torch.bfloat16) for _ in range(4))
            scale = 1.0 / math.sqrt(d)
            pairs = sum(L * (L + 1) // 2 if causal else L * L for L in lens)
            flops = 2.5 * 4.0 * pairs * d * h
            res = {"d": d, "causal": causal, "fa2": float("nan")}
            ref = None
            try:
                fwd = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, S, S, 0.0, causal, False, scale=scale)
                o, lse_fa, seed, offset = fwd[0], fwd[1], fwd[2], fwd[3]

                def fa2():
                    return torch.ops.aten._flash_attention_backward(do_, q, k, v, o, lse_fa, cu, cu, S, S, 0.0,
                                                                    causal, seed, offset, scale=scale)
                ref = fa2()
                ms, spread = time_ms(torch, fa2)
                res["fa2"] = flops / ms / 1e9
                print(f"  d{d} causal={causal} FA2 varlen bwd: {ms:.3f} ms {res['fa2']:.1f} TFLOP/s "
                      f"(spread {spread:.3f}) lse {tuple(lse_fa.shape)}", flush=True)
            except Exception as e:  # noqa: BLE001 - report, and time ours on stand-in O and LSE
                print(f"  FA2 varlen failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
                o = (torch.rand((T, h, d), device="cuda") * 2 - 1).to(torch.bfloat16)
                lse_fa = torch.full((B, h, S), 30.0, dtype=torch.float32, device="cuda")
            # FA2's LSE: [H, T] (varlen) or [B, H, S] (padded), handed to our kernels in its own layout.
            off = cp.asarray((tok * h * d).astype(np.int32))
            p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), do=do_.data_ptr(),
                     q_off=off.data.ptr, q_off_bytes=4, q_mult=1, kv_off=off.data.ptr, kv_off_bytes=4, kv_mult=1,
                     q_seq=h * d, q_head=d, k_seq=h * d, k_head=d, v_seq=h * d, v_head=d, o_seq=h * d, o_head=d,
                     do_seq=h * d, do_head=d, dq_seq=h * d, dq_head=d, dk_seq=h * d, dk_head=d, dv_seq=h * d,
                     dv_head=d, s_q_max=S, s_kv_max=S, batch=B, h_q=h, h_kv=h, scale=scale, left=-1,
                     right=0 if causal else -1, br=1, lse=lse_fa.data_ptr())
            keep = [off]
            if lse_fa.dim() == 2:
                lo = cp.asarray(tok.astype(np.int32))
                keep.append(lo)
                p.update(lse_off=lo.data.ptr, lse_off_bytes=4, lse_mult=1, lse_seq=1, lse_head=T)
            else:
                p.update(lse_bstride=lse_fa.stride(0), lse_seq=lse_fa.stride(2), lse_head=lse_fa.stride(1))
            for eng in engs:
                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                p.update(dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr())
                ws = eng.workspace(B, h, S)
                ms, spread = time_ms(torch, lambda: eng.launch(p, ws))
                tf = flops / ms / 1e9
                rr = ref[:3] if ref is not None else (dq, dk, dv)
                diffs = [(a.float() - r.float()).abs().max().item() for a, r in zip((dq, dk, dv), rr)]
                mags = [r.float().abs().max().item() for r in rr]
                parts = []
                if eng is engs[0] or (parts_of is not None and eng.name in parts_of):
                    for part in ("pre", "dot", "dkdv", "dq"):
                        pm, _ = time_ms(torch, lambda: eng.launch(p, ws, parts=(part,)))
                        parts.append(f"{part} {pm:.3f}")
                res[eng.name] = tf
                print(f"  d{d} causal={causal} ours {eng.name}: {ms:.3f} ms {tf:.1f} TFLOP/s (spread {spread:.3f}) "
                      f"ours/FA2 {tf / res['fa2']:.2f}; max|ours-FA2| dq {diffs[0]:.2e}/{mags[0]:.2e} "
                      f"dk {diffs[1]:.2e}/{mags[1]:.2e} dv {diffs[2]:.2e}/{mags[2]:.2e}"
                      + (f"; parts ms: {', '.join(parts)}" if parts else ""), flush=True)
            # Old and new kernels timed alternately in the same process (the order effects cancel).
            by_name = {e.name: e for e in engs}
            for a, b in [(a, b) for a, b in ab if a in by_name and b in by_name]:
                ta, tb = [], []
                for _ in range(3):
                    for eng, acc in ((by_name[a], ta), (by_name[b], tb)):
                        ws = eng.workspace(B, h, S)
                        acc.append(time_ms(torch, lambda: eng.launch(p, ws))[0])
                ma, mb = float(np.median(ta)), float(np.median(tb))
                print(f"  d{d} causal={causal} interleaved {a} {ma:.3f} ms vs {b} {mb:.3f} ms: "
                      f"{a}/{b} time {ma / mb:.3f}; {b} {flops / mb / 1e9:.1f} TFLOP/s "
                      f"({flops / mb / 1e9 / res['fa2']:.2f}x FA2)", flush=True)
            rows.append(res)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="two small cases per pair, bf16 (sanitizers)")
    ap.add_argument("--wg-only", action="store_true", help="with --tiny: only the wgmma and TMA kernels")
    ap.add_argument("--hopper-only", action="store_true", help="leave the mma.sync defaults out")
    ap.add_argument("--fused-only", action="store_true",
                    help="check the fused kernels only; time them against the selected two-kernel pair (bf16)")
    ap.add_argument("--tiny-dims", default="64", help="with --tiny: head dims, comma-separated (64,128)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    import torch

    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__, "cupy", cp.__version__,
          "seed", args.seed, flush=True)
    mod = compile_module()

    def hopper(dt, d, name):
        return Backward(mod, dt, d, dkdv=name(dt, d), dq=name(dt, d, "dq"))

    if args.tiny or args.quick:
        dims = tuple(int(x) for x in args.tiny_dims.split(",")) if args.tiny else (64, 128)
        engs = [] if args.wg_only else [Backward(mod, "bf16", d) for d in dims]
        engs += [hopper("bf16", d, name) for d in dims for name in (wg_name, tma_name, fused_name, fused_ws_name, ordered_name)]
        rng = np.random.default_rng(args.seed)
        results = []
        for eng in engs if args.tiny else ():
            results += [run_case(torch, eng, rng, lq=[40, 0, 70], lkv=[50, 30, 0], h_q=2, h_kv=1, right=0, br=1,
                                 label=f"tiny {eng.name} causal-br gqa"),
                        run_case(torch, eng, rng, lq=[65, 3], lkv=[20, 130], h_q=2, h_kv=2, left=9, right=2,
                                 pad_q=[2, 1], pad_kv=[0, 4], lse_mode="ragged",
                                 label=f"tiny {eng.name} window seq_lens")]
        if args.quick:
            results = correctness(torch, engs, args.seed, quick=True)
        for ok, msg in results:
            print(("PASS " if ok else "FAIL ") + msg, flush=True)
        n_bad = sum(0 if ok else 1 for ok, _ in results)
        print(f"{'tiny' if args.tiny else 'quick'} correctness: {len(results) - n_bad}/{len(results)} passed",
              flush=True)
        return 1 if n_bad else 0
    engines = [] if args.hopper_only else [Backward(mod, dt, d) for d in (64, 128) for dt in ("bf16", "f16")]
    wg = [hopper(dt, d, wg_name) for d in (64, 128) for dt in ("bf16", "f16")]
    tma = [hopper(dt, d, tma_name) for d in (64, 128) for dt in ("bf16", "f16")]
    fused = [hopper(dt, d, name) for d in (64, 128) for dt in ("bf16", "f16") for name in (fused_name, fused_ws_name, ordered_name)]
    # Timed only (each kernel is checked in a full pair): one kernel of a pair swapped for another's.
    mixed = [] if args.hopper_only else [Backward(mod, "bf16", d, dkdv=wg_name("bf16", d)) for d in (64, 128)]
    mixed += [Backward(mod, "bf16", d, dkdv=tma_name("bf16", d), dq=wg_name("bf16", d, "dq")) for d in (64, 128)]
    if args.fused_only:
        engines, mixed = [], []
        checked = fused
    else:
        checked = engines + wg + tma + fused
    t0 = time.time()
    results = correctness(torch, checked, args.seed)
    n_bad = 0
    for ok, msg in results:
        print(("PASS " if ok else "FAIL ") + msg, flush=True)
        n_bad += 0 if ok else 1
    print(f"correctness: {len(results) - n_bad}/{len(results)} passed ({time.time() - t0:.1f} s)", flush=True)
    if args.check_only:
        return 1 if n_bad else 0
    if n_bad:
        print("WARNING: correctness failures above; timings below are of a wrong kernel", flush=True)
    timed = engines + wg + tma + fused + mixed
    if args.fused_only:
        timed = [e for e in tma if e.d == 128] + [e for e in wg if e.d == 64] + fused
    by_d = {d: [e for e in timed if e.dt == "bf16" and e.d == d] for d in (128, 64)}
    ab = [(wg[i].name, tma[i].name) for i in range(len(wg))]
    # The selected pair against each fused form (D 128: the TMA pair; D 64: the wgmma pair).
    ab += [(tma[i].name if wg[i].d == 128 else wg[i].name, f.name) for i in range(len(wg)) for f in fused
           if f.d == wg[i].d and f.dt == wg[i].dt]
    rows = benchmark(torch, by_d, ab=ab, parts_of=set() if args.fused_only else {e.name for e in wg + tma + fused})
    print("\n=== backward TFLOP/s (bf16, H=16, ragged mix, FLOPs = 2.5 x forward) ===")
    for r in rows:
        names = [e.name for e in by_d[r["d"]]]
        cells = " ".join(f"{n}={r.get(n, float('nan')):.1f} ({r.get(n, float('nan')) / r['fa2']:.2f}x)" for n in names)
        print(f"d{r['d']} causal={int(r['causal'])} fa2={r['fa2']:.1f} {cells}")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
