#!/bin/sh
# A bounded fuzz run, as ctest runs it:
#   run_fuzz.sh FUZZER CORPUS WORKDIR SECONDS [libFuzzer flags...]
# The checked-in corpus stays read-only: the run works on a copy in WORKDIR,
# which also receives the crashing input (WORKDIR/artifacts/) if there is
# one.  Every input of the corpus runs first, so the inputs that once found
# a bug are replayed each time.  Exits non-zero on a crash, a sanitizer
# report, a leak or a timeout.
set -eu
[ $# -ge 4 ] || { echo "usage: $0 FUZZER CORPUS WORKDIR SECONDS [flags...]" >&2; exit 2; }
fuzzer=$1 corpus=$2 work=$3 seconds=$4
shift 4
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$corpus"/* "$work/corpus/"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS UBSAN_OPTIONS
exec "$fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$@" "$work/corpus"
