#!/usr/bin/env bash
# One device round for the CUDA backward's direct-launch harness: bwd_dev.py (correctness vs float64
# autograd, timing vs FA2 varlen backward, old and new kernels interleaved), then compute-sanitizer
# memcheck and racecheck on its tiny cases. The sanitizer runs compile with the harness's options, so
# they load cupy's cached module instead of compiling. The plugin's backward tests (both execute
# modes, under the sanitizers too) are bench/gpu/verify_build.sh's.
# Every log goes into one tar, "$OUT/bwd-logs.tar.gz".
# Usage (on the GPU machine, repo root):
#   OUT=dir [BWD_ARGS="--hopper-only"] [T_DEV=95 T_MEM=28 T_RACE=35] bash bench/lab/run_bwd_device.sh
set -o pipefail
OUT=${OUT:-/tmp/bwd_out}
logs=$(mktemp -d)
export PYTHONUNBUFFERED=1
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$logs/smi.txt" 2>&1
step() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  echo "== $name"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  echo "rc=$? ($((SECONDS - t0)) s)"
  # Re-packed after every step, so a round cut short still returns the logs it has.
  mkdir -p "$OUT" && tar -czf "$OUT/bwd-logs.tar.gz" -C "$logs" .
}
step bwd_dev "${T_DEV:-95}" python3 bench/lab/bwd_dev.py ${BWD_ARGS:-} --seed "${SEED:-21}"
grep -E "NVRTC|^FAIL|correctness:|^d(64|128) causal|interleaved|Error|Traceback" "$logs/bwd_dev.log" | cut -c1-400 | head -36
san="python3 bench/lab/bwd_dev.py --tiny --wg-only --tiny-dims ${TINY_DIMS:-64}"
step memcheck "${T_MEM:-28}" compute-sanitizer --tool memcheck --error-exitcode 9 $san --seed 5
grep -E "^PASS|^FAIL|ERROR SUMMARY|correctness" "$logs/memcheck.log" | tail -n 6
step racecheck "${T_RACE:-35}" compute-sanitizer --tool racecheck --error-exitcode 9 $san --seed 6
grep -E "^FAIL|RACECHECK SUMMARY|hazard|correctness" "$logs/racecheck.log" | tail -n 6
mkdir -p "$OUT" && tar -czf "$OUT/bwd-logs.tar.gz" -C "$logs" . && echo "logs: $OUT/bwd-logs.tar.gz"
