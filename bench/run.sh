#!/usr/bin/env bash
# Runs every benchmark against an already built tree and writes the report.
#   bench/run.sh BUILD_DIR OUT_DIR
# OUT_DIR gets raw.csv, results.csv, meta.json, report.md and its plots (latency, bandwidth,
# orb, pg, pg_latency, table2 .png).
# VIPL_BENCH_ROUNDS (default 7; 1 with VIPL_BENCH_QUICK=1) sets how many interleaved rounds
# are taken.
# VIPL_BENCH_PARTS (default all) runs only some parts: see run.py.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
build=$1
out=$2
for b in bench-vipl bench-vipl-postcost bench-ring bench-sock bench-vi-scale; do
    [ -x "$build/bench/$b" ] || { echo "run.sh: $build/bench/$b is missing: build first" >&2; exit 1; }
done
mkdir -p "$out"
# Debian's python3-matplotlib belongs to the system interpreter, which a
# python3 earlier in PATH (pyenv, a venv) may hide.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
# An interrupted run (Ctrl-C, SIGTERM) writes what it measured and exits 130: the report
# is still written, marked partial, and the exit status says it was cut short.
# The shell itself waits (a trap, not an ignore, so that children keep the default).
trap ':' INT TERM HUP
rc=0
"$py" "$here/run.py" "$build" "$out" || rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 130 ]; then
    "$py" "$here/report.py" "$out"
    [ $rc -eq 0 ] && echo "report: $out/report.md" || echo "partial report: $out/report.md"
fi
exit $rc
