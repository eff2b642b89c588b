"""One Table 2 run: the nodes restarted for a link, pgbench on the driving nodes at once,
a common measured window, and the evidence of how the inter-node connections went.

measure() returns a Run: per node, the transactions its pgbench -l log shows completed in
the window (completion time, latency us, script number: 0 = local, 1 = remote); the CPU
time of every running node's server processes (postmaster and all its children,
/proc/<pid>/schedstat) over the window; and the inter-node connections seen while open
at the window's end (PL/Proxy's and dblink's, application_name t2-proxy): their count and
client addresses per node (pg_stat_activity), and for vipl links the transport of every
backend's outgoing connection (`vipl-run --stat`).  A vipl link whose connections rode
the kernel, or a remote fraction with no inter-node connection, raises PgError.
"""
import math
import os
import subprocess
import tempfile
import time

import t2_plan as plan
from pg_instance import PgError, SlowStart, pg
from perf_profile import Profile
from pg_proc import Perf, ProbeError, cpu_ns, sleep_until, vipl_stat
from t2_nodes import parallel


class Run:
    def __init__(self):
        self.t1 = self.t2 = None
        self.done = {}  # node -> [(t, us, script)] in the window
        self.cpu_ns = 0
        self.conns = 0  # inter-node connections, server ends (pg_stat_activity)
        self.rode = 0  # vipl links: outgoing connections on the link's transport
        self.kernel = 0  # vipl links: outgoing connections that stayed on the kernel
        self.addrs = set()
        self.perf = None  # {event: count} over the window, when perf counted
        self.parts = None  # {part: CPU ns} over the window, when perf sampled

    def count(self, script=None):
        return sum(1 for txs in self.done.values() for _, _, s in txs
                   if script is None or s == script)

    def tps(self):
        return self.count() / (self.t2 - self.t1)

    def latencies(self, script):
        return sorted(us for txs in self.done.values() for _, us, s in txs if s == script)


def write_scripts(folder, texts):
    """{name: path} of script files written into folder."""
    paths = {}
    for name, text in texts.items():
        paths[name] = os.path.join(folder, f"{name}.sql")
        with open(paths[name], "w") as fh:
            fh.write(text)
    return paths


def pgbench_argv(host, port, me, n, scale, scripts, clients, seconds, prefix):
    """pgbench of node me of n (every node's one, on one host or many).  scripts:
    [(path, weight)]; a weight of 0 leaves the script out."""
    argv = [pg("pgbench"), "-n", "-M", "prepared", "-j", "1", "-c", str(clients), "-T",
            str(seconds), "-l", "--log-prefix", prefix, "-h", host, "-p", str(port),
            "-U", plan.DB_USER, "-D", f"node={me}", "-D", f"nodes={n}",
            "-D", f"naccounts={100000 * scale}", "-D", f"nbranches={scale}",
            "-D", f"ntellers={10 * scale}"]
    for path, weight in scripts:
        if weight > 0:
            argv += ["-f", f"{path}@{weight}"]
    return argv + [plan.DB_NAME]


def pgbench_cmd(cluster, node, scripts, clients, seconds, prefix):
    """The node's pgbench on its CPU, END_S past the window of seconds."""
    return ["taskset", "-c", str(node.cpu)] + pgbench_argv(
        node.dir, node.port, node.idx, cluster.n, cluster.scale, scripts, clients,
        seconds + plan.END_S, prefix)


