#!/usr/bin/env bash
# One device call: resource report, correctness + benchmark, compute-sanitizer memcheck.
# Usage (on the GPU machine, repo root): bash bench/gpu/run_device.sh [extra fmha_dev.py args]
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
echo "== compute-sanitizer memcheck =="
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 python3 bench/gpu/fmha_sanitize.py 2>&1 \
    | tail -n 15 | tee "$OUT/sanitizer.txt"
echo "== compute-sanitizer racecheck =="
timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 python3 bench/gpu/fmha_sanitize.py 2>&1 \
    | tail -n 15 | tee "$OUT/racecheck.txt"
echo "== correctness + benchmark =="
python3 bench/gpu/fmha_dev.py "$@" 2>&1 | tee "$OUT/log.txt"
echo "== ncu: device time of the pre-pass and forward on the small sanitizer case =="
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum python3 bench/gpu/fmha_sanitize.py 2>&1 \
    | grep -E "ragged_fmha|gpu__time_duration" | tee "$OUT/ncu.txt"
