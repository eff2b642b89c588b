"""Table 2's runs (run.py part `table2`): OLTP scaling of N PostgreSQL nodes joined by
PL/Proxy over each inter-node link.

setup() builds the nodes (t2_nodes.py).  Each of this part's rounds runs, per workload
(TPC-B-like, read-only): the 1-node baseline, every remote fraction p on every link (the
links rotated by round and p, so each p's links run side by side), the baseline again;
then the two-phase-commit variant on every link, then the PL/Proxy SELECT 1 round trip on
every link.  Every run restarts the nodes (t2_measure.py).  At the round's end the CPU
split into local and remote transactions (see cpu_split) is added; after the rounds
(finish) the speedups: each run's summed TPS over the median of every baseline run of the
part (two a round: more samples than one round's, and a slow moment of one baseline run
does not swing a whole round), a row per run in its round, so results.csv's median over
rounds is the median TPS over the baseline's median.

CSV: benchmark t2_<workload>_<metric> (workload tpcb, ro, 2pc, ping), transport = link or
`one-node`, placement = n<N>, size = p (%).
"""
import os
import shutil
import statistics
import time

import t2_plan as plan
from pg_instance import PgError, SlowStart
from pg_proc import ProbeError, call_event, traced_calls
from t2_measure import measure, percentile, write_scripts
from t2_net import Bridge
from t2_nodes import Cluster

RUN_ERRORS = (PgError, ProbeError, OSError, ValueError)


