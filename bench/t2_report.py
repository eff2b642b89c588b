"""The report's Table 2 section: "Table 2: OLTP scaling of clustered PostgreSQL".

report.py calls target_specs() for its targets table and section(report) for the rest:
the speedups per link and p beside the paper's, table2.png, latency, CPU, the PL/Proxy
round trip, the two-phase-commit variant, where a remote read's extra CPU goes
(t2_breakdown.py).
"""
import os

import t2_breakdown
import t2_plan as plan
from t2_plan import BASE, LINKS, PAPER, PAPER_LINK, TARGETS, TWO_PC, WORKLOADS


def fmt(v, digits=2):
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}f}"


def placement(rep):
    n = rep.meta.get("notes", {}).get("table2", {}).get("nodes", plan.NODES)
    return f"n{n}"


def ps(rep, bench):
    return sorted({k[3] for k in rep.data if k[0] == bench})


def targets(rep):
    """Table 2's targets, as differences of speedups (report.py's table divides)."""
    if not any(k[0].startswith("t2_") for k in rep.data):
        return []
    pl = placement(rep)
    rows = []
    for t in TARGETS:
        key = lambda link: (f"t2_{t.workload}_speedup", link, pl, t.p)
        wanted = f">= {t.wanted:g}" + (" more" if t.base else "x")
        a = rep.get(*key(t.link))
        b = rep.get(*key(t.base)) if t.base else None
        if a is None or (t.base and b is None):
            rows.append([t.text, "–", wanted, "n/a", "–"])
            continue
        measured = f"{a:.2f}" if not t.base else f"{a:.2f} - {b:.2f} = {a - b:+.2f}"
        hits = []
        for per in rep.raw.values():
            ra, rb = per.get(key(t.link)), per.get(key(t.base)) if t.base else None
            if ra is not None and (not t.base or rb is not None):
                hits.append(t.met(ra, rb))
        rows.append([t.text, measured, wanted,
                     "**yes**" if t.met(a, b) else "**no**", f"{sum(hits)}/{len(hits)}"])
    return rows + t2_breakdown.targets(rep, pl)


