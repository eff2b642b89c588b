#!/usr/bin/env python3
"""Table 2 on N real hosts (or containers): one node per host, driven by this script on
each host.  Addresses come from the environment:

  VIPL_T2_HOSTS=host0:port0,host1:port1,...   every node as its peers reach it (TCP)
  VIPL_T2_NODE=i                              this host's node (0-based)
  VIPL_T2_VIPL_RUN=/path/to/vipl-run          (optional) the servers ride the
                                              interconnect's tcp provider

Usage: t2_host.py init DIR | start DIR | run DIR WORKLOAD P SECONDS | stop DIR
  init   initdb, pgbench -i -s 10, Table 2's schema (t2_schema.py) in DIR (as postgres)
  start  the server on this host's port, listening on every address, pinned to CPU 0;
         under vipl-run with VIPL_DB_REMOTE naming every node when VIPL_T2_VIPL_RUN is set
  run    pgbench on this node (4 clients, -M prepared): WORKLOAD tpcb, ro or 2pc, P %
         remote; prints `tps local remote lat_p50_local lat_p50_remote` of its log and
         the inter-node connections open at the end (and how they rode, under vipl-run)
  stop   stops the server
Start every node first, then `run` on every host at the same moment (e.g. ssh in
parallel); the cluster's speedup is the sum of the hosts' TPS over one node's TPS
(`run DIR tpcb 0 S` with only node 0 running, VIPL_T2_HOSTS naming just it).
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

import t2_plan as plan
import t2_schema as schema
from pg_instance import PgError, as_postgres, pg, sh
from pg_proc import vipl_stat
from t2_measure import percentile, read_log, write_scripts
from t2_nodes import Node, env_hosts, make_dir


class Host:
    def __init__(self, folder):
        text = os.environ.get("VIPL_T2_HOSTS", "")
        self.n = len(text.split(",")) if text else 0
        self.hosts = env_hosts(self.n) if self.n else None
        if not self.hosts:
            raise PgError("VIPL_T2_HOSTS is not set (host:port of every node)")
        self.me = int(os.environ.get("VIPL_T2_NODE", "-1"))
        if not 0 <= self.me < self.n:
            raise PgError(f"VIPL_T2_NODE must be 0..{self.n - 1}")
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
            for name, value, _ in plan.SETTINGS:
                fh.write(f"{name} = '{value}'\n")
        with open(os.path.join(self.node.data, "pg_hba.conf"), "a") as fh:
            # The peers, by the subnets this host is on (names work too); no password.
            fh.write("host all all samenet trust\n")
        self.start()
        self.node.admin(f"CREATE DATABASE {plan.DB_NAME}", db="postgres")
        sh([pg("pgbench"), "-i", "-q", "-s", str(plan.SCALE), "-h", self.folder, "-p",
            str(self.node.port), "-U", plan.DB_USER, plan.DB_NAME], timeout=600)
        self.node.admin(*schema.TEMPLATE_SQL)
        self.node.admin(*schema.cluster_sql(self.me, self.hosts))
        self.node.admin("VACUUM ANALYZE")
        self.stop()

    def start(self):
        env, wrap = [], []
        if self.vipl_run:
            wrap = [self.vipl_run]
            env = ["VIPL_DB_REMOTE=" + ",".join(f"tcp:{h}:{p}" for h, p in self.hosts)]
        opts = f"-p {self.node.port} -k {self.folder} -c listen_addresses='*'"
        sh(as_postgres(["env"] + env + ["taskset", "-c", "0"] + wrap +
                       [pg("pg_ctl"), "-D", self.node.data, "-l", self.node.log, "-w", "-o",
                        opts, "start"]), timeout=90)

    def stop(self):
        sh(as_postgres([pg("pg_ctl"), "-D", self.node.data, "-m", "fast", "-w", "stop"]),
           timeout=90)

    def run(self, workload, p, seconds):
        w = {x.name: x for x in plan.WORKLOADS + [plan.TWO_PC]}[workload]
        self.node.admin(*schema.reset_sql())
        work = tempfile.mkdtemp(prefix="vipl-t2-host-")
        paths = write_scripts(work, {"local": w.local, "remote": w.remote})
        prefix = os.path.join(work, "log")
        scale = plan.SCALE
        argv = ["taskset", "-c", "0", pg("pgbench"), "-n", "-M", "prepared", "-j", "1", "-c",
                str(plan.CLIENTS), "-T", str(seconds), "-l", "--log-prefix", prefix, "-h",
                self.folder, "-p", str(self.node.port), "-U", plan.DB_USER,
                "-D", f"node={self.me}", "-D", f"nodes={self.n}",
                "-D", f"naccounts={100000 * scale}", "-D", f"nbranches={scale}",
                "-D", f"ntellers={10 * scale}", "-f", f"{paths['local']}@{100 - p}"]
        if p > 0:
            argv += ["-f", f"{paths['remote']}@{p}"]
        p_run = subprocess.Popen(argv + [plan.DB_NAME], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True,
                                 env=dict(os.environ, PGSSLMODE="disable"))
        time.sleep(seconds / 2)  # the inter-node connections are open: how they went
        rows = self.node.admin(f"SELECT coalesce(host(client_addr), 'local'), count(*) FROM "
                               f"pg_stat_activity WHERE application_name = "
                               f"'{plan.PROXY_APP}' GROUP BY 1")
        rode = []
        if self.vipl_run:
            stat = vipl_stat(self.vipl_run, self.node.processes())
            rode = [r["trans"] for r in stat.values() if r["role"] == "client"]
        out, _ = p_run.communicate(timeout=seconds + 60)
        if p_run.returncode != 0:
            raise PgError(f"pgbench: exit {p_run.returncode}: {out.strip()[-300:]}")
        done = []
        for name in os.listdir(work):
            if name.startswith("log."):
                done += read_log(os.path.join(work, name))
        if not done:
            raise PgError("pgbench logged nothing")
        span = max(t for t, _, _ in done) - min(t for t, _, _ in done)
        lat = {s: sorted(us for _, us, x in done if x == s) for s in (0, 1)}
        print(f"tps {len(done) / span:.1f} local {len(lat[0])} remote {len(lat[1])} "
              f"lat_p50_local {percentile(lat[0], 0.5)} lat_p50_remote "
              f"{percentile(lat[1], 0.5)}")
        print("inter-node connections served here: " + (", ".join(rows.split()) or "none"))
        if self.vipl_run:
            print("outgoing inter-node connections: " + (", ".join(sorted(rode)) or "none"))
        shutil.rmtree(work, ignore_errors=True)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("init", "start", "run", "stop"):
        sys.exit(__doc__)
    try:
        host = Host(sys.argv[2])
        if sys.argv[1] == "run":
            if len(sys.argv) != 6:
                sys.exit(__doc__)
            host.run(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        else:
            getattr(host, sys.argv[1])()
    except PgError as e:
        sys.exit(f"t2_host.py: {e}")


if __name__ == "__main__":
    main()