class Table2Part:
    def __init__(self, runner, total_rounds):
        self.r = runner
        self.n = plan.NODES
        self.vipl_run = os.path.join(runner.build, "db-interconnect", "vipl-run")
        self.rounds = self.schedule(total_rounds)
        self.done_rounds = 0
        self.cluster = None
        self.own_net = None  # a bridge of our own when run.py's NetPair does not fit
        self.error = None
        self.started = None
        self.cur = {}
        self.tps = []  # (round, workload, link, p, TPS) of every run, for speedups()
        self.speedups_done = False

    @staticmethod
    def schedule(total_rounds):
        """This part's rounds, evenly spread over run.py's."""
        k = min(plan.ROUNDS, total_rounds)
        return sorted({1 + round(i * (total_rounds - 1) / max(1, k - 1))
                       for i in range(k)}) if k > 1 else [1]

    # ------------------------------------------------------------- setup
    def setup(self):
        t0 = self.started = time.monotonic()
        try:
            if os.geteuid() != 0:
                raise PgError("needs root (servers run as postgres, nodes in namespaces)")
            if not os.access(self.vipl_run, os.X_OK):
                raise PgError("vipl-run was not built")
            net = self.r.net
            if self.n != 2 or net is None or net.error:
                self.own_net = Bridge(self.n)
                net = self.own_net
            if net.error:
                raise PgError("no network namespaces: " + net.error)
            self.cluster = Cluster(self.n, self.vipl_run, net)
            self.cluster.setup()
            self.logs = os.path.join(self.cluster.root, "runs")
            os.mkdir(self.logs)
            texts = {}
            for w in plan.WORKLOADS + [plan.TWO_PC]:
                texts[f"{w.name}-local"], texts[f"{w.name}-remote"] = w.local, w.remote
            texts["ping"] = plan.PING
            self.scripts = write_scripts(self.logs, texts)
        except RUN_ERRORS as e:
            self.error = str(e)
        self.r.notes["table2"] = dict(
            settings=[[n, v] for n, v, _ in plan.SETTINGS], scale=plan.SCALE,
            clients=plan.CLIENTS, nodes=self.n, p=plan.P_VALUES, p_2pc=plan.P_2PC,
            rounds=len(self.rounds), pgbench_s=plan.PGBENCH_S, warm_s=plan.WARM_S,
            end_s=plan.END_S, ping_s=plan.PING_S, setup_s=round(time.monotonic() - t0, 1),
            error=self.error)

    def close(self):
        if self.cluster:
            self.cluster.close()
        if self.own_net:
            self.own_net.close()

    # ------------------------------------------------------------ rounds
    def round(self):
        if self.r.round not in self.rounds:
            return
        self.done_rounds += 1
        self.cur = {}
        k = self.done_rounds
        if self.error:
            for w in plan.WORKLOADS:
                self.r.fail(f"t2_{w.name}", "all", self.placement(), self.error)
            return
        for w in plan.WORKLOADS:
            self.baseline(w)
            for i, p in enumerate(plan.P_VALUES):
                for link in self.order(k + i):
                    self.progress(f"{w.name} p={p} {link.name}")
                    self.mixed(w, link, p)
            self.baseline(w)
        for i, p in enumerate(plan.P_2PC):
            for link in self.order(k + i):
                self.progress(f"2pc p={p} {link.name}")
                self.mixed(plan.TWO_PC, link, p)
        for link in self.order(k):
            self.progress(f"PL/Proxy SELECT 1 {link.name}")
            self.ping(link)
        self.finish_round()

    def progress(self, what):
        print(f"  table2: round {self.done_rounds}/{len(self.rounds)}, {what} "
              f"({time.monotonic() - self.started:.0f} s in table2)", flush=True)

    def order(self, k):
        names = plan.LINKS
        k %= len(names)
        return names[k:] + names[:k]

    def placement(self):
        return f"n{self.n}"

    def add(self, bench, link, p, value, unit, n):
        if value is not None:
            self.r.add(bench, link, self.placement(), p, value, unit, n)

    # -------------------------------------------------------------- runs
    def baseline(self, w):
        self.progress(f"{w.name} one node")
        bench = f"t2_{w.name}"
        try:
            run = measure(self.cluster, None, 1, [0], [(self.scripts[f"{w.name}-local"], 100)],
                          plan.CLIENTS, plan.PGBENCH_S, self.logs, False)
        except RUN_ERRORS as e:
            self.r.fail(bench, plan.BASE, self.placement(), str(e))
            return
        self.cur.setdefault((w.name, plan.BASE, 0), []).append(run)
        self.record(bench, plan.BASE, 0, run)

    def mixed(self, w, link, p):
        bench = f"t2_{w.name}"
        scripts = [(self.scripts[f"{w.name}-local"], 100 - p),
                   (self.scripts[f"{w.name}-remote"], p)]
        args = (self.cluster, link, self.n, list(range(self.n)), scripts, plan.CLIENTS,
                plan.PGBENCH_S, self.logs, p > 0)
        try:
            try:
                run = measure(*args)
            except SlowStart as e:  # once more (measure restarts the nodes); then it counts
                print(f"  table2: {w.name} p={p} {link.name}: {e}: once more", flush=True)
                run = measure(*args)
        except RUN_ERRORS as e:
            self.r.fail(bench, link.name, self.placement(), f"p={p}: {e}")
            return
        self.cur[(w.name, link.name, p)] = [run]
        self.record(bench, link.name, p, run)
        self.add(f"{bench}_conns", link.name, p, run.conns, "connections", 1)
        if link.vipl:
            self.add(f"{bench}_conns_vipl", link.name, p, run.rode, "connections", 1)
            self.add(f"{bench}_conns_kernel", link.name, p, run.kernel, "connections", 1)

    def record(self, bench, link, p, run):
        n = run.count()
        self.add(f"{bench}_tps", link, p, run.tps(), "tx/s", n)
        if n:
            self.add(f"{bench}_cpu", link, p, run.cpu_ns / 1000 / n, "us/tx", n)
        for script, side in ((0, "local"), (1, "remote")):
            lat = run.latencies(script)
            if lat:
                self.add(f"{bench}_lat_p50_{side}", link, p, percentile(lat, 0.5), "us",
                         len(lat))
                self.add(f"{bench}_lat_p99_{side}", link, p, percentile(lat, 0.99), "us",
                         len(lat))

    def ping(self, link):
        """One client on node 0 calls t2_ping (PL/Proxy: SELECT 1 on a peer) in a loop."""
        try:
            run = measure(self.cluster, link, self.n, [0], [(self.scripts["ping"], 1)], 1,
                          plan.PING_S, self.logs, True)
        except RUN_ERRORS as e:
            self.r.fail("t2_ping", link.name, self.placement(), str(e))
            return
        lat = run.latencies(0)
        self.add("t2_ping_p50", link.name, 0, percentile(lat, 0.5), "us", len(lat))
        self.add("t2_ping_p99", link.name, 0, percentile(lat, 0.99), "us", len(lat))
        self.add("t2_ping_mean", link.name, 0, statistics.fmean(lat) if lat else None, "us",
                 len(lat))

    # ------------------------------------------------------- round's end
    def finish_round(self):
        for (name, link, p), runs in self.cur.items():
            for run in runs:
                self.tps.append((self.r.round, name, link, p, run.tps()))
            if link == plan.BASE:
                continue
            w = next(w for w in plan.WORKLOADS + [plan.TWO_PC] if w.name == name)
            self.cpu_split(f"t2_{name}", w, link, p, runs[0])

    def finish(self):
        self.speedups()
        self.diagnose()

    def speedups(self):
        """The speedups, once every round's baselines are in (or the run was interrupted).
        2PC's local transactions are TPC-B-like's: the same baseline."""
        if self.speedups_done:
            return
        self.speedups_done = True
        keep = self.r.round
        for w in plan.WORKLOADS + [plan.TWO_PC]:
            base_name = "tpcb" if w.name == "2pc" else w.name
            base = [t for _, name, link, _, t in self.tps
                    if name == base_name and link == plan.BASE]
            if not base:
                continue
            base = statistics.median(base)
            for rnd, name, link, p, t in self.tps:
                if name == w.name and link != plan.BASE:
                    self.r.round = rnd
                    self.add(f"t2_{w.name}_speedup", link, p, t / base, "x", 1)
        self.r.round = keep

    def diagnose(self):
        """perf stat (system calls, context switches of every server process) of one more
        run of each missed target at p > 0, its link beside the one it is compared with
        (unix when none), after the rounds (perf slows system calls: not in the tables)."""
        perf = shutil.which("perf")
        if self.error or not perf:
            return
        med = {}
        for row in self.r.rows:
            if row["benchmark"].endswith("_speedup") and row["placement"] == self.placement():
                key = (row["benchmark"], row["transport"], row["size"])
                med.setdefault(key, []).append(row["value"])
        med = {k: statistics.median(v) for k, v in med.items()}
        runs = []
        for t in plan.TARGETS:
            a = med.get((f"t2_{t.workload}_speedup", t.link, t.p))
            b = med.get((f"t2_{t.workload}_speedup", t.base, t.p)) if t.base else None
            if t.p == 0 or (a is not None and (not t.base or b is not None) and t.met(a, b)):
                continue
            for link in (t.link, t.base or "unix"):
                if (t.workload, t.p, link) not in runs:
                    runs.append((t.workload, t.p, link))
        self.r.round = 0
        for name, p, link in runs:
            print(f"  table2: perf stat, {name} p={p} {link}", flush=True)
            w = next(w for w in plan.WORKLOADS if w.name == name)
            run = self.perf_run(perf, False, name, p, link)
            n = run.count() if run else 0
            if not n or not run.perf:
                continue
            self.add(f"t2_{w.name}_perf_sys", link, p,
                     run.perf.get("raw_syscalls:sys_enter", 0) / n, "1/tx", n)
            self.add(f"t2_{w.name}_perf_cs", link, p, run.perf.get("context-switches", 0) / n,
                     "1/tx", n)
            for call in traced_calls():
                k = run.perf.get(call_event(call))
                if k:
                    self.add(f"t2_{w.name}_perf_call_{call}", link, p, k / n, "1/tx", n)
            self.add(f"t2_{w.name}_perf_cpu", link, p, run.cpu_ns / 1000 / n, "us/tx", n)
            self.add(f"t2_{w.name}_perf_tps", link, p, run.tps(), "tx/s", n)

    def perf_run(self, perf, profile, name, p, link):
        """One run of workload name at p on link under perf (stat, or record with
        profile), tried twice: perf's attaching can stall a connection's rendezvous past its
        deadline.  None, and a failure in the report, when both attempts failed."""
        what = "perf record" if profile else "perf stat"
        scripts = [(self.scripts[f"{name}-local"], 100 - p), (self.scripts[f"{name}-remote"], p)]
        for attempt in (1, 2):
            try:
                return measure(self.cluster, plan.LINK[link], self.n, list(range(self.n)),
                               scripts, plan.CLIENTS,
                               plan.BREAKDOWN_S if profile else plan.PGBENCH_S, self.logs,
                               p > 0, perf=perf, profile=profile)
            except RUN_ERRORS as e:
                print(f"  ! table2: {what}, {name} p={p} {link}, attempt {attempt}: {e}",
                      flush=True)
                if attempt == 2:
                    self.r.fail(f"t2_{name}_{'part' if profile else 'perf'}", link,
                                self.placement(), f"p={p}: {e}")
        return None

    def breakdown(self):
        """perf record of every server process during the read-only workload at p = 0 and
        p = BREAKDOWN_P on each breakdown link: CPU per transaction by part (t2_ro_part_*);
        t2_breakdown.py reports a remote read's extra CPU per part."""
        perf = shutil.which("perf")
        if self.error or not perf:
            return
        w = next(w for w in plan.WORKLOADS if w.name == "ro")
        self.r.round = 0
        for link in plan.BREAKDOWN_LINKS:
            if link not in plan.LINK:
                continue
            for p in (0, plan.BREAKDOWN_P):
                print(f"  table2: where the CPU goes, {w.name} p={p} {link}", flush=True)
                run = self.perf_run(perf, True, w.name, p, link)
                n = run.count() if run else 0
                if not n or not run.parts:
                    continue
                for part, ns in run.parts.items():
                    self.add(f"t2_{w.name}_part_{part}", link, p, ns / 1000 / n, "us/tx", n)
                self.add(f"t2_{w.name}_part_remote", link, p, run.count(1) / n, "share", n)

    def cpu_split(self, bench, w, link, p, run):
        """Server CPU per local and per remote transaction.  A local transaction costs the
        same at any p, so the p = 0 run of the same link and round gives it; the rest of
        a p > 0 run's CPU (its local transactions' taken out) over its remote
        transactions is a remote transaction's, both nodes' backends counted."""
        zero = self.cur.get(("tpcb" if w.name == "2pc" else w.name, link, 0))
        if not zero or not zero[0].count():
            return
        local = zero[0].cpu_ns / zero[0].count()
        if p == 0:
            self.add(f"{bench}_cpu_local", link, p, local / 1000, "us/tx", zero[0].count())
            return
        n_local, n_remote = run.count(0), run.count(1)
        if n_remote:
            self.add(f"{bench}_cpu_local", link, p, local / 1000, "us/tx", n_local)
            self.add(f"{bench}_cpu_remote", link, p,
                     (run.cpu_ns - n_local * local) / n_remote / 1000, "us/tx", n_remote)
