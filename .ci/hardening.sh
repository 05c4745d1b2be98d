#!/usr/bin/env bash
# Hardening stage of CI (issue 13): the plugin under AddressSanitizer, ThreadSanitizer and
# valgrind, and a bounded run of each fuzz target. Stable Rust only: the -Z flags go through
# RUSTC_BOOTSTRAP=1 (CI cannot install a nightly). Needs gcc, valgrind (installed if missing) and
# rust-src for -Zbuild-std (added with rustup if missing).
# Measured 2026-12-01 on the shared 2-core dev box (load average ~10, builds of other
# worktrees running): 783 s in all, with the sanitizer builds already in target/: ASan 561 s
# (mostly the debug and ASan rebuilds it triggers), TSan 5 s (its build-std build, when not
# cached: 20.6 min wall, 7.8 min CPU), valgrind 29 s, fuzzing 188 s.
set -euo pipefail
cd "$(dirname "$0")/.."
# RUSTC_BOOTSTRAP=1 goes only on the commands that need -Z flags: set for the whole script it made
# the plain `cargo test` builds below miss the debug tree that the README's test command built
# and rebuild it.
with_bootstrap() { RUSTC_BOOTSTRAP=1 "$@"; }
triple="$(rustc -vV | sed -n 's/^host: //p')"
fuzz_seconds="${FUZZ_SECONDS:-60}"
stage_start=$SECONDS
elapsed() { echo "   ($((SECONDS - stage_start)) s so far)"; }

echo "== hardening: AddressSanitizer (issue-13 C suite: ASan C host, ASan plugin)"
# The plugin .so is instrumented (-Zsanitizer=address); the C host is built with gcc's
# -fsanitize=address, whose shared runtime the plugin's instrumentation links against.
# The Rust ABI suites (tests/abi.rs, execute.rs, overrides_and_serialization.rs) are not run
# here: their test binaries cannot dlopen the instrumented plugin (they do not export the ASan
# runtime). hardening.c's bad-input mode restates their kinds of bad input instead (NULL
# arguments of the optional entry points, graph, config and stored-context bytes cut at every
# sixteenth in exact-size blocks, flipped stored bytes, missing/NULL/misaligned/duplicate/unknown
# bindings, bad override arrays), so ASan watches every refusal.
# LeakSanitizer is off here: when the last dlclose unmaps the library, the heap behind its
# statics becomes unreachable and would be reported; the valgrind stage measures that instead.
inputs="$PWD/target/hardening_inputs"
HARDENING_INPUTS="$inputs" cargo test --quiet -p ragged-plugin --test hardening >/dev/null
RUSTFLAGS="-Zsanitizer=address" \
  with_bootstrap cargo build --quiet --target "$triple" --target-dir target/asan -p ragged-plugin
asan_plugin="target/asan/$triple/debug/libhipdnn_provider_ragged_sdpa.so"
asan_host="target/asan/hardening_asan"
gcc -std=c11 -O1 -g -fsanitize=address -fno-omit-frame-pointer -o "$asan_host" \
  plugin/tests/c/hardening.c -ldl -lpthread -lm
gcc -shared -fPIC -o target/asan/liblog_sink.so plugin/tests/c/log_sink.c
export HIPDNN_RAGGED_SDPA_HOST_ENGINE=1
for args in \
  "extent $asan_plugin $inputs/extent_2p61.bin $inputs/engine_config.bin" \
  "extent $asan_plugin $inputs/extent_2p60.bin $inputs/engine_config.bin" \
  "extent $asan_plugin $inputs/extent_2p62.bin $inputs/engine_config.bin" \
  "details-race $asan_plugin $inputs/graph_flagged.bin 2000" \
  "stale $asan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin 1000" \
  "scale $asan_plugin $inputs/scale_graph.bin $inputs/engine_config.bin $inputs" \
  "overlap $asan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin $inputs" \
  "bad-input $asan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin $inputs" \
  "threads $asan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin $inputs 8 50" \
  "unload $asan_plugin target/asan/liblog_sink.so $inputs/graph_flagged.bin $inputs/engine_config.bin $inputs 20"; do
  # shellcheck disable=SC2086 # word splitting of the argument list is intended
  ASAN_OPTIONS="detect_leaks=0:halt_on_error=1" "$asan_host" $args | tail -n 2
done
# Issue 38 (tests/c/lifecycle.c): re-entrant logging callbacks, dlclose with a live handle after a
# worker-pool execute, serialized bytes outliving their handle, handles across reloads.
asan_lifecycle="target/asan/lifecycle_asan"
gcc -std=c11 -O1 -g -fsanitize=address -fno-omit-frame-pointer -Iplugin/include -Iplugin/tests/c \
  -o "$asan_lifecycle" plugin/tests/c/lifecycle.c -ldl -lpthread -lm
