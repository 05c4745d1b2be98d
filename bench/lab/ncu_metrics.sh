# Sourced by the ncu scripts under bench/lab/: ncu_metrics QUERY_FILE prints the comma-separated
# metric list they share, filtered against `ncu --query-metrics` (cached in QUERY_FILE), since a name
# this ncu does not know aborts the whole profile.
ncu_metrics() {
    local query=$1 want m base metrics=""
    want="gpu__time_duration.sum sm__throughput.avg.pct_of_peak_sustained_elapsed
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
sm__inst_executed_pipe_tensor_op_gmma.sum
smsp__issue_active.avg.pct_of_peak_sustained_active sm__warps_active.avg.pct_of_peak_sustained_active
smsp__inst_executed.sum sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
lts__t_sectors_srcunit_tex_op_read.sum lts__throughput.avg.pct_of_peak_sustained_elapsed
dram__bytes_read.sum sm__cycles_elapsed.avg.per_second"
    if [ ! -s "$query" ]; then
        timeout 25 ncu --query-metrics > "$query" 2>&1
    fi
    for m in $want; do
        base=${m%%.*}
        if grep -qw "$base" "$query"; then metrics="$metrics,$m"; else echo "ncu: no metric $base" >&2; fi
    done
    metrics=${metrics#,}
    echo "${metrics:-gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active}"
}
