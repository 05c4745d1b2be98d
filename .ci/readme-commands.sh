#!/usr/bin/env bash
# CI stage (issue 38): every shell command README.md and examples/README.md show is run as written,
# from the repository root, so "works as written on a fresh clone" is checked, not assumed.
#
# Which commands: Markdown's indented code blocks (lines indented by 4 spaces after a blank line,
# outside fenced blocks), one command per line, a line ending in `\` joined with the next; files in
# the order above, commands in document order, because later commands use what earlier ones built
# (the plugin in target/release/), as a reader following the text does. A command shown twice runs
# once. A block preceded by the line `<!-- readme-commands: skip REASON -->` is not run (for
# commands that must not run in CI, such as a system package install); REASON is printed.
#
# Skipped as run elsewhere: `cargo test --workspace`, only while .ci/run itself runs it (checked
# below, so removing it there makes this stage run it). `cargo xtask demo` is run here.
#
# GPU commands (those with `--cuda`), the rule: where a CUDA device is usable (the driver's
# libcuda.so.1 loads, cuInit succeeds and cuDeviceGetCount > 0, asked through ctypes, not through
# the project's own probe) they must pass like any other. Without one they must FAIL: exit
# nonzero, and say why in the shim's words (`--cuda: no usable CUDA device: REASON`, or `bundle
# --cuda`'s `skipped: --cuda: REASON` with exit 77). Such a command is counted as "expected
# failure (no device)", never as passed; one that exits 0 without a device is the silent fallback
# issue 38 removed and fails this stage.
#
# The environment a reader starts from: none of the plugin or log variables set.
#
# HIP runtime: the commands must work on a machine without ROCm and on one with Debian's
# libamdhip64-5 (HIP 5, no GPU). READMECMD_HIP=absent (the default, .ci/run) points the plugin's HIP
# search at a file that does not exist (RAGGED_SDPA_HIP_RUNTIME), so the run is the no-ROCm case even
# where a runtime is installed; READMECMD_HIP=present (.ci/hip-runtime.sh) requires libamdhip64.so.5
# to load and leaves the plugin's own search alone.
set -euo pipefail
cd "$(dirname "$0")/.."
unset HIPDNN_PLUGIN_DIR HIPDNN_RAGGED_SDPA_HOST_ENGINE HIPDNN_LOG_LEVEL HIPDNN_LOG_FILE
case "${READMECMD_HIP:-absent}" in
  absent)
    export RAGGED_SDPA_HIP_RUNTIME=/nonexistent/readme-commands/libamdhip64.so.5
    echo "readme-commands: without a HIP runtime (the plugin's HIP search sees none)" ;;
  present)
    unset RAGGED_SDPA_HIP_RUNTIME
    python3 -c 'import ctypes; ctypes.CDLL("libamdhip64.so.5")' ||
      { echo "readme-commands: READMECMD_HIP=present, but libamdhip64.so.5 does not load"; exit 1; }
    echo "readme-commands: with the HIP runtime libamdhip64.so.5 installed" ;;
  *) echo "READMECMD_HIP must be absent or present, not '${READMECMD_HIP}'"; exit 2 ;;
esac
start=$(date +%s)

# NUL-separated entries "FILE:LINE<TAB>COMMAND", or "FILE:LINE<TAB>#skip REASON<TAB>COMMAND" for a
# block under a skip marker.
extract() {
  python3 - "$@" <<'PY'
import sys

MARKER = "<!-- readme-commands: skip"

for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fenced = False
    in_block = False
    after_blank = True
    skip = None      # the reason of a marker waiting for its block
    pending = None   # (first line number, text so far) of a command continued with a backslash
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        is_code = not fenced and line.startswith("    ") and (in_block or after_blank)
        if is_code:
            in_block = True
            text = line[4:].strip()
            if pending:
                start, text = pending[0], pending[1] + " " + text
            elif not text:
                continue
            else:
                start = number
            if text.endswith("\\"):
                pending = (start, text[:-1].rstrip())
                continue
            pending = None
            tag = "" if skip is None else f"#skip {skip}\t"
            sys.stdout.write(f"{path}:{start}\t{tag}{text}\0")
            continue
        if pending:
            sys.exit(f"{path}:{pending[0]}: a command ends in a backslash with nothing after it")
        stripped = line.strip()
        if not stripped:
            after_blank = True  # a block may start, or go on, after a blank line
            continue
        in_block = after_blank = False
        # A marker covers the one block right after it (blank lines between); any other text
        # line ends its reach.
        if stripped.startswith(MARKER) and stripped.endswith("-->"):
            skip = stripped[len(MARKER):-3].strip() or "no reason given"
        else:
            skip = None
PY
}

