"""Reading the load tests' results from a Prometheus into echodlib.report's steps: the series
k6's experimental-prometheus-rw output wrote (make-run --prometheus, bench/study --prometheus),
by the labels deploy/k6 tags every sample with, and CPU per call from the scrapes of each arm's
echod (target label arm). deploy/report --prometheus URL --start T --end T.
"""

from datetime import datetime

from .promserver import Client, PrometheusError
from .report import LATENCY_BY_SCRIPT, SERVER_TREND, InputError, Runner, merge_runners

K6_COUNTERS = {"echo_sent": "sent", "echo_ok": "ok", "echo_failed": "failed",
               "echo_dropped": "dropped", "echo_answered": "answered"}
# k6 writes a time trend in seconds with a _seconds suffix, any other trend as it is
K6_TRENDS = {"grpc_req_duration": ("k6_grpc_req_duration_seconds", 1e3, 'status="0"'),
             "http_req_duration": ("k6_http_req_duration_seconds", 1e3, 'status="200"'),
             "bidi_msg_latency_ms": ("k6_bidi_msg_latency_ms_seconds", 1e3, ""),
             SERVER_TREND: ("k6_server_total_us", 1.0, "")}


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
