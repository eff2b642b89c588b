#!/usr/bin/env python3
"""Turns OUT_DIR/results.csv and meta.json into report.md, latency.png, bandwidth.png,
orb.png (Table 3, orb_plot.py), pg.png and pg_latency.png (the database section,
pg_report.py) and table2.png (Table 2, t2_report.py).

Usage: report.py OUT_DIR
"""
import csv
import json
import os
import statistics
import sys

import orb_plot
import pg_before
import pg_report
import t2_report

PAPER_ONE_WAY_US = 42.0
PAPER_MAX_MBPS = 107.0
PAPER_POST_SEND = (1.5, 29.1)  # us: system call skipped, made
PAPER_POST_RECV = (1.2, 10.1)
PAPER_MAX_VIS = 64000  # where the paper's VIA nodes stopped
VI_AIM_KIB = 16.0
SCALE_RINGS = [("vipl-ring8192", "8 KiB"), ("vipl-ring2048", "2 KiB (smallest)")]
# Table 3 (CrispORB, Fujitsu, 2000): round trip in us over sockets and over VIA.
PAPER_ORB_SOCKET_US = {0: 661.0, 1024: 725.0}
PAPER_ORB_VIA_US = {0: 539.0, 1024: 645.0}
ORB_TRANSPORTS = ["giop:tcp", "giop:unix", "giop:vipl"]
ORB_TARGET = 0.5  # giop:vipl null call / giop:unix, 2 cores
UCX_BEFORE_ONE_WAY_US = 0.30
UCX_BEFORE_1MIB_GBPS = 20.5

LABELS = {
    "vipl-spin": "libvipl spin",
    "vipl-block": "libvipl block",
    "vipl-spin-bigring": "libvipl spin, 512 KiB ring",
    "ring": "raw ring",
    "unix": "AF_UNIX",
    "tcp": "TCP",
    "ucx": "UCX",
    "fabric": "libfabric",
    "fi_pingpong": "fi_pingpong",
    "vipl-tcp-spin": "libvipl tcp spin",
    "vipl-tcp": "libvipl tcp (default)",
    "vipl-tcp-block": "libvipl tcp block",
    "tcp-ns": "TCP",
    "stream-spin": "Stream spin",
    "stream-block": "Stream block",
    "stream-copy": "Stream copied (spin)",
    "stream-unstaged": "Stream copied, unstaged",
    "asio": "AsioStream",
}
NS_COLUMNS = ["vipl-tcp-spin", "vipl-tcp", "vipl-tcp-block", "tcp-ns"]
LAT_COLUMNS = ["vipl-spin", "vipl-block", "ring", "unix", "tcp", "ucx", "fabric"]
BW_COLUMNS = ["vipl-spin", "vipl-block", "ring", "unix", "tcp", "ucx", "fabric"]
PLACEMENTS = [("cross", "2 cores (client CPU 0, server CPU 1)"),
              ("same", "1 core (both on CPU 0)")]


def load(out):
    data = {}
    with open(os.path.join(out, "results.csv")) as fh:
        for row in csv.DictReader(fh):
            key = (row["benchmark"], row["transport"], row["placement"], int(row["size"]))
            data[key] = (float(row["value"]), int(row["iterations"]))
    # A round's figure: the median of its runs (the COPY runs several times a round).
    runs = {}
    with open(os.path.join(out, "raw.csv")) as fh:
        for row in csv.DictReader(fh):
            key = (row["benchmark"], row["transport"], row["placement"], int(row["size"]))
            runs.setdefault(int(row["round"]), {}).setdefault(key, []).append(float(row["value"]))
    raw = {r: {k: statistics.median(v) for k, v in keys.items()} for r, keys in runs.items()}
    with open(os.path.join(out, "meta.json")) as fh:
        meta = json.load(fh)
    return data, raw, meta


def size_label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def num(v, unit=""):
    if v is None:
        return "–"
    if abs(v) >= 1000:
        s = f"{v:,.0f}"
    elif abs(v) >= 100:
        s = f"{v:.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    elif abs(v) >= 1:
        s = f"{v:.2f}"
    else:
        s = f"{v:.3f}"
    return s + unit


def count(v):
    return "–" if v is None else f"{v:,.0f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def rtext(r):
    return "–" if r is None else f"{r:.2f}x"


def verdict(ok):
    return "n/a" if ok is None else ("**yes**" if ok else "**no**")


