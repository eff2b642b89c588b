"""The report's database section: "The database interconnect (PostgreSQL 15)".

report.py calls target_specs() for its targets table and section(report) for the rest
(a table, the figures from before this work, where the time goes for each missed target,
and pg.png).
"""
import os

import pg_before
import pg_plan as plan
from pg_plan import COPY_BYTES, LINKS, PLACEMENT_LABEL, PLACEMENTS, TARGETS, WORKLOADS

BASE = {"pg-unix": None, "pg-tcp": "pg-unix", "pg-vipl": "pg-unix", "pg-tcp-ns": None,
        "pg-vipl-ns": "pg-tcp-ns", "pg-vipl-before": "pg-unix", "pg-vipl-1cpu": "pg-unix"}  # what each link's ratio divides by


def fmt(v, digits=1):
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}f}"


def rtext(a, b):
    return "–" if a is None or not b else f"{a / b:.2f}x"


def metric_unit(t):
    return {"tps": "tx/s", "mbps": "MB/s", "cpu": "us/tx"}[t.metric]


def target_specs():
    """Rows for report.py's targets table: (name, wanted, key, base key, unit, test, scale)."""
    specs = []
    for t in TARGETS:
        specs.append((t.text, f"{t.sense} {t.wanted:g}x", t.key(t.link), t.key(t.base),
                      metric_unit(t), lambda r, t=t: t.met(r), 1))
    return specs


def rows_of(workload):
    """(name, clients or bytes, label, per) of every measured workload, COPY last."""
    out = [(w.name, w.clients, w.label, "tx") for w in WORKLOADS]
    out.append(("copy", COPY_BYTES, plan.COPY_LABEL, "MB"))
    return out if workload is None else [r for r in out if r[0] == workload]


def section(rep):
    g = rep.get
    if not any(k[0].startswith("pg_") for k in rep.data) and not any(
            f["benchmark"].startswith("pg_") for f in rep.meta.get("failures", [])):
        return
    meta = rep.meta.get("notes", {}).get("pg", {})
    settings = meta.get("settings") or [[n, v] for n, v, _ in plan.SETTINGS]
    rep.emit("## The database interconnect (PostgreSQL 15)", "",
             f"{meta.get('version', 'PostgreSQL 15')}: one server per link, each a copy of "
             f"one template (`pgbench -i -s {meta.get('scale', plan.SCALE)}` and a "
             f"{COPY_BYTES // 10**6} MB table), run as `postgres` in a temporary directory, "
             "started once per run; the interconnect's server runs under `vipl-run` (every "
             "process it forks preloaded), and so do its clients. Settings: " +
             ", ".join(f"`{n}={v}`" for n, v in settings) + ". "
             "Clients run as root with `PGSSLMODE=disable` on every link (the servers have no "
             "TLS). pgbench: `-M prepared -j 1 -n`, `-T "
             f"{meta.get('pgbench_s', plan.PGBENCH_S)}`; each run counts the transactions "
             "that its per-transaction log (`-l`) shows completed in a window from "
             f"{meta.get('warm_s', plan.WARM_S)} s after the first logged transactions to "
             f"{meta.get('end_s', plan.END_S)} s before pgbench's own end: TPS, mean and p99 "
             "latency come from that log, CPU from `/proc/<pid>/schedstat` of the server's "
             "processes (postmaster and all its children; a backend that ended within the window "
             "through its postmaster's reaped time, `cutime + cstime` of `/proc/<pid>/stat`) "
             "and pgbench at both ends of the window. *A connection each* (`-C`, `-T 2`): "
             "every transaction connects, authenticates, selects and disconnects, so its TPS "
             "is connections a second and its CPU per transaction the cost of a connection; "
             "its latency is the select's alone (pgbench logs no connection time). COPY: "
             "`psql -c 'COPY copy_src TO STDOUT'` to /dev/null, psql's own "
             "timing of the COPY, CPU per MB between two `pg_sleep`s around it; three COPYs "
             "of each link a round, the links taking turns. Placements: "
             "2 cores = server CPU 1, client CPU 0; 1 core = both on CPU 0 (`taskset`; the "
             "server's processes are pinned again before every run). Links alternate within "
             "each round (in groups that are measured side by side, rotated round by round); "
             "every figure is the median "
             "over rounds. Ratios: the interconnect over the unix socket and TCP loopback "
             "over the unix socket; across namespaces the tcp provider over plain TCP.", "",
             "On 1 core the interconnect keeps every connection on the kernel socket by "
             "default: both ends may run only on the same CPU, so neither can poll while the "
             "other works, and the kernel's wake-up is cheaper than shared memory's "
             "bookkeeping found cold after each switch (`db-interconnect/src/placement.h`; "
             "the runs check that every client connection rode what its link should). The "
             "row *interconnect held on shm* (`VIPL_DB_ONE_CPU=1`) shows what that rule "
             "avoids, measured beside it.", "")
    before_rows = []
    for text, name, clients, placement, unix, tcp in plan.BEFORE:
        u = g(f"pg_{name}_tps", "pg-unix", placement, clients)
        t = g(f"pg_{name}_tps", "pg-tcp", placement, clients)
        v = g(f"pg_{name}_tps", "pg-vipl", placement, clients)
        before_rows.append([text, f"{unix:,}", fmt(u), f"{tcp:,}", fmt(t), fmt(v)])
    rep.emit("Measured on this machine before this work (TPS), beside this run:", "")
    rep.table(["", "unix socket before", "unix socket now", "TCP before", "TCP now",
               "interconnect now"], before_rows)
    main_table(rep)
    pg_before.section(rep)
    where_time_goes(rep)
    plot(rep)
    rep.emit(
        "Caveats:", "",
        "- CPU per transaction counts every server process (walwriter, checkpointer, "
        "background writer as well as the backends) and pgbench's own log writing, on every "
        "link alike; the window's CPU of the other instances (idle) is not counted.",
        "- The servers run as `postgres`, the clients as root.",
        f"- Setup (initdb, pgbench -i, copies, starts) took {meta.get('setup_s', '?')} s.",
        "")


