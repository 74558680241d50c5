"""bench/study --quick: the capacity study in miniature, as CI runs it.

Checks what a user of the study relies on, not how fast anything is: the command exits 0 (every
call and message answered OK; a driver's abandonment at a run's end is not a failure), every
table of the three experiments has a row per arm and step, every plot is a PNG, and the JSON
says which driver produced each row. The unary ramp runs in the study's regime, capped: k6
never had more calls in flight than the cap, the top step (1.2x capacity) filled it and k6
dropped the rest, every step's drops reported (offered x seconds - sent, adding up to k6's
own count), and the streaming ramp kept its schedule. The open model runs too (the --model
run, on direct): every step sent at least 0.97 of what it offered. The findings table is
there, labelled with the run's cost variant and regime, and every verdict in it is what the
documented rule gives for the figures beside it (recomputed here from the published and
measured values). Timing is never asserted.

The CFS-quota model runs too, on two arms, when this machine lets a cgroup with a quota be made
(root); and the witness (--witness: grpc-java's direct, direct-drain and virtual arms on JDK 21
beside echod's), skipped with the reason where the grpc-java peer cannot run (no peers dir, Java
or its jars: the product never needs them), failing where the peers are there but the JDK 21
is not (bench/study exits 2 naming ../shared/peers/install-jdk21.sh).
Skipped with the reason without `h2load` or k6, and in sanitizer builds (a load study measures a
release build). Run on its own:
  ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_study.py
"""

import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import ECHOD_BIN, ROOT, SANITIZER, main  # noqa: E402
from echodlib import cgroup as cglib  # noqa: E402  (echod_harness put tools/ on sys.path)
from echodlib import findings as F  # noqa: E402
from echodlib import k6 as k6lib  # noqa: E402
from echodlib.study import plan as study_plan, regimes  # noqa: E402

STUDY = os.path.join(ROOT, "bench", "study")


def why_skip():
    if SANITIZER:
        return "a sanitizer build (%s): the study measures release builds" % SANITIZER
    if not shutil.which("h2load"):
        return "nghttp2-client (h2load) is not installed"
    return k6lib.unusable()


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % path
    return struct.unpack(">II", head[16:24])


class StudyRun(unittest.TestCase):
    """A class whose tests read one `bench/study --quick ARGS` run: self.p, self.out and
    self.data (its study.json, None when it wrote none)."""
    ARGS = ()
    PREFIX = "study-test-"

    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix=cls.PREFIX)
        cls.p = subprocess.run(["/usr/bin/python3", STUDY, "--quick"] + list(cls.ARGS) +
                               ["--out", cls.out, "--echod", ECHOD_BIN], cwd=ROOT,
                               capture_output=True, text=True, timeout=600)
        cls.data = None
        path = os.path.join(cls.out, "study.json")
        if os.path.exists(path):
            with open(path) as f:
                cls.data = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def assert_exit_0(self):
        """bench/study exited 0; if not, the failure names the run's problems (study.json, which
        the out directory's removal would lose) and the ends of its output."""
        self.assertEqual(self.p.returncode, 0, "bench/study exit %d; problems: %s\n%s\n%s" % (
            self.p.returncode, (self.data or {}).get("problems"), self.p.stdout[-3000:],
            self.p.stderr[-6000:]))


