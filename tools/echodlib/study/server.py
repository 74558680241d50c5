"""The server under test as the study's drivers see it, the CPU it runs on, and what it did
between two points of a run.

A Target is any gRPC server of the echo contract: where to send calls, whose CPU to read, and
how to scrape its /metrics (None for a server without echod's metrics: a Window then counts
its CPU only). echod is the one the study runs (echod_target); another server (the grpc-java
peer of echodlib.peers) needs only a Target of its own.
"""

import time

from .. import cgroup, daemon, jvm, procstat, prom
from . import log

SERVICE = "grpc.examples.echo.Echo"


class Target:
    """A server the drivers measure: grpc_port on host, its process pid, scrape() -> the text
    of its /metrics, or None; server_cpu, the CPU it is pinned to alone (None under a quota),
    on which other load is read (taken_s); without /metrics, calls_clock() -> CPU seconds of
    its threads that run calls (Window.settled)."""

    def __init__(self, grpc_port, pid, scrape=None, host="127.0.0.1", server_cpu=None,
                 calls_clock=None):
        self.grpc_port = grpc_port
        self.host = host
        self.pid = pid
        self.scrape = scrape
        self.server_cpu = server_cpu
        self.calls_clock = calls_clock

    def taken_s(self):
        """The server CPU's seconds run by anyone (procstat.cpu_taken_s), or None."""
        return None if self.server_cpu is None else procstat.cpu_taken_s(self.server_cpu)

    @property
    def grpc_target(self):
        return "%s:%d" % (self.host, self.grpc_port)

    def samples(self):
        """The parsed scrape ([] without one)."""
        return prom.samples(self.scrape()) if self.scrape else []


def echod_target(d, server_cpu=None):
    """The Target of a started daemon.Echod."""
    return Target(d.grpc_port, d.pid, d.scrape, server_cpu=server_cpu)


def peer_target(p, server_cpu=None):
    """The Target of a started peers.Peer: no /metrics (its calls are the driver's counts)."""
    return Target(p.port, p.pid, server_cpu=server_cpu,
                  calls_clock=lambda: jvm.calls_cpu_s(p.pid))


def other_share(taken_s, server_cpu_s, wall_s):
    """What others took of the server's CPU over a window: its seconds run by anyone less the
    server's own, over the wall time (None without a pinned CPU or a CPU clock)."""
    if taken_s is None or server_cpu_s is None or not wall_s:
        return None
    return max(0.0, (taken_s - server_cpu_s) / wall_s)


class CpuModel:
    """Where the server and the driver run: `pinned` (a static CPU manager: the server on
    server_cpu, taskset) or `quota` (a plain Kubernetes limit: a CFS quota of one CPU over both
    cores, in a cgroup; needs root). The driver runs on client_cpu in both."""

    def __init__(self, name, server_cpu, client_cpu):
        self.name = name
        self.group = None
        # the server's own CPU, where other load is read (none under a quota)
        self.server_cpu = int(server_cpu) if name == "pinned" else None
        self.client_prefix = ["taskset", "-c", str(client_cpu)]
        if self.name == "pinned":
            self.server_prefix = ["taskset", "-c", str(server_cpu)]
            self.text = ("pinned core: the server on CPU %s (taskset), the driver on CPU %s"
                         % (server_cpu, client_cpu))
        else:
            self.group, why = cgroup.CpuQuota.create("echod-study", 1.0)
            if self.group is None:
                raise RuntimeError(why)
            self.server_prefix = self.group.exec_prefix()
            self.text = ("CFS quota of one CPU over both cores (%s); the driver on CPU %s"
                         % (self.group.describe(), client_cpu))

    def close(self):
        """Removes the quota's cgroup, and says so on stderr when it cannot (the run's figures
        stand; the group is left behind)."""
        why = self.group.remove() if self.group else None
        if why:
            log("warning: %s" % why)


def start_echod(binary, model, arm_file, sets, log_path, prometheus=None, name=None):
    """echod with an arm's configuration under the CPU model's prefix; scraped by the study's
    Prometheus (when there is one) with the label arm=name."""
    d = daemon.Echod(config=arm_file, binary=binary, prefix=model.server_prefix,
                     sets=["log.level=warn"] + sets, log_path=log_path)
    d.start()
    if prometheus:
        prometheus.add_target(d.admin_port, arm=name)
        prometheus.wait_up(d.admin_port)
    return d


