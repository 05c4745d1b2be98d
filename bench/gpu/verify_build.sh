#!/usr/bin/env bash
# The one device check of a build, end to end through the plugin's C ABI (bench/README.md):
#   - the plugin's GPU tests (plugin/tests/gpu/, gpu_backward.rs): the CUDA forward and backward
#     against the host reference engine on device buffers and against a float64 oracle, padding
#     and unwritten positions bit for bit, every head dim, in the enqueue and the validating mode;
#     the FP8 (e4m3) forward against the host reference and a model of its arithmetic;
#     the forward's calls on the benchmark's ragged mix (bf16 and FP8) bit-identical over REPEATS calls
#     (RAGGED_SDPA_TEST_REPEATS, default 48 here), which shows races the small cases pass;
#   - the conformance suites against the plugin (numeric and backward with --cuda, every suite on
#     the host engine with the version-gating fixtures);
#   - hipdnn-shim running the example graph on the CUDA engine with --verify, and the backward
#     example on RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC against the shim's float64 oracle;
#   - compute-sanitizer memcheck and racecheck on the forward's and the backward's zero-length
#     cases (every head dim, padding, causal and a sliding window), on the FP8 forward's small
#     cases (fp8_d64_*, fp8_d128_*, fp8_d256_*) and on the paged kernels' small cases (zero
#     lengths and shared pages, a sliding window with sinks, an invalid page id);
#   - the serving (paged K/V, sinks) and FP8 conformance suites on the CUDA engine (the FP8 suite:
#     the CUDA engine's e4m3 forward where it accepts a case, DECLINED where it does not).
#
#   bash bench/gpu/verify_build.sh --prepare   # here: release build, binaries into .carry/verify/
#   bash bench/gpu/verify_build.sh             # on the GPU machine, with carry [".carry/verify"]
#
# Logs go to $OUT/<step>.log (default /tmp/verify); ONLY=<step> runs one step. Exit status 0 only
# when every step passed; a device test that skipped (no GPU reached) fails its step.
set -uo pipefail
cd "$(dirname "$0")/../.."
carry=.carry/verify

