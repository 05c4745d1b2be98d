#!/usr/bin/env python3
"""Paged decode and chunked prefill through the plugin's C ABI against FlashInfer's
BatchDecodeWithPagedKVCacheWrapper and BatchPrefillWithPagedKVCacheWrapper and cuDNN's paged SDPA.

"Ours" is one `hipdnnEnginePluginExecuteOpGraph` of the CUDA engine (its split-KV paged kernels)
on an execution context made from the serialized graph `plugin/examples/emit_serving_graphs.rs`
wrote (the shim's serving graphs: packed Q/O, token-major "NHD" pools `[pages, H_kv, 16, D]`,
page tables `[B, MP]`, one query token per sequence for decode, bf16). FlashInfer (PyPI
`flashinfer-python==0.6.0`, carried as a wheel, see bench/gpu/wheels.sh) runs on the same pool
tensors (its NHD layout `[pages, 16, H_kv, D]` is the same memory) and the same shuffled page ids
(`indptr` / `indices` / `last_page_len`), with and without its tensor-core decode; the faster is
the peer. cuDNN's frontend (`nvidia-cudnn-frontend`, carried as a wheel) runs its SDPA with paged
K/V caches on the same pools (as containers [pages, H_kv, 16, D] over the NHD memory), the same
page ids (as [B, 1, MP, 1] tables) and the packed Q / O rows (as [B, H_q, S_q, D] dims), bottom-right
causal, for decode and prefill alike. A problem with more query tokens per sequence (chunked prefill, bottom-right causal) is
timed against FlashInfer's paged prefill instead and also reported in TFLOP/s (4 · D · H_q per
admitted pair); there the engine's split-kernel route ("ours_split", the gathered route switched
off at plan time) is timed beside its default, in the same rounds. Outputs are checked against each other before anything is timed.

Time: median over 15 CUDA-event pairs of 10 back-to-back calls, taken interleaved with the order
rotated each round (event_timing.py). Bytes: K and V rows actually read (sum of contexts x H_kv x
D x 2 bytes, each of K and V) plus Q and O; GB/s from them, and the % of the card's HBM peak
(--peak-tbps, else 3.35 for H100 SXM and 4.8 for H200 from the device name).

Usage:
  python3 bench/gpu/serving_bench.py --plugin LIB.so --graphs DIR          # on the GPU machine
  python3 bench/gpu/serving_bench.py --plugin LIB.so --graphs DIR --self-check
      # anywhere, numpy only: DIR's graphs (emit them with --tiny) on the host reference engine
      # through the same ctypes binding, O checked against a float64 reference.
"""

import argparse
import ctypes
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from event_timing import interleaved_ms  # noqa: E402
from plugin_bench_abi import (  # noqa: E402
    CUDA_ENGINE,
    Execution,
    HOST_ENGINE,
    Plugin,
    PluginError,
    build_cudnn_graph,
    open_cudnn,
    engine_config,
    from_bf16_bits,
    read_graph,
    to_bf16_bits,
    variant_pack,
)


def load(graphs):
    with open(os.path.join(graphs, "problems.json")) as f:
        names = json.load(f)
    out = []
    for name in names:
        with open(os.path.join(graphs, name + ".json")) as f:
            meta = json.load(f)
        meta["graph"] = read_graph(graphs, name)
        out.append(meta)
    return out


