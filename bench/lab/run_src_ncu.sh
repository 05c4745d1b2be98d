#!/usr/bin/env bash
# Nsight Compute's source view (per SASS instruction: sampled warp states and stall reasons) of our
# CUDA engine's forward kernel on one benchmark problem, through the plugin's C ABI: the question
# run_peer_ncu.sh's counters leave open, which instructions carry a stall reason (e.g. whether
# d192/128's long-scoreboard stalls are mbarrier load waits or the consumers' item decode;
# bench/DECISIONS.md).
# plugin_bench.py --calls-only 2 --only-ours calls the plugin twice (nothing timed); the second
# forward launch is profiled with the SourceCounters and WarpStateStats sections, the report's source
# page is exported as CSV and fmha_ncu_src.py reduces it.
#
#   here:            bash bench/gpu/run_plugin_bench.sh --prepare
#   GPU machine:     OUT=DIR bash bench/lab/run_src_ncu.sh [PROBLEM]     (carry .carry/bench)
# PROBLEM defaults to ragged-mix_d192v128_full; NCU_TIMEOUT (default 300 s).
set -o pipefail
CARRY=.carry/bench
SO=libhipdnn_provider_ragged_sdpa.so
OUT=${OUT:-/tmp/src_ncu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
problem=${1:-ragged-mix_d192v128_full}
timeout "${NCU_TIMEOUT:-300}" ncu --clock-control none --section SourceCounters --section WarpStateStats \
    -k 'regex:ragged_fmha_fwd_' --launch-skip 1 --launch-count 1 -f -o "$OUT/src" \
    python3 bench/gpu/plugin_bench.py --plugin "$CARRY/$SO" --graphs "$CARRY/graphs" --calls-only 2 \
    --only-ours --problems "$problem" > "$OUT/src_ncu.log" 2>&1
rc=$?
echo "ncu rc=$rc"
tail -n 5 "$OUT/src_ncu.log"
[ -f "$OUT/src.ncu-rep" ] || exit "$((rc == 0 ? 1 : rc))"
ncu --import "$OUT/src.ncu-rep" --page source --csv --print-source sass > "$OUT/src.csv" 2> "$OUT/src_import.err" ||
    { echo "ncu --import failed:"; tail -n 5 "$OUT/src_import.err"; exit 1; }
python3 bench/lab/fmha_ncu_src.py "$OUT/src.csv" --top 30
exit $rc
