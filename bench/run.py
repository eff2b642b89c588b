#!/usr/bin/env python3
"""Runs every benchmark, interleaved, and writes raw.csv, results.csv and meta.json.

Usage: run.py BUILD_DIR OUT_DIR

Each round runs every transport once per placement (A B C A B C ...), so a
noisy minute on a shared machine spreads over all transports instead of
landing on one; results.csv holds the median over rounds.  After the rounds,
the VI-scale fleets and the paper's sharing example run once.  Every child runs
in its own session under a timeout and is killed with its process group if
it hangs.  VIPL_BENCH_PARTS (comma-separated, default all) picks the parts:
latency, bandwidth, table5, namespaces, orb, interposer, db, table2 (per round; table2 in
VIPL_T2_ROUNDS of them, spread), scale (once).
VIPL_BENCH_QUICK=1 is a first look: one round unless VIPL_BENCH_ROUNDS says otherwise.
Progress: each part as it starts, with an estimate of the time left.  SIGINT, SIGTERM or
SIGHUP stop the run where it is: what was measured is written and the exit status is 130.
"""
import csv
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import pg_plan
from pg_run import PgPart
from t2_run import Table2Part

LAT_SIZES = [0, 1, 8, 64, 256, 512, 1024, 4096]
BW_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20]
PLACEMENTS = {"cross": (0, 1), "same": (0, 0)}
ROUNDS = int(os.environ.get("VIPL_BENCH_ROUNDS", "1" if pg_plan.QUICK else "7"))
LAT_ITERS = 5000
LAT_MAX_MS = 150
BW_BYTES = 128 << 20
BW_MAX_MS = 200
# Polling tools that cannot yield hand the CPU over only at the scheduler
# tick when both processes share it: a few milliseconds per message.
SLOW_POLL_ITERS = 25
TIMEOUT_S = 60
SPIN_US = "1000000"  # the largest VIPL_SPIN_US accepted
# common/'s Stream beside raw libvipl: spinning as long as libvipl's spin runs, blocking,
# and AsioStream with the stream's default spin (bench-stream).
STREAM_MODES = [("stream-spin", {"VIPL_STREAM_SPIN_US": SPIN_US}),
                ("stream-block", {"VIPL_STREAM_SPIN_US": "0"}),
                ("asio", None)]
# The stream's copy path at every bandwidth size (zero copy off: threshold 0 = never),
# spinning, across cores: the 1 MiB write's other way, beside its zero copy.
STREAM_COPY = ("stream-copy", {"VIPL_STREAM_SPIN_US": SPIN_US,
                               "VIPL_STREAM_ZCOPY_THRESHOLD": "0"})
# The same without the stage (every byte through the send buffers): what it gains.
STREAM_UNSTAGED = ("stream-unstaged", dict(STREAM_COPY[1], VIPL_STREAM_STAGE_THRESHOLD="0"))
STREAM_LAT_SIZES = [8, 64, 1024, 4096, 16384, 65536]
# Each call's cost on a message's way (bench-stream-cost): a second a round.
CALL_COST_SIZES = [8, 1024]
# VI scale and the paper's sharing example: once per run (they measure
# memory and set-up, seconds each, not a noisy latency).
SCALE_VIS = int(os.environ.get("VIPL_BENCH_SCALE_VIS", "131072"))
# VIPL_SHM_RING_SIZE: what a host of many VIs sets (the default 512 KiB favours speed
# per message over VIs per host) and the smallest.
SCALE_RINGS = ["8192", "2048"]
# Small-message bandwidth against UCX also with a ring 4x the default: how far the sender
# may run ahead of the receiver moves it (report.py's gap table), side by side each round.
GAP_RING = "2097152"
GAP_SIZES = [4 << 10, 16 << 10, 64 << 10]
PAPER_SIZES = [(8, 64), (16, 256)]  # server processes x client processes
# Under a second each; the median tames the noise of /proc/meminfo (a first look: one).
PAPER_REPS = 1 if pg_plan.QUICK else 3
SCALE_TIMEOUT_S = 240

# Table 3: omniORB round trips, bench-orb once per transport and placement a round
# (10,000 null and 10,000 1 KiB calls: a few seconds a round).
ORB_TRANSPORTS = ["tcp", "unix", "vipl"]
ORB_ITERS = 10000
# The socket interposer (db-interconnect): one unmodified socket program (bench-sock on a
# listening socket file, and on TCP loopback), run plain and under vipl-run, side by side
# in each round.
DB_LAT_SIZES = [8, 512, 4096, 65536]
DB_VARIANTS = ["unix-path", "tcp"]
# The database section (PostgreSQL 15 over sockets and the interconnect): pg_plan.py.
# Table 2 (OLTP scaling of PostgreSQL nodes joined by PL/Proxy): t2_plan.py.
ROUND_PARTS = ["latency", "bandwidth", "table5", "namespaces", "orb", "interposer", "db",
               "table2"]
