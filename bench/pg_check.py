#!/usr/bin/env python3
"""Checks the database section's accounting of a workload that connects for every
transaction (ctest "bench: the database section's reconnecting workload"):
  - pg_proc.reaped_ns counts the CPU of a child once it was waited for (a backend that
    ended within a window counts through its postmaster), and Snap/grown carry it;
  - PgPart.check_links takes one connection of such a client that rode the link's
    transport (the others may still be negotiating: kernel), and fails when none did.
Usage: pg_check.py   (exit 0 = every check held)
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_kit import Checks  # noqa: E402
import pg_plan  # noqa: E402
import pg_run  # noqa: E402
from pg_proc import Snap, grown, reaped_ns  # noqa: E402

check = Checks()
BUSY_S = 0.3


def reaped_cpu():
    me = os.getpid()
    before = Snap([me], [], None)
    # A child that runs on a CPU for BUSY_S, then is waited for.
    subprocess.run([sys.executable, "-c", f"import time\nt = time.process_time()\n"
                    f"while time.process_time() - t < {BUSY_S}: pass"], check=True)
    after = Snap([me], [], None)
    got = grown(before, after, "reaped", [me]) / 1e9
    check(BUSY_S * 0.8 <= got <= BUSY_S * 3, f"a waited-for child's CPU is reaped: {got:.3f} s")
    # One still running is not counted yet.
    p = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                          "while time.process_time() - t < 0.2: pass\ntime.sleep(30)"])
    try:
        time.sleep(0.5)
        a = reaped_ns(me)
        check(a == reaped_ns(me) and a is not None, "a live child is not reaped time")
    finally:
        p.kill()
        p.wait()
    check(reaped_ns(2**22 + 12345) is None, "no such process: None")


class Inst:
    def __init__(self, link):
        self.link = link


def check_links():
    part = pg_run.PgPart.__new__(pg_run.PgPart)
    inst = Inst(pg_plan.LINK["pg-vipl"])
    client = 4242

    def window(*trans):
        w = pg_run.Window.__new__(pg_run.Window)
        w.client = [client]
        w.seen = {(client, 10 + i): {"trans": t} for i, t in enumerate(trans)}
        w.s2 = type("S", (), {"stat": {}})()
        return w

    def passes(w):
        try:
            part.check_links(inst, w, 1, "cross", reconnects=True)
            return True
        except pg_run.PgError:
            return False

    check(passes(window("kernel", "shm")), "one of the connections rode shm: counts")
    check(not passes(window("kernel", "kernel")), "none rode shm across cores: fails")
    check(not passes(window()), "no connection seen: fails")


def main():
    reaped_cpu()
    check_links()
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
