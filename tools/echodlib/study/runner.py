"""One study run: the calibration, then each arm in turn through the three experiments (the
fixed-rate grid, the unary ramp, the stream ramp), and the checks that every call succeeded.

The server is started here (echod with an arm's configuration, server.start_echod; the
grpc-java peer's arms of the witness, peers.JavaPeer on the witness's JDK with its GC log) and
handed to the drivers as a server.Target: they measure whatever server the Target names.
"""

import os

from .. import fmt, paths, peers
from . import log, mux, witness
from .cost import calibrate
from .regimes import ramps
from .server import echod_target, peer_target, start_echod


class Run:
    """A run's state: its options (bench/study's: echod, cost, capacity, cpu_us, k6_max_vus,
    k6_go_env, k6_max_vus_why, and the witness's: witness, peers_build, peers_dir), arms and
    notes, its Plan, regime, CPU model, Drivers, the study's Prometheus (or None) and scratch
    directory; once calibrated, the synthetic cost x, direct's capacity cap and the
    calibration's rounds; its results per arm (res, as study.json holds them), the witness's
    per grpc-java arm (wres, by witness.label) and problems."""

    def __init__(self, args, arms, notes, plan, regime, model, drivers, prometheus, workdir):
        self.args = args
        self.cost = args.cost
        self.arms = arms
        self.notes = notes
        self.plan = plan
        self.regime = regime
        self.model = model
        self.drivers = drivers
        self.prometheus = prometheus
        self.workdir = workdir
        self.witness = list(getattr(args, "witness", None) or [])
        self.x = self.cap = self.calib = self.stalls = None
        self.res = {}
        self.wres = {}
        self.wrun = {}
        self.problems = []

    def start_echod(self, arm, x, name):
        return start_echod(self.args.echod, self.model,
                           os.path.join(paths.ROOT, "config", "arms", arm + ".yaml"),
                           self.cost.sets(x), os.path.join(self.workdir, "echod-%s.log" % name),
                           self.prometheus, name)

    def start_peer(self, arm, cpu_us, name, stalls_us=0, pause_log=None):
        """The grpc-java peer's `arm` under the CPU model's prefix, as echod runs (pinned to the
        server CPU, or in the quota's cgroup), on the witness's JDK (witness.jdk), its JVM's
        pauses logged to pause_log."""
        f = self.stalls.fraction if stalls_us else 0.0
        return peers.JavaPeer(
            arm, self.args.peers_build, prefix=self.model.server_prefix,
            java_opts=peers.java_opts(cpu_us, stall_fraction=f, stall_us=stalls_us,
                                      pause_log=pause_log),
            log_path=os.path.join(self.workdir, "peer-%s.log" % name),
            peers_dir=self.args.peers_dir, jdk=witness.jdk(self.args, arm)).start()

    def calibrate(self):
        """x, cap and calib: cost.calibrate on the direct arm (echod's; the grpc-java peer's
        when the run has only witness arms, after its JIT's warm-up)."""
        def measure(x, i):
            if self.arms:
                srv = self.start_echod("direct", x, "calibrate-%d" % i)
                target = echod_target(srv, self.model.server_cpu)
                self.drivers.capacity(target, 1)  # warm-up
            else:
                srv = self.start_peer("direct", x, "calibrate-%d" % i)
                target = peer_target(srv, self.model.server_cpu)
                witness.warm_up(self, target)
            try:
                return self.drivers.cpu_per_call(target, self.plan.calib_s)
            finally:
                srv.stop()
                if self.arms:
                    srv.close_log()
        self.x, self.cap, self.calib = calibrate(self.cost, self.args.capacity,
                                                 self.plan.calib_rounds, measure, self.args.cpu_us)
        self.stalls = getattr(self.args, "stalls", None)
        if self.stalls:  # at the run's scale: the direct call's synthetic µs
            call_us = self.cost.per_call(self.x)
            self.drivers.grid_work = (self.stalls.k6_env(call_us), self.stalls.headers(call_us))
            log("the grid's stalls: %s" % self.stalls.describe(call_us))
        return self.x, self.cap

    def run_arms(self):
        """echod's arms in turn, each followed by its grpc-java counterpart when the run has
        one (witness.PAIRS: both measured under the same load, minutes apart), then the
        witness arms that have none among the run's arms."""
        todo = list(self.witness)
        for arm in self.arms:
            self.run_arm(arm)
            for w in [w for w in todo if witness.PAIRS.get(w) == arm]:
                self.run_witness(w)
                todo.remove(w)
        for w in todo:
            self.run_witness(w)

    def run_arm(self, arm):
        """One arm through the three experiments: its results (also in self.res[arm]); a
        driver's failure is a problem, and the arm goes on with the next experiment."""
        log("== %s" % arm)
        d = self.start_echod(arm, self.x, arm)
        try:
            self.res[arm] = self.measure(echod_target(d, self.model.server_cpu), arm,
                                         self.cost.stream_capacity(self.x, self.cap))
        finally:
            err = d.stop()
            d.close_log()
            if err:
                self.problems.append("%s: echod %s:\n%s" % (arm, err, d.log_tail()))
        return self.res[arm]

    def run_witness(self, arm):
        """One grpc-java arm of the peer through the same experiments as echod's, with flat
        work at the run's scale (witness.cpu_us) after its JIT's warm-up: its results in
        self.wres[witness.label(arm)]; the stream ramps too for the arms in the findings' direct
        and virtual roles (witness.stream_arms: F5), at fractions of the unary capacity (the
        peer's flat work is per message as per call). The peer draws stalls server-wide
        (-Dpeer.stall_*), so with the grid's stalls its grid runs on a peer of its own."""
        name = witness.label(arm)
        n = witness.cpu_us(self)
        log("== %s (grpc-java peer on JDK %d, -Dpeer.cpu_us=%d)" % (
            name, witness.jdk(self.args, arm), n))
        streams = self.cap if arm in witness.stream_arms(self.witness) else None
        # its probe at least 3 s (after --quick's short warm-up its compiler threads may still
        # hold the CPU for a second)
        probe_s = max(3, self.plan.probe_s)
        if self.stalls:
            grid = self.with_peer(arm, n, name + "-stalls", lambda t: self.measure(
                t, name, None, probe_s, ramp=False), self.stalls.us(n))
            self.wres[name] = self.with_peer(arm, n, name, lambda t: self.measure(
                t, name, streams, probe_s, grid=False))
            self.wres[name]["fixed"] = grid["fixed"]
        else:
            self.wres[name] = self.with_peer(arm, n, name, lambda t: self.measure(
                t, name, streams, probe_s))
        return self.wres[name]

    def with_peer(self, arm, cpu_us, name, measure, stalls_us=0):
        """measure(target) on a peer of `arm` started for it, after its JIT's warm-up, its JVM
        read over the measured part (witness.MeasuredRun: self.wrun[name]["jvm"])."""
        pauses = os.path.join(self.workdir, "peer-" + witness.gc_log_name(name))
        p = self.start_peer(arm, cpu_us, name, stalls_us, pause_log=pauses)
        try:
            target = peer_target(p, self.model.server_cpu)
            info = self.wrun[name] = {"warmup": witness.warm_up(self, target), "log": p.log_path,
                                      "pause_log": pauses, "jdk": witness.jdk(self.args, arm)}
            m = witness.MeasuredRun(p.pid, pauses)
            out = measure(target)
            info["jvm"] = m.close()
            why = witness.flag_reasons(info["jvm"])
            log("  %s's JVM: %s%s" % (name, witness.jvm_text(info["jvm"]),
                                      "; flagged: " + ", ".join(why) if why else ""))
            return out
        finally:
            err = p.stop()
            if err:
                self.problems.append("%s: the peer %s:\n%s" % (name, err, p.log_tail()))

    def measure(self, target, arm, stream_capacity, probe_s=None, grid=True, ramp=True):
        """The three experiments against a started server (the grid, the ramps, and the stream
        ramp with a `stream_capacity`): {"fixed", "ramp", "streams", "capacity_probe",
        "ramp_run"}."""
        cap = self.cap
        r = {"fixed": [], "ramp": [], "streams": []}
        # a closed-loop probe (and warm-up): what the arm's ramp VUs are sized for, within
        # 0.9-1.1x of the calibrated capacity (the CPU clock's: on a busy machine the probe
        # measures the machine, and a backlog sized on it would ask for far more VUs than
        # an arm of this capacity can build)
        r["capacity_probe"] = probe = self.drivers.capacity(target, probe_s or self.plan.probe_s)
        mu = min(max(probe, 0.9 * cap), 1.1 * cap)
        log("  capacity probe: %.0f calls/s%s" % (probe, "" if mu == probe else
                                                   " (VUs sized for %.0f)" % mu))
        if grid:
            r["fixed"] = self.fixed_grid(target, arm, cap)
        if not ramp:
            return r
        r["ramp"] = self.unary_ramp(target, arm, cap, mu, r)
        if self.drivers.k6:
            # the capped regime's ramps at the study's other caps, on this server as the arm's
            # own ramp left it (every call answered: the drivers' Window waits)
            for cap_s in self.regime.extra_caps(arm, cap):
                r.setdefault("extra_ramps", []).append(
                    self.extra_ramp(target, arm, cap, mu, cap_s))
            if stream_capacity:
                r["streams"] = self.stream_ramps(target, arm, stream_capacity)
        if getattr(self.args, "mux", False):
            r["mux"] = mux.measure(self, target, arm)
        return r

    def fixed_grid(self, target, arm, cap):
        """10% of capacity on k6 (when there is one), then on h2load."""
        out = []
        rate = round(0.1 * cap)
        for drv in (["k6"] if self.drivers.k6 else []) + ["h2load"]:
            s = self.drivers.fixed(target, arm, rate, self.plan.fixed_s, self.problems, drv)
            log("  fixed %d/s (%s): p50 %s ms, p99 %s ms, %s µs/call" % (
                rate, drv, fmt.num(s["p50_ms"], 2), fmt.num(s["p99_ms"], 2),
                fmt.num(s["cpu_us_per_call"])))
            out.append(s)
        return out

    def unary_ramp(self, target, arm, cap, mu, r):
        """The ramp's steps: one k6 run held by the regime (its run in r["ramp_run"]), or
        without k6 a closed window of h2load per step."""
        plan = self.plan
        rates = plan.ramp_rates(cap)
        steps = []
        if not self.drivers.k6:
            for i, frac in enumerate(plan.ramp_fractions):
                s = self.drivers.fixed(target, arm, rates[i], plan.ramp_s, self.problems, "h2load")
                s.update(stage="s%02d" % (i + 1), fraction=frac, answered=s["ok"])
                log("  ramp %.2gx = %d/s (h2load): goodput %.0f/s, p99 %s ms" % (
                    frac, s["offered"], s["ok"] / s["duration_s"], fmt.num(s["p99_ms"], 2)))
                steps.append(s)
            return steps
        try:
            steps, r["ramp_run"] = self.drivers.ramp(target, arm, plan, rates,
                                                     self.regime.ramp(rates, mu, cap))
        except RuntimeError as e:
            self.problems.append("%s, unary ramp: %s" % (arm, e))
        log_ramp(steps)
        return steps

    def extra_ramp(self, target, arm, cap, mu, cap_s):
        """The arm's unary ramp again, capped at `cap_s` seconds of capacity: study.json's
        {name (arm@cap, also k6's ARM tag), cap_calls, cap_s, ramp, ramp_run}."""
        rates = self.plan.ramp_rates(cap)
        sizing = self.regime.ramp(rates, mu, cap, cap_s)
        name = "%s@%ss" % (arm, fmt.num(cap_s, 3))
        log("  ramp capped at %d calls (%.3f s of capacity): %s" % (sizing.cap_calls, cap_s,
                                                                    name))
        x = {"name": name, "cap_calls": sizing.cap_calls, "cap_s": cap_s, "ramp": [],
             "ramp_run": None}
        try:
            x["ramp"], x["ramp_run"] = self.drivers.ramp(target, name, self.plan, rates, sizing)
        except RuntimeError as e:
            self.problems.append("%s, unary ramp: %s" % (name, e))
        log_ramp(x["ramp"])
        return x

    def stream_ramps(self, target, arm, stream_capacity):
        """bidi-ramp.js at each stream count, its steps fractions of the stream capacity."""
        out = []
        rates = self.plan.stream_rates(stream_capacity)
        for n in self.plan.stream_counts:
            try:
                run = self.drivers.streams(target, arm, n, rates, self.plan.stream_s)
            except RuntimeError as e:
                self.problems.append("%s, %d streams: %s" % (arm, n, e))
                continue
            log("  streams x%d: %s" % (n, ", ".join(
                "%.0f->%.0f msg/s p99 %s ms shed %.0f/s" % (
                    s["offered"], s["answered"] / s["duration_s"], fmt.num(s["p99_ms"]),
                    s["dropped"] / s["duration_s"]) for s in run["steps"])))
            out.append(run)
        return out


