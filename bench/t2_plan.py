"""Table 2's plan (run.py part `table2`): the paper's figures, node settings, inter-node
links, workloads, fractions of remote transactions, durations, targets.

Declared once here; t2_nodes.py builds the nodes by it, t2_run.py measures by it,
t2_report.py reports by it.  The 2000 paper ran OLTP on a 2-node Oracle Parallel Server
and reports its throughput over one node's: 1.76x with UDP over Fast Ethernet, 1.73x with
UDP over the SAN, 1.98x with VIA.  Here a node is one PostgreSQL 15 instance and its
pgbench clients on one CPU; the nodes are partitions of one key space joined by PL/Proxy.
"""
import os

QUICK = os.environ.get("VIPL_BENCH_QUICK", "") not in ("", "0")
FULL = os.environ.get("VIPL_BENCH_FULL", "") not in ("", "0")

PAPER = [("UDP over Fast Ethernet", 1.76), ("UDP over the SAN", 1.73), ("VIA", 1.98)]
PAPER_LINK = {"tcp-veth": 1.76, "unix": 1.73, "vipl-shm": 1.98}  # what stands beside what

DB_NAME = "bench"
DB_USER = "postgres"
# pgbench -i -s per node (10: 1,000,000 accounts, 10 branches, 100 tellers), and pgbench
# clients per node.  The environment sizes the nodes of t2_host.py (docker/) only: the
# main job's report always uses 10 and 4, the figures beside which it is read.
SCALE = int(os.environ.get("VIPL_T2_SCALE", "10"))
CLIENTS = int(os.environ.get("VIPL_T2_CLIENTS", "4"))
NODES = int(os.environ.get("VIPL_T2_NODES", "2"))
PROXY_APP = "t2-proxy"  # application_name of every inter-node connection (PL/Proxy, dblink)

# Every node's postgresql.conf (name, value, why); the report prints them.
SETTINGS = [
    ("fsync", "off", "the interconnect is measured, not the disk"),
    ("synchronous_commit", "off", "commits do not wait for the WAL flush"),
    ("full_page_writes", "off", "less WAL per update (no crash safety needed)"),
    ("shared_buffers", "256MB", "a node's data (scale 10, ~160 MB with indexes) fits"),
    ("autovacuum", "off", "no background work during runs (vacuumed before each run)"),
    ("max_prepared_transactions", "16", "the two-phase-commit variant prepares on the peer"),
    ("max_connections", "40", "4 clients, a backend per peer backend, an administrator"),
    ("checkpoint_timeout", "1h", "no checkpoint during a run"),
    ("max_wal_size", "4GB", "no checkpoint during a run"),
    ("logging_collector", "off", "the server log goes to pg_ctl's -l file"),
]


def settings_conf():
    """SETTINGS as the lines appended to a node's postgresql.conf."""
    out = "\n# vipl-middleware bench, Table 2 (bench/t2_plan.py)\n"
    return out + "".join(f"{name} = '{value}'\n" for name, value, _ in SETTINGS)


class Link:
    """How one node's backends reach another node (PL/Proxy, dblink).  netns: every node in
    a network namespace of its own, joined by veth; vipl: servers under vipl-run; via: the
    peer's unix socket or its address (TCP)."""

    def __init__(self, name, label, netns, vipl, via, trans, env=None):
        self.name, self.label, self.netns, self.vipl = name, label, netns, vipl
        self.via, self.trans = via, trans  # trans: what `vipl-run --stat` must show
        self.env = env or {}  # the servers' environment (VIPL_DB_* settings)


# Nodes stand for hosts: with more nodes than CPUs two share one, where the interposer
# would keep their links on the kernel socket (db-interconnect/src/placement.h); the
# table measures each link's own transport.
NODE_LINK_ENV = {"VIPL_DB_ONE_CPU": "1"}

LINKS = [
    Link("tcp-veth", "TCP over veth (namespaces)", True, False, "tcp", "kernel"),
    Link("unix", "unix socket (one host)", False, False, "unix", "kernel"),
    Link("vipl-shm", "interconnect, shm provider (one host)", False, True, "unix", "shm",
         NODE_LINK_ENV),
    Link("vipl-tcp", "interconnect, tcp provider over veth", True, True, "tcp", "tcp",
         NODE_LINK_ENV),
]
LINK = {link.name: link for link in LINKS}
BASE = "one-node"  # the CSV's transport of the 1-node baseline


class Workload:
    """local: the script of a transaction on the node's own rows; remote: the one that
    reaches a peer (PL/Proxy, or dblink with two-phase commit)."""

    def __init__(self, name, label, local, remote):
        self.name, self.label, self.local, self.remote = name, label, local, remote


