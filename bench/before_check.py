#!/usr/bin/env python3
"""Checks the database section's before / after (ctest "bench: before / after ..."):
  - build_before.sh asked for a revision this clone lacks exits 0 and leaves the reason,
    which pg_run.before_build hands on (the main job goes on without the link);
  - pg_before.py takes every ratio within a round, between links measured side by side,
    then the median over the rounds that ran both; its targets name the worst figure;
  - a report without the link says why in its targets table.
Usage: before_check.py   (exit 0 = every check held)
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_kit import Checks  # noqa: E402
import pg_before  # noqa: E402
import pg_run  # noqa: E402
from pg_plan import COPY_BYTES  # noqa: E402

check = Checks()


class Rep:
    """What pg_before reads of report.Report: raw rows per round and meta."""

    def __init__(self, raw, meta):
        self.raw, self.meta, self.lines = raw, meta, []

    def emit(self, *lines):
        self.lines.extend(lines)

    def table(self, header, rows):
        self.lines.append(header)
        self.lines.extend(rows)


def build_script_gives_up():
    tmp = tempfile.mkdtemp(prefix="vipl-before-check-")
    try:
        env = dict(os.environ, VIPL_BENCH_BEFORE_REV="0" * 40)
        p = subprocess.run(["bash", os.path.join(HERE, "build_before.sh"), tmp], env=env,
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, f"build_before.sh without the revision exits 0 ({p.returncode})")
        why = os.path.join(tmp, "before", "why")
        text = open(why).read() if os.path.exists(why) else ""
        check("0" * 40 in text and "not in this clone" in text,
              f"it leaves why: {text.strip()!r}")
        check(not os.path.exists(os.path.join(tmp, "before", "revision")),
              "and no revision file")
        tool, said = pg_run.before_build(tmp)
        check(tool is None and said == text.strip(), f"before_build hands it on: {said!r}")
        tool, said = pg_run.before_build(os.path.join(tmp, "nothing"))
        check(tool is None and "not built" in said, f"no build at all: {said!r}")
    finally:
        shutil.rmtree(tmp)


def key(bench, link, placement="cross", size=1):
    return (bench, link, placement, size)


def ratios_per_round():
    # Round 1: now 300, before 100, unix 150; round 3: now 200, before 200, unix 100; in
    # round 2 only now and unix ran.  Medians of the rounds' values would give now/before
    # 250/150 = 1.67; the rounds' ratios 3.0 and 1.0 give 2.0; round 2 must not count.
    raw = {1: {key("pg_select1_tps", "pg-vipl"): 300.0,
               key("pg_select1_tps", "pg-vipl-before"): 100.0,
               key("pg_select1_tps", "pg-unix"): 150.0,
               key("pg_select1_cpu", "pg-vipl"): 10.0,
               key("pg_select1_cpu", "pg-vipl-before"): 20.0,
               key("pg_copy_mbps", "pg-vipl", "same", COPY_BYTES): 90.0,
               key("pg_copy_mbps", "pg-vipl-before", "same", COPY_BYTES): 100.0},
           2: {key("pg_select1_tps", "pg-vipl"): 1000.0,
               key("pg_select1_tps", "pg-unix"): 10.0},
           3: {key("pg_select1_tps", "pg-vipl"): 200.0,
               key("pg_select1_tps", "pg-vipl-before"): 200.0,
               key("pg_select1_tps", "pg-unix"): 100.0,
               key("pg_select1_cpu", "pg-vipl"): 30.0,
               key("pg_select1_cpu", "pg-vipl-before"): 20.0}}
    rep = Rep(raw, {"notes": {"pg": {"before": "abc1234 2026-01-01 x", "before_built": True}}})
    rows = pg_before.comparisons(rep)
    check(len(rows) == 2, f"two figures compared ({len(rows)})")
    sel = next(r for r in rows if r["bench"] == "pg_select1")
    check(sorted(sel["speed"]) == [1.0, 3.0], f"now / before per round: {sel['speed']}")
    check(pg_before.median(sel["speed"]) == 2.0, "its median is 2.0")
    check(sorted(sel["now_unix"]) == [2.0, 2.0], f"now / unix in the same rounds: "
          f"{sel['now_unix']}")
    check(sorted(sel["cpu"]) == [0.5, 1.5], f"CPU now / before: {sel['cpu']}")
    t = pg_before.targets(rep)
    worst = t[0]
    check("COPY" in worst[0] and worst[1] == "0.90x" and worst[3] == "**no**" and
          worst[4] == "0/1", f"the worst speed is COPY, 1 core, 0.90x, missed: {worst}")
    check(t[1][1] == "1.45x" and t[1][3] == "**yes**", f"the median of figures: {t[1]}")
    pg_before.section(rep)
    check(any("abc1234" in str(x) for x in rep.lines), "the section names the revision")


def not_measured():
    rep = Rep({1: {key("pg_select1_tps", "pg-vipl"): 1.0}},
              {"notes": {"pg": {"before": "revision x is not in this clone's history",
                                "before_built": False}}})
    t = pg_before.targets(rep)
    check(len(t) == 1 and "not in this clone" in t[0][1] and t[0][3] == "n/a",
          f"a run without the link says why: {t}")


def main():
    build_script_gives_up()
    ratios_per_round()
    not_measured()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
