"""deploy/report's reading and arithmetic: k6 outputs (CSV, handleSummary JSON), bench/arms JSON
and /metrics scrapes in, per-arm steps (offered rate, goodput, p50/p99, server time), the knee
and the plateau out. Plotting and the Markdown are in deploy/report.

Inputs, recognised by content:

* k6 CSV (`k6 run --out csv=FILE`, also .csv.gz; any timeFormat): the rows of the latency
  metric (grpc_req_duration with status 0, http_req_duration with status 200, or
  bidi_msg_latency_ms; chosen from the `script` tag) and the echo_* counters, cut by the
  `stage` and `offered` tags that deploy/k6 puts on every sample. A step lasts what the
  schedule says (the `step_s` tag); for files without it, from its first sample to the next
  step's first (the last step as long as the others when they are alike), unless
  --stage-duration says otherwise or a summary JSON of the same arm and script gives the
  schedule. One file is one k6 process (runner); several of one arm merge (CsvReader).
* k6 JSON output (`k6 run --out json=FILE`, also .gz): the same samples as the CSV, read the
  same way (k6 writes both from one stream; give one of them per run, not both).
* handleSummary JSON of deploy/k6 ({"echod_k6": 1, "schedule": [...], "summary": {...}}),
  also found on a "K6_SUMMARY_JSON " line of a log (kubectl logs of the Job). Per step it uses
  the submetrics `echo_ok{stage:sNN}`, `<latency>{stage:sNN}` (med, p(99)) and so on.
* measured steps of bench/study ({"echod_steps": 1, "arm", "steps": [...]}): one document
  per arm and experiment, steps as deploy/report itself reports them.
* bench/arms --json: per arm one fixed-rate step (args.rate offered, summary.fixed_rps
  achieved, p50/p99 from µs), the closed-loop saturation rate as the plateau, and
  summary.cpu_sat as CPU per call.
* Prometheus (read_prometheus; deploy/report --prometheus): the series k6's
  experimental-prometheus-rw output wrote, by the same tags, and the arm's echod scrapes.
* /metrics scrapes (--metrics ARM=FIRST.prom,LAST.prom): CPU per call = the increase of
  process_cpu_seconds_total over the increase of calls served (grpc_server_handled_total
  with grpc_code OK, plus bidi messages received, plus echod_rest_requests_total code 200).
"""

import csv
import gzip
import io
import json
import os
import re
import sys
from datetime import datetime
from fractions import Fraction

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from echodlib.prom import samples as parse_prom  # noqa: E402
from echodlib.stats import percentile  # noqa: E402

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
    pass


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


# ---------------------------------------------------------------------------------------------
# opening files

def open_text(path):
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, "r", encoding="utf-8", newline="")


def sniff(path):
    """'csv', 'k6json' (--out json), 'json', 'log' (with a K6_SUMMARY_JSON line) or 'prom'."""
    with open_text(path) as f:
        head = f.read(4096)
    s = head.lstrip()
    if s.startswith("metric_name,"):
        return "csv"
    if s.startswith("{"):
        if re.match(r'\{\s*"type"\s*:\s*"(Metric|Point)"', s):
            return "k6json"
        return "json"
    if "K6_SUMMARY_JSON " in head or path.endswith(".log") or path.endswith(".txt"):
        return "log"
    if "# TYPE " in head or re.search(r"^[a-z_]+(\{[^}]*\})? [0-9.eE+-]+$", head, re.M):
        return "prom"
    raise InputError("%s: neither a k6 CSV, a JSON summary, a log with K6_SUMMARY_JSON nor "
                     "a /metrics scrape" % path)


# ---------------------------------------------------------------------------------------------
# k6 CSV

def parse_timestamp(text):
    """k6 CSV timestamp in any timeFormat -> (seconds as float, tick in seconds)."""
    t = text.strip()
    if "T" in t:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
        frac = "." in t
        return dt.timestamp(), (1e-9 if frac else 1.0)
    v = int(t)
    if v < 10 ** 11:
        return float(v), 1.0
    if v < 10 ** 14:
        return v / 1e3, 1e-3
    if v < 10 ** 17:
        return v / 1e6, 1e-6
    return v / 1e9, 1e-9


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