for args in \
  "reentrant $asan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin $inputs" \
  "unload-live $asan_plugin $inputs/large/graph.bin $inputs/engine_config.bin $inputs/large 5" \
  "serialized $asan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin 5" \
  "reload $asan_plugin 300"; do
  # shellcheck disable=SC2086 # word splitting of the argument list is intended
  ASAN_OPTIONS="detect_leaks=0:halt_on_error=1" "$asan_lifecycle" $args | tail -n 2
done
elapsed

echo "== hardening: ThreadSanitizer (threads mode: calling-thread and worker-pool executes on one context)"
# The plugin and the std it links are instrumented (-Zsanitizer=thread needs -Zbuild-std, hence
# rust-src). The C host is compiled with gcc's -fsanitize=thread but linked against the TSan
# runtime of the Rust toolchain (exported with -rdynamic), not gcc's libtsan: gcc 12's runtime
# lacks entry points rustc's LLVM emits (__tsan_memcpy), so the plugin would not load; a Rust
# test binary does not export its runtime to a dlopen'd library at all.
# No suppressions: any report fails the stage. The golden graph (below the host engine's 2^20
# multiply-add threshold) runs on each calling thread; the large one (2^21, 8 threads x 50)
# spreads every execute over the plugin's worker pool and its caller, several callers at once.
# Measured 2026-12-01 (2-core box, load ~10): 1.5 s per golden run, 1 s per large run, 0 reports.
rustup component list --installed 2>/dev/null | grep -q '^rust-src' || rustup component add rust-src
RUSTFLAGS="-Zsanitizer=thread" with_bootstrap cargo build --quiet -Zbuild-std --target "$triple" \
  --target-dir target/tsan -p ragged-plugin
tsan_plugin="target/tsan/$triple/debug/libhipdnn_provider_ragged_sdpa.so"
tsan_host="target/tsan/hardening_tsan"
tsan_rt="$(rustc --print sysroot)/lib/rustlib/$triple/lib/librustc-stable_rt.tsan.a"
gcc -std=c11 -O1 -g -fsanitize=thread -c -o "$tsan_host.o" plugin/tests/c/hardening.c
gcc -o "$tsan_host" "$tsan_host.o" -Wl,--whole-archive "$tsan_rt" -Wl,--no-whole-archive -rdynamic \
  -ldl -lpthread -lm -lrt
tsan_threads() { # graph dir threads executes
  HIPDNN_RAGGED_SDPA_HOST_ENGINE=1 TSAN_OPTIONS="halt_on_error=1:exitcode=66" \
    "$tsan_host" threads "$tsan_plugin" "$1" "$inputs/engine_config.bin" "$2" "$3" "$4" \
    >target/tsan/threads.log 2>&1 ||
    { tail -n 80 target/tsan/threads.log; echo "ThreadSanitizer: $1 failed"; exit 1; }
  grep -E 'threads x' target/tsan/threads.log
}
tsan_threads "$inputs/graph_flagged.bin" "$inputs" 8 200
tsan_threads "$inputs/graph_flagged.bin" "$inputs" 8 200
tsan_threads "$inputs/large/graph.bin" "$inputs/large" 8 50
# The lifecycle modes: the callback's calls back into the plugin, and the pool stopped at unload.
tsan_lifecycle="target/tsan/lifecycle_tsan"
gcc -std=c11 -O1 -g -fsanitize=thread -Iplugin/include -Iplugin/tests/c -c -o "$tsan_lifecycle.o" \
  plugin/tests/c/lifecycle.c
gcc -o "$tsan_lifecycle" "$tsan_lifecycle.o" -Wl,--whole-archive "$tsan_rt" -Wl,--no-whole-archive \
  -rdynamic -ldl -lpthread -lm -lrt
for args in \
  "reentrant $tsan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin $inputs" \
  "unload-live $tsan_plugin $inputs/large/graph.bin $inputs/engine_config.bin $inputs/large 3" \
  "serialized $tsan_plugin $inputs/graph_flagged.bin $inputs/engine_config.bin 3" \
  "reload $tsan_plugin 50"; do
  # shellcheck disable=SC2086 # word splitting of the argument list is intended
  HIPDNN_RAGGED_SDPA_HOST_ENGINE=1 TSAN_OPTIONS="halt_on_error=1:exitcode=66" \
    "$tsan_lifecycle" $args >target/tsan/lifecycle.log 2>&1 ||
    { tail -n 80 target/tsan/lifecycle.log; echo "ThreadSanitizer: lifecycle ${args%% *} failed"; exit 1; }
  tail -n 2 target/tsan/lifecycle.log