class Report:
    def __init__(self, out):
        self.out = out
        self.data, self.raw, self.meta = load(out)
        self.lines = []

    def get(self, bench, transport, placement, size):
        v = self.data.get((bench, transport, placement, size))
        return None if v is None else v[0]

    def sizes(self, bench):
        return sorted({k[3] for k in self.data if k[0] == bench})

    def emit(self, *lines):
        self.lines.extend(lines)

    def table(self, header, rows):
        self.emit("| " + " | ".join(header) + " |", "|" + "---|" * len(header))
        for r in rows:
            self.emit("| " + " | ".join(r) + " |")
        self.emit("")

    # ---------------------------------------------------------------- parts
    def targets(self):
        mib = 1 << 20
        lat = lambda t, p: ("latency_p50", t, p, 8)
        bw = lambda t: ("bandwidth", t, "cross", mib)
        send = lambda t: ("post_send", t, "cross", 8)
        # (target, wanted, numerator, denominator or None, unit, test, scale shown)
        specs = [
            ("one-way 8 B, peer awake (spin, 2 cores) vs AF_UNIX", "<= 0.1x",
             lat("vipl-spin", "cross"), lat("unix", "cross"), "us", lambda r: r <= 0.1, 1),
            ("one-way 8 B, peer awake (spin, 2 cores) vs raw polling ring", "<= 1.5x",
             lat("vipl-spin", "cross"), lat("ring", "cross"), "us", lambda r: r <= 1.5, 1),
            ("blocking round trip 8 B, 1 core, vs AF_UNIX", "<= 0.7x",
             lat("vipl-block", "same"), lat("unix", "same"), "us", lambda r: r <= 0.7, 2),
            ("1 MiB bandwidth, libvipl spin, 2 cores, vs TCP loopback", ">= 2x",
             bw("vipl-spin"), bw("tcp"), "GB/s", lambda r: r >= 2, 1e-3),
            ("1 MiB bandwidth, libvipl block, 2 cores, vs TCP loopback", ">= 2x",
             bw("vipl-block"), bw("tcp"), "GB/s", lambda r: r >= 2, 1e-3),
            ("VipPostSend, doorbell skipped (peer awake, computing)", "<= 100 ns",
             send("vipl-busy"), None, "ns", lambda v: v <= 100, 1),
            ("VipPostSend, doorbell skipped (peer awake, polling the ring)", "<= 100 ns",
             send("vipl-spin"), None, "ns", lambda v: v <= 100, 1),
            ("VipPostSend, doorbell made (peer asleep) vs skipped (peer computing)", ">= 10x",
             send("vipl-asleep"), send("vipl-busy"), "ns", lambda r: r >= 10, 1),
            ("VipPostSend, doorbell made (peer asleep) vs skipped (peer polling)", ">= 10x",
             send("vipl-asleep"), send("vipl-spin"), "ns", lambda r: r >= 10, 1),
        ]

        def value(get, a, b):
            va, vb = get(a), (get(b) if b else None)
            if va is None or (b and vb is None):
                return None, va, vb
            return (ratio(va, vb) if b else va), va, vb

        # Latency ratios of the tcp provider: measured side by side (bench-pair).
        ns_lat = lambda t, p: ("latency_ratio", t, p, 8)
        ns_bw = lambda t: ("bandwidth", t, "cross", mib)
        specs += [
            ("tcp provider across namespaces: one-way 8 B, blocking, 2 cores, / TCP beside it",
             "<= 1.15x", ns_lat("vipl-tcp-block", "cross"), None, "x", lambda r: r <= 1.15, 1),
            ("tcp provider across namespaces: one-way 8 B, default (spin 20 us), 2 cores, vs TCP",
             "<= 1.15x", ("latency_p50", "vipl-tcp", "cross", 8),
             ("latency_p50", "tcp-ns", "cross", 8), "us", lambda r: r <= 1.15, 1),
            ("tcp provider across namespaces: one-way 8 B, blocking, 1 core, / TCP beside it",
             "<= 1.15x", ns_lat("vipl-tcp-block", "same"), None, "x", lambda r: r <= 1.15, 1),
            ("tcp provider across namespaces: one-way 8 B, default (spin 20 us), 1 core, / TCP",
             "<= 1.15x", ns_lat("vipl-tcp", "same"), None, "x", lambda r: r <= 1.15, 1),
            ("tcp provider across namespaces: 1 MiB bandwidth, blocking, 2 cores, vs TCP",
             ">= 0.9x", ns_bw("vipl-tcp-block"), ns_bw("tcp-ns"), "GB/s", lambda r: r >= 0.9,
             1e-3),
            ("tcp provider across namespaces: 1 MiB bandwidth, default, 2 cores, vs TCP",
             ">= 0.9x", ns_bw("vipl-tcp"), ns_bw("tcp-ns"), "GB/s", lambda r: r >= 0.9, 1e-3),
        ]
        # The socket interposer: one unmodified program, plain and under vipl-run.
        db_lat = lambda t, p: ("latency_p50", t, p, 8)
        db_bw = lambda t: ("bandwidth", t, "cross", mib)
        specs += [
            ("interposer, unix socket: round trip 8 B, 2 cores, vipl-run / plain", "<= 0.3x",
             db_lat("db-vipl-unix-path", "cross"), db_lat("db-plain-unix-path", "cross"), "us",
             lambda r: r <= 0.3, 2),
            ("interposer, TCP loopback: round trip 8 B, 2 cores, vipl-run / plain", "<= 0.3x",
             db_lat("db-vipl-tcp", "cross"), db_lat("db-plain-tcp", "cross"), "us",
             lambda r: r <= 0.3, 2),
            ("interposer, unix socket: round trip 8 B, 1 core, vipl-run / plain", "<= 1.0x",
             db_lat("db-vipl-unix-path", "same"), db_lat("db-plain-unix-path", "same"), "us",
             lambda r: r <= 1.0, 2),
            ("interposer, TCP loopback: round trip 8 B, 1 core, vipl-run / plain", "<= 1.0x",
             db_lat("db-vipl-tcp", "same"), db_lat("db-plain-tcp", "same"), "us",
             lambda r: r <= 1.0, 2),
            ("interposer: 1 MiB bandwidth, 2 cores, vipl-run (unix socket) / AF_UNIX", ">= 1.5x",
             db_bw("db-vipl-unix-path"), db_bw("db-plain-unix-path"), "GB/s",
             lambda r: r >= 1.5, 1e-3),
        ]
        # common/'s Stream over its libvipl (bench-stream beside bench-vipl).
        specs += [
            ("Stream round trip 8 B, spinning, 2 cores, vs raw libvipl", "<= 1.5x",
             lat("stream-spin", "cross"), lat("vipl-spin", "cross"), "us", lambda r: r <= 1.5,
             2),
            ("Stream blocking round trip 8 B, 1 core, vs AF_UNIX", "<= 0.9x",
             lat("stream-block", "same"), lat("unix", "same"), "us", lambda r: r <= 0.9, 2),
            ("Stream 1 MiB bandwidth, zero copy, spinning, 2 cores, vs raw libvipl", ">= 0.8x",
             bw("stream-spin"), bw("vipl-spin"), "GB/s", lambda r: r >= 0.8, 1e-3),
            ("Stream 1 MiB bandwidth, zero copy, blocking, 2 cores, vs raw libvipl", ">= 0.8x",
             bw("stream-block"), bw("vipl-block"), "GB/s", lambda r: r >= 0.8, 1e-3),
            ("Stream 1 MiB bandwidth, copied, spinning, 2 cores, vs raw libvipl", ">= 0.8x",
             bw("stream-copy"), bw("vipl-spin"), "GB/s", lambda r: r >= 0.8, 1e-3),
        ]
        # Against UCX at every size: the row names the worst size of the medians.
        g = self.get

        def worst(bench, sizes, lower_better):
            best = None
            for size in sizes:
                a, b = g(bench, "vipl-spin", "cross", size), g(bench, "ucx", "cross", size)
                if a is None or b is None:
                    continue
                r = a / b if lower_better else b / a  # > 1: libvipl behind
                if best is None or r > best[0]:
                    best = (r, size)
            return best[1] if best else None

        lat_sizes = [z for z in self.sizes("latency_p50") if z <= 4096]
        bw_sizes = [z for z in self.sizes("bandwidth") if 4096 <= z <= 8 << 20]
        wl, wb = worst("latency_p50", lat_sizes, True), worst("bandwidth", bw_sizes, False)
        if wl is not None:
            specs.append((f"libvipl one-way latency (spin, 2 cores) vs UCX at every size 0 B .. "
                          f"4 KiB: the worst, {wl:,} B", "<= 1x",
                          ("latency_p50", "vipl-spin", "cross", wl),
                          ("latency_p50", "ucx", "cross", wl), "us", lambda r: r <= 1, 1))
        if wb is not None:
            specs.append((f"libvipl bandwidth (spin, 2 cores) vs UCX at every size 4 KiB .. "
                          f"8 MiB: the worst, {wb >> 10:,} KiB", ">= 1x",
                          ("bandwidth", "vipl-spin", "cross", wb),
                          ("bandwidth", "ucx", "cross", wb), "GB/s", lambda r: r >= 1, 1e-3))
        specs += pg_report.target_specs()  # the database section (pg_plan.py)
        orb = lambda t, p, size: ("orb_rt_p50", t, p, size)
        specs.append(("omniORB null call, 2 cores, giop:vipl vs giop:unix", f"<= {ORB_TARGET:g}x",
                      orb("giop:vipl", "cross", 0), orb("giop:unix", "cross", 0), "us",
                      lambda r: r <= ORB_TARGET, 1))
        # Every layer as fast as the one under it: the ORB over the stream.
        for size, what in ((0, "null call"), (1024, "1 KiB call")):
            for placement, label, wanted in (("cross", "2 cores", 0.3), ("same", "1 core", 0.9)):
                specs.append((f"omniORB {what}, {label}, giop:vipl vs giop:unix (every layer)",
                              f"<= {wanted:g}x", orb("giop:vipl", placement, size),
                              orb("giop:unix", placement, size), "us",
                              lambda r, w=wanted: r <= w, 1))
        vis = self.scale_size("vipl-ring8192")
        if vis is not None:
            ring8 = lambda key: ("vi_scale_" + key, "vipl-ring8192", "host", vis)
            specs += [
                (f"connected VIs on one host, each carrying a message (paper: {PAPER_MAX_VIS:,})",
                 ">= 131,072", ring8("vis"), None, "VIs", lambda v: v >= 131072, 1),
                ("memory per idle connected VI, 8 KiB ring, after one message each way",
                 f"<= {VI_AIM_KIB:g} KiB", ring8("kib_per_vi_msg"), None, "KiB",
                 lambda v: v <= VI_AIM_KIB, 1),
                ("memory per idle connected VI, 8 KiB ring, every ring page touched",
                 f"<= {VI_AIM_KIB:g} KiB", ring8("kib_per_vi_wrap"), None, "KiB",
                 lambda v: v <= VI_AIM_KIB, 1),
            ]
        rows = []
        for name, wanted, a, b, unit, test, scale in specs:
            v, va, vb = value(lambda k: self.data.get(k, (None,))[0], a, b)
            if v is None:
                text = "–"
            elif b:
                text = f"{num(va * scale)} / {num(vb * scale)} {unit} = {rtext(v)}"
            else:
                text = f"{num(va)} {unit}"
            hits = [test(r) for r in (value(lambda k: per.get(k), a, b)[0]
                                      for per in self.raw.values()) if r is not None]
            rows.append([name, text, wanted, verdict(None if v is None else test(v)),
                         f"{sum(hits)}/{len(hits)}"])
        rows += pg_before.targets(self)  # the database interconnect before / after
        rows += t2_report.targets(self)  # Table 2: differences of speedups (t2_plan.py)
        self.emit("## Targets (reported, never enforced)", "",
                  "`met` judges the medians; `rounds` counts the rounds that met it on their own.",
                  "")
        self.table(["target", "measured", "wanted", "met", "rounds"], rows)

        g = self.get
        spin8 = g("latency_p50", "vipl-spin", "cross", 8)
        ucx8 = g("latency_p50", "ucx", "cross", 8)
        ucx_bw = g("bandwidth", "ucx", "cross", mib)
        spin_bw = g("bandwidth", "vipl-spin", "cross", mib)
        self.emit("Against UCX (2 cores): figures measured on this machine before, and this run.", "")
        self.table(["", "UCX before", "UCX this run", "libvipl spin this run",
                    "libvipl / UCX this run"],
                   [["one-way 8 B (us)", num(UCX_BEFORE_ONE_WAY_US), num(ucx8), num(spin8),
                     rtext(ratio(spin8, ucx8))],
                    ["1 MiB bandwidth (GB/s)", num(UCX_BEFORE_1MIB_GBPS), gb(ucx_bw), gb(spin_bw),
                     rtext(ratio(spin_bw, ucx_bw))]])
        self.ucx_gap(wl, wb)

    def ucx_gap(self, wl, wb):
        """Where libvipl stands against UCX at the targets' worst sizes: beside the raw ring,
        the floor of VIA's copy path on shm, so libvipl's own cost and the floor's are apart."""
        g = self.get
        rows = []
        for bench, size, label, fmt in (("latency_p50", wl, "one-way {} (us)", num),
                                        ("bandwidth", wb, "bandwidth {} (GB/s)", gb)):
            if size is None:
                continue
            v = {t: g(bench, t, "cross", size) for t in ("vipl-spin", "ring", "ucx", "fabric")}
            big = g(bench, "vipl-spin-bigring", "cross", size) if bench == "bandwidth" else None
            rows.append([label.format(size_label(size))] + [fmt(x) for x in v.values()] + [
                rtext(ratio(v["vipl-spin"], v["ring"])), rtext(ratio(v["ring"], v["ucx"])),
                fmt(big) if big is not None else "–",
                rtext(ratio(big, v["ucx"])) if big is not None else "–"])
        if not rows:
            return
        ring = self.meta.get("gap_ring")
        self.emit("Where libvipl stands against UCX at the targets' worst sizes (2 cores): "
                  "beside our raw polling ring, two copies (the sender's into shared memory, "
                  "the receiver's out into its own buffer), which is what a receive into a "
                  "posted buffer needs on shm. libvipl / ring is libvipl's own cost over that "
                  "floor; ring / UCX is the floor's against UCX's transports (named above). "
                  "Bandwidth: a ratio below 1 is slower. The last two columns: libvipl spin "
                  f"again with a {int(ring) >> 10 if ring else '?'} KiB ring "
                  "(`VIPL_SHM_RING_SIZE`, the default 512 KiB), so the sender may run further "
                  "ahead of the receiver: the receiver then copies lines the sender wrote "
                  "longer ago.", "")
        self.table(["figure", "libvipl spin", "raw ring", "UCX", "libfabric", "libvipl / ring",
                    "ring / UCX", "libvipl spin, big ring", "big ring / UCX"], rows)

    def paper(self):
        g = self.get

        def lowest(mode, placement):
            vals = [g("latency_p50", mode, placement, s) for s in self.sizes("latency_p50")]
            vals = [v for v in vals if v is not None]
            return min(vals) if vals else None

        best_bw, best_at = None, ""
        for mode in ("vipl-spin", "vipl-block"):
            for placement, _ in PLACEMENTS:
                for size in self.sizes("bandwidth"):
                    v = g("bandwidth", mode, placement, size)
                    if v is not None and (best_bw is None or v > best_bw):
                        best_bw, best_at = v, f"{LABELS[mode]}, {placement}, {size_label(size)}"
        ss = g("post_send", "vipl-busy", "cross", 8)
        sm = g("post_send", "vipl-asleep", "cross", 8)
        rs = g("post_recv", "vipl-busy", "cross", 0)
        rm = g("post_recv", "vipl-forced-doorbell", "cross", 0)
        us = lambda ns: None if ns is None else ns / 1000
        rows = []
        for title, mode, placement in (("peer awake, 2 cores", "vipl-spin", "cross"),
                                       ("blocking, 2 cores", "vipl-block", "cross"),
                                       ("blocking, 1 core", "vipl-block", "same")):
            v = lowest(mode, placement)
            rows.append([f"minimum one-way latency, {title}", f"{PAPER_ONE_WAY_US:g} us",
                         f"{num(v)} us", rtext(ratio(PAPER_ONE_WAY_US, v))])
        rows += [
            ["maximum bandwidth", f"{PAPER_MAX_MBPS:g} MB/s", f"{num(best_bw)} MB/s ({best_at})",
             rtext(ratio(best_bw, PAPER_MAX_MBPS))],
            ["VipPostSend, system call skipped", f"{PAPER_POST_SEND[0]} us", f"{num(us(ss))} us",
             rtext(ratio(PAPER_POST_SEND[0], us(ss)))],
            ["VipPostSend, system call made", f"{PAPER_POST_SEND[1]} us", f"{num(us(sm))} us",
             rtext(ratio(PAPER_POST_SEND[1], us(sm)))],
            ["VipPostRecv, system call skipped", f"{PAPER_POST_RECV[0]} us", f"{num(us(rs))} us",
             rtext(ratio(PAPER_POST_RECV[0], us(rs)))],
            ["VipPostRecv, system call made", f"{PAPER_POST_RECV[1]} us",
             f"{num(us(rm))} us (libvipl makes none)", "–"],
        ]
        self.emit("## Against the paper (VIA on Synfinity-0, SPARC, 2000)", "",
                  "The paper's processes were on two nodes; a same-host transport is compared "
                  "for scale, not like for like. Factor = how many times libvipl is better.", "")
        self.table(["figure", "paper", "libvipl this run", "factor"], rows)

    def latency(self):
        self.emit("## One-way latency (half the median round trip, us)", "",
                  "Ratios below 1 mean libvipl is faster. fi_pingpong prints only a mean.", "")
        for placement, title in PLACEMENTS:
            header = ["size"] + [LABELS[t] for t in LAT_COLUMNS] + [
                "fi_pingpong (mean)", "spin / AF_UNIX", "spin / TCP", "block / AF_UNIX",
                "block / TCP"]
            rows = []
            for s in self.sizes("latency_p50"):
                v = {t: self.get("latency_p50", t, placement, s) for t in LAT_COLUMNS}
                rows.append([size_label(s)] + [num(v[t]) for t in LAT_COLUMNS] + [
                    num(self.get("latency_mean", "fi_pingpong", placement, s)),
                    rtext(ratio(v["vipl-spin"], v["unix"])), rtext(ratio(v["vipl-spin"], v["tcp"])),
                    rtext(ratio(v["vipl-block"], v["unix"])), rtext(ratio(v["vipl-block"], v["tcp"]))])
            self.emit(f"### {title}", "")
            self.table(header, rows)
        self.emit("### 99th percentile of the one-way time (us)", "")
        header = ["placement", "size"] + [LABELS[t] for t in LAT_COLUMNS]
        rows = []
        for placement, _ in PLACEMENTS:
            for s in self.sizes("latency_p99"):
                rows.append([placement, size_label(s)] + [
                    num(self.get("latency_p99", t, placement, s)) for t in LAT_COLUMNS])
        self.table(header, rows)

    def bandwidth(self):
        self.emit("## Bandwidth (GB/s = 10^9 bytes/s)", "")
        for placement, title in PLACEMENTS:
            header = ["size"] + [LABELS[t] for t in BW_COLUMNS] + [
                "spin / AF_UNIX", "spin / TCP", "block / AF_UNIX", "block / TCP"]
            rows = []
            for s in self.sizes("bandwidth"):
                v = {t: self.get("bandwidth", t, placement, s) for t in BW_COLUMNS}
                rows.append([size_label(s)] + [gb(v[t]) for t in BW_COLUMNS] + [
                    rtext(ratio(v["vipl-spin"], v["unix"])), rtext(ratio(v["vipl-spin"], v["tcp"])),
                    rtext(ratio(v["vipl-block"], v["unix"])),
                    rtext(ratio(v["vipl-block"], v["tcp"]))])
            self.emit(f"### {title}", "")
            self.table(header, rows)

    def stream(self):
        self.emit("## common/'s Stream over libvipl", "",
                  "`bench-stream`: the socket-like `Stream` (blocking read/write, what the "
                  "socket interposer calls) and `AsioStream` (async_write then async_read per "
                  "round trip, an io_context run each) over shm, beside raw libvipl and "
                  "AF_UNIX in the same rounds. Spin: the stream's spin as long as libvipl's; "
                  "block: `VIPL_STREAM_SPIN_US=0`; AsioStream: the stream's default. One-way "
                  "latency (half the median round trip, us); ratios below 1 are faster.", "")
        cols = ["stream-spin", "vipl-spin", "stream-block", "vipl-block", "asio", "unix"]
        for placement, title in PLACEMENTS:
            rows = []
            for s in self.sizes_of("latency_p50", "stream-spin"):
                v = {t: self.get("latency_p50", t, placement, s) for t in cols}
                rows.append([size_label(s)] + [num(v[t]) for t in cols] + [
                    rtext(ratio(v["stream-spin"], v["vipl-spin"])),
                    rtext(ratio(v["stream-block"], v["vipl-block"])),
                    rtext(ratio(v["stream-block"], v["unix"])),
                    rtext(ratio(v["asio"], v["unix"]))])
            self.emit(f"### {title}", "")
            self.table(["size"] + [LABELS[t] for t in cols] + [
                "stream spin / libvipl spin", "stream block / libvipl block",
                "stream block / AF_UNIX", "AsioStream / AF_UNIX"], rows)
        self.emit("### Bandwidth (GB/s), 2 cores", "")
        cols = ["stream-spin", "vipl-spin", "stream-block", "vipl-block", "stream-copy",
                "stream-unstaged"]
        rows = []
        for s in self.sizes_of("bandwidth", "stream-spin"):
            v = {t: self.get("bandwidth", t, "cross", s) for t in cols}
            rows.append([size_label(s)] + [gb(v[t]) for t in cols] + [
                rtext(ratio(v["stream-spin"], v["vipl-spin"])),
                rtext(ratio(v["stream-block"], v["vipl-block"])),
                rtext(ratio(v["stream-copy"], v["vipl-spin"])),
                rtext(ratio(v["stream-copy"], v["stream-unstaged"]))])
        self.table(["size"] + [LABELS[t] for t in cols] + [
            "stream spin / libvipl spin", "stream block / libvipl block",
            "stream copied / libvipl spin", "copied: staged / unstaged"], rows)
        self.stream_pieces()
        self.call_cost()

    def stream_pieces(self):
        """How the stream's large writes move, beside the bandwidth table."""
        self.emit(
            "How 1 MiB and larger writes move: zero copy (the threshold is 1 MiB; *copied*: "
            "`VIPL_STREAM_ZCOPY_THRESHOLD=0`, every write copied). "
            "The writer announces regions of up to 4 MiB, two at a time; a blocking reader "
            "RDMA-reads "
            "each straight into its own buffer, one RDMA read per region (on shm one "
            "`process_vm_readv`: pin the writer's pages, copy, unpin), as raw libvipl's "
            "SEND-GET does per message. Where the stream still gives way to raw libvipl: the "
            "write returns only once the reader took it (the writer's buffer is the source), "
            "so one write's reads never overlap the next write's announcement; and blocking "
            "adds two sleeps per write (the reader's until the announcement, the writer's "
            "until the done), where raw libvipl's sends go on without waiting. Copied, a "
            "write of 64 KiB or more goes through the stage (`VIPL_STREAM_STAGE_THRESHOLD`): "
            "the writer copies it into one of two registered 512 KiB parts and returns, the "
            "reader RDMA-reads the part straight into its buffer while the writer fills the "
            "other, one copy on each side at the same time (through the send buffers the "
            "reader made two: the transport's SEND-GET into a receive buffer, then out). "
            "What is left against raw libvipl: both copies, and the lines the writer just "
            "wrote cross to the reader's core, where raw libvipl's sender writes nothing.", "")

    def call_cost(self):
        """Where a stream message's time goes (bench-stream-cost)."""
        sizes = self.sizes_of("call_cost", "stream-write")
        if not sizes:
            return
        self.emit("### Where a stream message's time goes (ns per call)", "",
                  "`bench-stream-cost`: both ends in one thread on CPU 0, each call of one "
                  "message's way timed on its own (medians over rounds of the medians of "
                  "20,000 exchanges). Nothing crosses a core, so these are the calls' own "
                  "instructions and this CPU's caches. Raw libvipl: the sender's "
                  "`VipPostSend`, the receiver's `VipRecvDone` and `VipPostRecv` (the "
                  "buffer given back), the sender's `VipSendDone`; the Stream does all of "
                  "that inside `write()` and `read()`, plus its header, copies, credits and "
                  "readiness. *look*: a look that finds nothing, as a spinning waiter makes "
                  "(`VipRecvDone`; `Stream::events()`): a waiter notices a message half a "
                  "look late on average. The last rows set the stream's extra instructions "
                  "per round trip (twice the extra per message) beside the extra round trip "
                  "measured across cores above. Where the measured figure is the larger, the "
                  "rest is the cache lines the stream's calls move between the CPUs; where it "
                  "is the smaller, part of the calls' work overlaps the peer's. Across cores "
                  "the stream's round trip can also vary from run to run of the same binary "
                  "far more than raw libvipl's (the rounds' spread in `raw.csv`), while its "
                  "calls' cost in one thread does not: such a spread is where the two "
                  "processes' lines land, not instructions.", "")
        calls = [("raw-post-send", "VipPostSend"), ("raw-recv-done", "VipRecvDone (message there)"),
                 ("raw-post-recv", "VipPostRecv (buffer back)"), ("raw-send-done", "VipSendDone"),
                 ("stream-write", "Stream::write()"), ("stream-read", "Stream::read()"),
                 ("raw-look", "look, raw (VipRecvDone, nothing there)"),
                 ("stream-look", "look, Stream (events(), nothing there)")]
        rows = []
        v = {s: {c: self.get("call_cost", c, "thread", s) for c, _ in calls} for s in sizes}
        for c, label in calls:
            rows.append([label] + [num(v[s][c]) for s in sizes])

        def total(s, layer):
            parts = [v[s][c] for c, _ in calls if c.startswith(layer) and "look" not in c]
            return None if any(x is None for x in parts) else sum(parts)

        rows.append(["per message, raw (the four calls)"] + [num(total(s, "raw")) for s in sizes])
        rows.append(["per message, Stream (write + read)"] +
                    [num(total(s, "stream")) for s in sizes])
        extra = {}
        for s in sizes:
            a, b = total(s, "stream"), total(s, "raw")
            extra[s] = None if a is None or b is None else 2 * (a - b)
        rows.append(["Stream's extra instructions per round trip"] + [num(extra[s]) for s in sizes])
        measured = {}
        for s in sizes:
            a = self.get("latency_p50", "stream-spin", "cross", s)
            b = self.get("latency_p50", "vipl-spin", "cross", s)
            # latency_p50 is half the round trip.
            measured[s] = None if a is None or b is None else 2000 * (a - b)
        rows.append(["Stream's extra round trip across cores (spin, measured above)"] +
                    [num(measured[s]) for s in sizes])
        self.table(["call"] + [size_label(s) for s in sizes], rows)

    def namespaces(self):
        self.emit("## The tcp provider across network namespaces", "",
                  "Client and server in two network namespaces joined by a veth pair (private "
                  "addresses): every message crosses a TCP connection as between two hosts. "
                  "The tcp provider (`tcp:<address>` devices) against plain TCP sockets "
                  "(blocking, TCP_NODELAY) between the same two addresses. *spin*: "
                  f"`VIPL_SPIN_US={self.meta.get('spin_us')}`; *default*: 20 us of spinning, "
                  "then sleep; *block*: `VIPL_SPIN_US=0`, the same waiting as the sockets. "
                  "Ratios below 1 (latency) or above 1 (bandwidth) favour libvipl. The latency "
                  "of *default* and *block* is measured beside plain TCP in one pair of "
                  "processes (`bench-pair`: blocks of 50 round trips alternate between the "
                  "two), and their ratios are the medians of those side-by-side ratios; the "
                  "TCP column is the run beside *block*. Across cores *default* runs alone "
                  "(pauses between blocks would reset its spinning).", "")
        for placement, title in PLACEMENTS:
            self.emit(f"### One-way latency (us), {title}", "")
            rows = []
            for s in self.sizes("latency_p50"):
                v = {t: self.get("latency_p50", t, placement, s) for t in NS_COLUMNS}
                if all(x is None for x in v.values()):
                    continue
                # Side by side where measured so (bench-pair), else the medians' ratio.
                paired = lambda t: (self.get("latency_ratio", t, placement, s) or
                                    ratio(v[t], v["tcp-ns"]))
                rows.append([size_label(s)] + [num(v[t]) for t in NS_COLUMNS] + [
                    rtext(paired("vipl-tcp-block")),
                    rtext(paired("vipl-tcp")),
                    num(self.get("latency_p99", "vipl-tcp-block", placement, s)),
                    num(self.get("latency_p99", "tcp-ns", placement, s))])
            self.table(["size"] + [LABELS[t] for t in NS_COLUMNS] +
                       ["block / TCP", "default / TCP", "p99 block", "p99 TCP"], rows)
            self.emit(f"### Bandwidth (GB/s), {title}", "")
            rows = []
            for s in self.sizes("bandwidth"):
                v = {t: self.get("bandwidth", t, placement, s) for t in NS_COLUMNS}
                if all(x is None for x in v.values()):
                    continue
                rows.append([size_label(s)] + [gb(v[t]) for t in NS_COLUMNS] + [
                    rtext(ratio(v["vipl-tcp-block"], v["tcp-ns"])),
                    rtext(ratio(v["vipl-tcp"], v["tcp-ns"]))])
            self.table(["size"] + [LABELS[t] for t in NS_COLUMNS] +
                       ["block / TCP", "default / TCP"], rows)

    def interposer(self):
        rows = []
        for placement, title in (("cross", "2 cores"), ("same", "1 core")):
            for v, name in (("unix-path", "unix socket"), ("tcp", "TCP loopback")):
                for size in self.sizes_of("latency_p50", f"db-plain-{v}"):
                    a = self.get("latency_p50", f"db-plain-{v}", placement, size)
                    b = self.get("latency_p50", f"db-vipl-{v}", placement, size)
                    if a is None and b is None:
                        continue
                    rows.append([title, name, f"round trip {size_label(size)} (us)",
                                 num(None if a is None else 2 * a),
                                 num(None if b is None else 2 * b), rtext(ratio(b, a))])
                for size in (64 << 10, 1 << 20, 8 << 20):
                    a = self.get("bandwidth", f"db-plain-{v}", placement, size)
                    b = self.get("bandwidth", f"db-vipl-{v}", placement, size)
                    if a is None and b is None:
                        continue
                    rows.append([title, name, f"bandwidth {size_label(size)} (GB/s)", gb(a),
                                 gb(b), rtext(ratio(b, a))])
        if not rows:
            return
        self.emit("## The socket interposer (db-interconnect)", "",
                  "One unmodified program (`bench-sock`: blocking stream sockets, a listening "
                  "socket file or TCP 127.0.0.1) run plain and under `vipl-run`, one after the "
                  "other in every round; the interposer carries the connection over libvipl's "
                  "shm provider.", "")
        self.table(["placement", "socket", "figure", "plain", "vipl-run", "vipl-run / plain"],
                   rows)

    def sizes_of(self, bench, transport):
        return sorted({k[3] for k in self.data if k[0] == bench and k[1] == transport})

    def table3(self):
        it = count(self.meta.get("orb_iters"))
        self.emit("## Table 3: CORBA invocation (omniORB)", "",
                  "`bench-orb` calls `orb-echo-server` through omniORB 4.2 over each GIOP "
                  "transport: client on CPU 0, server on CPU 1 (2 cores) or CPU 0 (1 core). "
                  f"Round trip = median of {it} calls a round (a null `ping()`, a 1024-byte "
                  "`bounce()`), then the median over rounds; calls/s = null calls over their "
                  "whole loop (a mean: the tail counts). giop:vipl uses libvipl's default "
                  "spin. The paper (CrispORB, Fujitsu, 2000) called between two SPARC nodes, "
                  "over sockets and over VIA on Synfinity-0: its figures are beside ours for "
                  "scale, sockets beside giop:tcp and giop:unix, VIA beside giop:vipl.", "")
        rows = []
        for placement, title in PLACEMENTS:
            for t in ORB_TRANSPORTS:
                paper = PAPER_ORB_VIA_US if t == "giop:vipl" else PAPER_ORB_SOCKET_US
                rows.append([t, short(title), num(self.get("orb_rt_p50", t, placement, 0)),
                             num(self.get("orb_rt_p50", t, placement, 1024)),
                             count(self.get("orb_calls_per_s", t, placement, 0)),
                             f"{paper[0]:g}", f"{paper[1024]:g}"])
        self.table(["transport", "placement", "null RT (us)", "1 KiB RT (us)", "calls/s",
                    "paper null RT (us)", "paper 1 KiB RT (us)"], rows)
        self.table3_ratios()
        orb_plot.plot(self, PLACEMENTS, ORB_TRANSPORTS, PAPER_ORB_SOCKET_US, PAPER_ORB_VIA_US)

    def table3_ratios(self):
        rt = lambda t, p, size: self.get("orb_rt_p50", t, p, size)
        rows = [["paper: VIA / sockets (CrispORB, 2 nodes)"] +
                [rtext(PAPER_ORB_VIA_US[s] / PAPER_ORB_SOCKET_US[s]) for s in (0, 1024)]]
        for other in ("giop:unix", "giop:tcp"):
            for placement, title in PLACEMENTS:
                rows.append([f"giop:vipl / {other}, {short(title)}"] + [
                    rtext(ratio(rt("giop:vipl", placement, s), rt(other, placement, s)))
                    for s in (0, 1024)])
        self.table(["round-trip ratio (below 1 = VIA / giop:vipl faster)", "null call",
                    "1 KiB call"], rows)
        r = ratio(rt("giop:vipl", "cross", 0), rt("giop:unix", "cross", 0))
        per_round = [ratio(per.get(("orb_rt_p50", "giop:vipl", "cross", 0)),
                           per.get(("orb_rt_p50", "giop:unix", "cross", 0)))
                     for per in self.raw.values()]
        hits = [x <= ORB_TARGET for x in per_round if x is not None]
        met = "n/a (not measured)" if r is None else ("met" if r <= ORB_TARGET else "not met")
        self.emit(f"Target: giop:vipl null call ≤ {ORB_TARGET:g}x giop:unix across cores: "
                  f"{rtext(r)}, **{met}** ({sum(hits)}/{len(hits)} rounds met it).", "")

    def table5(self):
        g = self.get
        cell = lambda b, t, sz: (f"{num(g(b, t, 'cross', sz))} (p10 {num(g(b + '_p10', t, 'cross', sz))})"
                                 if g(b, t, "cross", sz) is not None else "–")
        self.emit("## Table 5: cost of one post (ns per call)", "",
                  "The client posts on CPU 0; the server on CPU 1 is in one of four states. "
                  "*Polling*: it spins in VipRecvWait on the very ring lines being written, so "
                  "every record waits for its cache line to come back (the raw ring pays the "
                  "same). *Computing*: awake, not looking at the ring during the batch. "
                  "*Asleep*: it sleeps in VipRecvWait, so the post makes the system call that "
                  "wakes it (one post per sample). *Forced*: `VIPL_SHM_FORCE_DOORBELL=1` writes the "
                  "eventfd of an awake peer (no wake-up). Batches of 32 posts, median.", "")
        rows = []
        for call, bench, size, paper in (("VipPostSend (8 B)", "post_send", 8, PAPER_POST_SEND),
                                         ("VipPostRecv", "post_recv", 0, PAPER_POST_RECV)):
            skip = g(bench, "vipl-busy", "cross", size)
            made = g(bench, "vipl-asleep", "cross", size)
            rows.append([call, cell(bench, "vipl-busy", size), cell(bench, "vipl-spin", size),
                         cell(bench, "vipl-asleep", size) if bench == "post_send" else
                         "– (a receive never needs one)",
                         cell(bench, "vipl-forced-doorbell", size),
                         num(g(bench + "_doorbells", "vipl-asleep", "cross", size)) if bench ==
                         "post_send" else "0",
                         rtext(ratio(made, skip)) if made else "–",
                         f"{paper[0] * 1000:g} / {paper[1] * 1000:g}", rtext(paper[1] / paper[0])])
        self.table(["call", "skipped, peer computing", "skipped, peer polling",
                    "made, peer asleep", "forced, peer awake", "doorbells / call (asleep)",
                    "made / skipped", "paper skipped / made (ns)", "paper ratio"], rows)

    def counters(self):
        self.emit("## libvipl counters during the latency runs (per message, all sizes)", "",
                  "DoorbellsRung counts the system calls made to wake the peer; with the peer "
                  "spinning on the other core it must stay at 0.", "")
        rows = []
        for mode in ("vipl-spin", "vipl-block"):
            for placement, _ in PLACEMENTS:
                vals = []
                for bench in ("doorbells_per_msg", "sleeps_per_msg", "spin_wins_per_msg"):
                    tot = it = 0.0
                    for s in self.sizes(bench):
                        v = self.data.get((bench, mode, placement, s))
                        if v:
                            tot += v[0] * v[1]
                            it += v[1]
                    vals.append(num(tot / it) if it else "–")
                rows.append([LABELS[mode], placement] + vals)
        self.table(["mode", "placement", "doorbells / msg", "sleeps / msg", "spin wins / msg"],
                   rows)

    def scale_size(self, transport):
        sizes = [k[3] for k in self.data if k[0] == "vi_scale_vis" and k[1] == transport]
        return sizes[0] if sizes else None

    def vi_scale(self):
        self.emit("## VIs on one host", "",
                  f"The paper's VIA nodes stopped at {PAPER_MAX_VIS:,} VIs. Here server and client "
                  "processes (16 + 16 when the descriptor limits allow) hold the VIs, both ends of "
                  "each connection counted; every VI carries one checked message each way, then "
                  "512-byte messages until every ring went once round, then all is torn down. "
                  "Memory per VI = growth of Shmem, PageTables, KernelStack (/proc/meminfo), "
                  "slab objects (/proc/slabinfo) and the processes' Pss_Anon, divided by the "
                  "VIs. Slab leaves out the /proc/PID/fd inodes that programs listing every "
                  "process's descriptors make (shown apart); /proc/meminfo's Slab (pages) and "
                  "MemAvailable are cross-checks. The rings are set to 8 KiB and 2 KiB "
                  "(VIPL_SHM_RING_SIZE), what a host of many VIs would choose: the default "
                  "512 KiB favours throughput: 120 copies of 4 KiB in flight.", "")
        rows, parts = [], []
        for transport, ring in SCALE_RINGS:
            n = self.scale_size(transport)
            if n is None:
                continue
            g = lambda key: self.get("vi_scale_" + key, transport, "host", n)
            rows.append([ring, f"{count(g('vis'))} ({count(g('processes'))} processes)",
                         count(g("setup_rate")), count(g("teardown_rate")),
                         f"{g('fds_per_vi'):.2f} / {g('maps_per_vi'):.2f}"
                         if g("fds_per_vi") is not None else "–",
                         num(g("kib_per_vi_idle")), num(g("kib_per_vi_msg")),
                         num(g("kib_per_vi_wrap"))])
            for state, title in (("idle", "connected, no message yet"),
                                 ("msg", "after one message each way"),
                                 ("wrap", "after every ring went round")):
                parts.append([ring, title] + [num(g(f"{k}_per_vi_{state}")) for k in (
                    "shmem", "slab", "pagetables", "anon", "kib", "slabpages", "memavail",
                    "procslab")])
        if not rows:
            self.emit("Not measured (see the failures below).", "")
            return
        self.table(["ring each way", "VIs connected", "set-up (connections/s)",
                    "teardown (VIs/s)", "descriptors / mappings per VI",
                    "KiB per idle VI: connected", "after one message", "every ring page touched"],
                   rows)
        self.emit("Per VI, KiB:", "")
        self.table(["ring", "state", "Shmem (rings)", "Slab objects", "PageTables + stacks",
                    "process heap (Pss_Anon)", "total", "Slab pages (cross-check)",
                    "MemAvailable drop (cross-check)", "/proc inodes of others (left out)"],
                   parts)

    def paper_sharing(self):
        sizes = sorted({k[2] for k in self.data if k[0] == "paper_vis"},
                       key=lambda p: [int(x) for x in p.split("x")])
        self.emit("## The paper's example: VIs shared across fork()", "",
                  "One node (this host) runs S server processes and C client processes, fully "
                  "connected, two VIs (one at each end) per connection. Without sharing every "
                  "server process connects to every client process: S x C connections. With "
                  "sharing a server parent connects one shareable VI per client, then forks its "
                  "S workers, which all use them: C connections. In both, every server worker "
                  "sends one message to every client and the client answers on the same VI; "
                  "both sides check the content (with sharing, any worker may take any "
                  "completion: each answer is taken exactly once). Memory as above, between the "
                  "processes being ready and everything connected and idle: \"VIs\" is what "
                  "connecting added, \"server workers\" what forking the S workers added "
                  "(with sharing that includes their hold on the shared VIs: one mapping and "
                  "three descriptors per VI in each worker).", "")
        if not sizes:
            self.emit("Not measured (see the failures below).", "")
            return
        for placement in sizes:
            s, c = placement.split("x")
            g = lambda key, t: self.get("paper_" + key, t, placement, int(c))
            mib = lambda key, t: None if g(key, t) is None else g(key, t) / 1024
            n = lambda k, t: g(k, t)
            rows = []
            for title, key, conv, fmt in (
                    ("connections on the node", "connections", n, count),
                    ("VIs on the node", "vis", n, count),
                    ("memory of the VIs (MiB)", "mem_vis", mib, num),
                    ("  of which Shmem (rings)", "mem_vis_shmem", mib, num),
                    ("  of which slab objects (sockets, files, inodes)", "mem_vis_slab", mib, num),
                    ("  of which PageTables", "mem_vis_pagetables", mib, num),
                    ("  of which process heap (Pss_Anon)", "mem_vis_anon", mib, num),
                    ("memory added by forking the server workers (MiB)", "mem_workers", mib, num),
                    ("memory per node, idle (MiB)", "mem_node", mib, num),
                    ("memory per node after the messages (MiB)", "mem_node_msg", mib, num),
                    ("descriptors on the node", "fds", n, count),
                    ("mappings on the node", "maps", n, count),
                    ("messages checked", "messages", n, count),
                    ("connection set-up (ms)", "setup_s",
                     lambda k, t: None if g(k, t) is None else g(k, t) * 1000, num)):
                a, b = conv(key, "private"), conv(key, "shared")
                rows.append([title, fmt(a), fmt(b), rtext(ratio(a, b))])
            self.emit(f"### {s} server processes x {c} client processes", "")
            self.table(["", "without sharing", "with sharing", "without / with"], rows)

    def notes(self):
        self.emit("## Not measured, failures, caveats", "")
        fails = self.meta.get("failures", [])
        for f in fails:
            self.emit(f"- FAILED {f['benchmark']} {f['transport']} {f['placement']}: {f['reason']}")
        if not fails:
            self.emit("- Every benchmark ran.")
        n = self.meta.get("slow_poll_iters")
        self.emit(
            f"- UCX (`ucx_perftest`) and `fi_pingpong` poll without ever yielding; on one core "
            f"each message then waits for the scheduler tick (~4 ms), so those points use {n} "
            "iterations. Our raw ring and libfabric client yield between polls on one core.",
            "- libfabric: Debian ships `fi_pingpong` (latency, mean only) but no fabtests, so the "
            "libfabric bandwidth and median/p99 columns come from our own client (`bench-fabric`, "
            "shm provider, RDM, untagged messages).",
            "- Stream sockets cannot carry an empty message: their 0 B point moves 1 byte.",
            "- libvipl does not spin when both ends share a CPU, so its spin mode on 1 core "
            "sleeps like blocking mode (see the counters).",
            "- VipPostRecv never makes a system call in libvipl (nothing to tell the peer), so its "
            "forced-doorbell figure is the same call.",
            "")

    def plots(self):
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.emit("(matplotlib missing: no plots)", "")
            return
        fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
        lat_sizes = self.sizes("latency_p50")
        for ax, (placement, title) in zip(axes, PLACEMENTS):
            for t in LAT_COLUMNS + ["fi_pingpong"]:
                bench = "latency_mean" if t == "fi_pingpong" else "latency_p50"
                pts = [(i, self.get(bench, t, placement, s)) for i, s in enumerate(lat_sizes)]
                pts = [(i, v) for i, v in pts if v is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                            label=LABELS[t] + (" (mean)" if t == "fi_pingpong" else ""))
            ax.set_xticks(range(len(lat_sizes)), [size_label(s) for s in lat_sizes])
            ax.set_yscale("log")
            ax.set_title(f"one-way latency, {title}")
            ax.set_xlabel("message size")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("us (median; log scale)")
        if axes[0].get_legend_handles_labels()[0]:  # a part that did not run draws nothing
            axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(self.out, "latency.png"), dpi=110)
        plt.close(fig)

        fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
        bw_sizes = self.sizes("bandwidth")
        for ax, (placement, title) in zip(axes, PLACEMENTS):
            for t in BW_COLUMNS:
                pts = [(s, self.get("bandwidth", t, placement, s)) for s in bw_sizes]
                pts = [(s, v / 1000) for s, v in pts if v is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=LABELS[t])
            ax.set_xscale("log", base=2)
            ax.set_xticks(bw_sizes, [size_label(s) for s in bw_sizes])
            ax.set_yscale("log")
            ax.set_title(f"bandwidth, {title}")
            ax.set_xlabel("message size")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("GB/s (log scale)")
        if axes[0].get_legend_handles_labels()[0]:  # a part that did not run draws nothing
            axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(self.out, "bandwidth.png"), dpi=110)
        plt.close(fig)
        self.emit("## Plots", "", "![latency](latency.png)", "", "![bandwidth](bandwidth.png)", "")

    def write(self):
        m = self.meta
        ucx = m.get("notes", {}).get("ucx_transports", "not reported")
        self.emit("# libvipl benchmark report", "",
                  f"{m.get('date')}, {m.get('cpus')} vCPUs ({m.get('cpu')}), kernel "
                  f"{m.get('kernel')}, scheduler autogroups {m.get('autogroups', '?')} (on one "
                  "CPU they keep a waiter's hand-off from running a peer in another session: "
                  f"db-interconnect/README.md). {m.get('rounds')} interleaved rounds; every "
                  f"figure is the median over rounds. Run time {m.get('elapsed_s')} s. "
                  f"UCX chose `{ucx}`. libvipl spin mode: `VIPL_SPIN_US={m.get('spin_us')}`; "
                  "blocking mode: `VIPL_SPIN_US=0`. Load average before / after the run: "
                  f"{m.get('load_before', '?')} / {m.get('load_after', '?')} (other work on "
                  "the machine inflates the spread between rounds).", "")
        if m.get("interrupted"):
            self.emit(f"**Partial report: the run was interrupted at {m['interrupted']}.** "
                      "Figures are the medians of the rounds that ran; parts not reached "
                      "show as not measured.", "")
        self.targets()
        self.paper()
        self.latency()
        self.bandwidth()
        self.stream()
        self.table3()
        self.table5()
        self.namespaces()
        self.interposer()
        pg_report.section(self)
        t2_report.section(self)
        self.counters()
        self.vi_scale()
        self.paper_sharing()
        self.notes()
        self.plots()
        with open(os.path.join(self.out, "report.md"), "w") as fh:
            fh.write("\n".join(self.lines))


def short(title):
    """"2 cores (client CPU 0, server CPU 1)" -> "2 cores"."""
    return title.split(" (")[0]


def gb(mbps):
    return "–" if mbps is None else f"{mbps / 1000:.2f}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: report.py OUT_DIR")
    Report(sys.argv[1]).write()
