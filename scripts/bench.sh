#!/usr/bin/env bash
# The main job: installs what is missing, builds optimised, runs every
# benchmark and writes the report (CSV, Markdown, plots) under out/bench/.
#   scripts/bench.sh [--quick]   --quick: a first look (VIPL_BENCH_QUICK=1: one round)
#   scripts/bench.sh --full      --full: Table 2 at every remote fraction, 5 rounds
#                                (VIPL_BENCH_FULL=1; ~20 more minutes)
set -euo pipefail
if [ "${1:-}" = "--quick" ]; then
    export VIPL_BENCH_QUICK=1
elif [ "${1:-}" = "--full" ]; then
    export VIPL_BENCH_FULL=1
elif [ $# -ne 0 ]; then
    echo "usage: $0 [--quick | --full]" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${VIPL_BUILD_DIR:-build-release}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVIPL_BUILD_TESTS=OFF >/dev/null
cmake --build "$build"
# The database section's before / after link: skipped by --quick (a first look).
if [ -z "${VIPL_BENCH_QUICK:-}" ]; then
    bash bench/build_before.sh "$build"
fi
exec bash bench/run.sh "$build" "${VIPL_BENCH_OUT:-out/bench}"
