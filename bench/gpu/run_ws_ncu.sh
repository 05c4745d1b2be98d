#!/usr/bin/env bash
# Nsight Compute on the forward entry points of the ws study (fmha_ncu.py launches each twice; the
# second launch is profiled). Usage: run_ws_ncu.sh OUTFILE TIMEOUT_S ENGINE... (sm90 ws wst wsp fa2)
# The metric list is filtered against `ncu --query-metrics` (an unknown name would abort ncu).
set -o pipefail
out=$1; lim=$2; shift 2
here=$(dirname "$0")
want="gpu__time_duration.sum sm__throughput.avg.pct_of_peak_sustained_elapsed
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
sm__inst_executed_pipe_tensor_op_gmma.sum
smsp__issue_active.avg.pct_of_peak_sustained_active sm__warps_active.avg.pct_of_peak_sustained_active
smsp__inst_executed.sum sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
lts__t_sectors_srcunit_tex_op_read.sum lts__throughput.avg.pct_of_peak_sustained_elapsed
dram__bytes_read.sum sm__cycles_elapsed.avg.per_second"
query="$(dirname "$out")/ncu_query_metrics.txt"
if [ ! -s "$query" ]; then
    timeout 25 ncu --query-metrics > "$query" 2>&1
fi
metrics=""
for m in $want; do
    base=${m%%.*}
    if grep -qw "$base" "$query"; then metrics="$metrics,$m"; else echo "ncu: no metric $base" >&2; fi
done
metrics=${metrics#,}
[ -n "$metrics" ] || metrics="gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
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
