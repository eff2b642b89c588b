"""The database section's plan: server settings, links, workloads, durations, targets.

Declared once here; pg_run.py measures by it, pg_report.py reports by it.
"""
import os

PG_BIN = "/usr/lib/postgresql/15/bin"
DB_NAME = "bench"
DB_USER = "postgres"
SCALE = 8  # pgbench -i -s: 8 branches, so TPC-B's 8 clients rarely wait on one row
COPY_ROWS = 100000  # copy_src: char(999) rows, 1000 bytes a line out: 100 MB exactly
COPY_BYTES = COPY_ROWS * 1000

# Every instance's postgresql.conf (name, value, why); the report prints them.
SETTINGS = [
    ("fsync", "off", "the transport is measured, not the disk"),
    ("synchronous_commit", "off", "TPC-B commits do not wait for the WAL flush"),
    ("full_page_writes", "off", "less WAL per update (no crash safety needed)"),
    ("shared_buffers", "256MB", "the data (scale 8, ~130 MB) and the COPY table (~110 MB) fit"),
    ("autovacuum", "off", "no background work during runs; pgbench's tables are vacuumed "
     "and its history emptied before every pgbench run, on every link"),
    ("checkpoint_timeout", "1h", "no checkpoint during a run"),
    ("max_wal_size", "4GB", "no checkpoint during a run"),
    ("max_connections", "30", "8 clients and an administrator"),
    ("logging_collector", "off", "the server log goes to pg_ctl's -l file"),
]


PLACEMENTS = {"cross": (0, 1), "same": (0, 0)}  # (client CPU, server CPU)
PLACEMENT_LABEL = {"cross": "2 cores", "same": "1 core"}


class Link:
    """How a client reaches a server: host = same network namespace; vipl = both under
    vipl-run; via = the unix socket (the instance's socket directory) or TCP; before =
    under the vipl-run of bench/build_before.sh (the interconnect before the stream work);
    env: more environment for both ends; placements: where it runs (default all)."""

    def __init__(self, name, label, netns, vipl, via, before=False, env=None, placements=None):
        self.name, self.label, self.netns, self.vipl, self.via = name, label, netns, vipl, via
        self.before, self.env = before, dict(env or {})
        self.placements = placements or list(PLACEMENTS)

    def rides(self, placement):
        """What each client connection of this link may ride, a tuple.  The interconnect
        keeps a connection whose two ends share one CPU, in two scheduling groups, on the
        kernel socket (the interposer's placement rule; VIPL_DB_ONE_CPU=1 overrides it):
        pg_ctl starts the server in a session of its own, so with autogroups on (Debian's
        default) its clients on its CPU are in another group; with them off the cgroups
        decide, which this host's tools may or may not share.  The build before that rule
        always rode vipl."""
        if not self.vipl:
            return ("kernel",)
        vipl = "tcp" if self.netns else "shm"
        c, s = PLACEMENTS[placement]
        if c != s or self.before or self.env.get("VIPL_DB_ONE_CPU") == "1":
            return (vipl,)
        return ("kernel",) if autogroups_on() else ("kernel", vipl)


def autogroups_on():
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as fh:
            return fh.read().strip() == "1"
    except OSError:
        return False


LINKS = [
    Link("pg-unix", "unix socket", False, False, "unix"),
    Link("pg-tcp", "TCP loopback", False, False, "tcp"),
    Link("pg-vipl", "interconnect (over the unix socket; shm, on 1 core the kernel)", False, True,
         "unix"),
    Link("pg-tcp-ns", "TCP across namespaces", True, False, "tcp"),
    Link("pg-vipl-ns", "interconnect (tcp provider; on 1 core the kernel) across namespaces",
         True, True, "tcp"),
    Link("pg-vipl-before", "interconnect before the stream work", False, True, "unix",
         before=True),
    # What the placement rule keeps off on one core, measured beside it.
    Link("pg-vipl-1cpu", "interconnect held on shm (VIPL_DB_ONE_CPU=1)", False, True, "unix",
         env={"VIPL_DB_ONE_CPU": "1"}, placements=["same"]),
]
LINK = {link.name: link for link in LINKS}
# Links measured next to each other (the targets divide within a group).
LINK_GROUPS = [["pg-unix", "pg-vipl", "pg-tcp", "pg-vipl-before", "pg-vipl-1cpu"],
               ["pg-tcp-ns", "pg-vipl-ns"]]