def main_table(rep):
    g = rep.get
    rows = []
    for name, size, label, per in rows_of(None):
        for placement in PLACEMENTS:
            for link in LINKS:
                b = f"pg_{name}"
                speed = g(f"{b}_tps" if per == "tx" else f"{b}_mbps", link.name, placement, size)
                base = BASE[link.name]
                bspeed = g(f"{b}_tps" if per == "tx" else f"{b}_mbps", base, placement,
                           size) if base else None
                cpu = g(f"{b}_cpu", link.name, placement, size)
                bcpu = g(f"{b}_cpu", base, placement, size) if base else None
                cs = g(f"{b}_cpu_server", link.name, placement, size)
                cc = g(f"{b}_cpu_client", link.name, placement, size)
                if speed is None and cpu is None:
                    continue
                rows.append([label, PLACEMENT_LABEL[placement], link.label,
                             fmt(speed) + (" MB/s" if per == "MB" else ""),
                             fmt(g(f"{b}_lat_mean", link.name, placement, size)),
                             fmt(g(f"{b}_lat_p99", link.name, placement, size)),
                             f"{fmt(cpu)} ({fmt(cs)} + {fmt(cc)})" + (
                                 " /MB" if per == "MB" else ""),
                             rtext(speed, bspeed), rtext(cpu, bcpu)])
    rep.emit("TPS (COPY: MB/s), latency per transaction (us), CPU per transaction (us: "
             "server + client; COPY: per MB). Ratios over the base link: above 1 is faster "
             "(TPS), below 1 is cheaper (CPU).", "")
    rep.table(["workload", "placement", "link", "TPS", "mean (us)", "p99 (us)",
               "CPU / tx (us)", "TPS / base", "CPU / base"], rows)


def missed(rep):
    out = []
    for t in TARGETS:
        a, b = rep.get(*t.key(t.link)), rep.get(*t.key(t.base))
        if a is None or not b or not t.met(a / b):
            out.append(t)
    return out


