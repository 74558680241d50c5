"""The capacity study's five findings: the published figures, the rule that turns a measured
figure into a verdict, and the findings table bench/study writes (study.md, study.json).

Every figure is a ratio between two arms (or two workloads) of one run, so it does not depend on
the machine's speed, and the study's own ratio is its published counterpart. The verdict of one
figure (a *part*) is computed, never written by hand:

  effect   the natural log of the ratio: 0 is no difference, the sign is the direction
  reproduced    the published sign, and between half and twice the published effect
  in direction  the published sign and at least the part's noise floor, but outside that band
  not           below the noise floor, or the other sign
  not measured  an arm or an experiment the run did not have

A part that the study reports as *unchanged* (the drain's goodput) is reproduced within
UNCHANGED_TOL of 1, in direction within UNCHANGED_NEAR, else not.

What a verdict rests on (RESTS_ON, SOURCES): an agreement is evidence only where the figure
judged was not among the run's inputs. Each part names the published figures its ratio is
computed from and the run inputs its measured ratio depends on (other than as a factor both of
its terms share, which cancels: the capacity every figure is a multiple of, a cap every arm's
ramp has); each run names which of its inputs were set from which published figures
(run_sources: the capacity, a cost-model preset's units, the grid's stalls, the caps). Where the
run set *every* published figure the part's ratio is computed from, the ratio itself was an
input, and a computed *reproduced* or *in direction* reads

  identity  the measured ratio is the published one by construction, so it cannot fail: F4 at
            the study's own caps (F4p), as under a full cap the mean wait is cap / goodput and
            those caps are the published p99s times goodput
  fitted    inputs were fitted to the published figures and agreement is expected: F5's stream
            plateau over the unary one on the cost model, whose call and message units are
            those two plateaus

with the computed verdict kept (`computed`; the tables write "fitted (would be reproduced)"). A
*not* stays *not* (a miss despite the fit is still a miss), *not measured* stays. Where the run
set one of the ratio's two terms (*partly fitted*: F1 on the cost model, whose wake-up unit is
fitted to direct's CPU at 10% load; F2 with the grid's stalls, fitted to the virtual-thread p99),
the ratio judges the other term against it, a prediction, and the verdict stands with the part's
`basis` saying which term was set. A finding's verdict is the weakest of its parts' (VERDICTS,
weakest first: a finding with a fitted part is at best *fitted*), `computed` the weakest of
their computed verdicts; its `published` and `measured` are those of its first part.

Noise floors are the run-to-run spread of each kind of figure in bench/RESULTS.md's repeated
full runs: CPU-per-call ratios (0.94-0.96 over five runs) and plateau ratios repeat within 1-2%
(floor 2%), tail ratios within several per cent (10%), stream ratios 5%, shed counts 25%.

Cost variants and regimes: a run measures one synthetic-cost variant ("flat", work.defaults.cpu_us
per call or message, or a work.model preset) in one regime of the unary ramp (capped, as the
study's k6 ran it, or open). Each finding of a run says which (`variant`, its label, e.g.
"flat, capped 1.99 s"); merge() lines several runs' findings up by id, one column per label.

F3 and F4 compare arms of one run, so in a capped run at matched caps (every arm's ramp at the
run's cap). F4 is also judged at the study's own caps (F4p, when the run measured them: the
drain at STUDY_CAP_S["direct-drain"], direct at STUDY_CAP_S["direct"]), with the ratio the cap
difference alone gives (direct at the one cap against direct at the other) in its detail.

Against the witness (against()): in a run with grpc-java's arms beside echod's, each of echod's
parts is also judged against the same part measured on the real grpc-java in the same run, the
judge the published figure can only stand in for: *matches* where echod's ratio is within
AGAINST_TOL of grpc-java's (the ratio of the two ratios within 1 +- the tolerance), *differs*
outside, *not judged* where the grpc-java arm was flagged (its compiler or GC), *not measured*
where either run lacks it. The tolerances are those a user's choice of executor can bear: a
capacity or goodput ratio within 0.05, a CPU ratio within 0.10, a tail ratio within 0.15, the
stream-over-unary plateau within 0.10, the shed ratio (a count of a few messages) within a
factor of two.
"""

import math

from .fmt import num, ratio

RATIO = "ratio"
UNCHANGED = "unchanged"
UNCHANGED_TOL = 0.03
UNCHANGED_NEAR = 0.10
HALF, TWICE = 0.5, 2.0
# weakest first: a finding is no stronger than its weakest part, and a fitted part or one that
# holds by construction is not evidence, so it ranks below an agreement that is
VERDICTS = ("not measured", "not", "in direction", "identity", "fitted", "reproduced")
IDENTITY, FITTED, PARTLY = "identity", "fitted", "partly fitted"
AGREEMENT = ("reproduced", "in direction")  # what an input set from the figure can explain away
# echod's part against grpc-java's of the same run (against()): weakest first, so a finding
# differs where any part does
AGAINST = ("differs", "not judged", "not measured", "matches")
AGAINST_TOL = {"F1.cpu": 0.10, "F2.p99": 0.15, "F3.plateau": 0.05, "F3.p99": 0.15,
               "F4.p99": 0.15, "F4.goodput": 0.05, "F4p.p99": 0.15, "F4p.goodput": 0.05,
               "F5.plateau": 0.10, "F5.p99": 0.15, "F5.shed": 1.0,
               # the multiplexed shape's figures (study.mux), which have no published figure
               "M.capacity": 0.05, "M.p99": 0.15, "M.goodput": 0.05}

