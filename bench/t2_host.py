#!/usr/bin/env python3
"""Table 2 on N real hosts (or containers): one node per host.  Addresses come from the
environment:

  VIPL_T2_HOSTS=host0:port0,host1:port1,...   every node as its peers reach it (TCP)
  VIPL_T2_NODE=i                              this host's node (0-based)
  VIPL_T2_VIPL_RUN=/path/to/vipl-run          (optional) start: the server rides the
                                              interconnect's tcp provider; drive: so do
                                              the clients
  VIPL_T2_CPU=c                               (optional) the CPU start and run pin to
                                              (default 0; empty: no pinning)
  VIPL_T2_SCALE, VIPL_T2_CLIENTS              (optional) pgbench -s of every node (10),
                                              clients per node (4): the same everywhere

Usage: t2_host.py init DIR | start DIR | run DIR WORKLOAD P SECONDS | stop DIR
                  | settings | remote-rule | prepare SOCKET_DIR PORT
                  | drive WORKLOAD P SECONDS
  init     initdb, Table 2's settings, then `prepare` (as postgres), in DIR
  start    the server on this host's port, listening on every address, pinned to
           VIPL_T2_CPU; under vipl-run with VIPL_DB_REMOTE naming every node when
           VIPL_T2_VIPL_RUN is set
  run      pgbench on this node (VIPL_T2_CLIENTS, -M prepared): WORKLOAD tpcb, ro or 2pc, P %
           remote; prints `tps local remote lat_p50_local lat_p50_remote` of its log and
           the inter-node connections open at the end (and how they rode, under vipl-run)
  stop     stops the server
  settings Table 2's server settings as postgresql.conf lines (for a server made elsewhere)
  remote-rule  VIPL_DB_REMOTE for the nodes (servers and clients name the same)
  prepare  on this node's running server (its socket directory and port): the bench
           database, pgbench -i -s VIPL_T2_SCALE, Table 2's schema (t2_schema.py) and, where it is
           installed, the vipl extension (pg_stat_vipl)
  drive    from any host (the bench container): pgbench against node 0 alone (P = 0:
           the one-node baseline), then against every node at once over TCP; prints each
           node's TPS, the cluster's speedup, and how every node's inter-node connections
           rode (pg_stat_vipl); exit 1 if a remote fraction made no inter-node connection
Start every node first, then `run` on every host at the same moment (e.g. ssh in
parallel), or `drive` once from anywhere; the cluster's speedup is the sum of the nodes'
TPS over one node's TPS.  docker/ runs `prepare` from its node entrypoint and `drive`
from its bench container.
"""
import ipaddress
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import t2_plan as plan
import t2_schema as schema
from pg_instance import PgError, as_postgres, pg, sh
from pg_proc import vipl_stat
from t2_measure import pgbench_argv, percentile, read_log, write_scripts
from t2_nodes import Node, env_hosts, make_dir


def hosts_from_env():
    text = os.environ.get("VIPL_T2_HOSTS", "")
    hosts = env_hosts(len(text.split(","))) if text else None
    if not hosts:
        raise PgError("VIPL_T2_HOSTS is not set (host:port of every node)")
    return hosts


def node_from_env(n):
    me = int(os.environ.get("VIPL_T2_NODE", "-1"))
    if not 0 <= me < n:
        raise PgError(f"VIPL_T2_NODE must be 0..{n - 1}")
    return me


def pinned(argv):
    cpu = os.environ.get("VIPL_T2_CPU", "0")
    return ["taskset", "-c", cpu] + argv if cpu else argv


def node_pgbench(host, port, me, n, workload, p, seconds, folder):
    """pgbench of node me (its scripts written into folder, its log there too)."""
    w = {x.name: x for x in plan.WORKLOADS + [plan.TWO_PC]}[workload]
    paths = write_scripts(folder, {"local": w.local, "remote": w.remote})
    return pgbench_argv(host, port, me, n, plan.SCALE,
                        [(paths["local"], 100 - p), (paths["remote"], p)], plan.CLIENTS,
                        seconds, os.path.join(folder, "log"))


def summary(folder):
    """(tps, local count, remote count, p50 local, p50 remote) of pgbench's logs in folder."""
    done = []
    for name in os.listdir(folder):
        if name.startswith("log."):
            done += read_log(os.path.join(folder, name))
    if not done:
        raise PgError("pgbench logged nothing")
    span = max(t for t, _, _ in done) - min(t for t, _, _ in done)
    lat = {s: sorted(us for _, us, x in done if x == s) for s in (0, 1)}
    return (len(done) / max(span, 1e-9), len(lat[0]), len(lat[1]), percentile(lat[0], 0.5),
            percentile(lat[1], 0.5))


def finish(proc, seconds):
    out, _ = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0:
        raise PgError(f"pgbench: exit {proc.returncode}: {out.strip()[-300:]}")