QUIET_SHARE = 0.05  # threads that run calls busier than this still have calls to run


def quiet(clock, deadline, interval=0.1, timer=time):
    """Waits until `clock` (CPU seconds of the threads that run calls) advanced by less than
    QUIET_SHARE of `interval` (or the deadline passed). `timer` gives monotonic() and sleep()
    (a test's fake clock in place of the time module)."""
    while True:
        c0, t0 = clock(), timer.monotonic()
        timer.sleep(interval)
        c1, t1 = clock(), timer.monotonic()
        if (c1 - c0) < QUIET_SHARE * (t1 - t0) or t1 > deadline:
            return


class Window:
    """Server CPU and calls between two points: CPU seconds, wall seconds, OK unary calls, bidi
    messages received, and the non-OK codes the server ended calls with."""

    def __init__(self, target):
        self.target = target
        m0 = self.settled()
        self.cpu0 = procstat.cpu_clock(target.pid)
        self.taken0 = target.taken_s()
        self.t0 = time.monotonic()
        self.unix0 = time.time()  # the step's time range, for PromQL (study.json t_start, t_end)
        self.m0 = m0

    def settled(self, timeout=30.0):
        """A scrape once no call is in flight. A pool arm still works off the queue a driver
        left when it stopped (h2load -D abandons its calls in flight; echod ends each CANCELLED
        when its turn comes): those calls and their CPU belong to the step that sent them. A
        server without /metrics (the grpc-java peer) is settled once its CPU is quiet: under
        directExecutor it works off every call of a read pass, abandoned or not, before it
        reads again, so a step after a multiplexed closed loop began with half a second of the
        loop's calls (bench/study --mux, 2026-12-04)."""
        deadline = time.monotonic() + timeout
        if not self.target.scrape:
            if self.target.calls_clock:
                quiet(self.target.calls_clock, deadline)
            return []
        while True:
            m = self.target.samples()
            if prom.metric_sum(m, "echod_calls_in_flight") == 0 or time.monotonic() > deadline:
                return m
            time.sleep(0.05)

    def close(self):
        m1 = self.settled()
        cpu1 = procstat.cpu_clock(self.target.pid)
        taken1 = self.target.taken_s()
        t1 = time.monotonic()
        self.unix1 = time.time()

        def delta(name, **match):
            return prom.metric_sum(m1, name, **match) - prom.metric_sum(self.m0, name, **match)
        # the Echo service only: k6 opens a reflection stream per connection and cancels it
        echo0 = [x for x in self.m0 if x[1].get("grpc_service") == SERVICE]
        echo1 = [x for x in m1 if x[1].get("grpc_service") == SERVICE]
        codes0 = prom.metric_by(echo0, "grpc_server_handled_total", "grpc_code")
        codes1 = prom.metric_by(echo1, "grpc_server_handled_total", "grpc_code")
        self.not_ok = {c: v - codes0.get(c, 0) for c, v in codes1.items()
                       if c != "OK" and v > codes0.get(c, 0)}
        self.ok_calls = delta("grpc_server_handled_total", grpc_code="OK", grpc_method="UnaryEcho")
        self.messages = delta("grpc_server_msg_received_total",
                              grpc_method="BidirectionalStreamingEcho")
        self.cpu_s = None if self.cpu0 is None or cpu1 is None else cpu1 - self.cpu0
        # the cost model's loop wake-ups (wakeup_cpu_us): a price of the loop's idleness, which
        # a closed-loop probe has as much of as its driver's pace gives it
        self.wakeup_s = delta("echod_work_model_cpu_seconds_total", kind="wakeup")
        self.wall_s = t1 - self.t0
        self.cpu_other = other_share(
            taken1 - self.taken0 if taken1 is not None and self.taken0 is not None else None,
            self.cpu_s, self.wall_s)
        # echod's own cgroup cpu.stat, as a cluster user would scrape it: under the quota model
        # whether the step was throttled; the kernel counts a period when it ends, so the last
        # one (100 ms of a step's 10-15 s) may fall in the next window
        self.cfs = None
        if any(n == "echod_cgroup_cpu_periods_total" for n, _, _ in m1):
            self.cfs = {"periods": int(delta("echod_cgroup_cpu_periods_total")),
                        "throttled_periods": int(delta("echod_cgroup_cpu_throttled_periods_total")),
                        "throttled_s": delta("echod_cgroup_cpu_throttled_seconds_total")}
        return self

    def calls(self, counted):
        """The window's OK unary calls: the server's own count, or the driver's (`counted`)
        for a server without /metrics."""
        return self.ok_calls if self.target.scrape else counted

    def failures(self, abandon_cap):
        """(failed, abandoned, codes): non-OK endings the server counted, except CANCELLED
        calls a client dropped when its run ended (at most abandon_cap: the calls it could have
        had open)."""
        codes = dict(self.not_ok)
        abandoned = int(codes.get("CANCELLED", 0))
        if abandoned <= abandon_cap:
            codes.pop("CANCELLED", None)
        else:
            abandoned = 0
        return int(sum(codes.values())), abandoned, codes

    def cpu_fields(self, calls, seconds):
        """Server CPU per call over the window, and in millicores while the step ran (CPU per
        call times calls per second of the step: the window also holds the driver's start and
        end)."""
        per = self.cpu_s / calls * 1e6 if self.cpu_s and calls else None
        return {"server_cpu_s": self.cpu_s, "wall_s": self.wall_s, "cpu_us_per_call": per,
                "t_start": self.unix0, "t_end": self.unix1,
                "cpu_millicores": per * calls / seconds / 1000.0 if per else None,
                "cfs": self.cfs, "server_cpu_other": self.cpu_other}


