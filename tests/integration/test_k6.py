"""The shipped k6 scripts (deploy/k6) on the real k6 against a live echod.

Each script runs for a few seconds with the proto file (REFLECT=0, the default: proto/echo.proto
found by the script's default PROTO_DIR) and with server reflection (REFLECT=1, the types taken
once in setup, before the VUs connect), and its run is judged
from k6's own output: exit status, the handleSummary JSON (every call sent answered OK, no check
failed, echod-timing read from the trailers), the `--out csv` and `--out json` samples, and k6's
log (no script error). Negative scripts (a method echod does not have, a response read wrong)
must be caught by the same judge, so a broken shipped script fails here too.

k6 is ../shared/tools/k6 relative to the repository root, else $K6, else `k6` on PATH; without
one (or with one older than the scripts need) every test is skipped with the reason.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_k6.py
"""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import ROOT, SLOW, Daemon, free_port, main, port_open, tool_output  # noqa: E402
from echodlib import k6 as k6lib, k6result  # noqa: E402  (echod_harness put tools/ on sys.path)

K6_DIR = os.path.join(ROOT, "deploy", "k6")
CSV_HEADER = ("metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,"
              "method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,"
              "metadata").split(",")
WHY_NOT = k6lib.unusable()
K6 = k6lib.find()


def run_k6(script, target, env, tmp, args=()):
    """k6 run SCRIPT with -e ENV, --out csv and --out json into tmp: (proc, summary, csv, json)."""
    summary = os.path.join(tmp, "summary.json")
    out_csv = os.path.join(tmp, "out.csv")
    out_json = os.path.join(tmp, "out.json")
    cmd = [K6, "run", "--no-usage-report", "-q", "--out", "csv=" + out_csv,
           "--out", "json=" + out_json] + list(args)
    for k, v in dict(env, TARGET=target, ARM="k6test", SUMMARY_FILE=summary).items():
        cmd += ["-e", "%s=%s" % (k, v)]
    cmd.append(script)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120 * SLOW)
    p.cmd = " ".join(cmd)
    return p, summary, out_csv, out_json