def start_pgbench(argv, vipl_run=None):
    env = dict(os.environ, PGSSLMODE="disable")
    return subprocess.Popen(([vipl_run] if vipl_run else []) + argv, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


class Host:
    def __init__(self, folder):
        self.hosts = hosts_from_env()
        self.n = len(self.hosts)
        self.me = node_from_env(self.n)
        self.vipl_run = os.environ.get("VIPL_T2_VIPL_RUN")
        self.folder = os.path.abspath(folder)
        self.node = Node(self.me, os.path.dirname(self.folder), self.hosts[self.me][1], 0)
        self.node.dir = self.folder
        self.node.data = os.path.join(self.folder, "data")
        self.node.log = os.path.join(self.folder, "server.log")

    def init(self):
        user = pwd.getpwnam(plan.DB_USER)
        make_dir(self.folder, user)
        sh(as_postgres([pg("initdb"), "-D", self.node.data, "-U", plan.DB_USER, "-A", "trust",
                        "-E", "UTF8", "--locale=C", "--no-sync"]), timeout=300)
        with open(os.path.join(self.node.data, "postgresql.conf"), "a") as fh:
            fh.write(plan.settings_conf())
        with open(os.path.join(self.node.data, "pg_hba.conf"), "a") as fh:
            # The peers, by the subnets this host is on (names work too); no password.
            fh.write("host all all samenet trust\n")
        self.start()
        prepare(self.node, self.me, self.hosts)
        self.stop()

    def start(self):
        env, wrap = [], []
        if self.vipl_run:
            wrap = [self.vipl_run]
            env = ["VIPL_DB_REMOTE=" + remote_rule(self.hosts)]
        opts = f"-p {self.node.port} -k {self.folder} -c listen_addresses='*'"
        sh(as_postgres(["env"] + env + pinned(wrap + [
            pg("pg_ctl"), "-D", self.node.data, "-l", self.node.log, "-w", "-o", opts,
            "start"])), timeout=90)

    def stop(self):
        sh(as_postgres([pg("pg_ctl"), "-D", self.node.data, "-m", "fast", "-w", "stop"]),
           timeout=90)

    def run(self, workload, p, seconds):
        self.node.admin(*schema.reset_sql())
        work = tempfile.mkdtemp(prefix="vipl-t2-host-")
        argv = node_pgbench(self.folder, self.node.port, self.me, self.n, workload, p, seconds,
                            work)
        p_run = start_pgbench(pinned(argv))
        time.sleep(seconds / 2)  # the inter-node connections are open: how they went
        rows = self.node.admin(f"SELECT coalesce(host(client_addr), 'local'), count(*) FROM "
                               f"pg_stat_activity WHERE application_name = "
                               f"'{plan.PROXY_APP}' GROUP BY 1")
        rode = []
        if self.vipl_run:
            stat = vipl_stat(self.vipl_run, self.node.processes())
            rode = [r["trans"] for r in stat.values() if r["role"] == "client"]
        finish(p_run, seconds)
        tps, nl, nr, pl, pr = summary(work)
        print(f"tps {tps:.1f} local {nl} remote {nr} lat_p50_local {pl} lat_p50_remote {pr}")
        print("inter-node connections served here: " + (", ".join(rows.split()) or "none"))
        if self.vipl_run:
            print("outgoing inter-node connections: " + (", ".join(sorted(rode)) or "none"))
        shutil.rmtree(work, ignore_errors=True)


def remote_rule(hosts):
    """VIPL_DB_REMOTE: every node's address rides the tcp provider.  The interconnect's
    patterns take addresses, not names: a node named by its host name (a container's
    service name) is matched by its port alone."""
    out = []
    for h, p in hosts:
        try:
            ipaddress.ip_address(h.strip("[]"))
            out.append(f"tcp:{h}:{p}")
        except ValueError:
            out.append(f"tcp:{p}")
    return ",".join(dict.fromkeys(out))


def prepare(node, me, hosts):
    """The bench database of node me on its running server (reached as node.admin does)."""
    node.admin(f"CREATE DATABASE {plan.DB_NAME}", db="postgres")
    sh([pg("pgbench"), "-i", "-q", "-s", str(plan.SCALE), "-h", node.dir, "-p",
        str(node.port), "-U", plan.DB_USER, plan.DB_NAME], timeout=600)
    node.admin(*schema.TEMPLATE_SQL)
    node.admin(*schema.cluster_sql(me, hosts))
    available = "SELECT count(*) FROM pg_available_extensions WHERE name = 'vipl'"
    if node.admin(available).strip() == "1":
        node.admin("CREATE EXTENSION IF NOT EXISTS vipl")
    node.admin("VACUUM ANALYZE")


def remote_node(i, host, port):
    node = Node(i, "/", port, 0)
    node.dir = host  # psql -h: a host name as well as a socket directory
    return node


def drive(workload, p, seconds):
    hosts = hosts_from_env()
    n = len(hosts)
    vipl_run = os.environ.get("VIPL_T2_VIPL_RUN")
    if vipl_run:  # the clients name the servers as the servers name each other
        os.environ.setdefault("VIPL_DB_REMOTE", remote_rule(hosts))
    nodes = [remote_node(i, h, port) for i, (h, port) in enumerate(hosts)]
    root = tempfile.mkdtemp(prefix="vipl-t2-drive-")
    try:
        return _drive(nodes, n, workload, p, seconds, vipl_run, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _drive(nodes, n, workload, p, seconds, vipl_run, root):
    def bench(which, pct, tag):
        for node in which:
            node.admin(*schema.reset_sql())
        procs = []
        for node in which:
            folder = os.path.join(root, f"{tag}{node.idx}")
            os.mkdir(folder)
            argv = node_pgbench(node.dir, node.port, node.idx, n, workload, pct, seconds,
                                folder)
            procs.append((node, folder, start_pgbench(argv, vipl_run)))
        seen = watch_connections(which, seconds) if pct > 0 else {}
        for _, _, proc in procs:
            finish(proc, seconds)
        return [(node, summary(folder)) for node, folder, _ in procs], seen

    first, _ = bench(nodes[:1], 0, "base")
    base = first[0][1]
    print(f"one node: node 0 tps {base[0]:.1f} ({workload}, p 0)")
    rows, seen = bench(nodes, p, "all")
    total = 0.0
    for node, (tps, nl, nr, pl, pr) in rows:
        total += tps
        print(f"node {node.idx}: tps {tps:.1f} local {nl} remote {nr} lat_p50_local {pl} "
              f"lat_p50_remote {pr}")
    print(f"cluster of {n}: tps {total:.1f} speedup {total / base[0]:.2f} "
          f"({workload}, p {p})")
    missing = False
    for node in nodes:
        text = seen.get(node.idx, "")
        print(f"node {node.idx} inter-node connections: {text or 'none'}")
        missing |= p > 0 and not text
    return 1 if missing else 0


def watch_connections(nodes, seconds):
    """How each node's inter-node connections ride, read while the run holds them open:
    halfway through, then again every 0.2 s for a node that shows none yet, until 85% of
    the run has passed (a node still without any gets what pg_stat_vipl shows instead, to
    say why)."""
    start = time.monotonic()
    time.sleep(seconds / 2)
    seen = {}
    while True:
        for node in nodes:
            if not seen.get(node.idx):
                seen[node.idx] = connections(node)
        if all(seen.values()):
            return seen
        if time.monotonic() - start > seconds * 0.85:
            for node in nodes:
                if not seen[node.idx]:
                    print(f"node {node.idx} shows no outgoing inter-node connection; all it "
                          f"shows: {connections(node, everything=True) or 'nothing'}")
            return seen
        time.sleep(0.2)


def connections(node, everything=False):
    """How node's own outgoing inter-node connections ride: pg_stat_vipl's client rows
    by transport where the vipl extension is there, else pg_stat_activity's count;
    everything: all of pg_stat_vipl's rows, by role and transport."""
    has = node.admin("SELECT count(*) FROM pg_extension WHERE extname = 'vipl'").strip() == "1"
    if has and everything:
        sql = ("SELECT v.role || ' ' || v.transport || ' ' || count(*) FROM pg_stat_vipl v "
               "GROUP BY v.role, v.transport ORDER BY 1")
    elif has:
        sql = ("SELECT v.transport || ' ' || count(*) || ' bytes ' || "
               "sum(v.bytes_in + v.bytes_out) FROM pg_stat_vipl v WHERE v.role = 'client' "
               "GROUP BY v.transport ORDER BY 1")
    else:
        sql = (f"SELECT 'unknown ' || count(*) FROM pg_stat_activity WHERE application_name "
               f"= '{plan.PROXY_APP}' HAVING count(*) > 0")
    return ", ".join(line for line in node.admin(sql).splitlines() if line)


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    argc = {"init": 3, "start": 3, "stop": 3, "run": 6, "settings": 2, "remote-rule": 2,
            "prepare": 4, "drive": 5}
    if argc.get(cmd) != len(sys.argv):
        sys.exit(__doc__)
    try:
        if cmd == "settings":
            sys.stdout.write(plan.settings_conf())
        elif cmd == "remote-rule":
            print(remote_rule(hosts_from_env()))
        elif cmd == "prepare":
            hosts = hosts_from_env()
            me = node_from_env(len(hosts))
            prepare(remote_node(me, sys.argv[2], int(sys.argv[3])), me, hosts)
        elif cmd == "drive":
            sys.exit(drive(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        else:
            host = Host(sys.argv[2])
            if cmd == "run":
                host.run(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
            else:
                getattr(host, cmd)()
    except PgError as e:
        sys.exit(f"t2_host.py: {e}")


if __name__ == "__main__":
    main()