class CsvReader:
    """Reads k6 CSVs and --out json files, one k6 process (runner) each, into per-arm results.
    Runners of one arm merge exactly: per step the counters are summed and the latency
    samples pooled (percentiles over their union, never averaged); their execution segments
    must tile a share of the test (segments_share), and the offered rate is that share of the
    schedule's. A step's length is the schedule's (the step_s tag), not the samples' span."""

    def __init__(self):
        self.runners = []

    def add(self, path, arm_override=None):
        """One k6 CSV (--out csv)."""
        run = _FileRuns(path, arm_override)
        with open_text(path) as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header or header[:3] != ["metric_name", "timestamp", "metric_value"]:
                raise InputError("%s: not a k6 CSV (header %r)" % (path, header))
            col = {name: i for i, name in enumerate(header)}
            i_extra = col.get("extra_tags")
            i_status = col.get("status")
            for row in reader:
                if not row or not self._wanted(row[0]):
                    continue
                tags = {}
                if i_extra is not None and row[i_extra]:
                    for kv in row[i_extra].split("&"):
                        k, _, v = kv.partition("=")
                        tags[k] = v
                status = row[i_status] if i_status is not None else ""
                ts, tick = parse_timestamp(row[1])
                run.sample(row[0], ts, tick, float(row[2]), tags, status)
        self.runners += run.done()

    def add_json(self, path, arm_override=None):
        """One k6 JSON output (--out json: a Metric or Point object per line, every tag in
        data.tags, the time in RFC 3339 with nanoseconds)."""
        run = _FileRuns(path, arm_override)
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                except ValueError as e:
                    raise InputError("%s:%d: not a k6 JSON output line (%s)" % (path, n, e))
                if d.get("type") != "Point" or not self._wanted(d.get("metric")):
                    continue
                data = d["data"]
                tags = dict(data.get("tags") or {})
                ts, tick = parse_timestamp(data["time"])
                run.sample(d["metric"], ts, tick, float(data["value"]), tags,
                           tags.get("status", ""))
        self.runners += run.done()

    @staticmethod
    def _wanted(name):
        return name in COUNTERS or name in LATENCY_METRICS or name == SERVER_TREND \
            or name == "dropped_iterations"

    def results(self):
        by_arm = {}
        for r in self.runners:
            by_arm.setdefault(r.arm, []).append(r)
        return {arm: merge_runners(arm, runners) for arm, runners in by_arm.items()}


class _FileRuns:
    """The runners of one file: one per arm it holds (a file is one k6 process)."""

    def __init__(self, path, arm_override):
        self.path = path
        self.source = os.path.basename(path)
        self.arm_override = arm_override
        self.per = {}
        self.untagged_drops = []

    def runner(self, arm):
        if arm not in self.per:
            self.per[arm] = Runner(arm, self.source)
        return self.per[arm]

    def sample(self, name, ts, tick, value, tags, status):
        arm = self.arm_override or tags.get("arm")
        if name == "dropped_iterations":
            # k6 tags these with the test-wide tags only (a --tag on k6's command line
            # replaces the script's, arm among them): placed in a step by time, later
            if arm:
                self.runner(arm).dropped_at.append((ts, value))
            else:
                self.untagged_drops.append((ts, value))
            return
        stage = tags.get("stage")
        if not stage or tags.get("warmup"):
            # k6's own timing of the reflection RPC in connect(): no call of the script; or a
            # ramp's warm-up call (unary-ramp.js WARMUP_RATE), before its first step
            return
        r = self.runner(arm or self.source.split(".")[0])
        r.take_tags(tags)
        if "offered" in tags:
            r.offered[stage] = float(tags["offered"])
        if tags.get("step_s"):
            r.step_s[stage] = float(tags["step_s"])
        r.tick = min(r.tick, tick)
        if name in COUNTERS:
            if name == "echo_answered":
                r.answered = True
            c = r.counters.setdefault(stage, {})
            c[name] = c.get(name, 0.0) + value
            if name in ("echo_sent", "echo_ok", "echo_dropped"):
                r.first[stage] = min(r.first.get(stage, ts), ts)
                r.last[stage] = max(r.last.get(stage, ts), ts)
        elif name == SERVER_TREND:
            r.server.setdefault(stage, []).append(value)
        else:
            if tags.get("probe"):
                return
            if name == "grpc_req_duration" and status != "0":
                return
            if name == "http_req_duration" and status != "200":
                return
            r.lat.setdefault(name, {}).setdefault(stage, []).append(value)

    def done(self):
        runners = [r for r in self.per.values() if r.offered]
        if not runners:
            raise InputError("%s: no samples tagged with a stage (not written by deploy/k6?)"
                             % self.path)
        if self.untagged_drops:
            if len(runners) > 1:
                raise InputError("%s: dropped_iterations without an arm tag in a file of several "
                                 "arms" % self.path)
            runners[0].dropped_at += self.untagged_drops
        return runners