def section(rep):
    if not any(k[0].startswith("t2_") for k in rep.data) and not any(
            f["benchmark"].startswith("t2_") for f in rep.meta.get("failures", [])):
        return
    g = rep.get
    pl = placement(rep)
    meta = rep.meta.get("notes", {}).get("table2", {})
    n = meta.get("nodes", plan.NODES)
    settings = meta.get("settings") or [[k, v] for k, v, _ in plan.SETTINGS]
    rep.emit(
        "## Table 2: OLTP scaling of clustered PostgreSQL over each interconnect", "",
        f"The paper: a 2-node Oracle Parallel Server ran OLTP at 1.76x one node with UDP over "
        f"Fast Ethernet, 1.73x with UDP over the SAN, 1.98x with VIA. Here {n} PostgreSQL 15 "
        "nodes, each one instance and its pgbench clients pinned together to one CPU (node i "
        "on CPU i mod ncpu), hold one partition each of the key space (each node's own "
        f"`pgbench -i -s {meta.get('scale', plan.SCALE)}` tables; a key is (node, aid)); a "
        "fraction p of the transactions reach another node through one PL/Proxy call "
        "(`CLUSTER 'bench'; RUN ON node`, partitions from `plproxy.get_cluster_partitions`). "
        "What stands in for what: two CPUs of one host for two nodes; TCP over a veth pair "
        "between two network namespaces for UDP over Ethernet; the unix socket (one host) "
        "for the paper's UDP over the SAN, both being the kernel's stack on a faster medium; "
        "the interconnect's shm provider (`vipl-run`, one host) for VIA: user-level "
        "messaging without the kernel on the data path; and the interconnect's tcp provider "
        "over the veth pair (`VIPL_DB_REMOTE`) for VIA emulated over Ethernet.", "",
        f"Settings of every node: " + ", ".join(f"`{k}={v}`" for k, v in settings) +
        f"; {meta.get('clients', plan.CLIENTS)} pgbench clients per node on the node's "
        "unix socket (plain, on every link: only the inter-node connections change), "
        f"`-M prepared -j 1 -n -T {meta.get('pgbench_s', plan.PGBENCH_S) + meta.get('end_s', plan.END_S)}`, scripts "
        "weighted `-f local.sql@(100-p) -f remote.sql@p`. Before every run the nodes are "
        "restarted for the link (under `vipl-run` or not, in their namespaces or not), "
        "`pgbench_history` emptied, branches and tellers vacuumed, the accounts prewarmed "
        f"(`pg_prewarm`). A run counts what every node's `-l` log shows completed from "
        f"{meta.get('warm_s', plan.WARM_S)} s after the last node's first logged "
        f"transaction to {meta.get('end_s', plan.END_S)} s before pgbench's end. Speedup = "
        "(sum of the nodes' TPS) / (TPS of one node alone on one CPU with one node's data and "
        "clients), the baseline run twice per workload and round (first and last); speedup = "
        f"median over {meta.get('rounds', '?')} rounds of the summed TPS / median of every "
        "baseline run; links interleave within each round. "
        "Workloads: TPC-B-like (local: pgbench's TPC-B on the node's rows; remote: the "
        "account updated on a random other node by `t2_update(node, aid, delta)`, tellers, "
        "branches and history local); read-only (a point select of an account; remote: "
        "`t2_balance(node, aid)` on another node); the peer runs a PL/pgSQL function, whose "
        "statement's plan it keeps for the connection. Every run checks how the inter-node "
        "connections went while they are open (pg_stat_activity's client addresses; "
        "`vipl-run --stat` of every backend on vipl links) and fails if a vipl link's "
        "connection stayed on the kernel.", "")
    # ---------------------------------------------------------- Table 2
    for w in WORKLOADS:
        bench = f"t2_{w.name}"
        plist = ps(rep, f"{bench}_speedup")
        if not plist:
            continue
        rows = []
        for link in LINKS:
            row = [link.label]
            for p in plist:
                row.append(fmt(g(f"{bench}_speedup", link.name, pl, p)))
            paper = PAPER_LINK.get(link.name)
            row.append(f"{paper:.2f}" if paper else "–")
            rows.append(row)
        base = g(f"{bench}_tps", BASE, pl, 0)
        rep.emit(f"**Table 2, {w.label}: speedup of {n} nodes over one (one node: "
                 f"{fmt(base)} TPS)**", "")
        rep.table(["link"] + [f"p={p}%" for p in plist] + ["paper (p unknown)"], rows)
    rep.emit("Paper: " + ", ".join(f"{name} {v:.2f}x" for name, v in PAPER) +
             " (the paper's column stands beside its stand-in).", "")
    rep.emit("### Table 2's targets (reported, never enforced)", "",
             "`rounds` counts the rounds that met a target on their own.", "")
    rep.table(["target", "measured", "wanted", "met", "rounds"], targets(rep))
    plot(rep, pl)
    latency_cpu(rep, pl)
    where_time_goes(rep, pl)
    t2_breakdown.section(rep, pl)
    ping(rep, pl)
    two_pc(rep, pl)
    rep.emit("Caveats:", "",
             "- CPU per transaction counts every running node's server processes (backends, "
             "the backends serving the peers' PL/Proxy calls, walwriter, checkpointer); "
             "local = p=0 run of the same link and round per transaction, remote = the rest "
             "of a p>0 run's CPU over its remote transactions (so it holds both nodes' work "
             "for one remote call).",
             "- One host: both nodes share its memory bus and caches, and the host's other "
             "work; a real fabric also adds wire time that veth does not. The 1-node "
             "baseline leaves the other CPU to the host's other work, the N-node runs do "
             "not: under load (see the load average in the header) every speedup drops.",
             f"- Setup (initdb, pgbench -i, copies) took {meta.get('setup_s', '?')} s.", "")


