"""A study run's outputs in --out (write): one report per experiment (fixed/, ramp/, streams/:
the report deploy/report writes, from the run's steps), the findings, the plots, study.md (the
findings and the tables), study.json, and the check that every output CI relies on is there."""

import json
import os
import time

from .. import cgroup, findings as F, k6, k6result, report_out
from ..report import InputError
from . import mux, plots, regimes, tables, witness
from .figures import measured_figures
from .regimes import OPEN_MODEL_SENT

EXPERIMENTS = {"fixed": ("Fixed-rate grid", "calls"), "ramp": ("Unary saturation ramp", "calls"),
               "streams": ("Streaming ramp", "msg")}
REPORT_FILES = ("report.md", "report.json", "p99-vs-offered.png", "goodput-vs-offered.png")


def experiment_inputs(res, arms):
    """{experiment: k6result.Inputs}: the fixed-rate steps of each arm and driver, each arm's
    ramp (bench/study's measured steps), and the stream runs' k6 summaries."""
    inputs = {exp: k6result.Inputs() for exp in EXPERIMENTS}
    for arm in arms:
        for s in res[arm]["fixed"]:
            name = "%s-%s" % (arm, s["driver"].split(" ")[0])
            inputs["fixed"].add_doc(k6result.steps_doc(name, "unary-fixed-rate",
                                                       [dict(s, stage="fixed")],
                                                       "grpc_req_duration"),
                                    "fixed-%s.json" % name)
        if res[arm]["ramp"]:
            inputs["ramp"].add_doc(k6result.steps_doc(arm, "unary-ramp", res[arm]["ramp"],
                                                      "grpc_req_duration"), "ramp-%s.json" % arm)
        for run in res[arm]["streams"]:
            inputs["streams"].add_file("%s-x%d=%s" % (arm, run["streams"], run["summary_file"]))
    return inputs


def experiment_reports(res, arms, out, p99_threshold_ms, problems):
    """Each experiment's report in out/EXPERIMENT (report.md, report.json, the plots):
    {experiment: its report.json}. What cannot be reported is a problem."""
    reports = {}
    todo = {exp: i for exp, i in experiment_inputs(res, arms).items() if i.sources}
    for exp, inputs in todo.items():
        title, unit = EXPERIMENTS[exp]
        opts = report_out.Options(title, unit, p99_threshold_ms)
        where = os.path.join(out, exp)
        try:
            results = inputs.results()
            _, reports[exp] = report_out.write(results, where, opts)
            report_out.plots(results, where, opts)
        except (InputError, OSError, ValueError) as e:
            problems.append("report %s: %s" % (exp, e))
        except ImportError:
            problems.append("report %s: python3-matplotlib is not installed: no plots" % exp)
    for exp in todo:  # the outputs CI checks for
        for name in REPORT_FILES:
            if not os.path.exists(os.path.join(out, exp, name)):
                problems.append("missing output %s/%s" % (exp, name))
    return reports


def ramp_summaries(res, arms, reports):
    """Each arm's ramp_summary (plateau, knee, peak) from the ramp's report."""
    for arm in arms:
        rr = reports.get("ramp", {}).get("arms", {}).get(arm, {})
        res[arm]["ramp_summary"] = {"plateau": rr.get("plateau_goodput"),
                                    "knee": rr.get("knee_offered"), "peak": rr.get("peak_goodput")}


def missing_plots(out, written, with_streams):
    """The study's own plots that were not written."""
    names = ["study-ramp-p99.png", "study-ramp-goodput.png", "study-ramp-slices.png"] + (
        ["study-streams-p99.png"] if with_streams else [])
    return ["missing output %s (python3-matplotlib?)" % name for name in names
            if os.path.join(out, name) not in written]