# The before link runs in every other round (1, 3, 5, ...): four rounds of seven show its
# ratios to today's interconnect, measured beside it, and keep the main job within 30 min.
BEFORE_EVERY = 2


class Workload:
    """One pgbench run: name in the CSV (benchmark pg_<name>_<metric>, size = clients);
    args: pgbench's built-in script (-S; none: TPC-B), or script: a script file's text."""

    def __init__(self, name, label, clients, args=(), script=None, seconds=None, links=None,
                 every=1):
        self.name, self.label, self.clients = name, label, clients
        self.args, self.script = list(args), script
        # -C: a connection per transaction, so backends come and go within a window.
        self.reconnects = "-C" in self.args
        self.seconds = seconds  # pgbench -T; None: PGBENCH_S
        self.links = links  # the links it runs on; None: every link
        self.every = every  # runs in rounds 1, 1 + every, ...

    def runs(self, link, round_no):
        return (self.links is None or link in self.links) and (round_no - 1) % self.every == 0


# Every pgbench run: -M prepared, -j 1, -n; on every link, host and namespaces.
WORKLOADS = [
    Workload("select1", "SELECT 1, 1 client", 1, script="SELECT 1;\n"),
    Workload("ro", "-S, 1 client", 1, ["-S"]),
    Workload("ro", "-S, 8 clients", 8, ["-S"]),
    Workload("tpcb", "TPC-B, 8 clients", 8),
    # What a program without a connection pool pays: connect, authenticate, one point
    # select, disconnect (pgbench -C), so every set-up the interconnect adds is counted.
    # Two seconds: at a few hundred connections a second pgbench's log (stdio) shows its
    # first transactions only after ~0.4 s, where the window starts.  On the host's three
    # links in every other round (4 of the main job's 7): 15 s a round.
    Workload("conn", "-S, 1 client, a connection each", 1, ["-S", "-C"], seconds=2,
             links=["pg-unix", "pg-tcp", "pg-vipl"], every=2),
]
COPY_LABEL = "COPY 100 MB out"

# Percentiles of each run's transaction latencies kept in results.csv (pg_<w>_lat_q<q>):
# the report plots their medians over rounds as each link's latency distribution.
LAT_QUANTILES = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9]

# Durations.  pgbench -T takes whole seconds; each run measures the window from WARM_S
# after its first logged transactions (every client connected) to END_S before pgbench's
# own end, so connecting, preparing and pgbench's exit stay out of it (~0.8 s).  Measured
# here (SELECT 1, unix socket and interconnect, both placements, 6 runs each, load ~13):
# the TPS of -T 3 runs spread as much as of -T 1 runs (coefficient of variation 21-59 %
# against 12-42 %), and 0.8 s pieces of one -T 3 run as much again (25-62 %): the host's
# load moves within seconds, so short runs and more rounds beat long runs.  A round of
# the db part is then ~50 s (40 pgbench runs, 10 COPYs).
QUICK = os.environ.get("VIPL_BENCH_QUICK", "") not in ("", "0")
PGBENCH_S = 1
WARM_S = 0.1
END_S = 0.1
COPY_PAUSE_S = 0.15  # pg_sleep before and after the COPY: its CPU is sampled in them
COPY_RUNS = 3  # COPYs of each link a round, the links taking turns
RUN_TIMEOUT_S = 30

