#!/usr/bin/env bash
# Builds the AITER shim for the ragged-SDPA plugin on a ROCm machine. Never run: CI has no ROCm
# and compiles the asm-only variant instead (kernels/aiter-fmha/shim/ci/amd_compile_check.sh), which is
# where the fixes below were found. Produces, in OUT_DIR:
#   libmha_fwd.so            AITER's torch-free FMHA forward (asm fmha_v3 + CK tile), built by
#                            AITER's own op_tests/cpp/mha/compile.py --api=fwd
#   libragged_aiter_shim.so  kernels/aiter-fmha/shim/ragged_aiter_shim{,_bwd}.cpp, linked to it with rpath $ORIGIN
#   libmha_bwd.so            only with BUILD_MHA_BWD=1: AITER's backward (compile.py --api=bwd),
#                            opened by the shim at run time (not linked)
# Install them next to libhipdnn_provider_ragged_sdpa.so, or point $RAGGED_SDPA_AITER_SHIM at the
# shim. See kernels/aiter-fmha/shim/README.md.
#
# Usage:
#   AITER_DIR=/path/to/aiter [GPU_ARCHS="gfx942;gfx950"] [ROCM_PATH=/opt/rocm] [BUILD_MHA_BWD=1] \
#     kernels/aiter-fmha/shim/build_shim.sh OUT_DIR
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: AITER_DIR=... $0 OUT_DIR}"
: "${AITER_DIR:?set AITER_DIR to a ROCm/aiter checkout with submodules (3rdparty/composable_kernel)}"
ROCM_PATH="${ROCM_PATH:-/opt/rocm}"
GPU_ARCHS="${GPU_ARCHS:-gfx942;gfx950}"
hipcc="$ROCM_PATH/bin/hipcc"
ck="$AITER_DIR/3rdparty/composable_kernel"
header="$AITER_DIR/csrc/include/mha_fwd.h"

[ -x "$hipcc" ] || { echo "hipcc not found at $hipcc (set ROCM_PATH)" >&2; exit 1; }
[ -f "$header" ] || { echo "$header not found (AITER_DIR=$AITER_DIR)" >&2; exit 1; }
[ -d "$ck/include" ] || { echo "$ck is empty: git -C $AITER_DIR submodule update --init" >&2; exit 1; }

# The shim sets these mha_fwd_args fields by name; an older AITER lacks some of them. Use a
# revision after the CK group-mode dispatcher fix (composable_kernel PR #3730, 2026-04;
# ragged-sdpa.md §9 pitfall 12).
for field in cu_seqlen_q_ptr seqstart_q_ptr sink_size block_scale_size_q v3_api_check how_v3_bf16_cvt; do
  grep -q "$field" "$header" || { echo "$header lacks $field: AITER revision too old" >&2; exit 1; }
done

mkdir -p "$out"
out="$(cd "$out" && pwd)"

# compile.py imports AITER's jit package and runs CK's and AITER's code generators: they need
# these modules, which a bare ROCm image lacks. A venv keeps them off the system Python.
venv="$out/.venv"
if ! "$venv/bin/python" -c 'import packaging, setuptools, psutil, ninja, pandas, numpy' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet packaging setuptools psutil ninja pandas numpy
fi
export PATH="$venv/bin:$PATH"

echo "== libmha_fwd.so for $GPU_ARCHS (AITER compile.py --api=fwd; takes a while)"
if [ ! -f "$out/libmha_fwd.so" ]; then
  # compile.py writes the library into AITER's JIT directory, not the working directory: that
  # is $AITER_JIT_DIR (older revisions: $JIT_WORKSPACE_DIR) when set, else aiter/jit/ inside the
  # checkout when writable, else ~/.aiter/jit. Pin it under OUT_DIR, and still look in the others.
  jit="$out/aiter_jit"
  (cd "$out" && GPU_ARCHS="$GPU_ARCHS" AITER_JIT_DIR="$jit" JIT_WORKSPACE_DIR="$jit" \
    python3 "$AITER_DIR/op_tests/cpp/mha/compile.py" --api=fwd)
  found=""
  for candidate in "$jit/libmha_fwd.so" "$AITER_DIR/aiter/jit/libmha_fwd.so" "$HOME/.aiter/jit/libmha_fwd.so"; do
    [ -f "$candidate" ] && { found="$candidate"; break; }
  done
  [ -n "$found" ] || found="$(find "$AITER_DIR" "$jit" -name libmha_fwd.so -newer "$header" -print -quit 2>/dev/null || true)"
  [ -n "$found" ] || { echo "compile.py did not produce libmha_fwd.so (looked in $jit, $AITER_DIR/aiter/jit, ~/.aiter/jit)" >&2; exit 1; }
  echo "compile.py wrote $found"
  cp "$found" "$out/"