def tables(meta, seed=7):
    """(table [B, MP] int32 with -1 in unread entries, FlashInfer's indptr, indices, last_page_len):
    each sequence's pages in order, drawn from one random permutation of the pool."""
    ps, mp, pages = meta["page_size"], meta["columns"], meta["pages"]
    lens = meta["len_kv"]
    perm = np.random.default_rng(seed).permutation(pages).astype(np.int32)
    table = np.full((len(lens), mp), -1, dtype=np.int32)
    indptr, indices, last = [0], [], []
    nxt = 0
    for b, length in enumerate(lens):
        n = -(-length // ps)
        table[b, :n] = perm[nxt:nxt + n]
        indices.extend(perm[nxt:nxt + n].tolist())
        nxt += n
        indptr.append(len(indices))
        last.append(length - (n - 1) * ps if n else 0)
    return table, np.array(indptr, np.int32), np.array(indices, np.int32), np.array(last, np.int32)


def reference(meta, q, k, v, table):
    """float64 decode attention: q [B, H_q, D], pools [P, ps, H_kv, D]; out [B, H_q, D]."""
    b_n, hq, d = q.shape
    hkv, ps = meta["heads_kv"], meta["page_size"]
    out = np.zeros((b_n, hq, d))
    for b, length in enumerate(meta["len_kv"]):
        if length == 0:
            continue
        j = np.arange(length)
        pages = table[b, j // ps]
        kb = k[pages, j % ps].astype(np.float64)  # [L, H_kv, D]
        vb = v[pages, j % ps].astype(np.float64)
        for h in range(hq):
            g = h // (hq // hkv)
            s = kb[:, g] @ q[b, h].astype(np.float64) / np.sqrt(d)
            p = np.exp(s - s.max())
            out[b, h] = p @ vb[:, g] / p.sum()
    return out


def cudnn_table_width(meta):
    """The page-table width cuDNN's paged SDPA accepts: the pages of the longest context."""
    return -(-max(meta["len_kv"]) // meta["page_size"])


def cudnn_paged_graph(cudnn, handle, meta, len_q, mp):
    """cuDNN frontend SDPA over the same paged pools: Q and O as [B, H_q, S_q, D] dims over the
    packed rows (S_q the longest query; ragged offsets on Q and O where the query lengths differ),
    K and V as containers [pages, H_kv, page_size, D] over the NHD pools, page tables [B, 1, MP, 1]
    int32 with MP = `mp` = cudnn_table_width(meta) (cuDNN requires exactly that width),
    per-sequence lengths with the padding mask, bottom-right causal (uids: Q 1, K 2, V 3, O 4,
    Q / O offsets 10, seq_len_q 20, seq_len_kv 21, tables 30 and 31)."""
    b, hq, hkv, d = meta["batch"], meta["heads_q"], meta["heads_kv"], meta["head_dim"]
    ps, pages = meta["page_size"], meta["pages"]
    s_q = max(len_q)
    bf16, i32 = cudnn.data_type.BFLOAT16, cudnn.data_type.INT32
    g = cudnn.pygraph(handle=handle, io_data_type=bf16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    lens = dict(dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
    slq = g.tensor(name="seq_len_q", uid=20, **lens)
    slkv = g.tensor(name="seq_len_kv", uid=21, **lens)
    q_stride = [s_q * hq * d, d, hq * d, 1]
    qt = g.tensor(name="q", uid=1, dim=[b, hq, s_q, d], stride=q_stride, data_type=bf16)
    pool = dict(dim=[pages, hkv, ps, d], stride=[ps * hkv * d, d, hkv * d, 1], data_type=bf16)
    kt = g.tensor(name="k", uid=2, **pool)
    vt = g.tensor(name="v", uid=3, **pool)
    table = dict(dim=[b, 1, mp, 1], stride=[mp, mp, 1, 1], data_type=i32)
    tk = g.tensor(name="page_table_k", uid=30, **table)
    tv = g.tensor(name="page_table_v", uid=31, **table)
    ragged = len(set(len_q)) > 1
    if ragged:
        ro = g.tensor(name="ragged_qo", uid=10, dim=[b + 1, 1, 1, 1], stride=[1, 1, 1, 1],
                      data_type=cudnn.data_type.INT64)
        qt.set_ragged_offset(ro)
    o, _ = g.sdpa(name="sdpa", q=qt, k=kt, v=vt, generate_stats=False, attn_scale=1.0 / np.sqrt(d),
                  use_padding_mask=True, seq_len_q=slq, seq_len_kv=slkv,
                  diagonal_alignment=cudnn.diagonal_alignment.BOTTOM_RIGHT, diagonal_band_right_bound=0,
                  paged_attention_k_table=tk, paged_attention_v_table=tv,
                  paged_attention_max_seq_len_kv=max(meta["len_kv"]))
    o.set_uid(4).set_output(True).set_dim([b, hq, s_q, d]).set_stride(q_stride).set_data_type(bf16)
    if ragged:
        o.set_ragged_offset(ro)
    return build_cudnn_graph(cudnn, g)


def self_check(plugin, graphs):
    """The host reference engine through the ctypes binding on host buffers, against reference()."""
    handle = plugin.create()
    for meta in load(graphs):
        rng = np.random.default_rng(1)
        hq, hkv, d, ps, pages = meta["heads_q"], meta["heads_kv"], meta["head_dim"], meta["page_size"], meta["pages"]
        b_n, rows = meta["batch"], meta["rows_q"]
        q = to_bf16_bits(rng.uniform(-1, 1, (rows, hq, d)).astype(np.float32))
        k = to_bf16_bits(rng.uniform(-1, 1, (pages, ps, hkv, d)).astype(np.float32))
        v = to_bf16_bits(rng.uniform(-1, 1, (pages, ps, hkv, d)).astype(np.float32))
        o = np.zeros((rows, hq, d), np.uint16)
        table = tables(meta)[0]
        ones = np.ones(b_n, np.int32)
        lens = np.array(meta["len_kv"], np.int32)
        ctx, ws_bytes = plugin.context(handle, engine_config(graphs, HOST_ENGINE), meta["graph"])
        workspace = np.zeros(max(ws_bytes, 1), np.uint8)
        u = meta["uids"]
        pack = variant_pack({u["q"]: q.ctypes.data, u["k"]: k.ctypes.data, u["v"]: v.ctypes.data,
                             u["o"]: o.ctypes.data, u["page_table_k"]: table.ctypes.data,
                             u["page_table_v"]: table.ctypes.data, u["seq_len_q"]: ones.ctypes.data,
                             u["seq_len_kv"]: lens.ctypes.data})
        plugin.check(plugin.ExecuteOpGraph(handle, ctx, workspace.ctypes.data if ws_bytes else None, pack,
                                           len(pack)), "ExecuteOpGraph")
        plugin.check(plugin.DestroyExecutionContext(handle, ctx), "DestroyExecutionContext")
        want = reference(meta, from_bf16_bits(q[:b_n]), from_bf16_bits(k), from_bf16_bits(v), table)
        err = np.abs(from_bf16_bits(o[:b_n]) - want).max()
        print(f"self-check {meta['name']}: host engine vs float64 max |diff| {err:.2e}")
        if not err < 2e-2:
            raise SystemExit(f"self-check {meta['name']} failed")
    plugin.Destroy(handle)


def peak_tbps(torch, given):
    if given:
        return given
    name = torch.cuda.get_device_name()
    return 4.8 if "H200" in name else 3.35


# The plugin's switch between its two paged prefill routes (kernels/cuda-fmha/src/paged/gather.rs).
GATHER_ENV = "RAGGED_SDPA_CUDA_PAGED_GATHER"


def bench(plugin, graphs, args):
    import torch

    sys.path.insert(0, "/tmp/site")
    try:
        import flashinfer
    except Exception as e:  # noqa: BLE001 - a missing peer is reported, not fatal
        flashinfer = None
        print(f"FlashInfer unavailable: {e}")
    cudnn, cudnn_handle = open_cudnn(torch.cuda.current_stream().cuda_stream)
    dev = torch.device("cuda")
    peak = peak_tbps(torch, args.peak_tbps)
    print(f"device {torch.cuda.get_device_name()}, HBM peak taken as {peak} TB/s")
    handle = plugin.create()
    plugin.check(plugin.SetStream(handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "SetStream")
    rows = []
    for meta in load(graphs):
        name = meta["name"]
        hq, hkv, d, ps, pages = meta["heads_q"], meta["heads_kv"], meta["head_dim"], meta["page_size"], meta["pages"]
        b_n = meta["batch"]
        g = torch.Generator(device=dev).manual_seed(3)
        q = (torch.rand((meta["rows_q"], hq, d), generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
        k = (torch.rand((pages, ps, hkv, d), generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
        v = (torch.rand((pages, ps, hkv, d), generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
        o = torch.zeros_like(q)
        table, indptr, indices, last = tables(meta)
        t_table = torch.from_numpy(table).to(dev)
        t_lens = torch.tensor(meta["len_kv"], dtype=torch.int32, device=dev)
        len_q = meta.get("len_q", [1] * b_n)
        prefill = any(n > 1 for n in len_q)
        total_q = sum(len_q)
        t_qlens = torch.tensor(len_q, dtype=torch.int32, device=dev)
        u = meta["uids"]
        pointers = {u["q"]: q.data_ptr(), u["k"]: k.data_ptr(), u["v"]: v.data_ptr(), u["o"]: o.data_ptr(),
                    u["page_table_k"]: t_table.data_ptr(), u["page_table_v"]: t_table.data_ptr(),
                    u["seq_len_q"]: t_qlens.data_ptr(), u["seq_len_kv"]: t_lens.data_ptr()}

        def alloc(n):
            t = torch.empty(n, dtype=torch.uint8, device=dev)
            return t, t.data_ptr()

        ours = Execution(plugin, handle, graphs, CUDA_ENGINE, meta["graph"], pointers, alloc)
        ours()
        torch.cuda.synchronize()
        fns, labels = [ours], ["ours"]
        outs = {}
        keep = []
        if prefill:
            # The same graph planned with the gathered route switched off (the split kernel), timed
            # in the same interleaved rounds: the A/B of the engine's two prefill routes.
            o_split = torch.zeros_like(q)
            os.environ[GATHER_ENV] = "0"
            try:
                split = Execution(plugin, handle, graphs, CUDA_ENGINE, meta["graph"],
                                  {**pointers, u["o"]: o_split.data_ptr()}, alloc)
            finally:
                del os.environ[GATHER_ENV]
            split()
            torch.cuda.synchronize()
            outs["ours_split"] = o_split[:total_q]
            fns.append(split)
            labels.append("ours_split")
            keep.append((split, o_split))
        if flashinfer is not None and prefill:
            try:
                ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
                w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
                qo_indptr = torch.tensor(np.concatenate([[0], np.cumsum(len_q)]), dtype=torch.int32, device=dev)
                # FlashInfer's causal mask ends each query block at its sequence's last key, as
                # bottom-right causal does.
                w.plan(qo_indptr, torch.from_numpy(indptr).to(dev), torch.from_numpy(indices).to(dev),
                       torch.from_numpy(last).to(dev), hq, hkv, d, ps, causal=True,
                       q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                qp = q[:total_q].contiguous()
                outs["flashinfer"] = w.run(qp, (k, v))
                torch.cuda.synchronize()
                fns.append(lambda w=w, qp=qp, k=k, v=v: w.run(qp, (k, v)))
                labels.append("flashinfer")
                keep.append((w, ws))
            except Exception as e:  # noqa: BLE001
                print(f"{name}: FlashInfer paged prefill failed: {e}")
        if flashinfer is not None and not prefill:
            for tc in {"no": (False,), "yes": (True,), "both": (False, True)}[args.flashinfer_tc]:
                try:
                    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
                    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
                    w.plan(torch.from_numpy(indptr).to(dev), torch.from_numpy(indices).to(dev),
                           torch.from_numpy(last).to(dev), hq, hkv, d, ps, pos_encoding_mode="NONE",
                           q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                    qb = q[:b_n].contiguous()
                    out = w.run(qb, (k, v))
                    torch.cuda.synchronize()
                    label = "flashinfer" + ("_tc" if tc else "")
                    outs[label] = out
                    fns.append(lambda w=w, qb=qb, k=k, v=v: w.run(qb, (k, v)))
                    labels.append(label)
                    keep.append((w, ws))
                except Exception as e:  # noqa: BLE001
                    print(f"{name}: FlashInfer (tensor cores {tc}) failed: {e}")
        if cudnn is not None:
            # cuDNN's paged SDPA on the same pools and page ids (unread table entries as page 0).
            try:
                mp_c = cudnn_table_width(meta)
                g_c = cudnn_paged_graph(cudnn, cudnn_handle, meta, len_q, mp_c)
                ws_c = torch.empty(max(g_c.get_workspace_size(), 1), dtype=torch.uint8, device=dev)
                o_c = torch.full_like(q, float("nan"))
                t_table_c = torch.from_numpy(np.ascontiguousarray(np.maximum(table[:, :mp_c], 0))).to(dev)
                t_table_c = t_table_c.view(b_n, 1, mp_c, 1)
                starts_qo = np.concatenate([[0], np.cumsum(len_q)]) * hq * d
                pack_c = {1: q, 2: k, 3: v, 4: o_c, 20: t_qlens.view(b_n, 1, 1, 1),
                          21: t_lens.view(b_n, 1, 1, 1), 30: t_table_c, 31: t_table_c}
                if len(set(len_q)) > 1:
                    pack_c[10] = torch.tensor(starts_qo, dtype=torch.int64, device=dev)

                def cudnn_run(g_c=g_c, pack_c=pack_c, ws_c=ws_c):
                    g_c.execute(pack_c, ws_c, handle=cudnn_handle)
                cudnn_run()
                torch.cuda.synchronize()
                outs["cudnn_paged"] = o_c[:total_q]
                fns.append(cudnn_run)
                labels.append("cudnn_paged")
                keep.append((g_c, ws_c, pack_c))
            except Exception as e:  # noqa: BLE001
                print(f"{name}: cuDNN paged SDPA failed: {type(e).__name__}: {str(e)[:600]}")
        # Outputs checked against each other (and against float64 on a few sequences).
        ours_o = o[:total_q].float()
        for label, out in outs.items():
            diff = (ours_o - out.float()).abs().max().item()
            print(f"{name}: max |ours - {label}| = {diff:.3e}")
            if not diff < 2e-2:
                raise SystemExit(f"{name}: ours and {label} disagree ({diff})")
        # float64 on the first two sequences (a prefill's last 64 rows and 4 heads), their K/V
        # rows gathered on the device first; bottom-right causal: row i sees keys <= i + Lkv - Lq.
        few = min(b_n, 2)
        err = 0.0
        starts = np.concatenate([[0], np.cumsum(len_q)])
        for b in range(few):
            length, lq = meta["len_kv"][b], len_q[b]
            j = torch.arange(length, device=dev)
            pages_b = t_table[b].long()[j // ps]
            kb = k[pages_b, j % ps].double().cpu().numpy()  # [L, H_kv, D]
            vb = v[pages_b, j % ps].double().cpu().numpy()
            for i in range(max(0, lq - 64), lq):
                row = starts[b] + i
                qb = q[row].double().cpu().numpy()
                seen = i + length - lq + 1
                for h in (range(hq) if not prefill else (0, 1, hq - 2, hq - 1)):
                    gi = h // (hq // hkv)
                    sc = kb[:seen, gi] @ qb[h] / np.sqrt(d)
                    p = np.exp(sc - sc.max())
                    want = p @ vb[:seen, gi] / p.sum()
                    err = max(err, float(np.abs(ours_o[row, h].cpu().numpy() - want).max()))
        print(f"{name}: max |ours - float64| over {few} sequences = {err:.3e}")
        if not err < 2e-2:
            raise SystemExit(f"{name}: ours disagrees with float64 ({err})")
        times = interleaved_ms(torch, fns, warm=3, reps=args.reps, inner=10)
        kv_bytes = sum(meta["len_kv"]) * hkv * d * 2 * 2
        qo_bytes = 2 * total_q * hq * d * 2
        total = kv_bytes + qo_bytes
        # Prefill: admitted (query, key) pairs under bottom-right causal, 4 D FLOPs each per head.
        pairs = sum(lq * (lkv - lq) + lq * (lq + 1) // 2 for lq, lkv in zip(len_q, meta["len_kv"]))
        flops = 4 * d * hq * pairs
        res = {label: t for label, t in zip(labels, times)}
        ours_ms = res["ours"][0]
        peers = [(res[lab][0], lab) for lab in labels if not lab.startswith("ours")]
        peer = min(peers) if peers else (None, None)
        rows.append((name, ours_ms, res["ours"][1], total, peer, flops if prefill else None))
        for label in labels:
            ms, spread = res[label]
            gbs = total / (ms * 1e-3) / 1e9
            rate = f"{flops / (ms * 1e-3) / 1e12:7.1f} TFLOP/s" if prefill else f"{gbs / (peak * 1e3) * 100:5.1f} % of peak"
            print(f"  {name} {label:14s} {ms * 1e3:9.1f} us (spread {spread * 1e3:.1f})  {gbs:8.1f} GB/s  {rate}")
        ours.close()
        for kept in keep:
            if isinstance(kept[0], Execution):
                kept[0].close()
        del k, v
        torch.cuda.empty_cache()
    plugin.Destroy(handle)
    print()
    # ours / peer as throughput, like every other table of the benchmarks: above 1 ours is faster.
    print(f"{'problem':40s} {'ours us':>9s} {'GB/s':>8s} {'% peak':>7s} {'TFLOP/s':>8s} {'peer':>14s} {'peer us':>9s} "
          f"{'ours/peer':>9s}")
    for name, ms, _, total, (peer_ms, peer), flops in rows:
        gbs = total / (ms * 1e-3) / 1e9
        ratio = f"{peer_ms / ms:9.3f}" if peer_ms else f"{'-':>9s}"
        peer_us = f"{peer_ms * 1e3:9.1f}" if peer_ms else f"{'-':>9s}"
        tflops = f"{flops / (ms * 1e-3) / 1e12:8.1f}" if flops else f"{'-':>8s}"
        print(f"{name:40s} {ms * 1e3:9.1f} {gbs:8.1f} {gbs / (peak * 1e3) * 100:7.1f} {tflops} {peer or '-':>14s} "
              f"{peer_us} {ratio}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--graphs", required=True)
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--peak-tbps", type=float, default=None)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--flashinfer-tc", choices=("no", "yes", "both"), default="both",
                    help="FlashInfer's decode without tensor cores, with them, or both (each is one JIT module)")
    args = ap.parse_args()
    plugin = Plugin(args.plugin)
    try:
        if args.self_check:
            self_check(plugin, args.graphs)
        else:
            bench(plugin, args.graphs, args)
    except PluginError as e:
        raise SystemExit(str(e)) from e


if __name__ == "__main__":
    main()
