#!/usr/bin/env bash
# Several plugin builds through serving_bench.py on one graph folder, in rounds of A B .. Z Z .. B A
# processes (each process times ours beside FlashInfer and cuDNN's paged SDPA, interleaved), then the
# median of ours per build and problem and its ratio to the first build. For plan-time choices that
# live in the plugin (the decode's split count): build each variant's .so here, carry them with the
# wheels and the graph folder.
#
#   bash bench/lab/serving_ab.sh --graphs DIR [--rounds N] A.so B.so [C.so ...]
#
# Reads .whl/ and .carry/flashinfer_aot.tar.xz as run_serving_bench.sh does; writes each process's
# output under $OUT (default /tmp/serving_ab_out). Exits non-zero when a process fails.
set -o pipefail
graphs="" rounds=1 builds=()
while [ $# -gt 0 ]; do
    case "$1" in
    --graphs) graphs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) builds+=("$1"); shift ;;
    esac
done
if [ -z "$graphs" ] || [ ${#builds[@]} -lt 2 ]; then
    echo "usage: bash bench/lab/serving_ab.sh --graphs DIR [--rounds N] A.so B.so [C.so ...]" >&2
    exit 2
fi
for so in "${builds[@]}"; do
    [ -f "$so" ] || { echo "no plugin at $so" >&2; exit 2; }
done
OUT=${OUT:-/tmp/serving_ab_out}
mkdir -p "$OUT"
: >"$OUT/all.txt"
export PYTHONUNBUFFERED=1
# shellcheck source=bench/gpu/wheels.sh
. bench/gpu/wheels.sh
install_wheels >/dev/null

order=()
for ((r = 0; r < rounds; r++)); do
    order+=("${builds[@]}")
    for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order+=("${builds[$i]}"); done
done
n=0
for so in "${order[@]}"; do
    n=$((n + 1))
    log="$OUT/run$n.txt"
    echo "process $n: $so"
    if ! timeout "${BENCH_TIMEOUT:-240}" python3 bench/gpu/serving_bench.py --plugin "$so" --graphs "$graphs" \
        --flashinfer-tc no >"$log" 2>&1; then
        echo "process $n ($so) failed; its output:" >&2
        tail -20 "$log" >&2
        exit 1
    fi
    sed "s|^|$so |" "$log" >>"$OUT/all.txt"
done

python3 - "$OUT/all.txt" "${builds[@]}" <<'EOF'
import re, statistics, sys
path, builds = sys.argv[1], sys.argv[2:]
times = {}
for line in open(path):
    so, _, rest = line.partition(" ")
    m = re.match(r"\s+(\S+) (\S+)\s+([0-9.]+) us", rest)
    if m:
        times.setdefault((m.group(1), m.group(2), so), []).append(float(m.group(3)))
problems = sorted({p for p, _, _ in times})
print("| problem | " + " | ".join(builds) + " | peers |")
print("|---|" + "---|" * (len(builds) + 1))
for p in problems:
    base = statistics.median(times.get((p, "ours", builds[0]), [float("nan")]))
    cells = []
    for so in builds:
        t = statistics.median(times.get((p, "ours", so), [float("nan")]))
        cells.append(f"{t:.1f} ({base / t:.3f})")
    peers = sorted({e for q, e, _ in times if q == p and e not in ("ours", "ours_split")})
    peer = ", ".join(f"{e} {statistics.median([x for (q, f, s), v in times.items() if q == p and f == e for x in v]):.1f}"
                     for e in peers)
    print(f"| {p} | " + " | ".join(cells) + f" | {peer} |")
print("(µs, median over processes; in brackets the first build's time over this one's: > 1 is faster)")
EOF