CFS_COUNTERS = (("cfs_periods", "echod_cgroup_cpu_periods_total"),
                ("cfs_throttled", "echod_cgroup_cpu_throttled_periods_total"),
                ("cfs_throttled_s", "echod_cgroup_cpu_throttled_seconds_total"))


# What the dispatch did in a step, from echod's own counters (sample key, family, labels): its
# flushes by trigger, its read batches (the histogram's count and sum: batches and connections
# served), its loop's wake-ups by cause and its hand-offs by what they found.
DISPATCH_COUNTERS = (
    ("flush_loop_tail", "echod_flushes_total", {"trigger": "loop_tail"}),
    ("flush_read_complete", "echod_flushes_total", {"trigger": "read_complete"}),
    ("flush_loop_task", "echod_flushes_total", {"trigger": "loop_task"}),
    ("read_batches", "echod_loop_read_batch_connections_count", {}),
    ("read_batch_conns", "echod_loop_read_batch_connections_sum", {}),
    ("wakeups_io", "echod_loop_wakeups_total", {"cause": "io"}),
    ("wakeups_task", "echod_loop_wakeups_total", {"cause": "task"}),
    ("handoffs_parked", "echod_handoffs_total", {"found": "parked"}),
    ("handoffs_running", "echod_handoffs_total", {"found": "running"}))


def probe(target):
    """A Sampler probe of the server: its CPU clock and, from one scrape, its OK unary calls,
    calls in flight, cgroup CPU counters and dispatch counters (DISPATCH_COUNTERS)."""
    def sample():
        out = {"echod_cpu": procstat.cpu_clock(target.pid)}
        taken = target.taken_s()
        if taken is not None:
            out["server_cpu_taken"] = taken
        if not target.scrape:
            return out
        m = target.samples()
        out["echod_ok"] = prom.metric_sum(m, "grpc_server_handled_total", grpc_code="OK",
                                          grpc_method="UnaryEcho")
        out["echod_in_flight"] = prom.metric_sum(m, "echod_calls_in_flight")
        for key, name in CFS_COUNTERS:
            if any(n == name for n, _, _ in m):
                out[key] = prom.metric_sum(m, name)
        for key, name, labels in DISPATCH_COUNTERS:
            out[key] = prom.metric_sum(m, name, **labels)
        return out
    return sample