# Before this work (server CPU 1, pgbench CPU 0, -M prepared), design notes: TPS.
BEFORE = [("SELECT 1, 1 client, 2 cores", "select1", 1, "cross", 27000, 20000),
          ("SELECT 1, 1 client, 1 core", "select1", 1, "same", 33000, 22000),
          ("-S, 8 clients, 2 cores", "ro", 8, "cross", 18000, 15000)]


class Target:
    """metric of link / the same metric of base, in the same rounds: >= or < wanted."""

    def __init__(self, text, workload, clients, placement, metric, link, base, sense, wanted):
        self.text, self.workload, self.clients = text, workload, clients
        self.placement, self.metric, self.link, self.base = placement, metric, link, base
        self.sense, self.wanted = sense, wanted

    def key(self, link):
        return (f"pg_{self.workload}_{self.metric}", link, self.placement, self.clients)

    def met(self, r):
        return r >= self.wanted if self.sense == ">=" else r < self.wanted


def _targets():
    t = [Target("PostgreSQL SELECT 1, 1 client, 2 cores: TPS, interconnect / unix socket",
                "select1", 1, "cross", "tps", "pg-vipl", "pg-unix", ">=", 1.5),
         Target("PostgreSQL SELECT 1, 1 client, 2 cores: TPS, interconnect / TCP loopback",
                "select1", 1, "cross", "tps", "pg-vipl", "pg-tcp", ">=", 2.0),
         Target("PostgreSQL -S, 1 client, 2 cores: TPS, interconnect / unix socket",
                "ro", 1, "cross", "tps", "pg-vipl", "pg-unix", ">=", 1.3)]
    for w in WORKLOADS:
        t.append(Target(f"PostgreSQL {w.label}, 1 core: TPS, interconnect / unix socket",
                        w.name, w.clients, "same", "tps", "pg-vipl", "pg-unix", ">=", 1.0))
    t.append(Target(f"PostgreSQL {COPY_LABEL}, 1 core: MB/s, interconnect / unix socket",
                    "copy", COPY_BYTES, "same", "mbps", "pg-vipl", "pg-unix", ">=", 1.0))
    # The 8-client targets come with the brief's figures taken across cores (server CPU 1,
    # pgbench CPU 0); on one core the brief's rule is the 1.0x above, which these runs
    # meet by keeping connections on the kernel (Link.rides): 1.05x there would need
    # shared memory to beat the kernel on one CPU, which it cannot in two scheduling groups.
    for w in [w for w in WORKLOADS if w.clients == 8]:
        for p in ["cross"]:
            t.append(Target(f"PostgreSQL {w.label}, {PLACEMENT_LABEL[p]}: TPS, interconnect / "
                            "unix socket", w.name, w.clients, p, "tps", "pg-vipl", "pg-unix",
                            ">=", 1.05))
            t.append(Target(f"PostgreSQL {w.label}, {PLACEMENT_LABEL[p]}: CPU per transaction, "
                            "interconnect / unix socket", w.name, w.clients, p, "cpu",
                            "pg-vipl", "pg-unix", "<", 1.0))
    t.append(Target(f"PostgreSQL {COPY_LABEL}, 2 cores: MB/s, interconnect / unix socket",
                    "copy", COPY_BYTES, "cross", "mbps", "pg-vipl", "pg-unix", ">=", 1.5))
    t.append(Target("PostgreSQL SELECT 1, 1 client, 2 cores, across namespaces: TPS, tcp "
                    "provider / TCP", "select1", 1, "cross", "tps", "pg-vipl-ns", "pg-tcp-ns",
                    ">=", 1.3))
    t.append(Target("PostgreSQL SELECT 1, 1 client, 1 core, across namespaces: TPS, tcp "
                    "provider / TCP", "select1", 1, "same", "tps", "pg-vipl-ns", "pg-tcp-ns",
                    ">=", 0.95))
    return t


TARGETS = _targets()