# --------------------------------------------------------------------------- published figures
# The study (../shared/study/000_300a1f520d28abe2.txt): grpc-java on 1-CPU Guaranteed pods,
# arm64 Kubernetes, k6 as the driver.

# saturation ramps, 2-minute steps: p99 ms at each offered rate (calls/s)
RAMP_OFFERED = [400, 800, 1200, 1600, 1800, 2000, 2200, 2400]
RAMP_P99 = {
    "virtual": [12.8, 44.5, 86.8, 238.7, 324.9, 661.8, 972.5, 2069.8],
    "direct": [9.6, 38.3, 86.6, 222.5, 289.3, 381.9, 649.7, 1993.9],
    "direct-drain": [9.6, 32.4, 66.6, 222.0, 230.7, 391.6, 498.1, 717.1],
}
# the ramp's calls/s as multiples of 2,000/s, what bench/study calibrates its capacity to mean
RAMP_SCALE = 2000.0
PLATEAU_KNEE = {"direct": (2140, 2200), "virtual": (2060, 2000)}
DRAIN_PEAK = {"direct-drain": 2137, "direct": 2116}  # peak goodput of the drain replication
# The study's top step read as a cap on calls in flight (docs/study-load.md): Little's law on its
# p99 and goodput at 2,400 calls/s, direct 1,993.9 ms x 2,140/s = 4,267 calls and the drain run
# 717.1 ms x 2,137/s = 1,532; in seconds of direct's capacity (its 2,140/s plateau: what
# bench/study calibrates), 1.994 and 0.716 s. The mean wait under a cap is cap / goodput
# whatever the server does, and the two stock arms' 4,267 and 4,264 (goodput 4% apart) agree
# to 0.1%: the signature of k6's maxVUs.
STUDY_CAPACITY = PLATEAU_KNEE["direct"][0]
STUDY_CAP_CALLS = {"direct": RAMP_P99["direct"][-1] / 1000.0 * STUDY_CAPACITY,
                   "direct-drain": RAMP_P99["direct-drain"][-1] / 1000.0 *
                   DRAIN_PEAK["direct-drain"]}
STUDY_CAP_S = {a: c / STUDY_CAPACITY for a, c in STUDY_CAP_CALLS.items()}
# fixed-rate grid, 200 calls/s per arm (about 10% utilisation), JVM
GRID = {"virtual": {"p50": 3.1, "p99": (65, 72), "cpu_m": 220},
        "direct": {"p50": 2.9, "p99": (115, 137), "cpu_m": 145}}
# streaming ramps: 20 or 40 bidi streams, msg/s aggregate
STREAM_OFFERED = [6000, 10000, 12000, 14000, 16000]
STREAM_P99 = {"virtual": [27, 91, 165, 406, 1350], "direct": [15, 50, 67, 165, 741]}
STREAM_SHED = {"virtual": 625, "direct": 38}  # msg/s at the top step
STREAM_PLATEAU = (15000, 16000)
UNARY_PLATEAU = (2060, 2140)
NAMES = {"virtual": "virtual threads", "direct": "directExecutor()",
         "direct-drain": "direct+drainNow"}


def mid(r):
    return (r[0] + r[1]) / 2.0


def geomean(values):
    """Geometric mean; None when any value is missing (a ratio over steps an arm lacks)."""
    values = list(values)
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def frac_key(x):
    """A ramp step's multiple of capacity as a JSON key: 0.8 -> "0.8"."""
    return "%g" % round(x, 3)


def cap_key(seconds):
    """A cap in seconds of capacity as a JSON key: STUDY_CAP_S["direct"] -> "1.994"."""
    return "%.3f" % seconds


def cap_text(seconds):
    """A cap in seconds of capacity as the tables and labels write it: 1.99 s, 0.716 s."""
    return "%.3g s" % seconds


# ---------------------------------------------------------------------- what a verdict rests on
# The published figures the parts' ratios are computed from: {name: (the term, its value)}.
PUBLISHED = {
    "plateau.direct": ("directExecutor()'s unary plateau", "~2,140 calls/s, what a run's "
                       "--capacity stands for"),
    "plateau.virtual": ("virtual threads' unary plateau", "~2,060 calls/s"),
    "grid.cpu.direct": ("directExecutor()'s CPU at 10% load", "145 millicores at 200 calls/s"),
    "grid.cpu.virtual": ("virtual threads' CPU at 10% load", "~220 millicores at 200 calls/s"),
    "grid.p99.direct": ("directExecutor()'s p99 at 10% load", "115-137 ms"),
    "grid.p99.virtual": ("virtual threads' p99 at 10% load", "65-72 ms (p50 ~3.1 ms)"),
    "ramp.p99.direct": ("directExecutor()'s ramp p99", "1,993.9 ms at the top step"),
    "ramp.p99.virtual": ("virtual threads' ramp p99", "2,069.8 ms at the top step"),
    "ramp.p99.direct-drain": ("direct+drainNow's ramp p99", "717.1 ms at the top step"),
    "peak.direct-drain": ("direct+drainNow's peak goodput", "2,137 calls/s"),
    "peak.direct": ("directExecutor()'s peak goodput beside the drain", "2,116 calls/s"),
    "stream.plateau.direct": ("the stream plateau", "15,000-16,000 msg/s"),
    "stream.p99.direct": ("directExecutor()'s stream p99 at the top step", "741 ms"),
    "stream.p99.virtual": ("virtual threads' stream p99 at the top step", "1,350 ms"),
    "stream.shed.direct": ("directExecutor()'s messages shed at the top step", "38 msg/s"),
    "stream.shed.virtual": ("virtual threads' messages shed at the top step", "625 msg/s"),
}

