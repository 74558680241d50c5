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

Cost variants: a run measures one synthetic-cost variant (bench/study's `cost_variant`: "flat",
work.defaults.cpu_us per call or message; a structural model can be another). Each finding of a
run says which (`variant`); merge() lines several runs' findings up by id, one column per
variant, so two cost models show side by side.
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

def compute(m, variant):
    """The five findings from a run's measured figures `m` (bench/study's measured_figures):

      cpu_per_call[arm], own_cpu_per_call[arm]    fixed-rate grid on k6, µs
      grid_p99[arm], grid_p50_h2load[arm]         fixed-rate grid, ms
      plateau[arm]                                unary ramp, calls/s
      ramp_p99[arm][frac_key(x)]                  unary ramp p99 per step (x capacity), ms
      ramp_goodput[arm][frac_key(x)]              unary ramp goodput per step, calls/s
      stream_plateau[arm], stream_top_p99[arm], stream_top_shed[arm]   over the stream counts
    """
    f = []
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
        [part("plateau goodput, direct / virtual", PLATEAU_KNEE["direct"][0] /
              PLATEAU_KNEE["virtual"][0], "~2,140 against ~2,060 calls/s",
              ratio(plateau.get("direct"), plateau.get("virtual")), 0.02),
         part("p99, direct / virtual, geometric mean over the steps of %s x capacity" % (
             "/".join("%g" % x for x in high) or "0.8-1.2"), pub_tail,
              "the same steps of 1,600-2,400 calls/s: 222/239, 289/325, 382/662, 650/973, "
              "1,994/2,070 ms", meas_tail, 0.10)],
        {"knee": m.get("knee", {}), "published_knee": {a: PLATEAU_KNEE[a][1] for a in PLATEAU_KNEE}},
        variant))
    rg = m.get("ramp_goodput", {})
    top = frac_key(1.2)
    f.append(finding(
        "F4", "drain-cuts-deep-tail", "draining at the end of a read batch cuts the deep-saturation "
        "tail, goodput unchanged",
        [part("p99 at 1.2x of capacity, direct-drain / direct",
              RAMP_P99["direct-drain"][-1] / RAMP_P99["direct"][-1], "717 against 1,994 ms at "
              "2,400 calls/s (-64%)", ratio(rp.get("direct-drain", {}).get(top),
                                             rp.get("direct", {}).get(top)), 0.10),
         part("goodput at 1.2x of capacity, direct-drain / direct",
              DRAIN_PEAK["direct-drain"] / DRAIN_PEAK["direct"],
              "peak 2,137 against 2,116 calls/s: unchanged",
              ratio(rg.get("direct-drain", {}).get(top), rg.get("direct", {}).get(top)), 0.0,
              rule=UNCHANGED)],
        {"published_cuts": {"0.6": 66.6 / 86.6, "0.9": 230.7 / 289.3, "1.1": 498.1 / 649.7},
         "measured_cuts": {frac_key(x): ratio(rp.get("direct-drain", {}).get(frac_key(x)),
                                               rp.get("direct", {}).get(frac_key(x)))
                           for x in (0.6, 0.9, 1.1)}},
        variant))
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
    return out


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
