"""The multiplexed-client shape (--mux): clients that keep many calls in flight on each of a
few dozen connections, as grpc-go's, grpc-java's and ghz's do, beside the study's k6 shape (a
VU is one call on one connection of its own, so each connection carries one call at a time).

The shapes load a server differently: one read batch of a multiplexed connection holds many
calls, so how the server hands calls off and when it flushes decides more of what a call costs
(issue 36 measured grpc-java's virtual threads at 0.65 of direct's capacity there against 0.97
in the study's shape, and its drain cutting the saturated p99 by a third only there). Per arm,
on h2load:

  closed   MUX_CONNS connections x CLOSED_STREAMS calls in flight, for the grid's seconds: the
           arm's capacity in this shape, its p99 and CPU per call
  open     the ramp's steps from 1.1x of the run's capacity up (--quick: 1.2x only), each
           the open model's length (plan.mux_s: 15 s, --quick 2, --step-seconds sets it) and
           each connection on its own timer (h2load --rps): the calls are sent on schedule
           while the connection has a free stream, and each has enough for the step's backlog;
           each step plan.mux_rounds times (3, --quick 1, --mux-rounds sets it)

and the shape's three figures, each a ratio of two arms of the run (mux_figures), which the
witness's grpc-java arms give beside echod's: virtual / direct capacity, direct-drain / direct
p99 and goodput at each open step. The study never measured this shape: there is no published
figure, only the real grpc-java here (against judges echod's against it).

Why rounds. Past capacity under directExecutor a read pass runs every call its connections
hold and its answers leave together at its end (WriteQueue's flush, echod's loop_tail), and
each pass takes in what arrived during the last one and during itself, so the passes grow
through the step (to seconds). h2load counts what came back before its window closed: the
pass under way at the end is lost whole, and where the last pass ends before the window does
is close to chance. Three windows of one grpc-java direct process at 1.2x answered 2% to 31%
fewer calls than its drain's, echod's 2% to 16% (docs/work-model.md, "What one step's window
cuts off"), while the drain, which answers a connection at a time, loses almost nothing: one
round's drain / direct goodput is mostly where the passes fell. A figure is the median of its
per-round ratios (round i of one arm over round i of the other), with their range; echod's
differs from grpc-java's only where the medians are apart beyond the tolerance and so are the
ranges (within the spread otherwise).
"""

import math

from .. import findings as F, fmt, stats
from . import log

MUX_CONNS = 32
CLOSED_STREAMS = 8
MAX_STREAMS = 1000
# the figures: (key, title, the two arms (the witness's roles), what, step or None); the key
# names its tolerance in findings.AGAINST_TOL
FIGURES = [
    ("M.capacity", "closed-loop capacity, virtual / direct", ("virtual", "direct"), "goodput",
     None),
    ("M.p99", "p99, direct-drain / direct", ("direct-drain", "direct"), "p99_ms", "open"),
    ("M.goodput", "goodput, direct-drain / direct", ("direct-drain", "direct"), "goodput",
     "open"),
]


def open_streams(cap, frac, seconds):
    """Streams per connection for an open step: room for the step's whole backlog (what
    arrives beyond capacity) and a second of calls in service, half again, within what echod
    and HTTP/2 servers commonly allow a connection (MAX_STREAMS, echod's
    transport.max_concurrent_streams default)."""
    backlog = max(0.0, frac - 1.0) * cap * seconds + cap
    return min(MAX_STREAMS, max(16, int(math.ceil(1.5 * backlog / MUX_CONNS))))


def measure(run, target, arm):
    """The shape's steps on a started server: {"closed": step, "open": [step]} (the steps as
    drivers.h2load_step gives them, with `stage` and `fraction`); a step that could not run is
    a problem and a failed step."""
    d, plan, cap = run.drivers, run.plan, run.cap
    out = {"conns": MUX_CONNS, "closed": None, "open": []}
    closed = d.h2load_step(target, arm, None, plan.fixed_s, MUX_CONNS, CLOSED_STREAMS,
                           run.problems)
    closed.update(stage=_stage(None), fraction=None)
    out["closed"] = closed
    log("  mux closed %dx%d: %.0f calls/s, p99 %s ms, %s µs/call" % (
        MUX_CONNS, CLOSED_STREAMS, goodput(closed) or 0, fmt.num(closed["p99_ms"], 2),
        fmt.num(closed["cpu_us_per_call"])))
    for frac in plan.mux_fractions:
        rate = round(frac * cap)
        for r in range(1, plan.mux_rounds + 1):
            s = d.h2load_step(target, arm, rate, plan.mux_s, MUX_CONNS,
                              open_streams(cap, frac, plan.mux_s), run.problems)
            s.update(stage=_stage(frac), fraction=frac, round=r)
            log("  mux open %.2gx = %d/s, round %d: goodput %.0f/s, p99 %s ms" % (
                frac, rate, r, goodput(s) or 0, fmt.num(s["p99_ms"], 2)))
            out["open"].append(s)
    return out


def _stage(frac):
    """A step's name: the closed loop (frac None), or the open step at `frac` of capacity."""
    return "closed" if frac is None else "open %.2gx" % frac


def _steps_at(m, frac):
    """An arm's steps of this shape (measure's result, or {}) at `frac`, its rounds in order
    (None: the closed loop, one)."""
    if frac is None:
        return [m["closed"]] if m.get("closed") else []
    return [s for s in m.get("open") or [] if s["fraction"] == frac]


def goodput(step):
    """Calls answered per second of a step, or None."""
    if not step or not step.get("duration_s"):
        return None
    return step["ok"] / step["duration_s"]