if [ "${1:-}" = "--prepare" ]; then
  set -e
  target="${CARGO_TARGET_DIR:-target}"
  cargo build --release -p ragged-plugin -p hipdnn-shim -p ragged-conformance -p fixture-plugin --examples --bins --lib
  test_binary() { # test target name -> path of its release executable
    cargo test --release -p ragged-plugin --test "$1" --no-run --message-format=json 2>/dev/null \
      | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]==sys.argv[1] and m.get("executable"): print(m["executable"])' "$1"
  }
  gpu_test=$(test_binary gpu)
  gpu_backward_test=$(test_binary gpu_backward)
  rm -rf "$carry" && mkdir -p "$carry"
  cp "$gpu_test" "$carry/gpu"
  cp "$gpu_backward_test" "$carry/gpu_backward"
  cp "$target/release/deps/libhipdnn_provider_ragged_sdpa.so" "$carry/"
  # The gating suite loads the fixture and its two symbol variants (cdylib examples) from
  # --fixture-dir and --fixture-dir/examples.
  mkdir -p "$carry/examples"
  cp "$target/release/deps/libhipdnn_fixture_plugin.so" "$carry/"
  cp "$target/release/examples/libhipdnn_fixture_no_api_version.so" "$target/release/examples/libhipdnn_fixture_with_overrides.so" "$carry/examples/"
  cp "$target/release/hipdnn-shim" "$target/release/ragged-conformance" "$carry/"
  strip --strip-debug "$carry"/* 2>/dev/null || true
  du -sh "$carry"
  exit 0
fi

out="${OUT:-/tmp/verify}"
mkdir -p "$out"
export HIPDNN_RAGGED_SDPA_HOST_ENGINE=1
pass=0; fail=0
run_step() { # name, command...
  local name=$1; shift
  echo "=== $name: $*"
  if "$@" >"$out/$name.log" 2>&1; then pass=$((pass+1)); echo "PASS $name"; else fail=$((fail+1)); echo "FAIL $name"; fi
  tail -n 15 "$out/$name.log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
only="${ONLY:-}"
step() { [ -z "$only" ] || [ "$only" = "$1" ] || return 0; run_step "$@"; }
# A device test that cannot reach the GPU prints "skipped: <reason>" and passes (so that
# `cargo test` passes without one); here that is a failure. The tests that need the other execute
# mode skip for that reason alone.
on_device() { # a test binary and its arguments (after env VAR=value, if any)
  local log rc
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if grep ': skipped: ' "$log" | grep -v 'needs HIPDNN_RAGGED_SDPA_VALIDATE=1'; then
    echo "device tests skipped (above): the GPU was not reached"
    rc=1
  fi
  rm -f "$log"
  return "$rc"
}
export RAGGED_SDPA_TEST_REPEATS="${REPEATS:-48}"
step plugin-gpu-tests on_device "$carry/gpu" --test-threads=1
step plugin-gpu-validate on_device env HIPDNN_RAGGED_SDPA_VALIDATE=1 "$carry/gpu" --test-threads=1
step plugin-gpu-backward on_device "$carry/gpu_backward" --test-threads=1
step plugin-gpu-backward-validate on_device env HIPDNN_RAGGED_SDPA_VALIDATE=1 "$carry/gpu_backward" --test-threads=1
step conformance-cuda "$carry/ragged-conformance" --suite numeric --cuda --junit "$out/junit.xml" "$carry/libhipdnn_provider_ragged_sdpa.so"
step conformance-backward-cuda "$carry/ragged-conformance" --suite backward --cuda "$carry/libhipdnn_provider_ragged_sdpa.so"
step conformance-serving-cuda "$carry/ragged-conformance" --suite serving --cuda "$carry/libhipdnn_provider_ragged_sdpa.so"
step conformance-fp8-cuda "$carry/ragged-conformance" --suite fp8 --cuda "$carry/libhipdnn_provider_ragged_sdpa.so"
step conformance-host "$carry/ragged-conformance" --fixture-dir "$carry" "$carry/libhipdnn_provider_ragged_sdpa.so"
step shim-cuda env HIPDNN_PLUGIN_DIR="$PWD/$carry/libhipdnn_provider_ragged_sdpa.so" \
  "$carry/hipdnn-shim" run examples/ragged_sdpa_bf16.json --engine RAGGED_SDPA_CUDA_FMHA --cuda --verify --out "$out/shim-out"
step shim-cuda-backward-nondeterministic env HIPDNN_PLUGIN_DIR="$PWD/$carry/libhipdnn_provider_ragged_sdpa.so" \
  "$carry/hipdnn-shim" run examples/ragged_sdpa_backward_bf16.json --engine RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC --cuda --verify --out "$out/shim-bwd-nondet-out"
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$carry/gpu" --test-threads=1 zero_length
step memcheck-backward compute-sanitizer --tool memcheck --error-exitcode 1 "$carry/gpu_backward" --test-threads=1 zero_length
step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 "$carry/gpu" --test-threads=1 zero_length
step racecheck-backward compute-sanitizer --tool racecheck --error-exitcode 1 "$carry/gpu_backward" --test-threads=1 zero_length
paged_small=(paged_shared_pages_and_zero_lengths paged_prefill_bf16_d64_page16_sliding_window_sinks paged_invalid_page_id paged_prefill_gathered_f16_d64)
# The FP8 forward's small cases (D 64, 128 and 256: the V transposition, the e4m3 forward, the amax reduction).
step memcheck-fp8 compute-sanitizer --tool memcheck --error-exitcode 1 "$carry/gpu" --test-threads=1 fp8_d
step racecheck-fp8 compute-sanitizer --tool racecheck --error-exitcode 1 "$carry/gpu" --test-threads=1 fp8_d
step memcheck-paged compute-sanitizer --tool memcheck --error-exitcode 1 "$carry/gpu" --test-threads=1 "${paged_small[@]}"
step racecheck-paged compute-sanitizer --tool racecheck --error-exitcode 1 "$carry/gpu" --test-threads=1 "${paged_small[@]}"
echo "${pass} passed, ${fail} failed"
[ "$fail" -eq 0 ]
