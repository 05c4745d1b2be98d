#!/usr/bin/env bash
# Paged decode and chunked prefill through the plugin's C ABI vs FlashInfer's paged decode and
# prefill wrappers and cuDNN's paged SDPA (bench/gpu/serving_bench.py), in one run.
#
# Here (a machine with cargo; no GPU needed), from the repository root:
#   bash bench/gpu/run_serving_bench.sh --prepare
# builds the plugin in release, writes the decode graphs (plugin/examples/emit_serving_graphs.rs),
# runs the ctypes self-check against the host engine on the tiny graph and copies the .so and the
# graphs to .carry/serving/ (git-ignored). FlashInfer's wheels go to .whl/ as for
# run_plugin_bench.sh (flashinfer-python==0.6.0, apache-tvm-ffi==0.1.15.post2,
# torch-c-dlpack-ext==0.1.5), beside the cuDNN frontend's (nvidia-cudnn-frontend).
#
# On the GPU machine, with `.carry/serving` and `.whl` carried:
#   bash bench/gpu/run_serving_bench.sh
# writes smi.txt and serving.txt to $OUT; the table is the last thing printed. ARGS go to
# serving_bench.py (e.g. --peak-tbps 3.35).
set -o pipefail
CARRY=.carry/serving
SO=libhipdnn_provider_ragged_sdpa.so

if [ "${1:-}" = "--prepare" ]; then
    set -e
    target=${CARGO_TARGET_DIR:-target}
    cargo build -p ragged-plugin --release
    cargo build -p ragged-plugin --release --example emit_serving_graphs
    rm -rf "$CARRY"
    mkdir -p "$CARRY"
    "$target/release/examples/emit_serving_graphs" "$CARRY/graphs"
    "$target/release/examples/emit_serving_graphs" "$CARRY/tiny" --tiny
    objcopy --strip-debug "$target/release/$SO" "$CARRY/$SO"
    python3 bench/gpu/serving_bench.py --plugin "$CARRY/$SO" --graphs "$CARRY/tiny" --self-check
    du -sh "$CARRY" .whl 2>/dev/null || true
    exit 0
fi

OUT=${OUT:-/tmp/serving_bench_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
    | tee "$OUT/smi.txt"
# shellcheck source=bench/gpu/wheels.sh
. bench/gpu/wheels.sh
install_wheels
timeout "${BENCH_TIMEOUT:-540}" python3 bench/gpu/serving_bench.py --plugin "$CARRY/$SO" --graphs "$CARRY/graphs" \
    "$@" 2>&1 | tee "$OUT/serving.txt"
status=$?
save_flashinfer_modules "$OUT"
exit $status
