"""A capacity report's model and arithmetic: per arm its offered-rate steps (offered rate,
goodput, p50/p99, server time, failures and drops), the knee and the plateau; and how the k6
runners of one arm merge (execution segments). Reading inputs into it is echodlib.k6result's
(files) and echodlib.k6prom's (Prometheus); writing it out, echodlib.report_out's.

The knee is the first step whose goodput is below a ratio of its offered rate (0.95), whose p99
is above a threshold, or that answered nothing; the plateau the median goodput of the steps
from the knee on (none when the knee is not reached). A test split over several k6 processes
(runners, each on an execution segment) merges exactly when the segments tile a share of the
test: counters add up, latency samples pool, and the offered rate is that share of the
schedule's.
"""

from fractions import Fraction

from .stats import percentile

LATENCY_BY_SCRIPT = {
    "unary-fixed-rate": "grpc_req_duration",
    "unary-ramp": "grpc_req_duration",
    "bidi-ramp": "bidi_msg_latency_ms",
    "rest-control": "http_req_duration",
}
LATENCY_METRICS = ("grpc_req_duration", "http_req_duration", "bidi_msg_latency_ms")
COUNTERS = ("echo_sent", "echo_ok", "echo_failed", "echo_dropped", "echo_answered")
# scripts whose every iteration of an arrival-rate schedule is one call, counted by deploy/k6 in
# the step it was due in: a step's k6 drops are its scheduled iterations less its calls sent
ITERATION_SCRIPTS = ("unary-ramp", "unary-fixed-rate", "rest-control")
SERVER_TREND = "server_total_us"


class InputError(Exception):
    """An input that cannot be reported (deploy/report exits 2 with it)."""


class Step:
    """One offered-rate step of one arm."""

    def __init__(self, stage, offered):
        self.stage = stage
        self.offered = float(offered)  # what this run offered: its share of the schedule's
        self.schedule_offered = float(offered)
        self.duration_s = None
        self.sent = 0.0
        self.ok = 0.0
        # answers that arrived in the step (bidi-ramp.js's echo_answered); None: the script
        # counts answers only by the step they were due in (ok), which is goodput too as long
        # as no answer comes after its step ends
        self.answered = None
        self.failed = 0.0
        self.dropped = 0.0
        self.p50_ms = None
        self.p99_ms = None
        self.latency_count = 0
        self.server_p50_us = None
        self.server_p99_us = None

    @property
    def goodput(self):
        done = self.ok if self.answered is None else self.answered
        return done / self.duration_s if self.duration_s else None

    @property
    def sent_rate(self):
        return self.sent / self.duration_s if self.duration_s else None

    def as_dict(self):
        d = dict(self.__dict__)
        d["goodput"] = self.goodput
        d["sent_rate"] = self.sent_rate
        return d


class ArmResult:
    """One arm's steps and what analyse() finds in them."""

    def __init__(self, arm, source, script=None):
        self.arm = arm
        self.source = source  # description of the inputs
        self.script = script
        self.latency_metric = None
        self.steps = []
        self.cpu_us_per_call = None
        self.cpu_source = None
        self.plateau_override = None  # bench: closed-loop saturation throughput
        self.knee = None
        self.knee_reason = None
        self.plateau = None
        self.peak = None
        self.share = 1  # of the test's offered schedule these runs ran (execution segments)
        self.segments = "0:1"
        self.segment = None    # a handleSummary's own segment (k6result.read_summary_doc)
        self.sequence = None
        self.k6_dropped = None  # k6's own dropped_iterations, summed over the runners
        self.notes = []

    def analyse(self, p99_threshold_ms, goodput_ratio):
        self.steps.sort(key=lambda s: s.offered)
        self.knee = None
        self.knee_reason = None
        for s in self.steps:
            reasons = []
            g = s.goodput
            if g is not None and g < goodput_ratio * s.offered:
                reasons.append("goodput %.0f/s < %.0f%% of offered" % (g, goodput_ratio * 100))
            if s.p99_ms is not None and s.p99_ms > p99_threshold_ms:
                reasons.append("p99 %.3g ms > %.3g ms" % (s.p99_ms, p99_threshold_ms))
            if s.latency_count == 0 and s.ok == 0 and s.sent > 0:
                reasons.append("no successful response")
            if reasons:
                self.knee = s
                self.knee_reason = "; ".join(reasons)
                break
        goodputs = [s.goodput for s in self.steps if s.goodput is not None]
        self.peak = max(goodputs) if goodputs else None
        if self.plateau_override is not None:
            self.plateau = self.plateau_override
        elif self.knee is not None:
            after = sorted(s.goodput for s in self.steps
                           if s.offered >= self.knee.offered and s.goodput is not None)
            self.plateau = percentile(after, 0.5) if after else None
        else:
            self.plateau = None  # not reached within the offered range
        return self

    def as_dict(self):
        return {
            "arm": self.arm, "source": self.source, "script": self.script,
            "latency_metric": self.latency_metric,
            "knee_offered": self.knee.offered if self.knee else None,
            "knee_stage": self.knee.stage if self.knee else None,
            "knee_reason": self.knee_reason, "plateau_goodput": self.plateau,
            "peak_goodput": self.peak, "cpu_us_per_call": self.cpu_us_per_call,
            "cpu_source": self.cpu_source, "share": float(self.share),
            "segments": self.segments, "k6_dropped_iterations": self.k6_dropped,
            "notes": self.notes,
            "steps": [s.as_dict() for s in self.steps],
        }


