#!/usr/bin/env bash
# Builds the database interconnect as it was before the stream work, for the database
# section's "before / after" link (pg-vipl-before in pg_plan.py): a server and clients
# under that vipl-run, measured in the same rounds as today's.  Comparing with a report of
# another day would compare two hosts; a second build measured side by side does not.
#   bench/build_before.sh BUILD_DIR
# Leaves BUILD_DIR/before/build/db-interconnect/vipl-run and BUILD_DIR/before/revision
# (the commit, its date and subject: the report names it), or BUILD_DIR/before/why when
# it cannot (no git history, as in a tarball or a shallow clone): the link is then left
# out and the report says why.  Never fails the main job.
# VIPL_BENCH_BEFORE_REV names another revision.
set -uo pipefail
# The last commit before the stream work (common/'s Stream and the spin policy it asks):
# everything the database interconnect gained since is what the comparison shows.
rev=${VIPL_BENCH_BEFORE_REV:-c3da18c}
if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$1/before
rm -rf "$dir/src" "$dir/why" "$dir/revision"
mkdir -p "$dir/src"
give_up() {
    echo "$1" >"$dir/why"
    echo "bench: the interconnect before the stream work is not measured: $1" >&2
    exit 0
}
full=$(git -C "$repo" rev-parse --verify -q "$rev^{commit}") ||
    give_up "revision $rev is not in this clone's history"
git -C "$repo" archive "$full" | tar -x -C "$dir/src" || give_up "git archive $rev failed"
log=$dir/build.log
if ! { cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DVIPL_BUILD_TESTS=OFF -DVIPL_BUILD_BENCH=OFF &&
    cmake --build "$dir/build" --target vipl-run vipl-db; } >"$log" 2>&1; then
    give_up "its build failed (see $log)"
fi
git -C "$repo" log -1 --format='%h %cs %s' "$full" >"$dir/revision"
echo "bench: the interconnect before the stream work: $(cut -c1-60 "$dir/revision")"