# The inputs of a run that can be set from published figures (run_sources says which a run had
# and from which figures).
INPUTS = {
    "capacity": "the capacity calibration: the synthetic work per call puts direct at --capacity "
                "calls/s on one CPU, the unit of every figure",
    "model.plateaus": "the cost model's call and message units (config/models/"
                      "grpc-java-study.yaml, docs/work-model.md)",
    "model.low-load": "the cost model's wake-up unit (config/models/grpc-java-study.yaml, "
                      "docs/work-model.md)",
    "grid-stalls": "the grid's stall length (--grid-stalls: the p99's midpoint less its p50, "
                   "65 ms at the study's scale; study/stalls.py)",
    "cap": "the capped regime's cap, every arm's ramp at it (Little's law on the study's top "
           "step: STUDY_CAP_S)",
    "study-caps": "the study's own caps, direct at 1.994 s and direct-drain at 0.716 s of "
                  "capacity (Little's law on each arm's top-step p99 and goodput: STUDY_CAP_S)",
}
# the published figures each input is set from (the cap's: those of the arm whose cap it is)
SOURCES = {
    "capacity": ("plateau.direct",),
    "model.plateaus": ("plateau.direct", "stream.plateau.direct"),
    "model.low-load": ("grid.cpu.direct",),
    "grid-stalls": ("grid.p99.virtual",),
    "study-caps": ("ramp.p99.direct", "plateau.direct", "ramp.p99.direct-drain",
                   "peak.direct-drain"),
}
CAP_SOURCES = {"direct": ("ramp.p99.direct", "plateau.direct"),
               "direct-drain": ("ramp.p99.direct-drain", "peak.direct-drain")}
# A cost-model preset's inputs, each by the units it sets: {variant: {input: units}}. A preset
# has the input when it has any of those units (the preset before 2026-12-03 had no wake-up).
MODEL_FITS = {"model:grpc-java-study": {"model.plateaus": ("call", "message"),
                                        "model.low-load": ("wakeup",)}}

# What each part rests on: (the published figures its ratio is computed from, {a run input its
# measured ratio depends on: (IDENTITY or FITTED, why)}). Not listed, as they set no ratio: the
# capacity, which is the unit every figure is measured in (direct's unary plateau is 1 capacity
# in every run, so F3's and F5's plateau ratios judge the other plateau in that unit, as any
# measurement does), and a cap every arm's ramp has (F3 and F4 at matched caps: once the cap is
# full each arm's wait is the cap over its own goodput, so their ratio is the goodputs', which
# the cap does not set). A part is IDENTITY or FITTED where the run set every one of its
# published figures through its inputs; PARTLY where it set some, and its verdict judges the
# others (rests_on).
RESTS_ON = {
    "F1.cpu": (("grid.cpu.direct", "grid.cpu.virtual"), {
        "model.low-load": (FITTED, "direct's CPU at 10% load is the model's fit")}),
    "F2.p99": (("grid.p99.direct", "grid.p99.virtual"), {
        "grid-stalls": (FITTED, "a pool arm's p99 at 10% load is the stall it was fitted to")}),
    "F3.plateau": (("plateau.direct", "plateau.virtual"), {}),
    "F3.p99": (("ramp.p99.direct", "ramp.p99.virtual"), {}),
    "F4.p99": (("ramp.p99.direct-drain", "ramp.p99.direct"), {}),
    "F4.goodput": (("peak.direct-drain", "peak.direct"), {}),
    "F4p.p99": (("ramp.p99.direct-drain", "ramp.p99.direct"), {
        "study-caps": (IDENTITY, "under a full cap the mean wait is cap / goodput whatever the "
                       "server does, and these caps are the published p99s times goodput: the "
                       "measured ratio is the published one up to the goodputs' ratio, so it "
                       "cannot fail")}),
    "F4p.goodput": (("peak.direct-drain", "peak.direct"), {}),
    "F5.plateau": (("stream.plateau.direct", "plateau.direct"), {
        "model.plateaus": (FITTED, "the model's call and message units are the two plateaus, "
                           "so their ratio is the fit's")}),
    "F5.p99": (("stream.p99.virtual", "stream.p99.direct"), {}),
    "F5.shed": (("stream.shed.virtual", "stream.shed.direct"), {}),
}