def analyse(results, p99_threshold_ms, goodput_ratio):
    """Every arm's knee and plateau ({arm: ArmResult}, analysed in place)."""
    for r in results.values():
        r.analyse(p99_threshold_ms, goodput_ratio)
    return results


# ---------------------------------------------------------------------------------------------
# runners and their execution segments

class Runner:
    """What one k6 process recorded for one arm: one CSV or --out json file, or one runner's
    series in Prometheus. Its execution segment (the `segment` tag deploy/k6 puts on every
    sample; 0:1 when the test was not split) says which share of the offered schedule it ran."""

    def __init__(self, arm, source):
        self.arm = arm
        self.source = source
        self.script = None
        self.segment = None          # the tag's text, e.g. '1/2:1'
        self.sequence = None         # --execution-segment-sequence, when k6 had one
        self.lat = {}                # metric -> stage -> [ms]
        self.server = {}             # stage -> [µs]
        self.counters = {}           # stage -> {name: sum}
        self.offered = {}            # stage -> the schedule's offered rate (the whole test's)
        self.step_s = {}             # stage -> the schedule's step length (step_s tag)
        self.first = {}
        self.last = {}
        self.tick = 1.0
        self.dropped_at = []         # k6's dropped_iterations: (time, count), no stage tag
        self.answered = False

    def take_tags(self, tags):
        if tags.get("script") and not self.script:
            self.script = tags["script"]
        seg = tags.get("segment")
        if seg:
            if self.segment is None:
                self.segment, self.sequence = seg, tags.get("segments") or None
            elif seg != self.segment:
                raise InputError("%s: samples of two execution segments (%s and %s) in one file: "
                                 "give each runner's output as its own file" % (
                                     self.source, self.segment, seg))


def parse_fraction(text):
    """k6's segment bounds: '1/3', '0.5', '50%' -> Fraction."""
    t = text.strip()
    try:
        if t.endswith("%"):
            return Fraction(t[:-1]) / 100
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        raise InputError("bad execution segment bound %r" % text)


def parse_segment(text):
    """'1/3:2/3' (k6's --execution-segment; 'a' alone is '0:a') -> (Fraction, Fraction)."""
    a, sep, b = (text or "0:1").partition(":")
    lo, hi = (parse_fraction(a), parse_fraction(b)) if sep else (Fraction(0), parse_fraction(a))
    if not 0 <= lo < hi <= 1:
        raise InputError("bad execution segment %r (want 0 <= from < to <= 1)" % text)
    return lo, hi


def fmt_fraction(f):
    return str(f.numerator) if f.denominator == 1 else "%d/%d" % (f.numerator, f.denominator)


