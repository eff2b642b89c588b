"""The database section's runs (run.py part `db`): pgbench and COPY against PostgreSQL 15
over every link, each round; perf stat once, after the rounds, where a target was missed.

setup() makes one template (initdb, pgbench -i, the COPY table) and a copy of it per link,
each started as its own server.  Each round runs every workload, then COPY, on every link
(in the order PgPart.order gives), in both placements.  Before every run the server's
processes are pinned for the placement, and pgbench's tables are vacuumed and its history
emptied (RESET); every run then measures a window that starts after its clients are
connected and warm (pg_plan.py).
"""
import glob
import math
import os
import pwd
import select
import shutil
import statistics
import subprocess
import tempfile
import time

import pg_plan as plan
from pg_instance import Instance, PgError, SlowStart, as_postgres, pg, sh
from pg_plan import COPY_BYTES, LINKS, PLACEMENTS, WORKLOADS
from pg_proc import (Perf, ProbeError, Snap, call_event, cmdline, grown, sleep_until,
                     stat_grown, traced_calls, vipl_stat)

# Before every pgbench run, on every link: TPC-B's updates leave dead rows (autovacuum is
# off), and a link that ran faster before would meet more of them than a slower one.
RESET = ["VACUUM pgbench_accounts", "VACUUM pgbench_branches", "VACUUM pgbench_tellers",
         "TRUNCATE pgbench_history"]
MIN_WINDOW_S = 0.25
# What one run may raise: it fails that row of the report, the run goes on.
RUN_ERRORS = (PgError, ProbeError, OSError, ValueError, subprocess.SubprocessError)


# The servers' ports: above the kernel's ephemeral range and away from the tcp provider's
# (VIPL_TCP_PORT_BASE 20000 + 12000), where a rendezvous port could land on a server's.
PORT_BASE, PORT_SPAN = 61000, 4000


def why(e):
    return str(e) if isinstance(e, (PgError, ProbeError)) else f"{type(e).__name__}: {e}"


class Window:
    """One measured run: its transactions (completion time, latency us) and two Snaps."""

    def __init__(self, s1, s2, server, client, done, perf=None):
        self.s1, self.s2, self.server, self.client = s1, s2, server, client
        self.done, self.perf = done, perf
        self.seen = s2.stat  # connection rows seen open in the window (pgbench_window)

    def count(self, t1, t2):
        return sum(1 for t, _ in self.done if t1 < t <= t2)


def rode(stat, pids, want):
    """How many connection rows of pids in a vipl-run --stat snapshot rode a transport
    of want (Link.rides), and those rows."""
    rows = [r for (pid, _), r in stat.items() if pid in pids]
    return sum(1 for r in rows if r["trans"] in want), rows


