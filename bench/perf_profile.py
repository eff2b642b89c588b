"""Where server CPU goes, by component: perf record (cpu-clock samples) attached to a set of
processes between enable and disable, each sample then put in one of PARTS by the object
it ran in.  Table 2 takes these per transaction to split a remote operation's extra CPU.
"""
import os
import subprocess

from pg_proc import PerfControl, ProbeError

# One sample per PERIOD_NS of CPU a process runs (cpu-clock counts nanoseconds): a sample
# stands for exactly that much CPU; ~6,000 samples in Table 2's ~1.5 s window on two CPUs.
PERIOD_NS = 500_000
# (part, label, how a shared object's name is matched): the first match takes a sample.
PARTS = [
    ("link", "the link: kernel (system calls, wake-ups, the socket or veth path) and the "
     "interconnect's libraries", lambda d: d.startswith("[kernel") or
     d.startswith(("libvipl.so", "libvipl-db.so"))),
    ("libpq", "libpq (the caller's client library)", lambda d: d.startswith("libpq.so")),
    ("plproxy", "PL/Proxy", lambda d: d.startswith("plproxy")),
    ("postgres", "PostgreSQL itself: the peer's parsing, planning and execution, and the "
     "caller's function call", lambda d: d == "postgres"),
    ("other", "libc and the rest", lambda d: True),
]


def part_of(dso):
    return next(name for name, _, match in PARTS if match(dso))


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
                [self.tool, "report", "-i", self.out, "--stdio", "-n", "--sort", "dso", "-q",
                 "--no-children"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            raise ProbeError(f"perf report: {e}")
        finally:
            if os.path.exists(self.out):
                os.unlink(self.out)
        if rep.returncode != 0:
            raise ProbeError("perf report: " + (rep.stderr or err).strip()[-200:])
        return parts_of_report(rep.stdout)


def parts_of_report(text):
    """perf report --stdio -n --sort dso lines ("  45.72%  1234  postgres") as {part: ns}."""
    out = {name: 0 for name, _, _ in PARTS}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 3 or not f[0].endswith("%") or not f[1].isdigit():
            continue
        out[part_of(" ".join(f[2:]))] += int(f[1]) * PERIOD_NS
    return out