def _value(step, what):
    if not step or step.get("failed") or step.get("error"):
        return None
    return goodput(step) if what == "goodput" else step.get(what)


def mux_figures(res, names=None):
    """The shape's figures of a run's results by role ({role: results}; `names` maps a role to
    its key in res, default the role itself): [{key, title, step, value, rounds, range,
    terms}], `rounds` the ratio of the two arms' figures round by round (None where either
    lacks it), value their median and range their (min, max) (None without one), terms each
    arm's median figure."""
    names = names or {}
    out = []

    def mux_of(role):
        return (res.get(names.get(role, role)) or {}).get("mux")
    for key, title, (a, b), what, where in FIGURES:
        ma, mb = mux_of(a) or {}, mux_of(b) or {}
        # a closed figure stands even where b has no closed loop (its value None); the open
        # ones are at b's steps, each fraction once
        fracs = [None] if where is None else list(dict.fromkeys(
            s["fraction"] for s in mb.get("open") or []))
        for frac in fracs:
            sa, sb = _steps_at(ma, frac), _steps_at(mb, frac)
            rounds = [fmt.ratio(_value(x, what), _value(y, what))
                      for x, y in zip(sa, sb or [None])] or [None]
            got = [r for r in rounds if r is not None]
            out.append({"key": key,
                        "title": title if frac is None else "%s at %.2gx" % (title, frac),
                        "step": _stage(frac), "rounds": rounds, "value": stats.median(got),
                        "range": (min(got), max(got)) if got else None,
                        "terms": (stats.median([_value(x, what) for x in sa]),
                                  stats.median([_value(y, what) for y in sb]))})
    return out


def within_spread(e, j, tol):
    """Whether two figures' round ranges ((min, max) of ratios, or None) come within the
    tolerance of each other: neither arm's rounds lie wholly beyond the other's."""
    if not e or not j or e[0] == e[1] and j[0] == j[1]:
        return False
    return e[0] <= j[1] * (1 + tol) and j[0] <= e[1] * (1 + tol)


WITHIN_SPREAD = "within the spread"


def against(echod, java, flagged_roles=()):
    """Per figure: echod's and grpc-java's ratios (their rounds' medians and ranges), echod /
    grpc-java and the verdict (findings.against_part on the medians, then WITHIN_SPREAD where
    they differ but the rounds' ranges do not: within_spread; not judged where either arm of
    grpc-java's was flagged, with `would_read` the verdict the same rule would give)."""
    out = []
    jby = {f["title"]: f for f in java}
    for f in echod:
        j = jby.get(f["title"]) or {"value": None}
        arms = next(a for k, _, a, _, _ in FIGURES if k == f["key"])
        nj = any(a in flagged_roles for a in arms)
        tol = F.AGAINST_TOL[f["key"]]
        r, v = F.against_part(f["key"], f["value"], j["value"])
        if v == "differs" and within_spread(f.get("range"), j.get("range"), tol):
            v = WITHIN_SPREAD
        row = {"key": f["key"], "title": f["title"], "echod": f["value"], "java": j["value"],
               "echod_range": f.get("range"), "java_range": j.get("range"), "ratio": r,
               "tol": tol, "verdict": "not judged" if nj else v}
        if nj:
            row["would_read"] = v
        out.append(row)
    return out


def steps_table(res, arms):
    """Each arm's steps in this shape, an open step's rounds each on its row: calls in flight
    allowed, offered, goodput, p50, p99, CPU per call. Only a run's own steps come here (no
    study.json is read back into it), so a step always has its conns and streams, which runs
    before them did not write."""
    out = ["| arm | step | connections x streams | offered/s | goodput/s | p50 ms | p99 ms | "
           "CPU µs/call |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for a in arms:
        m = (res.get(a) or {}).get("mux")
        if not m:
            continue
        for s in [m["closed"]] + m["open"]:
            if not s:
                continue
            several = s.get("round") and len(_steps_at(m, s["fraction"])) > 1
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                a, s["stage"] + (", round %d" % s["round"] if several else ""),
                "%d x %d%s" % (s["conns"], s["streams"], " (failed)" if s.get("error") else ""),
                "closed" if s["offered"] is None else "%.0f" % s["offered"],
                fmt.num(goodput(s), 0), fmt.num(s["p50_ms"], 2), fmt.num(s["p99_ms"], 2),
                fmt.num(s["cpu_us_per_call"])))
    return out


def ranged(value, rng):
    """A figure with its rounds' range when they disagree: "1.06 (1.02-1.19)"."""
    if not rng or fmt.num(rng[0], 2) == fmt.num(rng[1], 2):
        return fmt.num(value, 2)
    return "%s (%s-%s)" % (fmt.num(value, 2), fmt.num(rng[0], 2), fmt.num(rng[1], 2))


def against_table(rows):
    out = ["| figure | echod | grpc-java | echod / grpc-java | against grpc-java |",
           "|---|---:|---:|---:|---|"]
    for r in rows:
        out.append("| %s | %s | %s | %s | %s |" % (
            r["title"], ranged(r["echod"], r.get("echod_range")),
            ranged(r["java"], r.get("java_range")), fmt.num(r["ratio"], 2),
            F.against_text(r["verdict"], r["tol"]) + (
                " (it would read %s)" % F.against_text(r["would_read"], r["tol"])
                if "would_read" in r else "")))
    return out


def figures_table(figs):
    out = ["| figure | ratio (median of the rounds, their range) |", "|---|---:|"]
    out += ["| %s | %s |" % (f["title"], ranged(f["value"], f.get("range"))) for f in figs]
    return out
