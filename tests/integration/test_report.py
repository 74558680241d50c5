"""deploy/report on k6's own output format.

Two kinds of fixture, both made here:
* synthesized: k6 CSVs (the exact columns of `k6 run --out csv`, timestamps in seconds and in
  milliseconds) with known latencies, counts and drops per step, a bench/arms JSON and two
  /metrics scrapes, so every number of the table is known in advance;
* live: a short ramp of deploy/k6/unary-ramp.js on the real k6 against two echod arms, whose
  --out csv, --out json, handleSummary JSON and /metrics scrapes go into the report, checked
  against numbers computed here from the CSV. Skipped with a message when there is no k6
  (../shared/tools/k6 from the repository root, $K6, or `k6` on PATH).
The plots need python3-matplotlib (skipped with a message when it is missing).

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_report.py
"""

import csv
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import ROOT, SLOW, Daemon, main, tool_output  # noqa: E402
from echodlib import k6 as k6lib, prom  # noqa: E402  (echod_harness put tools/ on sys.path)
from echodlib.ports import free_port  # noqa: E402
import k6_runners  # noqa: E402

REPORT = os.path.join(ROOT, "deploy", "report")
K6_WHY_NOT = k6lib.unusable()
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HEADER = ("metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,"
          "method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,"
          "metadata").split(",")
T0 = 1767225600  # 2026-01-01T00:00:00Z


def have_matplotlib():
    p = subprocess.run([PY, "-c", "import matplotlib"], capture_output=True)
    return p.returncode == 0


