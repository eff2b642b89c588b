#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test.
# The last lines are ctest's summary ("100% tests passed, 0 tests failed out of N"),
# followed by one line when the ThreadSanitizer run below failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${VIPL_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVIPL_BUILD_TESTS=ON >/dev/null
cmake --build "$build"

# The thread stress tests ("[tsan]") once more, on shm and on tcp, built with
# ThreadSanitizer: the library and that one test program only.  Any report
# fails the run.  gcc: the library links with -z defs, and only gcc's
# -fsanitize=thread links the runtime into shared libraries.
tsan=${VIPL_TSAN_BUILD_DIR:-build-tsan}
CC=gcc CXX=g++ cmake -S . -B "$tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVIPL_SANITIZE=thread -DVIPL_BUILD_BENCH=OFF -DVIPL_BUILD_TESTS=ON >/dev/null
cmake --build "$tsan" --target vipl-threads-tests
tsan_ok=1
for device in shm0 tcp:127.0.0.1; do
    VIPL_TEST_DEVICES=$device TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
        timeout 300 "$tsan/libvipl/tests/threads/vipl-threads-tests" "[tsan]" || tsan_ok=0
done

ctest --test-dir "$build" --output-on-failure --timeout 300
if [ "$tsan_ok" != 1 ]; then
    echo "ThreadSanitizer: the [tsan] stress tests failed (report above)"
    exit 1
fi
