"""Reading the load tests' results into echodlib.report's steps: k6 outputs (CSV, --out json,
handleSummary JSON), bench/study's measured steps, bench/arms JSON, and /metrics scrapes.
Prometheus is echodlib.k6prom's.

Inputs, recognised by content (sniff):

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
* measured steps of bench/study ({"echod_steps": 1, "arm", "steps": [...]}, steps_doc): one
  document per arm and experiment, steps as deploy/report itself reports them.
* bench/arms --json: per arm one fixed-rate step (args.rate offered, summary.fixed_rps
  achieved, p50/p99 from µs), the closed-loop saturation rate as the plateau, and
  summary.cpu_sat as CPU per call.
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
from datetime import datetime

from .prom import samples as parse_prom
from .report import (COUNTERS, LATENCY_BY_SCRIPT, LATENCY_METRICS, SERVER_TREND, ArmResult,
                     InputError, Runner, Step, add_steps, add_summaries, merge_runners)


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
# k6 CSV and --out json

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


class CsvReader:
    """Reads k6 CSVs and --out json files, one k6 process (runner) each, into per-arm results;
    the runners of one arm merge exactly (report.merge_runners)."""

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
            or name in ("dropped_iterations", "iterations")

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
        self.iterations = 0.0  # k6's iterations, tagged with a stage or not

    def runner(self, arm):
        if arm not in self.per:
            self.per[arm] = Runner(arm, self.source)
        return self.per[arm]

    def sample(self, name, ts, tick, value, tags, status):
        arm = self.arm_override or tags.get("arm")
        if name == "iterations":
            self.iterations += value
            return
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
        if not runners and self.iterations:
            # k6 exits 0 when every iteration threw (its log has each error), as when nothing
            # listens at TARGET: the iterations are there, the calls are not
            raise InputError("%s: %d k6 iterations, none of which made a call: each failed before "
                             "its first (did k6 reach the server at TARGET? k6's log names the "
                             "error)" % (self.path, self.iterations))
        if not runners:
            raise InputError("%s: no samples tagged with a stage (not written by deploy/k6?)"
                             % self.path)
        if self.untagged_drops:
            if len(runners) > 1:
                raise InputError("%s: dropped_iterations without an arm tag in a file of several "
                                 "arms" % self.path)
            runners[0].dropped_at += self.untagged_drops
        return runners


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


def summary_value(doc, name, stat):
    """One figure of a handleSummary document: metric (or submetric, e.g.
    'echo_ok{stage:s01}') `name`'s `stat` (count, med, p(99), avg), or None."""
    m = doc["summary"].get("metrics", {}).get(name)
    return None if not m else m.get("values", {}).get(stat)


def read_summary_doc(doc, source, arm_override=None):
    if doc.get("echod_k6") != 1 or "schedule" not in doc or "summary" not in doc:
        raise InputError("%s: a JSON summary, but not one written by deploy/k6 (no echod_k6 "
                         "header and schedule)" % source)
    res = ArmResult(arm_override or doc.get("arm") or "unknown", source, doc.get("script"))
    metric = doc.get("latency_metric") or LATENCY_BY_SCRIPT.get(doc.get("script"),
                                                                 "grpc_req_duration")
    res.latency_metric = metric
    metrics = doc["summary"].get("metrics", {})

    def val(name, stage, stat):
        return summary_value(doc, "%s{stage:%s}" % (name, stage), stat)

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

def steps_doc(arm, script, steps, latency):
    """bench/study's measured steps of one arm as a document read_steps_doc reads (a step
    without a stage is named sNN by its place)."""
    return {"echod_steps": 1, "arm": arm, "script": script, "latency_metric": latency,
            "steps": [dict(s, stage=s.get("stage") or "s%02d" % (i + 1))
                      for i, s in enumerate(steps)]}


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

ECHO = "grpc.examples.echo.Echo"


def calls_served(samples):
    calls = 0.0
    for name, labels, v in samples:
        if name == "grpc_server_handled_total" and labels.get("grpc_code") == "OK" \
                and labels.get("grpc_service") == ECHO:
            if labels.get("grpc_type") in ("unary", "client_stream", "server_stream"):
                calls += v
        elif name == "grpc_server_msg_received_total" and labels.get("grpc_type") == "bidi_stream" \
                and labels.get("grpc_service") == ECHO:
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

class Inputs:
    """The inputs of one report, file by file or document by document; results() merges them
    into {arm: ArmResult}: bench/arms, then bench/study's steps, then the summaries (an arm's
    runners merged), then the CSVs and --out json files (their steps timed by a summary of
    the same arm and script when they carry no schedule)."""

    def __init__(self):
        self.summaries = {}
        self.steps_docs = {}
        self.bench = {}
        self.reader = CsvReader()
        self.have_csv = False
        self.sources = []  # what was added, in order

    def add_file(self, spec):
        """PATH, or ARM=PATH to name the arm when the file does not."""
        arm = None
        path = spec
        if "=" in spec and not os.path.exists(spec):
            arm, path = spec.split("=", 1)
        if not os.path.exists(path):
            raise InputError("no such file: %s" % path)
        self.sources.append(spec)
        kind = sniff(path)
        if kind == "csv":
            self.reader.add(path, arm)
            self.have_csv = True
        elif kind == "k6json":
            self.reader.add_json(path, arm)
            self.have_csv = True
        elif kind in ("json", "log"):
            if kind == "json":
                with open_text(path) as f:
                    docs = [json.load(f)]
            else:
                docs = summary_docs_from_log(path)
            for doc in docs:
                self._add_doc(doc, os.path.basename(path), arm)
        else:
            raise InputError("%s is a /metrics scrape: give it with --metrics ARM=FIRST,LAST"
                             % path)

    def add_doc(self, doc, source, arm=None):
        """One JSON document: bench/study's steps, bench/arms --json or a handleSummary (source
        names it in the report)."""
        self.sources.append(source)
        self._add_doc(doc, source, arm)

    def _add_doc(self, doc, source, arm):
        if doc.get("echod_steps") == 1:
            r = read_steps_doc(doc, source, arm)
            self.steps_docs[r.arm] = add_steps(self.steps_docs.get(r.arm), r)
        elif "summary" in doc and "arms" in doc and "runs" in doc:
            for a, r in read_bench(doc, source).items():
                self.bench.setdefault(a, r)
        else:
            r = read_summary_doc(doc, source, arm)
            self.summaries.setdefault(r.arm, []).append(r)

    def results(self, stage_duration=None):
        results = dict(self.bench)
        results.update(self.steps_docs)
        merged = {a: add_summaries(a, rs) for a, rs in self.summaries.items()}
        results.update(merged)
        if self.have_csv:
            for a, r in self.reader.results().items():
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


def load_inputs(specs, stage_duration=None):
    """{arm: ArmResult} of deploy/report's INPUT files (PATH or ARM=PATH)."""
    inputs = Inputs()
    for spec in specs:
        inputs.add_file(spec)
    return inputs.results(stage_duration)
