"""study.md's tables: one per experiment, each with the study's published figures beside
echod's, and the findings'."""

from .. import findings as F, fmt
from . import regimes
from .figures import in_seconds, published_in_flight, published_p99, step_at, stream_plateau


def taken(s):
    """A step's mark when others took its server's CPU (regimes.SERVER_CPU_OTHER), else ""."""
    other = s.get("server_cpu_other") or 0
    return " **others took %.0f%% of its CPU**" % (100 * other) \
        if other > regimes.SERVER_CPU_OTHER else ""


def fixed_table(res, arms):
    """The fixed-rate grid: a row per arm and driver, and direct's ratios to the pool arm
    beside the published ones."""
    out = ["| arm | driver | offered/s | goodput/s | p50 ms | p99 ms | server µs/call | "
           "server CPU (millicores) | failed |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for arm in arms:
        for s in res[arm]["fixed"]:
            out.append("| %s | %s | %.0f | %s | %s | %s | %s | %s | %d |" % (
                arm, s["driver"].split(" ")[0], s["offered"],
                fmt.num(s["ok"] / s["duration_s"], 0), fmt.num(s["p50_ms"], 2),
                fmt.num(s["p99_ms"], 2), fmt.num(s["cpu_us_per_call"]),
                fmt.num(s["cpu_millicores"], 0) + taken(s), s["failed"]))
    out.append("")
    out.append("Published (grpc-java, k6): virtual threads p50 ~3.1 ms, p99 65-72 ms, 220 millicores CPU; "
               "directExecutor() -5% p50, 2x p99, -35% CPU.")
    rows = []
    for drv in ("k6", "h2load"):
        def get(arm, key):
            for s in res.get(arm, {}).get("fixed", []):
                if s["driver"].startswith(drv):
                    return s[key]
            return None
        base = "virtual" if "virtual" in arms else ("cached" if "cached" in arms else None)
        if "direct" in arms and base:
            rows.append("| %s | direct / %s | %s | %s | %s |" % (
                drv, base, fmt.num(fmt.ratio(get("direct", "p50_ms"), get(base, "p50_ms")), 2),
                fmt.num(fmt.ratio(get("direct", "p99_ms"), get(base, "p99_ms")), 2),
                fmt.num(fmt.ratio(get("direct", "cpu_us_per_call"),
                                  get(base, "cpu_us_per_call")), 2)))
    if rows:
        g = F.GRID
        out += ["", "| driver | ratio | p50 | p99 | CPU per call |", "|---|---|---:|---:|---:|",
                "| published | directExecutor() / virtual threads | %.2f | %.2f | %.2f |" % (
                    g["direct"]["p50"] / g["virtual"]["p50"],
                    F.mid(g["direct"]["p99"]) / F.mid(g["virtual"]["p99"]),
                    g["direct"]["cpu_m"] / g["virtual"]["cpu_m"])] + rows
    return out


def ramp_table(res, arms, cap, plan):
    """The unary ramp's p99 per step and arm beside the study's, then each arm's plateau and
    knee."""
    pub_arms = ("virtual", "direct", "direct-drain")
    head = "| offered (x capacity) | offered/s | driver |" + "".join(
        " %s p99 ms |" % a for a in arms) + "".join(
        " published %s |" % F.NAMES[a] for a in pub_arms)
    out = [head, "|---:|---:|---|" + "---:|" * (len(arms) + 3)]
    for i, frac in enumerate(plan.ramp_fractions):
        steps = [step_at(res, a, i) for a in arms]
        pub = [published_p99(a, frac) for a in pub_arms]
        drv = next((s["driver"].split(" ")[0] for s in steps if s), "-")
        out.append("| %.2g | %.0f | %s |%s%s" % (
            frac, round(frac * cap), drv,
            "".join(" %s |" % fmt.num(s["p99_ms"] if s else None, 2) for s in steps),
            "".join(" %s |" % ("%s @%d" % (fmt.num(v), round(frac * F.RAMP_SCALE)) if v else "-")
                    for v in pub)))
    out += ["", "| arm | plateau goodput/s | knee offered/s | plateau / capacity | knee / capacity "
            "| published plateau / knee |", "|---|---:|---:|---:|---:|---|"]
    for a in arms:
        r = res[a]["ramp_summary"]
        pub = F.PLATEAU_KNEE.get(a)
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            a, fmt.num(r["plateau"], 0) if r["plateau"] is not None else
            "≥ %s (no knee)" % fmt.num(r["peak"], 0), fmt.num(r["knee"], 0),
            fmt.num(fmt.ratio(r["plateau"], cap), 2), fmt.num(fmt.ratio(r["knee"], cap), 2),
            "~%d / ~%d (%.2f / %.2f of %d)" % (pub + (pub[0] / F.RAMP_SCALE, pub[1] / F.RAMP_SCALE,
                                                     F.RAMP_SCALE)) if pub else "-"))
    return out


