#!/usr/bin/env bash
# One device call that checks and measures a plugin build: what every round of sessions 11 and 12 ran
# by hand, in one place so that a round cannot skip a step or lose its logs.
#
#   here:   bash bench/gpu/verify_build.sh --prepare && bash bench/gpu/run_plugin_bench.sh --prepare
#           (then trim .carry/bench/graphs/problems.json to the problems to time)
#   device: OUT=... bash bench/gpu/plugin_round.sh        with carry [".carry/verify", ".carry/bench", ".whl"]
#
# STEPS (default all, in this order) picks from:
#   check     fmha_dev.py --check-only --no-extra: the plugin's kernel set on the full case suite
#   sanitize  the sanitizer case (zero-length batches, padding, GQA, causal, a window) under
#             compute-sanitizer memcheck and racecheck
#   repeat    fmha_repeat.py: every plugin bf16 forward 10 times on the ragged mix (causal both
#             ways, non-causal), each output bit-identical to the first call's or the step fails (a
#             race the sanitizer and the small cases pass shows here: NOTES.md session 17); then
#             400 calls each enqueued 50 at a time with alternating offsets
#   verify    verify_build.sh: plugin GPU tests, conformance, the shim, memcheck (10 steps)
#   bench     run_plugin_bench.sh: the C-ABI benchmark against the peers, host_time HOST_TIME_RUNS times
#   profile   host_time --profile: where ExecuteOpGraph's host time goes
#   timeline  plugin_timeline.py: the kernels of back-to-back executes on the device's clock (the
#             pre-pass, the gap before each forward's work, FlashInfer's gap between calls), once
#             per setting in TIMELINE_SETTINGS: "all" (the plugin's defaults), "prepass"
#             (RAGGED_SDPA_CUDA_FUSED_LIST=0), or a RAGGED_SDPA_CUDA_PDL value ("forward", "0");
#             default all, prepass, forward and 0, twice in turn; every call's O
#             bit-identical to a call made alone, or the step fails
# CHECK_TIMEOUT (default 240 s) bounds the check step.
# BENCH_TIMEOUT, FLASHINFER_BUDGET_S and HOST_TIME_RUNS pass through to run_plugin_bench.sh: within one
# 600 s device call, the six steps of then on the four ragged-mix problems took ≈ 270 s in session 12 with
# BENCH_TIMEOUT=300 FLASHINFER_BUDGET_S=230 HOST_TIME_RUNS=3.
# Logs land in $OUT/<step>.log (the bench's and verify's own files in $OUT/bench, $OUT/verify), packed
# at the end into $OUT/logs.tar.gz; each step's summary lines are printed, with the seconds it took.
# The exit status is that of the first step that failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/plugin_round}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
STEPS=${STEPS:-check sanitize repeat verify bench profile}
start=$(date +%s)
status=0
note() { echo "[$(($(date +%s) - start)) s] $*"; }
record() { # step name, exit status of its command
    [ "$2" -eq 0 ] || { echo "  $1 exited with status $2"; [ "$status" -ne 0 ] || status=$2; }
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv | tee "$OUT/smi.txt"
for step in $STEPS; do
    note "$step"
    case "$step" in
    check)
        timeout "${CHECK_TIMEOUT:-240}" python3 bench/gpu/fmha_dev.py --check-only --no-extra >"$OUT/check.log" 2>&1
        record check $?
        grep -E "^correctness:|FAIL" "$OUT/check.log" | tail -5 ;;
    sanitize)
        for tool in memcheck racecheck; do
            timeout 180 compute-sanitizer --tool "$tool" --error-exitcode 9 python3 bench/gpu/fmha_sanitize.py \
                >"$OUT/$tool.log" 2>&1
            record "$tool" $?
            grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$tool.log" | tail -1
        done ;;
    repeat)
        timeout 240 python3 bench/gpu/fmha_repeat.py >"$OUT/repeat.log" 2>&1
        record repeat $?
        timeout 240 python3 bench/gpu/fmha_repeat.py --alternate --back-to-back 50 --reps 400 \
            >>"$OUT/repeat.log" 2>&1
        record repeat $?
        grep -E "differ|^repeatability" "$OUT/repeat.log" | tail -12 ;;
    verify)
        OUT="$OUT/verify" timeout 300 bash bench/gpu/verify_build.sh >"$OUT/verify.log" 2>&1
        record verify $?
        grep -E "^(PASS|FAIL) |passed, .* failed$" "$OUT/verify.log" | tail -12 ;;
    bench)
        OUT="$OUT/bench" bash bench/gpu/run_plugin_bench.sh >"$OUT/bench.log" 2>&1
        record bench $?
        grep "above its own" "$OUT/bench/host_time.txt"
        grep -E "^\| ragged|^target" "$OUT/bench/log.txt" ;;
    profile)
        gcc -O2 -std=c11 -Iplugin/include -Iplugin/tests/c bench/gpu/host_time.c -o /tmp/host_time -ldl &&
            /tmp/host_time .carry/bench/libhipdnn_provider_ragged_sdpa.so .carry/bench/tiny tiny_d64_full \
                --profile "$OUT/samples.txt" >"$OUT/profile.log" 2>&1
        record profile $?
        tail -6 "$OUT/profile.log"; head -12 "$OUT/samples.txt" 2>/dev/null ;;
    timeline)
        # shellcheck source=bench/gpu/wheels.sh
        . bench/gpu/wheels.sh
        install_wheels >/dev/null
        for setting in ${TIMELINE_SETTINGS:-all prepass forward 0 all prepass forward 0}; do
            # "all" leaves the variables unset: the plugin's default; "prepass" keeps the pre-pass
            # launch (RAGGED_SDPA_CUDA_FUSED_LIST=0), the others set RAGGED_SDPA_CUDA_PDL.
            case "$setting" in
            all) pdl=() ;;
            prepass) pdl=("RAGGED_SDPA_CUDA_FUSED_LIST=0") ;;
            *) pdl=("RAGGED_SDPA_CUDA_PDL=$setting") ;;
            esac
            fi_arg=$([ "$setting" = all ] || [ "$setting" = prepass ] && echo --flashinfer)
            env "${pdl[@]}" timeout 180 python3 bench/gpu/plugin_timeline.py \
                --plugin .carry/bench/libhipdnn_provider_ragged_sdpa.so --graphs .carry/bench/graphs \
                --handover-calls 100 ${fi_arg} >>"$OUT/timeline.log" 2>&1
            record timeline $?
        done
        grep -E "^RAGGED|ours|FlashInfer|DIFFER|Error" "$OUT/timeline.log" ;;
    *)
        echo "unknown step $step (known: check sanitize repeat verify bench profile timeline)"
        record "$step" 2 ;;
    esac
done
note "done (status $status)"
# The device returns at most 8 files from $OUT: the logs travel as one archive, FlashInfer's
# compiled modules (run_plugin_bench.sh) beside it.
(cd "$OUT" && find . -type f ! -name flashinfer_aot.tar.xz ! -name logs.tar.gz -print0 |
    tar -czf logs.tar.gz --null -T - --remove-files) && find "$OUT" -mindepth 1 -type d -empty -delete
exit "$status"
