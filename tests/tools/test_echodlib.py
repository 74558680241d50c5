"""Unit tests of echodlib's pure parts: what computes without a daemon, a network or a clock.

  fmt, stats             the one formatter and the percentiles
  k6result               k6 CSV (default whole-second timestamps, milliseconds, gzip), --out
                         json, handleSummary documents, bench/study's steps, bench/arms, scrapes
  report                 step windows, schedule drops, execution segments, merging runners,
                         knee and plateau; report_out's Markdown
  k6prom                 its time and selector arithmetic (a Prometheus is test_prometheus's)
  findings               verdicts of a full set of figures, merging runs; what a verdict rests
                         on: a run's inputs set from published figures, identity (F4 at the
                         study's caps), fitted (F5's plateaus on the cost model), partly fitted,
                         relabelling a run written before the rule
  study                  Plan, the capped regime (its cap, extra ramps, checks) and the open
                         model's backlog and VU sizing, k6's Go environment and VU budget, the
                         cost and its calibration, the figures, F4 at the published caps, the
                         drivers' reading of k6 summaries, the checks; the witness's options,
                         findings and per-step comparison
  jvm, procstat          a JVM's threads by group, per-thread CPU and context switches between
                         two readings, its unified-logging pauses (safepoints, collections)
  bench.peer_load        the derivation of B, w, Hw and Hq, medians of nested runs, the stall
                         tables

Every fixture is written inline. Run on its own: /usr/bin/python3 tests/tools/test_echodlib.py
"""

import contextlib
import gzip
import io
import json
import math
import os
import shutil
import sys
import tempfile
import unittest
from datetime import datetime, timezone
from fractions import Fraction

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from echodlib import findings as F, fmt, jvm, k6prom, k6result, peers, procstat, report, \
    report_out, stats  # noqa: E402
from echodlib.bench import model, peer_load, shapes  # noqa: E402
from echodlib.report import ArmResult, InputError, Runner, Step  # noqa: E402
from echodlib.sampler import Sampler  # noqa: E402
from echodlib.study import drivers, figures, merge, outputs, plan as P, regimes, runner, \
    server, stalls, tables, witness  # noqa: E402
from echodlib.study.cost import Cost, calibrate  # noqa: E402
from echodlib.study.server import Window  # noqa: E402

HEADER = ("metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,"
          "method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,"
          "metadata").split(",")
T0 = 1767225600  # 2026-01-01T00:00:00Z


def csv_text(samples, ts=lambda t: str(int(t))):
    """A k6 CSV of samples [(metric, t, value, tags, status)], k6's columns, the tags that are
    not columns in extra_tags."""
    lines = [",".join(HEADER)]
    for metric, t, value, tags, status in samples:
        row = dict.fromkeys(HEADER, "")
        row.update(metric_name=metric, timestamp=ts(t), metric_value="%f" % value, status=status,
                   extra_tags="&".join("%s=%s" % kv for kv in tags.items()))
        lines.append(",".join(row[h] for h in HEADER))
    return "\n".join(lines) + "\n"


def json_lines(samples):
    """The same samples as k6 --out json writes them (RFC 3339, whole seconds here)."""
    out = []
    for metric, t, value, tags, status in samples:
        tags = dict(tags, status=status) if status else dict(tags)
        when = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out.append(json.dumps({"type": "Point", "metric": metric,
                               "data": {"time": when, "value": value, "tags": tags}}))
    return "\n".join(out) + "\n"


def ramp_samples(step_s=None, sent=(10, 20), segment=None):
    """unary-ramp.js's samples of arm 'a': s01 offers 1 call/s, s02 2 calls/s, 10 s each from
    T0; call i of s01 takes i+1 ms, of s02 2(i+1) ms; s02 has one more call that failed
    (status 2), and k6 dropped 3 iterations during s02 (no arm tag). A warm-up call and the
    reflection RPC (no stage) are not calls of a step."""
    out = []
    for k, (offered, n) in enumerate(((1, sent[0]), (2, sent[1]))):
        tags = {"arm": "a", "script": "unary-ramp", "stage": "s%02d" % (k + 1),
                "offered": str(offered)}
        if step_s:
            tags["step_s"] = str(step_s)
        if segment:
            tags["segment"] = segment
        for i in range(n):
            t = T0 + 10 * k + 10.0 * i / n
            out += [("echo_sent", t, 1, tags, ""), ("echo_ok", t, 1, tags, ""),
                    ("grpc_req_duration", t, (k + 1) * (i + 1.0), tags, "0"),
                    ("server_total_us", t, 100.0 * (i + 1), tags, "")]
        if k == 1:
            out += [("echo_sent", T0 + 15, 1, tags, ""), ("echo_failed", T0 + 15, 1, tags, ""),
                    ("grpc_req_duration", T0 + 15, 5000.0, tags, "2"),
                    ("dropped_iterations", T0 + 15, 3, {"script": "unary-ramp"}, "")]
    out.append(("echo_ok", T0, 1, {"arm": "a", "stage": "s01", "offered": "1", "warmup": "1"},
                ""))
    out.append(("grpc_req_duration", T0, 9.0, {"arm": "a"}, "0"))
    return out


def summary_doc(arm="a", segment=None, sent=200, p99=9.0, answered=190, script="bidi-ramp"):
    """A deploy/k6 handleSummary document of one 2 s step at 100 msg/s."""
    metrics = {"echo_sent{stage:s01}": {"values": {"count": sent}},
               "echo_ok{stage:s01}": {"values": {"count": sent}},
               "echo_answered{stage:s01}": {"values": {"count": answered}},
               "bidi_msg_latency_ms{stage:s01}": {"values": {"count": sent, "med": 3.0,
                                                             "p(99)": p99}},
               "dropped_iterations": {"values": {"count": 0}}}
    doc = {"echod_k6": 1, "arm": arm, "script": script,
           "schedule": [{"name": "s01", "offered": 100, "duration_s": 2}],
           "summary": {"metrics": metrics}}
    if segment:
        doc.update(segment=segment, segments="0,1/2,1")
    return doc


class Scratch(unittest.TestCase):
    """A test case with a scratch directory (self.tmp) and write(name, text) in it."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="echodlib-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def write(self, name, text, gz=False):
        path = os.path.join(self.tmp, name)
        with (gzip.open(path, "wt") if gz else open(path, "w")) as f:
            f.write(text)
        return path


# ------------------------------------------------------------------------------- fmt, stats

class Formatter(unittest.TestCase):
    def test_num(self):
        self.assertEqual([fmt.num(v) for v in (None, "x", 0.123, 99.96, 123.45, 999.5, 12345.6)],
                         ["-", "x", "0.1", "100.0", "123", "1000", "12346"])
        self.assertEqual(fmt.num(123.45, 2, 1), "123.5")
        self.assertEqual(fmt.num(-3.14159, 2), "-3.14")

    def test_ms_ratio_times_pair(self):
        self.assertEqual([fmt.ms(v) for v in (None, 0.4567, 3.456, 45.67, 456.7, 4567.0)],
                         ["-", "0.457", "3.46", "45.7", "456.7", "4567"])
        self.assertEqual(fmt.ratio(3, 2), 1.5)
        self.assertIsNone(fmt.ratio(None, 2))
        self.assertIsNone(fmt.ratio(3, 0))
        self.assertEqual(fmt.times(3, 2), "1.50×")
        self.assertEqual(fmt.times(3, None), "-")
        self.assertEqual(fmt.pair(1.234, 150.0), "1.23 / 150.0")


class Stats(unittest.TestCase):
    def test_percentile_median_spread(self):
        self.assertIsNone(stats.percentile([], 0.5))
        self.assertEqual(stats.percentile([1, 2, 3, 10, 20, 30], 0.5), 6.5)
        self.assertAlmostEqual(stats.percentile(list(range(1, 101)), 0.99), 99.01)
        self.assertEqual(stats.median([3, None, 1, 2]), 2)
        self.assertIsNone(stats.median([None]))
        self.assertAlmostEqual(stats.spread([90, 100, 110]), 0.2)
        self.assertIsNone(stats.spread([100]))
        self.assertEqual(stats.nearest_rank([1, 2, 3, 4], 50), 2)


# ------------------------------------------------------------------------------- k6result

class K6Csv(Scratch):
    def steps(self, results, arm="a"):
        return {s.stage: s for s in results[arm].steps}

    def check_ramp(self, steps, last_s=10.0):
        s1, s2 = steps["s01"], steps["s02"]
        self.assertEqual((s1.offered, s1.sent, s1.ok, s1.failed), (1.0, 10, 10, 0))
        self.assertEqual((s2.offered, s2.sent, s2.ok, s2.failed), (2.0, 21, 20, 1))
        self.assertEqual(s1.duration_s, 10.0, "from s01's first sample to s02's")
        self.assertAlmostEqual(s2.duration_s, last_s)
        self.assertEqual((s1.p50_ms, s2.p50_ms), (5.5, 21.0))
        self.assertAlmostEqual(s1.p99_ms, 9.91)
        self.assertAlmostEqual(s2.p99_ms, 39.62, msg="a failed call is no latency sample")
        self.assertEqual(s2.latency_count, 20)
        self.assertEqual(s1.server_p50_us, 550.0)
        self.assertEqual(s2.dropped, 3, "k6's drops placed in their step by time")
        self.assertEqual(s1.goodput, 1.0)

    def test_default_whole_second_timestamps(self):
        path = self.write("a.csv", csv_text(ramp_samples()))
        res = k6result.read_csv(path)
        self.assertEqual(sorted(res), ["a"])
        self.assertEqual(res["a"].script, "unary-ramp")
        self.assertEqual(res["a"].latency_metric, "grpc_req_duration")
        self.assertEqual(res["a"].k6_dropped, 3)
        # the last step as long as the others (a ramp), not its samples' span plus a tick
        self.check_ramp(self.steps(res))

    def test_gzip_and_out_json_read_alike(self):
        gz = self.write("a.csv.gz", csv_text(ramp_samples()), gz=True)
        self.assertEqual(k6result.sniff(gz), "csv")
        self.check_ramp(self.steps(k6result.read_csv(gz)))
        js = self.write("a.json", json_lines(ramp_samples()))
        self.assertEqual(k6result.sniff(js), "k6json")
        reader = k6result.CsvReader()
        reader.add_json(js)
        self.check_ramp(self.steps(reader.results()))

    def test_millisecond_timestamps(self):
        """A tick of 1 ms: the last step lasts its samples' span plus a tick."""
        path = self.write("a.csv", csv_text(ramp_samples(), ts=lambda t: str(int(t * 1000))))
        self.check_ramp(self.steps(k6result.read_csv(path)), last_s=9.5 + 0.001)

    def test_schedule_tags_place_drops_by_schedule(self):
        """With step_s every step lasts the schedule's, and a step's drops are its scheduled
        iterations less its calls (k6's own count kept, the difference said)."""
        path = self.write("a.csv", csv_text(ramp_samples(step_s=10, sent=(10, 18))))
        res = k6result.read_csv(path)["a"]
        steps = {s.stage: s for s in res.steps}
        self.assertEqual([s.duration_s for s in res.steps], [10.0, 10.0])
        self.assertEqual((steps["s01"].dropped, steps["s02"].dropped), (0.0, 1.0))
        self.assertEqual(res.k6_dropped, 3)
        self.assertTrue(any("k6 counted 3" in n for n in res.notes), res.notes)

    def test_timestamp_formats(self):
        self.assertEqual(k6result.parse_timestamp(str(T0)), (float(T0), 1.0))
        self.assertEqual(k6result.parse_timestamp(str(T0 * 1000 + 5)), (T0 + 0.005, 1e-3))
        self.assertEqual(k6result.parse_timestamp(str(T0 * 10 ** 6))[1], 1e-6)
        self.assertEqual(k6result.parse_timestamp(str(T0 * 10 ** 9))[1], 1e-9)
        self.assertEqual(k6result.parse_timestamp("2026-01-01T00:00:00Z"), (float(T0), 1.0))
        self.assertEqual(k6result.parse_timestamp("2026-01-01T00:00:00.5Z"), (T0 + 0.5, 1e-9))

    def test_refused(self):
        self.assertRaisesRegex(InputError, "not a k6 CSV",
                               k6result.read_csv, self.write("b.csv", "metric_name,x\n1,2\n"))
        self.assertRaisesRegex(InputError, "no samples tagged with a stage", k6result.read_csv,
                               self.write("c.csv", csv_text([("echo_sent", T0, 1, {}, "")])))
        self.assertRaisesRegex(InputError, "neither", k6result.sniff, self.write("d", "hello\n"))
        self.assertEqual(k6result.sniff(self.write("m", "# TYPE a counter\na 1\n")), "prom")
        self.assertEqual(k6result.sniff(self.write("k6.log", "x\n")), "log")
        two = csv_text(ramp_samples(segment="0:1/2") + [
            ("echo_sent", T0, 1, {"arm": "a", "stage": "s01", "offered": "1",
                                  "segment": "1/2:1"}, "")])
        self.assertRaisesRegex(InputError, "two execution segments",
                               k6result.read_csv, self.write("e.csv", two))


