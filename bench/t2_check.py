#!/usr/bin/env python3
"""Table 2's harness checked for correctness (ctest `bench: table2 ...`), not speed.

Usage: t2_check.py VIPL_RUN NODES LINK[,LINK...] [P]
(links: tcp-veth, unix, vipl-shm, vipl-tcp; the namespaced ones join the nodes by a bridge)

N nodes (scale 1) run the TPC-B-like, read-only and two-phase-commit workloads at P %
remote (default 25) over each link, a few seconds each, keeping pgbench_history, then:
- every node's account balances sum to the deltas that name it (anode) in all nodes'
  histories, its tellers and branches to its own history: every remote update landed on
  the node the transaction named, once;
- every node's history holds remote rows for every peer, and local ones;
- node 0 asks each node who it is through PL/Proxy (t2_remote_whoami) and reads changed
  accounts of each peer through PL/Proxy (t2_balance): the peer's own answer;
- no prepared transaction is left on any node;
- on a vipl link, every inter-node connection rode the link's transport (vipl-run --stat
  of every backend; t2_measure raises if one fell back to the kernel), and some did.
Needs root (the servers run as `postgres`) and PostgreSQL 15 with PL/Proxy; without
them it fails and says so.  Exit 0: every check held.
"""
import os
import shutil
import sys
import tempfile

import t2_plan as plan
from pg_instance import PgError
from t2_measure import measure, write_scripts
from t2_net import Bridge
from t2_nodes import Cluster

SCALE = 1
SECONDS = 2


def fail(text):
    print(f"FAIL: {text}", flush=True)
    return False


def check_balances(cluster):
    ok = True
    n = cluster.n
    deltas = [[0] * n for _ in range(n)]  # deltas[i][j]: node i's history naming node j
    counts = [[0] * n for _ in range(n)]
    for node in cluster.nodes:
        for line in node.admin("SELECT anode, sum(delta), count(*) FROM pgbench_history "
                               "GROUP BY anode").split():
            j, s, c = map(int, line.split("|"))
            deltas[node.idx][j], counts[node.idx][j] = s, c
        for j in range(n):
            if counts[node.idx][j] == 0:
                ok = fail(f"node {node.idx}: no transaction in its history named node {j}")
    for node in cluster.nodes:
        a, t, b, h = map(int, node.admin(
            "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(tbalance) FROM "
            "pgbench_tellers), (SELECT sum(bbalance) FROM pgbench_branches), (SELECT "
            "coalesce(sum(delta), 0) FROM pgbench_history)").split("|"))
        want = sum(deltas[i][node.idx] for i in range(n))
        print(f"node {node.idx}: accounts {a}, deltas naming it {want}; tellers {t}, "
              f"branches {b}, own history {h}", flush=True)
        if a != want:
            ok = fail(f"node {node.idx}: accounts sum to {a}, the histories' deltas naming it "
                      f"to {want}")
        if not t == b == h:
            ok = fail(f"node {node.idx}: tellers {t}, branches {b}, history {h}")
        left = node.admin("SELECT count(*) FROM pg_prepared_xacts").strip()
        if left != "0":
            ok = fail(f"node {node.idx}: {left} prepared transactions left")
    return ok


def check_proxy(cluster):
    ok = True
    first = cluster.nodes[0]
    for node in cluster.nodes:
        who = first.admin(f"SELECT t2_remote_whoami({node.idx})").strip()
        if who != str(node.idx):
            ok = fail(f"PL/Proxy RUN ON {node.idx} reached node {who}")
        rows = node.admin("SELECT aid, abalance FROM pgbench_accounts WHERE abalance <> 0 "
                          "ORDER BY aid LIMIT 20").split()
        if not rows:
            ok = fail(f"node {node.idx}: no account changed")
        for line in rows:
            aid, bal = line.split("|")
            got = first.admin(f"SELECT t2_balance({node.idx}, {aid})").strip()
            if got != bal:
                ok = fail(f"node {node.idx} aid {aid}: balance {bal}, through PL/Proxy {got}")
    return ok


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    vipl_run, n, links = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    p = int(sys.argv[4]) if len(sys.argv) == 5 else 25
    if os.geteuid() != 0:
        print("FAIL: needs root (the servers run as postgres, in namespaces for some links); "
              "nothing was checked", flush=True)
        return 1
    if not os.access(vipl_run, os.X_OK):
        print(f"FAIL: {vipl_run} is not built", flush=True)
        return 1
    unknown = [x for x in links if x not in plan.LINK]
    if unknown:
        sys.exit(f"unknown links {unknown} (links: {', '.join(plan.LINK)})")
    net = Bridge(n) if any(plan.LINK[x].netns for x in links) else None
    if net and net.error:
        print(f"FAIL: no network namespaces: {net.error}", flush=True)
        net.close()
        return 1
    cluster = Cluster(n, vipl_run, net)
    work = tempfile.mkdtemp(prefix="vipl-t2-check-")
    ok = True
    try:
        cluster.setup(SCALE)
        texts = {}
        for w in plan.WORKLOADS + [plan.TWO_PC]:
            texts[f"{w.name}-local"] = w.local
            texts[f"{w.name}-remote"] = w.remote
        paths = write_scripts(work, texts)
        for name in links:
            link = plan.LINK[name]
            for w in plan.WORKLOADS + [plan.TWO_PC]:
                scripts = [(paths[f"{w.name}-local"], 100 - p), (paths[f"{w.name}-remote"], p)]
                run = measure(cluster, link, n, list(range(n)), scripts, 2, SECONDS, work,
                              True, keep_history=True)
                print(f"{name} {w.name} p={p}: {run.count(0)} local, {run.count(1)} remote "
                      f"transactions in the window, {run.conns} inter-node connections "
                      f"from {sorted(run.addrs)}" +
                      (f", {run.rode} rode {link.trans}, {run.kernel} on the kernel"
                       if link.vipl else ""), flush=True)
                if run.count(1) == 0:
                    ok = fail(f"{name} {w.name}: no remote transaction")
                if link.vipl and (run.rode == 0 or run.kernel):
                    ok = fail(f"{name} {w.name}: {run.rode} rode {link.trans}, "
                              f"{run.kernel} the kernel")
        ok = check_balances(cluster) and ok
        ok = check_proxy(cluster) and ok
    except PgError as e:
        ok = fail(str(e))
    finally:
        cluster.close()
        if net:
            net.close()
        shutil.rmtree(work, ignore_errors=True)
    print("table2 check: " + ("every check held" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