_SETUP = """\\set aid random(1, :naccounts)
\\set bid random(1, :nbranches)
\\set tid random(1, :ntellers)
\\set delta random(-5000, 5000)
"""
_PEER = "\\set peer (:node + random(1, :nodes - 1)) % :nodes\n"
_TAIL = """UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, anode)
  VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP, {anode});
END;
"""
TPCB_LOCAL = _SETUP + """BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
""" + _TAIL.format(anode=":node")
# The account lives on the peer: one PL/Proxy call updates it there and returns it.
TPCB_REMOTE = _SETUP + _PEER + """BEGIN;
SELECT t2_update(:peer, :aid, :delta);
""" + _TAIL.format(anode=":peer")
RO_LOCAL = "\\set aid random(1, :naccounts)\n" \
    "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
RO_REMOTE = "\\set aid random(1, :naccounts)\n" + _PEER + "SELECT t2_balance(:peer, :aid);\n"
# Two-phase commit: the peer's update joins the local transaction through dblink, is
# prepared on the peer before the local commit and committed there after it.
TPC2_REMOTE = _SETUP + _PEER + """BEGIN;
SELECT t2_prepare(:peer, :aid, :delta) AS gid \\gset
""" + _TAIL.format(anode=":peer") + "SELECT t2_commit_prepared(:peer, :gid);\n"
PING = "\\set peer (:node + random(1, :nodes - 1)) % :nodes\nSELECT t2_ping(:peer);\n"

WORKLOADS = [
    Workload("tpcb", "TPC-B-like", TPCB_LOCAL, TPCB_REMOTE),
    Workload("ro", "read-only point selects", RO_LOCAL, RO_REMOTE),
]
TWO_PC = Workload("2pc", "TPC-B-like, remote part by dblink + two-phase commit", TPCB_LOCAL,
                  TPC2_REMOTE)

# Remote fractions (%): the CSV's size column.
if FULL:
    P_VALUES = [0, 1, 5, 10, 25, 50]
elif QUICK:
    P_VALUES = [0, 10]
else:
    P_VALUES = [0, 10, 25, 50]
P_2PC = P_VALUES[1:] if FULL else [10]

# Rounds of this part: run.py's rounds are spread over them (the part runs in ROUNDS of
# them, evenly spaced), so the main job's 7 rounds do not make this part 7 times longer.
ROUNDS = int(os.environ.get("VIPL_T2_ROUNDS", "1" if QUICK else ("5" if FULL else "3")))
BASELINES = 2  # 1-node runs per workload and round: first and last of the workload's runs

# Durations.  Every run restarts the nodes (pg_ctl stop -m fast, start), vacuums, empties
# pgbench_history and prewarms (pg_prewarm) the accounts, then runs pgbench
# -T PGBENCH_S + END_S on every node at once.  A run counts the transactions every node's
# -l log shows completed between WARM_S after the last node's first logged transaction
# and END_S before pgbench's end.  END_S is the time of the checks of the inter-node
# connections, made while every one is still open: on two busy cores, with the backends
# spinning, starting the few programs they take can take a quarter of a second.
PGBENCH_S = int(os.environ.get("VIPL_T2_SECONDS", "3" if FULL else "2"))
WARM_S = 0.3
END_S = 1  # whole seconds: pgbench's -T
PING_S = 2  # the PL/Proxy SELECT 1 round trip: one client, node 0 only
RUN_TIMEOUT_S = 40


# Where a remote operation's extra CPU goes (t2_run.py's breakdown, after the rounds, not
# in --quick): the read-only workload at p = 0 and p = BREAKDOWN_P on each of
# BREAKDOWN_LINKS, every server process of both nodes sampled by perf record
# (perf_profile.py's parts); a part's extra per remote read = (its CPU per transaction at
# p - at 0) / p.  Target: the link's part over vipl-shm <= LINK_PART_WANTED x unix's.
BREAKDOWN_LINKS = ["unix", "vipl-shm", "tcp-veth"]
BREAKDOWN_P = 50
LINK_PART_WANTED = 0.4
# A breakdown run is a single sample of parts a few microseconds per transaction wide: it
# gets a window 2 s longer than the rounds' (about 1.5 s), four times the samples, for
# 12 s more in all.
BREAKDOWN_S = PGBENCH_S + 2


class Target:
    """speedup of link (minus speedup of base, if any) >= wanted, at workload and p."""

    def __init__(self, text, workload, p, link, base, wanted):
        self.text, self.workload, self.p = text, workload, p
        self.link, self.base, self.wanted = link, base, wanted

    def met(self, a, b):
        return (a - (b or 0)) >= self.wanted


def _targets():
    t = [Target("TPC-B-like, p=10: speedup over one node, vipl-shm", "tpcb", 10, "vipl-shm",
                None, 1.9),
         Target("TPC-B-like, p=50: speedup, vipl-shm - unix", "tpcb", 50, "vipl-shm", "unix",
                0.05),
         Target("read-only, p=10: speedup, vipl-shm - unix", "ro", 10, "vipl-shm", "unix",
                0.06),
         Target("read-only, p=10: speedup, vipl-shm - tcp-veth", "ro", 10, "vipl-shm",
                "tcp-veth", 0.10)]
    for w in WORKLOADS:
        for link in LINKS:
            t.append(Target(f"{w.label}, p=0: speedup over one node, {link.name}", w.name, 0,
                            link.name, None, 1.9))
    return t


TARGETS = _targets()