def part_keys(fid):
    """The keys of a finding's parts, in order (RESTS_ON's)."""
    return [k for k in RESTS_ON if k.split(".")[0] == fid]


def run_sources(variant="flat", units=None, grid_stalls=False, regime=None):
    """A run's inputs set from published figures: {input: [published figure]} (study.json's
    `published_inputs`). `variant`: the cost variant ("flat", "model:grpc-java-study"), `units`
    its preset's units (study.json's cost.units; None: all of MODEL_FITS's), `grid_stalls`
    whether the grid stalled, `regime` study.json's (a capped run's cap is the study's when it
    is one of STUDY_CAP_S; published_caps: the study's own caps too)."""
    out = {"capacity": list(SOURCES["capacity"])}
    for inp, need in MODEL_FITS.get(variant, {}).items():
        if units is None or any(units.get(u) for u in need):
            out[inp] = list(SOURCES[inp])
    if grid_stalls:
        out["grid-stalls"] = list(SOURCES["grid-stalls"])
    regime = regime or {}
    if regime.get("name") == "capped" and regime.get("cap_s"):
        arm = next((a for a in CAP_SOURCES if cap_key(STUDY_CAP_S[a]) ==
                    cap_key(regime["cap_s"])), None)
        if arm:
            out["cap"] = list(CAP_SOURCES[arm])
    if regime.get("published_caps"):
        out["study-caps"] = list(SOURCES["study-caps"])
    return out


def describe_sources(sources):
    """study.json's `published_inputs`: {input: {published, text}}."""
    return {i: {"published": list(p), "text": INPUTS.get(i, i)} for i, p in sources.items()}


def rests_on(key, sources):
    """What the part `key` rests on in a run of `sources`: None, or {kind: IDENTITY, FITTED or
    PARTLY, inputs, fitted (its published figures the run set), predicted (the others), why}."""
    published, inputs = RESTS_ON.get(key, ((), {}))
    used = [i for i in inputs if i in sources and set(sources[i]) & set(published)]
    if not used:
        return None
    fitted = [f for f in published if any(f in sources[i] for i in used)]
    predicted = [f for f in published if f not in fitted]
    kind = (PARTLY if predicted else
            IDENTITY if any(inputs[i][0] == IDENTITY for i in used) else FITTED)
    return {"kind": kind, "inputs": used, "fitted": fitted, "predicted": predicted,
            "why": "; ".join(inputs[i][1] for i in used)}


# --------------------------------------------------------------------------- verdicts

def verdict(rule, published, measured, noise=0.0):
    """The computed verdict of one part (module docstring), before what it rests on."""
    if measured is None or (rule == RATIO and published is None):
        return "not measured"
    if measured <= 0 or (rule == RATIO and published <= 0):
        return "not"
    em = math.log(measured)
    if rule == UNCHANGED:
        if abs(em) <= math.log(1 + UNCHANGED_TOL):
            return "reproduced"
        return "in direction" if abs(em) <= math.log(1 + UNCHANGED_NEAR) else "not"
    ep = math.log(published)
    if abs(em) < math.log(1 + noise) or em * ep <= 0:
        return "not"
    return "reproduced" if HALF <= em / ep <= TWICE else "in direction"


def label(computed, basis):
    """The verdict a part reads: IDENTITY or FITTED in place of an agreement its inputs explain
    (a miss, or a part not measured, stays what it is); the computed one otherwise."""
    if basis and basis["kind"] in (IDENTITY, FITTED) and computed in AGREEMENT:
        return basis["kind"]
    return computed


def verdict_text(v, computed=None, basis=None):
    """A verdict as the tables write it: "fitted (would be reproduced)", "reproduced (partly
    fitted)", or the verdict alone."""
    if computed is not None and computed != v:
        return "%s (would be %s)" % (v, computed)
    if basis and basis["kind"] == PARTLY and v not in ("not measured",):
        return "%s (partly fitted)" % v
    return v


def weakest(verdicts):
    return min(verdicts, key=VERDICTS.index) if verdicts else "not measured"


def judge(key, rule, published, measured, noise, sources):
    """(label, computed verdict, basis) of the part `key`'s figures in a run of `sources`."""
    computed = verdict(rule, published, measured, noise)
    basis = rests_on(key, sources or {})
    return label(computed, basis), computed, basis


def part(key, figure, published, published_text, measured, noise, sources, rule=RATIO,
         measured_text=None):
    v, computed, basis = judge(key, rule, published, measured, noise, sources)
    return {"key": key, "figure": figure, "rule": rule, "noise": noise, "published": published,
            "published_text": published_text, "measured": measured,
            "measured_text": measured_text, "verdict": v, "computed": computed, "basis": basis}


def finding(fid, key, title, parts, detail, variant):
    return {"id": fid, "key": key, "title": title, "published": parts[0]["published"],
            "measured": parts[0]["measured"], "verdict": weakest([p["verdict"] for p in parts]),
            "computed": weakest([p["computed"] for p in parts]),
            "parts": parts, "detail": detail, "variant": variant}


