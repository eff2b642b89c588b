"""Table 3 as bars (orb.png): omniORB round trips per GIOP transport and placement, null
and 1 KiB calls, beside the paper's ratio of VIA to sockets.

The paper's round trips (hundreds of microseconds between SPARC nodes in 2000) and ours
(microseconds on one host) differ a hundredfold, so the right panel compares ratios: each
transport's round trip over giop:unix's, and the paper's VIA over its sockets.
"""
import os


def plot(rep, placements, transports, paper_socket, paper_via):
    """placements: [(key, title)]; transports: GIOP names; paper_*: {size: us}."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        rep.emit("(matplotlib missing: no Table 3 plot)", "")
        return
    rt = lambda t, p, size: rep.get("orb_rt_p50", t, p, size)
    bars = [(p, title.split(" (")[0], size) for p, title in placements for size in (0, 1024)]
    if not any(rt(t, p, size) is not None for t in transports for p, _, size in bars):
        return
    names = [f"{'null' if size == 0 else '1 KiB'}, {title}" for _, title, size in bars]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.8))
    width = 0.8 / len(transports)
    for i, t in enumerate(transports):
        xs = [x + i * width for x in range(len(bars))]
        left.bar(xs, [rt(t, p, size) or 0 for p, _, size in bars], width, label=t)
        right.bar(xs, [ratio(rt(t, p, size), rt("giop:unix", p, size)) or 0
                       for p, _, size in bars], width, label=f"{t} / giop:unix")
    ticks = [x + 0.4 - width / 2 for x in range(len(bars))]
    left.set_xticks(ticks, names, fontsize=8)
    left.set_ylabel("round trip (us, median over rounds)")
    left.set_title("Table 3: omniORB call round trip")
    left.legend(fontsize=8)
    left.grid(True, axis="y", alpha=0.3)
    right.set_xticks(ticks, names, fontsize=8)
    for size, style in ((0, "--"), (1024, ":")):
        right.axhline(paper_via[size] / paper_socket[size], color="black", linestyle=style,
                      linewidth=1, label=f"paper, VIA / sockets, {'null' if size == 0 else '1 KiB'}")
    right.set_ylabel("round trip / giop:unix's")
    right.set_title("below 1: faster than the unix socket")
    right.legend(fontsize=7)
    right.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(rep.out, "orb.png"), dpi=110)
    plt.close(fig)
    rep.emit("![Table 3: round trips](orb.png)", "")


def ratio(a, b):
    return a / b if a is not None and b else None