@unittest.skipIf(why_skip(), "bench/study --quick skipped: %s" % why_skip())
class QuickStudy(StudyRun):

    def test_exit_status_and_no_problem(self):
        self.assert_exit_0()
        self.assertEqual(self.data["problems"], [])

    def test_grid_stalls(self):
        """The grid's calls carry the fitted stalls (echodlib/study/stalls.py) at the run's
        scale: 2% of them sleep the study's 65 ms in as many direct calls of service time."""
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        st = self.data["grid_stalls"]
        self.assertEqual((st["fraction"], st["study_ms"]), (0.02, 65.0))
        self.assertEqual(st["us"], round(65000 * self.data["cpu_us"] / 467.0))
        with open(os.path.join(self.out, "study.md")) as f:
            self.assertIn("- the fixed-rate grid's stalls: 2% of the grid's calls sleep", f.read())

    def test_every_table_has_every_arm(self):
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        arms = self.data["arms"]
        self.assertIn("direct", arms)
        with open(os.path.join(self.out, "study.md")) as f:
            md = f.read()
        for heading in ("## Fixed-rate grid", "## Unary saturation ramp", "## Streaming ramp"):
            self.assertIn(heading, md)
        for arm in arms:
            r = self.data["results"][arm]
            self.assertEqual([s["driver"].split(" ")[0] for s in r["fixed"]], ["k6", "h2load"])
            self.assertEqual(len(r["ramp"]), 2)
            self.assertEqual([run["streams"] for run in r["streams"]], [20])  # --quick: one count
            for s in r["fixed"] + r["ramp"]:
                self.assertGreater(s["ok"], 0, (arm, s))
                self.assertEqual(s["failed"], 0, (arm, s))
                self.assertIsNotNone(s["p99_ms"], (arm, s))
                self.assertIsNotNone(s["cpu_us_per_call"], (arm, s))
            for run in r["streams"]:
                for s in run["steps"]:
                    self.assertGreater(s["ok"], 0, (arm, s))
                    self.assertGreater(s["answered"], 0, (arm, s))
                    self.assertEqual(s["failed"], 0, (arm, s))
                # answers by arrival: a step may hold the one before's backlog, never more in all
                self.assertLessEqual(sum(s["answered"] for s in run["steps"]),
                                     sum(s["ok"] for s in run["steps"]), (arm, run["streams"]))
            self.assertIn("| %s | k6 |" % arm, md)
            self.assertIn("| %s | %s |" % (arm, "h2load"), md)
        self.assertGreater(self.data["cpu_us"], 0, "calibrated per-call work")
        # the throttling table is there when echod's cgroup counted CFS periods: not on a
        # pinned core, unless this machine's own cgroup has a quota
        counted = any((s["cfs"] or {}).get("periods") for arm in arms
                      for s in self.data["results"][arm]["fixed"] + self.data["results"][arm]["ramp"])
        self.assertEqual("## CFS throttling" in md, bool(counted))

    def test_plots_and_reports(self):
        for exp in ("fixed", "ramp", "streams"):
            for name in ("report.md", "report.json"):
                self.assertTrue(os.path.exists(os.path.join(self.out, exp, name)), (exp, name))
            for name in ("p99-vs-offered.png", "goodput-vs-offered.png"):
                w, h = png_size(os.path.join(self.out, exp, name))
                self.assertGreater(w, 300)
                self.assertGreater(h, 200)
        # echod's curves beside the published ones, and the tail inside the saturated steps
        with open(os.path.join(self.out, "study.md")) as f:
            md = f.read()
        for name in ("study-ramp-p99.png", "study-ramp-goodput.png", "study-ramp-slices.png",
                     "study-streams-p99.png"):
            w, h = png_size(os.path.join(self.out, name))
            self.assertGreater(w, 300)
            self.assertIn("(%s)" % name, md)

    def test_capped_through_the_top_step(self):
        """The study's regime: at most the cap's calls in flight (0.2 s of capacity in
        --quick), which the 1.2x step fills, k6 dropping the rest; every step's drops in the
        table beside the cap and Little's law on its p99."""
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        regime = self.data["regime"]
        self.assertEqual((regime["name"], regime["cap_s"], regime["published_caps"]),
                         ("capped", 0.2, False))
        self.assertEqual(regime["cap_calls"], round(0.2 * self.data["capacity"]))
        self.assertEqual(self.data["label"], "flat, capped 0.2 s")
        with open(os.path.join(self.out, "study.md")) as f:
            md = f.read()
        self.assertIn("### Capped at %d calls in flight (0.2 s of capacity)" % regime["cap_calls"],
                      md)
        cap = regime["cap_calls"]
        for arm in self.data["arms"]:
            ramp = self.data["results"][arm]["ramp"]
            run = self.data["results"][arm]["ramp_run"]
            self.assertEqual((run["vus"], run["cap_calls"], run["regime"]), (cap, cap, "capped"))
            self.assertGreaterEqual(ramp[-1]["fraction"], 1.2, arm)
            for s in ramp:
                where = (arm, s["stage"], s["offered"])
                self.assertTrue(s["driver"].startswith("k6 (ramping-arrival-rate"), where)
                self.assertEqual(s["scheduled"], s["offered"] * s["duration_s"], where)
                self.assertEqual(s["dropped"], max(0, round(s["scheduled"] - s["sent"])), where)
                # k6 held the cap: its busy VUs, seen each half second, never above it
                self.assertIsNotNone(s["busy_vus_max"], where)
                self.assertLessEqual(s["busy_vus_max"], cap, where)
                self.assertLess(s["k6_cores"], 0.9, where)
                self.assertIsNotNone(s["echod_in_flight_max"], where)
                self.assertGreater(s["k6_rss_mb"], 0, where)
                self.assertEqual(len(s["slices"]), math.ceil(self.data["plan"]["ramp_s"] /
                                                             self.data["plan"]["slice_s"]), where)
                self.assertRegex(md, r"\| %s \| %d \(0.2 s\) \| %.2g \| %.0f \| %d \| %d \| " % (
                    re.escape(arm), cap, s["fraction"], s["offered"], s["sent"], s["dropped"]))
            # the top step offers 0.2 x capacity more than the arm serves for 2 s, twice the
            # cap: the cap fills and k6 drops the rest
            self.assertGreater(ramp[-1]["dropped"], 0, arm)
            # the steps' drops are k6's own (to within the calls whose step a drop blurs)
            self.assertLessEqual(abs(sum(s["dropped"] for s in ramp) -
                                     run["k6_dropped_iterations"]),
                                 0.02 * sum(s["scheduled"] for s in ramp), arm)
            for srun in self.data["results"][arm]["streams"]:
                self.assertGreaterEqual(srun["steps"][-1]["offered"],
                                        1.2 * self.data["capacity"] - 1, arm)
                for s in srun["steps"]:
                    self.assertGreaterEqual(s["kept_ratio"], 0.97, (arm, srun["streams"], s))

    def test_findings_table_with_computed_verdicts(self):
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        found = self.data["findings"]
        self.assertEqual([x["id"] for x in found], ["F1", "F2", "F3", "F4", "F5"])
        with open(os.path.join(self.out, "study.md")) as f:
            md = f.read()
        self.assertIn("## Findings", md)
        for fd in found:
            self.assertEqual(fd["variant"], self.data["label"])
            for p in fd["parts"]:
                # every part of a full set of arms is measured, its computed verdict is the
                # rule's, and what it reads is that, or fitted / identity where the run's
                # inputs set its published figures
                self.assertIsNotNone(p["measured"], (fd["id"], p["figure"]))
                self.assertEqual(p["computed"], F.verdict(p["rule"], p["published"],
                                                          p["measured"], p["noise"]),
                                 (fd["id"], p))
                self.assertEqual(p["verdict"], F.label(p["computed"], p["basis"]), (fd["id"], p))
            self.assertEqual(fd["verdict"], F.weakest([p["verdict"] for p in fd["parts"]]))
            self.assertEqual((fd["published"], fd["measured"]),
                             (fd["parts"][0]["published"], fd["parts"][0]["measured"]))
            self.assertIn("| **%s** %s |" % (fd["id"], fd["title"]), md)
            self.assertIn("| **%s** |" % fd["verdict"], md)

    def test_merge_lines_up_variants(self):
        """--merge: two runs' findings side by side, one column per cost variant (here the
        same run twice, labelled apart)."""
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        out = tempfile.mkdtemp(prefix="study-merge-test-")
        try:
            p = subprocess.run(["/usr/bin/python3", STUDY, "--merge", self.out, self.out,
                                "--out", out], cwd=ROOT, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(out, "findings.json")) as f:
                merged = json.load(f)
            self.assertEqual(len(merged["variants"]), 2)
            for fd, orig in zip(merged["findings"], self.data["findings"]):
                self.assertEqual(fd["id"], orig["id"])
                self.assertEqual(sorted(fd["variants"]), sorted(merged["variants"]))
                for v in fd["variants"].values():
                    self.assertEqual(v["verdict"], orig["verdict"])
        finally:
            shutil.rmtree(out, ignore_errors=True)


