#!/usr/bin/env bash
# Times the CPU reference SDPA and PyTorch's CPU SDPA on the same problems in one run and prints
# our/torch throughput ratios, forward and backward. Needs a Python with PyTorch and NumPy:
# `python3` by default, or the interpreter TORCH_PYTHON names, e.g. a virtual environment outside
# the repository (`python3 -m venv ~/venvs/torch && ~/venvs/torch/bin/pip install torch numpy`,
# then TORCH_PYTHON=~/venvs/torch/bin/python).. Not part of CI.
# Knobs: LENS (comma-separated sequence lengths), MIN_TIME (seconds per measurement), DTYPES
# (space-separated, from f32 f16 bf16), DIMS, MODES (forward backward), THREADS (space-separated
# thread counts for both sides; 0 = each library's default), ROUNDS (alternating measurements of
# each side per row; the best of each side is reported, because on a shared machine the best run
# is the one least disturbed by other work). RAGGED_SDPA_CPU_ISA=avx2 or baseline caps our side's
# instruction set, to measure the AVX2 or baseline machine class on a CPU with AVX-512; TORCH_ISA=avx2
# caps PyTorch's the same way (ATen kernels, oneDNN and MKL), so that both sides run as on an
# AVX2-only CPU.
# Columns: wall GFLOP/s (best call) and cpu GFLOP/s (FLOPs over the mean CPU time per call, all
# threads: with one thread on a loaded machine this measures the work rather than the load),
# their ratios, and the 1-minute load average when the row finished. Backward FLOPs are 2.5 x the
# forward's (see benches/cpu_sdpa.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${TORCH_PYTHON:-python3}
if ! "$python" -c 'import torch, numpy' 2>/dev/null; then
  echo "bench/cpu/run.sh: $python cannot import torch and numpy; install them or set TORCH_PYTHON" >&2
  exit 1
fi
lens=${LENS:-64,192,320,448,576,704,832,1024}
min_time=${MIN_TIME:-3}
dtypes=${DTYPES:-f32}
dims=${DIMS:-64 128}
modes=${MODES:-forward backward}
threads_list=${THREADS:-0 1}
rounds=${ROUNDS:-3}
torch_env=()
case "${TORCH_ISA:-}" in
  "") ;;
  avx2) torch_env=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2) ;;
  *) echo "bench/cpu/run.sh: TORCH_ISA=$TORCH_ISA: only avx2 is known" >&2; exit 1 ;;
esac

# The bench binary itself, so that every measurement skips cargo's freshness check.
ours_bin=$(cargo bench -p ragged-reference --bench cpu_sdpa --no-run 2>&1 |
  sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
word() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a ? b : a) }'; }

echo "commit $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), $("$python" -c 'import torch; print("torch", torch.__version__)')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p')), $(nproc) cores, flags:$(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512vl|avx512_bf16|avx512_fp16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "ours: RAGGED_SDPA_CPU_ISA=${RAGGED_SDPA_CPU_ISA:-unset}, torch: TORCH_ISA=${TORCH_ISA:-unset} (caps the instruction sets; the isa columns say what each side ran)"
printf '%-8s %-4s %-6s %-6s %-7s %8s %8s %6s %8s %8s %6s %5s %-9s %-9s\n' \
  mode D causal dtype threads ours torch ratio ours_cpu torch_cpu ratio load ours_isa torch_isa
for mode in $modes; do
  for dtype in $dtypes; do
    for dim in $dims; do
      for causal in "" --causal; do
        for threads in $threads_list; do
          args=(--lens "$lens" --heads 8 --dim "$dim" --dtype "$dtype" --min-time "$min_time" $causal)
          [ "$mode" = backward ] && args+=(--backward)
          env_threads=() torch_threads=()
          if [ "$threads" != 0 ]; then
            env_threads=(RAYON_NUM_THREADS="$threads")
            torch_threads=(--threads "$threads")
          fi
          ours=0 torch=0 ours_cpu=0 torch_cpu=0 ours_isa=? torch_isa=?
          for _ in $(seq "$rounds"); do
            o=$(env "${env_threads[@]}" "$ours_bin" "${args[@]}")
            t=$(env "${torch_env[@]}" "$python" bench/cpu/torch_sdpa_cpu.py "${args[@]}" "${torch_threads[@]}")
            ours=$(max "$ours" "$(field gflops <<<"$o")")
            torch=$(max "$torch" "$(field gflops <<<"$t")")
            ours_cpu=$(max "$ours_cpu" "$(field cpu_gflops <<<"$o")")
            torch_cpu=$(max "$torch_cpu" "$(field cpu_gflops <<<"$t")")
            ours_isa=$(word isa <<<"$o") torch_isa=$(word isa <<<"$t")
          done
          ratio=$(awk -v a="$ours" -v b="$torch" 'BEGIN { printf "%.2f", a / b }')
          ratio_cpu=$(awk -v a="$ours_cpu" -v b="$torch_cpu" 'BEGIN { printf "%.2f", a / b }')
          printf '%-8s %-4s %-6s %-6s %-7s %8s %8s %6s %8s %8s %6s %5s %-9s %-9s\n' "$mode" "$dim" \
            "${causal:+yes}" "$dtype" "${threads/#0/all}" "$ours" "$torch" "$ratio" \
            "$ours_cpu" "$torch_cpu" "$ratio_cpu" "$(cut -d' ' -f1 /proc/loadavg)" "$ours_isa" "$torch_isa"
        done
      done
    done
  done
done
