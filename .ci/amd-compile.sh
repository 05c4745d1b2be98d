#!/usr/bin/env bash
# CI stage: compiles the AMD pieces (HIP kernels, AITER's asm-only libmha_fwd.so, the shim) with
# a toolchain it installs itself, and runs the shim on a fake HIP runtime. See
# kernels/aiter-fmha/shim/ci/amd_compile_check.sh. The vendored AITER subset lives next to the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== AMD pieces compiled on the CPU (clang-22, HIP 7.1 headers), shim run on a fake HIP runtime"
aiter="${AITER_DIR:-../shared/third_party/aiter}"
[ -f "$aiter/csrc/cpp_itfs/mha_fwd.cu" ] || { echo "AITER subset not found at $aiter (set AITER_DIR)" >&2; exit 1; }
kernels/aiter-fmha/shim/ci/amd_compile_check.sh . "$aiter" "${AMD_CI_WORK:-${TMPDIR:-/tmp}/ragged-sdpa-amd-ci}"
