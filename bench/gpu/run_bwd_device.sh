#!/usr/bin/env bash
# One device round for the backward kernels: correctness + timing vs FA2 varlen backward, then
# compute-sanitizer memcheck and racecheck on a few small cases. Stays inside 4 minutes.
# Usage (on the GPU machine, repo root): OUT=dir bash bench/gpu/run_bwd_device.sh
set -o pipefail
OUT=${OUT:-/tmp/bwd_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/smi.txt" 2>&1
echo "== bwd_dev.py (correctness + benchmark) =="
timeout 150 python3 bench/gpu/bwd_dev.py > "$OUT/bwd_dev.log" 2>&1
echo "rc=$?"
grep -E "^FAIL|correctness:|^d(64|128) causal|ours/FA2|Error|error|Traceback" "$OUT/bwd_dev.log" | grep -v "^PASS" | head -60
echo "== compute-sanitizer memcheck (quick cases) =="
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 bench/gpu/bwd_dev.py --quick --seed 5 \
    > "$OUT/memcheck.log" 2>&1
echo "rc=$?"; tail -n 4 "$OUT/memcheck.log"
echo "== compute-sanitizer racecheck (quick cases) =="
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 python3 bench/gpu/bwd_dev.py --quick --seed 6 \
    > "$OUT/racecheck.log" 2>&1
echo "rc=$?"; tail -n 4 "$OUT/racecheck.log"
