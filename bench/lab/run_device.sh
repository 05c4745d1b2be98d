#!/usr/bin/env bash
# One device call for the forward's direct-launch harness: the ptxas resource report and SASS counts of
# the forward program (nvcc, sm_90a), then fmha_dev.py's correctness suite and benchmark. The
# product's sanitizer runs are bench/gpu/verify_build.sh's.
# Usage (on the GPU machine, repo root): OUT=DIR bash bench/lab/run_device.sh [extra fmha_dev.py args]
set -o pipefail
OUT=${OUT:-/tmp/fmha_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/smi.txt"
echo "== ptxas resource report (nvcc, sm_90a) =="
nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v \
    -o "$OUT/ragged_fmha_fwd.cubin" kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu 2>&1 \
    | grep -E "error|warning|Compiling entry|registers|spill" | sed 's/ptxas info    : //' | tee "$OUT/ptxas.txt"
cuobjdump --dump-sass "$OUT/ragged_fmha_fwd.cubin" > /tmp/sass.txt 2>&1 && \
    echo "SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt) HMMA $(grep -c HMMA /tmp/sass.txt) LDL $(grep -c LDL /tmp/sass.txt) STL $(grep -c STL /tmp/sass.txt)"
echo "== correctness + benchmark =="
python3 bench/lab/fmha_dev.py "$@" 2>&1 | tee "$OUT/log.txt"
