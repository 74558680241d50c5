"""study-*.png: echod's curves beside the study's published ones (python3-matplotlib)."""

import os

from .. import findings as F, plotting
from .figures import stream_plateau

SIZE = (7.5, 4.5)


def study_plots(res, arms, cap, plan, out):
    """echod's curves beside the published ones, on axes that make them comparable (offered as
    a multiple of capacity: the study's 2,000 calls/s, echod's calibrated capacity), and the p99
    of each slice of the saturated steps. Returns the files written ([] without matplotlib)."""
    try:
        plotting.pyplot()
    except ImportError:
        return []
    files = []

    def save(fig, ax, name, ylog=True):
        if ylog:
            plotting.log_y(ax)
        files.append(plotting.save(fig, ax, os.path.join(out, name)))

    colors = {}
    fig, ax = plotting.figure(SIZE)
    for a in arms:
        pts = [(s["fraction"], s["p99_ms"]) for s in res[a]["ramp"]
               if "fraction" in s and s["p99_ms"]]
        if pts:
            line, = ax.plot(*zip(*pts), marker="o", ms=3, label="echod %s" % a)
            colors[a] = line.get_color()
        for x in res[a].get("extra_ramps", []):  # the capped regime's, at the study's caps
            pts = [(s["fraction"], s["p99_ms"]) for s in x["ramp"] if s["p99_ms"]]
            if pts:
                ax.plot(*zip(*pts), marker="^", ms=3, ls=":", color=colors.get(a),
                        label="echod %s, capped at %s" % (a, F.cap_text(x["cap_s"])))
    for a, p99 in F.RAMP_P99.items():
        ax.plot([x / F.RAMP_SCALE for x in F.RAMP_OFFERED], p99, ls="--", marker="x", ms=4,
                color=colors.get(a, "grey"), label="published %s" % F.NAMES[a])
    ax.set_xlabel("offered (x capacity; the study: x 2,000 calls/s)")
    ax.set_ylabel("p99 ms (log)")
    ax.set_title("unary ramp: p99, echod (solid) and the study (dashed)")
    save(fig, ax, "study-ramp-p99.png")

    fig, ax = plotting.figure(SIZE)
    top = max(plan.ramp_fractions)
    for a in arms:
        pts = [(s["fraction"], s["answered"] / s["duration_s"] / cap) for s in res[a]["ramp"]
               if "fraction" in s]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, color=colors.get(a), label="echod %s" % a)
    for a, (plateau, knee) in F.PLATEAU_KNEE.items():
        ax.plot([knee / F.RAMP_SCALE, top], [plateau / F.RAMP_SCALE] * 2, ls="--",
                color=colors.get(a, "grey"), label="published %s plateau" % F.NAMES[a])
    ax.plot([0, top], [0, top], color="grey", ls=":", lw=0.8, label="goodput = offered")
    ax.set_xlabel("offered (x capacity)")
    ax.set_ylabel("goodput (x capacity)")
    ax.set_title("unary ramp: goodput by arrival, echod and the study's plateaus")
    save(fig, ax, "study-ramp-goodput.png", ylog=False)

    fig, ax = plotting.figure(SIZE)
    bounds = set()
    for a in arms:
        pts = []
        for s in res[a]["ramp"]:
            if s.get("slices") and s["fraction"] >= 0.8 - 1e-9:
                bounds.add(s["slices"][0]["t_s"])
                pts += [(x["t_s"] + plan.slice_s / 2.0, x["p99_ms"]) for x in s["slices"]
                        if x["p99_ms"]]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, color=colors.get(a), label="echod %s" % a)
    for b in sorted(bounds):
        ax.axvline(b, color="grey", lw=0.5)
    for s in res[arms[0]]["ramp"]:
        if s.get("slices") and s["fraction"] >= 0.8 - 1e-9:
            ax.text(s["slices"][0]["t_s"], ax.get_ylim()[1], " %.2gx" % s["fraction"], va="top",
                    fontsize=7, color="grey")
    ax.set_xlabel("seconds since the ramp began (steps from 0.8x; a point per %d s slice)"
                  % plan.slice_s)
    ax.set_ylabel("p99 of the calls sent in the slice, ms (log)")
    ax.set_title("unary ramp: the tail inside each step")
    save(fig, ax, "study-ramp-slices.png")

    streams = [(a, run) for a in arms for run in res[a]["streams"]]
    if streams:
        fig, ax = plotting.figure(SIZE)
        for a, run in streams:
            base = stream_plateau(run)
            pts = [(s["offered"] / base, s["p99_ms"]) for s in run["steps"] if s["p99_ms"] and base]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, color=colors.get(a),
                        ls="-" if run["streams"] == 20 else "-.",
                        label="echod %s, %d streams" % (a, run["streams"]))
        for a, p99 in F.STREAM_P99.items():
            ax.plot([x / F.mid(F.STREAM_PLATEAU) for x in F.STREAM_OFFERED], p99, ls="--",
                    marker="x", ms=4, color=colors.get(a, "grey"),
                    label="published %s" % F.NAMES[a])
        ax.set_xlabel("offered msg/s (x the run's stream plateau; the study: x 15,500)")
        ax.set_ylabel("p99 ms (log)")
        ax.set_title("streaming ramp: p99, echod (solid) and the study (dashed)")
        save(fig, ax, "study-streams-p99.png")
    return files
