#!/usr/bin/env bash
# Sets up, under WORK, a HIP toolchain that runs on a plain Debian 12 machine without ROCm:
#   - Debian's clang-22/lld-22/llvm-22 (apt): the first Debian clang that knows gfx942 and gfx950
#     (Debian's own hipcc drives clang-15; its HIP 5.2 headers and device libs predate both GPUs);
#   - HIP 7.1 headers and the ocml/ockl device bitcode shipped inside the PyPI wheel
#     `triton==3.9.0` (triton/backends/amd/{include,lib}); only those files are unpacked, the
#     wheel is deleted afterwards;
#   - the handful of `oclc_*` control libraries clang's HIP driver links next to ocml/ockl,
#     compiled here from OpenCL C (each holds one or two constants);
#   - a Python venv with what AITER's hsa/codegen.py imports (numpy, pandas).
# Everything is cached: a second run with the same WORK does nothing but check.
# Prints nothing but progress; the caller sources WORK/toolchain.env afterwards.
# Usage: toolchain.sh WORK
set -euo pipefail
work="${1:?usage: $0 WORK}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
TRITON_VERSION=3.9.0
LLVM=22

# --- 1. clang/lld/llvm from Debian ---------------------------------------------------------
if ! command -v "clang++-$LLVM" >/dev/null || ! command -v "ld.lld-$LLVM" >/dev/null \
  || ! command -v "llvm-readelf-$LLVM" >/dev/null \
  || [ ! -x "/usr/lib/llvm-$LLVM/bin/clang-offload-bundler" ]; then
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  echo "toolchain: apt-get install clang-$LLVM lld-$LLVM llvm-$LLVM"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "clang-$LLVM" "lld-$LLVM" "llvm-$LLVM" "clang-tools-$LLVM" >/dev/null
fi
bin="/usr/lib/llvm-$LLVM/bin"
[ -x "$bin/clang++" ] || { echo "toolchain: $bin/clang++ missing after install" >&2; exit 1; }

# --- 2. HIP headers + ocml/ockl from the triton wheel -------------------------------------
rocm="$work/rocm"
if [ ! -f "$rocm/amdgcn/bitcode/ockl.bc" ] || [ ! -f "$rocm/include/hip/hip_runtime.h" ]; then
  echo "toolchain: downloading triton==$TRITON_VERSION (HIP headers and device bitcode inside)"
  rm -rf "$work/wheel" "$rocm"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    "triton==$TRITON_VERSION" -d "$work/wheel"
  python3 - "$work/wheel" "$rocm" <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("triton-*.whl"))
rocm = pathlib.Path(sys.argv[2])
amd = "triton/backends/amd/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(amd + "include/") and not name.endswith("/"):
            dest = rocm / "include" / name[len(amd + "include/"):]
        elif name in (amd + "lib/ocml.bc", amd + "lib/ockl.bc"):
            dest = rocm / "amdgcn" / "bitcode" / name.rsplit("/", 1)[1]
        else:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        with z.open(name) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
PY
  rm -rf "$work/wheel"
fi
[ -f "$rocm/include/hip/hip_runtime.h" ] || { echo "toolchain: no HIP headers in the wheel" >&2; exit 1; }

# --- 3. oclc control libraries and the ROCm-root markers clang looks for -------------------
bc="$rocm/amdgcn/bitcode"
if [ ! -f "$bc/.complete" ]; then
  src="$work/oclc-src"
  mkdir -p "$src"
  # name  |  OpenCL C body
  while IFS='|' read -r name body; do
    [ -n "$name" ] || continue
    printf '%s\n' "$body" > "$src/$name.cl"
    "$bin/clang" -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=gfx942 -nogpulib \
      -fvisibility=hidden -O2 -emit-llvm -c "$src/$name.cl" -o "$bc/$name.bc"
  done < <(
    for v in 0 1; do
      s=$([ $v = 1 ] && echo on || echo off)
      echo "oclc_finite_only_$s|const __constant char __oclc_finite_only_opt = $v;"
      echo "oclc_unsafe_math_$s|const __constant char __oclc_unsafe_math_opt = $v;"
      echo "oclc_daz_opt_$s|const __constant char __oclc_daz_opt = $v;"
      echo "oclc_correctly_rounded_sqrt_$s|const __constant char __oclc_correctly_rounded_sqrt32 = $v;"
      echo "oclc_wavefrontsize64_$s|const __constant char __oclc_wavefrontsize64 = $v; const __constant int __oclc_wavefrontsize_log2 = $((5 + v));"
    done
    for abi in 500 600; do echo "oclc_abi_version_$abi|const __constant int __oclc_ABI_version = $abi;"; done
    # gfx942 -> 9402, gfx950 -> 9500: major * 1000 + minor * 100 + stepping, hex digits decoded
    echo "oclc_isa_version_942|const __constant int __oclc_ISA_version = 9402;"
    echo "oclc_isa_version_950|const __constant int __oclc_ISA_version = 9500;"
    # Found by clang's ROCm detection but linked only for OpenCL/older HIP: empty modules.
    echo "opencl|"
    echo "hip|"
  )
  touch "$bc/.complete"
fi
mkdir -p "$rocm/share/hip" "$rocm/bin"
printf 'HIP_VERSION_MAJOR=7\nHIP_VERSION_MINOR=1\nHIP_VERSION_PATCH=0\n' > "$rocm/share/hip/version"
cp "$rocm/share/hip/version" "$rocm/bin/.hipVersion"

# --- 4. Python for AITER's codegen.py -------------------------------------------------------
venv="$work/venv"
if ! "$venv/bin/python" -c 'import numpy, pandas' 2>/dev/null; then
  echo "toolchain: python venv with numpy, pandas"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "numpy>=1.26,<3" "pandas>=2.2,<3"
fi

cat > "$work/toolchain.env" <<ENV
export PATH="$bin:\$PATH"
ROCM_ROOT="$rocm"
CODEGEN_PYTHON="$venv/bin/python"
ENV
echo "toolchain: ready ($("$bin/clang++" --version | head -n1))"
