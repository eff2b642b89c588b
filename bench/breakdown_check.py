#!/usr/bin/env python3
"""Checks Table 2's "where a remote read's extra CPU goes" (ctest "bench: perf record ...")
and the system calls counted one by one beside it:
  - perf_profile.Profile attached to a busy process counts the CPU it ran between enable
    and disable as /proc/<pid>/schedstat does (within a quarter), all in part "other";
  - parts_of_report puts perf report's objects (and the kernel's switch and wake-up
    functions) into their parts;
  - t2_breakdown.extra divides each part's growth by the share of remote transactions,
    and its target row compares the link parts of vipl-shm and unix;
  - pg_proc.Perf counts a process's write and sched_yield calls one by one (at least as
    many as it made between enable and disable, and no more than the total), and both
    reports list them per transaction, most frequent first, leaving out the rare ones.
Usage: breakdown_check.py   (exit 0 = every check held; needs perf and root or
perf_event_paranoid <= 1)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_kit import Checks  # noqa: E402
import perf_profile  # noqa: E402
import pg_proc  # noqa: E402
import pg_report  # noqa: E402
import t2_breakdown  # noqa: E402
import t2_plan  # noqa: E402
import t2_report  # noqa: E402
from pg_proc import cpu_ns  # noqa: E402

check = Checks()


def live_profile():
    perf = shutil.which("perf")
    if not perf:
        check(False, "perf is installed (scripts/install-deps.sh: linux-perf)")
        return
    busy = subprocess.Popen(["bash", "-c", "while :; do :; done"])
    tmp = tempfile.mkdtemp(prefix="vipl-breakdown-check-")
    try:
        prof = perf_profile.Profile(perf, [busy.pid], tmp, "check")
        time.sleep(0.3)  # perf attached
        prof.command("enable")
        c1 = cpu_ns(busy.pid)
        time.sleep(1.0)
        c2 = cpu_ns(busy.pid)
        prof.command("disable")
        prof.finish()
        parts = prof.parts()
        ran = c2 - c1
        total = sum(parts.values())
        check(abs(total - ran) <= ran / 4,
              f"perf's samples {total / 1e6:.0f} ms against schedstat's {ran / 1e6:.0f} ms")
        check(parts["other"] >= total * 0.9, f"a shell loop is 'other': {parts}")
        check(not os.listdir(tmp) or all(not n.endswith(".data") for n in os.listdir(tmp)),
              "the perf data file is removed")
    finally:
        busy.kill()
        busy.wait()
        shutil.rmtree(tmp)


def report_parsing():
    text = """
    30.00%      600  postgres           [.] base_yyparse
    10.00%      200  postgres           [.] 0x00000000005d2e2c
    10.00%      200  [kernel.kallsyms]  [k] finish_task_switch.isra.0
     3.00%       60  [kernel.kallsyms]  [k] _raw_spin_unlock_irq
     2.00%       40  [kernel.kallsyms]  [k] _raw_spin_unlock_irqrestore
     5.00%      100  [kernel.kallsyms]  [k] unix_stream_sendmsg
    10.00%      200  libvipl.so.1.0.0   [.] VipRecvDone
     5.00%      100  libvipl-db.so      [.] vipl::db::epoll_wait_set(vipl::db::EpollSet*, int)
    10.00%      200  libpq.so.5.15      [.] pqParseInput3
     5.00%      100  plproxy.so         [.] plproxy_exec
    10.00%      200  libc.so.6          [.] _int_malloc
"""
    got = perf_profile.parts_of_report(text)
    ns = perf_profile.PERIOD_NS
    want = {"postgres": 800 * ns, "switch": 300 * ns, "kernel": 100 * ns, "vipl": 300 * ns,
            "libpq": 200 * ns, "plproxy": 100 * ns, "other": 200 * ns}
    check(got == want, f"parts of a report: {got}")


class Rep:
    """A report's data as report.Report keeps it: {key: (value, iterations)}."""

    def __init__(self, data):
        self.data = {k: (v, 1) for k, v in data.items()}

    def get(self, bench, link, pl, p):
        v = self.data.get((bench, link, pl, p))
        return None if v is None else v[0]


