"""The study's load: real k6 with the shipped scripts (deploy/k6) and h2load, against a Target
(server.py). Each driver returns its steps as study.json holds them.

  fixed_k6       one constant-arrival-rate step (unary-fixed-rate.js): evenly spaced calls
  fixed_h2load   one step of h2load --rps (a timer per connection: calls in bursts)
  ramp           the unary ramp as one k6 run (unary-ramp.js), its steps back to back, with a
                 time series of the server and of k6 to cut by step
  streams        bidi-ramp.js over persistent streams
  capacity       a closed-loop probe (h2load), calls/s
  h2load_step    a step of the multiplexed shape (study.mux): h2load closed, or --rps
"""

import json
import os
import shlex
import subprocess
import tempfile

from .. import h2load, k6, paths, ports, procstat, stats
from ..k6result import summary_value as metric
from ..sampler import Sampler
from . import server
from .server import Window

K6_DIR = os.path.join(paths.ROOT, "deploy", "k6")


def run_k6(cmd, script, timeout, sampler=None):
    """Runs k6 to the end: (its errors: the log lines of iterations that threw, e.g. a VU whose
    connection did not finish the HTTP/2 handshake within CONNECT_TIMEOUT). A k6 that exits
    non-zero is a RuntimeError. sampler(pid), when given, makes a Sampler that runs while k6
    does (it is returned stopped as the second value)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd + [os.path.join(K6_DIR, script)], cwd=paths.ROOT, stdout=out,
                             stderr=err, text=True)
        smp = sampler(p.pid).start() if sampler else None
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise RuntimeError("k6 %s: no end within %d s: %s" % (script, timeout, shlex.join(cmd)))
        except BaseException:  # ^C, SIGTERM: k6 goes with us
            p.kill()
            p.wait()
            raise
        finally:
            if smp:
                smp.stop()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise RuntimeError("k6 %s: exit %d %s\n%s" % (script, p.returncode, shlex.join(cmd),
                                                      (stderr or stdout)[-2000:]))
    errors = [l for l in stderr.splitlines() if "level=error" in l]
    errors = [e[e.find("msg="):][:200] for e in errors]
    return (errors, smp) if sampler else errors


def k6_probe(pid, api_port):
    """Sampler probe: k6's CPU clock, resident memory and busy VUs (its REST API)."""
    def probe():
        return {"k6_cpu": procstat.cpu_clock(pid),
                "k6_rss_kb": procstat.proc_status(pid).get("VmRSS"),
                "k6_busy_vus": k6.busy_vus(api_port)}
    return probe


def failed_step(driver, rate, seconds, error):
    """A unary step a driver could not run: its error, and no figures."""
    return {"driver": driver + " (failed)", "offered": rate, "duration_s": float(seconds),
            "sent": 0, "ok": 0, "failed": 0, "dropped": 0, "abandoned": 0, "server_codes": {},
            "p50_ms": None, "p99_ms": None, "latency_count": 0, "server_p50_us": None,
            "server_p99_us": None, "server_cpu_s": None, "wall_s": None,
            "cpu_us_per_call": None, "cpu_millicores": None, "cfs": None, "error": error}