def segments_share(arm, runners):
    """The share of the whole test that these runners of one arm ran together: their execution
    segments must neither overlap nor leave a gap (a merged run is then exact: each iteration
    of the schedule ran on exactly one of them). A part of the test (one runner's file alone,
    or runners 0:1/3 and 1/3:2/3 of three) is judged against its own share of the offered
    rate. Runners of one test must share one --execution-segment-sequence, or k6 splits the
    iterations differently in each and the segments do not partition them."""
    segs = sorted(((parse_segment(r.segment), r) for r in runners), key=lambda x: x[0])
    seqs = {r.sequence for r in runners if r.sequence}
    if len(seqs) > 1:
        raise InputError("arm %s: runners split by different --execution-segment-sequence (%s): "
                         "their segments do not partition one test's iterations" % (
                             arm, "; ".join(sorted(seqs))))
    for (a, ra), (b, rb) in zip(segs, segs[1:]):
        if b[0] < a[1]:
            raise InputError(
                "arm %s: execution segments overlap: %s (%s) and %s (%s)%s" % (
                    arm, ra.segment or "0:1", ra.source, rb.segment or "0:1", rb.source,
                    "; files without a segment tag are each the whole test (0:1): give them "
                    "different arm names (ARM=FILE) if they are separate runs"
                    if not (ra.segment and rb.segment) else ""))
        if b[0] > a[1]:
            raise InputError("arm %s: execution segments leave a gap: %s (%s) ends at %s, the "
                             "next one, %s (%s), starts at %s: the runner of %s:%s is missing" % (
                                 arm, ra.segment, ra.source, fmt_fraction(a[1]), rb.segment,
                                 rb.source, fmt_fraction(b[0]), fmt_fraction(a[1]),
                                 fmt_fraction(b[0])))
    lo, hi = segs[0][0][0], segs[-1][0][1]
    return hi - lo, "%s:%s" % (fmt_fraction(lo), fmt_fraction(hi))


def merge_runners(arm, runners):
    """One ArmResult from the runners of one arm (files or Prometheus series): per step the
    counters summed and the latency samples pooled (percentiles over their union, never
    averaged); the segments must tile a share of the test (segments_share), and the offered
    rate is that share of the schedule's. A step's length is the schedule's (the step_s tag),
    not the samples' span."""
    scripts = {r.script for r in runners if r.script}
    if len(scripts) > 1:
        raise InputError("arm %s: runs of two scripts (%s); report one script per arm, or name "
                         "the arms apart (ARM=FILE)" % (arm, ", ".join(sorted(scripts))))
    share, span = segments_share(arm, runners)
    res = ArmResult(arm, " + ".join(r.source for r in runners), scripts.pop() if scripts else None)
    res.share, res.segments = share, span
    lat_names = set().union(*(r.lat for r in runners))
    metric = LATENCY_BY_SCRIPT.get(res.script)
    if metric is None or metric not in lat_names:
        metric = next((m for m in LATENCY_METRICS if m in lat_names), None)
    res.latency_metric = metric
    answered = any(r.answered for r in runners)
    offered, step_s, first, last = {}, {}, {}, {}
    tick = min(r.tick for r in runners)
    for r in runners:
        offered.update(r.offered)
        step_s.update(r.step_s)
        for st, t in r.first.items():
            first[st] = min(first.get(st, t), t)
        for st, t in r.last.items():
            last[st] = max(last.get(st, t), t)
    for stage in sorted(offered):
        step = Step(stage, offered[stage] * float(share))
        step.schedule_offered = offered[stage]
        for k in ("sent", "ok", "failed", "dropped"):
            setattr(step, k, sum(r.counters.get(stage, {}).get("echo_" + k, 0.0) for r in runners))
        if answered:
            step.answered = sum(r.counters.get(stage, {}).get("echo_answered", 0.0)
                                for r in runners)
        vals = sorted(v for r in runners for v in r.lat.get(metric, {}).get(stage, []))
        step.latency_count = len(vals)
        step.p50_ms = percentile(vals, 0.5)
        step.p99_ms = percentile(vals, 0.99)
        sv = sorted(v for r in runners for v in r.server.get(stage, []))
        step.server_p50_us = percentile(sv, 0.5)
        step.server_p99_us = percentile(sv, 0.99)
        step.duration_s = step_s.get(stage)
        res.steps.append(step)
    ordered = step_spans(res.steps, first, last, tick)
    res.k6_dropped = sum(v for r in runners for _, v in r.dropped_at)
    if schedule_drops(res, step_s):
        return res
    # runs without the schedule (no step_s tag) or of another script: k6's dropped_iterations
    # into the step whose time they fall in, to the samples' clock
    starts = [(first[s.stage], s) for s in ordered]
    for r in runners:
        for ts, v in r.dropped_at:
            owner = None
            for t0, s in starts:
                if ts + tick >= t0:
                    owner = s
            if owner is not None:
                owner.dropped += v
    return res