def measure(cluster, link, active, drivers, scripts, clients, seconds, logdir,
            expect_remote, keep_history=False, perf=None, profile=False):
    """link None: the 1-node baseline.  active: how many nodes run; drivers: the nodes
    whose pgbench runs.  perf: the perf tool, to count the servers' system calls and
    context switches over the window (run.perf: {event: count}, the window then being
    perf's own, from its enable to its disable); with profile, to sample where the
    servers' CPU goes instead (run.parts: {part: ns}, perf_profile.py)."""
    cluster.restart(link, active, keep_history)
    nodes = cluster.nodes[:active]
    run = Run()
    counter = profiled = None
    procs = {}
    outs = {}
    tag = f"{time.monotonic_ns()}"
    try:
        t_launch = time.time()
        for i in drivers:
            prefix = os.path.join(logdir, f"t2-{tag}-{i}")
            outs[i] = tempfile.TemporaryFile("w+", dir=logdir)
            procs[i] = (subprocess.Popen(
                pgbench_cmd(cluster, cluster.nodes[i], scripts, clients, seconds, prefix),
                stdout=outs[i], stderr=subprocess.STDOUT, text=True,
                env=dict(os.environ, PGSSLMODE="disable"), start_new_session=True), prefix)
        logs = {}
        deadline = t_launch + 15
        for i, (p, prefix) in procs.items():
            logs[i] = f"{prefix}.{p.pid}"  # taskset execs pgbench: the same pid
            while not (os.path.exists(logs[i]) and os.path.getsize(logs[i]) > 0):
                if p.poll() is not None or time.time() > deadline:
                    raise PgError(f"node {i}: pgbench did not get going: {tail(p, outs[i])}")
                time.sleep(0.005)
        t_go = time.time()
        end = t_launch + seconds  # pgbench's own clock starts later: END_S s at least
        if end - (t_go + plan.WARM_S) < 0.3:
            raise SlowStart(t_go - t_launch)
        if perf:  # attached before the window: its start-up is not counted
            sleep_until(t_go + plan.WARM_S / 2)
            tool = Profile if profile else Perf
            counter = tool(perf, [p for n in nodes for p in n.processes()], logdir, tag)
        sleep_until(t_go + plan.WARM_S)
        run.t1 = counter.command("enable") if perf else time.time()
        cpu1 = {p: cpu_ns(p) for n in nodes for p in n.processes()}
        sleep_until(end)
        run.t2 = counter.command("disable") if perf else time.time()
        if perf and profile:
            # Disabled, it samples nothing more: stopped and read after the checks below,
            # which must run while the connections are open.
            profiled, counter = counter, None
        elif perf:
            counts = counter.finish()
            counter = None
            run.perf = {}
            for per_pid in counts.values():
                for event, k in per_pid.items():
                    run.perf[event] = run.perf.get(event, 0) + k
        pids = [p for n in nodes for p in n.processes()]
        cpu2 = {p: cpu_ns(p) for p in pids}
        run.cpu_ns = sum(v - (cpu1.get(p) or 0) for p, v in cpu2.items() if v is not None)
        evidence(cluster, run, link, nodes, pids, procs)
        for i, (p, prefix) in procs.items():
            try:
                p.wait(timeout=plan.RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise PgError(f"node {i}: pgbench did not end within {plan.RUN_TIMEOUT_S} s")
            if p.returncode != 0:
                raise PgError(f"node {i}: pgbench: exit {p.returncode}: {tail(p, outs[i])}")
            done = read_log(logs[i])
            if not done or min(t for t, _, _ in done) > run.t1 or \
                    max(t for t, _, _ in done) < run.t2:
                raise PgError(f"node {i}: pgbench's log does not cover the window")
            run.done[i] = [x for x in done if run.t1 < x[0] <= run.t2]
        if profiled:
            prof, profiled = profiled, None
            prof.finish()
            run.parts = prof.parts()
    finally:
        if profiled:
            counter = profiled
        if counter:
            try:
                counter.finish()
            except ProbeError:
                pass
        for i, (p, prefix) in procs.items():
            if p.poll() is None:
                kill_group(p)
                p.wait()
            outs[i].close()
        for name in os.listdir(logdir):
            if name.startswith((f"t2-{tag}-", f"perf-{tag}.")):
                os.unlink(os.path.join(logdir, name))
    if expect_remote and run.conns == 0:
        raise PgError("no inter-node connection was open at the window's end")
    return run


def evidence(cluster, run, link, nodes, pids, procs):
    """How the inter-node connections went, read while they are open: pgbench runs END_S
    past the window.  Connections close only when pgbench ends and open lazily (a
    backend's first call to a node), so the transports are read before and after the
    count and the larger reading counts: neither race can fail a good link."""
    first = vipl_rows(cluster, link, pids)
    q = (f"SELECT coalesce(host(client_addr), 'local'), count(*) FROM pg_stat_activity "
         f"WHERE application_name = '{plan.PROXY_APP}' GROUP BY 1")
    for out in parallel([n.admin_cmd([q]) for n in nodes], "node", timeout=10):
        for line in out.split():
            addr, k = line.split("|")
            run.conns += int(k)
            run.addrs.add(addr)
    rows = max(first, vipl_rows(cluster, link, pids), key=len)
    late = [i for i, (p, _) in procs.items() if p.poll() is not None]
    if late:
        raise PgError(f"node {late[0]}: pgbench ended before its connections were counted "
                      f"(END_S {plan.END_S} s is too short for this host)")
    if link is None:
        return
    if link.via == "unix" and run.addrs - {"local"}:
        raise PgError(f"{link.name}: inter-node connections from {sorted(run.addrs)}, "
                      "not the unix socket")
    if link.via == "tcp":
        bad = run.addrs - set(cluster.net.addrs[:cluster.n])
        if bad:
            raise PgError(f"{link.name}: inter-node connections from {sorted(bad)}, not "
                          "across the veth link")
    if not link.vipl:
        return
    run.rode = sum(1 for r in rows if r["trans"] == link.trans)
    run.kernel = len(rows) - run.rode
    if run.kernel:
        raise PgError(f"{link.name}: {run.kernel} of {len(rows)} inter-node connections "
                      f"did not ride {link.trans} (" + ", ".join(
                          sorted(r["trans"] for r in rows if r["trans"] != link.trans)) + ")")
    if run.conns and run.rode < run.conns:
        # Every table of the host, for the one who has to find out which were missed.
        dump = subprocess.run([cluster.vipl_run, "--stat"], capture_output=True, text=True,
                              timeout=10).stdout
        raise PgError(f"{link.name}: {run.conns} inter-node connections open, {run.rode} "
                      f"seen riding {link.trans}; processes looked at: {pids}\n{dump}")


def vipl_rows(cluster, link, pids):
    """The backends' outgoing connections (vipl links; [] for the others)."""
    if link is None or not link.vipl:
        return []
    return [r for r in vipl_stat(cluster.vipl_run, pids).values() if r["role"] == "client"]


def read_log(path):
    """pgbench -l: client, number, latency us, script, epoch s, us (completion)."""
    done = []
    try:
        with open(path) as fh:
            for line in fh:
                f = line.split()
                if len(f) >= 6:
                    done.append((int(f[4]) + int(f[5]) / 1e6, float(f[2]), int(f[3])))
    except (OSError, ValueError) as e:
        raise PgError(f"pgbench's log: {e}")
    return done


def tail(p, out):
    if p.poll() is None:
        kill_group(p)
        p.wait()
    out.seek(0)
    return out.read().strip().replace("\n", " | ")[-300:]


def kill_group(p):
    try:
        os.killpg(p.pid, 9)
    except ProcessLookupError:
        pass


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]