def relabel(findings, sources):
    """A run's findings (study.json's, from any version of bench/study) with every verdict as
    the current rule gives it in a run of `sources`: each part judged again from its published
    and measured figures (keyed by RESTS_ON's order where it has no key), F4p's caps-alone
    verdict too."""
    out = []
    for fd in findings:
        keys = part_keys(fd["id"])
        parts = []
        for i, p in enumerate(fd["parts"]):
            key = p.get("key") or (keys[i] if i < len(keys) else None)
            v, computed, basis = judge(key, p["rule"], p["published"], p["measured"],
                                       p["noise"], sources)
            parts.append(dict(p, key=key, verdict=v, computed=computed, basis=basis))
        detail = fd.get("detail")
        if fd["id"] == "F4p" and detail and "cap_only" in detail:
            detail = dict(detail)
            detail["cap_only_verdict"], detail["cap_only_computed"], _ = judge(
                "F4p.p99", RATIO, parts[0]["published"], detail["cap_only"], 0.10, sources)
        out.append(dict(finding(fd["id"], fd["key"], fd["title"], parts, detail,
                                fd.get("variant")), **{k: v for k, v in fd.items() if k not in (
                                    "id", "key", "title", "published", "measured", "verdict",
                                    "computed", "parts", "detail", "variant")}))
    return out


def rule_text():
    return ("effect = ln(measured ratio); reproduced: the published sign and %g-%gx the published "
            "effect; in direction: the published sign and at least the part's noise floor; not: "
            "below it or the other sign; an 'unchanged' part: within %d%% of 1 reproduced, within "
            "%d%% in direction. A part whose run set every published figure its ratio is computed "
            "from is no evidence: an agreement reads identity (the ratio is the published one by "
            "construction: F4 at the study's own caps) or fitted (inputs fitted to those figures: "
            "F5's plateaus on the cost model), with the computed verdict beside it (would be); "
            "where the run set one of the ratio's two terms (F1 on the cost model, F2 with the "
            "grid's stalls) the verdict judges the other (partly fitted). A finding takes its "
            "weakest part's verdict (weakest first: %s)." % (
                HALF, TWICE, UNCHANGED_TOL * 100, UNCHANGED_NEAR * 100, ", ".join(VERDICTS)))


def basis_text(p):
    """A part's basis in a sentence for the tables' notes, or None."""
    b = p.get("basis")
    if not b:
        return None
    inputs = "; ".join(INPUTS.get(i, i) for i in b["inputs"])

    def terms(keys):
        return " and ".join("%s (%s)" % PUBLISHED[k] for k in keys)
    if b["kind"] == PARTLY:
        return ("%s: %s %s an input of this run (%s), so the verdict, %s, judges %s against "
                "it" % (b["kind"], terms(b["fitted"]), "is" if len(b["fitted"]) == 1 else "are",
                        inputs, p["verdict"], terms(b["predicted"])))
    return "%s: %s are inputs of this run (%s): %s%s" % (
        verdict_text(p["verdict"], p.get("computed"), b), terms(b["fitted"]), inputs, b["why"],
        "" if p["verdict"] == b["kind"] else " (it misses all the same)")


# --------------------------------------------------------------------------- the five findings

def drain_parts(fid, p99, goodput, drain, direct, at, sources):
    """F4's two parts (of finding `fid`, F4 or F4p): the drain's p99 and goodput at the top step
    over direct's, from {name: {frac_key: figure}} (an arm's ramp, or one of its capped ramps);
    `at` says at which caps."""
    top = frac_key(1.2)
    return [part(fid + ".p99", "p99 at 1.2x of capacity, direct-drain / direct" + at,
                 RAMP_P99["direct-drain"][-1] / RAMP_P99["direct"][-1], "717 against 1,994 ms at "
                 "2,400 calls/s (-64%)", ratio(p99.get(drain, {}).get(top),
                                                p99.get(direct, {}).get(top)), 0.10, sources),
            part(fid + ".goodput", "goodput at 1.2x of capacity, direct-drain / direct" + at,
                 DRAIN_PEAK["direct-drain"] / DRAIN_PEAK["direct"],
                 "peak 2,137 against 2,116 calls/s: unchanged",
                 ratio(goodput.get(drain, {}).get(top), goodput.get(direct, {}).get(top)), 0.0,
                 sources, rule=UNCHANGED)]


