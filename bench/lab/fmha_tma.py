"""Host side of the TMA producer (kernels/cuda-fmha/cuda/fmha/mainloop_sm90.cuh, the persistent entry points): tensor maps
encoded with the driver's cuTensorMapEncodeTiled through ctypes, and a forward launch through
cuLaunchKernel that appends the three 128-byte maps (Q, K, V) to the common parameters.

A map covers a whole packed buffer as a 3-D tensor {D, heads, tokens} with the head and sequence
strides of the variant pack, box {64, 1, rows} (one 128-byte swizzle atom per row) and the 128-byte
swizzle the wgmma descriptors expect. The kernel only ever asks for whole boxes inside a batch's
valid rows (tail tiles are copied with cp.async), so the token extent does not need to be the
buffer's: it is set to 2^31 - 1 here, as the plugin would have to (it does not know buffer sizes).
"""

import ctypes

import cupy as cp

_DTYPE = {"bf16": 9, "f16": 6}  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 / _FLOAT16
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3
TOKEN_EXTENT = (1 << 31) - 1

_lib = None


def libcuda():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
        _lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
        _lib.cuLaunchKernel.restype = ctypes.c_int
    return _lib


def encode_map(ptr, dtype, d, heads, head_stride, seq_stride, box_rows):
    """128 bytes of CUtensorMap for a [tokens, heads, d] buffer (strides in elements)."""
    tm = (ctypes.c_ubyte * 128)()
    dims = (ctypes.c_uint64 * 3)(d, heads, TOKEN_EXTENT)
    strides = (ctypes.c_uint64 * 2)(head_stride * 2, seq_stride * 2)
    box = (ctypes.c_uint32 * 3)(64, 1, box_rows)
    elem = (ctypes.c_uint32 * 3)(1, 1, 1)
    rc = libcuda().cuTensorMapEncodeTiled(
        ctypes.byref(tm), ctypes.c_int(_DTYPE[dtype]), ctypes.c_uint32(3), ctypes.c_void_p(ptr), dims, strides, box,
        elem, ctypes.c_int(0), ctypes.c_int(_SWIZZLE_128B), ctypes.c_int(_L2_PROMOTION_256B), ctypes.c_int(0))
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {rc} (d={d} heads={heads} "
                           f"strides={head_stride},{seq_stride} box_rows={box_rows})")
    return tm


def cu_function(raw_kernel):
    """The CUfunction handle behind a cupy RawKernel."""
    fn = getattr(raw_kernel, "kernel", raw_kernel)
    return ctypes.c_void_p(int(fn.ptr))


def forward_args(p, ws, u64, i32, i64, f32):
    """The forward entry points' common parameters, in the kernels' order (kernels/cuda-fmha/cuda/README.md),
    each wrapped in the caller's scalar types (numpy for cupy launches, ctypes for cuLaunchKernel)."""
    return [
        u64(p["q"]), u64(p["k"]), u64(p["v"]), u64(p["o"]), u64(p.get("lse", 0)),
        u64(ws["batches"].data.ptr), u64(ws["tiles"].data.ptr), u64(ws["count"].data.ptr),
        i64(p["q_seq"]), i64(p["q_head"]), i64(p["k_seq"]), i64(p["k_head"]),
        i64(p["v_seq"]), i64(p["v_head"]), i64(p["o_seq"]), i64(p["o_head"]),
        i64(p.get("lse_seq", 0)), i64(p.get("lse_head", 0)),
        i32(p["h_q"]), i32(p["h_kv"]), f32(p["scale"]), i32(p["left"]), i32(p["right"]), i32(p["br"]),
    ]


def forward_grid(p, bm):
    """One block per (query tile of the longest batch, batch, query head); the pre-pass's tile list
    tells the surplus blocks to leave."""
    return p["batch"] * ((p["s_q_max"] + bm - 1) // bm) * p["h_q"]


_NONCE = [0x9E3779B97F4A7C15]


def next_nonce():
    """A new nonzero 64-bit nonce per fused launch (the plugin's kernels/cuda-fmha/src/forward/fused_list.rs)."""
    _NONCE[0] = (_NONCE[0] * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    return _NONCE[0] or 1


def launch_forward_tma(eng, p, ws, dtype, fused=False):
    """Same parameters as Engine.launch's forward launch, plus the Q, K and V maps, the pre-pass's
    parameters and the fused list's nonce (0: the pre-pass ran; fmha/fused_list.cuh)."""
    u64, i32, i64, f32 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64, ctypes.c_float
    d, dv = eng.d, eng.dv
    kv_heads = p["h_kv"]
    tm_q = encode_map(p["q"], dtype, d, p["h_q"], p["q_head"], p["q_seq"], eng.bm)
    tm_k = encode_map(p["k"], dtype, d, kv_heads, p["k_head"], p["k_seq"], eng.bn)
    tm_v = encode_map(p["v"], dtype, dv, kv_heads, p["v_head"], p["v_seq"], eng.bn)
    args = forward_args(p, ws, u64, i32, i64, f32) + [tm_q, tm_k, tm_v]
    args += eng.prepass_args(p, ws, u64, i32, i64) + [ctypes.c_uint64(next_nonce() if fused else 0)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    grid = forward_grid(p, eng.bm)
    stream = ctypes.c_void_p(cp.cuda.get_current_stream().ptr)
    rc = libcuda().cuLaunchKernel(eng.cu_fwd, ctypes.c_uint(grid), ctypes.c_uint(1), ctypes.c_uint(1),
                                  ctypes.c_uint(eng.threads), ctypes.c_uint(1), ctypes.c_uint(1),
                                  ctypes.c_uint(eng.smem), stream, params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernel({eng.name}) failed: CUresult {rc}")


def tma_dtype(name):
    return "f16" if "_f16_" in name else "bf16"


def takes_tensor_maps(mod, name):
    """An entry point that publishes `__constant__ int NAME_tma[1] = {1}` takes the three maps (every
    forward entry point publishes it; the fallback is for older sources)."""
    try:
        ptr = mod.get_global(name + "_tma")
    except Exception:  # noqa: BLE001 - cupy raises a driver error for a missing symbol
        return False
    return int(cp.ndarray((1,), cp.int32, ptr).get()[0]) != 0