def extra_and_target():
    p = t2_plan.BREAKDOWN_P
    d = {}
    # (kernel at 0, at p; switch at 0, at p; vipl at 0, at p): the target takes the
    # three parts of the link.
    for link, k0, kp, s0, sp, v0, vp in (("unix", 10.0, 60.0, 4.0, 29.0, 0.0, 0.0),
                                         ("vipl-shm", 8.0, 13.0, 4.0, 9.0, 1.0, 6.0)):
        d[("t2_ro_part_remote", link, "n2", p)] = 0.5
        at = {"kernel": (k0, kp), "switch": (s0, sp), "vipl": (v0, vp)}
        for part, _, _ in perf_profile.PARTS:
            d[(f"t2_ro_part_{part}", link, "n2", 0)] = at.get(part, (5.0, 7.0))[0]
            d[(f"t2_ro_part_{part}", link, "n2", p)] = at.get(part, (5.0, 7.0))[1]
    rep = Rep(d)
    e = t2_breakdown.extra(rep, "n2", "unix")
    check(e["kernel"] == 100.0 and e["switch"] == 50.0 and e["vipl"] == 0.0 and
          e["postgres"] == 4.0, f"unix's extra per remote read: {e}")
    row = t2_breakdown.targets(rep, "n2")[0]
    check(row[1] == "30 / 150 us = 0.20x" and row[3] == "**yes**", f"target row: {row}")
    check(t2_breakdown.extra(rep, "n2", "tcp-veth") is None, "a link not measured: None")


# A child that makes WRITES write()s and YIELDS sched_yield()s once told to, then waits.
CALLER = """import os, sys
sys.stdin.buffer.read(1)
fd = os.open(os.devnull, os.O_WRONLY)
for _ in range({w}):
    os.write(fd, b"x")
for _ in range({y}):
    os.sched_yield()
os.write(1, b"done\\n")
sys.stdin.buffer.read(1)
"""


def live_calls():
    perf = shutil.which("perf")
    calls = pg_proc.traced_calls()
    if not perf or "write" not in calls or "sched_yield" not in calls:
        check(False, f"perf and the syscalls tracepoints (tracefs) are here: {calls}")
        return
    writes, yields = 3000, 700
    child = subprocess.Popen([sys.executable, "-c", CALLER.format(w=writes, y=yields)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    tmp = tempfile.mkdtemp(prefix="vipl-calls-check-")
    try:
        counter = pg_proc.Perf(perf, [child.pid], tmp, "calls")
        time.sleep(0.3)  # perf attached
        counter.command("enable")
        child.stdin.write(b"g")
        child.stdin.flush()
        done = child.stdout.readline()
        counter.command("disable")
        got = counter.finish().get(child.pid, {})
        w = got.get(pg_proc.call_event("write"), 0)
        y = got.get(pg_proc.call_event("sched_yield"), 0)
        total = got.get("raw_syscalls:sys_enter", 0)
        check(done == b"done\n", f"the child ran its calls: {done!r}")
        check(writes <= w <= writes + 20, f"write counted one by one: {w} of {writes}")
        check(yields <= y <= yields + 20, f"sched_yield counted: {y} of {yields}")
        check(total >= w + y, f"the total ({total}) holds them")
    finally:
        child.kill()
        child.wait()
        shutil.rmtree(tmp)


def call_columns():
    pre = "t2_ro_perf_call_"
    rep = Rep({(pre + "recvfrom", "unix", "n2", 10): 2.0,
                   (pre + "sendto", "unix", "n2", 10): 1.25,
                   (pre + "futex", "unix", "n2", 10): 0.01,
                   (pre + "write", "vipl-shm", "n2", 10): 1.1,
                   (pre + "recvfrom", "unix", "n2", 25): 9.0})
    got = t2_report.by_call(rep, pre, "unix", "n2", 10)
    check(got == "recvfrom 2.00, sendto 1.25", f"Table 2's calls of one run: {got!r}")
    check(t2_report.by_call(rep, pre, "tcp-veth", "n2", 10) == "–", "no calls counted: –")
    t = next(t for t in pg_report.TARGETS if t.placement == "same")
    key = (t.workload, t.placement, t.clients)
    rep = Rep({(f"pg_{key[0]}_perf_call_ppoll_client", t.link, *key[1:]): 1.0,
                   (f"pg_{key[0]}_perf_call_recvfrom_client", t.base, *key[1:]): 2.0,
                   (f"pg_{key[0]}_perf_call_futex_server", t.link, *key[1:]): 0.02})
    rows = pg_report.call_rows(rep, t, "tx")
    names = [r[0].split(",")[0] for r in rows]
    check(names == ["`ppoll`", "`recvfrom`"], f"the database's rows, rare calls left out: {rows}")
    check(rows[1][1:] == ["–", "2.00"], f"a call one link does not make: {rows[1]}")


def main():
    report_parsing()
    extra_and_target()
    call_columns()
    live_profile()
    live_calls()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