class K6Documents(Scratch):
    def test_summary_doc(self):
        r = k6result.read_summary_doc(summary_doc(), "s.json")
        self.assertEqual((r.arm, r.script, r.latency_metric), ("a", "bidi-ramp",
                                                               "bidi_msg_latency_ms"))
        s = r.steps[0]
        self.assertEqual((s.sent, s.answered, s.p50_ms, s.p99_ms, s.latency_count),
                         (200, 190, 3.0, 9.0, 200))
        self.assertEqual(s.goodput, 95.0, "answers by arrival")
        self.assertIsNone(s.server_p99_us)
        self.assertEqual(k6result.summary_value(summary_doc(), "echo_sent{stage:s01}", "count"),
                         200)
        self.assertIsNone(k6result.summary_value(summary_doc(), "nothing", "count"))
        self.assertRaisesRegex(InputError, "not one written by deploy/k6",
                               k6result.read_summary_doc, {"summary": {}}, "x.json")

    def test_summaries_of_runners_add_up(self):
        """Two runners' summaries: counts add, the percentile is the larger (an upper bound,
        said), the offered rate the whole schedule's."""
        inputs = k6result.Inputs()
        inputs.add_doc(summary_doc(segment="0:1/2", sent=100, p99=5.0, answered=95), "r0.json")
        inputs.add_doc(summary_doc(segment="1/2:1", sent=100, p99=7.0, answered=95), "r1.json")
        r = inputs.results()["a"]
        s = r.steps[0]
        self.assertEqual((s.sent, s.answered, s.p99_ms, s.offered), (200, 190, 7.0, 100.0))
        self.assertEqual((r.segments, r.share, r.source), ("0:1", 1, "r0.json + r1.json"))
        self.assertTrue(any("upper bound" in n for n in r.notes), r.notes)

    def test_steps_doc_round_trip(self):
        steps = [{"offered": 50, "duration_s": 2.0, "sent": 100, "ok": 99, "answered": 98,
                  "failed": 0, "dropped": 0, "p50_ms": 1.5, "p99_ms": 4.0, "latency_count": 99,
                  "server_p50_us": None, "server_p99_us": None, "driver": "k6"},
                 {"stage": "x", "offered": 100, "duration_s": 2.0, "sent": 200, "ok": 150}]
        doc = k6result.steps_doc("a-k6", "unary-ramp", steps, "grpc_req_duration")
        self.assertEqual([s["stage"] for s in doc["steps"]], ["s01", "x"])
        self.assertNotIn("stage", steps[0], "the caller's steps are left as they were")
        inputs = k6result.Inputs()
        inputs.add_doc(doc, "ramp-a.json")
        inputs.add_doc(k6result.steps_doc("a-k6", "unary-ramp", steps[:1], "grpc_req_duration"),
                       "more.json")
        r = inputs.results()["a-k6"]
        self.assertEqual(r.source, "ramp-a.json + more.json")
        self.assertEqual([(s.stage, s.goodput) for s in r.steps],
                         [("s01", 49.0), ("x", 75.0), ("s01", 49.0)])
        self.assertEqual(inputs.sources, ["ramp-a.json", "more.json"])

    def test_bench_arms_json(self):
        doc = {"args": {"rate": 2000, "duration": 10}, "arms": ["g"], "runs": [],
               "summary": {"g": {"sat_rps": 50000.0, "cpu_sat": 2.5, "fixed_rps": 1990.0,
                                 "p50": 80.0, "p99": 250.0, "fail_grpc": 1, "fail_h2load": 0}}}
        path = self.write("bench.json", json.dumps(doc))
        r = k6result.load_inputs([path])["g"].analyse(50, 0.95)
        s = r.steps[0]
        self.assertEqual((s.offered, s.ok, s.failed, s.sent, s.p99_ms),
                         (2000.0, 19900.0, 1, 19901.0, 0.25))
        self.assertEqual((r.plateau, r.cpu_us_per_call, r.knee), (50000.0, 2.5, None))

    def test_files_arm_names_and_stage_duration(self):
        csv_path = self.write("a.csv", csv_text(ramp_samples()))
        log = self.write("k6.log", "noise\nK6_SUMMARY_JSON %s\n" % json.dumps(summary_doc()))
        res = k6result.load_inputs(["x=" + csv_path, log], stage_duration=5)
        self.assertEqual(sorted(res), ["a", "x"])
        self.assertEqual([s.duration_s for s in res["x"].steps], [5.0, 5.0])
        self.assertEqual(res["x"].source, "a.csv")
        self.assertRaisesRegex(InputError, "no such file", k6result.load_inputs, ["nope.csv"])
        prom_file = self.write("m.prom", "# TYPE a counter\na 1\n")
        self.assertRaisesRegex(InputError, "--metrics", k6result.load_inputs, [prom_file])

    def test_cpu_per_call(self):
        def scrape(cpu, calls, msgs):
            return [("process_cpu_seconds_total", {}, cpu),
                    ("grpc_server_handled_total", {"grpc_code": "OK", "grpc_type": "unary",
                                                   "grpc_service": k6result.ECHO}, calls),
                    ("grpc_server_handled_total", {"grpc_code": "OK", "grpc_type": "unary",
                                                   "grpc_service": "grpc.health.v1.Health"}, 77),
                    ("grpc_server_msg_received_total", {"grpc_type": "bidi_stream",
                                                        "grpc_service": k6result.ECHO}, msgs)]
        self.assertAlmostEqual(k6result.cpu_per_call_samples(scrape(1.0, 1000, 0),
                                                             scrape(1.5, 90000, 11000)), 5.0)
        self.assertRaisesRegex(InputError, "no calls served", k6result.cpu_per_call_samples,
                               scrape(1.0, 5, 5), scrape(2.0, 5, 5))


# ------------------------------------------------------------------------------- report

def make_runner(segment=None, sequence=None, source="r", lat=(), stage="s01", offered=100.0,
           step_s=1.0, sent=None):
    r = Runner("a", source)
    r.segment, r.sequence, r.script = segment, sequence, "unary-ramp"
    r.offered[stage] = offered
    r.step_s[stage] = step_s
    r.lat["grpc_req_duration"] = {stage: list(lat)}
    n = len(lat) if sent is None else sent
    r.counters[stage] = {"echo_sent": n, "echo_ok": len(lat)}
    r.first[stage] = r.last[stage] = T0
    return r


def arm(points, **kw):
    """An ArmResult of steps [(offered, goodput, p99)] of 1 s each."""
    r = ArmResult("a", "test", "unary-ramp")
    for i, (offered, goodput, p99) in enumerate(points):
        s = Step("s%02d" % (i + 1), offered)
        s.duration_s, s.sent, s.ok, s.p99_ms, s.latency_count = 1.0, offered, goodput, p99, 1
        r.steps.append(s)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


