#!/usr/bin/env bash
# One device round for the CUDA backward, inside 4 minutes: the cupy harness (correctness vs
# float64 autograd, timing vs FA2 varlen backward), and, when ./bin holds release builds (see
# bench/gpu/NOTES-backward.md), the plugin's gpu_backward test in both execute modes and the
# conformance backward suite with --cuda; then compute-sanitizer memcheck and racecheck on small
# cases. Every log goes into one tar, "$OUT/bwd-logs.tar.gz".
# Usage (on the GPU machine, from a directory holding kernels/cuda, bench/gpu and bin/):
#   OUT=dir bash bench/gpu/run_bwd_device.sh
set -o pipefail
OUT=${OUT:-/tmp/bwd_out}
logs=$(mktemp -d)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$logs/smi.txt" 2>&1
step() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  echo "rc=$?"
}
step bwd_dev 100 python3 bench/gpu/bwd_dev.py
grep -E "^FAIL|correctness:|^d(64|128) causal|parts ms|Error|Traceback" "$logs/bwd_dev.log" | head -40
if [ -x bin/gpu_backward ]; then
  export HIPDNN_RAGGED_SDPA_HOST_ENGINE=1
  step gpu_backward 30 ./bin/gpu_backward --test-threads=1
  grep -E "^test |panicked|test result" "$logs/gpu_backward.log" | head -12
  step gpu_backward_validate 20 env HIPDNN_RAGGED_SDPA_VALIDATE=1 ./bin/gpu_backward --test-threads=1
  grep -E "panicked|test result" "$logs/gpu_backward_validate.log" | head -6
  step conformance_backward 20 ./bin/ragged-conformance --suite backward --cuda ./bin/libhipdnn_provider_ragged_sdpa.so
  grep -vE "^PASS|^ +uid" "$logs/conformance_backward.log" | tail -12
  unset HIPDNN_RAGGED_SDPA_HOST_ENGINE
fi
step memcheck 25 compute-sanitizer --tool memcheck --error-exitcode 9 python3 bench/gpu/bwd_dev.py --tiny --seed 5
tail -n 4 "$logs/memcheck.log"
step racecheck 35 compute-sanitizer --tool racecheck --error-exitcode 9 python3 bench/gpu/bwd_dev.py --tiny --seed 6
tail -n 4 "$logs/racecheck.log"
mkdir -p "$OUT" && tar -czf "$OUT/bwd-logs.tar.gz" -C "$logs" . && echo "logs: $OUT/bwd-logs.tar.gz"
