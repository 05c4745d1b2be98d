#!/usr/bin/env bash
# The plugin of one git revision, built in release and stripped of debug info, for an A/B of two
# builds (plugin_ab.py, bench/README.md) without touching this checkout:
#
#   bash bench/gpu/build_revision.sh REV DEST.so
#
# REV is anything `git rev-parse` takes (a branch, a commit). The revision is checked out in one
# worktree kept at target/revision-tree (detached; reused from call to call, so cargo rebuilds only
# what differs between revisions) and built into target/revision-build. Exits non-zero, saying
# why, when the revision does not exist or does not build.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -ne 2 ]; then
    echo "usage: bash bench/gpu/build_revision.sh REV DEST.so" >&2
    exit 2
fi
rev=$1
dest=$2
commit=$(git rev-parse --verify --quiet "$rev^{commit}") || {
    echo "build_revision.sh: '$rev' is not a commit of this repository" >&2
    exit 1
}
tree=$PWD/target/revision-tree
if git -C "$tree" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$tree" checkout --quiet --detach --force "$commit"
else
    rm -rf "$tree"
    git worktree prune
    git worktree add --quiet --detach "$tree" "$commit"
fi
target=$PWD/target/revision-build
CARGO_TARGET_DIR=$target cargo build --release --manifest-path "$tree/Cargo.toml" -p ragged-plugin --lib
mkdir -p "$(dirname "$dest")"
objcopy --strip-debug "$target/release/libhipdnn_provider_ragged_sdpa.so" "$dest"
echo "$dest: the plugin of $rev ($(git rev-parse --short "$commit"))"