class Segments(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(report.parse_segment("1/3:2/3"), (Fraction(1, 3), Fraction(2, 3)))
        self.assertEqual(report.parse_segment("0.5"), (0, Fraction(1, 2)))
        self.assertEqual(report.parse_segment("50%:1"), (Fraction(1, 2), 1))
        self.assertEqual(report.parse_segment(None), (0, 1))
        for bad in ("2:1", "1/2:1/2", "x:1", "1/0"):
            self.assertRaises(InputError, report.parse_segment, bad)

    def test_share(self):
        self.assertEqual(report.segments_share("a", [make_runner("0:1/2"),
                                                     make_runner("1/2:1")]), (1, "0:1"))
        self.assertEqual(report.segments_share("a", [make_runner("1/3:2/3")]),
                         (Fraction(1, 3), "1/3:2/3"))
        self.assertRaisesRegex(InputError, "overlap", report.segments_share, "a",
                               [make_runner(), make_runner()])
        self.assertRaisesRegex(InputError, "1/3:2/3 is missing", report.segments_share, "a",
                               [make_runner("0:1/3"), make_runner("2/3:1")])
        self.assertRaisesRegex(InputError, "execution-segment-sequence", report.segments_share,
                               "a", [make_runner("0:1/2", "0,1/2,1"),
                                     make_runner("1/2:1", "0,1/2,3/4,1")])

    def test_merge_runners_pools_samples(self):
        r = report.merge_runners("a", [make_runner("0:1/2", lat=[1, 2, 3], sent=4),
                                       make_runner("1/2:1", lat=[10, 20, 30], sent=5)])
        s = r.steps[0]
        self.assertEqual(s.p50_ms, 6.5, "pooled, not averaged")
        self.assertEqual((s.sent, s.ok, s.latency_count, s.offered), (9, 6, 6, 100.0))
        self.assertEqual(s.dropped, 91, "the schedule's 100 less the 9 sent")
        alone = report.merge_runners("a", [make_runner("1/2:1", lat=[1, 2], sent=2)])
        self.assertEqual((alone.share, alone.steps[0].offered), (Fraction(1, 2), 50.0))
        other = make_runner("1/2:1")
        other.script = "bidi-ramp"
        self.assertRaisesRegex(InputError, "two scripts", report.merge_runners, "a",
                               [make_runner("0:1/2"), other])


class StepWindows(unittest.TestCase):
    def steps(self, *stages):
        return [Step(st, 1) for st in stages]

    def test_ramp_of_like_steps(self):
        steps = self.steps("s01", "s02", "s03")
        first = {"s01": 0.0, "s02": 10.0, "s03": 20.0}
        last = {"s01": 9.0, "s02": 19.0, "s03": 21.0}
        report.step_spans(steps, first, last, 1.0)
        self.assertEqual([s.duration_s for s in steps], [10.0, 10.0, 10.0])

    def test_unlike_steps_and_fine_ticks(self):
        steps = self.steps("s01", "s02")
        report.step_spans(steps, {"s01": 0.0, "s02": 4.0}, {"s01": 3.9, "s02": 7.5}, 1e-3)
        self.assertEqual([s.duration_s for s in steps], [4.0, 3.5 + 1e-3])

    def test_known_lengths_and_steps_without_samples_kept(self):
        steps = self.steps("s01", "s02", "s03")
        steps[0].duration_s = 2.0
        ordered = report.step_spans(steps, {"s01": 0.0, "s02": 10.0}, {"s01": 1, "s02": 12}, 1)
        self.assertEqual([s.stage for s in ordered], ["s01", "s02"])
        # the last step as long as the spans before it (s01's, though its length was known)
        self.assertEqual([s.duration_s for s in steps], [2.0, 10.0, None])


class KneeAndPlateau(unittest.TestCase):
    def test_goodput_knee_and_median_plateau(self):
        r = arm([(300, 250, 20), (100, 100, 10), (400, 240, 30), (200, 200, 10)])
        r.analyse(50, 0.95)
        self.assertEqual([s.offered for s in r.steps], [100, 200, 300, 400], "sorted by offer")
        self.assertEqual(r.knee.offered, 300)
        self.assertEqual(r.knee_reason, "goodput 250/s < 95% of offered")
        self.assertEqual((r.plateau, r.peak), (245.0, 250))

    def test_p99_knee_and_no_knee(self):
        r = arm([(100, 100, 10), (200, 200, 60)]).analyse(50, 0.95)
        self.assertEqual((r.knee.stage, r.knee_reason), ("s02", "p99 60 ms > 50 ms"))
        r = arm([(100, 100, 10), (200, 200, 20)]).analyse(50, 0.95)
        self.assertIsNone(r.knee)
        self.assertIsNone(r.plateau, "not reached within the offered range")
        self.assertEqual(r.peak, 200)

    def test_no_answer_and_bench_plateau(self):
        r = arm([(100, 0, None)])
        r.steps[0].latency_count = 0
        r.analyse(50, 0.0)
        self.assertEqual(r.knee_reason, "no successful response")
        r = arm([(100, 100, 10)], plateau_override=5000.0).analyse(50, 0.95)
        self.assertEqual((r.knee, r.plateau), (None, 5000.0))
        d = r.as_dict()
        self.assertEqual((d["plateau_goodput"], d["steps"][0]["goodput"]), (5000.0, 100.0))

    def test_markdown(self):
        r = arm([(100, 100, 10), (200, 150, 80)], cpu_us_per_call=5.0, cpu_source="/metrics")
        results = report.analyse({"a": r}, 50, 0.95)
        md = report_out.markdown(results, report_out.Options("T"))
        self.assertTrue(md.startswith("# T\n"))
        self.assertIn("| a | unary-ramp | 200 | goodput 150/s < 95% of offered; p99 80 ms > 50 ms "
                      "| 150 | 150 | 10.0 | 5.00 (/metrics) | test |", md)
        self.assertIn("| s02 **knee** | 200 | 200 | 150 | 75.0 | - | 80.0 | - | - | 0 | 0 | 1.0 |",
                      md)
        self.assertEqual(report_out.short_source("a.csv + b.csv + c.json + d.json"),
                         "2 CSV + 2 JSON")
        self.assertEqual(report_out.short_source("a.csv + b.json"), "a.csv, b.json")


class K6Prom(unittest.TestCase):
    def test_time_and_selector(self):
        self.assertEqual(k6prom.parse_time(str(T0)), T0)
        self.assertEqual(k6prom.parse_time("2026-01-01T00:00:00Z"), T0)
        self.assertRaises(InputError, k6prom.parse_time, "yesterday")
        self.assertEqual(k6prom.selector("k6_x", 'testid="t"', "", 'stage="s01"'),
                         'k6_x{testid="t",stage="s01"}')


# ------------------------------------------------------------------------------- findings

class Findings(unittest.TestCase):
    FIGURES = {"cpu_per_call": {"direct": 66.0, "virtual": 100.0},
               "grid_p99": {"direct": 3.0, "virtual": 3.0},
               "plateau": {"direct": 1040.0, "virtual": 1000.0},
               "ramp_p99": {"direct": {"1.2": 700.0}, "virtual": {"1.2": 800.0},
                            "direct-drain": {"1.2": 250.0}},
               "ramp_goodput": {"direct": {"1.2": 1000.0}, "direct-drain": {"1.2": 1010.0}},
               "stream_plateau": {"direct": 7800.0}, "stream_top_p99": {"direct": 100.0,
                                                                        "virtual": 180.0},
               "stream_top_shed": {"direct": 10.0, "virtual": 300.0}}

    def test_verdicts_of_a_run(self):
        found = {f["id"]: f for f in F.compute(self.FIGURES, "flat")}
        self.assertEqual(found["F1"]["verdict"], "reproduced")   # 0.66 against 0.66
        self.assertEqual(found["F2"]["verdict"], "not")          # no convoy: 1.0
        self.assertEqual([p["verdict"] for p in found["F3"]["parts"]],
                         ["reproduced", "in direction"])
        self.assertEqual(found["F3"]["verdict"], "in direction", "the weakest part's")
        self.assertEqual([p["verdict"] for p in found["F4"]["parts"]],
                         ["reproduced", "reproduced"])
        self.assertEqual(found["F5"]["verdict"], "reproduced")
        for f in found.values():
            self.assertEqual(f["variant"], "flat")
            for p in f["parts"]:
                self.assertEqual(p["verdict"], F.verdict(p["rule"], p["published"],
                                                         p["measured"], p["noise"]))

    def test_against_the_witness(self):
        """echod's parts against grpc-java's of the same run: echod over grpc-java within the
        part's tolerance matches, outside differs, a part either lacks is not measured, one
        whose grpc-java arm was flagged not judged (its would-be figure beside echod's); a
        finding is its weakest part's; F4p, which the witness never runs, is left out."""
        echod = F.compute(self.FIGURES, "flat")
        java = F.compute(dict(self.FIGURES, cpu_per_call={"direct": 66.0, "virtual": 85.0},
                              plateau={"direct": 1040.0, "virtual": 1030.0},
                              stream_top_p99={"direct": 100.0}), "witness:grpc-java")
        java[3]["not_judged"] = {"arms": ["java-direct-drain"], "verdict": "reproduced",
                                 "parts": [java[3]["parts"][0]["figure"]],
                                 "measured": {"F4.p99": 0.30}}
        rows = {r["id"]: r for r in F.against(echod + [{"id": "F4p", "parts": []}], java)}
        self.assertEqual(list(rows), ["F1", "F2", "F3", "F4", "F5"])
        # F1: 0.66 against 0.78 (ratio 0.85: beyond ±0.10); F2 1.0 against 1.0
        self.assertEqual((rows["F1"]["verdict"], rows["F2"]["verdict"]), ("differs", "matches"))
        self.assertAlmostEqual(rows["F1"]["parts"][0]["ratio"], (66 / 100) / (66 / 85))
        # F3's plateau 1.04 against 1.01 is within ±0.05, its p99 the same figures
        self.assertEqual([p["verdict"] for p in rows["F3"]["parts"]], ["matches", "matches"])
        self.assertEqual([p["verdict"] for p in rows["F4"]["parts"]], ["not judged", "matches"])
        self.assertAlmostEqual(rows["F4"]["parts"][0]["java"], 0.30)
        self.assertEqual(rows["F4"]["parts"][0]["java_verdict"], "not judged")
        self.assertEqual(rows["F4"]["verdict"], "not judged")
        self.assertEqual([p["verdict"] for p in rows["F5"]["parts"]],
                         ["matches", "not measured", "matches"])
        self.assertEqual(rows["F5"]["verdict"], "not measured")
        self.assertEqual(F.against_part("F5.shed", 30.0, 16.0), (1.875, "matches"))
        self.assertEqual(F.against_part("F4.goodput", 1.06, 1.0)[1], "differs")
        md = "\n".join(F.against_table(list(rows.values())))
        self.assertIn("| 0.66 | reproduced | 0.85 | differs (tolerance ±0.1) (**differs**) |", md)
        self.assertIn("| not measured |\n", md)

    def test_mux_figures(self):
        """The multiplexed shape's ratios from each arm's closed and open steps (study.mux),
        and echod's judged against grpc-java's (arms by role); a failed step gives none."""
        from echodlib.study import mux

        def step(stage, frac, ok, p99, failed=0):
            return {"stage": stage, "fraction": frac, "ok": ok, "duration_s": 2.0,
                    "p99_ms": p99, "failed": failed}

        def arm(closed, top_ok, top_p99):
            return {"mux": {"closed": step("closed", None, closed, 50.0),
                            "open": [step("open 1.2x", 1.2, top_ok, top_p99)]}}
        echod = {"direct": arm(2000, 1900, 400.0), "virtual": arm(1800, 1700, 500.0),
                 "direct-drain": arm(2000, 1950, 360.0)}
        figs = mux.mux_figures(echod)
        self.assertEqual([(f["title"], round(f["value"], 3)) for f in figs], [
            ("closed-loop capacity, virtual / direct", 0.9),
            ("p99, direct-drain / direct at 1.2x", 0.9),
            ("goodput, direct-drain / direct at 1.2x", round(1950 / 1900, 3))])
        java = {"java-direct": arm(2000, 1900, 400.0), "java-virtual": arm(1300, 1200, 900.0),
                "java-direct-drain": arm(2000, 2100, 260.0)}
        names = {"direct": "java-direct", "virtual": "java-virtual",
                 "direct-drain": "java-direct-drain"}
        rows = mux.against(figs, mux.mux_figures(java, names))
        self.assertEqual([r["verdict"] for r in rows], ["differs", "differs", "differs"])
        self.assertEqual([r["verdict"] for r in mux.against(figs, figs)], ["matches"] * 3)
        self.assertEqual([r["verdict"] for r in mux.against(
            figs, mux.mux_figures(java, names), ["direct-drain"])],
            ["differs", "not judged", "not judged"])
        echod["virtual"]["mux"]["closed"]["failed"] = 3
        self.assertIsNone(mux.mux_figures(echod)[0]["value"])

    def test_mux_rounds(self):
        """An open step's rounds: the figure is the median of its ratios round by round, with
        their range; echod's differs from grpc-java's only where the ranges are apart too."""
        from echodlib.study import mux

        def arm(oks):
            return {"mux": {"closed": None, "open": [
                {"stage": "open 1.2x", "fraction": 1.2, "round": i + 1, "ok": ok,
                 "duration_s": 10.0, "p99_ms": 100.0, "failed": 0, "conns": 32, "streams": 56,
                 "offered": 477, "p50_ms": 50.0, "cpu_us_per_call": 2500}
                for i, ok in enumerate(oks)]}}
        # the drain answers a connection at a time: its rounds agree; direct's lose a pass
        echod = {"direct-drain": arm([3960, 3950, 3960]), "direct": arm([3740, 3330, 3860])}
        g = mux.mux_figures(echod)[2]
        self.assertEqual(g["title"], "goodput, direct-drain / direct at 1.2x")
        self.assertEqual([round(r, 3) for r in g["rounds"]], [1.059, 1.186, 1.026])
        self.assertAlmostEqual(g["value"], 3960 / 3740)
        self.assertEqual([round(x, 3) for x in g["range"]], [1.026, 1.186])
        self.assertEqual(g["terms"], (396.0, 374.0))
        # grpc-java's rounds of one process: 1.43, 1.40, 1.01
        java = {"java-direct-drain": arm([3700, 3700, 3710]),
                "java-direct": arm([2590, 2650, 3675])}
        names = {"direct": "java-direct", "direct-drain": "java-direct-drain"}
        jg = mux.mux_figures(java, names)
        row = mux.against(mux.mux_figures(echod), jg)[2]
        self.assertEqual(row["verdict"], mux.WITHIN_SPREAD)
        self.assertIn("| 1.06 (1.03-1.19) | 1.40 (1.01-1.43) | 0.76 | within the spread |",
                      "\n".join(mux.against_table([row])))
        # grpc-java's direct flagged: not judged, with what the same rule would read
        flagged = mux.against(mux.mux_figures(echod), jg, ["direct"])[2]
        self.assertEqual((flagged["verdict"], flagged["would_read"]), ("not judged", mux.WITHIN_SPREAD))
        self.assertIn("| 0.76 | not judged (it would read within the spread) |",
                      "\n".join(mux.against_table([flagged])))
        # apart beyond the tolerance in every round: differs; one round inside the other's
        # range is within it; one round each has no spread
        far = {"java-direct-drain": arm([3700] * 3), "java-direct": arm([2500, 2550, 2600])}
        self.assertEqual(mux.against(mux.mux_figures(echod),
                                     mux.mux_figures(far, names))[2]["verdict"], "differs")
        one = {"direct-drain": arm([3960]), "direct": arm([3330])}
        self.assertEqual(mux.against(mux.mux_figures(one), jg)[2]["verdict"], mux.WITHIN_SPREAD)
        jone = {"java-direct-drain": arm([3700]), "java-direct": arm([2590])}
        self.assertEqual(mux.against(mux.mux_figures(one), mux.mux_figures(jone, names))[2][
            "verdict"], "differs")
        # a failed round is left out of the median and the range
        echod["direct"]["mux"]["open"][1]["failed"] = 5
        self.assertEqual(mux.mux_figures(echod)[2]["rounds"][1], None)
        self.assertEqual([round(x, 3) for x in mux.mux_figures(echod)[2]["range"]],
                         [1.026, 1.059])
        rows = mux.steps_table(echod, ["direct"])
        self.assertEqual([r.split(" | ")[1] for r in rows[2:]],
                         ["open 1.2x, round 1", "open 1.2x, round 2", "open 1.2x, round 3"])

    def test_mux_steps_table(self):
        """A step's connections and streams from its own fields; a failed step says so."""
        from echodlib.study import mux
        ok = {"stage": "closed", "conns": 32, "streams": 8, "offered": None, "ok": 800,
              "duration_s": 2.0, "p50_ms": 5.0, "p99_ms": 9.0, "cpu_us_per_call": 2500}
        failed = dict(drivers.failed_step("h2load", 440, 2, "boom"), stage="open 1.1x",
                      conns=32, streams=37)
        rows = mux.steps_table({"direct": {"mux": {"closed": ok, "open": [failed]}},
                                "virtual": {}}, ["direct", "virtual"])
        self.assertEqual([r.split(" | ")[1:4] for r in rows[2:]],
                         [["closed", "32 x 8", "closed"], ["open 1.1x", "32 x 37 (failed)", "440"]])

    def test_study_caps(self):
        """Little's law on the study's top step: direct 1,993.9 ms x 2,140/s = 4,267 calls,
        1.994 s of its capacity; the drain run 717.1 ms x 2,137/s = 1,532, 0.716 s."""
        self.assertAlmostEqual(F.STUDY_CAP_CALLS["direct"], 4266.946)
        self.assertAlmostEqual(F.STUDY_CAP_CALLS["direct-drain"], 1532.4427)
        self.assertAlmostEqual(F.STUDY_CAP_S["direct"], 1.9939)
        self.assertEqual((F.cap_key(F.STUDY_CAP_S["direct-drain"]), F.cap_text(1.9939),
                          F.cap_text(F.STUDY_CAP_S["direct-drain"]), F.cap_text(0.2)),
                         ("0.716", "1.99 s", "0.716 s", "0.2 s"))

    def test_f4_at_matched_and_published_caps(self):
        """A capped run judges F3 and F4 at its cap, and with the study's caps measured adds
        F4p: the drain at 0.716 s against direct at 1.994 s, the caps' own ratio (direct at
        0.716 s against 1.994 s) in its detail, whose product with the drain's at 0.716 s is
        F4p's figure."""
        m = dict(self.FIGURES, regime={"name": "capped", "cap_s": 1.9939,
                                       "published_caps": True},
                 capped_p99={"direct": {"1.994": {"1.2": 2000.0}, "0.716": {"1.2": 800.0}},
                             "direct-drain": {"0.716": {"1.2": 720.0}}},
                 capped_goodput={"direct": {"1.994": {"1.2": 1000.0}},
                                 "direct-drain": {"0.716": {"1.2": 1010.0}}})
        found = F.compute(m, "flat, capped 1.99 s")
        self.assertEqual([f["id"] for f in found], ["F1", "F2", "F3", "F4", "F4p", "F5"])
        f3, f4, f4p = found[2], found[3], found[4]
        self.assertTrue(f3["parts"][0]["figure"].endswith("(every arm capped at 1.99 s)"))
        self.assertIn("direct-drain / direct (every arm capped at 1.99 s)",
                      f4["parts"][0]["figure"])
        self.assertIn("direct-drain capped at 0.716 s, direct at 1.99 s",
                      f4p["parts"][0]["figure"])
        self.assertAlmostEqual(f4p["measured"], 0.36)
        self.assertEqual(f4p["parts"][1]["measured"], 1.01)
        # the study's caps are its published p99s times goodput: identity, never reproduced
        self.assertEqual((f4p["verdict"], f4p["computed"]), ("identity", "reproduced"))
        d = f4p["detail"]
        self.assertEqual((d["cap_only"], d["drain_at_drain_cap"]), (0.4, 0.9))
        self.assertAlmostEqual(d["cap_only"] * d["drain_at_drain_cap"], f4p["measured"])
        self.assertEqual((d["cap_only_verdict"], d["cap_only_computed"]),
                         ("identity", "reproduced"))
        # at matched caps the cap is every arm's: F3 and F4 judged as computed
        for fd in (f3, f4):
            self.assertEqual([p["verdict"] for p in fd["parts"]],
                             [p["computed"] for p in fd["parts"]])
            self.assertEqual([p["basis"] for p in fd["parts"]], [None, None])
        self.assertAlmostEqual(d["cap_only_of_measured"], math.log(0.4) / math.log(0.36))
        self.assertAlmostEqual(d["cap_only_of_published"], math.log(0.4) / math.log(
            717.1 / 1993.9))
        text = tables.published_caps_text(f4p)
        self.assertIn("The caps alone (direct at 0.716 s against direct at 1.99 s) give 0.40, "
                      "identity (would be reproduced)", text)
        self.assertIn("the drain against direct both at 0.716 s gives 0.90", text)
        # an open run, or a capped one without the study's caps: no F4p, F3 and F4 unlabelled
        self.assertEqual([f["id"] for f in F.compute(dict(m, regime={"name": "capped", "cap_s":
                                                                     0.2}), "q")],
                         ["F1", "F2", "F3", "F4", "F5"])
        self.assertEqual(F.compute(dict(m, regime=None), "o")[3]["parts"][0]["figure"],
                         "p99 at 1.2x of capacity, direct-drain / direct")
        # F4p without the drain's ramp: its parts not measured, the caps' own ratio still there
        del m["capped_p99"]["direct-drain"]
        f4p = F.compute(m, "x")[4]
        self.assertEqual((f4p["verdict"], f4p["detail"]["cap_only"]), ("not measured", 0.4))

    # what a verdict rests on: the labels that replace an agreement the run's inputs explain

    MODEL = "model:grpc-java-study"
    CAPPED = {"name": "capped", "cap_s": 1.9939, "published_caps": True}

    def study_caps_run(self, drain_p99=720.0):
        """FIGURES in a capped run at the study's caps (F4p: the drain at 0.716 s)."""
        return dict(self.FIGURES, regime=self.CAPPED,
                    capped_p99={"direct": {"1.994": {"1.2": 2000.0}, "0.716": {"1.2": 800.0}},
                                "direct-drain": {"0.716": {"1.2": drain_p99}}},
                    capped_goodput={"direct": {"1.994": {"1.2": 1000.0}},
                                    "direct-drain": {"0.716": {"1.2": 1010.0}}})

    def test_run_sources(self):
        """Which of a run's inputs came from which published figures."""
        self.assertEqual(F.run_sources(), {"capacity": ["plateau.direct"]})
        full = F.run_sources(self.MODEL, {"call": 2089, "message": 158, "wakeup": 554}, True,
                             self.CAPPED)
        self.assertEqual(sorted(full), ["cap", "capacity", "grid-stalls", "model.low-load",
                                        "model.plateaus", "study-caps"])
        self.assertEqual(full["model.low-load"], ["grid.cpu.direct"])
        self.assertEqual(full["grid-stalls"], ["grid.p99.virtual"])
        self.assertEqual(full["cap"], ["ramp.p99.direct", "plateau.direct"])
        # the preset before its wake-up unit (2026-12-02): its plateaus only
        self.assertEqual(sorted(F.run_sources(self.MODEL, {"call": 3411, "message": 264})),
                         ["capacity", "model.plateaus"])
        # --quick's cap (0.2 s), a cap of calls, every arm at the drain's, an unknown preset
        self.assertNotIn("cap", F.run_sources(regime={"name": "capped", "cap_s": 0.2}))
        self.assertEqual(F.run_sources(regime={"name": "capped", "cap_s": 0.716})["cap"],
                         ["ramp.p99.direct-drain", "peak.direct-drain"])
        self.assertEqual(F.run_sources("model:other", {"call": 1}), F.run_sources())
        # every input and figure named has its words (study.json, study.md)
        for i, keys in full.items():
            self.assertIn(i, F.INPUTS)
            for k in keys:
                self.assertIn(k, F.PUBLISHED)
        for published, inputs in F.RESTS_ON.values():
            for k in published:
                self.assertIn(k, F.PUBLISHED)
            for i, (kind, why) in inputs.items():
                self.assertIn(i, F.INPUTS)
                self.assertIn(kind, (F.IDENTITY, F.FITTED))

    def test_identity_at_the_study_caps(self):
        """F4p's caps are the published p99s times goodput: its p99 part reads identity (what
        it would read beside it), never reproduced; its goodput part is a measurement; a
        finding with an identity part is at best identity."""
        f4p = next(f for f in F.compute(self.study_caps_run(), "flat, capped 1.99 s")
                   if f["id"] == "F4p")
        p99, goodput = f4p["parts"]
        self.assertEqual((p99["verdict"], p99["computed"]), ("identity", "reproduced"))
        self.assertEqual(p99["basis"]["kind"], "identity")
        self.assertEqual(p99["basis"]["inputs"], ["study-caps"])
        self.assertEqual(p99["basis"]["fitted"], ["ramp.p99.direct-drain", "ramp.p99.direct"])
        self.assertEqual((goodput["verdict"], goodput["basis"]), ("reproduced", None))
        self.assertEqual((f4p["verdict"], f4p["computed"]), ("identity", "reproduced"))
        self.assertEqual(F.part_text(p99), "identity (would be reproduced)")
        # a miss stays a miss: the drain far above direct at the study's caps is "not"
        f4p = next(f for f in F.compute(self.study_caps_run(drain_p99=4000.0), "x")
                   if f["id"] == "F4p")
        self.assertEqual((f4p["parts"][0]["verdict"], f4p["verdict"]), ("not", "not"))
        # explicit sources without the study's caps (a run that had none): no label
        f4p = next(f for f in F.compute(self.study_caps_run(), "x", F.run_sources())
                   if f["id"] == "F4p")
        self.assertEqual(f4p["verdict"], "reproduced")

    def test_fitted_in_a_variant(self):
        """F5's stream plateau over the unary one: on the cost model both are fitted (its call
        and message units), so the same figures that are reproduced on the flat cost read
        fitted there, and the finding says so; a fitted part that misses is still not."""
        flat = {f["id"]: f for f in F.compute(self.FIGURES, "flat")}
        src = F.run_sources(self.MODEL)
        model = {f["id"]: f for f in F.compute(self.FIGURES, self.MODEL, src)}
        self.assertEqual(flat["F5"]["parts"][0]["verdict"], "reproduced")
        self.assertEqual(flat["F5"]["verdict"], "reproduced")
        plateau = model["F5"]["parts"][0]
        self.assertEqual((plateau["verdict"], plateau["computed"]), ("fitted", "reproduced"))
        self.assertEqual(plateau["basis"]["fitted"], ["stream.plateau.direct", "plateau.direct"])
        self.assertEqual((model["F5"]["verdict"], model["F5"]["computed"]),
                         ("fitted", "reproduced"))
        self.assertEqual(F.table(list(model.values()))[-3].split(" | ")[-2:],
                         ["fitted (would be reproduced)", "**fitted** |"])
        # in direction is an agreement too; not (the flat cost's 1.0x) is not
        fig = dict(self.FIGURES, stream_plateau={"direct": 2000.0})
        self.assertEqual(F.compute(fig, self.MODEL, src)[-1]["parts"][0]["verdict"], "fitted")
        fig = dict(self.FIGURES, stream_plateau={"direct": 1040.0})
        self.assertEqual(F.compute(fig, self.MODEL, src)[-1]["parts"][0]["verdict"], "not")
        # a finding with a fitted part and a weaker genuine one takes the weaker
        fig = dict(self.FIGURES, stream_top_shed={"direct": 10.0, "virtual": 30.0})
        f5 = F.compute(fig, self.MODEL, src)[-1]
        self.assertEqual([p["verdict"] for p in f5["parts"]],
                         ["fitted", "reproduced", "in direction"])
        self.assertEqual(f5["verdict"], "in direction")

    def test_genuine_predictions_keep_their_verdicts(self):
        """Where a run set one term of a ratio (F1 on the cost model: direct's CPU at 10% load;
        F2 with the grid's stalls: the virtual arm's p99) the ratio judges the other term, and
        its verdict stands (partly fitted, said beside it); the parts no input explains keep
        theirs on every variant: reproduced, in direction, not."""
        src = F.run_sources(self.MODEL, None, True, self.CAPPED)
        found = {f["id"]: f for f in F.compute(self.study_caps_run(), self.MODEL, src)}
        f1, f2 = found["F1"]["parts"][0], found["F2"]["parts"][0]
        self.assertEqual((f1["verdict"], f1["basis"]["kind"]), ("reproduced", "partly fitted"))
        self.assertEqual((f1["basis"]["fitted"], f1["basis"]["predicted"]),
                         (["grid.cpu.direct"], ["grid.cpu.virtual"]))
        self.assertEqual(F.part_text(f1), "reproduced (partly fitted)")
        self.assertEqual((f2["verdict"], f2["basis"]["fitted"]), ("not", ["grid.p99.virtual"]))
        self.assertEqual([p["verdict"] for p in found["F3"]["parts"]],
                         ["reproduced", "in direction"])
        self.assertEqual(found["F3"]["verdict"], "in direction")
        self.assertEqual(found["F4"]["parts"][0]["verdict"], "reproduced")
        self.assertEqual([p["verdict"] for p in found["F5"]["parts"][1:]],
                         ["reproduced", "reproduced"])
        for fd in found.values():
            for p in fd["parts"]:
                if not p["basis"] or p["basis"]["kind"] == "partly fitted":
                    self.assertEqual(p["verdict"], p["computed"], (fd["id"], p["figure"]))
        notes = F.basis_notes(list(found.values()))
        self.assertEqual(len(notes), 4)  # F1, F2, F4p, F5's plateau
        self.assertIn("F1, server CPU per call", notes[0])
        self.assertIn("so the verdict, reproduced, judges virtual threads' CPU at 10% load",
                      notes[0])

    def test_study_md_and_json_say_what_verdicts_rest_on(self):
        """study.md's findings: the run's inputs set from published figures and a note per part
        they touch; study.json's published_inputs (outputs.sources: the run's cost variant,
        grid stalls and regime)."""
        class Run:
            class cost:
                units = {"call": 396, "message": 30, "wakeup": 105}

                @staticmethod
                def variant(x):
                    return "model:grpc-java-study", "model"
            x, stalls = 1.0, object()
            regime = regimes.Capped(P.Plan(False), published_caps=True)
            cap = 400.0
        src = outputs.sources(Run)
        self.assertEqual(sorted(src), ["cap", "capacity", "grid-stalls", "model.low-load",
                                       "model.plateaus", "study-caps"])
        self.assertEqual(F.describe_sources(src)["grid-stalls"]["published"],
                         ["grid.p99.virtual"])
        found = F.compute(self.study_caps_run(), "m", src)
        md = "\n".join(tables.findings_md(found, "model", src))
        self.assertIn("This run's inputs set from published figures: the capacity calibration", md)
        self.assertIn("What the verdicts rest on:\n\n- F1, server CPU per call", md)
        self.assertIn("- F4p, p99 at 1.2x of capacity, direct-drain / direct (direct-drain capped "
                      "at 0.716 s, direct at 1.99 s: the study's runs): identity (would be "
                      "reproduced): ", md)
        self.assertIn("| identity (would be reproduced) | **identity** |", md)
        Run.stalls = None
        Run.regime = regimes.Capped(P.Plan(True))
        self.assertEqual(sorted(outputs.sources(Run)), ["capacity", "model.low-load",
                                                        "model.plateaus"])

    def test_series_apart_from_study_json(self):
        """study.json without the ramps' per-second series, each kept under its path for
        ramp-series.json; the results themselves untouched."""
        res = {"direct": {"ramp": {"series": [{"t": 1}], "steps": [{"series": "a name"}]},
                          "extra_ramps": [{"series": [{"t": 2}]}]}}
        out = {}
        doc = outputs.without_series({"results": res, "quick": True}, "", out)
        self.assertEqual(out, {"results/direct/ramp/series": [{"t": 1}],
                               "results/direct/extra_ramps/0/series": [{"t": 2}]})
        self.assertEqual(doc, {"results": {"direct": {"ramp": {"steps": [{"series": "a name"}]},
                                                      "extra_ramps": [{}]}}, "quick": True})
        self.assertEqual(res["direct"]["ramp"]["series"], [{"t": 1}])

    def test_weakest_order(self):
        self.assertEqual(F.weakest(["reproduced", "fitted"]), "fitted")
        self.assertEqual(F.weakest(["reproduced", "identity"]), "identity")
        self.assertEqual(F.weakest(["identity", "fitted"]), "identity")
        self.assertEqual(F.weakest(["fitted", "in direction"]), "in direction")
        self.assertEqual(F.weakest(["identity", "not"]), "not")

    def test_relabel_a_run_from_before_the_rule(self):
        """A study.json written before the rule (its F4p 'reproduced', no keys, no computed):
        relabel() judges it again, as merge does."""
        old = F.compute(self.study_caps_run(), "model:grpc-java-study, capped 1.99 s")
        for fd in old:
            fd["verdict"] = F.weakest([p["computed"] for p in fd["parts"]])
            fd.pop("computed")
            for p in fd["parts"]:
                p["verdict"] = p.pop("computed")
                del p["key"], p["basis"]
            if fd["id"] == "F4p":
                fd["detail"]["cap_only_verdict"] = fd["detail"].pop("cap_only_computed")
        self.assertEqual(old[4]["verdict"], "reproduced")
        src = F.run_sources(self.MODEL, None, False, self.CAPPED)
        new = {f["id"]: f for f in F.relabel(old, src)}
        self.assertEqual((new["F4p"]["verdict"], new["F4p"]["detail"]["cap_only_verdict"]),
                         ("identity", "identity"))
        self.assertEqual(new["F5"]["parts"][0]["verdict"], "fitted")
        self.assertEqual(new["F5"]["parts"][0]["key"], "F5.plateau")
        self.assertEqual(new["F1"]["parts"][0]["basis"]["kind"], "partly fitted")
        self.assertEqual(new["F2"]["parts"][0]["basis"], None)  # no stalls in this run
        self.assertEqual(F.relabel(F.relabel(old, src), src), F.relabel(old, src))

    def test_merge_and_tables(self):
        a = F.compute(self.FIGURES, "flat")
        b = F.compute({}, "model:x")
        merged = F.merge([("flat", a), ("model:x", b)])
        self.assertEqual([m["id"] for m in merged], ["F1", "F2", "F3", "F4", "F5"])
        self.assertEqual(merged[0]["variants"]["model:x"]["verdict"], "not measured")
        rows = F.merged_table(merged, ["flat", "model:x"])
        self.assertIn("| flat | verdict | model:x | verdict |", rows[0])
        self.assertTrue(rows[2].endswith("| 0.66 | reproduced (**reproduced**) | - | "
                                         "not measured (**not measured**) |"), rows[2])
        # a fitted part says what it would have read, beside its finding's verdict
        m = F.compute(self.FIGURES, self.MODEL, F.run_sources(self.MODEL))
        rows = F.merged_table(F.merge([("flat", a), (self.MODEL, m)]), ["flat", self.MODEL])
        self.assertTrue(rows[-3].endswith("| 7.38 | 7.50 | reproduced (**reproduced**) | 7.50 | "
                                          "fitted (would be reproduced) (**fitted**) |"),
                        rows[-3])
        table = F.table(a)
        self.assertTrue(table[2].startswith("| **F1** directExecutor() costs less CPU"))
        # a run with F4p after one without: F4p next to F4 all the same
        c = F.compute(dict(self.FIGURES, regime={"name": "capped", "cap_s": 1.9939,
                                                 "published_caps": True}), "capped")
        merged = F.merge([("flat", a), ("capped", c)])
        self.assertEqual([m["id"] for m in merged], ["F1", "F2", "F3", "F4", "F4p", "F5"])
        self.assertNotIn("flat", merged[4]["variants"])


# ------------------------------------------------------------------------------- study

class Plan(unittest.TestCase):
    def test_quick_full_top_and_step_seconds(self):
        q = P.Plan(True)
        self.assertEqual((q.ramp_fractions, q.stream_fractions, q.stream_counts),
                         ([0.4, 1.2], [0.6, 1.2], [20]))
        self.assertEqual((q.ramp_s, q.slice_s, q.fixed_s), (2, 1, 2))
        full = P.Plan(False)
        self.assertEqual(full.ramp_fractions, P.RAMP_FRACTIONS)
        self.assertEqual(full.stream_fractions, [0.3, 0.6, 0.9, 1.2])
        self.assertEqual(full.slice_s, 3)
        self.assertEqual(P.Plan(False, top=1.45).ramp_fractions[-4:], [1.2, 1.3, 1.4, 1.45])
        self.assertEqual(P.Plan(False, top=1.5).stream_fractions[-1], 1.5)
        s = P.Plan(True, step_s=3)
        self.assertEqual((s.ramp_s, s.stream_s, s.fixed_s, s.slice_s), (3, 3, 3, 1))
        # the capped regime's full run: the study's 2-minute steps; --quick and --step-seconds
        # as in the open model
        c = P.Plan(False, regime="capped")
        self.assertEqual((c.ramp_s, c.slice_s, c.stream_s, c.fixed_s), (120, 24, 10, 30))
        # the multiplexed shape's open steps are the open model's whatever the regime
        self.assertEqual((c.mux_s, q.mux_s, s.mux_s), (15, 2, 3))
        self.assertEqual(P.Plan(True, regime="capped").ramp_s, 2)
        self.assertEqual(P.Plan(False, step_s=10, regime="capped").ramp_s, 10)

    def test_rates_and_estimate(self):
        q = P.Plan(True)
        self.assertEqual(q.ramp_rates(500), [200, 600])
        self.assertEqual(q.stream_rates(1000), [600, 1200])
        self.assertEqual(P.Plan(False).stream_rates(333), [100, 200, 300, 400])
        # calibration (up to two rounds of 2 + 1 s) and per arm: 2 x 2 s fixed, 1 s probe, 2 x 2 s
        # ramp, 2 x 1 s streams, and the ramp's set-up
        self.assertEqual(q.estimate_s(2, ramp_setup_s=4.0), 2 * 3 + 2 * 15)
        # an extra ramp: its steps and set-up
        self.assertEqual(q.estimate_s(2, 4.0, extra_ramps=2), 2 * 3 + 2 * 15 + 2 * (4 + 4))
        # --mux: a closed loop as long as a grid step, then the open steps from 1.1x (1.2x)
        self.assertEqual(q.estimate_s(2, 4.0, mux=True), 2 * 3 + 2 * (15 + 2 + 2))
        # each open step of a full run's three rounds (--mux-rounds sets them)
        f = P.Plan(False, step_s=10)
        self.assertEqual((f.mux_rounds, q.mux_rounds, P.Plan(True, mux_rounds=2).mux_rounds),
                         (3, 1, 2))
        self.assertEqual(f.estimate_s(1, mux=True) - f.estimate_s(1), 30 + 2 * 3 * 10)
        self.assertEqual(sorted(q.as_dict()), ["fixed_s", "mux_rounds", "mux_s",
                                               "ramp_fractions", "ramp_s", "slice_s",
                                               "stream_fractions", "stream_s"])


class OpenModel(unittest.TestCase):
    def test_backlog(self):
        self.assertEqual(regimes.backlog_peak([100, 200, 300], 10, 200, past=0.0), 3000)
        self.assertAlmostEqual(regimes.backlog_peak([100, 200, 300], 10, 200, 0.97, 0.0), 3060)
        self.assertEqual(regimes.backlog_peak([100, 300, 100], 10, 200), 1000,
                         "drains below capacity, the peak stays")

    def test_vus_for_quick(self):
        """--quick at 500 calls/s: ~1,460 VUs an arm (docs/study-load.md)."""
        om = regimes.OpenModel(P.Plan(True), 1000)
        self.assertEqual(om.needed([200, 600], 500), 1460)
        r = om.ramp([200, 600], 500)
        self.assertEqual((r.vus, r.needed, r.sized_for, r.timeout_s, r.connect_s,
                          r.warmup_rate), (1000, 1460, 500, 16, 3, 250))
        self.assertEqual(r.env(), {"VUS": "1000", "MAX_VUS": "1000", "PRECONNECT": "1",
                                   "CONNECT_SECONDS": "3", "CALL_TIMEOUT": "16s",
                                   "WARMUP_RATE": "250"})
        self.assertEqual(r.setup_s(), 14.0)
        self.assertEqual(om.setup_s(1000), 8.0)
        full = regimes.OpenModel(P.Plan(False), 100000)
        self.assertEqual((full.warmup_rate(10000), full.ramp([100], 100).connect_s), (200, 5))

    def test_go_env_and_budget(self):
        self.assertEqual(regimes.k6_go_env({"GOGC": "50"}, 1 << 23), {})
        self.assertEqual(regimes.k6_go_env({}, 8 * 1024 * 1024),
                         {"GOGC": "off", "GOMEMLIMIT": "6144MiB"})
        vus, why = regimes.vu_budget(1000, {"GOMEMLIMIT": "6144MiB"}, {"fds": 100000})
        self.assertEqual(vus, 4721)
        self.assertIn("GOMEMLIMIT=6144MiB with 1000 calls", why)
        self.assertEqual(regimes.vu_budget(0, {}, {"fds": 100000}, 4000000)[0], 1698)
        self.assertEqual(regimes.vu_budget(0, {}, {"fds": 50}, 4000000), (100, "fds"))

    def test_problems(self):
        om = regimes.OpenModel(P.Plan(True), 1000)
        ok = {"sent_ratio": 0.99, "fraction": 0.4}
        short = {"sent_ratio": 0.9, "fraction": 1.2, "offered": 600, "dropped": 120,
                 "busy_vus_max": 1000, "k6_cores": 0.95, "late_connects": 0}
        res = {"a": {"ramp": [ok, short], "ramp_run": {"vus": 1000, "vus_needed": 1460},
                     "streams": [{"streams": 20, "steps": [{"kept_ratio": 0.5, "offered": 600},
                                                           {"kept_ratio": None}]}]}}
        p = om.problems(res, ["a"])
        self.assertEqual(len(p), 2, p)
        self.assertEqual(p[0], "a, ramp 1.2x (600/s): sent 0.900 of the offered calls, k6 "
                               "dropped 120 iterations: all 1000 VUs busy (the backlog needed "
                               "1460); k6 used 0.95 of its core")
        self.assertIn("sent or shed 0.500", p[1])
        self.assertTrue(om.kept(0.97) and not om.kept(None))


class CappedRegime(unittest.TestCase):
    def test_cap_in_seconds_or_calls(self):
        full = regimes.Capped(P.Plan(False, regime="capped"), 20000)
        self.assertEqual(full.cap(1000.0), (1994, 1.9939))
        self.assertEqual(full.cap(1000.0, F.STUDY_CAP_S["direct-drain"])[0], 716)
        self.assertEqual((full.label(), full.garbage_calls([1000])), ("capped 1.99 s", 0))
        quick = regimes.Capped(P.Plan(True, regime="capped"), 1000)
        self.assertEqual((quick.cap(500.0), quick.label()), ((100, 0.2), "capped 0.2 s"))
        calls = regimes.Capped(P.Plan(True, regime="capped"), 1000, cap_calls=300)
        self.assertEqual((calls.cap(500.0), calls.label()), ((300, 0.6), "capped 300 calls"))
        self.assertEqual(regimes.Capped(P.Plan(True), cap_s=0.5).cap(400.0), (200, 0.5))

    def test_sizing_is_the_cap(self):
        """maxVUs = preAllocatedVUs = the cap, whatever the arm serves; the deadline from it."""
        quick = regimes.Capped(P.Plan(True, regime="capped"), 1000)
        r = quick.ramp([200, 600], 450.0, 500.0)
        self.assertEqual((r.vus, r.needed, r.sized_for, r.timeout_s, r.cap_calls, r.cap_s),
                         (100, 100, 450.0, 10, 100, 0.2))
        self.assertEqual((r.env()["VUS"], r.env()["MAX_VUS"]), ("100", "100"))
        self.assertEqual(r.fields(), {"vus": 100, "vus_needed": 100, "vus_sized_for": 450.0,
                                      "call_timeout_s": 10, "regime": "capped",
                                      "cap_calls": 100, "cap_s": 0.2})
        self.assertEqual(quick.ramp([200], 450.0, 500.0, 0.7).cap_calls, 350)
        self.assertEqual(quick.needed([200, 600], 500.0), 100)
        self.assertEqual(regimes.OpenModel(P.Plan(True), 1000).ramp([200, 600], 500).fields()[
            "regime"], "open")

    def test_extra_caps(self):
        """--published-caps: the drain at the study's 0.716 s, direct at it too and at
        1.994 s, each unless the run's own cap is that one."""
        plan = P.Plan(False, regime="capped")
        run = regimes.Capped(plan, 20000, published_caps=True)
        lo, hi = F.STUDY_CAP_S["direct-drain"], F.STUDY_CAP_S["direct"]
        self.assertEqual([run.extra_caps(a, 1000.0) for a in ("direct", "direct-drain",
                                                              "virtual")], [[lo], [lo], []])
        self.assertEqual(run.needed([1200], 1000.0), 1994)
        at_drain = regimes.Capped(plan, 20000, cap_s=lo, published_caps=True)
        self.assertEqual([at_drain.extra_caps(a, 1000.0) for a in ("direct", "direct-drain")],
                         [[hi], []])
        self.assertEqual(at_drain.needed([1200], 1000.0), 1994, "direct's extra ramp")
        self.assertEqual(regimes.Capped(plan, 20000).extra_caps("direct", 1000.0), [])

    def test_problems(self):
        """Past the cap or k6 out of its core is a problem, in any ramp of an arm; drops are
        the regime."""
        quick = regimes.Capped(P.Plan(True, regime="capped"), 1000)

        def step(frac, busy, cores, dropped=0):
            return {"fraction": frac, "offered": 500 * frac, "busy_vus_max": busy,
                    "k6_cores": cores, "dropped": dropped, "sent_ratio": 0.8}
        run = {"cap_calls": 100}
        res = {"direct": {"ramp": [step(0.4, 3, 0.2), step(1.2, 100, 0.5, dropped=400)],
                          "ramp_run": run, "streams": [],
                          "extra_ramps": [{"name": "direct@0.716s", "ramp_run": {"cap_calls": 50},
                                           "ramp": [step(1.2, 51, 0.95)]}]}}
        self.assertEqual(quick.problems(res, ["direct"]), [
            "direct@0.716s, ramp 1.2x (600/s): 51 VUs busy, past the cap of 50",
            "direct@0.716s, ramp 1.2x (600/s): k6 used 0.95 of its core (at most 0.90: the step "
            "measured k6, not the server)"])
        self.assertEqual([n for n, _, _ in regimes.ramps(res["direct"], "direct")],
                         ["direct", "direct@0.716s"])
        # a step whose server's CPU others took (pinned: other processes, steal), in the grid
        # or a ramp; 10% is the limit, None (a quota) is no reading
        res["direct"]["fixed"] = [{"driver": "k6 (constant-arrival-rate)", "offered": 50,
                                   "server_cpu_other": 0.25}]
        res["direct"]["ramp"][0]["server_cpu_other"] = 0.10
        res["direct"]["ramp"][1]["server_cpu_other"] = None
        res["direct"]["extra_ramps"][0]["ramp"][0]["server_cpu_other"] = 0.12
        self.assertEqual(quick.problems(res, ["direct"])[2:], [
            "direct, grid k6 (50/s): other processes or the host took 25% of the server's CPU "
            "(at most 10%: the step measured the machine, not the server)",
            "direct@0.716s, ramp 1.2x (600/s): other processes or the host took 12% of the "
            "server's CPU (at most 10%: the step measured the machine, not the server)"])
        self.assertAlmostEqual(server.other_share(9.0, 7.5, 10.0), 0.15)
        self.assertEqual(server.other_share(7.0, 7.5, 10.0), 0.0)
        self.assertIsNone(server.other_share(None, 7.5, 10.0))


class Costs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="echodlib-cost-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def preset(self, text):
        path = os.path.join(self.tmp, "preset.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_flat(self):
        c = Cost()
        self.assertEqual((c.name, c.sets(100), c.per_call(100), c.stream_capacity(100, 500)),
                         ("flat", ["work.defaults.cpu_us=100"], 100, 500))
        self.assertEqual((c.first(2000), c.next(1990, 2000, 2010), c.describe(7)),
                         (1990, 1980, "7 µs"))
        self.assertEqual(c.variant(100)[0], "flat")
        self.assertIsNone(c.relpath())

    def test_model(self):
        c = Cost(self.preset("work:\n  model:\n    enabled: true\n    call_cpu_us: 100\n"
                             "    step_cpu_us: 2\n    handoff_cpu_us: 10\n"
                             "    handoff_wake_cpu_us: 30\n    message_cpu_us: 20\n"
                             "    wakeup_cpu_us: 40\n    background_millicores: 50\n"))
        self.assertEqual(c.name, "model:preset")
        self.assertEqual(c.scaled(0.5), {"call": 50, "step": 1, "handoff": 5, "handoff_wake": 15,
                                         "handoff_wake_loop": 0, "message": 10, "wakeup": 20,
                                         "wakeup_short": 0})
        # the background is a share of the CPU: the same at any scale
        self.assertEqual(c.sets(0.5), ["work.defaults.cpu_us=0", "work.model.enabled=true",
                                       "work.model.call_cpu_us=50", "work.model.step_cpu_us=1",
                                       "work.model.handoff_cpu_us=5",
                                       "work.model.handoff_wake_cpu_us=15",
                                       "work.model.handoff_wake_loop_cpu_us=0",
                                       "work.model.message_cpu_us=10",
                                       "work.model.wakeup_cpu_us=20",
                                       "work.model.wakeup_short_cpu_us=0",
                                       "work.model.background_millicores=50"])
        self.assertEqual((c.per_call(0.5), c.per_message(0.5), c.slope()), (76, 21, 152))
        self.assertAlmostEqual(c.stream_capacity(0.5, 400), 400 * 76 / 21.0)
        self.assertEqual(c.describe(0.5), "x0.500")
        self.assertRaisesRegex(ValueError, "no enabled work.model", Cost,
                               self.preset("work:\n  model:\n    enabled: false\n"))

    def test_model_wake_by_sleep(self):
        """A preset that prices a wake-up by the loop's sleep: the short price scales as a unit
        does, the full sleep and the exponent are a time and a shape, the same at any scale."""
        c = Cost(self.preset("work:\n  model:\n    enabled: true\n    call_cpu_us: 100\n"
                             "    wakeup_cpu_us: 300\n    wakeup_short_cpu_us: 40\n"
                             "    wakeup_full_sleep_us: 50000\n    wakeup_sleep_exponent: 0.45\n"))
        sets = c.sets(0.5)
        self.assertIn("work.model.wakeup_cpu_us=150", sets)
        self.assertIn("work.model.wakeup_short_cpu_us=20", sets)
        self.assertEqual(sets[-2:], ["work.model.wakeup_full_sleep_us=50000",
                                     "work.model.wakeup_sleep_exponent=0.45"])

    def test_model_over_flat(self):
        """A preset of measured machinery charged as it is, x flat work in the handler on top:
        the calibration turns x alone, a µs of x a µs of the call."""
        c = Cost(self.preset("work:\n  model:\n    enabled: true\n    call_cpu_us: 8\n"
                             "    handoff_cpu_us: 7\n    handoff_wake_cpu_us: 8\n"
                             "    message_cpu_us: 7\n    wakeup_cpu_us: 91\n"
                             "    background_millicores: 2\n"), scale="flat")
        self.assertEqual(c.name, "model:preset+flat")
        self.assertEqual(c.scaled(2000), {"call": 8, "step": 0, "handoff": 7, "handoff_wake": 8,
                                          "handoff_wake_loop": 0, "message": 7, "wakeup": 91,
                                          "wakeup_short": 0})
        self.assertEqual(c.sets(2000)[:2], ["work.defaults.cpu_us=2000", "work.model.enabled=true"])
        self.assertIn("work.model.wakeup_cpu_us=91", c.sets(2000))
        self.assertEqual((c.per_call(2000), c.per_message(2000), c.slope()), (2022, 2014, 1.0))
        self.assertEqual((c.first(2500), c.next(2468, 2500, 2530), c.describe(2468)),
                         (2468, 2438, "2468 µs over the units"))
        self.assertIn("as measured", c.variant(2000)[1])
        self.assertRaisesRegex(ValueError, "scale 'x'", Cost, None, "x")
        # without a preset there is nothing to charge over: the flat cost
        self.assertEqual(Cost(None, scale="flat").sets(100), ["work.defaults.cpu_us=100"])

    def test_calibration(self):
        """A server whose call costs x + 100 µs: the first guess (x = 1990 for 2,000 µs) is
        4% off, the second lands."""
        seen = []

        def measure(x, i):
            seen.append(x)
            return (x + 100) * 1000 / 1e6, 1000, 450.0
        with contextlib.redirect_stderr(io.StringIO()):
            x, cap, rounds = calibrate(Cost(), 500, 3, measure)
            self.assertEqual((x, cap, seen), (1900, 500.0, [1990, 1900]))
            self.assertEqual(rounds[0]["overhead_us"], 100)
            self.assertEqual(calibrate(Cost(), 500, 3, measure, fixed=1234)[0], 1234)
            self.assertRaisesRegex(RuntimeError, "no server CPU", calibrate, Cost(), 500, 3,
                                   lambda x, i: (0.0, 0, 0.0))


def study_results():
    """Two arms' results as study.json holds them."""
    def fixed(cpu, p99, p50):
        return [{"driver": "k6 (constant-arrival-rate)", "offered": 100, "duration_s": 2.0,
                 "ok": 200, "p50_ms": 1.0, "p99_ms": p99, "cpu_us_per_call": cpu,
                 "cpu_millicores": 200.0, "failed": 0, "cfs": None},
                {"driver": "h2load (--rps)", "offered": 100, "duration_s": 2.0, "ok": 200,
                 "p50_ms": p50, "p99_ms": 9.0, "cpu_us_per_call": cpu, "cpu_millicores": 210.0,
                 "failed": 0, "cfs": None}]

    def ramp(goodput):
        return [{"fraction": x, "offered": 1000 * x, "duration_s": 2.0, "ok": 2000 * x,
                 "answered": g * 2, "p99_ms": 10 * x, "failed": 0}
                for x, g in zip((0.4, 1.2), goodput)]

    def streams(answered):
        return [{"streams": 20, "server_failed": 0, "k6_errors": 0, "k6_error": None, "steps": [
            {"offered": 600, "duration_s": 1.0, "answered": answered[0], "p99_ms": 5.0,
             "dropped": 0, "kept_ratio": 1.0, "failed": 0},
            {"offered": 1200, "duration_s": 1.0, "answered": answered[1], "p99_ms": 50.0,
             "dropped": 100, "kept_ratio": 1.0, "failed": 0}]}]
    return {"direct": {"fixed": fixed(2100, 6.0, 20.0), "ramp": ramp((400, 1000)),
                       "streams": streams((600, 900)),
                       "ramp_summary": {"plateau": 1000.0, "knee": 1200.0, "peak": 1000.0}},
            "virtual": {"fixed": fixed(3000, 3.0, 10.0), "ramp": ramp((400, 950)),
                        "streams": streams((600, 800)),
                        "ramp_summary": {"plateau": None, "knee": None, "peak": 950.0}}}


class StudyFigures(unittest.TestCase):
    def test_measured_figures(self):
        m = figures.measured_figures(study_results(), ["direct", "virtual"], 1000.0, 2000)
        self.assertEqual(m["cpu_per_call"], {"direct": 2100, "virtual": 3000})
        self.assertEqual(m["own_cpu_per_call"], {"direct": 100, "virtual": 1000})
        self.assertEqual(m["grid_p50_h2load"], {"direct": 20.0, "virtual": 10.0})
        self.assertEqual(m["plateau"], {"direct": 1000.0, "virtual": 950.0}, "the peak, no knee")
        self.assertEqual(m["knee"], {"direct": 1.2, "virtual": None})
        self.assertEqual(m["ramp_goodput"]["direct"], {"0.4": 400.0, "1.2": 1000.0})
        self.assertAlmostEqual(m["stream_plateau"]["direct"], 900.0)
        self.assertEqual(m["stream_top_shed"]["direct"], 100.0)
        self.assertEqual(figures.measured_figures(study_results(), ["direct"], 1000.0, 2000,
                                                  flat=False)["own_cpu_per_call"], {})

    def test_old_results_without_fraction_or_answered(self):
        res = study_results()
        for s in res["direct"]["ramp"]:
            del s["fraction"], s["answered"]
        m = figures.measured_figures(res, ["direct"], 1000.0, 2000)
        self.assertEqual(m["ramp_goodput"]["direct"], {"0.4": 400.0, "1.2": 1200.0})

    def test_capped_figures_and_table(self):
        """A capped run's ramps keyed by their cap (its own and the extra ones), and the
        regime's table: a row per step of every ramp with the cap and Little's law on the p99
        in calls and seconds of capacity beside the study's."""
        res = study_results()
        for a in ("direct", "virtual"):
            res[a]["ramp_run"] = {"cap_calls": 2000, "cap_s": 1.9939}
            for s in res[a]["ramp"]:
                s.update(sent_ratio=0.9, sent=1800 * s["fraction"], dropped=200 * s["fraction"],
                         p50_ms=5.0, busy_vus_mean=900.0, busy_vus_max=2000,
                         echod_in_flight_mean=3.0, echod_in_flight_max=9,
                         little_p99_in_flight=1990.0, k6_cores=0.4)
        extra = [dict(s, p99_ms=5 * s["fraction"]) for s in res["direct"]["ramp"]]
        res["direct"]["extra_ramps"] = [{"name": "direct@0.716s", "cap_calls": 716,
                                         "cap_s": 0.716, "ramp": extra,
                                         "ramp_run": {"cap_calls": 716, "cap_s": 0.716}}]
        regime = {"name": "capped", "cap_s": 1.9939, "published_caps": True}
        m = figures.measured_figures(res, ["direct", "virtual"], 1000.0, 2000, regime=regime)
        self.assertEqual(m["regime"], regime)
        self.assertEqual(m["capped_p99"]["direct"], {"1.994": {"0.4": 4.0, "1.2": 12.0},
                                                     "0.716": {"0.4": 2.0, "1.2": 6.0}})
        self.assertEqual(m["capped_goodput"]["virtual"], {"1.994": {"0.4": 400.0, "1.2": 950.0}})
        self.assertEqual(m["ramp_p99"]["direct"], {"0.4": 4.0, "1.2": 12.0}, "its own ramp")
        self.assertEqual(figures.measured_figures(study_results(), ["direct"], 1000.0, 2000)[
            "capped_p99"], {}, "an open run's")
        rows = tables.capped_table(res, ["direct", "virtual"], 1000.0)
        self.assertEqual(len(rows), 2 + 3 * 2)
        self.assertEqual(rows[3], "| direct | 2000 (1.99 s) | 1.2 | 1200 | 2160 | 240 | 1000 | "
                                  "5.00 / 12.00 | 900 / 2000 | 3 / 9 | 1990 (1.99 s) | "
                                  "4267 (1.99 s) | 0.40 |")
        self.assertTrue(rows[4].startswith("| direct@0.716s | 716 (0.716 s) | 0.4 |"), rows[4])
        res["virtual"]["ramp"][1].update(busy_vus_max=2001, k6_cores=0.93)
        self.assertIn("| 900 / 2001 **over the cap** |", tables.capped_table(
            res, ["virtual"], 1000.0)[3])
        self.assertTrue(tables.capped_table(res, ["virtual"], 1000.0)[3].endswith(
            "| 0.93 **k6** |"))

    def test_published(self):
        self.assertEqual(figures.published_p99("direct", 1.2), 1993.9)
        self.assertIsNone(figures.published_p99("direct", 0.5))
        self.assertIsNone(figures.published_p99("cached", 1.2))
        self.assertAlmostEqual(figures.published_in_flight("direct", 1.2), 1.9939 * 2140)
        self.assertAlmostEqual(figures.published_in_flight("direct-drain", 0.2), 0.0096 * 400)

    def test_tables(self):
        res = study_results()
        rows = tables.fixed_table(res, ["direct", "virtual"])
        self.assertEqual(rows[2], "| direct | k6 | 100 | 100 | 1.00 | 6.00 | 2100 | 200 | 0 |")
        self.assertIn("| k6 | direct / virtual | 1.00 | 2.00 | 0.70 |", rows)
        rows = tables.stream_table(res, ["direct"], {"direct": 1000.0})
        self.assertEqual(rows[2], "| direct | 20 | k6 | 600 / 1200 | 5.0 / 50.0 | 900 | 0.90 | "
                                  "0 / 100 | 1.000 | 0 |")
        self.assertIsNone(tables.throttle_table(res, ["direct"], P.Plan(True)))

    def test_call_problems(self):
        res = study_results()
        res["direct"]["fixed"][0].update(failed=2, server_codes={"UNAVAILABLE": 2})
        self.assertEqual(runner.call_problems(res, ["direct", "virtual"]),
                         ["direct, k6 (constant-arrival-rate) at 100/s: 2 calls failed (echod: "
                          "{'UNAVAILABLE': 2})"])

    def test_merge_labels(self):
        tmp = tempfile.mkdtemp(prefix="echodlib-merge-")
        self.addCleanup(shutil.rmtree, tmp, True)
        dirs = []
        for name in ("one", "two"):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            with open(os.path.join(d, "study.json"), "w") as f:
                json.dump({"cost": {"variant": "flat"}, "findings": None,
                           "results": study_results(), "arms": ["direct", "virtual"],
                           "capacity": 1000.0, "cpu_us": 2000}, f)
            dirs.append(d)
        text = merge.merge_runs(dirs, os.path.join(tmp, "out"))
        with open(os.path.join(tmp, "out", "findings.json")) as f:
            self.assertEqual(json.load(f)["variants"], ["flat", "flat (two)"])
        self.assertIn("| flat | verdict | flat (two) | verdict |", text)
        # a run labelled by its regime: its label, and F4p's detail under the table
        with open(os.path.join(dirs[1], "study.json"), "w") as f:
            json.dump({"cost": {"variant": "flat"}, "label": "flat, capped 1.99 s",
                       "findings": F.compute(dict(Findings.FIGURES, regime={
                           "name": "capped", "cap_s": 1.9939, "published_caps": True}),
                           "flat, capped 1.99 s")}, f)
        text = merge.merge_runs(dirs, os.path.join(tmp, "out"))
        self.assertIn("| flat | verdict | flat, capped 1.99 s | verdict |", text)
        self.assertIn("| **F4p** the drain's cut at the study's own caps", text)
        self.assertIn("\nflat, capped 1.99 s: F4p, at the published caps: direct-drain at "
                      "0.716 s against direct at 1.99 s, p99 at 1.2x - (published 0.36).", text)
        # a run written before the rule, its F4p "reproduced" at the study's caps and its F5 on
        # the cost model: merged by the current rule (its sources from its cost and regime)
        found = F.compute(Findings().study_caps_run(), "model:grpc-java-study, capped 1.99 s")
        for fd in found:
            fd["verdict"] = fd.pop("computed")
            for p in fd["parts"]:
                p["verdict"] = p.pop("computed")
                del p["key"], p["basis"]
        self.assertEqual(found[4]["verdict"], "reproduced")
        with open(os.path.join(dirs[1], "study.json"), "w") as f:
            json.dump({"cost": {"variant": "model:grpc-java-study", "units": {
                "call": 2089, "message": 158, "wakeup": 554}}, "grid_stalls": None,
                "label": "model, capped 1.99 s", "regime": Findings.CAPPED,
                "findings": found}, f)
        text = merge.merge_runs(dirs, os.path.join(tmp, "out"))
        with open(os.path.join(tmp, "out", "findings.json")) as f:
            merged = {m["id"]: m for m in json.load(f)["findings"]}
        run = merged["F4p"]["variants"]["model, capped 1.99 s"]
        self.assertEqual((run["verdict"], run["parts"][0]["computed"]), ("identity", "reproduced"))
        self.assertEqual(merged["F5"]["variants"]["model, capped 1.99 s"]["parts"][0]["verdict"],
                         "fitted")
        self.assertIn("identity (would be reproduced) (**identity**)", text)
        self.assertIn("give 0.40, identity (would be reproduced) against the published", text)
        self.assertIn("\n- model, capped 1.99 s: F4p, p99 at 1.2x", text)
        self.assertNotIn("reproduced (**reproduced**) |", text.split("**F4p**")[1].split("\n")[0])
        # a run that says its inputs (study.json's published_inputs): those, not its cost's
        with open(os.path.join(dirs[1], "study.json")) as f:
            doc = json.load(f)
        doc["published_inputs"] = F.describe_sources(F.run_sources())
        with open(os.path.join(dirs[1], "study.json"), "w") as f:
            json.dump(doc, f)
        self.assertEqual(merge.read_run(dirs[1], [])[1][4]["verdict"], "reproduced")

    def test_merge_against_over_runs(self):
        """--merge of runs with a witness: per CPU model, each figure's echod / grpc-java in
        every run, each side's median and range over the runs, and the verdict on the medians
        (within the spread where the runs' ranges meet within the tolerance)."""
        tmp = tempfile.mkdtemp(prefix="echodlib-over-")
        self.addCleanup(shutil.rmtree, tmp, True)

        def run(name, cpu_model, f4, mux_p99, flagged=False, cpu_model_name=None):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            part = {"key": "F4.p99", "figure": "p99 at 1.2x, direct-drain / direct",
                    "echod": f4[0], "java": f4[1],
                    "java_verdict": "not judged" if flagged else "reproduced"}
            doc = {"cpu_model_name": cpu_model_name} if cpu_model_name else {}
            with open(os.path.join(d, "study.json"), "w") as f:
                json.dump(dict(doc, cost={"variant": "flat"}, label="flat", cpu_model=cpu_model,
                               findings=F.compute(Findings.FIGURES, "flat"), witness={
                                   "against": [{"id": "F4", "parts": [part]}],
                                   "mux_against": [{"key": "M.p99", "title": "p99 at 1.2x",
                                                    "echod": mux_p99[0], "java": mux_p99[1],
                                                    "verdict": "matches"}]}), f)
            return d
        quota = "CFS quota of one CPU over both cores (cgroup v1)"
        dirs = [run("q1", quota, (0.58, 0.77), (0.70, 0.70), flagged=True),
                # study.json's cpu_model_name decides, whatever the description says
                run("q2", "a one-CPU limit", (0.92, 0.57), (0.72, 0.71), cpu_model_name="quota"),
                run("p1", "pinned core: the server on CPU 1", (1.30, 0.70), (0.70, 0.71)),
                run("p2", "pinned core: the server on CPU 1", (1.25, 0.72), (0.70, 0.70)),
                os.path.join(tmp, "plain")]
        os.makedirs(dirs[-1])
        with open(os.path.join(dirs[-1], "study.json"), "w") as f:  # no witness: left out
            json.dump({"cost": {"variant": "flat"}, "label": "flat", "cpu_model": "pinned core",
                       "findings": F.compute(Findings.FIGURES, "flat")}, f)
        text = merge.merge_runs(dirs, os.path.join(tmp, "out"))
        with open(os.path.join(tmp, "out", "findings.json")) as f:
            over = json.load(f)["against_over_runs"]
        self.assertEqual((over["quota"]["runs"], over["pinned"]["runs"]),
                         (["q1", "q2"], ["p1", "p2"]))
        q, p = over["quota"]["figures"][0], over["pinned"]["figures"][0]
        # quota: medians 0.75 against 0.67 (1.12, matches)
        self.assertEqual((round(q["echod"], 3), round(q["java"], 3), q["verdict"]),
                         (0.75, 0.67, "matches"))
        # pinned: 1.275 against 0.71, both sides' runs close together: differs
        self.assertEqual(p["verdict"], "differs")
        self.assertEqual(over["pinned"]["figures"][1]["verdict"], "matches")
        self.assertIn("## echod against grpc-java over the runs, quota (2 runs)", text)
        self.assertIn("| p99 at 1.2x, direct-drain / direct | ±0.15 | 0.58 / 0.77* | "
                      "0.92 / 0.57 | 0.75 (0.58-0.92) | 0.67 (0.57-0.77) | 1.12 | matches |",
                      text)
        self.assertIn("| multiplexed: p99 at 1.2x | ±0.15 |", text)
        # one side's median apart beyond the tolerance, the runs' ranges meeting: within it
        rows = merge.over_runs([("a", {"witness": {"mux_against": [
            {"key": "M.goodput", "title": "g", "echod": 1.00, "java": 1.25,
             "verdict": "differs"}]}}), ("b", {"witness": {"mux_against": [
                 {"key": "M.goodput", "title": "g", "echod": 1.28, "java": 1.27,
                  "verdict": "matches"}]}}), ("c", {"witness": {"mux_against": [
                      {"key": "M.goodput", "title": "g", "echod": 1.07, "java": 1.24,
                       "verdict": "differs"}]}})])
        self.assertEqual((round(rows[0]["ratio"], 3), rows[0]["verdict"]),
                         (round(1.07 / 1.25, 3), "within the spread"))


class GridStalls(unittest.TestCase):
    """The grid's stalls: parsed, scaled to a run's direct call, sent as echod's metadata."""

    def test_scaled(self):
        st = stalls.GridStalls.parse(stalls.DEFAULT)
        self.assertEqual((st.fraction, st.ms), (0.02, 65.0))
        # the same 139 direct calls of service time at 2,500 µs a call as at the study's 467
        self.assertEqual(st.us(2500), 347966)
        self.assertEqual(st.headers(467), {"echod-sleep-dist": "stall",
                                           "echod-sleep-stall-fraction": "0.02",
                                           "echod-sleep-stall-us": "65000"})
        self.assertEqual(st.k6_env(467)["WORK_SLEEP_STALL_US"], "65000")
        self.assertIsNone(stalls.GridStalls.parse("none"))
        for bad in ("x", "0.02", "1.5:65", "0.02:-1"):
            self.assertRaises(ValueError, stalls.GridStalls.parse, bad)


class StudyDrivers(unittest.TestCase):
    """The drivers' reading of k6's summaries and of the sampled series, and a Window's
    failures."""

    def test_ramp_step(self):
        doc = {"summary": {"metrics": {
            "echo_sent{stage:s01}": {"values": {"count": 198}},
            "echo_answered{stage:s01}": {"values": {"count": 190}},
            "echo_ok{stage:s01}": {"values": {"count": 198}},
            "grpc_req_duration{stage:s01}": {"values": {"count": 198, "med": 2.0,
                                                        "p(99)": 50.0, "avg": 3.0}},
            "grpc_req_duration{stage:s01,slice:00}": {"values": {"count": 99, "p(99)": 40.0}},
            "grpc_req_duration{stage:s01,slice:01}": {"values": {"count": 99, "p(99)": 60.0}}}}}
        st = {"name": "s01", "offered": 100, "duration_s": 2, "start_s": 5, "slices": 2,
              "slice_s": 1}
        smp = Sampler({})
        smp.samples = [{"t": 1005.0, "echod_cpu": 1.0, "echod_ok": 0, "k6_cpu": 0.5,
                        "k6_busy_vus": 4, "echod_in_flight": 2, "k6_rss_kb": 1024},
                       {"t": 1007.0, "echod_cpu": 1.2, "echod_ok": 200, "k6_cpu": 0.9,
                        "k6_busy_vus": 8, "echod_in_flight": 6, "k6_rss_kb": 2048}]
        s = drivers.ramp_step(doc, st, 0.4, 1000.0, smp, 50, 1100.0)
        self.assertEqual((s["scheduled"], s["sent_ratio"], s["dropped"]), (200, 0.99, 2))
        self.assertAlmostEqual(s["cpu_us_per_call"], 1000.0)
        self.assertAlmostEqual(s["k6_cores"], 0.2)
        self.assertEqual((s["busy_vus_mean"], s["busy_vus_max"], s["k6_rss_mb"]), (6, 8, 2.0))
        self.assertEqual(s["little_p99_in_flight"], 95 * 0.05)
        self.assertEqual([x["p99_ms"] for x in s["slices"]], [40.0, 60.0])
        self.assertEqual([x["t_s"] for x in s["slices"]], [5, 6])
        self.assertEqual((s["t_start"], s["t_end"], s["cfs"]), (1005.0, 1100.0, None))
        self.assertTrue(s["driver"].endswith("50 VUs)"))
        self.assertIsNone(s["dispatch"])  # no dispatch counter sampled

    def test_dispatch_figures(self):
        """Per call answered over the step, and the mean read batch; a table row per step."""
        keys = [k for k, _, _ in server.DISPATCH_COUNTERS]
        smp = Sampler({})
        smp.samples = [dict({"t": 10.0}, **{k: 0 for k in keys}),
                       dict({"t": 12.0}, flush_loop_tail=50, flush_read_complete=200,
                            flush_loop_task=0, read_batches=40, read_batch_conns=200,
                            wakeups_io=30, wakeups_task=0, handoffs_parked=0,
                            handoffs_running=0)]
        d = drivers.dispatch_figures(smp, 10.0, 12.0, 200)
        self.assertEqual((d["flush_loop_tail"], d["flush_read_complete"], d["wakeups_io"],
                          d["read_batch_mean"]), (0.25, 1.0, 0.15, 5.0))
        self.assertIsNone(drivers.dispatch_figures(smp, 10.0, 12.0, 0))
        rows = tables.dispatch_table({"direct-drain": {"ramp": [{"fraction": 0.8,
                                                                 "dispatch": d}]}},
                                     ["direct-drain"])
        self.assertEqual(rows[2], "| direct-drain | 0.8 | 0.25, 1.00, 0.00 | 5.0 | 0.15, 0.00 | "
                                  "0.00, 0.00 |")
        self.assertEqual(tables.dispatch_table({"direct": {"ramp": [{"fraction": 0.8}]}},
                                               ["direct"]), [])
        # the capped regime's extra ramps (the study's own caps) after the arm's own
        rows = tables.dispatch_table({"direct-drain": {
            "ramp": [{"fraction": 0.8, "dispatch": d}],
            "extra_ramps": [{"name": "direct-drain@0.716s", "ramp": [{"fraction": 1.2,
                                                                       "dispatch": d}],
                             "ramp_run": None}]}}, ["direct-drain"])
        self.assertEqual([r.split(" | ")[:2] for r in rows[2:]],
                         [["| direct-drain", "0.8"], ["| direct-drain@0.716s", "1.2"]])

    def test_stream_step(self):
        doc = {"summary": {"metrics": {"echo_sent{stage:s02}": {"values": {"count": 900}},
                                       "echo_dropped{stage:s02}": {"values": {"count": 60}}}}}
        s = drivers.stream_step(doc, {"name": "s02", "offered": 1000, "duration_s": 1})
        self.assertEqual((s["kept_ratio"], s["ok"], s["p99_ms"]), (0.96, 0, None))

    def test_window_failures(self):
        w = Window.__new__(Window)
        w.not_ok = {"CANCELLED": 3, "UNAVAILABLE": 1}
        self.assertEqual(w.failures(5), (1, 3, {"UNAVAILABLE": 1}))
        self.assertEqual(w.failures(2), (4, 0, {"CANCELLED": 3, "UNAVAILABLE": 1}))
        self.assertEqual(drivers.failed_step("k6", 100, 2, "boom")["driver"], "k6 (failed)")

    def test_quiet(self):
        """The grpc-java peer is settled at the first interval its call threads' CPU grew by
        less than QUIET_SHARE of the wall time it took, each interval on its own; a busy peer
        holds it to the deadline."""
        class Fake:
            """The time module's monotonic() and sleep(), and the CPU the peer's call threads
            take while it sleeps: rates[i] cores in the i-th interval, which lasts `overrun`
            times what was asked."""
            def __init__(self, rates, overrun=1.0):
                self.now, self.cpu, self.rates, self.overrun = 0.0, 0.0, list(rates), overrun

            def monotonic(self):
                return self.now

            def sleep(self, s):
                self.cpu += self.rates.pop(0) * s * self.overrun
                self.now += s * self.overrun

        def intervals(rates, deadline=100.0, **kw):
            t = Fake(rates, **kw)
            server.quiet(lambda: t.cpu, deadline, interval=1.0, timer=t)
            return len(rates) - len(t.rates)
        share = server.QUIET_SHARE
        # busy, then quiet: the CPU of the busy intervals does not hold back the quiet one
        self.assertEqual(intervals([1.0, 0.5, 0.5 * share, 1.0]), 3)
        self.assertEqual(intervals([0.0, 1.0]), 1)
        # at the share is still busy
        self.assertEqual(intervals([share, 0.5 * share, 1.0]), 2)
        self.assertEqual(intervals([1.5 * share, 0.9 * share, 1.0]), 2)
        # the share is of the wall time an interval took, not of the one asked for
        self.assertEqual(intervals([0.9 * share, 0.0, 1.0], overrun=2.0), 1)
        # never quiet: back once an interval ends past the deadline
        self.assertEqual(intervals([1.0] * 10, deadline=2.5), 3)


class StudyWitness(unittest.TestCase):
    """bench/study --witness: its options, its findings (grpc-java's default pool in the
    virtual arm's role) and the per-step comparison with echod's counterparts."""

    def wres(self):
        res = study_results()
        return {"java-direct": res["direct"], "java-default": res["virtual"]}

    def test_prepare(self):
        class Args:
            witness = "direct,cached"
            cost = Cost()
            peers_dir = "/nonexistent"
            peers_build = "/tmp/x"
        a = Args()
        self.assertRegex(witness.prepare(a, True), "'cached' is not a grpc-java arm")
        a.witness = "direct,fixed:1"
        self.assertRegex(witness.prepare(a, True), "the grpc-java peer cannot run here: no "
                                                  "grpc-java peer at /nonexistent")
        a.witness, a.cost.units = "direct", {"call": 1}
        self.assertRegex(witness.prepare(a, False), "--model has no meaning")
        a.witness = None
        self.assertIsNone(witness.prepare(a, True))
        self.assertEqual(a.witness, [])

    def test_findings_by_role(self):
        found = witness.findings(self.wres(), 1000.0, 2000)
        self.assertEqual({f["variant"] for f in found}, {witness.LABEL})
        f1 = next(f for f in found if f["id"] == "F1")
        self.assertAlmostEqual(f1["measured"], 2100 / 3000)
        self.assertEqual(next(f for f in found if f["id"] == "F4")["verdict"], "not measured")
        self.assertEqual(witness.role_results({"java-direct": 1})[1], ["direct"])

    def test_comparison(self):
        res = study_results()
        res["cached"] = res.pop("virtual")
        wres = self.wres()
        wres["java-default"]["ramp"][1] = dict(wres["java-default"]["ramp"][1], p99_ms=24.0)
        rows = witness.comparison(res, wres, ["direct", "default", "fixed:1"], P.Plan(True))
        self.assertEqual([(r["witness"], r["echod"], r["step"]) for r in rows], [
            ("java-direct", "direct", "fixed 10% (k6)"), ("java-direct", "direct", "fixed 10% (h2load)"),
            ("java-direct", "direct", "ramp 0.4x"), ("java-direct", "direct", "ramp 1.2x"),
            ("java-default", "cached", "fixed 10% (k6)"), ("java-default", "cached", "fixed 10% (h2load)"),
            ("java-default", "cached", "ramp 0.4x"), ("java-default", "cached", "ramp 1.2x")])
        top = rows[-1]
        self.assertEqual(top["echod_fig"], {"p99_ms": 12.0, "goodput": 950.0, "cpu_us": None})
        self.assertEqual(top["ratio"]["p99_ms"], 2.0)
        self.assertIsNone(top["ratio"]["cpu_us"])
        md = witness.comparison_table(rows)
        self.assertEqual(md[2], "| java-direct | direct | fixed 10% (k6) | 100 | 6.00 | 6.00 | "
                                "1.00 | 100 | 100 | 1.00 | 2100 | 2100 | 1.00 |")
        # a witness arm whose echod counterpart is not in the run: its figures, echod's "-"
        rows = witness.comparison({}, wres, ["default"], P.Plan(True))
        self.assertEqual({r["echod"] for r in rows}, {None})
        self.assertIn("| java-default | - | ramp 1.2x |", witness.comparison_table(rows)[-1])
        # the grid's own peer (with the grid's stalls) did not settle: its grid steps say so
        wrun = {"java-direct": {"warmup": {"settled": True}},
                "java-direct-stalls": {"warmup": {"settled": False}},
                "java-default": {"warmup": {"settled": False}}}
        self.assertEqual(witness.unsettled(wrun), {"java-direct", "java-default"})
        self.assertEqual(witness.unsettled({"java-direct": {"warmup": {"settled": False}},
                                            "java-direct-stalls": {"warmup": {"settled": True}}}),
                         set())
        rows = witness.comparison(res, wres, ["direct"], P.Plan(True), {"java-direct"})
        self.assertEqual(rows[0]["step"], "fixed 10% (k6, JIT not settled)")
        self.assertTrue(rows[1]["step"].endswith(", JIT not settled)"), rows[1]["step"])
        self.assertNotIn("JIT", rows[2]["step"])  # the ramp ran on a settled peer
        pt = witness.plateau_table(res, wres, ["direct", "default"], 1000.0)
        self.assertEqual(pt[2], "| java-direct | 1000 | 1200 | direct | 1000 | 1200 | 1.00 |")
        self.assertEqual(pt[3], "| java-default | 950 | - | cached | 950 | - | 1.00 |")

    def test_transport_and_java_opts(self):
        self.assertEqual(witness.transport("EchoPeer listening on 1 executor=direct "
                                           "transport=nio availableProcessors=1"), "nio")
        self.assertIsNone(witness.transport(""))
        self.assertIsNone(peers.java_opts())
        self.assertEqual(peers.java_opts(cpu_us=465, stall_fraction=0.03, stall_us=20000, seed=7),
                         "-Dpeer.cpu_us=465 -Dpeer.stall_fraction=0.03 -Dpeer.stall_us=20000 "
                         "-Dpeer.seed=7")
        self.assertEqual(peers.java_opts(pause_log="/tmp/p.log"),
                         "-Xlog:safepoint*=info,gc*=info:file=/tmp/p.log:timemillis,uptime,level,tags")

    def test_ramp_step_without_metrics(self):
        """A server without /metrics (the peer): CPU per call over the answers k6 got."""
        doc = {"summary": {"metrics": {"echo_answered{stage:s01}": {"values": {"count": 200}}}}}
        st = {"name": "s01", "offered": 100, "duration_s": 2, "start_s": 0}
        smp = Sampler({})
        smp.samples = [{"t": 1000.0, "echod_cpu": 1.0}, {"t": 1002.0, "echod_cpu": 1.5}]
        s = drivers.ramp_step(doc, st, 0.4, 1000.0, smp, 50, 1100.0)
        self.assertAlmostEqual(s["cpu_us_per_call"], 2500.0)
        self.assertIsNone(s["echod_in_flight_max"])


SAFEPOINT_LOG = """\
[1767225600100ms][0.011s][info][gc] Using Serial
[1767225601791ms][1.791s][info][safepoint,cleanup] safepoint cleanup tasks, 0.0003224 secs
[1767225601791ms][1.791s][info][safepoint,stats  ] Cleanup [ 12 0 ][ 8673 328469 25488 362630 ] 0
[1767225601791ms][1.791s][info][safepoint        ] Safepoint "Cleanup", Time since last: 1749012412 ns, Reaching safepoint: 8673 ns, Cleanup: 328469 ns, At safepoint: 25488 ns, Total: 362630 ns
[1767225602500ms][2.500s][info][gc,start       ] GC(0) Pause Young (Allocation Failure)
[1767225602503ms][2.503s][info][gc,heap        ] GC(0) DefNew: 4416K(4928K)->512K(4928K) Eden: 4416K(4416K)->0K(4416K) From: 0K(512K)->512K(512K)
[1767225602503ms][2.503s][info][gc             ] GC(0) Pause Young (Allocation Failure) 4M->1M(15M) 3.123ms
[1767225602503ms][2.503s][info][safepoint      ] Safepoint "GenCollectForAllocation", Time since last: 700000000 ns, Reaching safepoint: 120000 ns, At safepoint: 3200000 ns, Total: 3320000 ns
[1767225609000ms][9.000s][info][gc] GC(1) Pause Young (Normal) (G1 Evacuation Pause) 24M->3M(256M) 2.345ms
[3.483s][info][safepoint] Safepoint "ICBufferFull", Time since last: 689249012 ns, Reaching safepoint: 5118 ns, Cleanup: 187088 ns, At safepoint: 2284 ns, Total: 194490 ns
"""


class Jvm(unittest.TestCase):
    def test_thread_groups(self):
        names = {"nioEventLoopGro": "event loop", "epollEventLoopG": "event loop",
                 "grpc-default-ex": "pool", "pool-1-thread-1": "pool",
                 "C2 CompilerThre": "compiler", "C1 CompilerThre": "compiler",
                 "VM Thread": "VM", "VM Periodic Tas": "VM", "GC Thread#0": "VM",
                 "Sweeper thread": "VM", "java": "other", "Finalizer": "other",
                 "Common-Cleaner": "other"}
        for name, group in names.items():
            self.assertEqual(jvm.thread_group(name), group, name)

    def test_warm_up(self):
        """Chunks until the compiler threads' share falls under the threshold (here the
        process's own threads: a load that burns no compiler CPU settles at once); a chunk
        that answers nothing is warming up, and a warm-up that never answered is an error."""
        pid = os.getpid()
        seen = []
        r = jvm.warm_up(pid, lambda s: seen.append(s), chunk_s=0, max_s=0, threshold=0.5)
        self.assertEqual((r["settled"], r["seconds"], seen), (True, 0, [0]))

        def refuse(s):
            raise RuntimeError("closed loop: no call answered")
        self.assertRaisesRegex(RuntimeError, "answered no call", jvm.warm_up, pid, refuse,
                               chunk_s=0, max_s=0)
        calls = []

        def first_refused(s):
            calls.append(s)
            if len(calls) == 1:
                refuse(s)
        r = jvm.warm_up(pid, first_refused, chunk_s=0, max_s=5, threshold=0.5)
        self.assertEqual((r["settled"], len(r["chunks"])), (True, 2))

    def test_parse_pauses(self):
        ev = jvm.parse_pauses(SAFEPOINT_LOG)
        self.assertEqual([(e["kind"], e["what"]) for e in ev], [
            ("safepoint", "Cleanup"), ("gc", "Pause Young (Allocation Failure)"),
            ("safepoint", "GenCollectForAllocation"),
            ("gc", "Pause Young (Normal) (G1 Evacuation Pause)"), ("safepoint", "ICBufferFull")])
        self.assertEqual(ev[0]["t"], 1767225601.791)
        self.assertEqual((ev[0]["reaching_ms"], ev[0]["at_ms"], ev[0]["total_ms"]),
                         (0.008673, 0.025488, 0.36263))
        self.assertEqual((ev[1]["total_ms"], ev[1]["uptime"]), (3.123, 2.503))
        self.assertEqual((ev[4]["t"], ev[4]["uptime"]), (None, 3.483))
        # a window by wall time keeps the events logged in it (and those without wall time)
        win = jvm.in_window(ev, 1767225602.0, 1767225603.0)
        self.assertEqual([e["what"] for e in win], ["Pause Young (Allocation Failure)",
                                                    "GenCollectForAllocation", "ICBufferFull"])
        s = jvm.pause_summary(win, 2.0)
        sp, gc = s["safepoint"], s["gc"]
        self.assertEqual((sp["count"], sp["per_s"], sp["max_ms"]), (2, 1.0, 3.32))
        self.assertAlmostEqual(sp["share"], (3.32 + 0.19449) / 1000 / 2)
        self.assertEqual(sp["by_operation"], {"GenCollectForAllocation": 1, "ICBufferFull": 1})
        self.assertAlmostEqual(sp["reaching_p99_ms"], 0.12 - (0.12 - 0.005118) * 0.01)
        self.assertEqual((gc["count"], gc["p50_ms"], gc["max_ms"]), (1, 3.123, 3.123))
        empty = jvm.pause_summary([], 10.0)
        self.assertEqual((empty["gc"]["count"], empty["gc"]["p99_ms"], empty["gc"]["share"]),
                         (0, None, 0.0))

    def test_per_thread_groups(self):
        before = {1: ("nioEventLoopGro", 10**9, 10, 1), 2: ("grpc-default-ex", 5 * 10**8, 100, 2),
                  3: ("grpc-default-ex", 10**8, 7, 0), 4: ("C2 CompilerThre", 0, 0, 0)}
        # thread 3 exited, thread 5 was born, thread 4's id was reused by a pool thread
        after = {1: ("nioEventLoopGro", 2 * 10**9, 30, 4), 2: ("grpc-default-ex", 10**9, 150, 2),
                 4: ("pool-1-thread-1", 2 * 10**8, 3, 1), 5: ("grpc-default-ex", 10**8, 5, 0)}
        g = procstat.thread_groups(before, after, jvm.thread_group)
        self.assertEqual(g["event loop"], {"cpu_s": 1.0, "vol": 20, "invol": 3, "threads": 1})
        self.assertEqual(g["pool"]["threads"], 3)
        self.assertAlmostEqual(g["pool"]["cpu_s"], 0.5 + 0.2 + 0.1)
        self.assertEqual((g["pool"]["vol"], g["pool"]["invol"]), (58, 1))
        self.assertNotIn("compiler", g)
        w = procstat.ThreadWindow.__new__(procstat.ThreadWindow)
        w.groups, w.cpu_s, w.exited_s = g, 2.0, 0.2
        per = w.per(100)
        self.assertAlmostEqual(per["cpu_us"], 20000.0)
        self.assertEqual(per["groups"]["event loop"], {"cpu_us": 10000.0, "vol": 0.2,
                                                        "invol": 0.03, "threads": 1})
        self.assertIsNone(w.per(0))
        me = procstat.threads(os.getpid())
        self.assertIn(os.getpid(), me)
        self.assertGreater(me[os.getpid()][1], 0)


def window(calls, wall_s, cpu_s, compiler_s=0.0, loop_vol=0.0, pool_vol=0.0):
    """A PeerArm window's figures with the given per-call voluntary switches."""
    groups = {"event loop": {"cpu_us": 1.0, "vol": loop_vol, "invol": 0.0, "threads": 2}}
    if pool_vol:
        groups["pool"] = {"cpu_us": 1.0, "vol": pool_vol, "invol": 0.0, "threads": 4}
    return {"calls": calls, "wall_s": wall_s, "cpu_s": cpu_s, "compiler_s": compiler_s,
            "exited_s": 0.0, "per": {"cpu_us": cpu_s / calls * 1e6 if calls else None,
                                     "exited_us": 0.0, "groups": groups} if calls else None,
            "groups": {}, "server_cpu_busy": 0.5, "jvm_share": cpu_s / wall_s}


class PeerLoad(unittest.TestCase):
    """bench/model peer's derivation on figures made from known costs: background 20 m,
    direct 80 µs a call plus w = 30 µs per loop wake, default's hand-offs Hw = 40 µs when they
    wake and Hq = 4 µs when they queue."""

    def runs(self):
        B, c, w, hw, hq = 0.020, 80.0, 30.0, 40.0, 4.0
        low_calls, low_s, sat_calls, sat_s = 1200 * 10, 10.0, 12000 * 10, 10.0

        def cpu(calls, secs, per_call):
            return B * secs + calls * per_call / 1e6
        # direct: one loop wake a call at low load, 0.1 at saturation
        direct = {"idle": window(0, 30.0, B * 30.0 + 0.003, compiler_s=0.003),
                  "low": window(low_calls, low_s, cpu(low_calls, low_s, c + w * 1.0) + 0.05,
                                compiler_s=0.05, loop_vol=1.0),
                  "sat": window(sat_calls, sat_s, cpu(sat_calls, sat_s, c + w * 0.1),
                                loop_vol=0.1)}
        # default, 6 hand-offs a call: at low load 3 wake (2 pool parks + 1 more loop wake
        # than direct's), 3 queue; at saturation 1 wakes, 5 queue; w per its own loop wakes
        default = {"idle": window(0, 30.0, B * 30.0),
                   "low": window(low_calls, low_s, cpu(low_calls, low_s, c + w * 2.0 + 3 * hw
                                                       + 3 * hq - w), loop_vol=2.0, pool_vol=2.0),
                   "sat": window(sat_calls, sat_s, cpu(sat_calls, sat_s, c + w * 0.1 + hw + 5 * hq),
                                 loop_vol=0.1, pool_vol=1.0)}
        return {"direct": direct, "default": default}

    def test_derivation(self):
        f = peer_load.wake_figures(self.runs(), {"low": 6.0, "sat": 6.0})
        self.assertAlmostEqual(f["B_m"]["direct"], 20.0)
        self.assertAlmostEqual(f["net_us"]["direct"]["low"], 110.0)
        d = peer_load.derive_wakes(f, study_call_us=467.0)
        self.assertAlmostEqual(d["B_m"], 20.0)
        self.assertAlmostEqual(d["c_sat_us"], 83.0)
        self.assertAlmostEqual(d["w_us"], 30.0)
        self.assertEqual((d["wakes"], d["queued"]), ({"low": 3.0, "sat": 1.0},
                                                     {"low": 3.0, "sat": 5.0}))
        self.assertAlmostEqual(d["Hw_us"], 40.0)
        self.assertAlmostEqual(d["Hq_us"], 4.0)
        self.assertEqual(d["solved"], "two loads")
        self.assertAlmostEqual(d["ratio"]["Hw_us"], 40.0 / 83.0)
        self.assertAlmostEqual(d["preset"]["handoff_wake_us"], 40.0 * 467.0 / 83.0)
        self.assertAlmostEqual(d["preset"]["background_m"], 20.0 * 467.0 / 83.0)
        text = peer_load.derivation_text(d)
        self.assertIn("w, the direct loop's wake-up: (110 - 83.0) / (1.00 - 0.10) = 30.0 µs a "
                      "wake", text)
        self.assertIn("Hw (a hand-off that wakes) 40.0 µs, Hq (one that queues) 4.0 µs (two loads)",
                      text)

    def test_derivation_of_any_pool_arm(self):
        """The virtual arm's carriers (or any pool arm) derived against direct as default is, and
        named in the text; a peer JSON from before keeps its one derivation as default's."""
        runs = self.runs()
        runs["virtual"] = runs.pop("default")
        d = peer_load.derive_wakes(peer_load.wake_figures(runs, {"low": 6.0, "sat": 6.0}),
                                   pool="virtual")
        self.assertAlmostEqual(d["Hw_us"], 40.0)
        self.assertTrue(any(line.startswith("virtual over direct, per call")
                            for line in peer_load.derivation_text(d, "virtual")))
        self.assertEqual(model.derivations({"derivations": {"virtual": d}}), {"virtual": d})
        self.assertEqual(model.derivations({"derivation": d}), {"default": d})
        self.assertEqual(model.derivations({"derivation": None}), {})

    def test_derivation_without_queued_handoffs(self):
        """Every hand-off woke its receiver at both loads: one equation; Hq taken as 0."""
        f = peer_load.wake_figures(self.runs(), {"low": 3.0, "sat": 1.0})
        d = peer_load.derive_wakes(f)
        self.assertEqual(d["queued"], {"low": 0.0, "sat": 0.0})
        self.assertEqual(d["solved"], "low load alone (Hq taken as 0)")
        self.assertAlmostEqual(d["Hw_us"], (3 * 40.0 + 3 * 4.0) / 3.0)

    def test_derivation_with_a_negative_cost(self):
        f = peer_load.wake_figures(self.runs(), {"low": 6.0, "sat": 6.0})
        f["net_us"]["default"]["sat"] -= 30.0
        d = peer_load.derive_wakes(f)
        self.assertLess(d["Hq_us"], 0)
        self.assertIn("not determined", d["solved"])

    def test_median_tree_and_tables(self):
        m = peer_load.median_tree([{"a": 1, "b": {"c": 1.0}, "s": "x"},
                                   {"a": 3, "b": {"c": None}, "s": "y"},
                                   {"a": 2, "b": {"c": 3.0}}, None])
        self.assertEqual(m, {"a": 2, "b": {"c": 2.0}, "s": "x"})
        self.assertIsNone(peer_load.median_tree([None]))
        rows = peer_load.load_table(self.runs(), ["direct", "default"])
        self.assertEqual(len(rows), 2 + 6)
        self.assertTrue(rows[2].startswith("| direct | idle | - | - | 20.0 millicores | (B) |"), rows[2])
        self.assertIn("| direct | low | 1200 | - | 131 | 110 | 0.0 | 1.0, 1.00, 0.00 | - |", rows[3])
        kinds = peer_load.stall_kinds([0.01], [5000, 20000])
        self.assertEqual(kinds, [("none", 0.0, 0), ("1% x 5.0 ms", 0.01, 5000),
                                 ("1% x 20.0 ms", 0.01, 20000)])
        pauses = jvm.pause_summary(jvm.parse_pauses(SAFEPOINT_LOG), 10.0)
        res = {("direct", "none"): {"p50_ms": 2.0, "p99_ms": 30.0, "pauses": pauses},
               ("default", "none"): {"p50_ms": 2.5, "p99_ms": 10.0, "pauses": pauses}}
        rows = peer_load.stalls_table(res, kinds)
        self.assertTrue(rows[2].startswith("| none | 2.00 | 30.0 | 2.50 | 10.0 | 3.00 | 0.30, 0.30 | "
                                           "3.26, 3.26 | 3.32, 3.32 | 0.0004, 0.0004 | 2, 2 |"),
                        rows[2])
        self.assertTrue(rows[3].startswith("| 1% x 5.0 ms | - | - | - | - | - | -, - |"), rows[3])
        rows = peer_load.pauses_table(res, kinds)
        self.assertEqual(len(rows), 4)
        self.assertIn("Cleanup 1", rows[2])


class Shapes(unittest.TestCase):
    """bench/model shapes: its shapes and echod's thread groups, named as the JVM's are."""

    @staticmethod
    def row(loop_us, parked=None):
        r = {"groups": {"event loop": {"cpu_us": loop_us, "vol": 3.0}}}
        if parked is not None:
            r["handoffs"] = {"loop parked": parked}
        return r

    def test_loop_gaps(self):
        """grpc-java's `virtual` loop less echod's, per hand-off that woke echod's loop, on the
        loads both ran; the convoy unit is their median over documents, as --json writes them."""
        runs = {("grpc-java", "virtual", "flat"): {"1x1": self.row(390), "2x1": self.row(340)},
                ("echod", "virtual", "model+flat"): {"1x1": self.row(200, 2.0), "2x1": self.row(220, 3.0),
                                                     "4x1": self.row(250, 3.0)},
                ("echod", "direct", "flat"): {"1x1": self.row(2900)}}
        self.assertEqual(shapes.loop_gaps(runs), [("1x1", "model+flat", 190, 95.0), ("2x1", "model+flat", 120, 40.0)])
        self.assertEqual(shapes.loop_gap(self.row(300), self.row(250, 0.0)), (50, None))
        doc = {"runs": {"%s %s %s" % k: v for k, v in runs.items()}}
        other = {"runs": {"grpc-java virtual flat": {"1x1": self.row(300)},
                          "echod virtual model+flat": {"1x1": self.row(200, 4.0)}}}
        self.assertEqual(shapes.convoy_unit([doc, other]), 40.0)  # median of 95, 40, 25
        self.assertIsNone(shapes.convoy_unit([{"runs": {}}]))

    def test_parse(self):
        self.assertEqual(shapes.parse_shapes("800x1,32x8"), [(800, 1), (32, 8)])
        # none: open loops alone (--rates); bench/model refuses a run with neither
        self.assertEqual(shapes.parse_shapes(""), [])
        for bad in ("800", "x1", "800x0", "800x1x2", "a8x1"):
            with self.assertRaises(ValueError, msg=bad):
                shapes.parse_shapes(bad)
        # a closed shape and an open rate keep apart in the tables and the JSON
        self.assertEqual(shapes.load_key((800, 1)), "800x1")
        self.assertEqual(shapes.load_key(319), "k6 319/s")

    def test_loop_runs(self):
        # (sleep ms, run µs) of wake.loop_runs over 2 calls: each run in the bin its sleep falls in,
        # a bin's lower edge in it, the last bin open-ended
        runs = [(0.005, 20.0), (0.01, 24.0), (0.02, 30.0), (0.3, 50.0), (1.0, 80.0), (40.0, 300.0)]
        lr = shapes.loop_runs_of(runs, 2)
        self.assertEqual(list(lr), ["0-0.02 ms", "0.02-0.1 ms", "0.1-0.5 ms", "0.5-2 ms", "2 ms+"])
        self.assertEqual(lr["0-0.02 ms"], {"per_call": 1.0, "us_per_call": 22.0, "median_us": 24.0})
        self.assertEqual(lr["0.02-0.1 ms"]["per_call"], 0.5)
        self.assertEqual(lr["2 ms+"]["us_per_call"], 150.0)
        self.assertEqual(sum(b["us_per_call"] for b in lr.values()), sum(r for _, r in runs) / 2)
        self.assertIsNone(shapes.loop_runs_of([], 1)["0-0.02 ms"]["median_us"])

    def test_echod_groups(self):
        # the names echod gives its threads (daemon/dispatch/exec.c, dispatcher.c, exec_virtual.c)
        for name, group in (("echod-io-0", "event loop"), ("echod-virtual-0", "pool"),
                            ("echod-unparker", "pool"), ("echod-fixed-3", "pool"),
                            ("echod-pm1-0", "pool"), ("echod-bg", "other"),
                            ("echod-admin", "other"), ("echod", "other")):
            self.assertEqual(shapes.echod_group(name), group, name)
        self.assertEqual(jvm.thread_group("ForkJoinPool-1-worker-1"), "pool")



class WakeFit(unittest.TestCase):
    """bench/model wake: a run is a wake-up to the next sleep, its preempted slices summed; the
    fit gives back the price curve it was drawn from."""

    def test_runs_of_timehist(self):
        from echodlib.bench import wake
        text = """           time    cpu  task name                       wait time  sch delay   run time  state
   100.000100 [0001]  nioEventLoopGroup[7/5]              20.000      0.010      0.100      R
   100.000300 [0000]  k6[9/9]                              0.000      0.000      0.050      S
   100.000400 [0001]  nioEventLoopGroup[7/5]               0.000      0.100      0.050      S
   100.000700 [0001]  nioEventLoopGroup[8/5]               0.200      0.005      0.030      S
   100.001000 [0001]  nioEventLoopGroup[7/5]               0.150      0.002      0.040      D
"""
        self.assertEqual(wake.runs_of(text, {7, 8}), [(20.0, 150.0), (0.2, 30.0), (0.15, 40.0)])

    def test_fit_gives_back_its_curve(self):
        from echodlib.bench import wake
        truth = {"short_us": 40.0, "full_us": 300.0, "full_sleep_ms": 50.0, "exponent": 0.5}
        windows = [{"long_sleep_ms": s, "wake_us": wake.price(truth, s), "short_run_us": 40.0}
                   for s in (0.5, 1.0, 5.0, 20.0, 50.0)]
        f = wake.fit(windows)
        self.assertEqual((f["short_us"], f["full_sleep_ms"], f["exponent"]), (40.0, 50.0, 0.5))
        self.assertAlmostEqual(f["full_us"], 300.0, places=6)
        self.assertLess(f["rms_us"], 1e-6)
        self.assertIsNone(wake.fit(windows[:1]))

    def test_net_of_echods_own(self):
        """The model's price is grpc-java's wake-up less echod's own of the same rate and round,
        at grpc-java's sleeps; a window either side lacks stays without a figure."""
        from echodlib.bench import wake
        gross = [{"rate": 20, "round": 1, "long_sleep_ms": 49.0, "wake_us": 300.0, "short_run_us": 45.0},
                 {"rate": 20, "round": 2, "long_sleep_ms": 48.0, "wake_us": 280.0, "short_run_us": None},
                 {"rate": 1000, "round": 1, "long_sleep_ms": 1.4, "wake_us": 70.0, "short_run_us": 40.0}]
        own = [{"rate": 20, "round": 2, "long_sleep_ms": 45.0, "wake_us": 130.0, "short_run_us": 33.0},
               {"rate": 20, "round": 1, "long_sleep_ms": 46.0, "wake_us": 120.0, "short_run_us": 35.0}]
        self.assertEqual(wake.net_windows(gross, own), [
            {"rate": 20, "round": 1, "long_sleep_ms": 49.0, "wake_us": 180.0, "short_run_us": 10.0},
            {"rate": 20, "round": 2, "long_sleep_ms": 48.0, "wake_us": 150.0, "short_run_us": None},
            {"rate": 1000, "round": 1, "long_sleep_ms": 1.4, "wake_us": None, "short_run_us": None}])

    def test_committed_runs_render(self):
        """--from-json renders both kinds of committed run: grpc-java's alone (its own fit is the
        model's) and with echod's own beside it (the model's fit is the difference)."""
        from echodlib import paths
        from echodlib.bench import wake
        base = os.path.join(paths.ROOT, "bench", "results", "model")
        for name, parts in (("wake-by-sleep-quota.json", 1), ("wake-net-quota.json", 3)):
            with self.subTest(run=name):
                with open(os.path.join(base, name)) as fh:
                    doc = json.load(fh)
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    wake.render(doc)
                text = out.getvalue()
                self.assertEqual(text.count("\n## "), parts - 1)
                f = doc["fit"]
                self.assertEqual(text.count("work.model:"), 1)
                self.assertIn("work.model: wakeup_cpu_us: %d, wakeup_short_cpu_us: %d" % (
                    round(f["full_us"]), round(f["short_us"])), text)


if __name__ == "__main__":
    unittest.main()