class Drivers:
    """The load generators of one run: k6 (None without it) and h2load on the client's CPU
    (client_prefix), k6's Go environment (go_env), the study's Prometheus for k6's remote
    write (or None), and a scratch directory for their files."""

    def __init__(self, k6_path, client_prefix, go_env, prometheus, workdir):
        self.k6 = k6_path
        self.client_prefix = list(client_prefix)
        self.go_env = go_env
        self.prometheus = prometheus
        self.workdir = workdir
        # the fixed-rate grid's per-call work beyond the server's: (k6 WORK_* env, metadata for
        # h2load), e.g. its stalls (stalls.GridStalls)
        self.grid_work = ({}, {})
        self.body = os.path.join(workdir, "body")
        with open(self.body, "wb") as fh:
            fh.write(h2load.REQUEST_FRAME)

    def k6_cmd(self, target, arm, summary, extra, api_port=0):
        # the proto file, not reflection: a reflection call per k6 connection would queue on the
        # server behind the work being measured (under `direct`, on the loop itself)
        env = {"TARGET": target.grpc_target, "ARM": arm, "SUMMARY_FILE": summary, "REFLECT": "0",
               "PROTO_DIR": os.path.join(paths.ROOT, "proto")}
        env.update(extra)
        # k6's REST API on a port of its own (0: any), not the shared default 6565
        cmd = self.client_prefix + [self.k6, "run", "-q", "--no-usage-report",
                                    "--address", "127.0.0.1:%d" % api_port]
        run_env = dict(self.go_env)
        if self.prometheus:  # k6's remote write into the study's Prometheus: its env, then k6
            run_env.update(self.prometheus.k6_env())
            cmd += self.prometheus.k6_args()
        if run_env:
            cmd[len(self.client_prefix):len(self.client_prefix)] = ["env"] + [
                "%s=%s" % kv for kv in sorted(run_env.items())]
        for kv in env.items():
            cmd += ["-e", "%s=%s" % kv]
        return cmd

    def h2load_cmd(self, target, extra):
        return self.client_prefix + h2load.command(target.grpc_port, self.body, extra,
                                                   host=target.host)

    # ------------------------------------------------------------ the fixed-rate grid

    def fixed(self, target, arm, rate, seconds, problems, driver):
        """One unary step on `driver` (k6 or h2load); a driver that could not run it gives a
        step with its error (and a problem), so the other steps and arms still run."""
        try:
            if driver == "k6":
                return self.fixed_k6(target, arm, rate, seconds)
            return self.fixed_h2load(target, arm, rate, seconds)
        except RuntimeError as e:
            problems.append("%s, %s at %.0f/s: %s" % (arm, driver, rate, e))
            return failed_step(driver, rate, seconds, str(e))

    def fixed_k6(self, target, arm, rate, seconds):
        """One constant-arrival-rate step of deploy/k6/unary-fixed-rate.js."""
        summary = os.path.join(self.workdir, "k6-%s-%d.json" % (arm, rate))
        cmd = self.k6_cmd(target, arm, summary, dict(
            self.grid_work[0], RATE=str(int(rate)), DURATION="%ds" % seconds,
            VUS=str(max(20, int(rate * 0.05))), MAX_VUS="2000"))
        win = Window(target)
        errors = run_k6(cmd, "unary-fixed-rate.js", seconds + 120)
        win.close()
        with open(summary) as f:
            s = json.load(f)
        k = "{stage:fixed}"
        failed, abandoned, codes = win.failures(0)
        ok = metric(s, "echo_ok" + k, "count") or 0
        return {
            "driver": "k6 (constant-arrival-rate, unary-fixed-rate.js)", "offered": rate,
            "duration_s": float(seconds),
            "sent": metric(s, "echo_sent" + k, "count") or 0,
            "ok": ok,
            "failed": (metric(s, "echo_failed" + k, "count") or 0) + failed + len(errors),
            "dropped": metric(s, "dropped_iterations", "count") or 0,
            "abandoned": abandoned, "server_codes": codes, "k6_errors": len(errors),
            "k6_error": errors[0] if errors else None,
            "p50_ms": metric(s, "grpc_req_duration" + k, "med"),
            "p99_ms": metric(s, "grpc_req_duration" + k, "p(99)"),
            "latency_count": metric(s, "grpc_req_duration" + k, "count") or 0,
            "server_p50_us": metric(s, "server_total_us" + k, "med"),
            "server_p99_us": metric(s, "server_total_us" + k, "p(99)"),
            **win.cpu_fields(win.calls(ok), seconds),
        }

    def fixed_h2load(self, target, arm, rate, seconds, conns=20, streams=16):
        """One step of h2load --rps: `conns` connections, each on its own timer of rate/conns."""
        conns = max(1, min(conns, int(rate // 5)))
        return self.h2load_run(target, arm, rate, seconds, conns, streams, self.grid_work[1])

    def h2load_step(self, target, arm, rate, seconds, conns, streams, problems):
        """One step of the multiplexed shape (study.mux): `conns` connections of up to
        `streams` calls in flight each, on timers of rate/conns (h2load --rps), or with rate
        None a closed loop; a step that could not run is a problem and a failed step (of the
        same `conns` and `streams`: study.mux's table reads them from the step)."""
        try:
            return self.h2load_run(target, arm, rate, seconds, conns, streams, {})
        except RuntimeError as e:
            problems.append("%s, mux %s: %s" % (arm, "closed" if rate is None else
                                                "%.0f/s" % rate, e))
            return dict(failed_step("h2load", rate, seconds, str(e)), conns=conns,
                        streams=streams)

    def h2load_run(self, target, arm, rate, seconds, conns, streams, work):
        """h2load's step: `conns` x `streams`, each connection on a timer of rate/conns (rate
        None: a closed loop), with the request headers `work`, its latencies from its log."""
        logf = os.path.join(self.workdir, "h2load-%s-%s.log" % (
            arm, "closed" if rate is None else "%d" % rate))
        headers = [a for k, v in sorted(work.items()) for a in ("-H", "%s: %s" % (k, v))]
        timer = [] if rate is None else ["--rps", "%g" % (rate / conns)]
        cmd = self.h2load_cmd(target, ["-c", str(conns), "-m", str(streams)] + timer +
                              ["-D", str(seconds), "--log-file", logf] + headers)
        win = Window(target)
        res = h2load.run(cmd, seconds + 60)
        win.close()
        if res["error"]:
            raise RuntimeError(res["error"])
        lat = h2load.read_latency_log(logf, keep_samples=True)
        os.unlink(logf)
        ms = [v / 1000.0 for v in lat["samples"]]
        failed, abandoned, codes = win.failures(conns * streams)
        return {
            "driver": "h2load (%s, %d connections x %d streams)" % (
                "closed loop" if rate is None else "--rps per connection", conns, streams),
            "offered": rate, "conns": conns, "streams": streams,
            "duration_s": float(seconds), "sent": res["started"] or 0, "ok": lat["n"],
            "failed": (res["failed"] or 0) + (res["errored"] or 0) + failed, "dropped": 0,
            "abandoned": abandoned, "server_codes": codes,
            "p50_ms": stats.percentile(ms, 0.5), "p99_ms": stats.percentile(ms, 0.99),
            "latency_count": lat["n"], "server_p50_us": None, "server_p99_us": None,
            **win.cpu_fields(win.calls(lat["n"]), seconds),
        }

    # ------------------------------------------------------------ the unary ramp

    def ramp(self, target, arm, plan, rates, sizing):
        """The unary ramp as one k6 run (deploy/k6/unary-ramp.js), its steps back to back, with
        the VUs, deadline and warm-up of the regime's `sizing` (regimes.RampSizing). Per step
        the k6 summary's figures and, from a time series of the server and of k6, the server's
        CPU per call, the calls in flight on both sides and k6's own CPU and memory. Returns
        (steps, run)."""
        summary = os.path.join(self.workdir, "k6-%s-ramp.json" % arm)
        api = ports.free_port()
        env = {"RATES": ",".join(str(r) for r in rates), "STEP_DURATION": "%ds" % plan.ramp_s}
        env.update(sizing.env())
        env["SLICE_SECONDS"] = str(plan.slice_s)
        cmd = self.k6_cmd(target, arm, summary, env, api)
        win = Window(target)
        budget = len(rates) * plan.ramp_s + sizing.timeout_s + sizing.setup_s() + 180

        def sampler(pid):
            return Sampler({"echod": server.probe(target), "k6": k6_probe(pid, api)},
                           every=0.5 if plan.quick else 1.0)
        errors, smp = run_k6(cmd, "unary-ramp.js", budget, sampler)
        win.close()
        with open(summary) as fh:
            doc = json.load(fh)
        t0 = doc["summary"]["setup_data"]["ramp_start_ms"] / 1000.0
        steps = [ramp_step(doc, st, frac, t0, smp, sizing.vus, win.unix1)
                 for st, frac in zip(doc["schedule"], plan.ramp_fractions)]
        failed, _, codes = win.failures(0)
        run = dict(sizing.fields(), **{
            "warmup": doc["summary"]["setup_data"].get("warmup"),
            "k6_dropped_iterations": metric(doc, "dropped_iterations", "count") or 0,
            "k6_rss_mb_max": max((x["k6_rss_kb"] for x in smp.samples if x.get("k6_rss_kb")),
                                 default=0) / 1024.0,
            "server_failed": failed, "server_codes": codes, "k6_errors": len(errors),
            "k6_error": errors[0] if errors else None, "ramp_start": t0,
            "series": [{k: v for k, v in x.items()} for x in smp.samples]})
        return steps, run

    # ------------------------------------------------------------ the stream ramp

    def streams(self, target, arm, streams, rates, seconds):
        """deploy/k6/bidi-ramp.js over `streams` persistent streams through the given rates."""
        summary = os.path.join(self.workdir, "k6-%s-bidi%d.json" % (arm, streams))
        step = rates[1] - rates[0] if len(rates) > 1 else rates[0]
        cmd = self.k6_cmd(target, arm, summary, {
            "STREAMS": str(streams), "START": str(rates[0]), "END": str(rates[-1]),
            "STEP": str(step), "STEP_DURATION": "%ds" % seconds, "PROBE_RATE": "0"})
        win = Window(target)
        errors = run_k6(cmd, "bidi-ramp.js", len(rates) * seconds + 180)
        win.close()
        with open(summary) as f:
            s = json.load(f)
        out = [stream_step(s, st) for st in s["schedule"]]
        failed, _, codes = win.failures(0)
        # a stream that ended in error: k6 shows its error to no log, only this check
        broken = [c["fails"] for c in s["summary"]["root_group"].get("checks", [])
                  if c["name"] == "bidi stream ended OK" and c["fails"]]
        if broken:
            errors.append("%d of %d streams ended with a stream error (check 'bidi stream ended "
                          "OK'); their unanswered messages count as failed" % (broken[0], streams))
        return {"driver": "k6 (bidi-ramp.js, %d streams)" % streams, "streams": streams,
                "steps": out, "server_failed": failed, "server_codes": codes,
                "k6_errors": len(errors), "k6_error": errors[0] if errors else None,
                "summary_file": summary,
                **win.cpu_fields(win.messages if target.scrape else sum(x["ok"] for x in out),
                                 len(rates) * seconds)}

    # ------------------------------------------------------------ the capacity probe

    def cpu_per_call(self, target, seconds):
        """A closed-loop probe with the server's CPU over it: (CPU seconds, OK calls, the
        probe's calls/s), what cost.calibrate measures. The CPU is less the cost model's loop
        wake-ups: a plateau has none (its loop never sleeps), a probe some, as many as its
        driver's pace leaves the loop idle, and at the study's scale each costs a call's worth."""
        win = Window(target)
        res = self.capacity(target, seconds, full=True)
        win.close()
        cpu_s = None if win.cpu_s is None else win.cpu_s - win.wakeup_s
        return cpu_s, win.calls(res["succeeded"]), res["rps"]

    def capacity(self, target, seconds, full=False):
        """Closed-loop unary calls/s of a server (h2load -c 4 -m 16 for `seconds`); with full,
        h2load's whole result (its `succeeded` calls, `rps`)."""
        res = self.closed_loop(target, seconds, 4, 16)
        return res if full else res["rps"]

    def closed_loop(self, target, seconds, conns, streams, headers=()):
        """h2load's result of a closed loop of `conns` connections with `streams` calls in
        flight each, for `seconds`, with request `headers` ("name: value")."""
        cmd = self.h2load_cmd(target, h2load.options(headers) + [
            "-c", str(conns), "-m", str(streams), "-D", str(seconds)])
        res = h2load.run(cmd, seconds + 60)
        if res["error"]:
            raise RuntimeError("closed loop: " + res["error"])
        if not res["succeeded"]:
            raise RuntimeError("closed loop: no call answered in %d s (is the server's CPU "
                               "taken by something else?): %s" % (seconds, res["cmd"]))
        return res


def dispatch_figures(smp, a, b, calls):
    """The server's dispatch counters over [a, b] per call answered (server.DISPATCH_COUNTERS),
    and its mean read batch (connections per batch), or None (no /metrics, or no call)."""
    if not calls:
        return None
    d = {key: smp.delta(a, b, key)[0] for key, _, _ in server.DISPATCH_COUNTERS}
    if any(v is None for v in d.values()):
        return None
    batches, conns = d.pop("read_batches"), d.pop("read_batch_conns")
    out = {key: v / calls for key, v in d.items()}
    out["read_batch_mean"] = conns / batches if batches else None
    return out


def ramp_step(doc, st, frac, t0, smp, vus, t_end):
    """One step of the unary ramp's k6 summary `doc` (schedule entry st, `frac` x capacity, the
    ramp begun at t0), with the server's and k6's figures from the sampler over its time."""
    k = "{stage:%s}" % st["name"]
    a, b = t0 + st["start_s"], t0 + st["start_s"] + st["duration_s"]
    scheduled = st["offered"] * st["duration_s"]
    sent = metric(doc, "echo_sent" + k, "count") or 0
    answered = metric(doc, "echo_answered" + k, "count") or 0
    p99 = metric(doc, "grpc_req_duration" + k, "p(99)")
    slices = []
    for j in range(st.get("slices") or 0):
        kk = "{stage:%s,slice:%02d}" % (st["name"], j)
        slices.append({"slice": j, "t_s": st["start_s"] + j * st["slice_s"],
                       "p50_ms": metric(doc, "grpc_req_duration" + kk, "med"),
                       "p99_ms": metric(doc, "grpc_req_duration" + kk, "p(99)"),
                       "count": metric(doc, "grpc_req_duration" + kk, "count") or 0})
    dcpu, dt = smp.delta(a, b, "echod_cpu")
    dtaken, _ = smp.delta(a, b, "server_cpu_taken")
    dok, _ = smp.delta(a, b, "echod_ok")
    dk6, dtk = smp.delta(a, b, "k6_cpu")
    vus_mean, vus_max = smp.stats(a, b, "k6_busy_vus")
    infl_mean, infl_max = smp.stats(a, b, "echod_in_flight")
    rss = [x["k6_rss_kb"] for x in smp.window(a, b, "k6_rss_kb") if x["k6_rss_kb"]]
    cfs = None
    if smp.at(a, "cfs_periods") is not None:
        cfs = {"periods": int(smp.delta(a, b, "cfs_periods")[0] or 0),
               "throttled_periods": int(smp.delta(a, b, "cfs_throttled")[0] or 0),
               "throttled_s": smp.delta(a, b, "cfs_throttled_s")[0] or 0.0}
    goodput = answered / st["duration_s"]
    # a server without /metrics (the grpc-java peer): the answers k6 got within the step
    calls = dok if dok is not None else answered
    per = dcpu / calls * 1e6 if dcpu and calls else None
    dispatch = dispatch_figures(smp, a, b, dok)
    return {
        "driver": "k6 (ramping-arrival-rate, unary-ramp.js, %d VUs)" % vus,
        "stage": st["name"], "fraction": frac, "offered": st["offered"],
        "duration_s": float(st["duration_s"]), "scheduled": scheduled, "sent": sent,
        "sent_ratio": sent / scheduled if scheduled else None,
        "dropped": max(0, int(round(scheduled - sent))),
        "ok": metric(doc, "echo_ok" + k, "count") or 0, "answered": answered,
        "failed": metric(doc, "echo_failed" + k, "count") or 0, "abandoned": 0,
        "server_codes": {},
        "p50_ms": metric(doc, "grpc_req_duration" + k, "med"), "p99_ms": p99,
        "mean_ms": metric(doc, "grpc_req_duration" + k, "avg"),
        "latency_count": metric(doc, "grpc_req_duration" + k, "count") or 0,
        "server_p50_us": metric(doc, "server_total_us" + k, "med"),
        "server_p99_us": metric(doc, "server_total_us" + k, "p(99)"),
        "slices": slices, "late_connects": metric(doc, "late_connects" + k, "count") or 0,
        "busy_vus_mean": vus_mean, "busy_vus_max": vus_max,
        "echod_in_flight_mean": infl_mean, "echod_in_flight_max": infl_max,
        # Little's law: calls in flight = goodput x time in the system; on the p99 (an upper
        # bound of the mean) as the study's own figure has to be read
        "little_p99_in_flight": goodput * p99 / 1000.0 if p99 is not None else None,
        "k6_cores": dk6 / dtk if dk6 is not None and dtk else None,
        "k6_rss_mb": max(rss) / 1024.0 if rss else None,
        "server_cpu_s": dcpu, "wall_s": dt, "cpu_us_per_call": per,
        "cpu_millicores": dcpu / dt * 1000.0 if dcpu and dt else None, "cfs": cfs,
        "server_cpu_other": server.other_share(dtaken, dcpu, dt),
        "dispatch": dispatch,
        # a time range for --prometheus: from the step's start to the run's end, where k6's
        # cumulative series of the step hold its totals (its late answers included); the
        # range also holds the later steps' series, told apart by their stage label
        "t_start": a, "t_end": t_end}


def stream_step(s, st):
    """One step of bidi-ramp.js's summary `s` (schedule entry st)."""
    k = "{stage:%s}" % st["name"]
    sent = metric(s, "echo_sent" + k, "count") or 0
    shed = metric(s, "echo_dropped" + k, "count") or 0
    scheduled = st["offered"] * st["duration_s"]
    return {"stage": st["name"], "offered": st["offered"], "duration_s": st["duration_s"],
            "scheduled": scheduled, "sent": sent,
            # the schedule kept: every message due was sent or shed (MAX_INFLIGHT)
            "kept_ratio": (sent + shed) / scheduled if scheduled else None,
            "ok": metric(s, "echo_ok" + k, "count") or 0,
            # by arrival: the step's goodput (ok counts by due time, and a saturated
            # step's backlog is answered after it ends)
            "answered": metric(s, "echo_answered" + k, "count") or 0,
            "failed": metric(s, "echo_failed" + k, "count") or 0,
            "dropped": shed,
            "p50_ms": metric(s, "bidi_msg_latency_ms" + k, "med"),
            "p99_ms": metric(s, "bidi_msg_latency_ms" + k, "p(99)"),
            "latency_count": metric(s, "bidi_msg_latency_ms" + k, "count") or 0}
