#!/usr/bin/env bash
# Nsight Compute on our CUDA engine's forward kernel and the peers' kernels side by side, on the same
# packed buffers: plugin_bench.py --calls-only 2 calls every engine twice (nothing timed) and ncu
# profiles the attention kernels of those calls (ours: ragged_fmha_fwd_*; FlashInfer fa3, FA2 and
# cuDNN: the names matching flash, sdpa, Prefill or device_kernel; the first three alone miss
# FlashInfer's), with ncu_metrics.sh's metrics and the warp-state section.
#
#   here:            bash bench/gpu/run_plugin_bench.sh --prepare
#   GPU machine:     OUT=DIR bash bench/lab/run_peer_ncu.sh [--fp8] [PROBLEM...]   (carry .carry/bench, .whl)
# writes DIR/peer_ncu.csv (ncu --page raw --csv) and prints fmha_ncu.py's summary of it.
# PROBLEM defaults to ragged-mix_d128_full ragged-mix_d128_causal; NCU_TIMEOUT (default 300 s).
# --fp8: the FP8 (e4m3) forward through plugin_bench_fp8.py --calls-only 2 instead (ours, its V
# transposition pre-pass ragged_fmha_fp8_vt, cuDNN's FP8 SDPA and FA3's FP8 kernel); PROBLEM then
# defaults to fp8_ragged-mix_d128_full fp8_ragged-mix_d128_causal (problems_fp8.json names).
# --bwd: the backward through plugin_bench_bwd.py --calls-only 1 (ours: the pre-pass, the Di pass, the
# fused or paired kernels and the dQ convert pass, on both engines; FA2's flash_bwd_* kernels and
# cuDNN's sdpa backward); PROBLEM defaults to ragged-mix_d64_full ragged-mix_d64_causal.
set -o pipefail
CARRY=.carry/bench
SO=libhipdnn_provider_ragged_sdpa.so
OUT=${OUT:-/tmp/peer_ncu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# shellcheck source=bench/gpu/wheels.sh
. bench/gpu/wheels.sh
install_wheels
# shellcheck source=bench/lab/ncu_metrics.sh
. bench/lab/ncu_metrics.sh
metrics=$(ncu_metrics "$OUT/ncu_query_metrics.txt")
bench=bench/gpu/plugin_bench.py
kernels='ragged_fmha_fwd|flash|sdpa|Prefill|prefill|device_kernel'
defaults=(ragged-mix_d128_full ragged-mix_d128_causal)
calls=2
if [ "${1:-}" = "--fp8" ]; then
  shift
  bench=bench/gpu/plugin_bench_fp8.py
  kernels="$kernels|ragged_fmha_fp8_vt"
  defaults=(fp8_ragged-mix_d128_full fp8_ragged-mix_d128_causal)
elif [ "${1:-}" = "--bwd" ]; then
  shift
  bench=bench/gpu/plugin_bench_bwd.py
  kernels='ragged_fmha_bwd|ragged_fmha_prepass|flash_bwd|sdpa|bprop'
  defaults=(ragged-mix_d64_full ragged-mix_d64_causal)
  calls=1
fi
problems=("$@")
[ ${#problems[@]} -gt 0 ] || problems=("${defaults[@]}")
# The forward benchmarks take problem names, the backward's a regex over them.
if [ "$bench" = bench/gpu/plugin_bench_bwd.py ]; then
  select=(--only "^($(IFS='|'; echo "${problems[*]}"))\$")
else
  select=(--problems "${problems[@]}")
fi
timeout "${NCU_TIMEOUT:-300}" ncu --clock-control none --metrics "$metrics" --section WarpStateStats \
    -k "regex:$kernels" --page raw --csv \
    python3 "$bench" --plugin "$CARRY/$SO" --graphs "$CARRY/graphs" --calls-only "$calls" \
    "${select[@]}" > "$OUT/peer_ncu.csv" 2> "$OUT/peer_ncu.err"
rc=$?
echo "ncu rc=$rc"
grep -v '^"' "$OUT/peer_ncu.csv" | grep -v '^==PROF==' | tail -n 30
python3 bench/lab/fmha_ncu.py --summarize "$OUT/peer_ncu.csv"
exit $rc
