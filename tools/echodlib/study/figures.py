"""Figures of a study run's results (study.json's `results`: per arm its fixed-rate steps, ramp
steps and stream runs): what the findings compare, and the study's published figures at a
step, for the tables and plots."""

from .. import findings as F
from ..fmt import ratio
from .regimes import ramps


def step_at(res, arm, i):
    """Step i of an arm's unary ramp, or None (its ramp did not run)."""
    ramp = res[arm]["ramp"]
    return ramp[i] if i < len(ramp) else None


def stream_plateau(run):
    """A stream run's plateau: its best step's answers per second (by arrival)."""
    return max((s["answered"] / s["duration_s"] for s in run["steps"]), default=None)


def published_p99(arm, frac):
    """The study's p99 (ms) at this multiple of capacity, or None (not one of its steps)."""
    off = round(frac * F.RAMP_SCALE)
    if arm not in F.RAMP_P99 or off not in F.RAMP_OFFERED:
        return None
    return F.RAMP_P99[arm][F.RAMP_OFFERED.index(off)]


def published_in_flight(arm, frac):
    """Little's law on the study's figures: its calls in flight at a step were at most its p99
    (an upper bound of the mean) times its goodput there (the offer, or the arm's plateau)."""
    p99 = published_p99(arm, frac)
    if p99 is None:
        return None
    plateau = (F.PLATEAU_KNEE.get(arm) or (F.DRAIN_PEAK.get(arm),))[0]
    return p99 / 1000.0 * min(frac * F.RAMP_SCALE, plateau)


def in_seconds(calls, capacity):
    """Calls in flight as seconds of a capacity (a cap's unit): the study's at its direct arm's
    2,140/s (findings.STUDY_CAPACITY), a run's at its calibrated capacity."""
    return calls / float(capacity) if calls is not None and capacity else None


def measured_figures(res, arms, cap, cpu_us, flat=True, regime=None):
    """The figures findings.compute() reads, from a run's results and its `regime` (study.json's:
    None for a run from before it had one; also those of a study.json written before
    bench/study computed findings: their steps have no `fraction`, which is then offered /
    capacity, and their unary steps no `answered`, then the OK calls). A capped run's ramps
    (its own and the extra ones) are also keyed by their cap (capped_p99, capped_goodput)."""
    def frac(s):
        return s["fraction"] if "fraction" in s else round(s["offered"] / cap, 2)

    def answered(s):
        return s["answered"] if s.get("answered") is not None else s["ok"]
    m = {k: {} for k in ("cpu_per_call", "own_cpu_per_call", "grid_p99", "grid_p50_h2load",
                         "plateau", "knee", "ramp_p99", "ramp_goodput", "stream_plateau",
                         "stream_top_p99", "stream_top_shed", "capped_p99", "capped_goodput")}
    m["regime"] = regime
    for a in arms:
        r = res[a]
        for s in r["fixed"]:
            if s["driver"].startswith("k6"):
                m["cpu_per_call"][a] = s["cpu_us_per_call"]
                # echod's own CPU: what the flat cost leaves; the model charges each arm by
                # its structure, so what a call burns is not known from cpu_us alone
                if s["cpu_us_per_call"] is not None and flat:
                    m["own_cpu_per_call"][a] = s["cpu_us_per_call"] - cpu_us
                m["grid_p99"][a] = s["p99_ms"]
            elif s["driver"].startswith("h2load"):
                m["grid_p50_h2load"][a] = s["p50_ms"]
        rs = r.get("ramp_summary") or {}
        m["plateau"][a] = rs.get("plateau") or rs.get("peak")
        m["knee"][a] = ratio(rs.get("knee"), cap)
        m["ramp_p99"][a] = {F.frac_key(frac(s)): s["p99_ms"] for s in r["ramp"]}
        m["ramp_goodput"][a] = {F.frac_key(frac(s)): answered(s) / s["duration_s"]
                                for s in r["ramp"]}
        for _, steps, run in ramps(r, a):
            if (run or {}).get("cap_s"):
                key = F.cap_key(run["cap_s"])
                m["capped_p99"].setdefault(a, {})[key] = {F.frac_key(frac(s)): s["p99_ms"]
                                                           for s in steps}
                m["capped_goodput"].setdefault(a, {})[key] = {
                    F.frac_key(frac(s)): answered(s) / s["duration_s"] for s in steps}
        if r["streams"]:
            m["stream_plateau"][a] = F.geomean(stream_plateau(run) for run in r["streams"])
            m["stream_top_p99"][a] = F.geomean(run["steps"][-1]["p99_ms"] for run in r["streams"])
            tops = [run["steps"][-1] for run in r["streams"]]
            m["stream_top_shed"][a] = sum(t["dropped"] / t["duration_s"] for t in tops) / len(tops)
    return m
