#!/usr/bin/env bash
# CI stage: compiles the CUDA programs (kernels/cuda-fmha/cuda) as the plugin does, with NVRTC to CUBIN for
# sm_90a and sm_80, on a machine without a GPU (kernels/cuda-fmha/cuda/ci/compile_check.py says what fails).
# The sources and NVRTC options are ragged-engine-cuda's own (its cuda_programs example writes them);
# NVRTC comes from NVIDIA's PyPI wheel, installed into a directory of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== CUDA programs compiled on the CPU (NVRTC 12.9 to CUBIN, sm_90a and sm_80)"
dir="${CUDA_CI_DIR:-${TMPDIR:-/tmp}/ragged-sdpa-cuda-ci}"
nvrtc="$dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
if [ ! -f "$nvrtc" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
    'nvidia-cuda-nvrtc-cu12==12.9.86'
fi
programs="$dir/programs"
cargo run --quiet -p ragged-engine-cuda --example cuda_programs -- "$programs" sm_90a sm_80
python3 kernels/cuda-fmha/cuda/ci/compile_check.py --nvrtc "$nvrtc" --programs "$programs" --jobs "$(nproc)"
