#!/usr/bin/env bash
# Nsight Compute on the forward entry points of the ws study (fmha_ncu.py launches each twice; the
# second launch is profiled). Usage: run_ws_ncu.sh OUTFILE TIMEOUT_S ENGINE... (sm90 ws wst wsp fa2)
# The metric list is ncu_metrics.sh's.
set -o pipefail
out=$1; lim=$2; shift 2
here=$(dirname "$0")
# shellcheck source=bench/gpu/ncu_metrics.sh
. "$here/ncu_metrics.sh"
metrics=$(ncu_metrics "$(dirname "$out")/ncu_query_metrics.txt")
n=0; regex=""
for e in "$@"; do
    n=$((n + 1))
    case $e in fa2) r="flash_fwd";; *) r="ragged_fmha_fwd_${e}_bf16_d${D:-128}\$";; esac
    regex="${regex:+$regex|}$r"
done
timeout "$lim" ncu --clock-control none --metrics "$metrics" --section WarpStateStats -k "regex:$regex" \
    --launch-skip "$n" --launch-count "$n" --page raw --csv \
    python3 "$here/fmha_ncu.py" --d "${D:-128}" --engines "$@" > "$out" 2> "${out%.*}.err"
rc=$?
echo "ncu $* rc=$rc"
exit $rc