fi

echo "== libragged_aiter_shim.so"
# The shim reads AITER's asm kernel table (for its preflight) and its own target list from
# generated headers: a string-valued -D depends on how each compiler driver re-quotes arguments.
gen="$out/gen"
mkdir -p "$gen"
(cd "$AITER_DIR/hsa" && AITER_GPU_ARCHS="$GPU_ARCHS" python3 codegen.py -m fmha_v3_fwd --output_dir "$gen")
printf '#define RAGGED_AITER_SHIM_GPU_TARGETS "%s"\n' "$GPU_ARCHS" > "$gen/ragged_aiter_shim_targets.h"
offload=()
IFS=';' read -ra archs <<< "$GPU_ARCHS"
for a in "${archs[@]}"; do offload+=("--offload-arch=$a"); done
"$hipcc" -std=c++20 -O2 -fPIC -shared \
  -DUSE_ROCM=1 -DENABLE_CK=1 -DFAV3_ON=1 \
  -I"$here" -I"$gen" -I"$AITER_DIR/csrc/include" -I"$ck/include" -I"$ck/example/ck_tile/01_fmha" \
  "${offload[@]}" \
  "$here/ragged_aiter_shim.cpp" "$here/ragged_aiter_shim_bwd.cpp" \
  -L"$out" -lmha_fwd -Wl,-rpath,'$ORIGIN' \
  -o "$out/libragged_aiter_shim.so"

for sym in ragged_aiter_shim_abi_version ragged_aiter_shim_gpu_targets ragged_aiter_mha_fwd \
  ragged_aiter_mha_fwd_preflight ragged_aiter_shim_last_error ragged_aiter_shim_bwd_abi_version \
  ragged_aiter_mha_bwd_available ragged_aiter_mha_bwd; do
  nm -D --defined-only "$out/libragged_aiter_shim.so" | grep -qw "$sym" \
    || { echo "$sym missing from the shim" >&2; exit 1; }
done
echo "built $out/libragged_aiter_shim.so (targets $GPU_ARCHS)"

# The backward: the shim opens libmha_bwd.so next to itself at run time (no link), so it is
# optional; without it the engine declines backward graphs naming the missing library.
if [ "${BUILD_MHA_BWD:-0}" = 1 ] && [ ! -f "$out/libmha_bwd.so" ]; then
  echo "== libmha_bwd.so for $GPU_ARCHS (AITER compile.py --api=bwd; takes a while)"
  jit="$out/aiter_jit"
  (cd "$out" && GPU_ARCHS="$GPU_ARCHS" AITER_JIT_DIR="$jit" JIT_WORKSPACE_DIR="$jit" \
    python3 "$AITER_DIR/op_tests/cpp/mha/compile.py" --api=bwd)
  found="$(find "$jit" "$AITER_DIR/aiter/jit" "$HOME/.aiter/jit" -name libmha_bwd.so -print -quit 2>/dev/null || true)"
  [ -n "$found" ] || { echo "compile.py did not produce libmha_bwd.so" >&2; exit 1; }
  cp "$found" "$out/"
  nm -D --defined-only "$out/libmha_bwd.so" | grep -q '_ZN5aiter7mha_bwdENS_12mha_bwd_argsERKN7ck_tile13stream_configE' \
    || { echo "$out/libmha_bwd.so does not export aiter::mha_bwd" >&2; exit 1; }
fi
echo "run with: export AITER_ASM_DIR=$AITER_DIR/hsa/  RAGGED_SDPA_AITER_SHIM=$out/libragged_aiter_shim.so"
