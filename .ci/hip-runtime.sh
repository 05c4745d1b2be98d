#!/usr/bin/env bash
# CI stage: the README's commands on a ROCm machine without a GPU. Installs Debian's
# `libamdhip64-5` (HIP 5.2) and runs every command README.md and examples/README.md show (the demo
# among them), the whole test suite and the certification command with the HIP runtime present, so
# a green CI means they work for a user who has ROCm installed. (.ci/run's own pass runs them
# without one.)
#
# Without root (a developer's machine, or to leave the system untouched) set
# HIP_RUNTIME_PREFIX=DIR: the package and the dependencies this system lacks are unpacked there
# with `apt-get download` + `dpkg -x` and found through LD_LIBRARY_PATH, which is how the plugin
# finds any soname.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

echo "== HIP runtime: Debian libamdhip64-5"
if [ -n "${HIP_RUNTIME_PREFIX:-}" ]; then
  mkdir -p "$HIP_RUNTIME_PREFIX/debs"
  missing=()
  for pkg in $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances libamdhip64-5 | grep -v '^ ' | sort -u); do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  (cd "$HIP_RUNTIME_PREFIX/debs" && apt-get download "${missing[@]}")
  for deb in "$HIP_RUNTIME_PREFIX"/debs/*.deb; do dpkg -x "$deb" "$HIP_RUNTIME_PREFIX/root"; done
  export LD_LIBRARY_PATH="$HIP_RUNTIME_PREFIX/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
elif ! ldconfig -p | grep -q 'libamdhip64\.so\.5'; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libamdhip64-5
fi
# The stage proves nothing unless the library really loads here.
python3 -c 'import ctypes; ctypes.CDLL("libamdhip64.so.5")' \
  || { echo "libamdhip64.so.5 does not load"; exit 1; }

echo "== every README command with the HIP runtime present (the demo first)"
READMECMD_HIP=present .ci/readme-commands.sh

echo "== README: cargo test --workspace, with the HIP runtime present"
cargo test --workspace
# README's certification command, on the test profile the main pass already built (the fixture
# plugins of the gating suite are built alongside).
cargo build -p ragged-plugin -p fixture-plugin -p ragged-conformance --lib --bins --examples
target="${CARGO_TARGET_DIR:-target}/debug"
"$target/ragged-conformance" "$target/libhipdnn_provider_ragged_sdpa.so"

echo "hip-runtime stage: passed in $(( $(date +%s) - start )) s"