def k6_percentile(values, p):
    """Written out again here (not imported from the report): linear between closest ranks."""
    v = sorted(values)
    if not v:
        return None
    i = p * (len(v) - 1)
    lo, hi = int(i), min(int(i) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (i - lo)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % path
    return struct.unpack(">II", head[16:24])


class CsvWriter:
    """Rows as k6 writes them: default system tags as columns, the rest in extra_tags."""

    def __init__(self, path, ms=False):
        self.f = open(path, "w", newline="")
        self.w = csv.writer(self.f, lineterminator="\n")
        self.w.writerow(HEADER)
        self.ms = ms

    def row(self, metric, t, value, tags, **cols):
        ts = str(int(t * 1000)) if self.ms else str(int(t))
        r = dict.fromkeys(HEADER, "")
        r.update(metric_name=metric, timestamp=ts, metric_value="%f" % value, scenario="unary_ramp",
                 group="")
        r.update(cols)
        r["extra_tags"] = "&".join("%s=%s" % kv for kv in tags.items())
        self.w.writerow([r[h] for h in HEADER])

    def close(self):
        self.f.close()


def grpc_cols(status):
    return dict(method="UnaryEcho", name="/grpc.examples.echo.Echo/UnaryEcho",
                service="grpc.examples.echo.Echo", status=str(status),
                url="echod:50051/grpc.examples.echo.Echo/UnaryEcho")


def write_arm(path, arm, ms, steps):
    """steps: [(offered, ok_per_s, latency scale, failed, dropped)] of 10 s each."""
    w = CsvWriter(path, ms)
    for k, (offered, ok_rate, scale, failed, dropped) in enumerate(steps):
        stage = "s%02d" % (k + 1)
        tags = {"arm": arm, "script": "unary-ramp", "stage": stage, "offered": str(offered)}
        start = T0 + 10 * k
        n = ok_rate * 10
        for i in range(n):
            t = start + 10.0 * i / n
            w.row("echo_sent", t, 1, tags)
            # latencies 1..100 ms (scaled), repeated
            w.row("grpc_req_duration", t, scale * (1 + i % 100), tags, **grpc_cols(0))
            w.row("server_total_us", t, 10.0 * (1 + i % 100), tags)
            w.row("echo_ok", t, 1, tags)
        for i in range(failed):
            t = start + 10.0 * i / max(failed, 1)
            w.row("echo_sent", t, 1, tags)
            w.row("grpc_req_duration", t, 5000.0, tags, **grpc_cols(14))  # not in the latency
            w.row("echo_failed", t, 1, tags)
            w.row("checks", t, 0, tags, check="UnaryEcho status is OK")
        for i in range(dropped):  # k6: tagged with the scenario and test-wide tags only
            w.row("dropped_iterations", start + 1 + 8.0 * i / dropped, 1,
                  {"arm": arm, "script": "unary-ramp"})
    w.close()


def write_runner(path, arm, ms, segment, steps, step_s=10, sequence="0,1/2,1", spill_s=0.0,
                 tag_step=True, latency=lambda k, i: 1.0 + i % 100):
    """One k6 runner of a split test: steps [(stage offered, calls this runner sent)], every
    call answered OK; the last step's answers arrive up to spill_s after the step's end (as a
    saturated step's do), so the samples' span is longer than the schedule's step."""
    w = CsvWriter(path, ms)
    for k, (offered, n) in enumerate(steps):
        tags = {"arm": arm, "script": "unary-ramp", "stage": "s%02d" % (k + 1),
                "offered": str(offered), "segment": segment}
        if sequence:
            tags["segments"] = sequence
        if tag_step:
            tags["step_s"] = str(step_s)
        start = T0 + step_s * k
        last = k + 1 == len(steps)
        for i in range(n):
            t = start + (step_s + (spill_s if last else 0.0)) * i / n
            w.row("echo_sent", t, 1, tags)
            w.row("grpc_req_duration", t, latency(k, i), tags, **grpc_cols(0))
            w.row("echo_ok", t, 1, tags)
    w.close()


def report_fails(args, tmp):
    """deploy/report ARGS must exit 2: its stderr."""
    p = subprocess.run([PY, REPORT, "--no-plots", "--out", os.path.join(tmp, "refused")] + args,
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2, "deploy/report %s: exit %d, want 2\n%s" % (args, p.returncode,
                                                                          p.stderr)
    return p.stderr


def run_report(args, out):
    """deploy/report --out OUT ARGS, plots only with python3-matplotlib: (report.json, .md, proc)."""
    if not have_matplotlib():
        args = ["--no-plots"] + args
    p = subprocess.run([PY, REPORT, "--out", out] + args, capture_output=True, text=True,
                       timeout=120 * SLOW, cwd=ROOT)
    if p.returncode != 0:
        raise AssertionError("deploy/report %s: exit %d\n%s\n%s" % (args, p.returncode, p.stdout,
                                                                     p.stderr))
    with open(os.path.join(out, "report.json")) as f:
        data = json.load(f)
    with open(os.path.join(out, "report.md")) as f:
        md = f.read()
    return data, md, p


class PlotsChecked:
    """Mixed into a TestCase whose report is in cls.out: both plots are there (with matplotlib)."""

    def test_plots(self):
        if not have_matplotlib():
            self.skipTest("python3-matplotlib not installed: no plots")
        for name in ("p99-vs-offered.png", "goodput-vs-offered.png"):
            w, h = png_size(os.path.join(self.out, name))
            self.assertGreater(w, 300)
            self.assertGreater(h, 200)


class Synthesized(PlotsChecked, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="report-test-")
        t = cls.tmp
        # alpha: goodput falls short at 400/s (300/s OK, 50 dropped, 20 failed); seconds
        write_arm(os.path.join(t, "alpha.csv"), "alpha", False,
                  [(100, 100, 1.0, 0, 0), (200, 200, 1.0, 0, 0), (300, 300, 1.0, 0, 0),
                   (400, 300, 1.0, 20, 50)])
        # beta: p99 passes the threshold at 300/s (latencies doubled); milliseconds
        write_arm(os.path.join(t, "beta.csv"), "beta", True,
                  [(100, 100, 1.0, 0, 0), (200, 200, 1.0, 0, 0), (300, 300, 2.0, 0, 0),
                   (400, 400, 2.0, 0, 0)])
        for name, cpu, calls in (("before", 1.0, 1000), ("after", 1.5, 101000)):
            with open(os.path.join(t, name + ".prom"), "w") as f:
                f.write("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %s\n"
                        'grpc_server_handled_total{grpc_type="unary",grpc_service="grpc.examples.'
                        'echo.Echo",grpc_method="UnaryEcho",grpc_code="OK"} %d\n'
                        'grpc_server_handled_total{grpc_type="unary",grpc_service="grpc.health.v1.'
                        'Health",grpc_method="Check",grpc_code="OK"} 777\n' % (cpu, calls))
        with open(os.path.join(t, "bench.json"), "w") as f:
            json.dump({"args": {"rate": 2000, "duration": 10}, "arms": ["gamma"], "runs": [],
                       "summary": {"gamma": {"sat_rps": 50000.0, "cpu_sat": 2.5, "fixed_rps": 1990.0,
                                             "p50": 80.0, "p99": 250.0, "fail_grpc": 0,
                                             "fail_h2load": 0}}}, f)
        cls.out = os.path.join(t, "out")
        args = ["--p99-threshold-ms", "150", "--metrics",
                "alpha=%s,%s" % (os.path.join(t, "before.prom"), os.path.join(t, "after.prom")),
                os.path.join(t, "alpha.csv"), os.path.join(t, "beta.csv"),
                os.path.join(t, "bench.json")]
        cls.data, cls.md, _ = run_report(args, cls.out)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def steps(self, arm):
        return {s["stage"]: s for s in self.data["arms"][arm]["steps"]}

    def test_per_step_numbers(self):
        a = self.steps("alpha")
        self.assertEqual(sorted(a), ["s01", "s02", "s03", "s04"])
        for st, offered, ok in (("s01", 100, 1000), ("s02", 200, 2000), ("s03", 300, 3000),
                                ("s04", 400, 3000)):
            self.assertEqual(a[st]["offered"], offered)
            self.assertEqual(a[st]["ok"], ok)
            self.assertAlmostEqual(a[st]["duration_s"], 10.0)
            self.assertAlmostEqual(a[st]["goodput"], ok / 10.0)
            self.assertAlmostEqual(a[st]["p50_ms"], 50.5)
            self.assertAlmostEqual(a[st]["p99_ms"], 99.01)
            self.assertAlmostEqual(a[st]["server_p99_us"], 990.1)
        self.assertEqual(a["s04"]["failed"], 20)
        self.assertEqual(a["s04"]["sent"], 3020)
        self.assertEqual(a["s04"]["dropped"], 50, "dropped_iterations placed in their step by time")
        self.assertEqual(a["s03"]["dropped"], 0)
        b = self.steps("beta")
        self.assertAlmostEqual(b["s03"]["p99_ms"], 198.02)
        self.assertAlmostEqual(b["s02"]["goodput"], 200.0, delta=0.5)
        self.assertAlmostEqual(b["s04"]["goodput"], 400.0, delta=4.0)  # last step: ms span

    def test_knee_plateau_cpu(self):
        alpha, beta, gamma = (self.data["arms"][a] for a in ("alpha", "beta", "gamma"))
        self.assertEqual(alpha["knee_offered"], 400)
        self.assertIn("goodput", alpha["knee_reason"])
        self.assertAlmostEqual(alpha["plateau_goodput"], 300.0)
        self.assertAlmostEqual(alpha["cpu_us_per_call"], 5.0)
        self.assertEqual(beta["knee_offered"], 300)
        self.assertIn("p99", beta["knee_reason"])
        self.assertAlmostEqual(beta["plateau_goodput"], 350.0, delta=2.0)
        self.assertIsNone(beta["cpu_us_per_call"])
        self.assertIsNone(gamma["knee_offered"])
        self.assertEqual(gamma["plateau_goodput"], 50000.0)
        self.assertEqual(gamma["cpu_us_per_call"], 2.5)
        self.assertAlmostEqual(gamma["steps"][0]["p99_ms"], 0.25)

    def test_markdown_table(self):
        self.assertIn("| alpha | unary-ramp | 400 | goodput 300/s < 95% of offered | 300 | 300 | "
                      "99.0 | 5.00 (/metrics) |", self.md)
        self.assertIn("| s04 **knee** | 400 | 302 | 300 | 75.0 | 50.5 | 99.0 | 505.0 | 990.1 | 20 | "
                      "50 | 10.0 |", self.md)
        self.assertIn("| beta | unary-ramp | 300 | p99 198 ms > 150 ms |", self.md)
        self.assertIn("| gamma | bench/arms | not reached | - | 50000 |", self.md)

    def test_bad_input_is_refused(self):
        bad = os.path.join(self.tmp, "bad.csv")
        with open(bad, "w") as f:
            f.write("a,b,c\n1,2,3\n")
        p = subprocess.run([PY, REPORT, "--out", os.path.join(self.tmp, "bad"), bad],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("bad.csv", p.stderr)


class Segments(unittest.TestCase):
    """Runners of one test on execution segments, merged exactly: two k6 runners of a 100 ->
    200 calls/s ramp of 10 s steps (0:1/2 with k6's default whole-second timestamps, 1/2:1 in
    milliseconds), each sending its half, the last step's answers spilling 1.5 s past the
    step (a saturated step's backlog)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="report-segments-")
        cls.a = os.path.join(cls.tmp, "a.csv")
        cls.b = os.path.join(cls.tmp, "b.csv")
        # the two halves have different latencies, so a pooled percentile differs from an
        # average of the halves' percentiles
        write_runner(cls.a, "direct", False, "0:1/2", [(100, 500), (200, 1000)], spill_s=1.5)
        write_runner(cls.b, "direct", True, "1/2:1", [(100, 500), (200, 1000)], spill_s=1.5,
                     latency=lambda k, i: 3.0 * (1 + i % 50))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def report(self, *inputs):
        data, md, _ = run_report(["--no-plots", "--p99-threshold-ms", "1000"] + list(inputs),
                                 os.path.join(self.tmp, "out-%d" % len(inputs)))
        return data["arms"]["direct"], md

    def test_merged_exactly(self):
        arm, md = self.report(self.a, self.b)
        self.assertEqual(arm["segments"], "0:1")
        self.assertEqual(arm["share"], 1.0)
        lat = {0: [], 1: []}
        for k in (0, 1):
            n = (500, 1000)[k]
            lat[k] = [1.0 + i % 100 for i in range(n)] + [3.0 * (1 + i % 50) for i in range(n)]
        for st, k, offered in (("s01", 0, 100), ("s02", 1, 200)):
            s = {x["stage"]: x for x in arm["steps"]}[st]
            self.assertEqual(s["offered"], offered)
            self.assertEqual(s["sent"], 2 * (500, 1000)[k], "the runners' sent add up")
            self.assertEqual(s["duration_s"], 10.0, "the schedule's step, not the samples' span")
            self.assertEqual(s["goodput"], offered)
            self.assertEqual(s["p50_ms"], k6_percentile(lat[k], 0.5), "pooled, not averaged")
            self.assertEqual(s["p99_ms"], k6_percentile(lat[k], 0.99), "pooled, not averaged")
        self.assertIsNone(arm["knee_offered"], "no false knee at the last step")

    def test_one_runner_against_its_share(self):
        for path, seg in ((self.a, "0:1/2"), (self.b, "1/2:1")):
            with self.subTest(segment=seg):
                arm, md = self.report(path)
                self.assertEqual(arm["share"], 0.5)
                self.assertEqual(arm["segments"], seg)
                steps = {x["stage"]: x for x in arm["steps"]}
                self.assertEqual(steps["s01"]["offered"], 50)
                self.assertEqual(steps["s02"]["offered"], 100)
                self.assertEqual(steps["s02"]["duration_s"], 10.0)
                self.assertEqual(steps["s02"]["goodput"], 100)
                self.assertIsNone(arm["knee_offered"], "judged against its half")
                self.assertIn("Execution segments %s" % seg, md)

    def test_overlap_gap_and_sequences_refused(self):
        t = self.tmp
        over = os.path.join(t, "over.csv")
        write_runner(over, "direct", False, "1/3:1", [(100, 666)], sequence="")
        self.assertIn("overlap", report_fails([self.a, over], t))
        self.assertIn("overlap", report_fails([self.a, self.a], t))
        third = os.path.join(t, "third.csv")
        last = os.path.join(t, "last.csv")
        write_runner(third, "direct", False, "0:1/3", [(100, 333)], sequence="0,1/3,2/3,1")
        write_runner(last, "direct", False, "2/3:1", [(100, 333)], sequence="0,1/3,2/3,1")
        err = report_fails([third, last], t)
        self.assertIn("gap", err)
        self.assertIn("1/3:2/3 is missing", err)
        other = os.path.join(t, "other.csv")
        write_runner(other, "direct", False, "1/2:1", [(100, 500)], sequence="0,1/2,3/4,1")
        self.assertIn("execution-segment-sequence", report_fails([self.a, other], t))

    def test_untagged_whole_second_csv(self):
        """A CSV of deploy/k6 before the step_s tag, in whole seconds: the last step is as long
        as the others (a ramp), not its samples' span plus a tick."""
        old = os.path.join(self.tmp, "old.csv")
        write_runner(old, "direct", False, "0:1", [(100, 1000), (200, 2000)], sequence="",
                     tag_step=False, spill_s=1.0)
        arm, _ = self.report(old)
        self.assertEqual([s["duration_s"] for s in arm["steps"]], [10.0, 10.0])
        self.assertIsNone(arm["knee_offered"])


def scrape(d, path):
    with open(path, "w") as f:
        f.write(prom.scrape(d.admin_port))


@unittest.skipIf(K6_WHY_NOT, "live run on k6 skipped: %s" % K6_WHY_NOT)
class LiveK6Run(PlotsChecked, unittest.TestCase):
    """deploy/k6/unary-ramp.js on the real k6 against two echod arms, a 20 -> 40 calls/s ramp of
    2 s steps. k6 writes --out csv (one arm in k6's default seconds, the other in milliseconds),
    --out json and the handleSummary JSON; the report reads the direct arm from its CSV and the
    cached arm from its --out json, each with its summary, and must give the numbers computed
    here from the CSVs."""

    ARMS = ("direct", "cached")
    STEP_S = 2.0

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="report-live-")
        cls.inputs = []
        cls.metrics = []
        k6 = k6lib.find()
        for arm in cls.ARMS:
            with Daemon(config=os.path.join(ROOT, "config", "arms", arm + ".yaml"),
                        sets=["log.level=warn"]) as d:
                base = os.path.join(cls.tmp, arm)
                scrape(d, base + "-before.prom")
                env = {"ARM": arm, "TARGET": d.grpc_target, "START": "20", "END": "40",
                       "STEP": "20", "STEP_DURATION": "%gs" % cls.STEP_S, "VUS": "4",
                       "SUMMARY_FILE": base + ".json"}
                cmd = [k6, "run", "-q", "--no-usage-report", "--out", "csv=" + base + ".csv",
                       "--out", "json=" + base + ".k6.json"]
                for kv in env.items():
                    cmd += ["-e", "%s=%s" % kv]
                cmd.append(os.path.join(ROOT, "deploy", "k6", "unary-ramp.js"))
                run_env = dict(os.environ, K6_CSV_TIME_FORMAT="unix_milli" if arm == "cached"
                               else "unix")
                p = subprocess.run(cmd, cwd=ROOT, env=run_env, capture_output=True, text=True,
                                   timeout=120 * SLOW)
                if p.returncode != 0:
                    raise AssertionError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode,
                                                            tool_output(p, 6000)))
                scrape(d, base + "-after.prom")
            cls.inputs += [base + (".csv" if arm == "direct" else ".k6.json"), base + ".json"]
            cls.metrics += ["--metrics", "%s=%s-before.prom,%s-after.prom" % (arm, base, base)]
        cls.out = os.path.join(cls.tmp, "out")
        cls.data, cls.md, _ = run_report(cls.metrics + cls.inputs, cls.out)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def csv_truth(self, arm):
        """Per stage from the CSVs, read here: OK count (by the stage a call was sent in, and
        echo_answered by the stage its answer arrived in) and grpc_req_duration (status 0)."""
        ok, lat, offered = {}, {}, {}
        self.answered = {}
        with open(os.path.join(self.tmp, "%s.csv" % arm), newline="") as f:
            r = csv.reader(f)
            self.assertEqual(next(r), HEADER, "k6's CSV header")
            for row in r:
                rec = dict(zip(HEADER, row))
                tags = dict(kv.split("=", 1) for kv in rec["extra_tags"].split("&") if kv)
                self.assertEqual(tags.get("arm"), arm)
                st = tags.get("stage")
                if not st:
                    continue
                offered[st] = float(tags["offered"])
                if rec["metric_name"] == "echo_ok":
                    ok[st] = ok.get(st, 0) + float(rec["metric_value"])
                elif rec["metric_name"] == "echo_answered":
                    self.answered[st] = self.answered.get(st, 0) + float(rec["metric_value"])
                elif rec["metric_name"] == "grpc_req_duration" and rec["status"] == "0":
                    lat.setdefault(st, []).append(float(rec["metric_value"]))
        return ok, lat, offered

    def test_report_matches_the_csv(self):
        for arm in self.ARMS:
            with self.subTest(arm=arm):
                ok, lat, offered = self.csv_truth(arm)
                self.assertEqual(sorted(offered), ["s01", "s02"])
                self.assertEqual(offered, {"s01": 20.0, "s02": 40.0})
                steps = {s["stage"]: s for s in self.data["arms"][arm]["steps"]}
                for st in ("s01", "s02"):
                    self.assertTrue(ok.get(st), "%s %s: no calls answered" % (arm, st))
                    s = steps[st]
                    self.assertEqual(s["ok"], ok[st])
                    self.assertAlmostEqual(s["duration_s"], self.STEP_S, msg="from the schedule")
                    # goodput: the answers that arrived in the step (unary-ramp.js counts them)
                    self.assertAlmostEqual(s["goodput"], self.answered[st] / self.STEP_S)
                    self.assertAlmostEqual(s["p50_ms"], k6_percentile(lat[st], 0.5), places=6)
                    self.assertAlmostEqual(s["p99_ms"], k6_percentile(lat[st], 0.99), places=6)
                    self.assertIsNotNone(s["server_p99_us"], "echod-timing recorded")
                self.assertGreater(self.data["arms"][arm]["cpu_us_per_call"], 0)
                self.assertIn("| %s | unary-ramp |" % arm, self.md)


