"""Where server CPU goes, by component: perf record (cpu-clock samples) attached to a set of
processes between enable and disable, each sample then put in one of PARTS by the object
it ran in (and, in the kernel, by the function).  Table 2 takes these per transaction to
split a remote operation's extra CPU.
"""
import os
import re
import subprocess

from pg_proc import PerfControl, ProbeError

# One sample per PERIOD_NS of CPU a process runs (cpu-clock counts nanoseconds): a sample
# stands for exactly that much CPU; ~14,000 in a breakdown run's ~3.5 s window on two CPUs.
PERIOD_NS = 500_000
# Kernel functions where the CPU comes back from a context switch or a wake-up: the
# switch ends in finish_task_switch(), and a wake-up's work (the run queue's lock, the
# inter-processor interrupt: a VM exit on a virtual machine) runs with interrupts off, so
# the timer's sample lands where the waker turns them back on.  Per message, a link pays
# these whenever its receiver sleeps, whatever carries the bytes.
SWITCH_SYMBOLS = ("finish_task_switch", "__schedule", "_raw_spin_unlock_irq",
                  "_raw_spin_unlock_irqrestore")


def kernel(dso):
    return dso.startswith("[kernel")


def switching(dso, sym):
    return kernel(dso) and sym.split(".")[0] in SWITCH_SYMBOLS


# (part, label, how a sample is matched by its object and function): the first match
# takes a sample.  LINK_PARTS together are the link.
PARTS = [
    ("switch", "the link's context switches and wake-ups: kernel samples in "
     "finish_task_switch() or where interrupts come back on after a wake-up (see "
     "SWITCH_SYMBOLS in bench/perf_profile.py)", switching),
    ("kernel", "the kernel's other work (system calls, the socket or veth path, the "
     "interconnect's doorbell and sleep)", lambda d, s: kernel(d)),
    ("vipl", "the interconnect's libraries (libvipl, libvipl-db)",
     lambda d, s: d.startswith(("libvipl.so", "libvipl-db.so"))),
    ("libpq", "libpq (the caller's client library)", lambda d, s: d.startswith("libpq.so")),
    ("plproxy", "PL/Proxy", lambda d, s: d.startswith("plproxy")),
    ("postgres", "PostgreSQL itself: the peer's parsing, planning and execution, and the "
     "caller's function call", lambda d, s: d == "postgres"),
    ("other", "libc and the rest", lambda d, s: True),
]
# The parts that make the link (the target compares their sum).
LINK_PARTS = ("switch", "kernel", "vipl")


def part_of(dso, sym):
    return next(name for name, _, match in PARTS if match(dso, sym))


class Profile(PerfControl):
    """perf record of pids, sampling only between enable() and disable()."""

    def __init__(self, tool, pids, workdir, tag):
        super().__init__(workdir, tag)
        self.tool = tool
        self.out = os.path.join(workdir, f"perf-{tag}.data")
        self.p = subprocess.Popen(
            [tool, "record", "-q", "-B", "-N", "-e", "cpu-clock", "-c", str(PERIOD_NS)] +
            self.control + ["-p", ",".join(map(str, pids)), "-o", self.out],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)

    def finish(self):
        """Stops perf (no build-id collection: quick)."""
        self.err = self.stop("record")

    def parts(self):
        """{part: CPU ns} over the enabled interval, from perf report (a second or so)."""
        err = self.err
        try:
            rep = subprocess.run(
                [self.tool, "report", "-i", self.out, "--stdio", "-n", "--sort", "dso,sym", "-q",
                 "--no-children"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            raise ProbeError(f"perf report: {e}")
        finally:
            if os.path.exists(self.out):
                os.unlink(self.out)
        if rep.returncode != 0:
            raise ProbeError("perf report: " + (rep.stderr or err).strip()[-200:])
        return parts_of_report(rep.stdout)


# A line of perf report --sort dso,sym -n: samples, object, [.] or [k], function.
REPORT_LINE = re.compile(r"^\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[.\]\s+(\S+)")


def parts_of_report(text):
    """perf report --stdio -n --sort dso,sym lines ("  45.72%  1234  postgres  [.] main")
    as {part: ns}."""
    out = {name: 0 for name, _, _ in PARTS}
    for line in text.splitlines():
        m = REPORT_LINE.match(line)
        if m:
            out[part_of(m.group(2), m.group(3))] += int(m.group(1)) * PERIOD_NS
    return out