def read_csv(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        rows = [dict(zip(header, row)) for row in r]
    for row in rows:
        row["tags"] = dict(kv.split("=", 1) for kv in (row.get("extra_tags") or "").split("&")
                           if kv)
    return header, rows


def reflection_timing(metric, name):
    """Whether a sample is k6's timing of the reflection RPC it makes inside connect(): no name,
    no method, none of the script's tags. k6 records it only when that connection closes while
    the run's context is still live, so in some runs and not in others (grafana/k6 pull 2160
    describes it). It is not a call of the script; deploy/report skips it too (no stage)."""
    return metric == "grpc_req_duration" and not name


def read_json_points(path):
    """k6 --out json: one object per line; the Point lines."""
    with open(path) as f:
        return [d for d in (json.loads(line) for line in f if line.strip())
                if d.get("type") == "Point"]


def count(summary, name):
    m = summary["summary"]["metrics"].get(name)
    return 0 if m is None else m["values"].get("count", 0)


def judge(p, summary_path, script=None):
    """What is wrong with a k6 run of an echod script, as a list of sentences (empty: nothing)."""
    bad = []
    if p.returncode != 0:
        bad.append("k6 exited %d" % p.returncode)
    errors = [l for l in p.stderr.splitlines() if "level=error" in l]
    if errors:
        bad.append("k6 logged errors: " + " | ".join(errors[:3]))
    if not os.path.exists(summary_path):
        return bad + ["no handleSummary JSON written"]
    with open(summary_path) as f:
        s = json.load(f)
    if script and (s.get("echod_k6") != 1 or s.get("script") != script or s.get("arm") != "k6test"):
        bad.append("handleSummary JSON header: %r" % {k: s.get(k) for k in ("echod_k6", "script",
                                                                              "arm")})
    failed_checks = [(c["name"], c["fails"]) for c in s["summary"]["root_group"].get("checks", [])
                     if c["fails"]]
    for g in s["summary"]["root_group"].get("groups", []):
        failed_checks += [(c["name"], c["fails"]) for c in g.get("checks", []) if c["fails"]]
    if failed_checks:
        bad.append("checks failed: %r" % failed_checks)
    sent, ok = count(s, "echo_sent"), count(s, "echo_ok")
    if not ok:
        bad.append("no call answered OK (echo_ok 0)")
    if ok != sent or count(s, "echo_failed"):
        bad.append("echo_sent %d, echo_ok %d, echo_failed %d" % (sent, ok, count(s, "echo_failed")))
    return bad


def explain(p, bad):
    return "%s\ncommand: %s\n%s" % ("; ".join(bad), p.cmd, tool_output(p, 8000))


@unittest.skipIf(WHY_NOT, "k6 tests skipped: %s" % WHY_NOT)
class ShippedScripts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(sets=["log.level=warn"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        cls.d.cleanup()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="k6-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_script(self, name, env, reflect, args=()):
        env = dict(env, REFLECT=reflect)
        p, summary, out_csv, out_json = run_k6(os.path.join(K6_DIR, name + ".js"),
                                               self.d.grpc_target, env, self.tmp, args)
        bad = judge(p, summary, name)
        self.assertEqual(bad, [], explain(p, bad))
        with open(summary) as f:
            s = json.load(f)
        header, rows = read_csv(out_csv)
        self.assertEqual(header, CSV_HEADER)
        rows = [r for r in rows if not reflection_timing(r["metric_name"], r["name"])]
        points = [pt for pt in read_json_points(out_json)
                  if not reflection_timing(pt["metric"], pt["data"]["tags"].get("name"))]
        self.assertTrue(points, "k6 --out json wrote no points")
        lat = s["latency_metric"]
        for sample in ([r for r in rows if r["metric_name"] == lat],
                       [pt for pt in points if pt["metric"] == lat]):
            self.assertTrue(sample, "no %s samples" % lat)
        for r in rows:
            if r["metric_name"] == lat:
                self.assertEqual(r["tags"].get("arm"), "k6test", r)
                self.assertTrue(r["tags"].get("stage"), r)
        for pt in points:
            if pt["metric"] == lat:
                self.assertTrue(pt["data"]["tags"].get("stage"), pt)
        # the server's side of every unary call, read from the echod-timing trailer
        self.assertGreater(count(s, "server_total_us"), 0)
        self.assertEqual(count(s, "server_timing_missing"), 0)
        return s, rows

    def unary_rows_ok(self, rows, n):
        grpc_rows = [r for r in rows if r["metric_name"] == "grpc_req_duration"]
        self.assertGreaterEqual(len(grpc_rows), n)
        for r in grpc_rows:
            self.assertEqual((r["status"], r["name"], r["method"], r["service"]),
                             ("0", "/grpc.examples.echo.Echo/UnaryEcho", "UnaryEcho",
                              "grpc.examples.echo.Echo"))

    def test_proto_dir_missing(self):
        """REFLECT=0 (the default) with no echo.proto at PROTO_DIR: k6 stops in the init context
        with what to set, before any call."""
        p, _, _, _ = run_k6(os.path.join(K6_DIR, "unary-fixed-rate.js"), self.d.grpc_target,
                            {"RATE": "5", "DURATION": "1s", "PROTO_DIR": "/nonexistent"}, self.tmp)
        self.assertNotEqual(p.returncode, 0, tool_output(p))
        self.assertIn("cannot load echo.proto from PROTO_DIR=/nonexistent", p.stderr)
        self.assertIn("REFLECT=1", p.stderr)

    def test_unary_fixed_rate(self):
        for reflect in ("1", "0"):
            with self.subTest(reflect=reflect):
                s, rows = self.run_script("unary-fixed-rate", {"RATE": "20", "DURATION": "2s",
                                                               "VUS": "2"}, reflect)
                self.assertGreaterEqual(count(s, "echo_ok"), 30)  # 20/s for 2 s, loaded machine
                self.unary_rows_ok(rows, 30)

    def reflections(self):
        return self.d.metrics().metric("grpc_server_started_total",
                                       grpc_method="ServerReflectionInfo")

    def test_unary_ramp(self):
        for reflect in ("1", "0"):
            with self.subTest(reflect=reflect):
                before = self.reflections()
                s, rows = self.run_script("unary-ramp", {"START": "10", "END": "20", "STEP": "10",
                                                         "STEP_DURATION": "1s", "VUS": "2"},
                                          reflect)
                # REFLECT=1: setup's connection, then each VU's (every VU preconnects); k6
                # before v1.2.0 panics when two VUs register the reflected types at once
                # (common.js reflectOnce). REFLECT=0: none.
                self.assertEqual(self.reflections() - before, 3 if reflect == "1" else 0)
                stages = {r["tags"]["stage"] for r in rows
                          if r["metric_name"] == "grpc_req_duration"}
                self.assertEqual(stages, {"s01", "s02"})
                self.unary_rows_ok(rows, 20)

    def test_unary_ramp_rates_and_slices(self):
        """What bench/study's open-model ramp reads: uneven steps (RATES), every VU connected
        before the ramp (PRECONNECT, none late), the p99 of each slice of a step, answers by the
        step they arrived in, and the ramp's wall-clock start in setup_data."""
        s, rows = self.run_script("unary-ramp", {"RATES": "10,30", "STEP_DURATION": "1s",
                                                 "SLICE_SECONDS": "0.5", "VUS": "3",
                                                 "CONNECT_SECONDS": "2"}, "0")
        self.assertEqual([(st["offered"], st["slices"]) for st in s["schedule"]], [(10, 2), (30, 2)])
        for st in ("s01", "s02"):
            for k in ("00", "01"):
                self.assertTrue(count(s, "grpc_req_duration{stage:%s,slice:%s}" % (st, k)), (st, k))
        answered = sum(count(s, "echo_answered{stage:%s}" % st) for st in ("s01", "s02"))
        self.assertGreater(answered, 0)
        self.assertLessEqual(answered, count(s, "echo_ok"))
        self.assertEqual(count(s, "late_connects"), 0)
        start = s["summary"]["setup_data"]["ramp_start_ms"] / 1000.0
        first = min(float(r["timestamp"]) for r in rows if r["metric_name"] == "echo_sent")
        self.assertGreaterEqual(first + 1, start)  # CSV timestamps are whole seconds here
        self.assertEqual({r["tags"].get("slice") for r in rows
                          if r["metric_name"] == "grpc_req_duration"}, {"00", "01"})

    def test_unary_ramp_warmup(self):
        """WARMUP_RATE: one call on each VU before the first step, with no synthetic work on
        the server whatever WORK_* asks of the steps' calls, in no step: every step still sends
        its schedule exactly, and the ramp's start in setup_data comes after the warm-up."""
        s, rows = self.run_script("unary-ramp", {"RATES": "10,20", "STEP_DURATION": "1s",
                                                 "VUS": "4", "WARMUP_RATE": "2",
                                                 "CONNECT_SECONDS": "2", "WORK_CPU_US": "3000"},
                                  "0")
        self.assertEqual(s["summary"]["setup_data"]["warmup"],
                         {"iterations": 4, "seconds": 2, "rate": 2})
        self.assertEqual([count(s, "echo_sent{stage:%s}" % st) for st in ("s01", "s02")], [10, 20])
        warm = [r for r in rows if r["tags"].get("warmup") == "1"]
        self.assertEqual({r["tags"]["stage"] for r in warm}, {"warmup"})
        self.assertEqual(sum(1 for r in warm if r["metric_name"] == "grpc_req_duration"), 4)
        server = {w: [float(r["metric_value"]) for r in rows if r["metric_name"] == "server_handler_us"
                      and (r["tags"].get("warmup") == "1") == w] for w in (True, False)}
        self.assertEqual(len(server[True]), 4)
        self.assertLess(max(server[True]), 1000, "a warm-up call did synthetic work")
        self.assertGreater(min(server[False]), 2500, "a step's call did not do WORK_CPU_US")
        start = s["summary"]["setup_data"]["ramp_start_ms"] / 1000.0
        last_warm = max(float(r["timestamp"]) for r in warm)
        self.assertLessEqual(last_warm, start + 1)  # CSV timestamps are whole seconds here
        first = min(float(r["timestamp"]) for r in rows
                    if r["metric_name"] == "echo_sent" and r["tags"].get("stage") == "s01")
        self.assertGreaterEqual(first + 1, start)
        reader = k6result.CsvReader()
        reader.add(os.path.join(self.tmp, "out.csv"))
        self.assertEqual([st.stage for st in reader.results()["k6test"].steps], ["s01", "s02"])

    def test_bidi_ramp(self):
        for reflect in ("1", "0"):
            with self.subTest(reflect=reflect):
                # 2 streams, 100 then 200 msg/s aggregate for 1 s each: 300 messages due
                s, rows = self.run_script("bidi-ramp", {"STREAMS": "2", "START": "100",
                                                        "END": "200", "STEP": "100",
                                                        "STEP_DURATION": "1s", "PROBE_RATE": "5"},
                                          reflect)
                self.assertEqual(count(s, "echo_sent") + count(s, "echo_dropped"), 300)
                for st in ("s01", "s02"):
                    self.assertTrue(count(s, "bidi_msg_latency_ms{stage:%s}" % st), st)
                # echo_answered: the same answers by the stage they arrived in, which is what
                # deploy/report calls a step's goodput (an answer after the schedule is in none)
                answered = [count(s, "echo_answered{stage:%s}" % st) for st in ("s01", "s02")]
                self.assertTrue(all(answered), answered)
                self.assertLessEqual(sum(answered), count(s, "echo_ok"))
                self.assertGreater(sum(answered), count(s, "echo_ok") / 2)
                steps = k6result.read_summary_doc(s, "summary").steps
                self.assertEqual([st.goodput for st in steps], [a / 1.0 for a in answered])
                # the same counts from k6's --out csv and --out json, as deploy/report reads them
                for add, name in (("add", "out.csv"), ("add_json", "out.json")):
                    reader = k6result.CsvReader()
                    getattr(reader, add)(os.path.join(self.tmp, name))
                    got = {st.stage: st.answered for st in reader.results()["k6test"].steps}
                    self.assertEqual(got, {"s01": answered[0], "s02": answered[1]}, name)
                self.assertGreater(count(s, "probe_ok"), 0)

    def test_no_answer_exits_99(self):
        """A run that got no answer OK (nothing listens at TARGET) fails as a threshold (99), its
        summary still written: a Job's `k6 exited with N` tells it from a measurement."""
        p, summary, _, _ = run_k6(os.path.join(K6_DIR, "unary-fixed-rate.js"), "127.0.0.1:%d" % free_port(),
                                  {"RATE": "5", "DURATION": "1s", "VUS": "1"}, self.tmp)
        self.assertEqual(p.returncode, 99, tool_output(p))
        with open(summary) as f:
            self.assertEqual(count(json.load(f), "echo_ok"), 0)

    def test_rest_control(self):
        port = free_port()
        d = Daemon(config=os.path.join(ROOT, "config", "arms", "rest.yaml"),
                   sets=["log.level=warn", "listen.rest=127.0.0.1:%d" % port]).start()
        try:
            deadline = time.monotonic() + 10 * SLOW
            while not port_open(port):
                self.assertLess(time.monotonic(), deadline, "listen.rest never opened")
                time.sleep(0.05)
            p, summary, out_csv, _ = run_k6(os.path.join(K6_DIR, "rest-control.js"),
                                            "127.0.0.1:%d" % port,
                                            {"START": "10", "END": "20", "STEP": "10",
                                             "STEP_DURATION": "1s", "VUS": "2"}, self.tmp)
            bad = judge(p, summary, "rest-control")
            self.assertEqual(bad, [], explain(p, bad))
            _, rows = read_csv(out_csv)
            http_rows = [r for r in rows if r["metric_name"] == "http_req_duration"]
            self.assertGreaterEqual(len(http_rows), 20)
            for r in http_rows:
                self.assertEqual((r["status"], r["method"], r["expected_response"]),
                                 ("200", "POST", "true"), r)
        finally:
            d.stop()
            d.cleanup()


SCHEDULE_TEMPLATE = """
import * as c from '%(common)s';
export const options = { iterations: 1, vus: 1 };
function eq(got, want, what) {
  if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}
export function setup() {
  // 30, 100 and 7/s for 1.5 s: 45, 150 and 10.5 iterations, of which k6 starts 205
  const s = c.scheduleOf([30, 100, 7], 1.5);
  const per = {};
  for (let n = 0; n < 205; n++) {
    const d = c.dueStage(s, n, 0);
    per[d.stage.name] = (per[d.stage.name] || 0) + 1;
  }
  eq(per, { s01: 45, s02: 150, s03: 10 }, 'calls per step by their number');
  eq([c.dueStage(s, 44, 0).t, c.dueStage(s, 45, 0).stage.name], [1.5, 's02'], 'a step ends with its last call');
  // a number due 2 s before its call starts: k6 dropped iterations before it (by start time),
  // unless a VU's calls all run that late (k6 activating many VUs before the schedule's clock)
  eq(c.dueStage(s, 0, 2.0, 0).stage.name, 's02', 'a number lagging the clock');
  eq(c.dueStage(s, 0, 2.0, 1.5).stage.name, 's01', 'every call as late');
  eq([c.dueStage(s, 0, 4.0, 0.5).stage.name, c.dueStage(s, 0, 4.0, 0.5).t], ['s03', 3.5], 'by the schedule clock');
  eq(c.rampingStages(s).slice(-2), [{ target: 0, duration: '1us' }, { target: 0, duration: '1s' }], 'the idle tail');
}
export default function () {}
"""


@unittest.skipIf(WHY_NOT, "k6 tests skipped: %s" % WHY_NOT)
class Schedule(unittest.TestCase):
    """common.js's schedule arithmetic on k6's own engine: which step a ramp's call counts in
    (by its number, the schedule's; by its start, when its number lags the clock), the idle
    tail after the last step."""

    def test_due_stage(self):
        with tempfile.TemporaryDirectory(prefix="k6-schedule-") as tmp:
            path = os.path.join(tmp, "schedule.js")
            with open(path, "w") as f:
                f.write(SCHEDULE_TEMPLATE % {"common": os.path.join(K6_DIR, "common.js")})
            p = subprocess.run([K6, "run", "-q", "--no-usage-report", path], cwd=tmp,
                               capture_output=True, text=True, timeout=60 * SLOW)
            self.assertEqual(p.returncode, 0, tool_output(p))


BAD_TEMPLATE = """
import grpc from 'k6/net/grpc';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const sent = new Counter('echo_sent');
const ok = new Counter('echo_ok');
const client = new grpc.Client();
if (__ENV.REFLECT === '0') client.load(['%(proto)s'], 'echo.proto');
export const options = { iterations: 3, vus: 1 };

export default function () {
  if (__ITER === 0) client.connect(__ENV.TARGET, { plaintext: true, reflect: __ENV.REFLECT !== '0' });
  sent.add(1);
  const r = client.invoke('%(method)s', { message: 'x' });
  if (check(r, { 'answered right': (r) => r.status === grpc.StatusOK && %(cond)s })) ok.add(1);
}

export function handleSummary(data) {
  return { '%(summary)s': JSON.stringify({ echod_k6: 1, summary: data }) };
}
"""

BAD = {
    "missing-method": ("grpc.examples.echo.Echo/NoSuchEcho", "r.message.message === 'x'",
                       "not found"),
    "misread": ("grpc.examples.echo.Echo/UnaryEcho", "r.message.msg === 'x'", "checks failed"),
}


@unittest.skipIf(WHY_NOT, "k6 tests skipped: %s" % WHY_NOT)
class BrokenScriptsFail(unittest.TestCase):
    """The judge above catches a script calling a missing method or misreading a response; a
    script of the same shape done right passes it (so the failures are the scripts')."""

    def test_broken_scripts_are_caught(self):
        tmp = tempfile.mkdtemp(prefix="k6-bad-")
        try:
            with Daemon(sets=["log.level=warn"]) as d:
                cases = dict(BAD, good=("grpc.examples.echo.Echo/UnaryEcho",
                                        "r.message.message === 'x'", None))
                for reflect in ("1", "0"):
                    for name, (method, cond, needle) in cases.items():
                        with self.subTest(script=name, reflect=reflect):
                            summary = os.path.join(tmp, name + reflect + ".json")
                            path = os.path.join(tmp, name + reflect + ".js")
                            with open(path, "w") as f:
                                f.write(BAD_TEMPLATE % {"method": method, "cond": cond,
                                                        "summary": summary,
                                                        "proto": os.path.join(ROOT, "proto")})
                            p, _, _, _ = run_k6(path, d.grpc_target, {"REFLECT": reflect}, tmp)
                            bad = judge(p, summary)
                            if needle is None:
                                self.assertEqual(bad, [], explain(p, bad))
                            else:
                                self.assertTrue(any(needle in b for b in bad), explain(p, bad))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