def step_spans(steps, first, last, tick):
    """Step lengths of runs without the step_s tag (deploy/k6 before it), from their samples'
    times (first, last: stage -> seconds): a step lasts from its first sample to the next
    step's first; the last one as long as the others when they are all alike (a ramp), else its
    own span plus one timestamp tick (answers after its end stretch it). A step that has its
    length keeps it. Returns the steps that have samples, in time order."""
    ordered = sorted((s for s in steps if s.stage in first), key=lambda s: first[s.stage])
    spans = {}
    for i, s in enumerate(ordered):
        if i + 1 < len(ordered):
            spans[s.stage] = first[ordered[i + 1].stage] - first[s.stage]
    alike = set(round(v) for v in spans.values())
    for s in ordered:
        if s.duration_s is not None:
            continue
        if s.stage in spans:
            s.duration_s = spans[s.stage]
        elif len(alike) == 1 and tick >= 1.0:
            s.duration_s = float(alike.pop())
        else:
            s.duration_s = (last[s.stage] - first[s.stage]) + tick
        if s.duration_s <= 0:
            s.duration_s = tick
    return ordered


def schedule_drops(res, step_s):
    """A step's k6 drops from the schedule: the iterations it offered this share of the test
    less the calls sent in it, for the scripts that count a call in the step it was due in
    (ITERATION_SCRIPTS) when every step's length is the schedule's (step_s: stage -> s). k6's
    dropped_iterations carry no stage, and placed by time they land where the clock of their
    file or of a remote-write flush puts them, to a second either way: a CSV and Prometheus
    would place one run's drops apart. k6's own total is kept (res.k6_dropped) and the arm
    says so when the two differ. True when it placed them."""
    if res.script not in ITERATION_SCRIPTS or not res.steps or \
            any(s.stage not in step_s for s in res.steps):
        return False
    for s in res.steps:
        s.dropped = max(0.0, float(round(s.offered * s.duration_s)) - s.sent)
    placed = sum(s.dropped for s in res.steps)
    if res.k6_dropped:
        res.notes.append("k6 dropped %d iterations (no free VU); the calls after a drop count "
                         "in the step they were due in to within the drops before them "
                         "(deploy/k6/common.js, dueStage)" % res.k6_dropped)
    if res.k6_dropped is not None and placed != res.k6_dropped:
        res.notes.append("the steps' scheduled iterations less their calls come to %d dropped, "
                         "k6 counted %d" % (placed, res.k6_dropped))
    return True


def add_steps(old, new):
    """Two bench/study step documents of one arm: the steps of both."""
    if old is None:
        return new
    old.steps += new.steps
    old.source = "%s + %s" % (old.source, new.source)
    return old


def add_summaries(arm, results):
    """The handleSummary JSONs of one arm's runners: their segments must tile a share of the
    test as the CSVs' do (segments_share), the counters add up and the offered rate is the
    share's. A summary holds k6's percentiles, not the samples, and percentiles of parts do not
    combine: the pooled p99 lies between the runners' smallest and largest, so the largest is
    kept as an upper bound, and the arm says so (give the CSVs, or Prometheus with native
    histograms, for the exact figure)."""
    scripts = {r.script for r in results}
    if len(scripts) > 1:
        raise InputError("arm %s: summaries of two scripts (%s); report one script per arm" % (
            arm, ", ".join(sorted(s or "-" for s in scripts))))
    share, span = segments_share(arm, results)
    old = results[0]
    for new in results[1:]:
        by = {s.stage: s for s in old.steps}
        for s in new.steps:
            o = by.get(s.stage)
            if o is None:
                old.steps.append(s)
                continue
            for k in ("sent", "ok", "failed", "dropped"):
                setattr(o, k, getattr(o, k) + getattr(s, k))
            if o.answered is not None or s.answered is not None:
                o.answered = (o.answered or 0.0) + (s.answered or 0.0)
            o.latency_count += s.latency_count
            for k in ("p50_ms", "p99_ms", "server_p50_us", "server_p99_us"):
                vals = [v for v in (getattr(o, k), getattr(s, k)) if v is not None]
                setattr(o, k, max(vals) if vals else None)
        old.source = "%s + %s" % (old.source, new.source)
    if len(results) > 1:
        old.notes.append("percentiles: the largest runner's (%d summaries; an upper bound of "
                         "the pooled figure)" % len(results))
    old.share, old.segments = share, span
    for s in old.steps:
        s.offered = s.schedule_offered * float(share)
    old.k6_dropped = sum(r.k6_dropped or 0.0 for r in results)
    schedule_drops(old, {s.stage: s.duration_s for s in old.steps})
    return old