def merge_runners(arm, runners):
    """{one ArmResult} from the runners of one arm (see CsvReader)."""
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
    # runs without the step_s tag (deploy/k6 before it): a step lasts from its first sample to
    # the next step's first; the last one as long as the others when they are all alike (a
    # ramp), else its own span plus one timestamp tick (answers after its end stretch it)
    ordered = sorted((s for s in res.steps if s.stage in first), key=lambda s: first[s.stage])
    spans = {}
    for i, s in enumerate(ordered):
        if i + 1 < len(ordered):
            spans[s.stage] = first[ordered[i + 1].stage] - first[s.stage]
    alike = set(round(v) for v in spans.values())
    for i, s in enumerate(ordered):
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


def read_csv(path, arm_override=None):
    """{arm: ArmResult} from one k6 CSV."""
    r = CsvReader()
    r.add(path, arm_override)
    return r.results()


# ---------------------------------------------------------------------------------------------
# handleSummary JSON (deploy/k6/common.js summaryHandler)

def summary_docs_from_log(path):
    docs = []
    with open_text(path) as f:
        for line in f:
            i = line.find("K6_SUMMARY_JSON ")
            if i >= 0:
                docs.append(json.loads(line[i + len("K6_SUMMARY_JSON "):]))
    if not docs:
        raise InputError("%s: no K6_SUMMARY_JSON line" % path)
    return docs


def read_summary_doc(doc, source, arm_override=None):
    if doc.get("echod_k6") != 1 or "schedule" not in doc or "summary" not in doc:
        raise InputError("%s: a JSON summary, but not one written by deploy/k6 (no echod_k6 "
                         "header and schedule)" % source)
    res = ArmResult(arm_override or doc.get("arm") or "unknown", source, doc.get("script"))
    metric = doc.get("latency_metric") or LATENCY_BY_SCRIPT.get(doc.get("script"), "grpc_req_duration")
    res.latency_metric = metric
    metrics = doc["summary"].get("metrics", {})

    def val(name, stage, stat):
        m = metrics.get("%s{stage:%s}" % (name, stage))
        if not m:
            return None
        return m.get("values", {}).get(stat)

    answered = any(k.startswith("echo_answered") for k in metrics)
    for s in doc["schedule"]:
        step = Step(s["name"], s["offered"])
        step.duration_s = float(s["duration_s"])
        step.sent = val("echo_sent", s["name"], "count") or 0.0
        step.ok = val("echo_ok", s["name"], "count") or 0.0
        if answered:
            step.answered = val("echo_answered", s["name"], "count") or 0.0
        step.failed = val("echo_failed", s["name"], "count") or 0.0
        step.dropped = val("echo_dropped", s["name"], "count") or 0.0
        count = val(metric, s["name"], "count")
        step.latency_count = int(count) if count is not None else (int(step.ok) if step.ok else 0)
        if step.latency_count:
            step.p50_ms = val(metric, s["name"], "med")
            step.p99_ms = val(metric, s["name"], "p(99)")
        if val(SERVER_TREND, s["name"], "count"):
            step.server_p50_us = val(SERVER_TREND, s["name"], "med")
            step.server_p99_us = val(SERVER_TREND, s["name"], "p(99)")
        res.steps.append(step)
    res.segment, res.sequence = doc.get("segment"), doc.get("segments")
    res.k6_dropped = (metrics.get("dropped_iterations") or {}).get("values", {}).get("count", 0.0)
    return res


# ---------------------------------------------------------------------------------------------
# bench/arms --json