def latency_cpu(rep, pl):
    g = rep.get
    rows = []
    for w in WORKLOADS + [TWO_PC]:
        bench = f"t2_{w.name}"
        for p in ps(rep, f"{bench}_tps"):
            for link in [BASE] + [x.name for x in LINKS]:
                if link == BASE and p:
                    continue
                tps = g(f"{bench}_tps", link, pl, p)
                if tps is None:
                    continue
                rows.append([w.label, f"{p}", link, fmt(tps),
                             fmt(g(f"{bench}_lat_p50_local", link, pl, p), 0),
                             fmt(g(f"{bench}_lat_p99_local", link, pl, p), 0),
                             fmt(g(f"{bench}_lat_p50_remote", link, pl, p), 0),
                             fmt(g(f"{bench}_lat_p99_remote", link, pl, p), 0),
                             fmt(g(f"{bench}_cpu", link, pl, p), 1),
                             fmt(g(f"{bench}_cpu_local", link, pl, p), 1),
                             fmt(g(f"{bench}_cpu_remote", link, pl, p), 1),
                             fmt(g(f"{bench}_conns", link, pl, p), 0) + (
                                 f" ({fmt(g(f'{bench}_conns_vipl', link, pl, p), 0)} vipl)"
                                 if g(f"{bench}_conns_vipl", link, pl, p) is not None else "")])
    rep.emit("### Latency and CPU per transaction", "",
             "TPS summed over the nodes; latency (us) of local and remote transactions from "
             "pgbench's `-l` log (its script column); server CPU (us) per transaction: all, "
             "local, remote (see the caveats); inter-node connections open at the window's "
             "end (on vipl links: how many `vipl-run --stat` showed riding the link's "
             "transport). Medians over rounds.", "")
    rep.table(["workload", "p %", "link", "TPS", "local p50", "local p99", "remote p50",
               "remote p99", "CPU/tx", "CPU local", "CPU remote", "connections"], rows)


def where_time_goes(rep, pl):
    """perf stat of one extra run per missed target (t2_run.diagnose)."""
    g = rep.get
    rows = []
    for w in WORKLOADS:
        bench = f"t2_{w.name}"
        for p in ps(rep, f"{bench}_perf_sys"):
            for link in LINKS:
                sys_ = g(f"{bench}_perf_sys", link.name, pl, p)
                if sys_ is None:
                    continue
                rows.append([w.label, f"{p}", link.name,
                             fmt(g(f"{bench}_perf_tps", link.name, pl, p)),
                             fmt(g(f"{bench}_perf_cpu", link.name, pl, p), 1),
                             fmt(g(f"{bench}_cpu_remote", link.name, pl, p), 1),
                             fmt(sys_), fmt(g(f"{bench}_perf_cs", link.name, pl, p)),
                             by_call(rep, f"{bench}_perf_call_", link.name, pl, p)])
    if not rows:
        return
    rep.emit("### Where the time goes (targets missed)", "",
             "One more run of each missed target's workload and p after the rounds, its link "
             "beside the one it is compared with, under `perf stat` (every server process of "
             "both nodes: `raw_syscalls:sys_enter`, `context-switches`, per transaction; "
             "perf slows system calls, so these runs are not in the tables above); CPU "
             "remote is the rounds' median. By call: the system calls of every server "
             "process per transaction, each counted by its own tracepoint (those at 0.05 "
             "or more): a socket link shows `sendto`, `recvfrom` and `poll`; the "
             "interconnect's doorbell shows as `write` (waking a peer) and `read` (an "
             "awakened process clearing its eventfd), its sleep as `ppoll` or `epoll_*`, "
             "its spin policy's look at the CPU's contention (at most every 10 ms per "
             "thread) as `openat`, `read` and `close` of `/proc/thread-self/schedstat`.",
             "")
    rep.table(["workload", "p %", "link", "TPS (perf run)", "CPU/tx (us)",
               "CPU remote (us)", "system calls/tx", "context switches/tx", "by call"], rows)


