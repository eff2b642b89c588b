"""One PostgreSQL 15 server of one link, in a directory of its own, run as the postgres user.

The data directory is a copy of the run's template (initdb, pgbench -i, the COPY table);
the port, the socket directory, the listening address, the network namespace and
whether vipl-run carries the server come from the link.
"""
import os
import pwd
import signal
import subprocess

import pg_plan as plan
from pg_proc import children, cmdline


class PgError(Exception):
    pass


class SlowStart(PgError):
    """pgbench's clients connected too late to leave a measured window: a run to make
    again (the connections are not what is measured), not a failure of the link."""

    def __init__(self, seconds):
        super().__init__(f"connecting took {seconds:.2f} s: no window left")


def log_tail(path):
    """The end of a server log, on one line, for an error message."""
    try:
        with open(path) as fh:
            return fh.read().strip().replace("\n", " | ")[-300:]
    except OSError:
        return "(no server log)"


def postmaster_pid(data, who, log):
    """The running postmaster of data directory `data` (PgError naming `who` if none)."""
    try:
        with open(os.path.join(data, "postmaster.pid")) as fh:
            return int(fh.readline())
    except (OSError, ValueError):
        raise PgError(f"{who}: no postmaster.pid: {log_tail(log)}")


def server_processes(pm):
    """The postmaster and every process it forked."""
    return [pm] + children(pm)


def pg(tool):
    return os.path.join(plan.PG_BIN, tool)


def sh(cmd, env=None, timeout=120):
    """Runs cmd; its standard output, or PgError with the tail of what it said."""
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=full, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise PgError(f"{os.path.basename(cmd[0])}: timed out after {timeout} s")
    if p.returncode != 0:
        text = (err or out or "").strip().replace("\n", " | ")[-300:]
        raise PgError(f"{' '.join(os.path.basename(c) for c in cmd[:4])}...: exit "
                      f"{p.returncode}: {text}")
    return out


def as_postgres(cmd):
    """cmd as the servers' user: through runuser (root), or as it is (that user already,
    e.g. in the vipl-postgres container)."""
    if os.geteuid() == pwd.getpwnam(plan.DB_USER).pw_uid:
        return cmd
    return ["runuser", "-u", plan.DB_USER, "--"] + cmd


class Instance:
    def __init__(self, link, root, port, net=None, vipl_run=None):
        self.link, self.port, self.net, self.vipl_run = link, port, net, vipl_run
        self.dir = os.path.join(root, link.name)  # also the unix socket directory
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")

    # ------------------------------------------------------------- where
    def host(self):
        if self.link.via == "unix":
            return self.dir
        return self.net.addrs[1] if self.link.netns else "127.0.0.1"

    def env(self, side):
        """Both ends of a connection across namespaces name the server as remote.  Clients
        ask for no TLS (the servers have none): no SSLRequest round trip on any link.  The
        link's own settings go to both ends."""
        env = {"PGSSLMODE": "disable"} if side == "client" else {}
        if self.link.vipl and self.link.netns:
            env["VIPL_DB_REMOTE"] = f"tcp:{self.net.addrs[1]}:*"
        env.update(self.link.env)
        return env

    def netns(self, side):
        if not self.link.netns:
            return []
        return ["ip", "netns", "exec", self.net.names[0 if side == "client" else 1]]

    def wrap(self):
        return [self.vipl_run] if self.link.vipl else []

    def conn_args(self):
        return ["-h", self.host(), "-p", str(self.port), "-U", plan.DB_USER]

    def client(self, cpu, argv):
        """A client command: in the client namespace, on cpu, under vipl-run if the link is."""
        return self.netns("client") + ["taskset", "-c", str(cpu)] + self.wrap() + argv

    # --------------------------------------------------------- lifecycle
    def start(self, cpu):
        listen = "" if self.link.via == "unix" else self.host()
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses='{listen}'"
        env = [f"{k}={v}" for k, v in self.env("server").items()]
        cmd = self.netns("server") + as_postgres(
            ["env"] + env + ["taskset", "-c", str(cpu)] + self.wrap() +
            [pg("pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "60", "-o", opts,
             "start"])
        try:
            sh(cmd, timeout=90)
        except PgError as e:
            raise PgError(f"{self.link.name}: server did not start: {e}: {self.log_tail()}")

    def stop(self):
        try:
            sh(as_postgres([pg("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop"]),
               timeout=60)
        except PgError:
            pass

    def log_tail(self):
        return log_tail(self.log)

    # --------------------------------------------------------- processes
    def postmaster(self):
        return postmaster_pid(self.data, self.link.name, self.log)

    def processes(self):
        return server_processes(self.postmaster())

    def backends(self):
        """The client backends of the benchmark's database."""
        tag = f"postgres: {plan.DB_USER} {plan.DB_NAME} "
        return [p for p in children(self.postmaster()) if cmdline(p).startswith(tag)]

    def pin(self, cpu):
        """The server and its processes on cpu; backends forked later inherit it."""
        for pid in self.processes():
            try:
                os.sched_setaffinity(pid, {cpu})
            except (ProcessLookupError, PermissionError):
                pass

    def admin(self, *sql, db=plan.DB_NAME):
        """Plain psql over the instance's unix socket (never under vipl-run)."""
        args = []
        for s in sql:
            args += ["-c", s]
        return sh([pg("psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.dir,
                   "-p", str(self.port), "-U", plan.DB_USER, "-d", db] + args)