def read_bench(doc, source):
    out = {}
    args = doc.get("args", {})
    rate = args.get("rate")
    for arm, s in doc["summary"].items():
        res = ArmResult(arm, source, "bench/arms")
        res.latency_metric = "h2load fixed rate"
        if rate and s.get("fixed_rps") is not None:
            step = Step("fixed", rate)
            step.duration_s = float(args.get("duration") or 1)
            step.ok = s["fixed_rps"] * step.duration_s
            step.sent = step.ok + (s.get("fail_grpc") or 0) + (s.get("fail_h2load") or 0)
            step.failed = (s.get("fail_grpc") or 0) + (s.get("fail_h2load") or 0)
            step.latency_count = int(step.ok)
            step.p50_ms = s["p50"] / 1000.0 if s.get("p50") is not None else None
            step.p99_ms = s["p99"] / 1000.0 if s.get("p99") is not None else None
            res.steps.append(step)
        res.plateau_override = s.get("sat_rps")
        if s.get("cpu_sat") is not None:
            res.cpu_us_per_call = s["cpu_sat"]
            res.cpu_source = "bench/arms (saturation run)"
        out[arm] = res
    return out


# ---------------------------------------------------------------------------------------------
# measured steps (bench/study: steps driven by k6 or h2load, one document per arm)

def read_steps_doc(doc, source, arm_override=None):
    """{"echod_steps": 1, "arm", "script", "latency_metric", "cpu_us_per_call",
    "steps": [{stage, offered, duration_s, sent, ok, answered (optional), failed, dropped,
    p50_ms, p99_ms, latency_count, server_p50_us, server_p99_us}]} -> ArmResult."""
    res = ArmResult(arm_override or doc["arm"], source, doc.get("script"))
    res.latency_metric = doc.get("latency_metric")
    res.cpu_us_per_call = doc.get("cpu_us_per_call")
    res.cpu_source = doc.get("cpu_source")
    for d in doc["steps"]:
        st = Step(d["stage"], d["offered"])
        for k in ("duration_s", "sent", "ok", "answered", "failed", "dropped", "p50_ms", "p99_ms",
                  "latency_count", "server_p50_us", "server_p99_us"):
            if d.get(k) is not None:
                setattr(st, k, d[k])
        res.steps.append(st)
    return res


# ---------------------------------------------------------------------------------------------
# /metrics scrapes

def calls_served(samples):
    calls = 0.0
    for name, labels, v in samples:
        if name == "grpc_server_handled_total" and labels.get("grpc_code") == "OK" \
                and labels.get("grpc_service") == "grpc.examples.echo.Echo":
            if labels.get("grpc_type") in ("unary", "client_stream", "server_stream"):
                calls += v
        elif name == "grpc_server_msg_received_total" and labels.get("grpc_type") == "bidi_stream" \
                and labels.get("grpc_service") == "grpc.examples.echo.Echo":
            calls += v
        elif name == "echod_rest_requests_total" and labels.get("code") == "200":
            calls += v
    return calls


def cpu_per_call(paths):
    """µs of server CPU per call served between the first and the last scrape."""
    if len(paths) < 2:
        raise InputError("--metrics needs two scrapes (before and after): %s" % paths)
    with open_text(paths[0]) as f:
        first = parse_prom(f.read())
    with open_text(paths[-1]) as f:
        last = parse_prom(f.read())
    try:
        return cpu_per_call_samples(first, last)
    except InputError as e:
        raise InputError("%s (%s, %s)" % (e, paths[0], paths[-1]))


def cpu_per_call_samples(first, last):
    """µs of server CPU per call served between two parsed scrapes (echodlib.prom.samples)."""
    def cpu(samples):
        v = [x for n, _, x in samples if n == "process_cpu_seconds_total"]
        if not v:
            raise InputError("no process_cpu_seconds_total in the scrape")
        return v[0]
    dcpu = cpu(last) - cpu(first)
    dcalls = calls_served(last) - calls_served(first)
    if dcalls <= 0:
        raise InputError("no calls served between the two scrapes")
    return dcpu / dcalls * 1e6


# ---------------------------------------------------------------------------------------------
# everything

