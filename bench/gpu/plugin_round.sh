#!/usr/bin/env bash
# One device call that checks and measures a plugin build (bench/README.md): the one device check
# (verify_build.sh), the benchmark, the host-time profile and the timeline, logs kept together.
#
#   here:   bash bench/gpu/verify_build.sh --prepare && bash bench/gpu/run_plugin_bench.sh --prepare
#           (then trim .carry/bench/graphs/problems.json to the problems to time)
#   device: OUT=... bash bench/gpu/plugin_round.sh        with carry [".carry/verify", ".carry/bench", ".whl"]
#
# STEPS (default all, in this order) picks from:
#   check     bench/lab/fmha_dev.py --check-only --no-extra: the forward program compiled with NVRTC
#             and its entry points launched directly on the full case suite, the portable sm_80
#             entries included (the plugin runs those only on other cards)
#   verify    verify_build.sh, the one device check: the plugin's GPU tests (float64 oracle, host
#             reference, every head dim, the ragged-mix repeat check), conformance, the shim,
#             memcheck and racecheck (15 steps)
#   bench     run_plugin_bench.sh: the C-ABI benchmark against the peers, host_time HOST_TIME_RUNS times
#   profile   host_time --profile: where ExecuteOpGraph's host time goes
#   timeline  plugin_timeline.py: the kernels of back-to-back executes on the device's clock (the
#             pre-pass, the gap before each forward's work, FlashInfer's gap between calls), once
#             per setting in TIMELINE_SETTINGS: "all" (the plugin's defaults), "prepass"
#             (RAGGED_SDPA_CUDA_FUSED_LIST=0), or a RAGGED_SDPA_CUDA_PDL value ("forward", "0");
#             default all, prepass, forward and 0, twice in turn; every call's O
#             bit-identical to a call made alone, or the step fails
# CHECK_TIMEOUT (default 240 s) bounds the check step.
# BENCH_TIMEOUT, FLASHINFER_BUDGET_S and HOST_TIME_RUNS pass through to run_plugin_bench.sh; one
# device call is at most 600 s, so trim problems.json and the budgets to fit.
# Logs land in $OUT/<step>.log (the bench's and verify's own files in $OUT/bench, $OUT/verify), packed
# at the end into $OUT/logs.tar.gz; each step's summary lines are printed, with the seconds it took.
# The exit status is that of the first step that failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/plugin_round}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
STEPS=${STEPS:-check verify bench profile}
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
        timeout "${CHECK_TIMEOUT:-240}" python3 bench/lab/fmha_dev.py --check-only --no-extra >"$OUT/check.log" 2>&1
        record check $?
        grep -E "^correctness:|FAIL" "$OUT/check.log" | tail -5 ;;
    verify)
        OUT="$OUT/verify" timeout 420 bash bench/gpu/verify_build.sh >"$OUT/verify.log" 2>&1
        record verify $?
        grep -E "^(PASS|FAIL) |passed, .* failed$" "$OUT/verify.log" | tail -16 ;;
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
        echo "unknown step $step (known: check verify bench profile timeline)"
        record "$step" 2 ;;
    esac
done
note "done (status $status)"
# The device returns at most 8 files from $OUT: the logs travel as one archive, FlashInfer's
# compiled modules (run_plugin_bench.sh) beside it.
(cd "$OUT" && find . -type f ! -name flashinfer_aot.tar.xz ! -name logs.tar.gz -print0 |
    tar -czf logs.tar.gz --null -T - --remove-files) && find "$OUT" -mindepth 1 -type d -empty -delete
exit "$status"
