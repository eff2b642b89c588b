"""Table 2's "where a remote operation's extra CPU goes": from t2_run.py's breakdown runs
(the read-only workload at p = 0 and p = BREAKDOWN_P, every server process of both nodes
sampled by perf record, perf_profile.py's parts), per link: each part's CPU per
transaction at p minus at 0, over the measured share of remote transactions, is what a
remote read adds to a local one in that part.

t2_report.py calls section(rep, pl) and takes targets(rep, pl) into Table 2's targets.
"""
import t2_plan as plan
from perf_profile import LINK_PARTS, PARTS, PERIOD_NS


def extra(rep, pl, link):
    """{part: us a remote read adds}, or None when the runs are missing."""
    p = plan.BREAKDOWN_P
    share = rep.get("t2_ro_part_remote", link, pl, p)
    if not share:
        return None
    out = {}
    for name, _, _ in PARTS:
        at_p = rep.get(f"t2_ro_part_{name}", link, pl, p)
        at_0 = rep.get(f"t2_ro_part_{name}", link, pl, 0)
        if at_p is None or at_0 is None:
            return None
        out[name] = (at_p - at_0) / share
    return out


def link_of(e):
    """The whole link's part (its switches and wake-ups and the rest)."""
    return sum(e[name] for name in LINK_PARTS)


def fmt(v):
    return "–" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}")


def section(rep, pl):
    links = [plan.LINK[n] for n in plan.BREAKDOWN_LINKS if n in plan.LINK]
    got = {link.name: extra(rep, pl, link.name) for link in links}
    if not any(got.values()):
        return
    rep.emit(
        "### Where a remote read's extra CPU goes", "",
        f"One run each of the read-only workload at p = 0 and p = {plan.BREAKDOWN_P} per "
        "link after the rounds, every server process of both nodes sampled by `perf record` "
        f"(cpu-clock, one sample per {PERIOD_NS / 1e6:g} ms of CPU) over the measured "
        "window; each sample is put in a part by the object it ran in (in the kernel, by "
        "its function too). A part's extra per remote read = (its CPU "
        f"per transaction at p = {plan.BREAKDOWN_P} - at p = 0) / the run's share of remote "
        "transactions: what a remote read costs both nodes beyond a local read. Parts: " +
        "; ".join(f"**{name}**: {label}" for name, label, _ in PARTS) + ". The link is "
        "switch, kernel and vipl together. Single runs: read the parts' sizes, not their "
        "last digit.", "")
    rows = []
    for link in links:
        e = got[link.name]
        if not e:
            rows.append([link.label] + ["–"] * (len(PARTS) + 3))
            continue
        total = sum(e.values())
        rows.append([link.label] + [fmt(e[name]) for name, _, _ in PARTS] + [
            fmt(total), fmt(link_of(e)), f"{link_of(e) / total:.0%}" if total > 0 else "–"])
    rep.table(["link (us per remote read)"] + [name for name, _, _ in PARTS] +
              ["total extra", "the link", "link's share"], rows)
    rep.emit("Each node's CPU is busy with its own clients, so a remote read's request and "
             "answer each find their receiver asleep: every link pays the switches and "
             "wake-ups (switch) alike; what a transport can take away is the rest of the "
             "link (kernel and vipl), the data path.", "")


def targets(rep, pl):
    """The link's part of a remote read's extra CPU, vipl-shm over unix."""
    text = ("read-only: the link's part of a remote read's extra CPU, vipl-shm / unix "
            f"(p={plan.BREAKDOWN_P}, perf record)")
    wanted = f"<= {plan.LINK_PART_WANTED:g}x"
    a, b = extra(rep, pl, "vipl-shm"), extra(rep, pl, "unix")
    if not a or not b or link_of(b) <= 0:
        return [[text, "–", wanted, "n/a", "–"]]
    r = link_of(a) / link_of(b)
    ok = r <= plan.LINK_PART_WANTED
    return [[text, f"{link_of(a):.0f} / {link_of(b):.0f} us = {r:.2f}x", wanted,
             "**yes**" if ok else "**no**", f"{int(ok)}/1"]]