def drain_at_published_caps(m, variant, sources):
    """F4p: F4 with each arm at the cap the study's own run had (STUDY_CAP_S: the drain at
    0.716 s, direct at 1.994 s), and in its detail what the cap difference alone gives (direct
    at the drain's cap over direct at its own): the published -64% is that ratio times the
    drain's own at the drain's cap, so the detail says how much of it the caps account for.
    Both rest on the study's caps (RESTS_ON["F4p.p99"]): identity, in a run that had them."""
    def ramp(name, arm, cap_of):
        """{frac_key: figure} of arm's ramp capped at the study's cap of arm `cap_of`."""
        return (m.get(name, {}).get(arm) or {}).get(cap_key(STUDY_CAP_S[cap_of])) or {}
    lo, hi = cap_text(STUDY_CAP_S["direct-drain"]), cap_text(STUDY_CAP_S["direct"])
    p99 = {"drain": ramp("capped_p99", "direct-drain", "direct-drain"),
           "direct": ramp("capped_p99", "direct", "direct"),
           "direct at the drain's cap": ramp("capped_p99", "direct", "direct-drain")}
    goodput = {"drain": ramp("capped_goodput", "direct-drain", "direct-drain"),
               "direct": ramp("capped_goodput", "direct", "direct")}
    parts = drain_parts("F4p", p99, goodput, "drain", "direct", " (direct-drain capped at %s, "
                        "direct at %s: the study's runs)" % (lo, hi), sources)
    top = frac_key(1.2)
    cap_only = ratio(p99["direct at the drain's cap"].get(top), p99["direct"].get(top))
    published, measured = parts[0]["published"], parts[0]["measured"]
    cap_only_verdict, cap_only_computed, _ = judge("F4p.p99", RATIO, published, cap_only, 0.10,
                                                   sources)
    return finding(
        "F4p", "drain-cuts-deep-tail-at-published-caps", "the drain's cut at the study's own "
        "caps, and what the caps alone give", parts,
        {"caps_s": {a: STUDY_CAP_S[a] for a in ("direct", "direct-drain")},
         "cap_only": cap_only, "cap_only_verdict": cap_only_verdict,
         "cap_only_computed": cap_only_computed,
         "cap_only_of_published": math.log(cap_only) / math.log(published) if cap_only else None,
         "cap_only_of_measured": (math.log(cap_only) / math.log(measured)
                                  if cap_only and measured and measured != 1 else None),
         "drain_at_drain_cap": ratio(p99["drain"].get(top),
                                     p99["direct at the drain's cap"].get(top)),
         "note": "cap_only: p99 at 1.2x, direct capped at %s over direct at %s (the caps' "
                 "difference alone; its verdict against the published %.2f by the same rule, "
                 "cap_only_computed before what it rests on); "
                 "drain_at_drain_cap: direct-drain over direct, both at %s; the measured ratio "
                 "is their product" % (lo, hi, published, lo)},
        variant)


