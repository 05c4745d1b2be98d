"""Two ways to launch a kernel of kernels/aiter-fmha/hip/ on host NumPy arrays, with one call shape.

`launch(kernel, grid, block, args)` takes `args` as `(kind, value)` pairs in the kernel's
parameter order, kind one of "ptr" (a NumPy array, updated in place after the launch, or None
for a null pointer), "i32", "i64". The lists mirror the Rust launch builders
(kernels/aiter-fmha/src/backward_mapping.rs), so a list that disagrees with a kernel's signature
fails here too.

- `CupyBackend`: NVRTC through CuPy on an NVIDIA GPU (the check that counts).
- `CpuBackend`: the same source compiled by g++ with a few definitions standing in for CUDA's
  built-ins, every (block, thread) run in turn. Valid only for kernels without shared memory,
  barriers or atomics (the AITER engine's pre-passes and fix-ups): it catches harness and logic
  errors on a machine without a GPU, not code-generation or memory-model ones.
"""

import ctypes
import hashlib
import pathlib
import subprocess
import tempfile

import numpy as np

_C_TYPES = {"ptr": "void*", "i32": "int", "i64": "long long"}

_CPU_PRELUDE = r"""
#include <cstring>
struct ragged_cpu_dim3 { unsigned x, y, z; };
static ragged_cpu_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __device__
#define __global__
static inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, sizeof f); return f; }
template <class... P, class... A>
static void ragged_cpu_grid(void (*kernel)(P...), unsigned grid, unsigned block, A... a)
{
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for(unsigned bx = 0; bx < grid; ++bx)
        for(unsigned tx = 0; tx < block; ++tx)
        {
            blockIdx = {bx, 0, 0};
            threadIdx = {tx, 0, 0};
            kernel(((P)a)...);
        }
}
"""


class CupyBackend:
    name = "cupy"

    def __init__(self, sources):
        import cupy as cp

        self.cp = cp
        self.functions = {}
        for kernel, path in sources.items():
            mod = cp.RawModule(code=path.read_text(), backend="nvrtc", options=("-std=c++14",))
            self.functions[kernel] = (mod, mod.get_function(kernel))
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.description = (
            f"{props['name'].decode()} (cc {cp.cuda.Device(0).compute_capability}), "
            f"cupy {cp.__version__}, nvrtc {cp.cuda.nvrtc.getVersion()}"
        )

    def launch(self, kernel, grid, block, args):
        cp = self.cp
        values, copies = [], []
        for kind, v in args:
            if kind == "ptr":
                if v is None:
                    values.append(np.uint64(0))
                else:
                    d = cp.asarray(v)
                    copies.append((v, d))
                    values.append(d)
            elif kind == "i32":
                values.append(np.int32(v))
            else:
                values.append(np.int64(v))
        self.functions[kernel][1]((grid,), (block,), tuple(values))
        cp.cuda.runtime.deviceSynchronize()
        for host, dev in copies:
            host[...] = cp.asnumpy(dev)


class CpuBackend:
    name = "cpu"

    def __init__(self, sources, signatures):
        """`signatures`: kernel -> list of kinds, used to generate one extern "C" entry each."""
        self.libs = {}
        self.tmp = tempfile.TemporaryDirectory(prefix="ragged_cpu_kernels_")
        for kernel, path in sources.items():
            kinds = signatures[kernel]
            params = ", ".join(f"{_C_TYPES[k]} a{n}" for n, k in enumerate(kinds))
            call = ", ".join(f"a{n}" for n in range(len(kinds)))
            wrapper = (
                f'extern "C" void cpu_launch(unsigned grid, unsigned block, {params})\n'
                f"{{ ragged_cpu_grid(&{kernel}, grid, block, {call}); }}\n"
            )
            text = _CPU_PRELUDE + path.read_text() + "\n" + wrapper
            tag = hashlib.sha256(text.encode()).hexdigest()[:12]
            cpp = pathlib.Path(self.tmp.name) / f"{kernel}_{tag}.cpp"
            so = cpp.with_suffix(".so")
            cpp.write_text(text)
            subprocess.run(
                ["g++", "-std=c++14", "-O2", "-fPIC", "-shared", str(cpp), "-o", str(so)],
                check=True,
            )
            lib = ctypes.CDLL(str(so))
            fn = lib.cpu_launch
            ctype = {"ptr": ctypes.c_void_p, "i32": ctypes.c_int32, "i64": ctypes.c_int64}
            fn.argtypes = [ctypes.c_uint, ctypes.c_uint] + [ctype[k] for k in kinds]
            fn.restype = None
            self.libs[kernel] = (lib, fn, kinds)
        self.description = "host CPU (g++ emulation of the grid, serial)"

    def launch(self, kernel, grid, block, args):
        _, fn, kinds = self.libs[kernel]
        if [k for k, _ in args] != kinds:
            raise ValueError(f"{kernel}: argument kinds {[k for k, _ in args]} != {kinds}")
        values = []
        for kind, v in args:
            if kind == "ptr":
                if v is not None and not (v.flags.c_contiguous and v.flags.writeable):
                    raise ValueError(f"{kernel}: pointer arguments must be writable contiguous arrays")
                values.append(None if v is None else v.ctypes.data)
            else:
                values.append(int(v))
        fn(grid, block, *values)
