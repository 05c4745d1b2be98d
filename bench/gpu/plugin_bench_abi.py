"""The plugin's engine C ABI through ctypes, shared by the benchmarks (forward, backward, FP8, serving).

What the harnesses need to drive `libhipdnn_provider_ragged_sdpa.so` as hipDNN would: the typed
entry points (shared/spec/plugin-abi.md §3-§5), the variant pack, the graphs and metadata that
`plugin/examples/emit_bench_graphs/` writes, bf16 bit conversions for numpy buffers, the
CUDA-event timing rule, and the build of a cuDNN peer's graph. No GPU import at module level: the
self-checks run without one.
"""

import ctypes
import json
import os
import time

import numpy as np

SUCCESS = 0
STATUS_NAMES = {0: "SUCCESS", 1: "BAD_PARAM", 2: "INVALID_VALUE", 3: "INTERNAL_ERROR", 4: "ALLOC_FAILED",
                5: "NOT_APPLICABLE", 6: "NOT_INITIALIZED"}
CUDA_ENGINE = "RAGGED_SDPA_CUDA_FMHA"
# The backward whose dQ is summed in no fixed order (fused dK/dV/dQ on sm_90a); backward graphs only.
CUDA_NONDETERMINISTIC_ENGINE = "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC"
SELF_CHECK_MAX_TOKENS = 4096
HOST_ENGINE = "RAGGED_SDPA_HOST_REFERENCE"


class ConstData(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class DeviceBuffer(ctypes.Structure):
    _fields_ = [("uid", ctypes.c_int64), ("ptr", ctypes.c_void_p)]


LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p)


class PluginError(RuntimeError):
    pass


class Plugin:
    """The engine-plugin entry points, typed; every failing status raises with the plugin's text."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(os.path.abspath(path))
        vp, i64, u32, st = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32, ctypes.c_int
        pcd = ctypes.POINTER(ConstData)
        self._sig("hipdnnPluginGetLastErrorString", None, [ctypes.POINTER(ctypes.c_char_p)])
        self._sig("hipdnnPluginGetName", st, [ctypes.POINTER(ctypes.c_char_p)])
        self._sig("hipdnnPluginGetVersion", st, [ctypes.POINTER(ctypes.c_char_p)])
        self._sig("hipdnnPluginGetApiVersion", st, [ctypes.POINTER(ctypes.c_char_p)])
        self._sig("hipdnnPluginSetLoggingCallback", st, [LOG_CALLBACK])
        self._sig("hipdnnEnginePluginGetAllEngineIds", st, [ctypes.POINTER(i64), u32, ctypes.POINTER(u32)])
        self._sig("hipdnnEnginePluginGetEngineName", st, [i64, ctypes.POINTER(ctypes.c_char_p)])
        self._sig("hipdnnEnginePluginCreate", st, [ctypes.POINTER(vp)])
        self._sig("hipdnnEnginePluginDestroy", st, [vp])
        self._sig("hipdnnEnginePluginSetStream", st, [vp, vp])
        self._sig("hipdnnEnginePluginGetApplicableEngineIds", st, [vp, pcd, ctypes.POINTER(i64), u32,
                                                                    ctypes.POINTER(u32)])
        self._sig("hipdnnEnginePluginGetWorkspaceSize", st, [vp, pcd, pcd, ctypes.POINTER(ctypes.c_size_t)])
        self._sig("hipdnnEnginePluginCreateExecutionContext", st, [vp, pcd, pcd, ctypes.POINTER(vp)])
        self._sig("hipdnnEnginePluginDestroyExecutionContext", st, [vp, vp])
        self._sig("hipdnnEnginePluginExecuteOpGraph", st, [vp, vp, vp, ctypes.POINTER(DeviceBuffer), u32])
        self.log_lines = []
        # Kept on self: ctypes frees the trampoline when the Python object dies.
        self._log_cb = LOG_CALLBACK(lambda sev, msg: self.log_lines.append((sev, msg.decode(errors="replace"))))
        self.lib.hipdnnPluginSetLoggingCallback(self._log_cb)

    def _sig(self, name, restype, argtypes):
        fn = getattr(self.lib, name)
        fn.restype, fn.argtypes = restype, argtypes
        setattr(self, name.replace("hipdnnEnginePlugin", "").replace("hipdnnPlugin", ""), fn)

    def last_error(self):
        text = ctypes.c_char_p()
        self.GetLastErrorString(ctypes.byref(text))
        return text.value.decode(errors="replace") if text.value else ""

    def check(self, status, what):
        if status != SUCCESS:
            raise PluginError(f"{what}: {STATUS_NAMES.get(status, status)}: {self.last_error()}")

    def string(self, fn):
        text = ctypes.c_char_p()
        self.check(fn(ctypes.byref(text)), fn.__name__)
        return text.value.decode()

    def engine_ids(self):
        n = ctypes.c_uint32()
        self.check(self.GetAllEngineIds(None, 0, ctypes.byref(n)), "GetAllEngineIds (count)")
        ids = (ctypes.c_int64 * n.value)()
        m = ctypes.c_uint32()
        self.check(self.GetAllEngineIds(ids, n.value, ctypes.byref(m)), "GetAllEngineIds")
        return list(ids[: m.value])

    def engine_name(self, engine_id):
        text = ctypes.c_char_p()
        self.check(self.GetEngineName(engine_id, ctypes.byref(text)), f"GetEngineName({engine_id})")
        return text.value.decode()

    def create(self):
        handle = ctypes.c_void_p()
        self.check(self.Create(ctypes.byref(handle)), "Create")
        return handle

    def applicable(self, handle, graph):
        data = ConstData(ctypes.cast(graph, ctypes.c_void_p), len(graph))
        ids = (ctypes.c_int64 * 8)()
        n = ctypes.c_uint32()
        self.check(self.GetApplicableEngineIds(handle, ctypes.byref(data), ids, 8, ctypes.byref(n)),
                   "GetApplicableEngineIds")
        return list(ids[: min(n.value, 8)])

    def context(self, handle, config, graph):
        """(execution context, workspace bytes); the graph and config buffers may die afterwards."""
        cd = ConstData(ctypes.cast(config, ctypes.c_void_p), len(config))
        gd = ConstData(ctypes.cast(graph, ctypes.c_void_p), len(graph))
        size = ctypes.c_size_t()
        self.check(self.GetWorkspaceSize(handle, ctypes.byref(cd), ctypes.byref(gd), ctypes.byref(size)),
                   "GetWorkspaceSize")
        ctx = ctypes.c_void_p()
        self.check(self.CreateExecutionContext(handle, ctypes.byref(cd), ctypes.byref(gd), ctypes.byref(ctx)),
                   "CreateExecutionContext")
        return ctx, size.value


def variant_pack(pointers):
    """{uid: address} -> the C array ExecuteOpGraph reads."""
    pack = (DeviceBuffer * len(pointers))()
    for i, (uid, ptr) in enumerate(sorted(pointers.items())):
        pack[i].uid, pack[i].ptr = uid, ptr
    return pack


def read_graph(graphs, name):
    with open(os.path.join(graphs, name + ".bin"), "rb") as f:
        return f.read()


def load_problems(graphs, listing="problems.json"):
    """The problems `listing` names (problems.json: bf16; problems_fp8.json: the FP8 forwards),
    each its metadata with the graph's bytes under "graph"."""
    with open(os.path.join(graphs, listing)) as f:
        names = json.load(f)
    out = []
    for name in names:
        with open(os.path.join(graphs, name + ".json")) as f:
            meta = json.load(f)
        meta["graph"] = read_graph(graphs, name)
        back = meta.get("backward")
        if back:
            # The training pair (emit_bench_graphs: every head-dim pair of the CUDA backward).
            back["forward_bytes"] = read_graph(graphs, back["forward_graph"])
            back["graph_bytes"] = read_graph(graphs, back["graph"])
            if back.get("graph_top_left"):
                back["top_left_bytes"] = read_graph(graphs, back["graph_top_left"])
        out.append(meta)
    return out