def by_call(rep, prefix, link, pl, p):
    """`name count` of every system call counted one by one, most frequent first."""
    calls = []
    for (bench, transport, place, size), v in rep.data.items():
        if bench.startswith(prefix) and (transport, place, size) == (link, pl, p):
            if v[0] is not None and v[0] >= 0.05:
                calls.append((v[0], bench[len(prefix):]))
    calls.sort(reverse=True)
    return ", ".join(f"{name} {v:.2f}" for v, name in calls) or "–"


def ping(rep, pl):
    g = rep.get
    rows = [[link.label, fmt(g("t2_ping_p50", link.name, pl, 0), 0),
             fmt(g("t2_ping_p99", link.name, pl, 0), 0),
             fmt(g("t2_ping_mean", link.name, pl, 0), 1)] for link in LINKS]
    rep.emit("### PL/Proxy round trip", "",
             f"One client on node 0 calls `t2_ping(peer)` (PL/Proxy: `SELECT 1` on a random "
             f"other node) in a loop for {rep.meta.get('notes', {}).get('table2', {}).get('ping_s', '?')} s, "
             "the other node idle: latency per call (us) from pgbench's log, the local "
             "parse/plan of the call included.", "")
    rep.table(["link", "p50 (us)", "p99 (us)", "mean (us)"], rows)


def two_pc(rep, pl):
    g = rep.get
    rows = []
    for p in ps(rep, "t2_2pc_tps"):
        for link in LINKS:
            rows.append([f"{p}", link.label, fmt(g("t2_2pc_tps", link.name, pl, p)),
                         fmt(g("t2_2pc_speedup", link.name, pl, p)),
                         fmt(g("t2_tpcb_speedup", link.name, pl, p)),
                         fmt(g("t2_2pc_lat_p50_remote", link.name, pl, p), 0),
                         fmt(g("t2_2pc_lat_p99_remote", link.name, pl, p), 0),
                         fmt(g("t2_2pc_lat_p50_local", link.name, pl, p), 0)])
    if not rows:
        return
    rep.emit("### Two-phase commit", "",
             "The remote part joins the local transaction: through dblink (one named "
             "connection per peer and backend) the peer runs `BEGIN`, the account update and "
             "`PREPARE TRANSACTION`, the local transaction commits, then `COMMIT PREPARED` on "
             "the peer (`max_prepared_transactions` > 0). Speedup over the same one-node "
             "TPC-B-like baseline; PL/Proxy's (no 2PC) beside it.", "")
    rep.table(["p %", "link", "TPS", "speedup", "PL/Proxy speedup", "remote p50 (us)",
               "remote p99 (us)", "local p50 (us)"], rows)


def plot(rep, pl):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        rep.emit("(matplotlib missing: no Table 2 plot)", "")
        return
    fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(13, 5), sharey=True)
    for ax, w in zip(axes, WORKLOADS):
        bench = f"t2_{w.name}_speedup"
        for link in LINKS:
            pts = [(p, rep.get(bench, link.name, pl, p)) for p in ps(rep, bench)]
            pts = [(p, v) for p, v in pts if v is not None]
            if pts:
                ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=link.label)
        for (name, v), marker in zip(PAPER, ["s", "^", "*"]):
            ax.scatter([10], [v], marker=marker, s=90, color="black", zorder=5,
                       label=f"paper: {name} {v:.2f} (p not given; drawn at 10)")
        ax.axhline(2.0, color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"{w.label}")
        ax.set_xlabel("remote transactions p (%)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("speedup: 2 nodes / 1 node (median over rounds)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(rep.out, "table2.png"), dpi=110)
    plt.close(fig)
    rep.emit("![Table 2: speedup vs p](table2.png)", "")