# Whether a CUDA device is usable, asked of the driver directly.
cuda_device_usable() {
  python3 - <<'PY'
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(1)
count = ctypes.c_int(0)
ok = cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
sys.exit(0 if ok else 1)
PY
}

if cuda_device_usable; then
  device=yes
  echo "readme-commands: a CUDA device is usable: --cuda commands must pass"
else
  device=no
  echo "readme-commands: no usable CUDA device: --cuda commands must fail saying so"
fi

skip_elsewhere=()
# .ci/run's test step runs the README's test command itself.
if grep -Eq '^([A-Z_]+=[^ ]+ )*cargo test --workspace( |$)' .ci/run; then
  skip_elsewhere+=("cargo test --workspace")
fi

log="$(mktemp)"
commands="$(mktemp)"
trap 'rm -f "$log" "$commands"' EXIT
extract README.md examples/README.md >"$commands"
passed=0 expected_failures=0 skipped=0
declare -A seen=()
while IFS= read -r -d '' entry; do
  where="${entry%%$'\t'*}"
  command="${entry#*$'\t'}"
  if [[ "$command" == "#skip "* ]]; then
    reason="${command#\#skip }"
    reason="${reason%%$'\t'*}"
    command="${command#*$'\t'}"
    echo "-- $where: skipped ($reason): $command"
    skipped=$((skipped + 1))
    continue
  fi
  if [ -n "${seen[$command]:-}" ]; then
    echo "-- $where: already ran at ${seen[$command]}: $command"
    continue
  fi
  seen[$command]="$where"
  for elsewhere in "${skip_elsewhere[@]}"; do
    if [ "$command" = "$elsewhere" ]; then
      echo "-- $where: skipped (.ci/run runs it): $command"
      skipped=$((skipped + 1))
      continue 2
    fi
  done
  t0=$(date +%s)
  set +e
  bash -o pipefail -c "$command" >"$log" 2>&1
  status=$?
  set -e
  took=$(( $(date +%s) - t0 ))
  if [[ " $command " == *" --cuda "* && "$device" == no ]]; then
    if [ "$status" -ne 0 ] && grep -Eq -- '--cuda: no usable CUDA device: |^skipped: --cuda: ' "$log"; then
      echo "ok $where: expected failure, no CUDA device (exit $status, ${took} s): $command"
      grep -E -- '--cuda: no usable CUDA device: |^skipped: --cuda: ' "$log" | head -n 1 | sed 's/^/    /'
      expected_failures=$((expected_failures + 1))
      continue
    fi
    echo "FAILED $where (exit $status): $command"
    echo "a --cuda command without a usable CUDA device must exit nonzero saying '--cuda: no usable CUDA device: REASON'; its output:"
    cat "$log"
    exit 1
  fi
  if [ "$status" -ne 0 ]; then
    echo "FAILED $where (exit $status): $command"
    echo "its output:"
    cat "$log"
    exit 1
  fi
  echo "ok $where (${took} s): $command"
  passed=$((passed + 1))
done <"$commands"

echo "readme-commands: ${passed} passed, ${expected_failures} expected failures (no CUDA device), ${skipped} skipped, in $(( $(date +%s) - start )) s"
