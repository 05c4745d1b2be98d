"""Host side of the backward's TMA gradient kernels (ragged_fmha_bwd_{dkdv,dq}_tma_*, which publish
`NAME_tma = {1}`): their two tensor maps and a launch through cuLaunchKernel that appends them to the
common parameters (RAGGED_BWD_PARAMS, kernels/cuda-fmha/cuda/fmha_bwd/README.md).

dK/dV streams Q and dO (maps over the Q-layout buffers, box rows = the kernel's BM); dQ streams K
and V (maps over the K-layout buffers, box rows = its BN). Maps are encoded as fmha_tma.encode_map
does for the forward (3-D {D, heads, tokens}, 128-byte swizzle, token extent 2^31 - 1: the kernels
only ask for whole boxes inside a batch's valid rows) and cached per buffer set, so a timed loop
encodes nothing.
"""

import ctypes

import cupy as cp

from fmha_tma import cu_function, encode_map, libcuda

_CTYPES = {"uint64": ctypes.c_uint64, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
           "float32": ctypes.c_float}


def grad_maps(part, p, dt, d, cfg, cache):
    """The two maps of `part` ("dkdv" or "dq") for the buffers of p, from `cache` when seen before."""
    if part == "dkdv":
        spec = (("q", "q_head", "q_seq", p["h_q"]), ("do", "do_head", "do_seq", p["h_q"]))
        rows = cfg[0]
    else:
        spec = (("k", "k_head", "k_seq", p["h_kv"]), ("v", "v_head", "v_seq", p["h_kv"]))
        rows = cfg[1]
    key = (part, dt, d, rows) + tuple((p[a], p[h], p[s], n) for a, h, s, n in spec)
    if key not in cache:
        cache[key] = [encode_map(p[a], dt, d, n, p[h], p[s], rows) for a, h, s, n in spec]
    return cache[key]


def launch_grad_tma(fn, grid, cfg, args, maps):
    """cuLaunchKernel of one gradient kernel: `args` are the numpy scalars of the cupy launch."""
    cargs = [_CTYPES[type(a).__name__](a.item()) for a in args] + list(maps)
    params = (ctypes.c_void_p * len(cargs))(*[ctypes.addressof(a) for a in cargs])
    stream = ctypes.c_void_p(cp.cuda.get_current_stream().ptr)
    rc = libcuda().cuLaunchKernel(cu_function(fn), ctypes.c_uint(grid), ctypes.c_uint(1), ctypes.c_uint(1),
                                  ctypes.c_uint(cfg[2]), ctypes.c_uint(1), ctypes.c_uint(1), ctypes.c_uint(cfg[3]),
                                  stream, params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernel failed: CUresult {rc} (grid {grid}, cfg {cfg})")