def compute(m, variant, sources=None):
    """The five findings from a run's measured figures `m` (bench/study's measured_figures),
    and F4p after F4 when the run measured the study's caps (regime's published_caps), each
    part's verdict by what it rests on in a run of `sources` (run_sources; None: those that
    m's regime says, as for a run without a cost model or the grid's stalls):

      cpu_per_call[arm], own_cpu_per_call[arm]    fixed-rate grid on k6, µs
      grid_p99[arm], grid_p50_h2load[arm]         fixed-rate grid, ms
      plateau[arm]                                unary ramp, calls/s
      ramp_p99[arm][frac_key(x)]                  unary ramp p99 per step (x capacity), ms
      ramp_goodput[arm][frac_key(x)]              unary ramp goodput per step, calls/s
      stream_plateau[arm], stream_top_p99[arm], stream_top_shed[arm]   over the stream counts
      regime                                      {name, cap_s, published_caps, ...} or None
      capped_p99[arm][cap_key(s)][frac_key(x)]    p99 per step of each capped ramp, ms
      capped_goodput[arm][cap_key(s)][frac_key(x)]   and its goodput, calls/s
    """
    f = []
    regime = m.get("regime") or {}
    if sources is None:
        sources = run_sources(regime=regime)
    matched = (" (every arm capped at %s)" % cap_text(regime["cap_s"])
               if regime.get("name") == "capped" else "")
    cpu = m.get("cpu_per_call", {})
    own = m.get("own_cpu_per_call", {})
    f.append(finding(
        "F1", "cpu-at-low-load", "directExecutor() costs less CPU per call at low load",
        [part("F1.cpu", "server CPU per call, direct / virtual, fixed rate at 10% of capacity "
              "(k6)",
              GRID["direct"]["cpu_m"] / GRID["virtual"]["cpu_m"],
              "145 against ~220 millicores (JVM; native image 260 against ~390)",
              ratio(cpu.get("direct"), cpu.get("virtual")), 0.02, sources)],
        {"own_cpu_ratio": ratio(own.get("direct"), own.get("virtual")),
         "note": "own: server CPU per call less the synthetic work"}, variant))
    p99 = m.get("grid_p99", {})
    p50h = m.get("grid_p50_h2load", {})
    f.append(finding(
        "F2", "tail-at-low-load", "directExecutor()'s p99 is higher at low load (the convoy)",
        [part("F2.p99", "p99, direct / virtual, fixed rate at 10% of capacity (k6)",
              mid(GRID["direct"]["p99"]) / mid(GRID["virtual"]["p99"]),
              "115-137 ms against 65-72 ms (midpoints; the study calls it 2x)",
              ratio(p99.get("direct"), p99.get("virtual")), 0.10, sources)],
        {"h2load_p50_ratio": ratio(p50h.get("direct"), p50h.get("virtual")),
         "note": "h2load: bursts of one call per connection at once, the convoy's trigger"},
        variant))
    plateau = m.get("plateau", {})
    rp = m.get("ramp_p99", {})
    # the study's steps from 0.8x (75% utilisation, where it sees direct pull ahead) that this
    # run has for both arms (--quick: the top one only)
    high = [x for x in (0.8, 0.9, 1.0, 1.1, 1.2)
            if rp.get("direct", {}).get(frac_key(x)) and rp.get("virtual", {}).get(frac_key(x))]
    pub_tail = geomean([RAMP_P99["direct"][RAMP_OFFERED.index(round(x * RAMP_SCALE))] /
                        RAMP_P99["virtual"][RAMP_OFFERED.index(round(x * RAMP_SCALE))]
                        for x in high]) if high else None
    meas_tail = geomean([rp["direct"][frac_key(x)] / rp["virtual"][frac_key(x)] for x in high])
    f.append(finding(
        "F3", "ahead-at-saturation", "directExecutor() is ahead at saturation: goodput and tails",
        [part("F3.plateau", "plateau goodput, direct / virtual" + matched,
              PLATEAU_KNEE["direct"][0] / PLATEAU_KNEE["virtual"][0],
              "~2,140 against ~2,060 calls/s",
              ratio(plateau.get("direct"), plateau.get("virtual")), 0.02, sources),
         part("F3.p99", "p99, direct / virtual, geometric mean over the steps of %s x "
              "capacity%s" % ("/".join("%g" % x for x in high) or "0.8-1.2", matched), pub_tail,
              "the same steps of 1,600-2,400 calls/s: 222/239, 289/325, 382/662, 650/973, "
              "1,994/2,070 ms", meas_tail, 0.10, sources)],
        {"knee": m.get("knee", {}), "published_knee": {a: PLATEAU_KNEE[a][1] for a in PLATEAU_KNEE}},
        variant))
    rg = m.get("ramp_goodput", {})
    f.append(finding(
        "F4", "drain-cuts-deep-tail", "draining at the end of a read batch cuts the deep-saturation "
        "tail, goodput unchanged",
        drain_parts("F4", rp, rg, "direct-drain", "direct", matched, sources),
        {"published_cuts": {"0.6": 66.6 / 86.6, "0.9": 230.7 / 289.3, "1.1": 498.1 / 649.7},
         "measured_cuts": {frac_key(x): ratio(rp.get("direct-drain", {}).get(frac_key(x)),
                                               rp.get("direct", {}).get(frac_key(x)))
                           for x in (0.6, 0.9, 1.1)}},
        variant))
    if regime.get("published_caps"):
        f.append(drain_at_published_caps(m, variant, sources))
    sp = m.get("stream_plateau", {})
    sp99 = m.get("stream_top_p99", {})
    shed = m.get("stream_top_shed", {})
    shed_ratio = None
    if shed.get("virtual") is not None and shed.get("direct") is not None:
        shed_ratio = (shed["virtual"] + 1.0) / (shed["direct"] + 1.0)
    f.append(finding(
        "F5", "streams-far-above-unary", "a pod streams far more messages than it serves unary "
        "calls; on streams the executors separate only near saturation",
        [part("F5.plateau", "stream plateau / unary plateau, direct (msg/s over calls/s)",
              mid(STREAM_PLATEAU) / mid(UNARY_PLATEAU), "15,000-16,000 msg/s against 2,060-2,140 "
              "calls/s (~7.5x)", ratio(sp.get("direct"), plateau.get("direct")), 0.05,
              sources),
         part("F5.p99", "stream p99 at the top step, virtual / direct",
              STREAM_P99["virtual"][-1] / STREAM_P99["direct"][-1], "1,350 against 741 ms at "
              "16,000 msg/s", ratio(sp99.get("virtual"), sp99.get("direct")), 0.10, sources),
         part("F5.shed", "messages shed at the top step, (virtual + 1) / (direct + 1) msg/s",
              (STREAM_SHED["virtual"] + 1.0) / (STREAM_SHED["direct"] + 1.0),
              "625 against 38 msg/s", shed_ratio, 0.25, sources)],
        {"stream_plateau": sp, "stream_top_shed": shed}, variant))
    return f


# --------------------------------------------------------------------------- tables

def part_text(p):
    """A part's verdict as the tables write it (verdict_text), from a part of a run's findings
    or of merge()'s variants."""
    return verdict_text(p["verdict"], p.get("computed"), p.get("basis"))


def table(findings):
    """Markdown: one row per part, the finding's verdict on its first row (a part that is not
    evidence says what it would have read: part_text; basis_notes says why)."""
    out = ["| finding | figure | published | measured | part | verdict |",
           "|---|---|---:|---:|---|---|"]
    for fd in findings:
        for i, p in enumerate(fd["parts"]):
            out.append("| %s | %s | %s (%s) | %s | %s | %s |" % (
                "**%s** %s" % (fd["id"], fd["title"]) if i == 0 else "", p["figure"],
                num(p["published"], 2), p["published_text"], num(p["measured"], 2), part_text(p),
                "**%s**" % fd["verdict"] if i == 0 else ""))
    return out


def basis_notes(findings, prefix=""):
    """A line per part of `findings` that rests on published figures the run set (basis_text):
    what it is, if it is no evidence, and why."""
    return ["- %s%s, %s: %s." % (prefix, fd["id"], p["figure"], basis_text(p))
            for fd in findings for p in fd["parts"] if p.get("basis")]


