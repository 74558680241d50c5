"""A capacity report written out: report.md (the summary table per arm, then each arm's steps),
report.json and two plots (p99 and goodput against the offered load, one line per arm, the
knee marked). deploy/report and bench/study write theirs through write() and plots().
"""

import json
import os

from . import fmt, plotting
from .report import analyse


class Options:
    """What a report is judged and titled by (deploy/report's options)."""

    def __init__(self, title=None, unit="calls", p99_threshold_ms=50.0, goodput_ratio=0.95):
        self.title = title
        self.unit = unit  # what is offered, for the plots' axes: calls, or msg for streams
        self.p99_threshold_ms = p99_threshold_ms
        self.goodput_ratio = goodput_ratio


def short_source(src):
    """'a.csv + b.csv + a.json' -> 'a.csv, b.csv, a.json'; more than 3 files: counted by kind."""
    files = [f for f in src.split(" + ") if f]
    if len(files) <= 3:
        return ", ".join(files)
    kinds = {}
    for f in files:
        k = "CSV" if ".csv" in f else ("JSON" if f.endswith(".json") else "other")
        kinds[k] = kinds.get(k, 0) + 1
    return " + ".join("%d %s" % (n, k) for k, n in sorted(kinds.items()))


def markdown(results, opts):
    out = ["# %s" % (opts.title or "Capacity study"), ""]
    out.append("Knee: the first step whose goodput is below %.0f%% of the offered rate or whose "
               "p99 is above %g ms. Plateau: the median goodput of the steps from the knee on "
               "(bench/arms: its closed-loop saturation throughput). Goodput counts answers "
               "that were OK and echoed the request, in the step they arrived in where the "
               "script says (bidi-ramp.js's echo_answered), else in the step they were due in."
               % (opts.goodput_ratio * 100, opts.p99_threshold_ms))
    out.append("")
    out.append("| arm | script | knee at offered/s | why | plateau goodput/s | peak goodput/s | "
               "p99 before the knee (ms) | CPU µs/call | source |")
    out.append("|---|---|---:|---|---:|---:|---:|---:|---|")
    for arm in sorted(results):
        r = results[arm]
        before = [s for s in r.steps if r.knee is None or s.offered < r.knee.offered]
        p99_before = before[-1].p99_ms if before else None
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            arm, r.script or "-",
            fmt.num(r.knee.offered, 0) if r.knee else "not reached",
            r.knee_reason or "-",
            fmt.num(r.plateau, 0) if r.plateau is not None else (
                "≥ %s" % fmt.num(r.peak, 0) if r.peak is not None else "-"),
            fmt.num(r.peak, 0), fmt.ms(p99_before),
            fmt.num(r.cpu_us_per_call, 2, 1) + (" (%s)" % r.cpu_source if r.cpu_source else ""),
            short_source(r.source)))
    for arm in sorted(results):
        out += arm_section(results[arm])
    out.append("")
    out.append("Plots: `p99-vs-offered.png`, `goodput-vs-offered.png`.")
    return "\n".join(out) + "\n"


def arm_section(r):
    """An arm's heading, latency metric, segments, notes and its table of steps."""
    out = ["", "## %s" % r.arm, ""]
    out.append("Latency: `%s`%s." % (r.latency_metric or "-", ", from the due time of each "
                                      "message" if r.latency_metric == "bidi_msg_latency_ms"
                                      else ""))
    if r.share != 1:
        out.append("")
        out.append("Execution segments %s: %s of the test, judged against that share of "
                   "the schedule's offered rate." % (r.segments, r.segments.replace(":", " to ")))
    for n in r.notes:
        out.append("")
        out.append("Note: %s." % n)
    out.append("")
    out.append("| step | offered/s | sent/s | goodput/s | goodput % | p50 ms | p99 ms | "
               "server p50 µs | server p99 µs | failed | dropped | s |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in r.steps:
        g = s.goodput
        mark = " **knee**" if r.knee is s else ""
        out.append("| %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |" % (
            s.stage, mark, fmt.num(s.offered, 0), fmt.num(s.sent_rate, 0), fmt.num(g, 0),
            fmt.num(100.0 * g / s.offered, 1, 1) if g is not None and s.offered else "-",
            fmt.ms(s.p50_ms), fmt.ms(s.p99_ms), fmt.num(s.server_p50_us, 1, 1),
            fmt.num(s.server_p99_us, 1, 1), s.failed, s.dropped, fmt.num(s.duration_s, 1, 1)))
    return out


def document(results, opts):
    """report.json's content."""
    return {"p99_threshold_ms": opts.p99_threshold_ms, "goodput_ratio": opts.goodput_ratio,
            "arms": {a: r.as_dict() for a, r in sorted(results.items())}}


def write(results, out, opts):
    """Analyses {arm: ArmResult} (knee, plateau) and writes out/report.md and out/report.json:
    (the Markdown, the JSON document)."""
    analyse(results, opts.p99_threshold_ms, opts.goodput_ratio)
    os.makedirs(out, exist_ok=True)
    md = markdown(results, opts)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(md)
    doc = document(results, opts)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(doc, f, indent=1)
    return md, doc


def plots(results, out, opts):
    """out/p99-vs-offered.png and out/goodput-vs-offered.png of analysed results: the files
    written (ImportError without python3-matplotlib)."""
    arms = sorted(results)
    files = []

    fig, ax = plotting.figure()
    for arm in arms:
        r = results[arm]
        pts = [(s.offered, s.p99_ms) for s in r.steps if s.p99_ms is not None and s.p99_ms > 0]
        if not pts:
            continue
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=arm)
        if r.knee is not None and r.knee.p99_ms:
            ax.plot([r.knee.offered], [r.knee.p99_ms], marker="x", ms=9, color=line.get_color())
    ax.axhline(opts.p99_threshold_ms, color="grey", ls="--", lw=0.8)
    ax.text(ax.get_xlim()[0], opts.p99_threshold_ms, " p99 threshold", va="bottom", fontsize=7,
            color="grey")
    plotting.log_y(ax)
    ax.set_xlabel("offered load (%s/s)" % opts.unit)
    ax.set_ylabel("p99 latency (ms, log)")
    ax.set_title("p99 vs offered load (x: knee)")
    files.append(plotting.save(fig, ax, os.path.join(out, "p99-vs-offered.png")))

    fig, ax = plotting.figure()
    top = 0
    for arm in arms:
        r = results[arm]
        pts = [(s.offered, s.goodput) for s in r.steps if s.goodput is not None]
        if not pts:
            continue
        top = max(top, max(p[0] for p in pts), max(p[1] for p in pts))
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=arm)
        if r.knee is not None and r.knee.goodput is not None:
            ax.plot([r.knee.offered], [r.knee.goodput], marker="x", ms=9, color=line.get_color())
    if top:
        ax.plot([0, top], [0, top], color="grey", ls=":", lw=0.8, label="goodput = offered")
        ax.plot([0, top], [0, top * opts.goodput_ratio], color="grey", ls="--", lw=0.6,
                label="%.0f%% of offered" % (opts.goodput_ratio * 100))
    ax.set_xlabel("offered load (%s/s)" % opts.unit)
    ax.set_ylabel("goodput (OK %s/s)" % opts.unit)
    ax.set_title("goodput vs offered load (x: knee)")
    files.append(plotting.save(fig, ax, os.path.join(out, "goodput-vs-offered.png"),
                               grid="major"))
    return files
