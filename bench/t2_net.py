"""Network namespaces for Table 2's nodes when the run has more than two of them: one
namespace per node, each with a veth pair whose other end is a port of one bridge in the
host's namespace (two nodes use run.py's NetPair: a veth pair, no bridge).  Addresses
10.214.<tag>.<i+1>/24.  Same interface as NetPair: names, addrs, error; removed by
close() (stale ones of killed runs by the next run).
"""
import os
import subprocess

PREFIX = "vipl-t2-"


def ip(*args):
    return subprocess.run(["ip"] + list(args), capture_output=True, text=True)


class Bridge:
    def __init__(self, n):
        pid = os.getpid()
        tag = pid % 250
        self.names = [f"{PREFIX}{pid}-{i}" for i in range(n)]
        self.addrs = [f"10.214.{tag}.{i + 1}" for i in range(n)]
        self.bridge = f"t2b{pid % 100000}"
        self.error = None
        self._cleanup_stale()
        steps = [("link", "add", self.bridge, "type", "bridge"),
                 ("link", "set", self.bridge, "up")]
        for i, name in enumerate(self.names):
            inner, outer = f"t2n{pid % 10000}x{i}", f"t2h{pid % 10000}x{i}"
            steps += [("netns", "add", name),
                      ("link", "add", inner, "type", "veth", "peer", "name", outer),
                      ("link", "set", inner, "netns", name),
                      ("link", "set", outer, "master", self.bridge),
                      ("link", "set", outer, "up"),
                      ("-n", name, "addr", "add", self.addrs[i] + "/24", "dev", inner),
                      ("-n", name, "link", "set", "lo", "up"),
                      ("-n", name, "link", "set", inner, "up")]
        for step in steps:
            r = ip(*step)
            if r.returncode != 0:
                self.error = f"ip {' '.join(step)}: {r.stderr.strip()}"
                break
        forward(self.bridge, "-I")

    @staticmethod
    def _cleanup_stale():
        for line in ip("netns", "list").stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(PREFIX):
                pid = name[len(PREFIX):].split("-")[0]
                if not pid.isdigit() or not os.path.exists(f"/proc/{pid}"):
                    ip("netns", "delete", name)
                    if pid.isdigit():
                        ip("link", "delete", f"t2b{int(pid) % 100000}")
                        forward(f"t2b{int(pid) % 100000}", "-D")

    def close(self):
        for name in self.names:
            ip("netns", "delete", name)  # takes its veth end, and so the pair, with it
        ip("link", "delete", self.bridge)
        forward(self.bridge, "-D")


def forward(bridge, op):
    """Lets frames through the bridge (op -I) or stops doing so (-D).  Where br_netfilter
    is loaded (dockerd loads it and sets the FORWARD policy to DROP), bridged frames go
    through iptables' FORWARD chain: without this rule the nodes would not reach each
    other.  No iptables: nothing filters, nothing to do."""
    rule = ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]
    try:
        subprocess.run(["iptables", "-w", "5", op] + rule, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