done
elapsed

echo "== hardening: valgrind (load/execute/unload loop, inline and worker-pool executes: 0 memory errors, growth per loop)"
command -v valgrind >/dev/null || { sudo -n apt-get install -y -qq valgrind >/dev/null 2>&1 || apt-get install -y -qq valgrind >/dev/null; }
inputs="$PWD/target/hardening_inputs"
HARDENING_INPUTS="$inputs" cargo test --quiet -p ragged-plugin --test hardening dlclose >/dev/null
host="target/tmp/hardening_build/hardening"
sink="target/tmp/hardening_build/liblog_sink.so"
plugin="$(ls target/debug/deps/libhipdnn_provider_ragged_sdpa.so)"
in_use() { # loops command... -> bytes in use at exit; the argument LOOPS becomes the loop count
  local loops="$1" log arg args=(); shift
  for arg in "$@"; do [ "$arg" = LOOPS ] && args+=("$loops") || args+=("$arg"); done
  log="$(mktemp)"
  HIPDNN_RAGGED_SDPA_HOST_ENGINE=1 valgrind --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=none --keep-debuginfo=yes --log-file="$log" "${args[@]}" >/dev/null ||
    { cat "$log" >&2; echo "valgrind: errors with $loops loops of $*" >&2; exit 1; }
  sed -n 's/.*in use at exit: \([0-9,]*\) bytes.*/\1/p' "$log" | tr -d ,
  rm -f "$log"
}
no_growth() { # label command... : in use after 2 and after 8 loops must be the same
  local label="$1" few many growth; shift
  few="$(in_use 2 "$@")"
  many="$(in_use 8 "$@")"
  growth=$(( (many - few) / 6 ))
  echo "valgrind: $label: 0 errors; in use at exit: $few bytes after 2 loops, $many after 8 ($growth per loop)"
  [ "$growth" -eq 0 ] || { echo "memory per $label loop grew by $growth bytes"; exit 1; }
}
no_growth "load/execute/unload" "$host" unload "$plugin" "$sink" "$inputs/graph_flagged.bin" \
  "$inputs/engine_config.bin" "$inputs" LOOPS "$inputs/large/graph.bin" "$inputs/large"
# No suppressions. Each loop executes the golden graph (calling thread) and a large one (worker
# pool: its threads start and are joined), then destroys the last handle, which frees the pool,
# staging buffers, registries and the GPU-runtime probes' verdicts, and dlcloses the plugin.
# --keep-debuginfo keeps the unloaded plugin's symbols, so that every block is attributed to the
# code that allocated it. What stays in use is libc's, ld.so's and the HIP runtime's when one is
# installed (it is kept mapped, RTLD_NODELETE: kernels/gpu-runtime/src/library.rs says why), the
# same after 2 and 8 loops. Measured 2026-12-01 with libamdhip64-5 installed: 98 305 B after 2
# and after 8 loops, 0 B per loop (before: 1 309 B per loop named in a suppression file, and
# about 11.5 KB more, rayon's crossbeam-epoch collector, whenever the pool had run).
# Serialized bytes outliving their handle (issue 38: 1 775 B lost per loop when they could no
# longer be returned once the handle was destroyed).
no_growth "serialize/destroy/return" target/tmp/hardening_build/lifecycle serialized "$plugin" \
  "$inputs/graph_flagged.bin" "$inputs/engine_config.bin" LOOPS
elapsed

echo "== hardening: fuzzing, ${fuzz_seconds} s per target"
command -v cargo-fuzz >/dev/null || cargo install --quiet --locked cargo-fuzz
for target in graph_bytes graph_mutate context_bytes; do
  corpus="fuzz/corpus/$target"
  mkdir -p "$corpus"
  # Seeds: the golden wire files (../shared/testdata/wire, relative to the repository root) and
  # the graphs committed in fuzz/seeds.
  [ "$target" = context_bytes ] || cp -n ../shared/testdata/wire/*.bin "$corpus"/ 2>/dev/null || true
  cp -n fuzz/seeds/"$target"/* "$corpus"/ 2>/dev/null || true
  (cd fuzz && with_bootstrap cargo fuzz run -O "$target" "../$corpus" -- -max_total_time="$fuzz_seconds" \
     -rss_limit_mb=2048 -print_final_stats=1 2>&1 | grep -E '^(stat::|#[0-9]+ *DONE|==|SUMMARY|thread)' )
done
elapsed
echo "hardening: passed in $((SECONDS - stage_start)) s"