def log_ramp(steps):
    """A progress line per unary ramp step."""
    for s in steps:
        log("  ramp %.2gx = %d/s: sent %.3f (dropped %d), goodput %.0f/s, p99 %s ms, busy "
            "VUs %s, echod in flight %s, k6 %s cores %s MB" % (
                s["fraction"], s["offered"], s["sent_ratio"], s["dropped"],
                s["answered"] / s["duration_s"], fmt.num(s["p99_ms"], 2),
                fmt.num(s["busy_vus_max"], 0), fmt.num(s["echod_in_flight_max"], 0),
                fmt.num(s["k6_cores"], 2), fmt.num(s["k6_rss_mb"], 0)))


def call_problems(res, arms):
    """Every call must have succeeded (a client's abandonment at a run's end is not a
    failure): the steps and runs where one did not."""
    out = []
    for arm in arms:
        steps = [(arm, s) for s in res[arm]["fixed"]] + [
            (name, s) for name, ramp, _ in ramps(res[arm], arm) for s in ramp]
        for name, s in steps:
            if s["failed"]:
                out.append("%s, %s at %.0f/s: %d calls failed (echod: %r%s)" % (
                    name, s["driver"], s["offered"], s["failed"], s["server_codes"],
                    "; %d k6 iterations threw, e.g. %s" % (s["k6_errors"], s["k6_error"])
                    if s.get("k6_errors") else ""))
        for name, _, run in ramps(res[arm], arm):
            if run and (run["server_failed"] or run["k6_errors"]):
                out.append("%s, unary ramp: echod ended %d calls with %r%s" % (
                    name, run["server_failed"], run["server_codes"], "; k6: %s" %
                    run["k6_error"] if run["k6_error"] else ""))
        m = res[arm].get("mux")
        for s in ([m["closed"]] + m["open"]) if m else []:
            if s["failed"]:
                out.append("%s, mux %s: %d calls failed (echod: %r)" % (
                    arm, s["stage"], s["failed"], s["server_codes"]))
        for run in res[arm]["streams"]:
            bad = sum(s["failed"] for s in run["steps"]) + run["server_failed"]
            if bad or run["k6_errors"]:
                out.append("%s, %d streams: %d messages failed%s" % (
                    arm, run["streams"], bad, "; k6: %s" % run["k6_error"] if run["k6_error"]
                    else ""))
    return out