def engine_config(graphs, engine):
    with open(os.path.join(graphs, f"engine_config_{engine}.bin"), "rb") as f:
        return f.read()


def element_offsets(meta, d):
    """Offsets in elements of a [T, H, d] packed tensor, from the graph's offsets in either unit."""
    if meta.get("offsets_unit") == "tokens":
        return [t * meta["heads"] * d for t in meta["offsets"]]
    return list(meta["offsets"])


def token_starts(meta):
    return [0] + list(np.cumsum(meta["seq_lens"]).astype(int))


def to_bf16_bits(x):
    """float32 -> bf16 bits, round to nearest even (finite inputs only)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def host_call_us(fn, n=200):
    """Host wall time per call when the calls are only enqueued (the GPU runs behind)."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6



class Execution:
    """One execution context of one serialized graph on one named engine, with its variant pack
    fixed: each call is exactly one ExecuteOpGraph. `alloc(n)` returns (owner, address) of n
    workspace bytes on the engine's side (a torch CUDA tensor, a numpy array); the owner is kept
    alive here."""

    def __init__(self, plugin, handle, graphs, engine, graph, pointers, alloc):
        self.plugin, self.handle = plugin, handle
        names = [plugin.engine_name(i) for i in plugin.applicable(handle, graph)]
        if engine not in names:
            raise PluginError(f"{engine} not applicable (applicable: {names}); plugin log: "
                              f"{plugin.log_lines[-4:]}")
        t0 = time.perf_counter()
        self.ctx, self.ws_bytes = plugin.context(handle, engine_config(graphs, engine), graph)
        self.create_s = time.perf_counter() - t0
        self._ws_owner, address = alloc(max(self.ws_bytes, 1))
        self.ws_ptr = ctypes.c_void_p(address if self.ws_bytes else None)
        self.pack = variant_pack(pointers)
        self.n = len(self.pack)
        self.execute = plugin.ExecuteOpGraph

    def __call__(self):
        status = self.execute(self.handle, self.ctx, self.ws_ptr, self.pack, self.n)
        if status != SUCCESS:
            self.plugin.check(status, "ExecuteOpGraph")

    def close(self):
        if self.ctx is not None:
            ctx, self.ctx = self.ctx, None
            self.plugin.check(self.plugin.DestroyExecutionContext(self.handle, ctx), "DestroyExecutionContext")


def build_cudnn_graph(cudnn, g):
    """Validates and builds a cuDNN frontend graph the benchmarks' peers run (heuristics A, then
    the fallback list), raising where cuDNN does not support it; returns the graph."""
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g


def open_cudnn(stream_ptr):
    """The cuDNN frontend module and a handle on the CUDA stream `stream_ptr`, its versions printed;
    (None, None), saying why, where the frontend does not load (the peer is then reported as
    unavailable and the benchmark carries on with the others)."""
    try:
        import cudnn

        handle = cudnn.create_handle()
        cudnn.set_stream(handle, stream_ptr)
        print(f"cudnn frontend {cudnn.__version__}, backend {cudnn.backend_version()}", flush=True)
        return cudnn, handle
    except Exception as e:  # noqa: BLE001 - a missing peer is reported, not fatal
        print(f"cuDNN frontend unavailable: {type(e).__name__}: {str(e)[:400]}", flush=True)
        return None, None