def read_k6_csv(path):
    """[(metric, tags, status, value)] of a k6 CSV (.csv.gz too), read here."""
    with gzip.open(path, "rt", newline="") if path.endswith(".gz") else \
            open(path, newline="") as f:
        r = csv.reader(f)
        self_header = next(r)
        out = []
        for row in r:
            rec = dict(zip(self_header, row))
            tags = dict(kv.split("=", 1) for kv in rec["extra_tags"].split("&") if kv)
            out.append((rec["metric_name"], tags, rec["status"], float(rec["metric_value"])))
    return out


@unittest.skipIf(K6_WHY_NOT, "live run on k6 skipped: %s" % K6_WHY_NOT)
class LiveNoServer(unittest.TestCase):
    """The real k6 against a port nothing listens on: every iteration fails to connect, and k6
    only logs each error. The report must say that no call was made, not that the file lacks
    deploy/k6's tags."""

    def test_no_call_made(self):
        tmp = tempfile.mkdtemp(prefix="report-noserver-")
        try:
            path = os.path.join(tmp, "k6.csv")
            env = {"ARM": "direct", "TARGET": "127.0.0.1:%d" % free_port(), "START": "5",
                   "END": "10", "STEP": "5", "STEP_DURATION": "1s", "VUS": "2",
                   "SUMMARY_FILE": os.path.join(tmp, "summary.json")}
            cmd = [k6lib.find(), "run", "-q", "--no-usage-report", "--out", "csv=" + path]
            for kv in env.items():
                cmd += ["-e", "%s=%s" % kv]
            cmd.append(os.path.join(ROOT, "deploy", "k6", "unary-ramp.js"))
            k6 = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120 * SLOW)
            p = subprocess.run([PY, REPORT, "--no-plots", "--out", os.path.join(tmp, "out"), path],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, "k6 exit %d\n%s\nreport: %s" % (
                k6.returncode, tool_output(k6, 3000), p.stderr))
            self.assertIn("none of which made a call", p.stderr)
            self.assertIn("k6.csv", p.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@unittest.skipIf(K6_WHY_NOT, "live runners on k6 skipped: %s" % K6_WHY_NOT)
class LiveSegments(unittest.TestCase):
    """Two real k6 processes on execution segments 0:1/2 and 1/2:1 of one unary-ramp.js test
    (100 then 200 calls/s, 3 s steps) against one echod, started as the pods of the Indexed Job
    that make-run --parallelism 2 renders; runner 0 writes k6's default whole-second
    timestamps, runner 1 milliseconds. deploy/report merges them exactly. 20 VUs a runner, so
    that a stall of the loaded machine does not leave k6 without a free VU (it drops the
    iteration then, and the split between steps is exact only to within the drops)."""

    STEP_S = 3
    DUE = {"s01": 100 * STEP_S, "s02": 200 * STEP_S}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="report-runners-")
        with Daemon(config=os.path.join(ROOT, "config", "arms", "direct.yaml"),
                    sets=["log.level=warn"]) as d:
            cls.runners = k6_runners.Runners(
                2, "unary-ramp.js", d.grpc_target, "direct",
                {"START": "100", "END": "200", "STEP": "100", "STEP_DURATION": "%ds" % cls.STEP_S,
                 "VUS": "40"}, cls.tmp).wait(120 * SLOW)
        cls.rows = [read_k6_csv(p) for p in cls.runners.csv]
        cls.drops = [sum(v for m, _, _, v in r if m == "dropped_iterations") for r in cls.rows]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def report(self, inputs, name):
        data, md, _ = run_report(["--no-plots", "--p99-threshold-ms", "1000"] + inputs,
                                 os.path.join(self.tmp, name))
        return {s["stage"]: s for s in data["arms"]["direct"]["steps"]}, data["arms"]["direct"]

    def truth(self, rows, stage):
        sent = sum(v for m, t, _, v in rows if m == "echo_sent" and t.get("stage") == stage)
        lat = [v for m, t, st, v in rows if m == "grpc_req_duration" and t.get("stage") == stage
               and st == "0"]
        return sent, lat

    def test_each_runner_tagged_with_its_segment(self):
        for i, seg in enumerate(("0:1/2", "1/2:1")):
            segs = {t.get("segment") for m, t, _, _ in self.rows[i] if t.get("stage")}
            self.assertEqual(segs, {seg}, "runner %d (%s)" % (i, self.runners.how))
            drops = [t for m, t, _, _ in self.rows[i] if m == "dropped_iterations"]
            self.assertTrue(all(t.get("arm") == "direct" for t in drops), drops[:3])

    def test_merged(self):
        steps, arm = self.report(self.runners.csv, "merged")
        self.assertEqual(arm["segments"], "0:1")
        for st, offered in (("s01", 100), ("s02", 200)):
            s = steps[st]
            sent = [self.truth(r, st)[0] for r in self.rows]
            lat = sorted(self.truth(self.rows[0], st)[1] + self.truth(self.rows[1], st)[1])
            self.assertEqual(s["offered"], offered)
            self.assertEqual(s["duration_s"], self.STEP_S, "from the schedule (%s)" % st)
            self.assertEqual(s["sent"], sum(sent))
            self.assertAlmostEqual(s["p50_ms"], k6_percentile(lat, 0.5), places=9)
            self.assertAlmostEqual(s["p99_ms"], k6_percentile(lat, 0.99), places=9)
            self.assertEqual(s["failed"], 0)
        self.assertEqual(sum(s["failed"] for s in steps.values()), 0)
        # k6 splits the schedule's iterations between the segments without overlap, and a call
        # counts in the step it was due in (not the one running when k6 started it): per step
        # the runners' calls are the schedule's, less what k6 dropped (no free VU), which the
        # report places by the schedule; every iteration was started or dropped, the last one
        # too (the idle second after the last step), so k6's own count of drops is those
        self.assertEqual(arm["k6_dropped_iterations"], sum(self.drops))
        self.assertEqual(sum(s["dropped"] for s in steps.values()), sum(self.drops))
        for st, due in self.DUE.items():
            with self.subTest(stage=st, k6_dropped=self.drops):
                self.assertEqual(steps[st]["sent"] + steps[st]["dropped"], due)
                if not sum(self.drops):
                    self.assertEqual(steps[st]["sent"], due, "the segments' sent add up")

    def test_one_runner_alone(self):
        """Runner 0 alone, its CSV in k6's whole seconds: half the offered rate, every step the
        schedule's 3 s (the last one not a second longer: no false knee)."""
        steps, arm = self.report([self.runners.csv[0]], "alone")
        self.assertEqual(arm["share"], 0.5)
        for st, offered in (("s01", 50), ("s02", 100)):
            self.assertEqual(steps[st]["offered"], offered)
            self.assertEqual(steps[st]["duration_s"], self.STEP_S)
        # half the schedule's iterations in each step (k6 gives segment 0:1/2 every other
        # one); the knee is not asserted on a shared machine, as goodput counts an answer by
        # when it arrived, which a late start moves (Segments.test_one_runner_against_its_share
        # is the exact case)
        for st, due in self.DUE.items():
            with self.subTest(stage=st, k6_dropped=self.drops[0]):
                self.assertEqual(steps[st]["sent"] + steps[st]["dropped"], due / 2)
                if not self.drops[0]:
                    self.assertEqual(steps[st]["sent"], due / 2)
        self.assertEqual(arm["k6_dropped_iterations"], self.drops[0])

    def test_same_runner_twice_refused(self):
        err = report_fails([self.runners.csv[0], self.runners.csv[0]], self.tmp)
        self.assertIn("overlap", err)

    def test_summaries(self):
        """The runners' handleSummary JSONs alone: counts add up, the offered rate is the whole
        schedule's, and the percentiles are an upper bound, said so."""
        steps, arm = self.report(self.runners.summary, "summaries")
        self.assertEqual(arm["segments"], "0:1")
        for st in ("s01", "s02"):
            self.assertEqual(steps[st]["sent"], sum(self.truth(r, st)[0] for r in self.rows))
        self.assertTrue(any("upper bound" in n for n in arm["notes"]), arm["notes"])


if __name__ == "__main__":
    main()