ONCE_PARTS = ["diagnose", "scale"]  # after the rounds
# What the once-only parts took on a 2-core host, for the estimate of time left before they
# have run (diagnose: perf stat where the db rounds missed a target, Table 2's perf stat
# and perf record runs; scale: VI fleets).
ONCE_GUESS_S = {"diagnose": 5 if pg_plan.QUICK else 90, "scale": 50}
ALL_PARTS = ROUND_PARTS + ["scale"]
PARTS = [p for p in os.environ.get("VIPL_BENCH_PARTS", ",".join(ALL_PARTS)).split(",") if p]

COLUMNS = ["benchmark", "transport", "placement", "size", "value", "unit", "iterations"]


class NetPair:
    """Two network namespaces joined by a veth pair, private addresses only.

    The tcp provider and plain TCP are measured between them, as between two
    hosts; every packet crosses the veth pair.  Made at the start of a run and
    removed at its end (or by the next run, if this one was killed).
    """
    PREFIX = "vipl-bench-"

    def __init__(self):
        tag = os.getpid() % 250
        self.names = (f"{self.PREFIX}{os.getpid()}-c", f"{self.PREFIX}{os.getpid()}-s")
        self.links = (f"vb{os.getpid() % 100000}c", f"vb{os.getpid() % 100000}s")
        self.addrs = (f"10.213.{tag}.1", f"10.213.{tag}.2")
        self.error = None

    @staticmethod
    def ip(*args):
        return subprocess.run(["ip"] + list(args), capture_output=True, text=True)

    def cleanup_stale(self):
        out = self.ip("netns", "list").stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(self.PREFIX):
                pid = name[len(self.PREFIX):].split("-")[0]
                if not pid.isdigit() or not os.path.exists(f"/proc/{pid}"):
                    self.ip("netns", "delete", name)

    def __enter__(self):
        self.cleanup_stale()
        c, s = self.names
        steps = [("netns", "add", c), ("netns", "add", s),
                 ("link", "add", self.links[0], "type", "veth", "peer", "name", self.links[1]),
                 ("link", "set", self.links[0], "netns", c),
                 ("link", "set", self.links[1], "netns", s),
                 ("-n", c, "addr", "add", self.addrs[0] + "/24", "dev", self.links[0]),
                 ("-n", s, "addr", "add", self.addrs[1] + "/24", "dev", self.links[1]),
                 ("-n", c, "link", "set", "lo", "up"), ("-n", s, "link", "set", "lo", "up"),
                 ("-n", c, "link", "set", self.links[0], "up"),
                 ("-n", s, "link", "set", self.links[1], "up")]
        for step in steps:
            r = self.ip(*step)
            if r.returncode != 0:
                self.error = f"ip {' '.join(step)}: {r.stderr.strip()}"
                break
        return self

    def __exit__(self, *exc):
        for name in self.names:
            self.ip("netns", "delete", name)
        return False

    def args(self, devices):
        """The harness options that put the client and server in the namespaces."""
        extra = ["--netns", ",".join(self.names), "--server-host", self.addrs[1]]
        if devices:
            extra += ["--devices", f"tcp:{self.addrs[0]},tcp:{self.addrs[1]}"]
        return extra


class Failure(Exception):
    pass