COUNTERS = [("cpu_server", "CPU, server (us)"), ("cpu_client", "CPU, client (us)"),
            ("cs_server", "context switches, server (/proc)"),
            ("cs_client", "context switches, client (/proc)"),
            ("perf_cs_server", "context switches, server (perf stat)"),
            ("perf_cs_client", "context switches, client (perf stat)"),
            ("perf_sys_server", "system calls, server (perf stat)"),
            ("perf_sys_client", "system calls, client (perf stat)"),
            ("calls_server", "interposed calls, server"),
            ("calls_client", "interposed calls, client"),
            ("msgs_server", "stream messages, server"), ("msgs_client", "stream messages, client"),
            ("spins_server", "spins, server"), ("spins_client", "spins, client"),
            ("sleeps_server", "sleeps, server"), ("sleeps_client", "sleeps, client")]


def where_time_goes(rep):
    """For each missed target: what each side spent per transaction, link beside base."""
    targets = missed(rep)
    if not targets:
        rep.emit("Every database target was met.", "")
        return
    rep.emit("### Where the time goes (targets missed)", "",
             "Per transaction (COPY: per MB), the interconnect's link beside its base: CPU "
             "and context switches of every run (median over rounds), `perf stat` "
             "(context switches, `raw_syscalls:sys_enter`) of one extra run after the rounds "
             "(perf's counting slows system calls, so its runs are not in the tables above), "
             "the same run's system calls one by one (a socket's `sendto`, `recvfrom`, `poll` "
             "against the interconnect's doorbell `write`, eventfd `read` and its sleep), "
             "and the interconnect's own counters (`vipl-run --stat` of the backends and the "
             "client at both ends of the window: calls made through the interposer, stream "
             "messages in + out, spins that found data, sleeps). Stream messages and spins "
             "are published when a waiter sleeps or a connection closes, so a run that "
             "never sleeps shows few.", "")
    if not rep.meta.get("notes", {}).get("pg", {}).get("perf", True):
        rep.emit("(`perf` is not installed: no perf stat rows.)", "")
    seen = set()
    for t in targets:
        key = (t.workload, t.clients, t.placement, t.link, t.base)
        if key in seen:
            continue
        seen.add(key)
        per = "MB" if t.workload == "copy" else "tx"
        a, b = rep.get(*t.key(t.link)), rep.get(*t.key(t.base))
        label = rows_of(t.workload)[0][2] if t.workload == "copy" else next(
            w.label for w in WORKLOADS if w.name == t.workload and w.clients == t.clients)
        rep.emit(f"**{label}, {PLACEMENT_LABEL[t.placement]}: {t.link} / {t.base}** "
                 f"({t.metric} {rtext(a, b)}, wanted {t.sense} {t.wanted:g}x)", "")
        rows = []
        for metric, text in COUNTERS:
            va = rep.get(f"pg_{t.workload}_{metric}", t.link, t.placement, t.clients)
            vb = rep.get(f"pg_{t.workload}_{metric}", t.base, t.placement, t.clients)
            if va is None and vb is None:
                continue
            rows.append([f"{text} / {per}", fmt(va, 2), fmt(vb, 2)])
        rows += call_rows(rep, t, per)
        rep.table(["", t.link, t.base], rows)


def call_rows(rep, t, per):
    """perf stat's count of each system call traced one by one (pg_proc.CALLS), where
    either link makes 0.05 or more of it per transaction."""
    rows = []
    for side in ("server", "client"):
        prefix, suffix = f"pg_{t.workload}_perf_call_", f"_{side}"
        calls = sorted({k[0][len(prefix):-len(suffix)] for k in rep.data
                        if k[0].startswith(prefix) and k[0].endswith(suffix)})
        for call in calls:
            bench = f"{prefix}{call}{suffix}"
            va = rep.get(bench, t.link, t.placement, t.clients)
            vb = rep.get(bench, t.base, t.placement, t.clients)
            if max(va or 0, vb or 0) >= 0.05:
                rows.append([f"`{call}`, {side} (perf stat) / {per}", fmt(va, 2), fmt(vb, 2)])
    return rows


