#!/usr/bin/env bash
# CI stage: compiles the CUDA programs (kernels/cuda) as the plugin does, with NVRTC, and their PTX
# with ptxas, on a machine without a GPU (kernels/cuda/ci/compile_check.py says what fails). NVRTC
# and ptxas come from NVIDIA's PyPI wheels, installed into a directory of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== CUDA programs compiled on the CPU (NVRTC + ptxas 12.9, sm_90a and sm_80)"
dir="${CUDA_CI_DIR:-${TMPDIR:-/tmp}/ragged-sdpa-cuda-ci}"
nvrtc="$dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
ptxas="$dir/nvidia/cuda_nvcc/bin/ptxas"
if [ ! -f "$nvrtc" ] || [ ! -x "$ptxas" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
    'nvidia-cuda-nvrtc-cu12==12.9.86' 'nvidia-cuda-nvcc-cu12==12.9.86'
fi
python3 kernels/cuda/ci/compile_check.py --nvrtc "$nvrtc" --ptxas "$ptxas" --jobs "$(nproc)"
