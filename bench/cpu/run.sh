#!/usr/bin/env bash
# Times the CPU reference SDPA and PyTorch's CPU SDPA on the same problems in one run and prints
# our/torch throughput ratios. Needs PyTorch in a virtual environment outside the repository:
#   python3 -m venv /work/venvs/torch && /work/venvs/torch/bin/pip install torch numpy
# (override the interpreter with TORCH_PYTHON). Not part of CI.
# Knobs: LENS (comma-separated sequence lengths), MIN_TIME (seconds per measurement, best time
# wins), DTYPES (space-separated, from f32 f16 bf16), ROUNDS (alternating measurements of each
# side per row; the best of each side is reported, because on a shared machine the best run is
# the one least disturbed by other work).
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${TORCH_PYTHON:-/work/venvs/torch/bin/python}
lens=${LENS:-64,192,320,448,576,704,832,1024}
min_time=${MIN_TIME:-3}
dtypes=${DTYPES:-f32}
rounds=${ROUNDS:-3}

cargo bench -q -p ragged-kernels --bench cpu_sdpa --no-run
gflops() { sed -n 's/.* gflops=\([0-9.]*\).*/\1/p'; }

printf '%-4s %-6s %-6s %10s %10s %8s\n' D causal dtype ours torch ratio
for dtype in $dtypes; do
  for dim in 64 128; do
    for causal in "" --causal; do
      args=(--lens "$lens" --heads 8 --dim "$dim" --dtype "$dtype" --min-time "$min_time" $causal)
      ours=0 torch=0
      for _ in $(seq "$rounds"); do
        o=$(cargo bench -q -p ragged-kernels --bench cpu_sdpa -- "${args[@]}" | gflops)
        t=$("$python" bench/cpu/torch_sdpa_cpu.py "${args[@]}" | gflops)
        ours=$(awk -v a="$ours" -v b="$o" 'BEGIN { print (b > a ? b : a) }')
        torch=$(awk -v a="$torch" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
      done
      ratio=$(awk -v a="$ours" -v b="$torch" 'BEGIN { printf "%.2f", a / b }')
      printf '%-4s %-6s %-6s %10s %10s %8s\n' "$dim" "${causal:+yes}" "$dtype" "$ours" "$torch" "$ratio"
    done
  done
done
