"""Table 2's nodes: N PostgreSQL 15 instances (copies of one template), node i on CPU
i mod ncpu, each (re)started for an inter-node link: in its own network namespace or
not, under vipl-run or not, listening on its address or only on its unix socket.

Every node runs on this host; its peers reach it by its unix socket or by its address
in the namespaces (t2_net.Bridge, or run.py's NetPair for two nodes).  On N real hosts
t2_host.py runs one node per host instead, addresses from VIPL_T2_HOSTS (env_hosts).
The servers run as `postgres` in /tmp/vipl-bench-t2-<pid>-*/nodeI, unix socket there.
"""
import os
import pwd
import shutil
import subprocess
import tempfile
import time

import t2_plan as plan
import t2_schema as schema
from pg_instance import (PgError, as_postgres, log_tail, pg, postmaster_pid, server_processes,
                         sh)

PG_CTL_WAIT_S = 60


class Node:
    def __init__(self, idx, root, port, cpu):
        self.idx, self.port, self.cpu = idx, port, cpu
        self.dir = os.path.join(root, f"node{idx}")  # also the unix socket directory
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.link = None  # the link it was started for; None: stopped

    def admin(self, *sql, db=plan.DB_NAME, timeout=120):
        """Plain psql over the node's unix socket (never under vipl-run)."""
        args = []
        for s in sql:
            args += ["-c", s]
        return sh([pg("psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.dir,
                   "-p", str(self.port), "-U", plan.DB_USER, "-d", db] + args, timeout=timeout)

    def admin_cmd(self, sql):
        args = [pg("psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.dir, "-p",
                str(self.port), "-U", plan.DB_USER, "-d", plan.DB_NAME]
        for s in sql:
            args += ["-c", s]
        return args

    def postmaster(self):
        return postmaster_pid(self.data, f"node {self.idx}", self.log)

    def processes(self):
        return server_processes(self.postmaster())

    def log_tail(self):
        return log_tail(self.log)


class Cluster:
    """The N nodes of a run, their addresses, and the commands that start and stop them."""

    def __init__(self, n, vipl_run, net=None, ports=None):
        self.n, self.vipl_run, self.net = n, vipl_run, net
        self.root = None
        self.nodes = []
        # Above the db part's ports (61000-64999), the kernel's ephemeral range and the
        # tcp provider's rendezvous ports.
        base = 65000 + os.getpid() % 400
        self.ports = ports or [base + i for i in range(n)]

    # ------------------------------------------------------------- setup
    def setup(self, scale=plan.SCALE):
        user = pwd.getpwnam(plan.DB_USER)
        cleanup_stale()
        self.root = tempfile.mkdtemp(prefix=f"vipl-bench-t2-{os.getpid()}-")
        os.chown(self.root, user.pw_uid, user.pw_gid)
        ncpu = os.cpu_count() or 1
        self.nodes = [Node(i, self.root, self.ports[i], i % ncpu) for i in range(self.n)]
        template = Node("-template", self.root, self.ports[0], 0)
        make_dir(template.dir, user)
        sh(as_postgres([pg("initdb"), "-D", template.data, "-U", plan.DB_USER, "-A", "trust",
                        "-E", "UTF8", "--locale=C", "--no-sync"]), timeout=300)
        with open(os.path.join(template.data, "postgresql.conf"), "a") as fh:
            fh.write(plan.settings_conf())
        with open(os.path.join(template.data, "pg_hba.conf"), "a") as fh:
            fh.write("host all all 10.0.0.0/8 trust\n")  # the namespaces' addresses
        self._start(template, None)
        try:
            template.admin(f"CREATE DATABASE {plan.DB_NAME}", db="postgres")
            sh([pg("pgbench"), "-i", "-q", "-s", str(scale), "-h", template.dir, "-p",
                str(template.port), "-U", plan.DB_USER, plan.DB_NAME], timeout=300)
            template.admin(*schema.TEMPLATE_SQL)
            template.admin("VACUUM ANALYZE", "CHECKPOINT")
        finally:
            self._stop(template)
        for node in self.nodes:
            make_dir(node.dir, user)
            sh(["cp", "-a", template.data, node.data], timeout=300)
        shutil.rmtree(template.dir, ignore_errors=True)
        self.scale = scale

    # ------------------------------------------------------------- where
    def address(self, node, link):
        """(host, port) by which the peers of node reach it over link."""
        if link.via == "unix":
            return node.dir, node.port
        return self.net.addrs[node.idx], node.port

    def netns(self, node, link):
        if not link or not link.netns:
            return []
        return ["ip", "netns", "exec", self.net.names[node.idx]]

    def remote_rule(self):
        """VIPL_DB_REMOTE for the tcp provider: every node's address (servers and clients
        alike name all of them)."""
        return ",".join(f"tcp:{a}:*" for a in self.net.addrs[:self.n])

    # --------------------------------------------------------- lifecycle
    def _start_cmd(self, node, link):
        listen = "" if not link or link.via == "unix" else self.address(node, link)[0]
        opts = f"-p {node.port} -k {node.dir} -c listen_addresses='{listen}'"
        env = []
        wrap = []
        if link and link.vipl:
            wrap = [self.vipl_run]
            if link.netns:
                env = [f"VIPL_DB_REMOTE={self.remote_rule()}"]
            env += [f"{k}={v}" for k, v in link.env.items()]
        return self.netns(node, link) + as_postgres(
            ["env"] + env + ["taskset", "-c", str(node.cpu)] + wrap +
            [pg("pg_ctl"), "-D", node.data, "-l", node.log, "-w", "-t", str(PG_CTL_WAIT_S),
             "-o", opts, "start"])

    def _start(self, node, link):
        try:
            sh(self._start_cmd(node, link), timeout=PG_CTL_WAIT_S + 30)
        except PgError as e:
            raise PgError(f"node {node.idx}: server did not start: {e}: {node.log_tail()}")
        node.link = link

    @staticmethod
    def _stop_cmd(node, mode="fast"):
        return as_postgres([pg("pg_ctl"), "-D", node.data, "-m", mode, "-w", "-t",
                            str(PG_CTL_WAIT_S), "stop"])

    def _stop(self, node, mode="fast"):
        try:
            sh(self._stop_cmd(node, mode), timeout=PG_CTL_WAIT_S + 30)
        except PgError:
            pass
        node.link = None

    def restart(self, link, active, keep_history=False):
        """Every node stopped, then the first `active` ones started for link (None: the
        1-node baseline, plain), their cluster table written, vacuumed and prewarmed.  The
        nodes go in parallel: one pg_ctl (then one psql) per node at a time."""
        running = [n for n in self.nodes if n.link is not None or
                   os.path.exists(os.path.join(n.data, "postmaster.pid"))]
        parallel([self._stop_cmd(n) for n in running], "stop")
        for n in running:
            n.link = None
        nodes = self.nodes[:active]
        parallel([self._start_cmd(n, link) for n in nodes], "start",
                 lambda i: nodes[i].log_tail())
        for n in nodes:
            n.link = link
        addrs = [self.address(n, link or plan.LINK["unix"]) for n in self.nodes]
        parallel([n.admin_cmd(schema.cluster_sql(n.idx, addrs) + schema.reset_sql(keep_history))
                  for n in nodes], "reset")

    def close(self):
        if not self.root:
            return
        parallel([self._stop_cmd(n, "immediate") for n in self.nodes
                  if os.path.exists(os.path.join(n.data, "postmaster.pid"))], "stop",
                 check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None


def parallel(cmds, what, why=None, check=True, timeout=PG_CTL_WAIT_S + 30):
    """Runs the commands at once; their outputs, or PgError naming those that failed."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for c in cmds]
    deadline = time.monotonic() + timeout
    errors = []
    outs = []
    for i, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, _ = p.communicate()
            errors.append(f"{what} {i}: timed out")
            outs.append(out)
            continue
        outs.append(out)
        if p.returncode != 0:
            extra = f": {why(i)}" if why else ""
            errors.append(f"{what} {i}: exit {p.returncode}: "
                          f"{(out or '').strip().replace(chr(10), ' | ')[-300:]}{extra}")
    if errors and check:
        raise PgError("; ".join(errors))
    return outs


def env_hosts(n):
    """VIPL_T2_HOSTS: the nodes' addresses as host:port, in node order (real hosts)."""
    text = os.environ.get("VIPL_T2_HOSTS", "")
    if not text:
        return None
    hosts = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise PgError(f"VIPL_T2_HOSTS: {item!r} is not host:port")
        hosts.append((host, int(port)))
    if len(hosts) != n:
        raise PgError(f"VIPL_T2_HOSTS names {len(hosts)} nodes, the run has {n}")
    return hosts


def make_dir(path, user):
    os.mkdir(path)
    os.chown(path, user.pw_uid, user.pw_gid)


def cleanup_stale():
    """Servers and folders a killed run left behind (its pid is in the name)."""
    import glob
    for root in glob.glob(os.path.join(tempfile.gettempdir(), "vipl-bench-t2-*-*")):
        pid = os.path.basename(root).split("-")[3]
        if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
            continue
        for pidfile in glob.glob(os.path.join(root, "*", "data", "postmaster.pid")):
            subprocess.run(as_postgres([pg("pg_ctl"), "-D", os.path.dirname(pidfile), "-m",
                                        "immediate", "-w", "stop"]), capture_output=True,
                           timeout=60)
        shutil.rmtree(root, ignore_errors=True)
