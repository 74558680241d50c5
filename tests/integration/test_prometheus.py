"""A real Prometheus (Debian's prometheus 2.42) holding a real run, and what reads it.

* Rules: k8s/monitoring/echod-rules.yaml passes `promtool check rules`, and its unit tests
  (echod-rules.test.yaml: two arms' series as a study scrapes them) pass `promtool test rules`.
* Live: two arms (direct in a one-CPU CFS-quota cgroup where this machine allows one, cached)
  scraped every second by a local Prometheus evaluating the rules; k6 runs deploy/k6's
  unary-ramp.js against them (direct: two runners on execution segments, as the Indexed Job of
  make-run --parallelism 2 runs them; cached: one), writing CSVs and remote-writing to the same
  Prometheus with native histograms. Then:
  - deploy/report --prometheus reproduces the table deploy/report makes from the CSVs: counts,
    step lengths and goodput exactly, p50/p99 (client and server) within the native
    histograms' resolution, CPU per call against two scrapes around the run;
  - the recording rules hold the dispatch model's invariants on the real series (6 steps per
    unary call, no dispatch on direct, three loop tasks per call on cached) and the k6 rules
    add the runners up;
  - every query of every panel of the Grafana dashboard (k8s/monitoring/echod-dashboard.json)
    returns data of the expected shape over the run, and no NaN or infinity once the arms are
    idle (there is no Grafana server here: the queries are evaluated against Prometheus,
    Grafana's variables substituted as it would);
  - echod's exposition parses (prometheus_client, promtool check metrics) and Prometheus
    stored every sample of a scrape.
* Study: bench/study --quick --arms direct --prometheus writes to its own Prometheus; every
  k6-driven step's counts in study.json equal the Prometheus figures over the step's
  t_start..t_end, and its p99 agrees within the histogram's resolution.

The live and study parts need k6 and run in release builds only (they test the tooling and
Prometheus, not echod's memory: the sanitizer builds skip them, as test_study). Without
prometheus, promtool or k6 each part is skipped with the reason.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_prometheus.py
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import ROOT, SANITIZER, SLOW, Daemon, main  # noqa: E402
from echodlib import cgroup, k6 as k6lib, k6prom, k6result, prom, promserver, stats  # noqa: E402
import k6_runners  # noqa: E402

MON = os.path.join(ROOT, "k8s", "monitoring")
RULES = os.path.join(MON, "echod-rules.yaml")
DASHBOARD = os.path.join(MON, "echod-dashboard.json")
REPORT = os.path.join(ROOT, "deploy", "report")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
PROMTOOL = promserver.find("promtool")
# one native-histogram bucket of k6's (schema 3) is a factor of 2^(1/8); a percentile that
# falls between two samples in adjacent buckets may be off by two
BUCKET = 2 ** 0.125
LIVE_WHY_NOT = promserver.unusable() or k6lib.unusable() or (
    "sanitizer build (%s): the live Prometheus runs in release builds only" % SANITIZER
    if SANITIZER else None)


def within_buckets(got, want, n=2):
    return want > 0 and got > 0 and abs(math.log(got / want)) <= n * math.log(BUCKET) + 1e-9


def around_rank(got, samples, q):
    """Whether a percentile from a native histogram is what its resolution allows: within one
    bucket of the two samples around the rank q*(n-1) (the pooled samples' percentile is
    between them; with a thin tail, e.g. the p99 of 300 calls, they can be far apart)."""
    v = sorted(samples)
    i = q * (len(v) - 1)
    lo, hi = v[int(math.floor(i))], v[int(math.ceil(i))]
    return got is not None and lo / BUCKET * (1 - 1e-9) <= got <= hi * BUCKET * (1 + 1e-9)


@unittest.skipUnless(PROMTOOL, "no promtool (apt-get install prometheus)")
class Rules(unittest.TestCase):
    def test_check_rules(self):
        p = subprocess.run([PROMTOOL, "check", "rules", RULES], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_unit_tests(self):
        p = subprocess.run([PROMTOOL, "test", "rules", "echod-rules.test.yaml"], cwd=MON,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS", p.stdout)

    def test_every_rule_is_unit_tested(self):
        with open(RULES) as f:
            names = re.findall(r"^\s*- (?:record|alert): (\S+)", f.read(), re.M)
        with open(os.path.join(MON, "echod-rules.test.yaml")) as f:
            tests = f.read()
        untested = [n for n in names if n not in tests and not n.startswith(
            ("arm:k6_grpc_req_duration", "arm:k6_server_total", "arm:echod_context_switches",
             "arm:echod_executor_queue_wait", "arm:echod_cfs_throttled_seconds",
             "arm:echod_executor_queue_depth", "arm:echod_loop_", "arm:echod_drain_streams"))]
        # the native-histogram rules (promtool 2.42 cannot write such series) and the plain
        # gauges are checked on the live run below
        self.assertEqual(untested, [])


def expand(expr, arm, arms, rate="5s"):
    """A dashboard query as Grafana sends it: $arm (one arm in a repeated row, a regex of the
    selected arms elsewhere) and $__rate_interval."""
    expr = expr.replace('arm=~"$arm"', 'arm=~"%s"' % "|".join(arms))
    return expr.replace("$arm", arm).replace("$__rate_interval", rate)


def dashboard_targets(dash, arms):
    """(panel title, target, arm or '', repeated row?) of every query of the dashboard."""
    repeated = False
    for panel in dash["panels"]:
        if panel["type"] == "row":
            repeated = panel.get("repeat") == "arm"
            continue
        for t in panel["targets"]:
            for arm in (arms if repeated else ("",)):
                yield panel["title"], t, arm, repeated


@unittest.skipIf(LIVE_WHY_NOT, "live Prometheus skipped: %s" % LIVE_WHY_NOT)
class Live(unittest.TestCase):
    STEP_S = 3
    ARMS = ("direct", "cached")

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="prometheus-live-")
        cls.prom = promserver.Prometheus(rule_files=[RULES]).start()
        cls.client = cls.prom.client
        cls.group, cls.group_why = cgroup.CpuQuota.create("echod-prometheus-test", 1.0)
        cls.daemons, cls.before, cls.after, cls.scrapes = {}, {}, {}, {}
        try:
            for arm in cls.ARMS:
                d = Daemon(config=os.path.join(ROOT, "config", "arms", arm + ".yaml"),
                           sets=["log.level=warn"])
                if cls.group and arm == "direct":
                    d.prefix = cls.group.exec_prefix() + d.prefix
                d.start()
                cls.daemons[arm] = d
                cls.prom.add_target(d.admin_port, arm=arm)
            for arm, d in cls.daemons.items():
                cls.prom.wait_up(d.admin_port, timeout=30 * SLOW)
                cls.before[arm] = prom.samples(d.scrape())
            cls.t0 = time.time()
            env = {"START": "100", "END": "200", "STEP": "100",
                   "STEP_DURATION": "%ds" % cls.STEP_S, "VUS": "4"}
            runs = {}
            for arm, n in (("direct", 2), ("cached", 1)):
                os.makedirs(os.path.join(cls.tmp, arm))
                runs[arm] = k6_runners.Runners(n, "unary-ramp.js", cls.daemons[arm].grpc_target,
                                               arm, env, os.path.join(cls.tmp, arm),
                                               prometheus=cls.prom.url)
            for r in runs.values():
                r.wait(120 * SLOW)
            cls.runs = runs
            # k6 pushes at exit (its remote write flushes once more when it stops); two more
            # scrapes and rule evaluations after the last call
            time.sleep(3)
            cls.t1 = time.time()
            for arm, d in cls.daemons.items():
                cls.scrapes[arm] = d.scrape()
                cls.after[arm] = prom.samples(cls.scrapes[arm])
            time.sleep(1.5)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for d in cls.daemons.values():
            d.stop()
            d.cleanup()
        why = cls.group.remove() if cls.group else None
        cls.prom.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        if why:
            raise AssertionError(why)

    def report(self, args, name):
        out = os.path.join(self.tmp, name)
        p = subprocess.run([PY, REPORT, "--no-plots", "--p99-threshold-ms", "1000", "--out", out]
                           + args, capture_output=True, text=True, timeout=120, cwd=ROOT)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "report.json")) as f:
            return json.load(f)["arms"]

    def test_report_from_prometheus_matches_the_csvs(self):
        files = self.runs["direct"].csv + self.runs["cached"].csv
        from_csv = self.report(files, "csv")
        raw = k6result.CsvReader()
        for f in files:
            raw.add(f)
        from_prom = self.report(["--prometheus", self.prom.url, "--start", "%.3f" % self.t0,
                                 "--end", "%.3f" % self.t1], "prom")
        self.assertEqual(sorted(from_prom), sorted(self.ARMS))
        for arm in self.ARMS:
            c, p = from_csv[arm], from_prom[arm]
            self.assertEqual((p["segments"], p["share"]), (c["segments"], c["share"]))
            self.assertEqual(p["knee_offered"], c["knee_offered"], arm)
            cs = {s["stage"]: s for s in c["steps"]}
            ps = {s["stage"]: s for s in p["steps"]}
            self.assertEqual(sorted(ps), sorted(cs), arm)
            for st in cs:
                with self.subTest(arm=arm, stage=st):
                    for k in ("offered", "sent", "ok", "failed", "dropped", "duration_s",
                              "goodput", "sent_rate"):
                        self.assertEqual(ps[st][k], cs[st][k], k)
                    self.assertEqual(ps[st]["latency_count"], cs[st]["latency_count"])
                    runners = [r for r in raw.runners if r.arm == arm]
                    lat = [v for r in runners for v in r.lat["grpc_req_duration"][st]]
                    srv = [v for r in runners for v in r.server[st]]
                    for k, vals, q in (("p50_ms", lat, 0.5), ("p99_ms", lat, 0.99),
                                       ("server_p50_us", srv, 0.5), ("server_p99_us", srv, 0.99)):
                        self.assertAlmostEqual(cs[st][k], stats.percentile(sorted(vals), q))
                        self.assertTrue(around_rank(ps[st][k], vals, q), "%s: Prometheus %s, "
                                        "CSV %s, samples around it %s" % (
                                            k, ps[st][k], cs[st][k], sorted(vals)[-6:]))
            # k6's own dropped_iterations (no free VU; they carry no stage): the same events in
            # both outputs, k6 flushing its remote write once more as it stops. The steps'
            # drops above are the schedule's iterations less the calls (echodlib.
            # report.schedule_drops), so they agree whatever clock placed k6's samples
            drops = sum(v for r in raw.runners if r.arm == arm for _, v in r.dropped_at)
            self.assertEqual(p["k6_dropped_iterations"], drops, arm)
            self.assertEqual(c["k6_dropped_iterations"], drops, arm)
            # CPU per call: the first and last scrapes in the range against two scrapes around
            # the run (the same calls; the CPU between the scrapes differs a little)
            cpu = k6result.cpu_per_call_samples(self.before[arm], self.after[arm])
            self.assertLess(abs(p["cpu_us_per_call"] / cpu - 1), 0.2, (p["cpu_us_per_call"], cpu))

    def rule(self, name):
        got = {l["arm"]: v for l, v in self.client.vector(name, self.t1) if l.get("arm")}
        self.assertEqual(sorted(got), sorted(self.ARMS), "%s: %r" % (name, got))
        return got

    def test_recording_rules_on_the_run(self):
        for arm, v in self.rule("arm:echod_steps_per_call:rate1m").items():
            self.assertAlmostEqual(v, 6, places=9, msg=arm)
        disp = self.rule("arm:echod_dispatches_per_call:rate1m")
        self.assertAlmostEqual(disp["direct"], 0, places=9)
        self.assertGreater(disp["cached"], 1)
        tasks = self.rule("arm:echod_loop_tasks_per_call:rate1m")
        self.assertAlmostEqual(tasks["direct"], 0, places=9)
        self.assertAlmostEqual(tasks["cached"], 3, places=6)
        self.assertTrue(all(v > 0 for v in self.rule("arm:echod_flushes_per_call:rate1m").values()))
        cpu = self.rule("arm:echod_cpu_seconds_per_call:rate1m")
        self.assertTrue(all(0 < v < 0.01 for v in cpu.values()), cpu)
        for name in ("arm:echod_handling_seconds:p99_rate1m", "arm:k6_grpc_req_duration_seconds:"
                     "p99_rate1m", "arm:k6_server_total_us:p99_rate1m"):
            self.assertTrue(all(v > 0 for v in self.rule(name).values()), name)
        self.assertEqual(self.rule("arm:echod_ready:min"), {"direct": 1, "cached": 1})
        self.assertEqual(self.rule("arm:echod_draining:max"), {"direct": 0, "cached": 0})
        self.assertEqual(self.rule("arm:echod_resource_exhausted:rate1m"),
                         {"direct": 0, "cached": 0})
        self.assertEqual(self.rule("arm:k6_failed:rate1m"), {"direct": 0, "cached": 0})
        offered, sent = self.rule("arm:k6_offered:rate1m"), self.rule("arm:k6_sent:rate1m")
        for arm in self.ARMS:
            self.assertGreaterEqual(offered[arm], sent[arm])
            self.assertGreater(sent[arm], 0)
        # a CFS ratio where there are periods: direct's quota (cached has none here)
        throttled = {l["arm"]: v for l, v in self.client.vector(
            "arm:echod_cfs_throttled_ratio:rate1m", self.t1)}
        self.assertLessEqual(set(throttled), set(self.ARMS), throttled)
        self.assertTrue(all(0 <= v <= 1 for v in throttled.values()), throttled)
        if self.group:
            self.assertIn("direct", throttled)
        # no alert fires on an arm serving well below its capacity
        firing = self.client.vector('ALERTS{alertstate="firing"}', self.t1)
        self.assertEqual(firing, [])

    def test_dashboard_queries(self):
        """Every target of every panel over the run: data, one series in an arm's own row (per
        selected arm in the side-by-side row), numbers where numbers are due; and once the arms
        are idle, no NaN or infinity (a ratio or a percentile over a window without calls shows
        nothing, as a Grafana user would want)."""
        with open(DASHBOARD) as f:
            dash = json.load(f)
        self.assertEqual({v["name"] for v in dash["templating"]["list"]}, {"datasource", "arm"})
        arms_var = next(v for v in dash["templating"]["list"] if v["name"] == "arm")
        found = {l.get("arm") for l, _ in self.client.vector(
            arms_var["query"]["query"].replace("label_values(", "count by (arm) (").replace(
                ", arm)", ")"), self.t1)}
        self.assertEqual(found, set(self.ARMS), "the arm variable's values")
        # over the run: a rate interval holding all of it, as Grafana's $__rate_interval is on a
        # dashboard showing the run (the arms' k6 runs start and end a few seconds apart on a
        # busy machine, so a 5 s window at its end can hold one arm's calls and not the other's)
        run = "%ds" % math.ceil(self.t1 - self.t0)
        checked = 0
        for title, t, arm, repeated in dashboard_targets(dash, self.ARMS):
            expr = expand(t["expr"], arm, self.ARMS, run)
            with self.subTest(panel=title, target=t["legendFormat"], arm=arm):
                res = self.client.vector(expr, self.t1 - 1)
                checked += 1
                self.assertTrue(all(math.isfinite(v) for _, v in res), (expr, res))
                # no queue wait on direct (no executor queue); CFS periods where a quota is
                # (direct's, where this machine allows one; an arm in a limited container too)
                want, may = set(self.ARMS), set()
                if "queue_wait" in expr:
                    want.discard("direct")
                if "throttled" in expr:
                    want, may = {"direct"} if self.group else set(), set(self.ARMS)
                if arm and arm not in want:
                    continue
                if not arm and not want and not res:
                    continue
                self.assertTrue(res, "no data: %s" % expr)
                if repeated and "{{" not in t["legendFormat"]:
                    self.assertEqual(len(res), 1, res)
                elif "{{arm}}" in t["legendFormat"]:
                    got = {l.get("arm") for l, _ in res}
                    self.assertTrue(want <= got <= want | may, (want, res))
        self.assertGreater(checked, 40)
        # idle: a 5 s window after every call and every k6 sample of the run (k6 ended before
        # t1 - 3; echod is scraped every second)
        idle = self.t1 + 4
        time.sleep(max(0.0, idle + 1 - time.time()))
        for title, t, arm, _ in dashboard_targets(dash, self.ARMS):
            expr = expand(t["expr"], arm, self.ARMS)
            with self.subTest(panel=title, target=t["legendFormat"], arm=arm, idle=True):
                res = self.client.vector(expr, idle)
                self.assertTrue(all(math.isfinite(v) for _, v in res), (expr, res))
        if not self.group:
            print("note: no CPU-quota cgroup here (%s): the throttling panels were checked "
                  "to show nothing" % self.group_why)

    def test_exposition_parses(self):
        for arm, text in self.scrapes.items():
            with self.subTest(arm=arm):
                self.assertEqual(prom.check_exposition(text), [])
                p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, text=True,
                                   capture_output=True)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                # and Prometheus took every sample of its last scrape
                inst = "127.0.0.1:%d" % self.daemons[arm].admin_port
                stored = self.client.vector('scrape_samples_scraped{instance="%s"}' % inst, self.t1)
                self.assertEqual(stored[0][1], len(prom.parse_metrics(text)))

    def test_check_exposition_finds_faults(self):
        bad = ("# TYPE a_total counter\na_total 1\na_total 2\n"
               "# TYPE h histogram\nh_bucket{le=\"1\"} 5\nh_bucket{le=\"2\"} 3\n"
               "h_bucket{le=\"+Inf\"} 4\nh_count 5\nh_sum 1\nuntyped_thing 1\n")
        problems = prom.check_exposition(bad)
        self.assertTrue(any("twice" in p for p in problems), problems)
        self.assertTrue(any("fall" in p for p in problems), problems)
        self.assertTrue(any("_count" in p for p in problems), problems)
        self.assertTrue(any("no # TYPE" in p for p in problems), problems)
        self.assertTrue(prom.check_exposition("a{b=} 1\n")[0].startswith("does not parse"))


@unittest.skipIf(LIVE_WHY_NOT or not shutil.which("h2load"),
                 "bench/study --prometheus skipped: %s" % (LIVE_WHY_NOT or "no h2load"))
class Study(unittest.TestCase):
    def test_quick_study_into_prometheus(self):
        out = tempfile.mkdtemp(prefix="study-prometheus-")
        try:
            p = subprocess.run([PY, os.path.join(ROOT, "bench", "study"), "--quick", "--arms",
                                "direct", "--prometheus", "--out", out],
                               capture_output=True, text=True, timeout=600, cwd=ROOT)
            self.assertEqual(p.returncode, 0, p.stderr[-4000:])
            with open(os.path.join(out, "study.json")) as f:
                study = json.load(f)
            self.assertEqual(study["prometheus"], os.path.join(out, "prometheus"))
            # the study's TSDB, opened again: what a user does after the run
            with promserver.Prometheus(directory=study["prometheus"], scrape=False) as pr:
                steps = [s for s in study["results"]["direct"]["fixed"] +
                         study["results"]["direct"]["ramp"] if s["driver"].startswith("k6")]
                self.assertTrue(steps)
                for s in steps:
                    with self.subTest(offered=s["offered"]):
                        got = k6prom.read_prometheus(pr.url, s["t_start"], s["t_end"])
                        # the ramp is one k6 run: a step's range also holds the later steps
                        step = [x for x in got["direct"].steps if s["driver"].startswith("k6 (constant")
                                or x.stage == s["stage"]]
                        self.assertEqual(len(step), 1, [x.as_dict() for x in step])
                        self.assertEqual((step[0].offered, step[0].sent, step[0].ok),
                                         (s["offered"], s["sent"], s["ok"]))
                        # k6's p99 is at most the sample above its rank, whose bucket holds
                        # Prometheus's (study.json keeps no samples to bound it from above)
                        self.assertGreaterEqual(step[0].p99_ms * BUCKET, s["p99_ms"])
                        self.assertTrue(within_buckets(step[0].p50_ms, s["p50_ms"]),
                                        (step[0].p50_ms, s["p50_ms"]))
                        self.assertIsNotNone(got["direct"].cpu_us_per_call)
                # echod was scraped, and the rules ran, during the study
                self.assertTrue(pr.client.vector(
                    "max_over_time(arm:echod_steps_per_call:rate1m[1h])", study_end(study)))
        finally:
            shutil.rmtree(out, ignore_errors=True)


def study_end(study):
    return max(s["t_end"] for arm in study["results"].values() for s in arm["ramp"])


if __name__ == "__main__":
    main()
