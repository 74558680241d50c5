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
           while the connection has a free stream, and each has enough for the step's backlog

and the shape's three figures, each a ratio of two arms of the run (mux_figures), which the
witness's grpc-java arms give beside echod's: virtual / direct capacity, direct-drain / direct
p99 and goodput at each open step. The study never measured this shape: there is no published
figure, only the real grpc-java here (findings.against_part judges echod's against it).
"""

import math

from .. import findings as F, fmt
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
        s = d.h2load_step(target, arm, rate, plan.mux_s, MUX_CONNS,
                          open_streams(cap, frac, plan.mux_s), run.problems)
        s.update(stage=_stage(frac), fraction=frac)
        log("  mux open %.2gx = %d/s: goodput %.0f/s, p99 %s ms" % (
            frac, rate, goodput(s) or 0, fmt.num(s["p99_ms"], 2)))
        out["open"].append(s)
    return out


def _stage(frac):
    """A step's name: the closed loop (frac None), or the open step at `frac` of capacity."""
    return "closed" if frac is None else "open %.2gx" % frac


def _step_at(m, frac):
    """An arm's step of this shape (measure's result, or {}) at `frac` (None: the closed
    loop), or None."""
    if frac is None:
        return m.get("closed")
    return next((s for s in m.get("open") or [] if s["fraction"] == frac), None)


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
    its key in res, default the role itself): [{key, title, step, value, terms}], value the
    ratio of the two arms' figures (None where either lacks it)."""
    names = names or {}
    out = []

    def mux_of(role):
        return (res.get(names.get(role, role)) or {}).get("mux")
    for key, title, (a, b), what, where in FIGURES:
        ma, mb = mux_of(a) or {}, mux_of(b) or {}
        # a closed figure stands even where b has no closed loop (its value None); the open
        # ones are at b's steps
        fracs = [None] if where is None else [s["fraction"] for s in mb.get("open") or []]
        for frac in fracs:
            terms = (_value(_step_at(ma, frac), what), _value(_step_at(mb, frac), what))
            out.append({"key": key,
                        "title": title if frac is None else "%s at %.2gx" % (title, frac),
                        "step": _stage(frac), "terms": terms, "value": fmt.ratio(*terms)})
    return out


def against(echod, java, flagged_roles=()):
    """Per figure: echod's and grpc-java's ratios, echod / grpc-java and the verdict
    (findings.against_part; not judged where either arm of grpc-java's was flagged)."""
    out = []
    jby = {f["title"]: f for f in java}
    for f in echod:
        j = jby.get(f["title"]) or {"value": None}
        arms = next(a for k, _, a, _, _ in FIGURES if k == f["key"])
        nj = any(a in flagged_roles for a in arms)
        r, v = F.against_part(f["key"], f["value"], j["value"], nj)
        out.append({"key": f["key"], "title": f["title"], "echod": f["value"],
                    "java": j["value"], "ratio": r, "tol": F.AGAINST_TOL[f["key"]],
                    "verdict": v})
    return out


def steps_table(res, arms):
    """Each arm's steps in this shape: calls in flight allowed, offered, goodput, p50, p99, CPU
    per call. Only a run's own steps come here (no study.json is read back into it), so a step
    always has its conns and streams, which runs before them did not write."""
    out = ["| arm | step | connections x streams | offered/s | goodput/s | p50 ms | p99 ms | "
           "CPU µs/call |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for a in arms:
        m = (res.get(a) or {}).get("mux")
        if not m:
            continue
        for s in [m["closed"]] + m["open"]:
            if not s:
                continue
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                a, s["stage"], "%d x %d%s" % (s["conns"], s["streams"],
                                              " (failed)" if s.get("error") else ""),
                "closed" if s["offered"] is None else "%.0f" % s["offered"],
                fmt.num(goodput(s), 0), fmt.num(s["p50_ms"], 2), fmt.num(s["p99_ms"], 2),
                fmt.num(s["cpu_us_per_call"])))
    return out


def against_table(rows):
    out = ["| figure | echod | grpc-java | echod / grpc-java | against grpc-java |",
           "|---|---:|---:|---:|---|"]
    for r in rows:
        out.append("| %s | %s | %s | %s | %s |" % (
            r["title"], fmt.num(r["echod"], 2), fmt.num(r["java"], 2), fmt.num(r["ratio"], 2),
            F.against_text(r["verdict"], r["tol"])))
    return out


def figures_table(figs):
    out = ["| figure | ratio |", "|---|---:|"]
    out += ["| %s | %s |" % (f["title"], fmt.num(f["value"], 2)) for f in figs]
    return out