def load_inputs(specs, stage_duration=None):
    """specs: ['PATH' or 'ARM=PATH', ...] -> {arm: ArmResult}. The CSVs (or --out json files)
    of one arm are its runners and merge exactly (CsvReader); a deploy/k6 summary JSON gives
    the schedule's step lengths to the CSVs of its arm and script that lack the step_s tag,
    and stands alone for an arm that has no CSV (several runners' summaries add up, see
    add_summaries)."""
    summaries = {}  # arm -> [ArmResult]
    steps_docs = {}
    bench = {}
    reader = CsvReader()
    have_csv = False
    for spec in specs:
        arm = None
        path = spec
        if "=" in spec and not os.path.exists(spec):
            arm, path = spec.split("=", 1)
        if not os.path.exists(path):
            raise InputError("no such file: %s" % path)
        kind = sniff(path)
        if kind == "csv":
            reader.add(path, arm)
            have_csv = True
        elif kind == "k6json":
            reader.add_json(path, arm)
            have_csv = True
        elif kind in ("json", "log"):
            if kind == "json":
                with open_text(path) as f:
                    docs = [json.load(f)]
            else:
                docs = summary_docs_from_log(path)
            for doc in docs:
                if doc.get("echod_steps") == 1:
                    r = read_steps_doc(doc, os.path.basename(path), arm)
                    steps_docs[r.arm] = add_steps(steps_docs.get(r.arm), r)
                    continue
                if "summary" in doc and "arms" in doc and "runs" in doc:
                    for a, r in read_bench(doc, os.path.basename(path)).items():
                        bench.setdefault(a, r)
                    continue
                r = read_summary_doc(doc, os.path.basename(path), arm)
                summaries.setdefault(r.arm, []).append(r)
        else:
            raise InputError("%s is a /metrics scrape: give it with --metrics ARM=FIRST,LAST" % path)
    results = dict(bench)
    results.update(steps_docs)
    merged = {a: add_summaries(a, rs) for a, rs in summaries.items()}
    results.update(merged)
    if have_csv:
        for a, r in reader.results().items():
            sched = merged.get(a)
            durations = {s.stage: s.duration_s for s in sched.steps} \
                if sched is not None and sched.script == r.script else {}
            for s in r.steps:
                if stage_duration:
                    s.duration_s = float(stage_duration)
                elif s.stage in durations and not s.duration_s:
                    s.duration_s = durations[s.stage]
            if sched is not None:
                r.source = "%s + %s" % (r.source, sched.source)
            results[a] = r
    return results


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
    for r in results:
        r.segment = getattr(r, "segment", None)
        r.sequence = getattr(r, "sequence", None)
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


# ---------------------------------------------------------------------------------------------
# Prometheus (k6's experimental-prometheus-rw output, echod's scrapes)

K6_COUNTERS = {"echo_sent": "sent", "echo_ok": "ok", "echo_failed": "failed",
               "echo_dropped": "dropped", "echo_answered": "answered"}
# k6 writes a time trend in seconds with a _seconds suffix, any other trend as it is
K6_TRENDS = {"grpc_req_duration": ("k6_grpc_req_duration_seconds", 1e3, 'status="0"'),
             "http_req_duration": ("k6_http_req_duration_seconds", 1e3, 'status="200"'),
             "bidi_msg_latency_ms": ("k6_bidi_msg_latency_ms_seconds", 1e3, ""),
             SERVER_TREND: ("k6_server_total_us", 1.0, "")}
STEP_LABELS = ("arm", "script", "stage", "offered", "step_s")


def parse_time(text):
    """Unix seconds, or RFC 3339 (2026-01-01T10:00:00Z) -> Unix seconds."""
    t = str(text).strip()
    try:
        return float(t)
    except ValueError:
        try:
            return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise InputError("bad time %r (Unix seconds or RFC 3339)" % text)


def selector(name, match, *more):
    parts = [m for m in (match,) + more if m]
    return "%s{%s}" % (name, ",".join(parts))


