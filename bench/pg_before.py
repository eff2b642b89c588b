"""The database section's before / after: today's interconnect beside the one built from
the revision before the stream work (bench/build_before.sh; link pg-vipl-before), measured
in the same rounds (every plan.BEFORE_EVERY-th).  Each ratio is taken round by round
between runs made side by side, then the median over those rounds: the host's speed,
which drifts within minutes, divides out.

pg_report.py calls section(rep); report.py's targets table takes targets(rep).
"""
import statistics

import pg_plan as plan
from pg_plan import COPY_BYTES, PLACEMENT_LABEL, PLACEMENTS, WORKLOADS

NOW, BEFORE, UNIX = "pg-vipl", "pg-vipl-before", "pg-unix"


def rows_measured():
    """(label, placement, benchmark prefix, size, speed metric) of every figure compared."""
    out = []
    for placement in PLACEMENTS:
        for w in WORKLOADS:
            out.append((w.label, placement, f"pg_{w.name}", w.clients, "tps"))
        out.append((plan.COPY_LABEL, placement, "pg_copy", COPY_BYTES, "mbps"))
    return out


def per_round(rep, bench, placement, size, a, b):
    """a's figure / b's, in every round that measured both and the before link: the
    columns of one row then come from the same rounds."""
    out = []
    for per in rep.raw.values():
        va, vb = per.get((bench, a, placement, size)), per.get((bench, b, placement, size))
        if va is not None and vb and (bench, BEFORE, placement, size) in per:
            out.append(va / vb)
    return out


def median(xs):
    return statistics.median(xs) if xs else None


def comparisons(rep):
    """Per figure: label, placement, speed ratios (now/before, before/unix, now/unix) and
    CPU ratio now/before, each a list of per-round values."""
    out = []
    for label, placement, b, size, speed in rows_measured():
        out.append(dict(
            label=label, placement=placement, bench=b, size=size,
            speed=per_round(rep, f"{b}_{speed}", placement, size, NOW, BEFORE),
            before_unix=per_round(rep, f"{b}_{speed}", placement, size, BEFORE, UNIX),
            now_unix=per_round(rep, f"{b}_{speed}", placement, size, NOW, UNIX),
            cpu=per_round(rep, f"{b}_cpu", placement, size, NOW, BEFORE)))
    return [c for c in out if c["speed"]]


def ratio_text(xs):
    m = median(xs)
    return "–" if m is None else f"{m:.2f}x"


def why_not(rep):
    pg = rep.meta.get("notes", {}).get("pg", {})
    return pg.get("before") if not pg.get("before_built") else None


def section(rep):
    pg = rep.meta.get("notes", {}).get("pg", {})
    rep.emit("### Before and after the stream work", "")
    rows = comparisons(rep)
    if not rows:
        rep.emit("Not measured: " + (why_not(rep) or "no round measured both builds") + ".",
                 "")
        return
    rep.emit(
        f"The interconnect built from `{pg.get('before', '?')}` (bench/build_before.sh), "
        "before the stream and spin-policy work, run as another link beside today's in "
        f"one round of every {plan.BEFORE_EVERY} (server and clients under that build's "
        "`vipl-run`, its own copy of the template). Every ratio is taken within a round, "
        "between runs made side by side, then the median over the rounds that ran both "
        "(`rounds`). Speed: TPS, COPY: MB/s; above 1 is faster now. CPU per transaction "
        "(COPY: per MB): below 1 is cheaper now.", "")
    table = []
    for c in rows:
        table.append([c["label"], PLACEMENT_LABEL[c["placement"]],
                      ratio_text(c["before_unix"]), ratio_text(c["now_unix"]),
                      ratio_text(c["speed"]), ratio_text(c["cpu"]), str(len(c["speed"]))])
    rep.table(["workload", "placement", "before / unix socket", "now / unix socket",
               "speed, now / before", "CPU, now / before", "rounds"], table)


def targets(rep):
    """Rows of the report's targets table: none regresses (the worst figure now / before),
    and the figures improve (their median)."""
    rows = comparisons(rep)
    if not rows:
        why = why_not(rep) or "no round measured both builds"
        return [["PostgreSQL interconnect now / before the stream work: every figure",
                 f"not measured: {why}", ">= 1x", "n/a", "0/0"]]
    out = []
    for key, what, sense, test in (
            ("speed", "speed (TPS, COPY MB/s)", ">= 1x", lambda r: r >= 1),
            ("cpu", "CPU per transaction", "<= 1x", lambda r: r <= 1)):
        have = [c for c in rows if c[key]]
        if not have:
            continue
        meds = [median(c[key]) for c in have]
        worst = (min if key == "speed" else max)(range(len(have)), key=lambda i: meds[i])
        w = have[worst]
        out.append([f"PostgreSQL interconnect now / before the stream work, {what}: the "
                    f"worst of {len(have)} figures, {w['label']}, "
                    f"{PLACEMENT_LABEL[w['placement']]}", f"{meds[worst]:.2f}x", sense,
                    "**yes**" if test(meds[worst]) else "**no**",
                    f"{sum(test(r) for r in w[key])}/{len(w[key])}"])
        mid = statistics.median(meds)
        out.append([f"PostgreSQL interconnect now / before the stream work, {what}: the "
                    f"median of {len(have)} figures", f"{mid:.2f}x",
                    "> 1x" if key == "speed" else "< 1x",
                    "**yes**" if (mid > 1 if key == "speed" else mid < 1) else "**no**",
                    "–"])
    return out
