#!/usr/bin/env python3
"""t2_host.py checked as an operator runs it on two hosts (ctest `bench: table2 t2_host.py
...`): two network namespaces joined by a bridge stand for the hosts.

Usage: t2_host_check.py VIPL_RUN

In each namespace, `t2_host.py init` then `start` (scale 1, under vipl-run: the tcp
provider between the namespaces); then `run` on node 0 and `drive` from node 0's
namespace.  Checks: both exit 0, `run` counted remote transactions and saw its outgoing
inter-node connections ride tcp (vipl-run --stat), `drive` printed both nodes' TPS, the
speedup and inter-node connections on both nodes.  The same commands run in docker/'s
containers (prepare, drive).  Needs root and PostgreSQL 15 with PL/Proxy; exit 0: every
check held.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import t2_net
from t2_nodes import cleanup_stale

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    vipl_run = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        sys.exit("t2_host_check.py: needs root (namespaces, servers run as postgres)")
    cleanup_stale()
    net = t2_net.Bridge(2)
    root = tempfile.mkdtemp(prefix=f"vipl-bench-t2-{os.getpid()}-")
    os.chmod(root, 0o755)
    port = 65400 + (os.getpid() % 50) * 2
    hosts = ",".join(f"{a}:{port + i}" for i, a in enumerate(net.addrs))
    started, failures = [], []

    def host(i, *args, timeout=300):
        env = dict(os.environ, VIPL_T2_HOSTS=hosts, VIPL_T2_NODE=str(i), VIPL_T2_SCALE="1",
                   VIPL_T2_VIPL_RUN=vipl_run, VIPL_T2_CPU=str(i % (os.cpu_count() or 1)))
        cmd = ["ip", "netns", "exec", net.names[i], sys.executable,
               os.path.join(HERE, "t2_host.py")] + list(args)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"node {i}: t2_host.py {args[0]}: exit {p.returncode}: "
                               f"{(p.stderr or p.stdout).strip()[-400:]}")
        return p.stdout

    try:
        if net.error:
            raise RuntimeError(f"namespaces: {net.error}")
        folders = [os.path.join(root, f"host{i}") for i in range(2)]
        for i in range(2):
            host(i, "init", folders[i])
            host(i, "start", folders[i])
            started.append(i)
        out = host(0, "run", folders[0], "tpcb", "25", "3")
        print(out.strip())
        words = out.split()
        if "remote" not in words or int(words[words.index("remote") + 1]) == 0:
            failures.append(f"run: no remote transaction: {out.strip()}")
        if "outgoing inter-node connections: tcp" not in out or "kernel" in out:
            failures.append(f"run: inter-node connections not all on tcp: {out.strip()}")
        out = host(0, "drive", "tpcb", "25", "3")
        print(out.strip())
        for line in ("cluster of 2: tps", "node 0: tps", "node 1: tps"):
            if line not in out:
                failures.append(f"drive: no `{line}` line")
        for i in range(2):
            line = [x for x in out.splitlines() if x.startswith(f"node {i} inter-node")]
            if not line or line[0].endswith(": none") or " kernel " in line[0]:
                failures.append(f"drive: node {i}'s inter-node connections: {line}")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        failures.append(str(e))
    finally:
        for i in started:
            try:
                host(i, "stop", os.path.join(root, f"host{i}"), timeout=120)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(str(e))
        net.close()
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print(f"t2_host_check.py: FAILED: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