def read_prometheus(url, start, end, match=""):
    """{arm: ArmResult} of the k6 runs written to a Prometheus between start and end (Unix
    seconds) by k6's experimental-prometheus-rw output, per the labels deploy/k6 tags samples
    with (arm, script, stage, offered, step_s, segment; match adds label matchers such as
    testid="direct-unary-ramp"). k6 writes each series cumulatively, so the last sample of a
    series in the range is its run's total: counts are exact, and summed over the runners,
    whose segments must tile a share of the test as files' do (segments_share). Percentiles
    come from k6's native histograms summed over the runners (histogram_quantile), so within
    one bucket (a factor of 2^(1/8)); without native histograms, from k6's own p(99) gauge
    when one runner ran the arm. Step lengths are the schedule's (step_s); k6's
    dropped_iterations (no stage label) go to the step whose time they fall in. CPU per call
    comes from the scrapes of the arm's echod (target label arm), when there are any."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from echodlib.promserver import Client, PrometheusError
    if end <= start:
        raise InputError("--end must be after --start")
    prom = Client(url)
    try:
        return _read_prometheus(prom, start, end, match)
    except PrometheusError as e:
        raise InputError("Prometheus at %s: %s" % (url, e))


def _read_prometheus(prom, start, end, match):
    runners = {}   # (arm, runner id) -> Runner
    found = []
    for name in K6_COUNTERS:
        for labels, pts in prom.samples(selector("k6_%s_total" % name, match), start, end):
            if pts and labels.get("stage") and not labels.get("probe") and not labels.get("warmup"):
                found.append((name, labels, pts))
    # a stage name that comes with several offered rates in the range (bench/study's one-step
    # runs are all `fixed`) is one step per rate
    rates = {}
    for _, labels, _ in found:
        rates.setdefault((labels.get("arm"), labels["stage"]), set()).add(labels.get("offered"))
    steps = {}     # (arm, step name) -> the labels that pick its series out
    for name, labels, pts in found:
        field = K6_COUNTERS[name]
        arm = labels.get("arm") or "unknown"
        rid = labels.get("segment") or labels.get("instance_id") or "0:1"
        r = runners.get((arm, rid))
        if r is None:
            r = runners[(arm, rid)] = Runner(arm, "prometheus runner %s" % rid)
        r.take_tags(labels)
        stage = labels["stage"]
        if len(rates[(labels.get("arm"), stage)]) > 1:
            stage = "%s@%s" % (stage, labels.get("offered"))
        pick = steps.setdefault((arm, stage), {"labels": {}, "runners": {}})
        for k in ("arm", "script", "stage", "offered", "step_s"):
            if k in labels:
                pick["labels"][k] = labels[k]
        for k in ("segment", "instance_id", "testid"):
            if k in labels:
                pick["runners"].setdefault(k, set()).add(labels[k])
        if "offered" in labels:
            r.offered[stage] = float(labels["offered"])
        if labels.get("step_s"):
            r.step_s[stage] = float(labels["step_s"])
        if field == "answered":
            r.answered = True
        c = r.counters.setdefault(stage, {})
        c[name] = c.get(name, 0.0) + pts[-1][1]
        r.first[stage] = min(r.first.get(stage, pts[0][0]), pts[0][0])
    if not runners:
        raise InputError("no k6 series of deploy/k6 (k6_echo_sent_total with a stage label%s) "
                         "between %s and %s" % (" and " + match if match else "",
                                                datetime.utcfromtimestamp(start).isoformat() + "Z",
                                                datetime.utcfromtimestamp(end).isoformat() + "Z"))
    for labels, pts in prom.samples(selector("k6_dropped_iterations_total", match), start, end):
        arm = labels.get("arm")
        rid = labels.get("segment") or labels.get("instance_id") or "0:1"
        r = runners.get((arm, rid)) or next((x for (a, _), x in runners.items() if a == arm), None)
        if r is None:
            continue
        prev = 0.0
        for t, v in pts:
            if v > prev:
                r.dropped_at.append((t, v - prev))
            prev = v
    by_arm = {}
    for (arm, _), r in runners.items():
        by_arm.setdefault(arm, []).append(r)
    out = {}
    for arm, rs in by_arm.items():
        # the counts, the runners' segments, step lengths and drops as for files; latencies next
        res = merge_runners(arm, rs)
        res.source = "Prometheus (%d runner%s)" % (len(rs), "s" if len(rs) > 1 else "")
        metric = LATENCY_BY_SCRIPT.get(res.script, "grpc_req_duration")
        res.latency_metric = metric
        for s in res.steps:
            pick = steps[(arm, s.stage)]
            sel = ['%s="%s"' % kv for kv in sorted(pick["labels"].items())] + [
                '%s=~"%s"' % (k, "|".join(sorted(v))) for k, v in sorted(pick["runners"].items())]
            p = _quantiles(prom, metric, sel, match, start, end, len(rs))
            s.p50_ms, s.p99_ms, s.latency_count, how = p
            if how and how not in res.notes:
                res.notes.append(how)
            s.server_p50_us, s.server_p99_us, _, _ = _quantiles(prom, SERVER_TREND, sel, match,
                                                                start, end, len(rs))
        cpu = _cpu_per_call(prom, arm, start, end)
        if cpu is not None:
            res.cpu_us_per_call, res.cpu_source = cpu, "Prometheus"
        out[arm] = res
    return out


def _quantiles(prom, metric, step_sel, match, start, end, runners):
    """(p50, p99, count, note) of one step of one trend, at the time of the last sample of its
    series (k6 writes a series only while it has new samples, so an instant query then sees
    every runner's final histogram of the step; sum() of last_over_time() of native
    histograms gives 0 in Prometheus 2.42)."""
    name, scale, extra = K6_TRENDS[metric]
    sel = selector(name, match, 'probe=""', extra, *step_sel)
    base = name[:-len("_seconds")] if name.endswith("_seconds") else name
    times = [pts[-1][0] for n in (name, base + "_p99")
             for _, pts in prom.samples(n + sel[len(name):], start, end) if pts]
    if not times:
        return None, None, 0, None
    at = max(times)
    count = prom.vector("histogram_count(sum(%s))" % sel, at)
    n = int(count[0][1]) if count else 0
    q = {}
    for p in (0.5, 0.99):
        # Prometheus ranks q*n, k6 and the CSV path q*(n-1) between closest ranks (stats.py):
        # asked for (q*(n-1)+1)/n, the histogram answers in the bucket of the sample k6 rounds
        # up to, so a thin tail (a p99 of a few hundred calls) is not read a sample higher
        v = prom.vector("histogram_quantile(%.12g, sum(%s))" % (
            min(1.0, (p * (n - 1) + 1) / n) if n else p, sel), at)
        q[p] = v[0][1] * scale if v and v[0][1] == v[0][1] else None
    if q[0.99] is not None:
        return q[0.5], q[0.99], n, None
    # no native histograms: k6's own p(99) (and med) gauges, one per runner's series
    gauges = {p: [x for _, x in prom.vector(base + "_" + stat + sel[len(name):], at)]
              for p, stat in ((0.5, "med"), (0.99, "p99"))}
    if not gauges[0.99]:
        return None, None, 0, None
    if runners == 1:
        return (gauges[0.5][0] * scale if gauges[0.5] else None, gauges[0.99][0] * scale, 0,
                "percentiles: k6's own p(99) gauge (no native histograms; "
                "K6_PROMETHEUS_RW_TREND_AS_NATIVE_HISTOGRAM=true lets runners merge)")
    return None, None, 0, ("percentiles left out: %d runners wrote k6's p(99) gauges, which do "
                           "not combine (K6_PROMETHEUS_RW_TREND_AS_NATIVE_HISTOGRAM=true lets "
                           "runners merge)" % runners)


def _cpu_per_call(prom, arm, start, end):
    """µs of echod CPU per call served between start and end, from the scrapes of its targets
    labelled arm (increase between the first and last scrape in the range: no extrapolation)."""
    rng = max(1, int(round(end - start)))

    def delta(sel):
        return sum(v for _, v in prom.vector("sum(max_over_time(%s[%ds]) - min_over_time(%s[%ds]))"
                                             % (sel, rng, sel, rng), end))
    cpu = delta('process_cpu_seconds_total{arm="%s"}' % arm)
    calls = delta('grpc_server_handled_total{arm="%s",grpc_code="OK",grpc_service='
                  '"grpc.examples.echo.Echo",grpc_type=~"unary|client_stream|server_stream"}' % arm)
    calls += delta('grpc_server_msg_received_total{arm="%s",grpc_service="grpc.examples.echo.Echo",'
                   'grpc_type="bidi_stream"}' % arm)
    calls += delta('echod_rest_requests_total{arm="%s",code="200"}' % arm)
    if calls <= 0:
        return None
    return cpu / calls * 1e6
