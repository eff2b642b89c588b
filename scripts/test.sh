#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test.
# The last lines are ctest's summary ("100% tests passed, 0 tests failed out of N").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${VIPL_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVIPL_BUILD_TESTS=ON >/dev/null
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure --timeout 300