def open_model_table(res, arms, plan):
    """Per step and arm: did the driver keep the open model (sent / offered, k6's dropped
    iterations), and how many calls were in flight, on k6's side and echod's, beside Little's
    law on the p99 and the study's own figure."""
    out = ["| arm | offered (x) | sent / offered | dropped | late connects | busy VUs mean / max "
           "| echod in flight mean / max | p99 x goodput | study: p99 x goodput | k6 CPU (cores) "
           "| k6 RSS MB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for a in arms:
        for s in res[a]["ramp"]:
            if "sent_ratio" not in s:
                continue
            pub = published_in_flight(a, s["fraction"])
            out.append("| %s | %.2g | %s%s | %d | %d | %s / %s | %s / %s | %s | %s | %s | %s |" % (
                a, s["fraction"], fmt.num(s["sent_ratio"], 3),
                "" if (s["sent_ratio"] or 0) >= regimes.OPEN_MODEL_SENT else " **short**",
                s["dropped"], s["late_connects"],
                fmt.num(s["busy_vus_mean"], 0), fmt.num(s["busy_vus_max"], 0),
                fmt.num(s["echod_in_flight_mean"], 0), fmt.num(s["echod_in_flight_max"], 0),
                fmt.num(s["little_p99_in_flight"], 0), fmt.num(pub, 0) if pub else "-",
                fmt.num(s["k6_cores"], 2), fmt.num(s["k6_rss_mb"], 0)))
    return out


def calls_and_seconds(calls, capacity):
    """Calls in flight and the seconds of `capacity` they are: "1,994 (1.99 s)", or "-"."""
    if calls is None:
        return "-"
    return "%s (%s)" % (fmt.num(calls, 0), F.cap_text(in_seconds(calls, capacity)))


def capped_table(res, arms, capacity):
    """Per step of every ramp of every arm (its own, then the extra ones at other caps): the
    cap, what k6 sent and dropped, goodput, p50 / p99, the calls in flight on both sides, and
    Little's law on the p99 beside the study's and the cap, in calls and seconds of capacity
    (the run's; the study's 2,140/s)."""
    out = ["| ramp | cap | offered (x) | offered/s | sent | dropped | goodput/s | p50 / p99 ms "
           "| busy VUs mean / max | echod in flight mean / max | p99 x goodput | study: p99 x "
           "goodput | k6 CPU (cores) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for a in arms:
        for name, steps, run in regimes.ramps(res[a], a):
            cap = (run or {}).get("cap_calls")
            cap_cell = "%d (%s)" % (cap, F.cap_text(run["cap_s"])) if cap else "-"
            for s in steps:
                if "sent_ratio" not in s:
                    continue
                pub = published_in_flight(a, s["fraction"])
                over = cap and (s["busy_vus_max"] or 0) > cap
                out.append("| %s | %s | %.2g | %.0f | %d | %d | %s | %s | %s / %s%s | %s / %s | "
                           "%s | %s | %s%s |" % (
                               name, cap_cell, s["fraction"],
                               s["offered"], s["sent"], s["dropped"],
                               fmt.num(s["answered"] / s["duration_s"], 0),
                               fmt.pair(s["p50_ms"], s["p99_ms"], 2, 0),
                               fmt.num(s["busy_vus_mean"], 0), fmt.num(s["busy_vus_max"], 0),
                               " **over the cap**" if over else "",
                               fmt.num(s["echod_in_flight_mean"], 0),
                               fmt.num(s["echod_in_flight_max"], 0),
                               calls_and_seconds(s["little_p99_in_flight"], capacity),
                               calls_and_seconds(pub, F.STUDY_CAPACITY),
                               fmt.num(s["k6_cores"], 2), (" **k6**" if (s["k6_cores"] or 0)
                                                           >= regimes.K6_CORE else "") + taken(s)))
    return out


def slices_table(res, arms, plan):
    """The p99 of the calls sent in each slice of the steps from 1.0x up: how the tail grows
    through a saturated step of an open model (a closed window holds it flat)."""
    out = []
    for a in arms:
        for s in res[a]["ramp"]:
            if s.get("slices") and s["fraction"] >= 1.0 - 1e-9:
                if not out:
                    n = len(s["slices"])
                    out = ["| arm | offered (x) |" + "".join(
                        " p99 ms, %d-%d s |" % (k * plan.slice_s, (k + 1) * plan.slice_s)
                        for k in range(n)), "|---|---:|" + "---:|" * n]
                out.append("| %s | %.2g |%s" % (a, s["fraction"], "".join(
                    " %s |" % fmt.num(x["p99_ms"]) for x in s["slices"])))
    return out


def dispatch_table(res, arms):
    """Per unary ramp step of every arm (its own ramp, then the extra ones at other caps), what
    echod's dispatch did per call answered, from its own counters: flushes by trigger, the mean
    read batch (connections a batch served), the loop's wake-ups by cause, and hand-offs by what
    they found (parked: a waking one). Empty when no step has them."""
    rows = [(name, s) for a in arms for name, steps, _ in regimes.ramps(res[a], a)
            for s in steps if s.get("dispatch")]
    if not rows:
        return []
    out = ["| ramp | offered (x) | flushes / call: loop tail, read complete, loop task | mean read "
           "batch (connections) | loop wake-ups / call: I/O, task | hand-offs / call: parked, "
           "running |", "|---|---:|---|---:|---|---|"]
    for a, s in rows:
        d = s["dispatch"]
        out.append("| %s | %.2g | %s, %s, %s | %s | %s, %s | %s, %s |" % (
            a, s["fraction"], fmt.num(d["flush_loop_tail"], 2),
            fmt.num(d["flush_read_complete"], 2), fmt.num(d["flush_loop_task"], 2),
            fmt.num(d["read_batch_mean"], 1), fmt.num(d["wakeups_io"], 2),
            fmt.num(d["wakeups_task"], 2), fmt.num(d["handoffs_parked"], 2),
            fmt.num(d["handoffs_running"], 2)))
    return out


def throttle_table(res, arms, plan):
    """Per unary step and arm, the share of CFS periods in which echod's cgroup was throttled
    and the time it spent throttled: what a quota does to an arm that a pinned core does not.
    None when no step ran under a quota (the pinned model: periods stay 0)."""
    def cell(st):
        c = st.get("cfs")
        if not c or not c["periods"]:
            return "-"
        return "%.0f%% (%.2f s)" % (100.0 * c["throttled_periods"] / c["periods"], c["throttled_s"])
    if not arms:  # a run of the witness alone (study.witness)
        return None
    rows = [("fixed %s" % s["driver"].split(" ")[0], [res[a]["fixed"][i] for a in arms])
            for i, s in enumerate(res[arms[0]]["fixed"])]
    rows += [("%.2g x" % frac, [step_at(res, a, i) or {} for a in arms])
             for i, frac in enumerate(plan.ramp_fractions)]
    if not any((st.get("cfs") or {}).get("periods") for _, sts in rows for st in sts):
        return None
    out = ["| step | offered/s |" + "".join(" %s |" % a for a in arms),
           "|---|---:|" + "---:|" * len(arms)]
    for name, sts in rows:
        offered = next((st["offered"] for st in sts if st), 0)
        out.append("| %s | %.0f |%s" % (name, offered, "".join(" %s |" % cell(st) for st in sts)))
    return out


def stream_table(res, arms, unary_plateau):
    """A row per arm and stream count: its steps, plateau, shed messages, the schedule kept."""
    out = ["| arm | streams | driver | offered msg/s per step | p99 ms per step | plateau msg/s | "
           "plateau / unary plateau | shed msg/s per step | schedule kept | failed |",
           "|---|---:|---|---|---|---:|---:|---|---:|---:|"]
    for a in arms:
        for run in res[a]["streams"]:
            steps = run["steps"]
            kept = min((s["kept_ratio"] for s in steps if s["kept_ratio"] is not None),
                       default=None)
            out.append("| %s | %d | k6 | %s | %s | %s | %s | %s | %s%s | %d |" % (
                a, run["streams"], " / ".join("%.0f" % s["offered"] for s in steps),
                " / ".join(fmt.num(s["p99_ms"]) for s in steps), fmt.num(stream_plateau(run), 0),
                fmt.num(fmt.ratio(stream_plateau(run), unary_plateau.get(a)), 2),
                " / ".join(fmt.num(s["dropped"] / s["duration_s"], 0) for s in steps),
                fmt.num(kept, 3),
                "" if (kept or 0) >= regimes.OPEN_MODEL_SENT else " **short**",
                sum(s["failed"] for s in steps) + run["server_failed"]))
    out += ["", "Published (20 or 40 streams): plateau 15,000-16,000 msg/s, ~7.5x the unary "
            "plateau; p99 ms at 6k/10k/12k/14k/16k msg/s: virtual threads %s, direct %s; shed "
            "at the top step: virtual threads %d/s, direct %d/s." % (
                "/".join(map(str, F.STREAM_P99["virtual"])),
                "/".join(map(str, F.STREAM_P99["direct"])), F.STREAM_SHED["virtual"],
                F.STREAM_SHED["direct"])]
    return out


def findings_md(findings, variant_text, sources=None):
    """The findings' section of study.md: the rule, the table, what the parts that are not (or
    not only) evidence rest on (findings.basis_notes) and the run's inputs set from published
    figures (`sources`, findings.run_sources), F4p's detail."""
    md = (["Each figure is a ratio of two arms (or workloads) of this run beside the study's "
           "own; its verdict is computed: " + F.rule_text() + " Cost variant: %s." % variant_text,
           ""] + F.table(findings))
    notes = F.basis_notes(findings)
    if sources:
        md += ["", "This run's inputs set from published figures: %s." % "; ".join(
            "%s, from %s" % (F.INPUTS.get(i, i), ", ".join(F.PUBLISHED[k][0] for k in keys))
            for i, keys in sources.items())]
    if notes:
        md += ["", "What the verdicts rest on:", ""] + notes
    for fd in findings:
        if fd["id"] == "F4p":
            md += ["", published_caps_text(fd)]
    return md


def published_caps_text(fd):
    """F4p's detail in a sentence: how much of the cut the caps alone give."""
    d = fd["detail"]
    lo, hi = F.cap_text(d["caps_s"]["direct-drain"]), F.cap_text(d["caps_s"]["direct"])
    return ("F4p, at the published caps: direct-drain at %s against direct at %s, p99 at 1.2x "
            "%s (published %s). The caps alone (direct at %s against direct at %s) give %s, %s "
            "against the published %s by the same rule (%s of the published effect, %s of the "
            "measured one); the drain against direct both at %s gives %s." % (
                lo, hi, fmt.num(fd["measured"], 2), fmt.num(fd["published"], 2), lo, hi,
                fmt.num(d["cap_only"], 2), F.verdict_text(d["cap_only_verdict"],
                                                          d.get("cap_only_computed")),
                fmt.num(fd["published"], 2),
                share(d["cap_only_of_published"]), share(d["cap_only_of_measured"]), lo,
                fmt.num(d["drain_at_drain_cap"], 2)))


def share(x):
    return "-" if x is None else "%.0f%%" % (100 * x)