class Runner:
    def __init__(self, build, out):
        self.build = os.path.abspath(build)
        self.out = os.path.abspath(out)
        self.tmp = tempfile.mkdtemp(prefix="vipl-bench-")
        self.rows = []  # raw rows, with a round number
        self.failures = {}  # (benchmark, transport, placement) -> reason
        self.notes = {}
        self.port = 20000 + os.getpid() % 20000
        self.round = 0
        self.started = None
        self.load_before = None
        self.net = None
        self.db = None  # PgPart, made at the first round that runs the part
        self.t2 = None  # Table2Part, the same
        self.start = None
        self.part_s = {}  # part -> seconds it took the last time it ran: the estimate
        self.at = None  # (round, part) running now: where an interrupted run stopped
        self.interrupted = None

    # ------------------------------------------------------------ helpers
    def binary(self, name):
        path = os.path.join(self.build, "bench", name)
        return path if os.access(path, os.X_OK) else None

    def next_port(self):
        self.port = 20000 + (self.port - 20000 + 1) % 40000
        return self.port

    def add(self, benchmark, transport, placement, size, value, unit, iterations):
        self.rows.append(dict(benchmark=benchmark, transport=transport, placement=placement,
                              size=size, value=value, unit=unit, iterations=iterations,
                              round=self.round))

    def fail(self, benchmark, transport, placement, reason):
        key = (benchmark, transport, placement)
        self.failures.setdefault(key, f"round {self.round}: {reason}")
        print(f"  ! {benchmark} {transport} {placement}: {reason}", file=sys.stderr)

    def run(self, cmd, env=None, timeout=TIMEOUT_S):
        """Runs cmd in its own session; returns stdout or raises Failure."""
        full_env = dict(os.environ)
        full_env.update(env or {})
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=full_env, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            p.communicate()
            raise Failure(f"timed out after {timeout} s and was killed")
        except BaseException:  # an interrupt: the child is in a session of its own
            kill_group(p)
            p.wait()
            raise
        if p.returncode != 0:
            raise Failure(f"exit status {p.returncode}: {tail(err)}")
        return out

    def pair(self, server_cmd, client_cmd, port, env=None, timeout=TIMEOUT_S):
        """Starts a server, waits until it listens on port, runs the client."""
        full_env = dict(os.environ)
        full_env.update(env or {})
        log = tempfile.TemporaryFile("w+", dir=self.tmp)
        server = subprocess.Popen(server_cmd, stdout=log, stderr=subprocess.STDOUT, text=True,
                                  env=full_env, start_new_session=True)
        try:
            deadline = time.monotonic() + 10
            while not listening(port):
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise Failure("server did not start listening: " + tail(log.read()))
                time.sleep(0.01)
            out = self.run(client_cmd, env, timeout)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                raise Failure("server did not exit after the client finished")
            return out
        finally:
            if server.poll() is None:
                kill_group(server)
            server.wait()
            log.close()

    # ------------------------------------------------- our own programs
    def own(self, benchmark, transport, placement, binary, args, env=None, pair=None,
            wrap=()):
        path = self.binary(binary)
        if not path:
            self.fail(benchmark, transport, placement, f"{binary} was not built")
            return
        c, s = PLACEMENTS[placement]
        cmd = list(wrap) + [path, "--cpus", f"{c},{s}", "--timeout", str(TIMEOUT_S)] + args
        try:
            out = self.run(cmd, env, TIMEOUT_S + 10)
        except Failure as e:
            self.fail(benchmark, transport, placement, str(e))
            return
        seen = 0
        paired = {}
        for line in out.splitlines():
            f = line.split()
            if not f:
                continue
            if f[0] == "pair" and len(f) == 6 and pair:
                which, size, n = int(f[1]), int(f[2]), int(f[5])
                name = pair[which]
                paired.setdefault(size, {})[which] = float(f[3])
                if name:
                    self.add("latency_p50", name, placement, size, float(f[3]), "us", n)
                    self.add("latency_p99", name, placement, size, float(f[4]), "us", n)
                seen += 1
            elif f[0] == "lat" and len(f) == 5:
                size, n = int(f[1]), int(f[4])
                self.add("latency_p50", transport, placement, size, float(f[2]), "us", n)
                self.add("latency_p99", transport, placement, size, float(f[3]), "us", n)
                seen += 1
            elif f[0] == "ctr" and len(f) == 9 and transport.startswith("vipl"):
                size, n = int(f[1]), int(f[2])
                cd, cs, cz, sd, ss, sz = map(int, f[3:])
                msgs = 2 * n  # a round trip is two messages
                self.add("doorbells_per_msg", transport, placement, size, (cd + sd) / msgs, "1/msg", n)
                self.add("sleeps_per_msg", transport, placement, size, (cz + sz) / msgs, "1/msg", n)
                self.add("spin_wins_per_msg", transport, placement, size, (cs + ss) / msgs, "1/msg", n)
            elif f[0] == "bw" and len(f) == 4:
                self.add("bandwidth", transport, placement, int(f[1]), float(f[2]), "MB/s", int(f[3]))
                seen += 1
        # Side by side in one pair of processes: the ratio of each run counts.
        for size, v in paired.items():
            if 0 in v and 1 in v and v[1] > 0:
                self.add("latency_ratio", transport, placement, size, v[0] / v[1], "x", 1)
        if not seen:
            self.fail(benchmark, transport, placement, "no result in its output")

    def own_lat(self, transport, placement, binary, extra=(), env=None, pair=None, wrap=(),
                sizes=LAT_SIZES):
        sizes = ",".join(map(str, sizes))
        self.own("latency", transport, placement, binary,
                 ["--mode", "lat", "--sizes", sizes, "--iters", str(LAT_ITERS),
                  "--max-ms", str(LAT_MAX_MS)] + list(extra), env, pair, wrap)

    def stream_lat(self, placement):
        """common/'s Stream (spinning, blocking) and AsioStream, 8 B .. 64 KiB."""
        for name, env in STREAM_MODES:
            variant = "asio" if name == "asio" else "stream"
            self.own_lat(name, placement, "bench-stream", ["--variant", variant], env=env,
                         sizes=STREAM_LAT_SIZES)
        # Raw libvipl at the stream's sizes above LAT_SIZES, for its ratios.
        extra = [s for s in STREAM_LAT_SIZES if s not in LAT_SIZES]
        self.own_lat("vipl-spin", placement, "bench-vipl", env={"VIPL_SPIN_US": SPIN_US},
                     sizes=extra)
        self.own_lat("vipl-block", placement, "bench-vipl", env={"VIPL_SPIN_US": "0"},
                     sizes=extra)

    def own_bw(self, transport, placement, binary, extra=(), env=None, wrap=(), sizes=None):
        sizes = ",".join(map(str, sizes or BW_SIZES))
        self.own("bandwidth", transport, placement, binary,
                 ["--mode", "bw", "--sizes", sizes, "--bytes", str(BW_BYTES),
                  "--max-ms", str(BW_MAX_MS)] + list(extra), env, wrap=wrap)

    # ------------------------------------------------------------- UCX
    def ucx(self, mode, placement):
        benchmark = "latency" if mode == "lat" else "bandwidth"
        tool = shutil.which("ucx_perftest")
        if not tool:
            self.fail(benchmark, "ucx", placement, "ucx_perftest is not installed")
            return
        c, s = PLACEMENTS[placement]
        same = c == s
        lines = []
        if mode == "lat":
            n = SLOW_POLL_ITERS if same else 20000
            w = 5 if same else 2000
            for size in LAT_SIZES:
                for rank in (50, 99):
                    lines.append(f"lat{size}r{rank} -t tag_lat -s {size} -n {n} -w {w} -R {rank}")
        else:
            for size in BW_SIZES:
                n = max(8, BW_BYTES // size)
                if same:
                    n = max(8, n // 4)
                lines.append(f"bw{size} -t tag_bw -s {size} -n {n} -w {max(2, n // 10)}")
        batch = os.path.join(self.tmp, f"ucx-{mode}-{placement}.txt")
        with open(batch, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        port = self.next_port()
        env = {"UCX_LOG_LEVEL": "info"}  # names the transports UCX picked
        server = ["taskset", "-c", str(s), tool, "-b", batch, "-p", str(port)]
        client = ["taskset", "-c", str(c), tool, "localhost", "-b", batch, "-p", str(port), "-v", "-f"]
        try:
            out = self.pair(server, client, port, env, timeout=TIMEOUT_S * 2)
        except Failure as e:
            self.fail(benchmark, "ucx", placement, str(e))
            return
        m = re.search(r"ep_cfg\[\d+\]: (tag\([^)]*\))", out)
        if m:
            self.notes["ucx_transports"] = m.group(1)
        seen = 0
        for line in out.splitlines():
            f = line.split(",")
            if len(f) != 9:
                continue
            name = f[0].strip()
            try:
                iters = int(f[1].strip())
            except ValueError:
                continue
            m = re.fullmatch(r"lat(\d+)r(\d+)", name)
            if m:
                size, rank = int(m.group(1)), int(m.group(2))
                # tag_lat prints half the round trip: one-way already.
                self.add(f"latency_p{rank}", "ucx", placement, size, float(f[2]), "us", iters)
                seen += 1
            m = re.fullmatch(r"bw(\d+)", name)
            if m:
                # ucx_perftest prints MiB/s.
                mbps = float(f[6]) * 1.048576
                self.add("bandwidth", "ucx", placement, int(m.group(1)), mbps, "MB/s", iters)
                seen += 1
        if not seen:
            self.fail(benchmark, "ucx", placement, "no result in its output: " + tail(out))

    # ------------------------------------------------------ fi_pingpong
    def fi_pingpong(self, placement):
        tool = shutil.which("fi_pingpong")
        if not tool:
            self.fail("latency", "fi_pingpong", placement, "fi_pingpong is not installed")
            return
        c, s = PLACEMENTS[placement]
        n = SLOW_POLL_ITERS if c == s else 10000
        for size in LAT_SIZES:
            port = self.next_port()
            common = ["-p", "shm", "-e", "rdm", "-I", str(n), "-S", str(size)]
            server = ["taskset", "-c", str(s), tool] + common + ["-B", str(port)]
            client = ["taskset", "-c", str(c), tool] + common + ["-P", str(port), "localhost"]
            try:
                out = self.pair(server, client, port)
            except Failure as e:
                self.fail("latency", "fi_pingpong", placement, f"{size} B: {e}")
                continue
            value = None
            for line in out.splitlines():
                f = line.split()
                if len(f) == 8 and f[0] != "bytes":
                    value = float(f[6])  # usec/xfer: the mean one-way time
            if value is None:
                self.fail("latency", "fi_pingpong", placement, f"{size} B: no result: {tail(out)}")
                continue
            self.add("latency_mean", "fi_pingpong", placement, size, value, "us", n)

    # --------------------------------------------------------- Table 5
    def postcost(self, transport, force, peer="spin"):
        path = self.binary("bench-vipl-postcost")
        if not path:
            self.fail("post_cost", transport, "cross", "bench-vipl-postcost was not built")
            return
        env = {"VIPL_SHM_FORCE_DOORBELL": force, "VIPL_SPIN_US": SPIN_US}
        try:
            out = self.run([path, "--cpus", "0,1", "--batch", "32", "--batches", "4000",
                            "--peer", peer, "--timeout", str(TIMEOUT_S)], env, TIMEOUT_S + 10)
        except Failure as e:
            self.fail("post_cost", transport, "cross", str(e))
            return
        seen = False
        for line in out.splitlines():
            f = line.split()
            if len(f) == 6 and f[0] == "post":
                call = "post_send" if f[1] == "send" else "post_recv"
                size = 8 if f[1] == "send" else 0
                calls = int(f[4])
                self.add(call, transport, "cross", size, float(f[2]), "ns/call", calls)
                self.add(call + "_p10", transport, "cross", size, float(f[3]), "ns/call", calls)
                self.add(call + "_doorbells", transport, "cross", size, int(f[5]) / calls,
                         "1/call", calls)
                seen = True
        if not seen:
            self.fail("post_cost", transport, "cross", "no result in its output: " + tail(out))

    # --------------------------------------------------------- Table 3
    def orb(self, transport, placement):
        """omniORB over giop:TRANSPORT: bench-orb prints CSV rows in our columns."""
        name = "giop:" + transport
        path = self.binary("bench-orb")
        if not path:
            self.fail("orb", name, placement, "bench-orb was not built (needs omniORB)")
            return
        try:
            out = self.run([path, "--transport", transport, "--placement", placement,
                            "--iters", str(ORB_ITERS)])
        except Failure as e:
            self.fail("orb", name, placement, str(e))
            return
        seen = False
        for line in out.splitlines():
            f = line.split(",")
            if len(f) == 7 and f[1] == name and f[2] == placement:
                self.add("orb_" + f[0], name, placement, int(f[3]), float(f[4]), f[5], int(f[6]))
                seen = True
        if not seen:
            self.fail("orb", name, placement, "no result in its output: " + tail(out))

    def orb_round(self):
        for placement in PLACEMENTS:
            for transport in ORB_TRANSPORTS:
                self.orb(transport, placement)

    # ------------------------------------------------ VI scale, sharing
    def vi_scale(self, ring):
        transport = f"vipl-ring{ring}"
        path = self.binary("bench-vi-scale")
        if not path:
            self.fail("vi_scale", transport, "host", "bench-vi-scale was not built")
            return
        try:
            out = self.run([path, "--mode", "fleet", "--vis", str(SCALE_VIS), "--timeout",
                            str(SCALE_TIMEOUT_S - 60)], {"VIPL_SHM_RING_SIZE": ring},
                           SCALE_TIMEOUT_S)
        except Failure as e:
            self.fail("vi_scale", transport, "host", str(e))
            return
        seen = False
        for line in out.splitlines():
            f = line.split()
            if len(f) == 4 and f[0] == "fleet":
                self.add("vi_scale_" + f[1], transport, "host", SCALE_VIS, float(f[2]), f[3], 1)
                seen = True
        if not seen:
            self.fail("vi_scale", transport, "host", "no result in its output: " + tail(out))

    def paper_example(self, servers, clients, share):
        transport = "shared" if share else "private"
        placement = f"{servers}x{clients}"
        path = self.binary("bench-vi-scale")
        if not path:
            self.fail("paper", transport, placement, "bench-vi-scale was not built")
            return
        try:
            out = self.run([path, "--mode", "paper", "--servers", str(servers), "--clients",
                            str(clients), "--share", str(share), "--timeout", str(TIMEOUT_S)],
                           None, 2 * TIMEOUT_S)
        except Failure as e:
            self.fail("paper", transport, placement, str(e))
            return
        seen = False
        for line in out.splitlines():
            f = line.split()
            if len(f) == 5 and f[0] == "paper" and f[1] == transport:
                self.add("paper_" + f[2], transport, placement, clients, float(f[3]), f[4], 1)
                seen = True
        if not seen:
            self.fail("paper", transport, placement, "no result in its output: " + tail(out))

    def scale(self):
        self.round = 0  # once, not per round
        for ring in SCALE_RINGS:
            self.vi_scale(ring)
        for rep in range(1, PAPER_REPS + 1):
            self.round = rep
            for servers, clients in PAPER_SIZES:
                for share in (0, 1):
                    self.paper_example(servers, clients, share)

    # ------------------------------------------------------------ plan
    def round_parts(self, r):
        """The parts round r runs (Table 2 runs in some rounds only)."""
        t2 = Table2Part.schedule(ROUNDS)
        return [p for p in ROUND_PARTS if p in PARTS and (p != "table2" or r in t2)]

    def left_s(self, r, part):
        """Seconds left from part of round r on, from what each part took last time; None
        until every part still to come has run once (after the first round)."""
        once = [p for p in ONCE_PARTS if p in PARTS or p == "diagnose"]
        if part in once:
            todo = once[once.index(part):]
        else:
            todo = [p for rr in range(r, ROUNDS + 1) for p in self.round_parts(rr)]
            todo = todo[self.round_parts(r).index(part):] + once
        if any(p not in self.part_s and p not in ONCE_GUESS_S for p in todo):
            return None
        return sum(self.part_s.get(p, ONCE_GUESS_S.get(p, 0)) for p in todo)

    def progress(self, r, part):
        self.at = (r, part)
        left = self.left_s(r, part)
        eta = f", about {left / 60:.0f} min left" if left is not None else \
            ", time left known after round 1"
        print(f"round {r}/{ROUNDS}: {part} ({time.monotonic() - self.start:.0f} s so far{eta})",
              flush=True)

    def timed(self, r, part, fn):
        self.progress(r, part)
        t0 = time.monotonic()
        fn()
        self.part_s[part] = time.monotonic() - t0

    def one_round(self):
        parts = {"latency": self.latency_round, "bandwidth": self.bandwidth_round,
                 "table5": self.table5_round, "namespaces": self.across_namespaces,
                 "orb": self.orb_round, "interposer": self.interposer_round,
                 "db": self.db_round, "table2": self.table2_round}
        for part in self.round_parts(self.round):
            self.timed(self.round, part, parts[part])

    def latency_round(self):
        for placement in PLACEMENTS:
            self.own_lat("vipl-spin", placement, "bench-vipl", env={"VIPL_SPIN_US": SPIN_US})
            self.own_lat("vipl-block", placement, "bench-vipl", env={"VIPL_SPIN_US": "0"})
            self.own_lat("ring", placement, "bench-ring")
            self.own_lat("unix", placement, "bench-sock", ["--variant", "unix"])
            self.own_lat("tcp", placement, "bench-sock", ["--variant", "tcp"])
            self.ucx("lat", placement)
            self.own_lat("fabric", placement, "bench-fabric")
            self.fi_pingpong(placement)
            self.stream_lat(placement)

    def bandwidth_round(self):
        for placement in PLACEMENTS:
            self.own_bw("vipl-spin", placement, "bench-vipl", env={"VIPL_SPIN_US": SPIN_US})
            self.own_bw("vipl-block", placement, "bench-vipl", env={"VIPL_SPIN_US": "0"})
            if placement == "cross":
                self.own_bw("vipl-spin-bigring", placement, "bench-vipl",
                            env={"VIPL_SPIN_US": SPIN_US, "VIPL_SHM_RING_SIZE": GAP_RING},
                            sizes=GAP_SIZES)
            self.own_bw("ring", placement, "bench-ring")
            self.own_bw("unix", placement, "bench-sock", ["--variant", "unix"])
            self.own_bw("tcp", placement, "bench-sock", ["--variant", "tcp"])
            self.ucx("bw", placement)
            self.own_bw("fabric", placement, "bench-fabric")
            copies = [STREAM_COPY, STREAM_UNSTAGED] if self.round % 2 else [STREAM_UNSTAGED,
                                                                            STREAM_COPY]
            modes = STREAM_MODES[:2] + (copies if placement == "cross" else [])
            for name, env in modes:
                self.own_bw(name, placement, "bench-stream", ["--variant", "stream"], env=env)

    def interposer_round(self):
        """bench-sock plain and under vipl-run, one after the other, both placements."""
        vipl_run = os.path.join(self.build, "db-interconnect", "vipl-run")
        if not os.access(vipl_run, os.X_OK):
            for v in DB_VARIANTS:
                for placement in PLACEMENTS:
                    self.fail("latency", f"db-vipl-{v}", placement, "vipl-run was not built")
            return
        # Alternate which runs first, round by round: neither always meets a warm cache.
        order = [(), (vipl_run,)] if self.round % 2 else [(vipl_run,), ()]
        for placement in PLACEMENTS:
            for v in DB_VARIANTS:
                for wrap in order:
                    name = f"db-{'vipl' if wrap else 'plain'}-{v}"
                    self.own_lat(name, placement, "bench-sock", ["--variant", v], wrap=wrap,
                                 sizes=DB_LAT_SIZES)
                for wrap in order:
                    name = f"db-{'vipl' if wrap else 'plain'}-{v}"
                    self.own_bw(name, placement, "bench-sock", ["--variant", v], wrap=wrap)

    def db_round(self):
        """PostgreSQL over every link: pg_run.py; its servers are made at the first round."""
        if self.db is None:
            print("  db: making the PostgreSQL instances", flush=True)
            self.db = PgPart(self)
            self.db.setup()
        self.db.round()

    def table2_round(self):
        """Table 2 (t2_run.py): its nodes are made at the first round."""
        if self.t2 is None:
            print("  table2: making the PostgreSQL nodes", flush=True)
            self.t2 = Table2Part(self, ROUNDS)
            self.t2.setup()
        self.t2.round()

    def table5_round(self):
        self.postcost("vipl-spin", "0", "spin")
        self.postcost("vipl-busy", "0", "busy")
        self.postcost("vipl-asleep", "0", "asleep")
        self.postcost("vipl-forced-doorbell", "1", "spin")
        self.call_cost()

    def call_cost(self):
        """Where a stream message's time goes: each call of its way through the Stream
        beside the libvipl calls that carry it, in one thread (bench-stream-cost)."""
        path = self.binary("bench-stream-cost")
        if not path:
            self.fail("call_cost", "stream", "thread", "bench-stream-cost was not built")
            return
        sizes = ",".join(map(str, CALL_COST_SIZES))
        try:
            out = self.run([path, "--cpu", "0", "--sizes", sizes, "--iters", "20000"], None,
                           TIMEOUT_S)
        except Failure as e:
            self.fail("call_cost", "stream", "thread", str(e))
            return
        seen = False
        for line in out.splitlines():
            f = line.split()
            if len(f) == 7 and f[0] == "cost" and f[1] in ("raw", "stream"):
                self.add("call_cost", f"{f[1]}-{f[2]}", "thread", int(f[3]), float(f[4]),
                         "ns/call", int(f[6]))
                seen = True
        if not seen:
            self.fail("call_cost", "stream", "thread", "no result in its output: " + tail(out))

    def across_namespaces(self):
        """The tcp provider against plain TCP between two network namespaces."""
        net = self.net
        runs = [("vipl-tcp-spin", "bench-vipl", True, {"VIPL_SPIN_US": SPIN_US}),
                ("vipl-tcp", "bench-vipl", True, None),
                ("vipl-tcp-block", "bench-vipl", True, {"VIPL_SPIN_US": "0"}),
                ("tcp-ns", "bench-sock", False, None)]
        # Latency of the blocking mode (and of the default one on one core,
        # where it cannot spin either): beside plain TCP in one pair of
        # processes (bench-pair), blocks of round trips alternating, so that
        # a ratio compares moments of the same host.  Across cores the
        # default mode runs alone: the pauses between blocks would reset its
        # spinning, and its figure is a tenth of TCP's anyway.
        paired = {("vipl-tcp-block", "cross"): ("vipl-tcp-block", "tcp-ns"),
                  ("vipl-tcp-block", "same"): ("vipl-tcp-block", "tcp-ns"),
                  ("vipl-tcp", "same"): ("vipl-tcp", None)}
        for bench, own in (("latency", self.own_lat), ("bandwidth", self.own_bw)):
            for placement in PLACEMENTS:
                for transport, binary, devices, env in runs:
                    if net is None or net.error:
                        self.fail(bench, transport, placement,
                                  "no network namespaces: " + (net.error if net else "not root"))
                        continue
                    extra = net.args(devices) + ([] if devices else ["--variant", "tcp"])
                    if bench == "latency" and (transport, placement) in paired:
                        self.own_lat(transport, placement, "bench-pair",
                                     net.args(True) + ["--variant", "tcp"], env,
                                     pair=paired[(transport, placement)])
                    elif bench == "latency" and transport == "tcp-ns":
                        continue  # measured beside the blocking mode
                    else:
                        own(transport, placement, binary, extra, env)

    def main(self):
        os.makedirs(self.out, exist_ok=True)
        self.started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.load_before = load_average()
        start = self.start = time.monotonic()
        wants_net = os.geteuid() == 0 and ("namespaces" in PARTS or "db" in PARTS
                                              or "table2" in PARTS)
        self.net = NetPair().__enter__() if wants_net else None
        try:
            for r in range(1, ROUNDS + 1):
                self.round = r
                self.one_round()
            # perf stat where the rounds' medians missed a target (db, then Table 2; not
            # in a first look), after Table 2's speedups.
            self.timed(ROUNDS, "diagnose", self.diagnose)
            if "scale" in PARTS:
                self.timed(ROUNDS, "scale", self.scale)
        except KeyboardInterrupt:
            # Ctrl-C, or SIGTERM/SIGHUP (main() turns them into this): keep what was measured.
            r, part = self.at or (self.round, "set-up")
            self.interrupted = f"round {r} of {ROUNDS}, {part}"
            if self.t2:
                self.t2.speedups()  # from the rounds that ended
            print(f"interrupted at {self.interrupted}: writing a partial report", flush=True)
        finally:
            if self.db:
                self.db.close()
            if self.t2:
                self.t2.close()
            shutil.rmtree(self.tmp, ignore_errors=True)
            if self.net:
                self.net.__exit__(None, None, None)
        elapsed = time.monotonic() - start
        self.write(elapsed)
        if self.interrupted:
            sys.exit(130)
        print(f"done in {elapsed:.0f} s: {self.out}/results.csv", flush=True)

    def diagnose(self):
        # A first look (--quick) skips the perf stat runs: nearly two minutes of its five.
        if self.db and not pg_plan.QUICK:
            self.db.diagnose()
        if self.t2:
            self.t2.speedups()
            if not pg_plan.QUICK:
                self.t2.diagnose()
                self.t2.breakdown()

    def write(self, elapsed):
        with open(os.path.join(self.out, "raw.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, COLUMNS + ["round"])
            w.writeheader()
            w.writerows(self.rows)
        groups = {}
        for row in self.rows:
            key = tuple(row[k] for k in ("benchmark", "transport", "placement", "size", "unit"))
            groups.setdefault(key, []).append(row)
        with open(os.path.join(self.out, "results.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, COLUMNS)
            w.writeheader()
            for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3])):
                rows = groups[key]
                w.writerow(dict(benchmark=key[0], transport=key[1], placement=key[2], size=key[3],
                                value=round(statistics.median(r["value"] for r in rows), 4),
                                unit=key[4], iterations=sum(r["iterations"] for r in rows)))
        meta = dict(
            rounds=ROUNDS, elapsed_s=round(elapsed), date=self.started,
            load_before=self.load_before, load_after=load_average(),
            kernel=platform.release(), autogroups=autogroups(), cpu=cpu_model(),
            cpus=os.cpu_count(),
            failures=[dict(benchmark=b, transport=t, placement=p, reason=r)
                      for (b, t, p), r in sorted(self.failures.items())],
            notes=self.notes, lat_iters=LAT_ITERS, lat_max_ms=LAT_MAX_MS, bw_bytes=BW_BYTES,
            slow_poll_iters=SLOW_POLL_ITERS, spin_us=SPIN_US, scale_vis=SCALE_VIS,
            scale_rings=SCALE_RINGS, gap_ring=GAP_RING, paper_sizes=PAPER_SIZES,
            paper_reps=PAPER_REPS,
            orb_iters=ORB_ITERS, parts=PARTS, interrupted=self.interrupted)
        with open(os.path.join(self.out, "meta.json"), "w") as fh:
            json.dump(meta, fh, indent=1)


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def tail(text, n=300):
    text = (text or "").strip().replace("\n", " | ")
    return text[-n:]


def listening(port):
    want = f":{port:04X}"
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                for line in fh.readlines()[1:]:
                    f = line.split()
                    if f[1].endswith(want) and f[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def load_average():
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def autogroups():
    """Whether the scheduler groups tasks by session ("on", "off" or "?"): on one CPU it
    decides whether a waiter's sched_yield can run a peer in another session."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as fh:
            return "on" if fh.read().strip() == "1" else "off"
    except OSError:
        return "?"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: run.py BUILD_DIR OUT_DIR")
    unknown = sorted(set(PARTS) - set(ALL_PARTS))
    if unknown:
        sys.exit(f"VIPL_BENCH_PARTS: unknown {', '.join(unknown)} (parts: {', '.join(ALL_PARTS)})")
    def interrupt(signum, frame):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # once: the clean-up must not be cut short
        raise KeyboardInterrupt

    # SIGINT too: a shell without job control starts background jobs with it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
    Runner(sys.argv[1], sys.argv[2]).main()