def merge(runs):
    """[(label, findings of one run)] -> one list: each finding's published figures once and
    `variants`: {label: {measured, verdict, computed, detail, parts: [{measured, verdict,
    computed, basis}]}} (computed and basis: see part(); None in a run from before them)."""
    out = []
    by_id = {}
    for label, findings in runs:
        for fd in findings:
            m = by_id.get(fd["id"])
            if m is None:
                m = by_id[fd["id"]] = {k: fd[k] for k in ("id", "key", "title", "published")}
                m["parts"] = [{k: p[k] for k in ("figure", "rule", "noise", "published",
                                                 "published_text")} for p in fd["parts"]]
                m["variants"] = {}
                out.append(m)
            m["variants"][label] = {
                "measured": fd["measured"], "verdict": fd["verdict"],
                "computed": fd.get("computed"), "detail": fd["detail"],
                "parts": [{k: p.get(k) for k in ("measured", "verdict", "computed", "basis")}
                          for p in fd["parts"]]}
    # F4p (only in runs that measured it) right after F4, whichever run had it first
    return sorted(out, key=lambda m: m["id"])


def merged_table(merged, labels):
    out = ["| finding | figure | published |" + "".join(" %s | verdict |" % l for l in labels),
           "|---|---|---:|" + "---:|---|" * len(labels)]
    for fd in merged:
        for i, p in enumerate(fd["parts"]):
            cells = []
            for l in labels:
                v = fd["variants"].get(l)
                if v is None:
                    cells += ["-", "-"]
                    continue
                pv = v["parts"][i]
                cells += [num(pv["measured"], 2), "%s%s" % (
                    part_text(pv), " (**%s**)" % v["verdict"] if i == 0 else "")]
            out.append("| %s | %s | %s |%s" % (
                "**%s** %s" % (fd["id"], fd["title"]) if i == 0 else "", p["figure"],
                num(p["published"], 2), "".join(" %s |" % c for c in cells)))
    return out


# --------------------------------------------------------------------------- against the witness

def against_part(key, echod, java, not_judged=False):
    """(echod / grpc-java, verdict) of one part's two measured ratios (module docstring)."""
    if not_judged:
        return ratio(echod, java), "not judged"
    r = ratio(echod, java)
    if r is None or r <= 0:
        return r, "not measured"
    tol = AGAINST_TOL.get(key, 0.05)
    return r, "matches" if abs(math.log(r)) <= math.log(1 + tol) else "differs"


def against(echod, java):
    """echod's findings judged against grpc-java's of the same run (the witness's, by id; a
    finding the witness lacks, such as F4p, is left out): [{id, title, verdict, parts: [{key,
    figure, published, published_text, echod, echod_verdict, java, java_verdict, ratio, tol,
    verdict}]}], a finding's verdict the weakest of its parts' (AGAINST). A witness finding
    whose arm was flagged (`not_judged`) has its would-be figures beside echod's, not judged."""
    by_id = {fd["id"]: fd for fd in java}
    out = []
    for fd in echod:
        w = by_id.get(fd["id"])
        if w is None:
            continue
        nj = w.get("not_judged")
        parts = []
        for i, (p, q) in enumerate(zip(fd["parts"], w["parts"])):
            key = p.get("key") or part_keys(fd["id"])[i]  # a study.json from before parts had it
            jm = q["measured"]
            flagged = bool(nj) and p["figure"] in nj.get("parts", ())
            if flagged:
                jm = nj.get("measured", {}).get(key, jm)
            r, v = against_part(key, p["measured"], jm, flagged)
            parts.append({"key": key, "figure": p["figure"], "published": p["published"],
                          "published_text": p["published_text"], "echod": p["measured"],
                          "echod_verdict": part_text(p), "java": jm,
                          "java_verdict": "not judged" if flagged else part_text(q), "ratio": r,
                          "tol": AGAINST_TOL.get(key, 0.05), "verdict": v})
        out.append({"id": fd["id"], "title": fd["title"], "parts": parts,
                    "verdict": min((p["verdict"] for p in parts), key=AGAINST.index)})
    return out


def against_text(verdict, tol):
    """A verdict against grpc-java as the tables write it, with its tolerance when judged."""
    if verdict not in ("matches", "differs"):
        return verdict
    return "%s (tolerance %s)" % (verdict, "2x" if tol >= 1 else "±%g" % tol)


def against_table(rows):
    """Markdown of against(): per part the published ratio, grpc-java's here and whether it
    shows the published effect, echod's here and its verdict against the published figure,
    echod over grpc-java and the verdict against grpc-java (the finding's on its first row)."""
    out = ["| finding | figure | published | grpc-java here | shows it? | echod here | "
           "against published | echod / grpc-java | against grpc-java |",
           "|---|---|---:|---:|---|---:|---|---:|---|"]
    for fd in rows:
        for i, p in enumerate(fd["parts"]):
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s%s |" % (
                "**%s** %s" % (fd["id"], fd["title"]) if i == 0 else "", p["figure"],
                num(p["published"], 2), num(p["java"], 2), p["java_verdict"], num(p["echod"], 2),
                p["echod_verdict"], num(p["ratio"], 2), against_text(p["verdict"], p["tol"]),
                " (**%s**)" % fd["verdict"] if i == 0 else ""))
    return out
