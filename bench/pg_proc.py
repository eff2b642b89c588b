"""What the database section reads of running processes: CPU time and context switches
(/proc), the interconnect's connection table (vipl-run --stat), perf stat's counts.

A Snap is taken at both ends of a measured window; the differences over the processes
present at both ends, divided by the transactions of the window, are the per-transaction
figures.  PostgreSQL's processes and pgbench (-j 1) are single-threaded, so a process's
main task is the whole process.
"""
import os
import select
import signal
import subprocess
import time


class ProbeError(Exception):
    pass


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def cpu_ns(pid):
    """Time on a CPU, ns (schedstat's first field: exact, unlike stat's clock ticks)."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


TICK_NS = 10**9 // os.sysconf("SC_CLK_TCK")


def reaped_ns(pid):
    """CPU time of the children pid waited for (stat's cutime + cstime), ns: a backend
    that ended within a window is counted there, through its postmaster."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[13]) + int(f[14])) * TICK_NS  # fields 16, 17 of proc(5)
    except (OSError, ValueError, IndexError):
        return None


def switches(pid):
    """Voluntary + involuntary context switches."""
    try:
        n = 0
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    n += int(line.split()[1])
        return n
    except (OSError, ValueError):
        return None


STAT_FIELDS = ["bytes_in", "bytes_out", "calls_in", "calls_out", "msgs_in", "msgs_out",
               "spins", "sleeps"]


def vipl_stat(tool, pids):
    """{(pid, fd): row} of `vipl-run --stat PID...`: role, trans and the counters."""
    if not tool or not pids:
        return {}
    try:
        out = subprocess.run([tool, "--stat"] + [str(p) for p in pids], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProbeError(f"vipl-run --stat: {e}")
    rows = {}
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) != 5 + len(STAT_FIELDS) or not f[0].isdigit():
            continue
        row = dict(role=f[2], trans=f[3])
        row.update(zip(STAT_FIELDS, map(int, f[5:])))
        rows[(int(f[0]), int(f[1]))] = row
    return rows


class Snap:
    """One end of a window: the time, and what each process had used by then."""

    def __init__(self, server, client, stat_tool):
        self.t = time.time()
        self.cpu = {p: cpu_ns(p) for p in server + client}
        self.reaped = {p: reaped_ns(p) for p in server}
        self.cs = {p: switches(p) for p in server + client}
        self.stat = vipl_stat(stat_tool, server + client)


def grown(a, b, field, pids):
    """How much field (cpu, cs) grew from Snap a to b over pids present at both ends."""
    da, db = getattr(a, field), getattr(b, field)
    return sum(db[p] - da[p] for p in pids
               if da.get(p) is not None and db.get(p) is not None)


def stat_grown(a, b, pids):
    """The connection table's counters grown over the window, for pids' connections."""
    tot = dict.fromkeys(STAT_FIELDS, 0)
    for key, row in b.stat.items():
        if key[0] in pids and key in a.stat:
            for f in STAT_FIELDS:
                tot[f] += row[f] - a.stat[key][f]
    return tot


class PerfControl:
    """A perf command started disabled (-D -1) that takes enable / disable on a control
    FIFO; each command's acknowledgement marks when counting started or stopped, so what
    perf saw and the transactions are taken over the same interval."""

    def __init__(self, workdir, tag):
        ctl, ack = (os.path.join(workdir, f"perf-{tag}.{x}") for x in ("ctl", "ack"))
        for path in (ctl, ack):
            os.mkfifo(path)
        # Both FIFOs held read-write here: opening never blocks, even if perf never starts.
        self.ctl = os.open(ctl, os.O_RDWR)
        self.ack = os.open(ack, os.O_RDWR)
        self.control = ["-D", "-1", "--control", f"fifo:{ctl},{ack}"]

    def command(self, word, timeout=5.0):
        os.write(self.ctl, (word + "\n").encode())
        ready, _, _ = select.select([self.ack], [], [], timeout)
        if not ready:
            raise ProbeError(f"perf did not acknowledge {word!r} within {timeout:g} s")
        os.read(self.ack, 64)
        return time.time()

    def stop(self, what):
        """SIGINT to perf, then its stderr; the FIFOs closed."""
        try:
            if self.p.poll() is None:
                self.p.send_signal(signal.SIGINT)
            _, err = self.p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.communicate()
            raise ProbeError(f"perf {what} did not stop")
        finally:
            os.close(self.ctl)
            os.close(self.ack)
        return err or ""


# The system calls counted one by one beside the total: a socket's (sendto, recvfrom,
# poll) against the interconnect's doorbell (write, read of an eventfd) and sleep (ppoll,
# epoll); sched_yield from its spin, openat and close from its look at the CPU's contention
# (/proc/thread-self/schedstat, read too).  Those this kernel traces (tracefs mounted).
CALLS = ["read", "write", "sendto", "recvfrom", "poll", "ppoll", "epoll_wait", "epoll_pwait",
         "epoll_pwait2", "futex", "sched_yield", "openat", "close"]


def traced_calls():
    """The CALLS whose sys_enter tracepoint exists here; [] when tracefs is not mounted."""
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        base = os.path.join(root, "events", "syscalls")
        if os.path.isdir(base):
            return [c for c in CALLS if os.path.isdir(os.path.join(base, f"sys_enter_{c}"))]
    return []


def call_event(call):
    return f"syscalls:sys_enter_{call}"


class Perf(PerfControl):
    """perf stat attached to pids, counting only between enable() and disable(): context
    switches, system calls, and the system calls of CALLS one by one."""
    EVENTS = ["context-switches", "raw_syscalls:sys_enter"]

    def __init__(self, tool, pids, workdir, tag):
        super().__init__(workdir, tag)
        self.out = os.path.join(workdir, f"perf-{tag}.csv")
        self.pids = pids
        events = self.EVENTS + [call_event(c) for c in traced_calls()]
        self.p = subprocess.Popen(
            [tool, "stat", "-x,", "--per-thread"] + self.control +
            ["-e", ",".join(events), "-p", ",".join(map(str, pids)), "-o", self.out],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)

    def finish(self):
        """Stops perf; {pid: {event: count}}."""
        err = self.stop("stat")
        counts = {}
        try:
            with open(self.out) as fh:
                lines = fh.read().splitlines()
        except OSError:
            raise ProbeError("perf stat wrote nothing: " + (err or "").strip()[-200:])
        for line in lines:
            f = line.split(",")
            if len(f) < 4 or line.startswith("#") or "-" not in f[0]:
                continue
            pid = f[0].rsplit("-", 1)[1]
            if not pid.isdigit():
                continue
            n = int(f[1]) if f[1].isdigit() else 0  # "<not counted>": never ran
            counts.setdefault(int(pid), {})[f[3]] = n
        return counts


def sleep_until(t):
    d = t - time.time()
    if d > 0:
        time.sleep(d)