def plot(rep):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        rep.emit("(matplotlib missing: no database plot)", "")
        return
    # Connections a second are a hundredth of the other workloads' TPS: a panel of their
    # own, beside COPY's, both per placement.
    steady = [w for w in WORKLOADS if not w.reconnects]
    per_conn = [w for w in WORKLOADS if w.reconnects]
    fig, axes = plt.subplots(1, 3 + len(per_conn), figsize=(16 + 2 * len(per_conn), 5),
                             gridspec_kw={"width_ratios": [4, 4] + [2] * (1 + len(per_conn))})
    width = 0.8 / len(LINKS)
    for ax, placement in zip(axes[:2], PLACEMENTS):
        for i, link in enumerate(LINKS):
            vals = [rep.get(f"pg_{w.name}_tps", link.name, placement, w.clients) or 0
                    for w in steady]
            ax.bar([x + i * width for x in range(len(steady))], vals, width,
                   label=link.label)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(steady))],
                      [w.label for w in steady], fontsize=8)
        ax.set_title(f"pgbench TPS, {PLACEMENT_LABEL[placement]}")
        ax.set_ylabel("transactions/s (median over rounds)")
        ax.grid(True, axis="y", alpha=0.3)
    panels = [(f"pg_{w.name}_tps", w.clients, w.label, "connections/s") for w in per_conn]
    panels.append(("pg_copy_mbps", COPY_BYTES, plan.COPY_LABEL, "MB/s"))
    for ax, (bench, size, title, unit) in zip(axes[2:], panels):
        for i, link in enumerate(LINKS):
            vals = [rep.get(bench, link.name, p, size) or 0 for p in PLACEMENTS]
            ax.bar([x + i * width for x in range(len(PLACEMENTS))], vals, width,
                   label=link.label)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(PLACEMENTS))],
                      [PLACEMENT_LABEL[p] for p in PLACEMENTS])
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(unit)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(rep.out, "pg.png"), dpi=110)
    plt.close(fig)
    rep.emit("[TPS per workload and link (pg.png)](pg.png)", "", "![database](pg.png)", "")
    plot_latency(rep, plt)


def plot_latency(rep, plt):
    """Each link's transaction latency distribution per workload and placement: the
    percentiles of plan.LAT_QUANTILES, each the median over rounds (pg_latency.png)."""
    qs = plan.LAT_QUANTILES
    fig, axes = plt.subplots(len(PLACEMENTS), len(WORKLOADS), figsize=(16, 7), squeeze=False)
    drawn = False
    for row, placement in zip(axes, PLACEMENTS):
        for ax, w in zip(row, WORKLOADS):
            for link in LINKS:
                pts = [(rep.get(f"pg_{w.name}_lat_q{q:g}", link.name, placement, w.clients), q)
                       for q in qs]
                pts = [(v, q) for v, q in pts if v is not None]
                if pts:
                    ax.plot([v for v, _ in pts], [q for _, q in pts], marker=".",
                            label=link.label)
                    drawn = True
            ax.set_xscale("log")
            ax.set_title(f"{w.label}, {PLACEMENT_LABEL[placement]}", fontsize=9)
            ax.set_xlabel("latency per transaction (us, log scale)", fontsize=8)
            ax.set_yticks([1, 25, 50, 75, 99])
            ax.grid(True, which="both", alpha=0.3)
        row[0].set_ylabel("percentile")
    if not drawn:
        plt.close(fig)
        return
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(rep.out, "pg_latency.png"), dpi=110)
    plt.close(fig)
    rep.emit("Latency distributions: percentiles " + ", ".join(f"{q:g}" for q in qs) +
             " of each run's transactions (pgbench's log, the measured window), the median "
             "of each over rounds; the further left a curve, the faster the link.", "",
             "![database latency distributions](pg_latency.png)", "")