def header(run, elapsed, variant_text):
    """study.md's title and the run's set-up: CPU model, cost and calibration, drivers, arms."""
    plan, res, arms = run.plan, run.res, run.arms
    vus = ", ".join("%s %s" % (a, (res[a].get("ramp_run") or {}).get("vus")) for a in arms)
    drivers = "no k6: the unary ramp on h2load (closed window)"
    if run.drivers.k6:
        drivers = ("k6 v%d.%d.%d: constant-arrival-rate in the fixed-rate grid (evenly spaced), "
                   "the unary ramp %s in one continuous run of %d s steps, its VUs pre-allocated "
                   "and connected (%s), bidi-ramp.js for the streams (%d s steps)" % (
                       k6.version(run.drivers.k6) + (run.regime.describe(run.cap), plan.ramp_s,
                                                     vus, plan.stream_s)))
    md = ["# echod capacity study (%s)" % ("quick" if plan.quick else "full"), "",
          "- CPU model: %s" % run.model.text,
          "- per-call cost (%s): the direct arm's capacity on one CPU (1e6 / its server CPU µs "
          "per call): %.0f calls/s (calibration: %s)" % (
              variant_text, run.cap, "; ".join(
                  "%s -> %.1f µs/call, %.0f/s on one CPU, probe %.0f/s" % (
                      c["cost"], c["cpu_us_per_call"], c["capacity"], c["probe_calls_per_s"])
                  for c in run.calib)),
          "- drivers: %s; h2load --rps in the fixed-rate grid (a timer per connection: bursts)"
          % drivers,
          "- arms: %s; ramp %s x capacity; %.0f s in all" % (
              ", ".join(arms), " / ".join("%.2g" % x for x in plan.ramp_fractions), elapsed),
          "- the fixed-rate grid's stalls: %s" % (
              run.stalls.describe(run.cost.per_call(run.x)) if run.stalls else "none")]
    return md + ["- note: %s" % n for n in run.notes]


def regime_section(run):
    """The regime's table (every step of every ramp), the VUs per ramp and the tail inside the
    saturated steps (empty without a k6 ramp)."""
    plan, res, arms = run.plan, run.res, run.arms
    if run.regime.name == "capped":
        rows = tables.capped_table(res, arms, run.cap)
        calls, seconds = run.regime.cap(run.cap)
        md = ["### Capped at %d calls in flight (%s of capacity): sent, dropped, calls in "
              "flight" % (calls, F.cap_text(seconds)), "",
              "k6 holds at most the cap's VUs (maxVUs = preAllocatedVUs), one call each, and "
              "drops every iteration that finds none free: dropped = offered x seconds - sent, "
              "the regime, not a failure. Once the cap is full k6 is a closed loop of its VUs "
              "and a call waits cap / goodput on average, whatever the server does "
              "(docs/study-load.md). Busy VUs: k6's `vus` gauge (its REST API, each second), "
              "never above the cap; echod in flight: `echod_calls_in_flight` (under `direct` "
              "the calls wait unread in the sockets). p99 x goodput: Little's law on the p99, an "
              "upper bound of the calls in flight, in calls and in seconds of capacity (this "
              "run's %.0f/s; the study's 2,140/s), beside the study's and the cap. A ramp named "
              "arm@cap ran on the arm's echod right after its own ramp, at one of the study's "
              "caps (F4p). k6 CPU: its process over the step, below %.2f of its core." % (
                  run.cap, regimes.K6_CORE), ""] + rows
    else:
        rows = tables.open_model_table(res, arms, plan)
        md = ["### Open model: sent, dropped, calls in flight", "",
              "Sent / offered: the calls k6 started over those the step offered (%.2f or more "
              "keeps the open model; k6 drops an iteration that finds no free VU). Busy VUs: "
              "k6's `vus` gauge (its REST API, each second), one per call in flight on k6's "
              "side; echod in flight: `echod_calls_in_flight` (under `direct` the backlog waits "
              "unread in the sockets, so it stays small). p99 x goodput: Little's law on the "
              "p99, an upper bound of the calls in flight; the study's is the same bound on its "
              "figures. k6 CPU and RSS: its process over the step." % OPEN_MODEL_SENT, ""] + rows
    if len(rows) <= 2:
        return []
    capped = run.regime.name == "capped"
    runs = [(name, run) for a in arms for name, _, run in regimes.ramps(res[a], a) if run]
    md += ["", "VUs per ramp (pre-allocated; %s; each given one call before the first step, "
           "the warm-up, because a VU's first call costs k6 twice a later one) and k6's own "
           "`dropped_iterations` over the whole run: %s." % (
               "the cap" if capped else "sized for the backlog of an arm serving the calls/s "
               "given", "; ".join(
                   "%s %d VUs (%swarm-up %s), dropped %d" % (
                       name, r["vus"], "" if capped else "for %.0f/s, needed %d; " % (
                           r["vus_sized_for"], r["vus_needed"]),
                       "%d calls in %d s" % (r["warmup"]["iterations"], r["warmup"]["seconds"])
                       if r.get("warmup") else "none", r["k6_dropped_iterations"])
                   for name, r in runs))]
    sl = tables.slices_table(res, arms, plan)
    if sl:
        md += ["", "### The tail inside the saturated steps", "",
               "p99 of the calls sent in each %d s of a step (by when they were due):" %
               plan.slice_s, ""] + sl + ["", "![p99 per slice](study-ramp-slices.png)"]
    return md + [""]


