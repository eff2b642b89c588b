#!/usr/bin/env bash
# The runner cut short: run.sh on BUILD with two quick parts and many rounds, SIGTERM once
# the second round begins.  Checks that progress names the part, the round and the time
# left; that the run exits 130 with a report marked partial holding the first round's
# figures; that no benchmark process outlives it.
#   bench/interrupt_check.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log=$out/log
VIPL_BENCH_ROUNDS=50 VIPL_BENCH_PARTS=table5,orb setsid bash "$here/run.sh" "$build" "$out/r" \
    >"$log" 2>&1 &
pid=$!
for _ in $(seq 600); do # 60 s at most
    grep -q "^round 2/50: table5" "$log" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
done
grep -q "^round 2/50: table5" "$log" || { cat "$log"; echo "FAIL: round 2 never began" >&2; exit 1; }
kill -TERM -- -$pid # the session setsid made: run.sh and run.py, as a terminal's kill would
rc=0
for _ in $(seq 300); do # 30 s at most for the clean-up
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
done
if kill -0 $pid 2>/dev/null; then
    kill -KILL -- -$pid
    echo "FAIL: the run did not end within 30 s of SIGTERM" >&2
    exit 1
fi
wait $pid || rc=$?
fail() { cat "$log"; echo "FAIL: $*" >&2; exit 1; }
[ $rc -eq 130 ] || fail "exit status $rc, not 130"
grep -Eq "^round 1/50: orb \([0-9]+ s so far, time left known after round 1\)" "$log" ||
    fail "no progress line for round 1's orb part"
grep -Eq "^round 2/50: table5 \([0-9]+ s so far, about [0-9]+ min left\)" "$log" ||
    fail "no estimate of the time left in round 2"
grep -q "^\*\*Partial report: the run was interrupted at round 2 of 50" "$out/r/report.md" ||
    fail "report.md is not marked partial"
grep -q "^post_send,vipl-spin,cross," "$out/r/results.csv" || fail "round 1's post cost is missing"
grep -q "^orb_rt_p50,giop:vipl,cross,0," "$out/r/results.csv" || fail "round 1's ORB figure is missing"
if pgrep -f "$build/bench/" >/dev/null; then
    pgrep -af "$build/bench/"
    fail "benchmark processes outlived the run"
fi
echo "ok: interrupted at round 2, exit 130, partial report with round 1's figures"