MODEL = os.path.join(ROOT, "config", "models", "grpc-java-study.yaml")
MODEL_CAPACITY = 400  # --capacity for the model run: its streams (~7.4x) within one k6 core


@unittest.skipIf(why_skip(), "bench/study --quick --model skipped: %s" % why_skip())
class QuickModelStudy(StudyRun):
    """--model: the cost model's variant, on direct alone (its figures are the calibration's),
    in the open model."""
    ARGS = ("--arms", "direct", "--model", MODEL, "--capacity", str(MODEL_CAPACITY),
            "--regime", "open")
    PREFIX = "study-model-test-"

    def test_open_model_through_the_top_step(self):
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        self.assertEqual(self.data["regime"], {"name": "open", "label": "open"})
        with open(os.path.join(self.out, "study.md")) as f:
            md = f.read()
        self.assertIn("### Open model: sent, dropped, calls in flight", md)
        for arm in self.data["arms"]:
            ramp = self.data["results"][arm]["ramp"]
            self.assertGreaterEqual(ramp[-1]["fraction"], 1.2, arm)
            for s in ramp:
                where = (arm, s["stage"], s["offered"])
                self.assertTrue(s["driver"].startswith("k6 (ramping-arrival-rate"), where)
                self.assertEqual(s["scheduled"], s["offered"] * s["duration_s"], where)
                self.assertGreaterEqual(s["sent"] / s["scheduled"], 0.97,
                                        "%r: k6 dropped %d iterations" % (where, s["dropped"]))
                self.assertEqual(s["dropped"], max(0, round(s["scheduled"] - s["sent"])), where)
                self.assertRegex(md, r"\| %s \| %.2g \| %.3f \| %d \|" % (
                    re.escape(arm), s["fraction"], s["sent_ratio"], s["dropped"]))
                # the p99 of each slice of the step, and calls in flight seen from both sides
                self.assertEqual(len(s["slices"]), math.ceil(self.data["plan"]["ramp_s"] /
                                                             self.data["plan"]["slice_s"]), where)
                self.assertIsNotNone(s["busy_vus_max"], where)
                self.assertIsNotNone(s["echod_in_flight_max"], where)
                self.assertGreater(s["k6_rss_mb"], 0, where)
            run = self.data["results"][arm]["ramp_run"]
            self.assertGreaterEqual(run["vus"], 1, arm)
            self.assertEqual((run["regime"], run["cap_calls"]), ("open", None))

    def test_labelled_scaled_and_calibrated(self):
        self.assert_exit_0()
        cost = self.data["cost"]
        self.assertEqual(cost["variant"], "model:grpc-java-study")
        self.assertEqual(self.data["label"], "model:grpc-java-study, open")
        self.assertEqual(cost["model"], os.path.relpath(MODEL, ROOT))
        with open(MODEL) as f:
            units = {k[:-len("_cpu_us")]: v for k, v in
                     yaml.safe_load(f)["work"]["model"].items() if k.endswith("_cpu_us")}
        # one factor for every unit (the units are whole µs: within 1 µs of it)
        x = cost["units"]["call"] / units["call"]
        for u, v in units.items():
            self.assertLessEqual(abs(cost["units"][u] - v * x), 1.0, (u, cost["units"], units))
        # the calibration put direct at --capacity (the CPU clock's: 2% or a last round)
        self.assertLess(abs(self.data["capacity"] - MODEL_CAPACITY) / MODEL_CAPACITY, 0.05)
        for fd in self.data["findings"]:
            self.assertEqual(fd["variant"], "model:grpc-java-study, open")
        with open(os.path.join(self.out, "study.md")) as f:
            self.assertIn("model: config/models/grpc-java-study.yaml x", f.read())

    def test_streams_sized_from_the_stream_capacity(self):
        """A bidi message costs step + 2 messages, a unary call call + 6 steps + 2 messages: the
        stream ramp's steps are fractions of that capacity, ~7.4x the unary one."""
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        u = self.data["cost"]["units"]
        per_call = u["call"] + 6 * u["step"] + 2 * u["message"]
        per_msg = u["step"] + 2 * u["message"]
        scap = self.data["cost"]["stream_capacity"]
        self.assertAlmostEqual(scap / self.data["capacity"], per_call / per_msg, places=3)
        self.assertGreater(scap / self.data["capacity"], 5)
        for srun in self.data["results"]["direct"]["streams"]:
            self.assertGreaterEqual(srun["steps"][-1]["offered"], 1.2 * scap - 1)
            for s in srun["steps"]:
                self.assertGreaterEqual(s["kept_ratio"], 0.97, (srun["streams"], s))
        for s in self.data["results"]["direct"]["ramp"]:
            self.assertGreaterEqual(s["sent"] / s["scheduled"], 0.97, s["stage"])

    def test_bad_options(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as bad:
            bad.write("work:\n  model:\n    enabled: false\n")
            bad.flush()
            for extra, want in ((["--model", bad.name], "no enabled work.model"),
                                (["--model", "/nonexistent.yaml"], "--model:"),
                                (["--model", MODEL, "--cpu-us", "100"], "--cpu-us is the flat"),
                                (["--model-scale", "flat"], "--model-scale is --model's"),
                                (["--regime", "open", "--cap", "100"], "the capped regime's"),
                                (["--regime", "open", "--published-caps"], "the capped regime's"),
                                (["--cap", "100", "--cap-seconds", "1"], "give one"),
                                (["--cap-seconds", "0"], "at least one call")):
                p = subprocess.run(["/usr/bin/python3", STUDY, "--quick", "--echod", ECHOD_BIN]
                                   + extra, cwd=ROOT, capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 2, (extra, p.stderr))
                self.assertIn(want, p.stderr)

    def test_merge_with_a_flat_run(self):
        """--merge FLAT MODEL: one column per variant, labelled by the runs themselves (a run
        from before the regimes by its cost variant alone)."""
        self.assertIsNotNone(self.data, self.p.stderr[-4000:])
        flat = tempfile.mkdtemp(prefix="study-flat-doc-")
        out = tempfile.mkdtemp(prefix="study-merge-model-")
        try:
            doc = dict(self.data, cost={"variant": "flat", "text": "flat", "cpu_us": 0},
                       findings=None)
            del doc["label"], doc["regime"]
            with open(os.path.join(flat, "study.json"), "w") as f:
                json.dump(doc, f)
            p = subprocess.run(["/usr/bin/python3", STUDY, "--merge", flat, self.out, "--out", out],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(out, "findings.json")) as f:
                self.assertEqual(json.load(f)["variants"],
                                 ["flat", "model:grpc-java-study, open"])
        finally:
            shutil.rmtree(flat, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)


@unittest.skipIf(why_skip(), "bench/study's estimate skipped: %s" % why_skip())
class FullRunEstimate(unittest.TestCase):
    """What the full run says before it starts: the capped regime's 120 s ramp steps, its cap
    and the published caps' extra ramps in its estimate; with fewer VUs than the cap it stops
    there (exit 2) rather than run another regime."""

    def test_estimate_and_a_cap_past_the_vus(self):
        p = subprocess.run(["/usr/bin/python3", STUDY, "--k6-max-vus", "1000", "--echod",
                            ECHOD_BIN], cwd=ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        plan = study_plan.Plan(False, regime="capped")
        regime = regimes.Capped(plan, 1000, published_caps=True)
        minutes = plan.estimate_s(4, regime.setup_s(1000), 2, mux=True) / 60  # --mux: on
        self.assertIn("4 arms, 120 s ramp steps: about %.0f min of steps; the ramp holds 1994 "
                      "VUs, its cap (1.99 s of 1000 calls/s), then direct capped at 0.716 s, then "
                      "direct-drain capped at 0.716 s; at most 1000 (--k6-max-vus)" % minutes,
                      p.stderr)
        self.assertIn("a cap of 1994 calls needs as many VUs, more than k6 may have here (1000: "
                      "--k6-max-vus)", p.stderr)


class VerdictRule(unittest.TestCase):
    """The verdict rule of echodlib.findings at its edges (no run needed)."""

    def test_ratio(self):
        v = F.verdict
        self.assertEqual(v(F.RATIO, 0.36, 0.36, 0.1), "reproduced")
        self.assertEqual(v(F.RATIO, 0.36, 0.59, 0.1), "reproduced")     # about half the effect
        self.assertEqual(v(F.RATIO, 0.36, 0.62, 0.1), "in direction")
        self.assertEqual(v(F.RATIO, 0.36, 0.14, 0.1), "reproduced")     # about twice the effect
        self.assertEqual(v(F.RATIO, 0.36, 0.1, 0.1), "in direction")
        self.assertEqual(v(F.RATIO, 0.36, 0.95, 0.1), "not")            # below the noise floor
        self.assertEqual(v(F.RATIO, 0.36, 1.5, 0.1), "not")             # the other sign
        self.assertEqual(v(F.RATIO, 0.36, None, 0.1), "not measured")
        self.assertEqual(v(F.RATIO, 1.04, 1.076, 0.02), "reproduced")
        self.assertEqual(v(F.RATIO, 1.04, 1.01, 0.02), "not")

    def test_unchanged_and_weakest(self):
        self.assertEqual(F.verdict(F.UNCHANGED, 1.01, 0.98), "reproduced")
        self.assertEqual(F.verdict(F.UNCHANGED, 1.01, 1.08), "in direction")
        self.assertEqual(F.verdict(F.UNCHANGED, 1.01, 0.8), "not")
        self.assertEqual(F.weakest(["reproduced", "in direction"]), "in direction")
        self.assertEqual(F.weakest(["reproduced", "not measured"]), "not measured")

    def test_every_finding_without_figures_is_not_measured(self):
        found = F.compute({}, "flat")
        self.assertEqual([x["verdict"] for x in found], ["not measured"] * 5)


def why_skip_quota():
    why = why_skip()
    if why:
        return why
    group, why = cglib.CpuQuota.create("echod-study-probe", 1.0)
    if group is None:
        return why
    why = group.remove()
    if why:
        raise AssertionError(why)
    return None


WHY_SKIP_QUOTA = why_skip_quota()  # once: the probe makes and removes a cgroup
STEP_S = 3  # --step-seconds, against --quick's 2 s unary and 1 s stream steps


@unittest.skipIf(WHY_SKIP_QUOTA, "bench/study --quick --cpu-model quota skipped: %s"
                 % WHY_SKIP_QUOTA)
class QuickQuotaStudy(StudyRun):
    """The CFS-quota model in miniature: echod runs in a 1-CPU quota cgroup and every unary
    step records its CFS periods, so study.md gets its throttling table (its figures are not
    asserted: a pool arm may or may not exceed the quota). One arm, `cached`, the one whose
    threads can run on both cores. It runs with --step-seconds, so the knob's steps are
    checked too."""

    ARGS = ("--cpu-model", "quota", "--step-seconds", str(STEP_S), "--arms", "cached")
    PREFIX = "study-quota-test-"

    def test_throttling_table(self):
        self.assert_exit_0()
        with open(os.path.join(self.out, "study.json")) as f:
            data = json.load(f)
        self.assertIn("CFS quota of one CPU", data["cpu_model"])
        for arm in data["arms"]:
            for s in data["results"][arm]["fixed"] + data["results"][arm]["ramp"]:
                cfs = s["cfs"]
                # every step ran seconds of work in the cgroup: the kernel counted its periods
                self.assertGreater(cfs["periods"], 0, (arm, s["offered"], cfs))
                self.assertLessEqual(cfs["throttled_periods"], cfs["periods"], (arm, cfs))
                self.assertGreaterEqual(cfs["throttled_s"], 0, (arm, cfs))
        with open(os.path.join(self.out, "study.md")) as f:
            md = f.read()
        self.assertIn("## CFS throttling per step", md)
        self.assertRegex(md, r"\| 1\.2 x \| \d+ \| \d+% \([0-9.]+ s\) \|")

    def test_step_seconds(self):
        self.assert_exit_0()
        with open(os.path.join(self.out, "study.json")) as f:
            res = json.load(f)["results"]
        for arm in res:
            self.assertEqual([s["duration_s"] for s in res[arm]["ramp"]], [STEP_S] * 2, arm)
            self.assertTrue(all(s["duration_s"] >= STEP_S for s in res[arm]["fixed"]), arm)
            for run in res[arm]["streams"]:
                self.assertEqual([s["duration_s"] for s in run["steps"]], [STEP_S] * 2,
                                 (arm, run["streams"]))
        self.assertRegex(self.p.stderr, r"1 arm, %d s ramp steps: about \d+ min of steps"
                         % STEP_S)

    def test_step_seconds_below_one(self):
        p = subprocess.run(["/usr/bin/python3", STUDY, "--step-seconds", "0", "--echod", ECHOD_BIN],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--step-seconds must be at least 1", p.stderr)


def why_skip_witness():
    """Why the witness cannot run here (the peers dir, Java 17 or the grpc-java jars missing:
    the product never needs them), or None. A missing JDK 21 is no reason: with the peers there,
    bench/study --witness exits 2 naming ../shared/peers/install-jdk21.sh, and the test fails
    (deploy/bootstrap.sh test installs it)."""
    why = why_skip()
    if why:
        return why
    from echodlib import peers
    return peers.unusable()


WHY_SKIP_WITNESS = why_skip_witness()
WITNESS_ARMS = ["direct", "direct-drain", "virtual"]


@unittest.skipIf(WHY_SKIP_WITNESS, "bench/study --quick --witness skipped (the grpc-java peer "
                 "is what it measures): %s" % WHY_SKIP_WITNESS)
class QuickWitnessStudy(StudyRun):
    """--witness: grpc-java's direct, direct-drain and virtual arms (the study's three, on its
    JDK 21) through the same experiments beside echod's arms of those names, in the same run:
    their steps measured from the drivers' counts and their process clocks (the peer has no
    /metrics), the stream ramps on the arms in the direct and virtual roles (F5), each peer's
    JVM over its measured run (compiler share, GC pauses: an arm over the limits is flagged and
    the findings it takes a role in are not judged), the findings' witness column, the per-step
    tables. Figures are not asserted (a --quick warm-up rarely lets the JIT settle)."""

    ARGS = ("--arms", ",".join(WITNESS_ARMS), "--witness", ",".join(WITNESS_ARMS), "--mux")
    PREFIX = "study-witness-test-"

    def test_witness_beside_echod(self):
        from echodlib.study import witness
        self.assert_exit_0()
        w = self.data["witness"]
        self.assertEqual((w["label"], w["arms"], w["pairs"]), (
            "witness:grpc-java", WITNESS_ARMS, {a: a for a in WITNESS_ARMS}))
        self.assertEqual(w["roles"], {"direct": "direct", "virtual": "virtual",
                                      "direct-drain": "direct-drain"})
        self.assertEqual(w["stream_arms"], ["direct", "virtual"])
        self.assertEqual(w["cpu_us"], self.data["cpu_us"], "flat work at the run's scale")
        # every arm on the study's JDK 21, and each peer says so at start
        self.assertEqual(w["jdk"]["version"], 21, w["jdk"])
        for name, run in w["runs"].items():
            self.assertIn(run["transport"], ("nio", "epoll"), name)
            self.assertRegex(run["java"] or "", r"^21\b", name)
            self.assertEqual(run["jdk"], 21, name)
        for arm in WITNESS_ARMS:
            name = "java-" + arm
            r = w["results"][name]
            e = self.data["results"][arm]
            self.assertEqual([s["driver"].split(" ")[0] for s in r["fixed"]], ["k6", "h2load"])
            self.assertEqual(len(r["ramp"]), len(e["ramp"]), name)
            for s in r["fixed"] + r["ramp"]:
                self.assertGreater(s["ok"], 0, (name, s))
                self.assertEqual(s["failed"], 0, (name, s))
                self.assertIsNotNone(s["p99_ms"], (name, s))
                self.assertIsNotNone(s["cpu_us_per_call"], (name, s))
            # the stream ramps on the direct and virtual roles' arms only, as echod's run them
            want = len(e["streams"]) if arm in ("direct", "virtual") else 0
            self.assertEqual(len(r["streams"]), want, name)
            for run in r["streams"]:
                self.assertEqual(len(run["steps"]), len(self.data["plan"]["stream_fractions"]))
                self.assertGreater(sum(s["answered"] for s in run["steps"]), 0, (name, run))
        self.assertEqual(len(w["comparison"]), sum(
            len(w["results"][n]["fixed"]) + len(w["results"][n]["ramp"]) for n in w["results"]))
        self.assertEqual(len(w["stream_comparison"]), sum(
            len(run["steps"]) for n in w["results"] for run in w["results"][n]["streams"]))
        for row in w["comparison"] + w["stream_comparison"]:
            self.assertEqual(row["witness"], "java-" + row["echod"])
            for k in ("p99_ms", "goodput"):
                self.assertIsNotNone(row["witness_fig"][k], row)
        # the multiplexed shape on every arm of both servers: a closed loop, then the open
        # top step (--quick's ramp has 0.4x and 1.2x), every call answered
        from echodlib.study import mux
        for name, r in [(a, self.data["results"][a]) for a in WITNESS_ARMS] + \
                [("java-" + a, w["results"]["java-" + a]) for a in WITNESS_ARMS]:
            m = r["mux"]
            self.assertEqual([m["closed"]["stage"]] + [s["stage"] for s in m["open"]],
                             ["closed", "open 1.2x"], name)
            self.assertIsNone(m["closed"]["offered"])
            for s in [m["closed"]] + m["open"]:
                self.assertIn("%d connections" % mux.MUX_CONNS, s["driver"])
                self.assertGreater(s["ok"], 0, (name, s))
                self.assertEqual(s["failed"], 0, (name, s))
                self.assertIsNotNone(s["p99_ms"], (name, s))
        self.assertEqual([f["title"] for f in self.data["mux"]["figures"]],
                         ["closed-loop capacity, virtual / direct",
                          "p99, direct-drain / direct at 1.2x",
                          "goodput, direct-drain / direct at 1.2x"])
        for f in self.data["mux"]["figures"]:
            self.assertIsNotNone(f["value"], f)
        self.assertEqual([r["title"] for r in w["mux_against"]],
                         [f["title"] for f in self.data["mux"]["figures"]])
        for r in w["mux_against"]:
            self.assertIn(r["verdict"],
                          ("matches", "differs", "not judged", mux.WITHIN_SPREAD), r)
        # the JVM over each peer's measured run, and the flags as the limits give them
        for name, run in w["runs"].items():
            m = run["jvm"]
            self.assertGreater(m["seconds"], 0, name)
            self.assertIsNotNone(m["compiler_share"], name)
            self.assertTrue(m["pause_log"], name)
            self.assertGreaterEqual(m["gc"]["share"], 0, name)
            self.assertEqual(witness.flag_reasons(m) != [],
                             m["compiler_share"] > w["limits"]["compiler_max_share"] or
                             m["gc"]["share"] > w["limits"]["gc_max_share"], (name, m))
            self.assertTrue(os.path.exists(os.path.join(self.out, "witness",
                                                        witness.gc_log_name(name))), name)
        flagged = {n[:-len("-stalls")] if n.endswith("-stalls") else n
                   for n, run in w["runs"].items() if witness.flag_reasons(run["jvm"])}
        self.assertEqual(set(w["flagged"]), flagged)
        # a finding one flagged arm takes a role in is not judged (not measured, and why); the
        # others are measured (the three arms fill every role)
        self.assertEqual([f["variant"] for f in w["findings"]], ["witness:grpc-java"] * 5)
        for fd in w["findings"]:
            nj = fd.get("not_judged")
            if nj:
                self.assertTrue(set(nj["arms"]) <= flagged, (fd["id"], nj))
                self.assertEqual(fd["verdict"], "not measured", fd["id"])
            else:
                for p in fd["parts"]:
                    self.assertIsNotNone(p["measured"], (fd["id"], p["figure"], flagged))
        self.assertEqual(sorted(w["findings_merged"][0]["variants"]),
                         sorted([self.data["label"], "witness:grpc-java"]))
        # echod's findings judged against grpc-java's of this run, part by part
        from echodlib import findings as F
        self.assertEqual([r["id"] for r in w["against"]], [f["id"] for f in w["findings"]])
        for r, fd in zip(w["against"], w["findings"]):
            for p, q in zip(r["parts"], fd["parts"]):
                self.assertIn(p["verdict"], F.AGAINST, (r["id"], p))
                if fd.get("not_judged") and q["figure"] in fd["not_judged"]["parts"]:
                    self.assertEqual(p["verdict"], "not judged", (r["id"], p))
                elif p["echod"] is not None and q["measured"] is not None:
                    self.assertEqual(p["verdict"], F.against_part(p["key"], p["echod"],
                                                                  q["measured"])[1])
        # the grid ran on the peer with the grid's stalls (its own) when there is one: its rows say
        # whether that peer's JIT had settled (a --quick warm-up of 6 s often has not)
        grid_peer = w["runs"].get("java-direct-stalls") or w["runs"]["java-direct"]
        grid_step = "fixed 10%% (k6%s)" % ("" if grid_peer["warmup"]["settled"] else ", JIT not settled")
        self.assertEqual(w["comparison"][0]["step"], grid_step)
        with open(os.path.join(self.out, "study.md")) as f:
            md = f.read()
        for text in ("## Witness: grpc-java on this machine", "### The JVM over each measured run",
                     "### Findings, echod and grpc-java",
                     "| finding | figure | published | grpc-java here | shows it? | echod here | "
                     "against published | echod / grpc-java | against grpc-java |",
                     "## Multiplexed clients", "### Multiplexed clients, echod and grpc-java",
                     "### Step by step, grpc-java / echod", "| java-direct | direct | %s |" % grid_step,
                     "Stream ramps (messages; java-direct, java-virtual):"):
            self.assertIn(text, md)
        for name in w["runs"]:
            self.assertRegex(md, r"\| %s \| 21[^|]* \| \d+ s" % re.escape(name))
        for fd in w["findings"]:
            if fd.get("not_judged"):
                self.assertIn("- %s not judged on grpc-java" % fd["id"], md)
        for exp in ("ramp", "streams"):
            for name in ("report.md", "report.json"):
                self.assertTrue(os.path.exists(os.path.join(self.out, "witness", exp, name)))


class WitnessOptions(unittest.TestCase):
    """--witness where the peer cannot run, with an arm it does not have, or with an arm that
    needs the JDK 21 where there is none: exit 2, why (never a silent skip)."""

    def study(self, extra, env=None):
        return subprocess.run(["/usr/bin/python3", STUDY, "--quick", "--echod", ECHOD_BIN] + extra,
                              cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, **(env or {})))

    def test_exit_2(self):
        for extra, want in ((["--witness", "--peers-dir", "/nonexistent"],
                             "the grpc-java peer cannot run here: no grpc-java peer at /nonexistent"),
                            (["--witness", "direct,loom"], "'loom' is not a grpc-java arm")):
            p = self.study(extra)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(want, p.stderr)

    def test_roles_and_flags(self):
        """The witness's own virtual arm in the virtual role (its default pool only without
        one), direct-drain in the drain's; the stream ramps on the direct and virtual roles'
        arms; a measured run over the compiler's or the collector's limit is flagged."""
        from echodlib.study import witness
        self.assertEqual(witness.roles(["direct", "default", "virtual", "direct-drain"]),
                         {"direct": "direct", "virtual": "virtual", "direct-drain": "direct-drain"})
        self.assertEqual(witness.roles(["direct", "default", "fixed:1"]),
                         {"direct": "direct", "virtual": "default"})
        self.assertEqual(witness.stream_arms(["direct", "direct-drain", "virtual"]),
                         {"direct", "virtual"})
        self.assertEqual(witness.gc_log_name("java-fixed:1-stalls"), "java-fixed-1-stalls-gc.log")

        def run(compiler, gc):
            return {"jvm": {"compiler_share": compiler, "gc": {"share": gc}, "pause_log": True}}
        ok, hot, gcy = (run(0.01, 0.001), run(witness.COMPILER_MAX_SHARE + 0.01, 0.0),
                        run(0.0, witness.GC_MAX_SHARE + 0.01))
        self.assertEqual(witness.flags({"java-direct": ok}), {})
        f = witness.flags({"java-direct": ok, "java-direct-stalls": hot, "java-virtual": gcy})
        self.assertEqual(sorted(f), ["java-direct", "java-virtual"])
        self.assertRegex(f["java-direct"][0], r"^its grid's peer \(stalls\): compiler threads")
        self.assertRegex(f["java-virtual"][0], r"^GC pauses 4\.0% of the measured run")

    @unittest.skipIf(WHY_SKIP_WITNESS, "the grpc-java peer cannot run here: %s" % WHY_SKIP_WITNESS)
    def test_virtual_without_jdk21(self):
        """The default arms and `virtual` need the JDK 21: without it, exit 2 naming the
        script that installs it."""
        for extra in (["--witness", "virtual"], ["--witness"]):
            p = self.study(extra, {"JDK21_ROOT": "/nonexistent"})
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn("the grpc-java arm virtual needs a JDK 21: no complete JDK 21 in "
                          "/nonexistent", p.stderr)
            self.assertIn("run ../shared/peers/install-jdk21.sh", p.stderr)

    @unittest.skipIf(WHY_SKIP_WITNESS, "the grpc-java peer cannot run here: %s" % WHY_SKIP_WITNESS)
    def test_other_arms_on_jdk17_without_jdk21(self):
        """Without the JDK 21 the other arms run on JDK 17, and the run says which it used."""
        from echodlib import peers
        from echodlib.study import witness
        from echodlib.study.cost import Cost

        class Args:
            witness = "direct,direct-drain,fixed:1"
            cost = Cost()
            peers_dir = peers.PEERS_DIR
            peers_build = os.path.join(tempfile.gettempdir(), "echod-peers")
        a = Args()
        old = os.environ.get("JDK21_ROOT")
        os.environ["JDK21_ROOT"] = "/nonexistent"
        try:
            self.assertIsNone(witness.prepare(a, True))
        finally:
            if old is None:
                os.environ.pop("JDK21_ROOT")
            else:
                os.environ["JDK21_ROOT"] = old
        self.assertEqual(a.witness_jdk["version"], 17)
        self.assertIn("install-jdk21.sh", a.witness_jdk["why"])
        self.assertEqual([witness.jdk(a, arm) for arm in a.witness], [17, 17, 17])
        self.assertEqual(witness.jdk(a, "virtual"), 21)


def why_skip_h2load():
    if SANITIZER:
        return "a sanitizer build (%s): the benchmarks measure release builds" % SANITIZER
    if not shutil.which("h2load"):
        return "nghttp2-client (h2load) is not installed"
    return None


@unittest.skipIf(why_skip_h2load(), "bench/drain-depth skipped: %s" % why_skip_h2load())
class DrainDepth(unittest.TestCase):
    """bench/drain-depth in miniature: it runs, prints a row per window and arm, and each arm's
    flushes come from its own trigger (the figures themselves are never asserted)."""

    def test_rows_and_triggers(self):
        p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "drain-depth"),
                            "--windows", "2x2,4x2", "--seconds", "1", "--rate", "100",
                            "--cpu-us", "100", "--echod", ECHOD_BIN], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rows = [line for line in p.stdout.splitlines()
                if re.match(r"\| \d+ x \d+ = \d+ \|", line)]
        self.assertEqual([r.split(" | ")[1] for r in rows], ["direct", "direct-drain"] * 2)
        for r in rows:
            flushes = r.rstrip(" |").rsplit(" | ", 1)[1]
            self.assertIn("read_complete" if "direct-drain" in r else "loop_tail", flushes, r)


if __name__ == "__main__":
    main()