def markdown(run, found, elapsed, variant_text, problems, witness_md=()):
    """study.md (witness_md: the witness's section, study.witness)."""
    plan, res, arms = run.plan, run.res, run.arms
    unary_plateau = {a: res[a]["ramp_summary"]["plateau"] or res[a]["ramp_summary"]["peak"]
                     for a in arms}
    md = header(run, elapsed, variant_text)
    md += ["", "## Findings", ""] + tables.findings_md(found, variant_text, sources(run))
    md += ["", "## Fixed-rate grid (%.0f calls/s, 10%% of capacity)" % round(0.1 * run.cap), ""]
    md += tables.fixed_table(res, arms)
    md += ["", "![p99](fixed/p99-vs-offered.png)", "",
           "## Unary saturation ramp", ""]
    md += tables.ramp_table(res, arms, run.cap, plan)
    md += ["", "![p99 vs offered, echod and the study](study-ramp-p99.png) "
           "![goodput vs offered, echod and the study](study-ramp-goodput.png)", ""]
    md += regime_section(run)
    dispatch = tables.dispatch_table(res, arms)
    if dispatch:
        md += ["### What the dispatch did per call", "",
               "echod's own counters over each step, per call answered (`echod_flushes_total`, "
               "`echod_loop_read_batch_connections`, `echod_loop_wakeups_total`, "
               "`echod_handoffs_total`): when the answers were written, how many connections "
               "one read batch served, how often the loop slept and what woke it, and how many "
               "hand-offs found their receiver parked; the extra ramps at the study's own caps "
               "after each arm's own.", ""] + dispatch + [""]
    md += ["deploy/report's plots: ![p99 vs offered](ramp/p99-vs-offered.png) "
           "![goodput vs offered](ramp/goodput-vs-offered.png)", ""]
    throttle = tables.throttle_table(res, arms, plan)
    if throttle:
        md += ["## CFS throttling per step", "",
               "Periods of %d ms in which echod's cgroup was throttled, as echod reports its "
               "cpu.stat (`echod_cgroup_cpu_throttled_periods_total` over "
               "`echod_cgroup_cpu_periods_total`), and the time it was held "
               "(`..._throttled_seconds_total`)." % (cgroup.PERIOD_US // 1000), ""] + \
            throttle + [""]
    md += ["## Streaming ramp", ""]
    if run.drivers.k6:
        md += tables.stream_table(res, arms, unary_plateau)
        md += ["", "![p99, echod and the study](study-streams-p99.png) "
               "![msg/s](streams/goodput-vs-offered.png) ![p99](streams/p99-vs-offered.png)", ""]
    else:
        md += ["skipped: no k6", ""]
    if run.args.mux:
        md += mux_section(run)
    md += list(witness_md)
    if problems:
        md += ["## Problems", ""] + ["- " + p for p in problems]
    return "\n".join(md) + "\n"


def mux_section(run):
    """study.md's multiplexed-client shape (study.mux): each arm's steps and the shape's
    ratios."""
    return ["## Multiplexed clients", "",
            "The same arms under clients that multiplex (h2load: %d connections, each with many "
            "calls in flight, as grpc-go's, grpc-java's and ghz's clients keep): a closed loop "
            "of %d calls per connection for %d s, then the ramp's steps from 1.1x of capacity "
            "open (each connection on its own timer, h2load --rps, with streams for the step's "
            "backlog). The study never measured this shape: its figures have no published "
            "counterpart, only the witness's (below, with --witness)." % (
                mux.MUX_CONNS, mux.CLOSED_STREAMS, run.plan.fixed_s), ""] + \
        mux.steps_table(run.res, run.arms) + ["", "Ratios in this shape:", ""] + \
        mux.figures_table(mux.mux_figures(run.res)) + [""]


def regime_doc(run):
    """study.json's `regime`: its name and label, and a capped run's cap (calls and seconds of
    capacity) and whether it ran the study's caps too (the extra ramps: results[arm]
    ["extra_ramps"])."""
    doc = {"name": run.regime.name, "label": run.regime.label()}
    if run.regime.name == "capped":
        calls, seconds = run.regime.cap(run.cap)
        doc.update(cap_calls=calls, cap_s=seconds, published_caps=run.regime.published_caps)
    return doc


def document(run, found, elapsed, variant, variant_text, problems):
    """study.json."""
    args, cost, x = run.args, run.cost, run.x
    return {"quick": run.plan.quick, "cpu_model": run.model.text, "cpu_model_name": run.model.name, "cpu_us": x,
            "regime": regime_doc(run), "label": label(run, variant),
            "capacity": run.cap, "calibration": run.calib, "arms": run.arms, "notes": run.notes,
            "k6": run.drivers.k6, "top": run.plan.top, "k6_max_vus": args.k6_max_vus,
            "k6_go_env": args.k6_go_env, "k6_max_vus_why": args.k6_max_vus_why,
            "plan": run.plan.as_dict(), "open_model_sent": OPEN_MODEL_SENT,
            "cost": {"variant": variant, "text": variant_text, "cpu_us": x,
                     "model": cost.relpath(), "units": cost.units and cost.scaled(x),
                     "background_millicores": cost.background,
                     "wake_by_sleep": cost.wake_sleep,
                     "stream_capacity": cost.stream_capacity(x, run.cap)},
            "grid_stalls": run.stalls and run.stalls.doc(cost.per_call(x)),
            "findings": found, "verdict_rule": F.rule_text(),
            "published_inputs": F.describe_sources(sources(run)), "elapsed_s": elapsed,
            "prometheus": run.prometheus.directory if run.prometheus else None,
            "mux": {"conns": mux.MUX_CONNS, "figures": mux.mux_figures(run.res)}
            if args.mux else None,
            "results": run.res, "problems": problems}


def sources(run):
    """The run's inputs set from published figures (findings.run_sources): its cost variant's
    units, the grid's stalls, its regime's caps."""
    return F.run_sources(run.cost.variant(run.x)[0], run.cost.units, run.stalls is not None,
                         regime_doc(run))


def label(run, variant):
    """The run's label, its findings' variant and --merge's column: the cost variant and the
    regime ("model:grpc-java-study, capped 1.99 s")."""
    return "%s, %s" % (variant, run.regime.label())


def write(run, t_start):
    """A finished run's outputs in --out: the experiments' reports, the findings, the plots,
    study.md and study.json (what is missing is a problem of the run). Returns study.md."""
    args, res, arms, problems = run.args, run.res, run.arms, run.problems
    reports = experiment_reports(res, arms, args.out, args.p99_threshold_ms, problems)
    ramp_summaries(res, arms, reports)
    variant, variant_text = run.cost.variant(run.x)
    found = F.compute(measured_figures(res, arms, run.cap, run.x, run.cost.name == "flat",
                                       regime_doc(run)), label(run, variant), sources(run))
    witness_md, witness_doc = witness.outputs(run, found, label(run, variant), args.out, problems)
    if arms:  # echod's curves (none in a run of the witness alone)
        written = plots.study_plots(res, arms, run.cap, run.plan, args.out)
        problems += missing_plots(args.out, written, run.drivers.k6)
    elapsed = time.monotonic() - t_start
    text = markdown(run, found, elapsed, variant_text, problems, witness_md)
    with open(os.path.join(args.out, "study.md"), "w") as fh:
        fh.write(text)
    series = {}
    doc = without_series(dict(document(run, found, elapsed, variant, variant_text, problems),
                              witness=witness_doc), "", series)
    if series:
        doc["series_file"] = SERIES_FILE
        with open(os.path.join(args.out, SERIES_FILE), "w") as fh:
            json.dump(series, fh)
    with open(os.path.join(args.out, "study.json"), "w") as fh:
        json.dump(doc, fh, indent=1)
    return text


# The per-second samples of each k6 ramp (k6's VUs, drops and CPU, the server's calls in flight),
# apart from study.json: a full run's are megabytes, its findings and steps a few hundred KB.
SERIES_FILE = "ramp-series.json"


def without_series(obj, path, out):
    """A copy of `obj` without its `series` lists, each put in out[its path in obj] (keys joined
    by "/", list items by index: "results/direct/ramp/series")."""
    if isinstance(obj, dict):
        copy = {}
        for k, v in obj.items():
            where = "%s/%s" % (path, k) if path else str(k)
            if k == "series" and isinstance(v, list):
                out[where] = v
            else:
                copy[k] = without_series(v, where, out)
        return copy
    if isinstance(obj, list):
        return [without_series(v, "%s/%d" % (path, i), out) for i, v in enumerate(obj)]
    return obj
