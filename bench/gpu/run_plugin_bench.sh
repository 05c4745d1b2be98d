#!/usr/bin/env bash
# Ragged SDPA through the plugin's C ABI vs FlashAttention-3, FlashInfer fa3, cuDNN ragged, FA2 varlen
# and cuDNN dense, in one run.
#
# Here (a machine with cargo; no GPU needed), from the repository root:
#   bash bench/gpu/run_plugin_bench.sh --prepare
# builds the plugin in release, writes the benchmark graphs, runs the ctypes self-check against the
# host engine and copies the .so and graphs to .carry/bench/ (git-ignored). The peers' wheels go to
# .whl/ (see the device README): `python3 -m pip download --no-deps --only-binary=:all:
# --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 ... -d .whl
# nvidia-cudnn-frontend==1.32.0 flashinfer-python==0.6.0 apache-tvm-ffi==0.1.15.post2
# torch-c-dlpack-ext==0.1.5` (about 23 MB) and `python3 -m pip download --no-deps fa3-fwd==0.0.3 -d
# .whl` (FlashAttention-3's prebuilt hopper forward, 27.6 MB; abi3, so no platform flags).
#
# On the GPU machine, with `.carry/bench` and `.whl` carried:
#   bash bench/gpu/run_plugin_bench.sh
# writes smi.txt and log.txt to $OUT; the table is the last thing printed.
#   bash bench/gpu/run_plugin_bench.sh --backward [ARGS]       # then the backward benchmark too
#   bash bench/gpu/run_plugin_bench.sh --backward-only [ARGS]  # the backward benchmark alone
#   bash bench/gpu/run_plugin_bench.sh --fp8 [ARGS]            # the FP8 forward alone (log_fp8.txt:
#       plugin_bench_fp8.py, ours vs cuDNN's FP8 SDPA and FA3's FP8 forward)
# The backward (plugin_bench_bwd.py: ours vs FA2 varlen and cuDNN ragged backward) writes
# log_bwd.txt; BWD_ARGS go to it alone (e.g. BWD_ARGS="--only ragged-mix_d128"), FWD_ARGS to the
# forward alone (e.g. FWD_ARGS=--only-ours), ARGS to both.
# BENCH_TIMEOUT (default 540 s) bounds each benchmark; BWD_TIMEOUT, if set, the backward's.
set -o pipefail
CARRY=.carry/bench
SO=libhipdnn_provider_ragged_sdpa.so

if [ "${1:-}" = "--prepare" ]; then
    set -e
    # The self-checks below drive the built plugin from Python over NumPy buffers.
    if ! python3 -c 'import numpy' 2>/dev/null; then
        echo "run_plugin_bench.sh --prepare: python3 cannot import numpy (pip install numpy)" >&2
        exit 1
    fi
    target=${CARGO_TARGET_DIR:-target}
    cargo build -p ragged-plugin --release
    cargo build -p ragged-plugin --release --example emit_bench_graphs
    rm -rf "$CARRY"
    mkdir -p "$CARRY"
    "$target/release/examples/emit_bench_graphs" "$CARRY/graphs"
    "$target/release/examples/emit_bench_graphs" "$CARRY/tiny" --tiny
    # Debug info is half the file and the carried tree is size-limited.
    objcopy --strip-debug "$target/release/$SO" "$CARRY/$SO"
    python3 bench/gpu/plugin_bench.py --plugin "$CARRY/$SO" --graphs "$CARRY/tiny" --self-check
    python3 bench/gpu/plugin_bench.py --plugin "$CARRY/$SO" --graphs "$CARRY/graphs" --self-check
    python3 bench/gpu/plugin_bench_bwd.py --plugin "$CARRY/$SO" --graphs "$CARRY/tiny" --self-check
    python3 bench/gpu/plugin_bench_bwd.py --plugin "$CARRY/$SO" --graphs "$CARRY/graphs" --self-check
    python3 bench/gpu/plugin_bench_fp8.py --plugin "$CARRY/$SO" --graphs "$CARRY/tiny" --self-check
    python3 bench/gpu/plugin_bench_fp8.py --plugin "$CARRY/$SO" --graphs "$CARRY/graphs" --self-check
    du -sh "$CARRY" .whl 2>/dev/null || true
    exit 0
fi

OUT=${OUT:-/tmp/plugin_bench_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
date -u | tee "$OUT/smi.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
    | tee -a "$OUT/smi.txt"
# shellcheck source=bench/gpu/wheels.sh
. bench/gpu/wheels.sh
install_wheels
MODE=forward
case "${1:-}" in
    --backward) MODE=both; shift ;;
    --backward-only) MODE=backward; shift ;;
    --fp8) MODE=fp8; shift ;;
esac
if [ "$MODE" = fp8 ]; then
    timeout "${BENCH_TIMEOUT:-540}" python3 bench/gpu/plugin_bench_fp8.py --plugin "$CARRY/$SO" \
        --graphs "$CARRY/graphs" "$@" 2>&1 | tee "$OUT/log_fp8.txt"
    exit "${PIPESTATUS[0]}"
fi
status=0
if [ "$MODE" != backward ]; then
    # Host time per ExecuteOpGraph on the CUDA engine, from C (issue 14 item 5), on a tiny problem
    # so that the device never holds the host back; HOST_TIME_RUNS separate processes (about a
    # second each), since the medians of one process move between processes more than within one.
    echo "== host time per call, from C" | tee "$OUT/host_time.txt"
    if gcc -O2 -std=c11 -Iplugin/include -Iplugin/tests/c bench/gpu/host_time.c -o /tmp/host_time -ldl; then
        for _ in $(seq "${HOST_TIME_RUNS:-5}"); do
            /tmp/host_time "$CARRY/$SO" "$CARRY/tiny" tiny_d64_full 2>&1 | tee -a "$OUT/host_time.txt"
        done
    fi
    # shellcheck disable=SC2086  # FWD_ARGS is a list of words
    timeout "${BENCH_TIMEOUT:-540}" python3 bench/gpu/plugin_bench.py --plugin "$CARRY/$SO" --graphs "$CARRY/graphs" \
        ${FWD_ARGS:-} "$@" 2>&1 | tee "$OUT/log.txt" || status=$?
    save_flashinfer_modules "$OUT"
fi
if [ "$MODE" != forward ]; then
    # shellcheck disable=SC2086  # BWD_ARGS is a list of words
    timeout "${BWD_TIMEOUT:-${BENCH_TIMEOUT:-540}}" python3 bench/gpu/plugin_bench_bwd.py --plugin "$CARRY/$SO" \
        --graphs "$CARRY/graphs" ${BWD_ARGS:-} "$@" 2>&1 | tee "$OUT/log_bwd.txt" || status=$?
fi
exit $status