class PgPart:
    def __init__(self, runner):
        self.r = runner
        self.vipl_run = os.path.join(runner.build, "db-interconnect", "vipl-run")
        if not os.access(self.vipl_run, os.X_OK):
            self.vipl_run = None
        self.before = before_build(runner.build)  # (vipl-run, revision) or (None, why)
        self.perf_tool = shutil.which("perf")
        self.root = None
        self.instances = {}
        self.broken = {}  # link -> why it cannot run
        self.error = None
        self.seq = 0
        self.port = PORT_BASE + os.getpid() % (PORT_SPAN - 16)

    # ------------------------------------------------------------- setup
    def setup(self):
        t0 = time.monotonic()
        try:
            self._setup()
        except RUN_ERRORS as e:
            self.error = why(e)
        self.r.notes["pg"] = dict(
            settings=[[n, v] for n, v, _ in plan.SETTINGS], scale=plan.SCALE,
            copy_bytes=COPY_BYTES, pgbench_s=plan.PGBENCH_S, warm_s=plan.WARM_S,
            end_s=plan.END_S, setup_s=round(time.monotonic() - t0, 1),
            version=self.version(), perf=bool(self.perf_tool), error=self.error,
            broken=self.broken, before=self.before[1], before_built=bool(self.before[0]))

    def version(self):
        try:
            return sh([pg("postgres"), "--version"]).strip()
        except (PgError, OSError):
            return "not installed"

    def _setup(self):
        if not os.access(pg("pgbench"), os.X_OK):
            raise PgError(f"PostgreSQL 15 is not installed ({plan.PG_BIN})")
        try:
            user = pwd.getpwnam(plan.DB_USER)
        except KeyError:
            raise PgError(f"no {plan.DB_USER} user to run the servers")
        cleanup_stale()
        self.root = tempfile.mkdtemp(prefix=f"vipl-bench-pg-{os.getpid()}-")
        self.logs = os.path.join(self.root, "runs")  # pgbench logs, perf output (root's)
        os.mkdir(self.logs)
        os.chown(self.root, user.pw_uid, user.pw_gid)
        self.scripts = {}
        for w in WORKLOADS:
            if w.script:
                path = os.path.join(self.root, f"{w.name}.sql")
                with open(path, "w") as fh:
                    fh.write(w.script)
                self.scripts[w.name] = path
        template = self.make_template(user)
        for link in LINKS:
            why = self.unavailable(link)
            if why:
                self.broken[link.name] = why
                continue
            tool = self.before[0] if link.before else self.vipl_run
            inst = Instance(link, self.root, self.next_port(), self.r.net, tool)
            make_dir(inst.dir, user)
            sh(["cp", "-a", template.data, inst.data])
            try:
                inst.start(PLACEMENTS["cross"][1])
            except PgError as e:
                self.broken[link.name] = str(e)
                continue
            self.instances[link.name] = inst
        shutil.rmtree(template.dir, ignore_errors=True)

    def next_port(self):
        self.port += 1
        return self.port

    def unavailable(self, link):
        if link.before and not self.before[0]:
            return self.before[1]
        if link.vipl and not self.vipl_run:
            return "vipl-run was not built"
        if link.netns and (self.r.net is None or self.r.net.error):
            return "no network namespaces: " + (self.r.net.error if self.r.net else "not root")
        return None

    def make_template(self, user):
        """initdb, the settings, pgbench -i, the COPY table: an instance, stopped, to copy."""
        inst = Instance(plan.Link("template", "template", False, False, "unix"), self.root,
                        self.next_port())
        make_dir(inst.dir, user)
        sh(as_postgres([pg("initdb"), "-D", inst.data, "-U", plan.DB_USER, "-A", "trust", "-E",
                        "UTF8", "--locale=C", "--no-sync"]), timeout=300)
        with open(os.path.join(inst.data, "postgresql.conf"), "a") as fh:
            fh.write("\n# vipl-middleware bench (bench/pg_plan.py)\n")
            for name, value, _ in plan.SETTINGS:
                fh.write(f"{name} = '{value}'\n")
        with open(os.path.join(inst.data, "pg_hba.conf"), "a") as fh:
            fh.write("host all all 10.213.0.0/16 trust\n")  # NetPair's addresses
        inst.start(PLACEMENTS["cross"][1])
        try:
            inst.admin(f"CREATE DATABASE {plan.DB_NAME}", db="postgres")
            sh([pg("pgbench"), "-i", "-q", "-s", str(plan.SCALE)] + inst.conn_args() +
               [plan.DB_NAME], timeout=300)
            inst.admin("CREATE TABLE copy_src AS SELECT repeat(md5(i::text), 32)::char(999) "
                       f"AS t FROM generate_series(1, {plan.COPY_ROWS}) i",
                       "VACUUM ANALYZE", "CHECKPOINT")
        finally:
            inst.stop()
        return inst

    def close(self):
        for inst in self.instances.values():
            inst.stop()
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ rounds
    def order(self, placement):
        """Links of this round and placement: the host's and the namespaces' groups in
        turn, each group rotated round by round, so every ratio's two links run close
        together and neither always first."""
        k = self.r.round
        skip = set() if k % plan.BEFORE_EVERY == 1 else {
            link.name for link in LINKS if link.before}
        skip |= {link.name for link in LINKS if placement not in link.placements}
        groups = [[n for n in names if n not in skip] for names in plan.LINK_GROUPS]
        groups = [names[k % len(names):] + names[:k % len(names)] for names in groups]
        if k % 2:
            groups.reverse()
        return [plan.LINK[n] for names in groups for n in names]

    def round(self):
        for placement in PLACEMENTS:
            for w in WORKLOADS:
                for link in self.order(placement):
                    if not w.runs(link.name, self.r.round):
                        continue
                    inst = self.usable(f"pg_{w.name}", link, placement)
                    if inst:
                        self.pgbench(inst, w, placement)
            # One COPY is 0.2 s: a moment of a busy neighbour moves it by half. Several a
            # round, the links taking turns, and the median of all.
            for _ in range(plan.COPY_RUNS):
                for link in self.order(placement):
                    inst = self.usable("pg_copy", link, placement)
                    if inst:
                        self.copy(inst, placement)

    def usable(self, bench, link, placement):
        why = self.error or self.broken.get(link.name)
        if link.before and not self.before[0]:
            return None  # not built (--quick, no history): the report says why, once
        if why:
            self.r.fail(bench, link.name, placement, why)
            return None
        return self.instances[link.name]

    # ----------------------------------------------------------- pgbench
    def pgbench(self, inst, w, placement, perf=False):
        bench, link = f"pg_{w.name}", inst.link
        c, s = PLACEMENTS[placement]
        self.seq += 1
        prefix = os.path.join(self.logs, f"{self.seq}")
        argv = [pg("pgbench"), "-n", "-M", "prepared", "-j", "1", "-c", str(w.clients), "-T",
                str(w.seconds or plan.PGBENCH_S), "-l", "--log-prefix", prefix]
        argv += inst.conn_args() + w.args
        if w.script:
            argv += ["-f", self.scripts[w.name]]
        argv.append(plan.DB_NAME)
        try:
            inst.admin(*RESET)
            inst.pin(s)
            try:
                win = self.pgbench_window(inst, inst.client(c, argv), prefix, perf, w,
                                          placement)
            except SlowStart as e:  # once more; a second slow start is reported
                print(f"  db: {bench} {link.name} {placement}: {e}: once more", flush=True)
                for path in glob.glob(prefix + ".*"):
                    os.unlink(path)
                inst.admin(*RESET)
                win = self.pgbench_window(inst, inst.client(c, argv), prefix, perf, w,
                                          placement)
            self.check_links(inst, win, w.clients, placement, w.reconnects)
        except RUN_ERRORS as e:
            self.r.fail(bench, link.name, placement, why(e))
            return
        finally:
            for path in glob.glob(prefix + ".*"):
                os.unlink(path)
        self.record(bench, link, placement, w.clients, win, "tx")

    def pgbench_window(self, inst, cmd, prefix, want_perf, w, placement):
        out = tempfile.TemporaryFile("w+", dir=self.logs)
        t_launch = time.time()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, **inst.env("client")), start_new_session=True)
        perf = None
        try:
            log = f"{prefix}.{p.pid}"  # every program in cmd execs: p.pid is pgbench's
            # Going: its first transactions are logged (stdio's first block), so every
            # client is connected (pgbench connects them all first, after a connection
            # of its own that a count of backends would mistake for them).
            deadline = t_launch + 10
            while not (os.path.exists(log) and os.path.getsize(log) > 0):
                if p.poll() is not None or time.time() > deadline:
                    raise PgError("pgbench did not get going: " + self.tail(p, out))
                time.sleep(0.005)
            t_go = time.time()
            end = t_launch + (w.seconds or plan.PGBENCH_S) - plan.END_S  # its clock starts later
            if end - (t_go + plan.WARM_S) < MIN_WINDOW_S:
                raise SlowStart(t_go - t_launch)
            if want_perf and self.perf_tool:
                sleep_until(t_go + plan.WARM_S / 2)  # connected: the pids are known
                perf = Perf(self.perf_tool, inst.processes() + [p.pid], self.logs, self.seq)
            sleep_until(t_go + plan.WARM_S)
            server = inst.processes()
            s1 = Snap(server, [p.pid], inst.vipl_run)
            pe1 = perf.command("enable") if perf else None
            sleep_until(end)
            pe2 = perf.command("disable") if perf else None
            s2 = Snap(server, [p.pid], inst.vipl_run)
            counts = perf.finish() if perf else None
            perf = None
            # A client that reconnects for every transaction may be between two
            # connections at both ends, or negotiating one (its row says kernel until
            # then): look again until one rides what it should (check_links).
            seen = {**s1.stat, **s2.stat}
            want = inst.link.rides(placement)
            for _ in range(40 if w.reconnects and inst.link.vipl else 0):
                if rode(seen, [p.pid], want)[0] or p.poll() is not None:
                    break
                seen.update(vipl_stat(inst.vipl_run, [p.pid]))
                time.sleep(0.002)
            try:
                p.wait(timeout=plan.RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise PgError(f"pgbench did not end within {plan.RUN_TIMEOUT_S} s")
            if p.returncode != 0:
                raise PgError(f"pgbench: exit {p.returncode}: " + self.tail(p, out))
            done = read_log(log)
            if not done or done[0][0] > s1.t or done[-1][0] < s2.t:
                raise PgError("pgbench's log does not cover the measured window (" + (
                    f"{done[0][0] - s1.t:+.3f} s, {done[-1][0] - s2.t:+.3f} s" if done else
                    "empty") + ")")
            win = Window(s1, s2, server, [p.pid], done)
            win.seen = seen
            if counts is not None:
                win.perf = (pe1, pe2, counts)
            return win
        finally:
            if perf:
                try:
                    perf.finish()
                except ProbeError:
                    pass
            if p.poll() is None:
                kill_group(p)
            out.close()

    @staticmethod
    def tail(p, out):
        if p.poll() is None:
            kill_group(p)
        out.seek(0)
        return out.read().strip().replace("\n", " | ")[-300:]

    def check_links(self, inst, win, clients, placement, reconnects=False):
        """An interconnect row counts only if every client connection rode what its link
        and placement say (Link.rides): vipl, or the kernel where the placement rule keeps
        the connection there (each interposed connection has a row either way).  A client
        that reconnects for every transaction: one of its connections seen in the window
        (the others may have been negotiating still)."""
        if not inst.link.vipl:
            return
        want = inst.link.rides(placement)
        n, rows = rode(win.seen if reconnects else win.s2.stat, win.client, want)
        if n < clients:
            seen = ", ".join(sorted(r["trans"] for r in rows)) or "no interposed connection"
            raise PgError(f"{n} of {clients} client connections rode {' or '.join(want)} "
                          f"({seen})")

    # -------------------------------------------------------------- COPY
    def copy(self, inst, placement, perf=False):
        link = inst.link
        c, s = PLACEMENTS[placement]
        self.seq += 1
        pause = f"SELECT pg_sleep({plan.COPY_PAUSE_S})"
        argv = [pg("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-o", "/dev/null"] + \
            inst.conn_args() + ["-d", plan.DB_NAME, "-c", pause, "-c", "\\timing on", "-c",
                                "COPY copy_src TO STDOUT", "-c", "\\timing off", "-c",
                                "\\warn copied", "-c", pause]
        try:
            inst.pin(s)
            win, ms = self.copy_window(inst, inst.client(c, argv), perf)
            self.check_links(inst, win, 1, placement)
        except RUN_ERRORS as e:
            self.r.fail("pg_copy", link.name, placement, why(e))
            return
        mb = COPY_BYTES / 1e6
        if win.perf is None:
            self.r.add("pg_copy_mbps", link.name, placement, COPY_BYTES, mb / (ms / 1000),
                       "MB/s", 1)
        # Per MB: the window holds the whole COPY (and the idle ends of the pg_sleeps).
        self.record("pg_copy", link, placement, COPY_BYTES, win, "MB")

    def copy_window(self, inst, cmd, want_perf):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, **inst.env("client")), start_new_session=True)
        perf = None
        try:
            # The backend is in the first pg_sleep: connected, nothing copied yet.
            deadline = time.time() + 10
            while True:
                b = inst.backends()
                shown = [cmdline(x) for x in b]
                if any(x.endswith(" COPY") for x in shown):
                    raise PgError("the COPY began before it could be measured")
                if any(x.endswith(" SELECT") for x in shown):
                    break
                if p.poll() is not None or time.time() > deadline:
                    raise PgError("psql did not get going: " + self.tail_err(p))
                time.sleep(0.005)
            server = inst.processes()
            if want_perf and self.perf_tool:
                perf = Perf(self.perf_tool, server + [p.pid], self.logs, self.seq)
            s1 = Snap(server, [p.pid], inst.vipl_run)
            pe1 = perf.command("enable") if perf else None
            if not wait_line(p.stderr, "copied", 60):
                raise PgError("psql did not finish the COPY: " + self.tail_err(p))
            pe2 = perf.command("disable") if perf else None
            s2 = Snap(server, [p.pid], inst.vipl_run)
            counts = perf.finish() if perf else None
            perf = None
            out, err = p.communicate(timeout=plan.RUN_TIMEOUT_S)
            if p.returncode != 0:
                raise PgError(f"psql: exit {p.returncode}: {err.strip()[-300:]}")
            times = [float(line.split()[1]) for line in out.splitlines()
                     if line.startswith("Time: ")]
            if len(times) != 1 or times[0] <= 0:
                raise PgError(f"psql printed no COPY time: {out.strip()[-200:]}")
            win = Window(s1, s2, server, [p.pid], [])
            if counts is not None:
                win.perf = (pe1, pe2, counts)
            return win, times[0]
        finally:
            if perf:
                try:
                    perf.finish()
                except ProbeError:
                    pass
            if p.poll() is None:
                kill_group(p)
                p.communicate()

    @staticmethod
    def tail_err(p):
        kill_group(p)
        _, err = p.communicate()
        return (err or "").strip()[-300:]

    # ------------------------------------------------------------ record
    def record(self, bench, link, placement, size, win, per):
        """Rows of one window: TPS and latency (per == "tx"), CPU, switches and the
        interconnect's counters per transaction or per MB (COPY); perf's counts instead
        when perf ran (its window is its own: enable to disable)."""
        add = lambda metric, value, unit, n: self.r.add(f"{bench}_{metric}", link.name,
                                                        placement, size, value, unit, n)
        s1, s2 = win.s1, win.s2
        if per == "tx":
            t1, t2 = (win.perf[0], win.perf[1]) if win.perf else (s1.t, s2.t)
            n = win.count(t1, t2)
        else:
            n = COPY_BYTES // 10**6  # per MB
        if n == 0:
            self.r.fail(bench, link.name, placement, "no transaction in the window")
            return
        if win.perf:
            counts = win.perf[2]
            for side, pids in (("server", win.server), ("client", win.client)):
                events = [("context-switches", "cs"), ("raw_syscalls:sys_enter", "sys")]
                events += [(call_event(c), f"call_{c}") for c in traced_calls()]
                for event, name in events:
                    total = sum(counts.get(pid, {}).get(event, 0) for pid in pids)
                    if total or not name.startswith("call_"):
                        add(f"perf_{name}_{side}", total / n, f"1/{per}", n)
            return
        if per == "tx":
            lat = sorted(us for t, us in win.done if s1.t < t <= s2.t)
            add("tps", n / (s2.t - s1.t), "tx/s", n)
            add("lat_mean", statistics.fmean(lat), "us", n)
            add("lat_p99", lat[math.ceil(0.99 * len(lat)) - 1], "us", n)
            for q in plan.LAT_QUANTILES:
                add(f"lat_q{q:g}", lat[max(0, math.ceil(q / 100 * len(lat)) - 1)], "us", n)
        # Backends that ended within the window (a connection each) count through the
        # postmaster that reaped them.
        cs = grown(s1, s2, "cpu", win.server) + grown(s1, s2, "reaped", win.server)
        cc = grown(s1, s2, "cpu", win.client)
        add("cpu", (cs + cc) / 1000 / n, f"us/{per}", n)
        add("cpu_server", cs / 1000 / n, f"us/{per}", n)
        add("cpu_client", cc / 1000 / n, f"us/{per}", n)
        add("cs_server", grown(s1, s2, "cs", win.server) / n, f"1/{per}", n)
        add("cs_client", grown(s1, s2, "cs", win.client) / n, f"1/{per}", n)
        if link.vipl:
            for side, pids in (("server", win.server), ("client", win.client)):
                g = stat_grown(s1, s2, set(pids))
                add(f"calls_{side}", (g["calls_in"] + g["calls_out"]) / n, f"1/{per}", n)
                add(f"msgs_{side}", (g["msgs_in"] + g["msgs_out"]) / n, f"1/{per}", n)
                add(f"spins_{side}", g["spins"] / n, f"1/{per}", n)
                add(f"sleeps_{side}", g["sleeps"] / n, f"1/{per}", n)

    # --------------------------------------------------------- diagnosis
    def diagnose(self):
        """perf stat beside the base link for every target the rounds' medians missed."""
        if self.error or not self.perf_tool:
            return
        med = {}
        for row in self.r.rows:
            key = (row["benchmark"], row["transport"], row["placement"], row["size"])
            med.setdefault(key, []).append(row["value"])
        med = {k: statistics.median(v) for k, v in med.items()}
        runs = []
        for t in plan.TARGETS:
            a, b = med.get(t.key(t.link)), med.get(t.key(t.base))
            if a is not None and b and t.met(a / b):
                continue
            for link in (t.link, t.base):
                run = (t.workload, t.clients, t.placement, link)
                if run not in runs and link in self.instances:
                    runs.append(run)
        self.r.round = 0
        for name, clients, placement, link in runs:
            inst = self.instances[link]
            if name == "copy":
                self.copy(inst, placement, perf=True)
            else:
                w = next(w for w in WORKLOADS if w.name == name and w.clients == clients)
                # perf follows the processes of its start: not the backends of later
                # connections.  Its CPU per connection, server and client, tells instead.
                if not w.reconnects:
                    self.pgbench(inst, w, placement, perf=True)


