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
UNCHANGED_TOL of 1, in direction within UNCHANGED_NEAR, else not. A finding's verdict is the
weakest verdict of its parts; its `published` and `measured` are those of its first part.

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
"""

import math

from .fmt import num, ratio

RATIO = "ratio"
UNCHANGED = "unchanged"
UNCHANGED_TOL = 0.03
UNCHANGED_NEAR = 0.10
HALF, TWICE = 0.5, 2.0
VERDICTS = ("not measured", "not", "in direction", "reproduced")  # weakest first

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


# --------------------------------------------------------------------------- verdicts

def verdict(rule, published, measured, noise=0.0):
    """The verdict of one part (module docstring)."""
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


def weakest(verdicts):
    return min(verdicts, key=VERDICTS.index) if verdicts else "not measured"


def part(figure, published, published_text, measured, noise, rule=RATIO, measured_text=None):
    return {"figure": figure, "rule": rule, "noise": noise, "published": published,
            "published_text": published_text, "measured": measured,
            "measured_text": measured_text, "verdict": verdict(rule, published, measured, noise)}


def finding(fid, key, title, parts, detail, variant):
    return {"id": fid, "key": key, "title": title, "published": parts[0]["published"],
            "measured": parts[0]["measured"], "verdict": weakest([p["verdict"] for p in parts]),
            "parts": parts, "detail": detail, "variant": variant}


def rule_text():
    return ("effect = ln(measured ratio); reproduced: the published sign and %g-%gx the published "
            "effect; in direction: the published sign and at least the part's noise floor; not: "
            "below it or the other sign; an 'unchanged' part: within %d%% of 1 reproduced, within "
            "%d%% in direction. A finding takes its weakest part's verdict." % (
                HALF, TWICE, UNCHANGED_TOL * 100, UNCHANGED_NEAR * 100))


# --------------------------------------------------------------------------- the five findings

def drain_parts(p99, goodput, drain, direct, at):
    """F4's two parts: the drain's p99 and goodput at the top step over direct's, from
    {name: {frac_key: figure}} (an arm's ramp, or one of its capped ramps); `at` says at which
    caps."""
    top = frac_key(1.2)
    return [part("p99 at 1.2x of capacity, direct-drain / direct" + at,
                 RAMP_P99["direct-drain"][-1] / RAMP_P99["direct"][-1], "717 against 1,994 ms at "
                 "2,400 calls/s (-64%)", ratio(p99.get(drain, {}).get(top),
                                                p99.get(direct, {}).get(top)), 0.10),
            part("goodput at 1.2x of capacity, direct-drain / direct" + at,
                 DRAIN_PEAK["direct-drain"] / DRAIN_PEAK["direct"],
                 "peak 2,137 against 2,116 calls/s: unchanged",
                 ratio(goodput.get(drain, {}).get(top), goodput.get(direct, {}).get(top)), 0.0,
                 rule=UNCHANGED)]


def drain_at_published_caps(m, variant):
    """F4p: F4 with each arm at the cap the study's own run had (STUDY_CAP_S: the drain at
    0.716 s, direct at 1.994 s), and in its detail what the cap difference alone gives (direct
    at the drain's cap over direct at its own): the published -64% is that ratio times the
    drain's own at the drain's cap, so the detail says how much of it the caps account for."""
    def ramp(name, arm, cap_of):
        """{frac_key: figure} of arm's ramp capped at the study's cap of arm `cap_of`."""
        return (m.get(name, {}).get(arm) or {}).get(cap_key(STUDY_CAP_S[cap_of])) or {}
    lo, hi = cap_text(STUDY_CAP_S["direct-drain"]), cap_text(STUDY_CAP_S["direct"])
    p99 = {"drain": ramp("capped_p99", "direct-drain", "direct-drain"),
           "direct": ramp("capped_p99", "direct", "direct"),
           "direct at the drain's cap": ramp("capped_p99", "direct", "direct-drain")}
    goodput = {"drain": ramp("capped_goodput", "direct-drain", "direct-drain"),
               "direct": ramp("capped_goodput", "direct", "direct")}
    parts = drain_parts(p99, goodput, "drain", "direct", " (direct-drain capped at %s, direct "
                        "at %s: the study's runs)" % (lo, hi))
    top = frac_key(1.2)
    cap_only = ratio(p99["direct at the drain's cap"].get(top), p99["direct"].get(top))
    published, measured = parts[0]["published"], parts[0]["measured"]
    return finding(
        "F4p", "drain-cuts-deep-tail-at-published-caps", "the drain's cut at the study's own "
        "caps, and what the caps alone give", parts,
        {"caps_s": {a: STUDY_CAP_S[a] for a in ("direct", "direct-drain")},
         "cap_only": cap_only, "cap_only_verdict": verdict(RATIO, published, cap_only, 0.10),
         "cap_only_of_published": math.log(cap_only) / math.log(published) if cap_only else None,
         "cap_only_of_measured": (math.log(cap_only) / math.log(measured)
                                  if cap_only and measured and measured != 1 else None),
         "drain_at_drain_cap": ratio(p99["drain"].get(top),
                                     p99["direct at the drain's cap"].get(top)),
         "note": "cap_only: p99 at 1.2x, direct capped at %s over direct at %s (the caps' "
                 "difference alone; its verdict against the published %.2f by the same rule); "
                 "drain_at_drain_cap: direct-drain over direct, both at %s; the measured ratio "
                 "is their product" % (lo, hi, published, lo)},
        variant)


def compute(m, variant):
    """The five findings from a run's measured figures `m` (bench/study's measured_figures),
    and F4p after F4 when the run measured the study's caps (regime's published_caps):

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
    matched = (" (every arm capped at %s)" % cap_text(regime["cap_s"])
               if regime.get("name") == "capped" else "")
    cpu = m.get("cpu_per_call", {})
    own = m.get("own_cpu_per_call", {})
    f.append(finding(
        "F1", "cpu-at-low-load", "directExecutor() costs less CPU per call at low load",
        [part("server CPU per call, direct / virtual, fixed rate at 10% of capacity (k6)",
              GRID["direct"]["cpu_m"] / GRID["virtual"]["cpu_m"],
              "145m against ~220m (JVM; native image 260m against ~390m)",
              ratio(cpu.get("direct"), cpu.get("virtual")), 0.02)],
        {"own_cpu_ratio": ratio(own.get("direct"), own.get("virtual")),
         "note": "own: server CPU per call less the synthetic work"}, variant))
    p99 = m.get("grid_p99", {})
    p50h = m.get("grid_p50_h2load", {})
    f.append(finding(
        "F2", "tail-at-low-load", "directExecutor()'s p99 is higher at low load (the convoy)",
        [part("p99, direct / virtual, fixed rate at 10% of capacity (k6)",
              mid(GRID["direct"]["p99"]) / mid(GRID["virtual"]["p99"]),
              "115-137 ms against 65-72 ms (midpoints; the study calls it 2x)",
              ratio(p99.get("direct"), p99.get("virtual")), 0.10)],
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
        [part("plateau goodput, direct / virtual" + matched, PLATEAU_KNEE["direct"][0] /
              PLATEAU_KNEE["virtual"][0], "~2,140 against ~2,060 calls/s",
              ratio(plateau.get("direct"), plateau.get("virtual")), 0.02),
         part("p99, direct / virtual, geometric mean over the steps of %s x capacity%s" % (
             "/".join("%g" % x for x in high) or "0.8-1.2", matched), pub_tail,
              "the same steps of 1,600-2,400 calls/s: 222/239, 289/325, 382/662, 650/973, "
              "1,994/2,070 ms", meas_tail, 0.10)],
        {"knee": m.get("knee", {}), "published_knee": {a: PLATEAU_KNEE[a][1] for a in PLATEAU_KNEE}},
        variant))
    rg = m.get("ramp_goodput", {})
    f.append(finding(
        "F4", "drain-cuts-deep-tail", "draining at the end of a read batch cuts the deep-saturation "
        "tail, goodput unchanged",
        drain_parts(rp, rg, "direct-drain", "direct", matched),
        {"published_cuts": {"0.6": 66.6 / 86.6, "0.9": 230.7 / 289.3, "1.1": 498.1 / 649.7},
         "measured_cuts": {frac_key(x): ratio(rp.get("direct-drain", {}).get(frac_key(x)),
                                               rp.get("direct", {}).get(frac_key(x)))
                           for x in (0.6, 0.9, 1.1)}},
        variant))
    if regime.get("published_caps"):
        f.append(drain_at_published_caps(m, variant))
    sp = m.get("stream_plateau", {})
    sp99 = m.get("stream_top_p99", {})
    shed = m.get("stream_top_shed", {})
    shed_ratio = None
    if shed.get("virtual") is not None and shed.get("direct") is not None:
        shed_ratio = (shed["virtual"] + 1.0) / (shed["direct"] + 1.0)
    f.append(finding(
        "F5", "streams-far-above-unary", "a pod streams far more messages than it serves unary "
        "calls; on streams the executors separate only near saturation",
        [part("stream plateau / unary plateau, direct (msg/s over calls/s)",
              mid(STREAM_PLATEAU) / mid(UNARY_PLATEAU), "15,000-16,000 msg/s against 2,060-2,140 "
              "calls/s (~7.5x)", ratio(sp.get("direct"), plateau.get("direct")), 0.05),
         part("stream p99 at the top step, virtual / direct",
              STREAM_P99["virtual"][-1] / STREAM_P99["direct"][-1], "1,350 against 741 ms at "
              "16,000 msg/s", ratio(sp99.get("virtual"), sp99.get("direct")), 0.10),
         part("messages shed at the top step, (virtual + 1) / (direct + 1) msg/s",
              (STREAM_SHED["virtual"] + 1.0) / (STREAM_SHED["direct"] + 1.0),
              "625 against 38 msg/s", shed_ratio, 0.25)],
        {"stream_plateau": sp, "stream_top_shed": shed}, variant))
    return f


