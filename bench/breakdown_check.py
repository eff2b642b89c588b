#!/usr/bin/env python3
"""Checks Table 2's "where a remote read's extra CPU goes" (ctest "bench: perf record ..."):
  - perf_profile.Profile attached to a busy process counts the CPU it ran between enable
    and disable as /proc/<pid>/schedstat does (within a quarter), all in part "other";
  - parts_of_report puts perf report's objects into their parts;
  - t2_breakdown.extra divides each part's growth by the share of remote transactions,
    and its target row compares the link parts of vipl-shm and unix.
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
import t2_breakdown  # noqa: E402
import t2_plan  # noqa: E402
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
    40.00%      800  postgres
    20.00%      400  [kernel.kallsyms]
    10.00%      200  libvipl.so.1.0.0
     5.00%      100  libvipl-db.so
    10.00%      200  libpq.so.5.15
     5.00%      100  plproxy.so
    10.00%      200  libc.so.6
"""
    got = perf_profile.parts_of_report(text)
    ns = perf_profile.PERIOD_NS
    want = {"postgres": 800 * ns, "link": 700 * ns, "libpq": 200 * ns, "plproxy": 100 * ns,
            "other": 200 * ns}
    check(got == want, f"parts of a report: {got}")


class Rep:
    def __init__(self, data):
        self.data = data

    def get(self, bench, link, pl, p):
        return self.data.get((bench, link, pl, p))


def extra_and_target():
    p = t2_plan.BREAKDOWN_P
    d = {}
    for link, link0, linkp in (("unix", 10.0, 60.0), ("vipl-shm", 8.0, 18.0)):
        d[("t2_ro_part_remote", link, "n2", p)] = 0.5
        for part, _, _ in perf_profile.PARTS:
            d[(f"t2_ro_part_{part}", link, "n2", 0)] = link0 if part == "link" else 5.0
            d[(f"t2_ro_part_{part}", link, "n2", p)] = linkp if part == "link" else 7.0
    rep = Rep(d)
    e = t2_breakdown.extra(rep, "n2", "unix")
    check(e["link"] == 100.0 and e["postgres"] == 4.0, f"unix's extra per remote read: {e}")
    row = t2_breakdown.targets(rep, "n2")[0]
    check(row[1] == "20 / 100 us = 0.20x" and row[3] == "**yes**", f"target row: {row}")
    check(t2_breakdown.extra(rep, "n2", "tcp-veth") is None, "a link not measured: None")


def main():
    report_parsing()
    extra_and_target()
    live_profile()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