def before_build(build):
    """bench/build_before.sh's vipl-run and the revision it built, or None and why not."""
    root = os.path.join(build, "before")
    tool = os.path.join(root, "build", "db-interconnect", "vipl-run")
    why, rev = read_text(os.path.join(root, "why")), read_text(os.path.join(root, "revision"))
    if why:
        return None, why
    if not rev:
        return None, "not built (scripts/bench.sh builds it with bench/build_before.sh; " \
            "--quick does not)"
    if not os.access(tool, os.X_OK):
        return None, f"{tool} is missing"
    return tool, rev


def read_text(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def read_log(path):
    """pgbench -l lines: client, number, latency us, script, epoch s, us (completion)."""
    done = []
    try:
        with open(path) as fh:
            for line in fh:
                f = line.split()
                if len(f) >= 6:
                    done.append((int(f[4]) + int(f[5]) / 1e6, float(f[2])))
    except (OSError, ValueError) as e:
        raise PgError(f"pgbench's log: {e}")
    done.sort()
    return done


def wait_line(stream, word, timeout):
    deadline = time.time() + timeout
    buf = ""
    fd = stream.fileno()
    while time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        chunk = os.read(fd, 4096).decode(errors="replace")
        if not chunk:
            return False
        buf += chunk
        if word in buf.splitlines() or (word + "\n") in buf:
            return True
    return False


def make_dir(path, user):
    os.mkdir(path)
    os.chown(path, user.pw_uid, user.pw_gid)


def kill_group(p):
    try:
        os.killpg(p.pid, 9)
    except ProcessLookupError:
        pass


def cleanup_stale():
    """Servers and directories a killed run left behind (its pid is in the name)."""
    for root in glob.glob(os.path.join(tempfile.gettempdir(), "vipl-bench-pg-*-*")):
        pid = os.path.basename(root).split("-")[3]
        if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
            continue
        for pidfile in glob.glob(os.path.join(root, "*", "data", "postmaster.pid")):
            try:
                sh(as_postgres([pg("pg_ctl"), "-D", os.path.dirname(pidfile), "-m",
                                "immediate", "-w", "stop"]), timeout=60)
            except PgError:
                pass
        shutil.rmtree(root, ignore_errors=True)