# --------------------------------------------------------------------------- tables

def table(findings):
    """Markdown: one row per part, the finding's verdict on its first row."""
    out = ["| finding | figure | published | measured | part | verdict |",
           "|---|---|---:|---:|---|---|"]
    for fd in findings:
        for i, p in enumerate(fd["parts"]):
            out.append("| %s | %s | %s (%s) | %s | %s | %s |" % (
                "**%s** %s" % (fd["id"], fd["title"]) if i == 0 else "", p["figure"],
                num(p["published"], 2), p["published_text"], num(p["measured"], 2), p["verdict"],
                "**%s**" % fd["verdict"] if i == 0 else ""))
    return out


def merge(runs):
    """[(label, findings of one run)] -> one list: each finding's published figures once and
    `variants`: {label: {measured, verdict, parts: [{measured, verdict}]}}."""
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
                "measured": fd["measured"], "verdict": fd["verdict"], "detail": fd["detail"],
                "parts": [{"measured": p["measured"], "verdict": p["verdict"]} for p in fd["parts"]]}
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
                    pv["verdict"], " (**%s**)" % v["verdict"] if i == 0 else "")]
            out.append("| %s | %s | %s |%s" % (
                "**%s** %s" % (fd["id"], fd["title"]) if i == 0 else "", p["figure"],
                num(p["published"], 2), "".join(" %s |" % c for c in cells)))
    return out
