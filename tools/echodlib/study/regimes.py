"""How the unary ramp's load is held: the regime a run keeps, the k6 it needs, and the steps
that did not keep it.

A regime is a small class with what the runner and bench/study ask of it:

  ramp(rates, mu, capacity, cap_s)   a RampSizing for a ramp of `rates` against an arm probed at
                         `mu` calls/s, the direct arm's calibrated `capacity` (and a cap of
                         its own, for an extra ramp): its VUs, call deadline, connect and
                         warm-up time
  needed(rates, cap)     the VUs a ramp against `cap` calls/s would need (printed at the start)
  garbage_calls(rates)   the calls whose garbage k6's heap must hold without a collection
  setup_s(vus)           k6's set-up of a ramp with `vus` VUs, for the run's estimate
  extra_caps(arm, capacity)   the caps (seconds) of the ramps an arm runs after its own
  problems(res, arms)    the steps that did not keep it, each with what held it back
  label(), describe(capacity)   the run's label ("capped 1.99 s") and its prose

Capped is the study's (its k6 as it ran, docs/study-load.md): k6's arrival-rate executor with
maxVUs = preAllocatedVUs = the cap, so at most the cap's calls are in flight (a k6 gRPC VU holds
one call on one connection) and an iteration that finds no free VU is dropped: the regime, not
a failure. Past capacity the calls in flight reach the cap and stay there, k6 is then a closed
loop of its VUs, and by Little's law a call waits cap / goodput on average whatever the server
does: the study's top step held 4,267 calls for direct and 4,264 for virtual threads, goodput 4%
apart. The cap is in calls (--cap) or in seconds of the direct arm's calibrated capacity
(--cap-seconds; findings.STUDY_CAP_S["direct"], Little's law on the study's top step:
1,993.9 ms x 2,140/s / 2,140/s = 1.994 s).

OpenModel is the other: every call starts on schedule whatever the server does, so past
capacity the calls in flight grow by (offered - capacity) x seconds in every step, and k6's
gRPC client holds one VU (and one connection) per call in flight. Its VUs are sized from the
backlog of an arm that serves nothing past its knee, within what this machine allows
(vu_budget: file descriptors, local ports, k6's heap with Go's collector held off by
k6_go_env). docs/study-load.md has the arithmetic of both.
"""

import math
import os
import resource
from dataclasses import dataclass

from .. import findings as F

OPEN_MODEL_SENT = 0.97  # a step keeps the open model when it sent this share of its offer
K6_CORE = 0.9  # a capped step whose k6 used this share of its core or more measured k6
# A step in which others took more than this share of the server's own CPU (other processes,
# the hypervisor's steal; pinned only) measured the machine, not the server, as one whose k6
# filled its core measured k6: on this machine, quiet, others take 0-3% of it
# (bench/results/model/peer.md's "other load on the server CPU").
SERVER_CPU_OTHER = 0.10
# --quick's cap: its 2 s top step builds at most 0.2 x 2 s = 0.4 s of capacity in flight, so the
# study's 1.994 s would never bind there; 0.2 s fills within about a second and k6 drops the rest
QUICK_CAP_S = 0.2
# k6 v0.53's memory for unary-ramp.js with its collector off (k6_go_env; docs/study-load.md):
# a VU connected and warmed (the full run at --capacity 250: 11.5 GB for 10,114 VUs and 16.1 GB
# for 14,297 at the first step), and a call's garbage (0.1 MB), which stays until the heap
# nears GOMEMLIMIT. The study's 14,297 VUs reached GOMEMLIMIT in that run's second step, and
# the collector's first cycle there cost k6 0.66 of its core and the step a 521 ms p99.
VU_MB = 1.15
CALL_MB = 0.1
WARMUP_RATE = 200  # calls/s of the ramp's warm-up: k6's first call on a VU costs ~3 ms with 10,000

# What an arm answers within a step, as a fraction of its probed capacity, once the step offers
# more than that capacity: nothing, for VUs that must hold whatever the arm does. Many calls in
# flight cost an arm more than the probe's few, and how much varies by arm and by run: in the
# quick study's 1.2x step (2026-12-02, quiet machine) direct served 0.91x, the virtual arm 0.69x,
# the cached arm 0.39x in one run of five (its pool a thread per waiting call: 663 in flight on
# one core) and 0.43x under a CFS quota, and direct answered 4 calls/s within the step in one CI
# run (its loop-tail flush holds a whole read batch's answers until the batch ends, and with 2,200
# ready connections a batch outlasted the 2 s step). VUs sized for any more than nothing ran out
# in that step, and k6 dropped 7-14% of it.
PAST_KNEE = 0.0


def backlog_peak(rates, seconds, capacity, at=1.0, past=1.0):
    """The most calls a fluid queue holds while steps of `seconds` offer `rates` to a server
    of `capacity` calls/s that serves `at` x `capacity` in a step up to 1.05x its capacity and
    `past` x `capacity` in a step that offers more: the queue grows by (rate - served) x
    seconds per step, and drains when the rate is below what is served."""
    b = peak = 0.0
    for r in rates:
        served = (at if r <= 1.05 * capacity else past) * capacity
        b = max(0.0, b + (r - served) * seconds)
        peak = max(peak, b)
    return peak


def mem_available_kb():
    """MemAvailable from /proc/meminfo (kB), or None."""
    try:
        with open("/proc/meminfo") as fh:
            return next(int(l.split()[1]) for l in fh if l.startswith("MemAvailable:"))
    except (OSError, ValueError, StopIteration):
        return None


def k6_go_env(environ=None, avail_kb=None):
    """Go's collector for k6, unless the environment sets it: off until k6's heap nears 3/4 of
    the available memory (GOGC=off with GOMEMLIMIT). k6 pinned to one core runs Go with one P,
    and each default cycle (GOGC=100) marks every VU's heap on it: with ~1,300 VUs, cycles
    stalled k6 for seconds in the quick study's 2 s steps (0.4x: goodput 196/s of 394, p99 2.3 s,
    and at 1.2x a third of the iterations dropped, all VUs busy with calls k6 itself delayed);
    with the collector held off, the same run sent every call, p99 54 ms at 0.4x
    (2026-12-02, quiet machine). vu_budget keeps k6's heap, its VUs and its calls' garbage,
    within 0.9 of the limit."""
    environ = os.environ if environ is None else environ
    if "GOGC" in environ or "GOMEMLIMIT" in environ:
        return {}
    avail = mem_available_kb() if avail_kb is None else avail_kb
    if not avail:
        return {}
    return {"GOGC": "off", "GOMEMLIMIT": "%dMiB" % (avail * 3 // 4 // 1024)}


def machine_limits():
    """{why: most VUs} of this machine's descriptors and local ports: one connection and one
    file descriptor per VU in k6 and in echod, a local port each."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    limits = {"file descriptors (RLIMIT_NOFILE %d)" % nofile: nofile - 500}
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            lo, hi = (int(x) for x in fh.read().split())
        limits["local ports (%d-%d)" % (lo, hi)] = hi - lo - 1000
    except (OSError, ValueError):
        pass
    return limits


def vu_budget(calls, go_env, limits=None, avail_kb=None):
    """(most VUs k6 may have on this machine, why): machine_limits(), and VU_MB of k6's memory
    a VU: with the collector held off by go_env (k6_go_env), VU_MB a VU and CALL_MB for each of
    the ramp's `calls` within 0.9 of its GOMEMLIMIT, so that it never runs (a cycle marks every
    VU's heap on k6's one core; calls 0: the regime lets it run, Capped.garbage_calls);
    otherwise half the available memory."""
    limits = dict(machine_limits() if limits is None else limits)
    limit = go_env.get("GOMEMLIMIT", "")
    avail = mem_available_kb() if avail_kb is None else avail_kb
    if limit.endswith("MiB"):
        mb = 0.9 * int(limit[:-3])
        limits["k6's heap within 0.9 of GOMEMLIMIT=%s%s" % (
            limit, " with %d calls" % calls if calls else "")] = int((mb - calls * CALL_MB) / VU_MB)
    elif avail:
        limits["half the available memory (%.1f GB)" % (avail / 2 / 1e6)] = \
            int(avail / 1024 / 2 / VU_MB)
    why = min(limits, key=limits.get)
    return max(100, limits[why]), why


@dataclass
class RampSizing:
    """One ramp's k6 as a regime sizes it: VUs (all pre-allocated), the VUs the regime needs,
    the calls/s they were sized for, the call deadline, the connect and warm-up phases, and the
    regime's name and cap (calls and seconds of capacity; None in the open model)."""

    vus: int
    needed: int
    sized_for: float
    timeout_s: int
    connect_s: int
    warmup_rate: int
    regime: str = "open"
    cap_calls: int = None
    cap_s: float = None

    def env(self):
        """unary-ramp.js's environment for it: MAX_VUS = VUS, so k6 never adds a VU during a
        step (in the open model that costs the step its start-up; in the capped one it is the
        cap)."""
        return {"VUS": str(self.vus), "MAX_VUS": str(self.vus), "PRECONNECT": "1",
                # all VUs dial at once when k6 starts: the ramp begins this much later
                "CONNECT_SECONDS": str(self.connect_s),
                "CALL_TIMEOUT": "%ds" % self.timeout_s, "WARMUP_RATE": str(self.warmup_rate)}

    def setup_s(self):
        """The seconds k6 takes before the first step, at most (connect and warm-up)."""
        return self.vus / 100.0 + self.vus / self.warmup_rate

    def fields(self):
        """The sizing in study.json's ramp_run."""
        return {"vus": self.vus, "vus_needed": self.needed, "vus_sized_for": self.sized_for,
                "call_timeout_s": self.timeout_s, "regime": self.regime,
                "cap_calls": self.cap_calls, "cap_s": self.cap_s}


def ramps(r, arm):
    """An arm's unary ramps in its results `r`: (name, steps, ramp_run) of its own ramp, then
    of each extra ramp at another cap (Capped.extra_caps)."""
    return [(arm, r["ramp"], r.get("ramp_run"))] + [
        (x["name"], x["ramp"], x["ramp_run"]) for x in r.get("extra_ramps", [])]


class K6Ramp:
    """What both regimes share: k6's VUs pre-allocated, connected and warmed before the first
    step, a deadline no wait of the regime reaches, and the stream ramps' schedule kept."""

    name = None

    def __init__(self, plan, max_vus=None):
        self.plan = plan
        self.max_vus = max_vus

    def warmup_rate(self, vus):
        """The ramp's warm-up, calls/s (unary-ramp.js WARMUP_RATE: a call on each VU before
        the first step, as a VU's first call costs k6 twice a later one): WARMUP_RATE, which
        keeps k6 within its core at ~3 ms a first call with 10,000 VUs; --quick's ~1,500 VUs
        cost 1.4 ms and are warmed in 4 s."""
        return max(WARMUP_RATE, int(math.ceil(vus / 4.0))) if self.plan.quick else WARMUP_RATE

    def setup_s(self, vus):
        """k6's set-up of `vus` VUs (~3 ms each, and their connections) and their warm-up."""
        return 0.004 * vus + (vus / float(self.warmup_rate(vus)) if vus else 0)

    def sizing(self, vus, need, mu, **cap):
        """A RampSizing of `vus` against an arm of capacity `mu`: a call waits at most for the
        VUs ahead of it, three times that is its deadline, so no deadline ends one."""
        return RampSizing(vus, need, mu, int(10 + 3 * vus / max(1.0, mu)),
                          max(2 if self.plan.quick else 5, int(math.ceil(vus / 400.0))),
                          self.warmup_rate(vus), self.name, **cap)

    def extra_caps(self, arm, capacity):
        return []

    def cpu_problems(self, res, arms):
        """The grid's and ramps' steps in which others took more than SERVER_CPU_OTHER of the
        server's own CPU (pinned: other processes, the hypervisor's steal): such a step measured
        the machine, as one whose k6 filled its core measured k6."""
        out = []
        for arm in arms:
            steps = [(arm, "grid %s" % s["driver"].split(" ")[0], s)
                     for s in res[arm].get("fixed") or []]
            steps += [(name, "ramp %.2gx" % s["fraction"], s)
                      for name, ramp, _ in ramps(res[arm], arm) for s in ramp]
            for name, where, s in steps:
                if (s.get("server_cpu_other") or 0) > SERVER_CPU_OTHER:
                    out.append("%s, %s (%d/s): other processes or the host took %.0f%% of the "
                               "server's CPU (at most %.0f%%: the step measured the machine, not "
                               "the server)" % (name, where, s["offered"],
                                                100 * s["server_cpu_other"],
                                                100 * SERVER_CPU_OTHER))
        return out

    def stream_problems(self, res, arms):
        """The stream steps that did not keep their schedule (every message due sent or shed)."""
        out = []
        for arm in arms:
            for run in res[arm]["streams"]:
                for s in run["steps"]:
                    if s["kept_ratio"] is not None and s["kept_ratio"] < OPEN_MODEL_SENT:
                        out.append("%s, %d streams, %.0f msg/s: sent or shed %.3f of the messages "
                                   "due (k6 fell behind its schedule)" % (
                                       arm, run["streams"], s["offered"], s["kept_ratio"]))
        return out


class OpenModel(K6Ramp):
    """The open model (the module's docstring): VUs for the backlog, every step must send
    OPEN_MODEL_SENT of its offer."""

    name = "open"
    SENT = OPEN_MODEL_SENT

    def needed(self, rates, capacity, past=PAST_KNEE):
        """VUs for a ramp to keep its schedule against a server of `capacity` calls/s: the
        backlog at 0.97 of that capacity (an arm serves k6's one-call connections a little
        slower than the probe's few busy ones), and at `past` of it in the steps past it,
        15% more, and room for the calls in flight below capacity."""
        return int(math.ceil(1.15 * backlog_peak(rates, self.plan.ramp_s, capacity, 0.97, past)
                             + 0.05 * max(rates))) + 50

    def garbage_calls(self, rates):
        """Every call of the ramp: the collector must not run with the backlog's VUs."""
        return int(sum(rates) * self.plan.ramp_s)

    def ramp(self, rates, mu, capacity=None, cap_s=None):
        """The VUs for the backlog an arm of capacity `mu` builds (within max_vus)."""
        need = self.needed(rates, mu)
        return self.sizing(min(need, self.max_vus), need, mu)

    def label(self):
        return "open"

    def describe(self, capacity):
        return "open-model (ramping-arrival-rate, every call started on schedule)"

    def kept(self, ratio):
        return (ratio or 0) >= self.SENT

    def problems(self, res, arms):
        """The steps that did not keep the open model, each with what held it back."""
        out = []
        for arm in arms:
            run = res[arm].get("ramp_run") or {}
            for s in res[arm]["ramp"]:
                if s.get("sent_ratio") is None or self.kept(s["sent_ratio"]):
                    continue
                why = []
                if s["busy_vus_max"] is not None and \
                        s["busy_vus_max"] >= 0.98 * run.get("vus", 1e9):
                    why.append("all %d VUs busy (the backlog needed %d)" % (run["vus"],
                                                                             run["vus_needed"]))
                if s["k6_cores"] is not None and s["k6_cores"] >= K6_CORE:
                    why.append("k6 used %.2f of its core" % s["k6_cores"])
                if s["late_connects"]:
                    why.append("%d VUs were still connecting (the machine was slow to accept "
                               "them before the ramp)" % s["late_connects"])
                out.append("%s, ramp %.2gx (%d/s): sent %.3f of the offered calls, k6 dropped %d "
                           "iterations%s" % (arm, s["fraction"], s["offered"], s["sent_ratio"],
                                             s["dropped"], ": " + "; ".join(why) if why else ""))
        return out + self.stream_problems(res, arms) + self.cpu_problems(res, arms)


class Capped(K6Ramp):
    """The capped regime (the module's docstring): at most the cap's calls in flight, k6
    dropping what finds no free VU. `cap_calls` (--cap) or `cap_s` (--cap-seconds: seconds of
    the direct arm's calibrated capacity; default the study's 1.994 s, --quick's QUICK_CAP_S);
    with `published_caps`, direct and direct-drain also run their ramp at the study's other caps
    (F4 at the published caps: findings.drain_at_published_caps)."""

    name = "capped"
    # the caps each arm of the study ran at, in seconds of capacity; direct also at the drain's,
    # which F4p's detail compares with direct at its own (what the caps alone give)
    PUBLISHED = {"direct": (F.STUDY_CAP_S["direct"], F.STUDY_CAP_S["direct-drain"]),
                 "direct-drain": (F.STUDY_CAP_S["direct-drain"],)}

    def __init__(self, plan, max_vus=None, cap_calls=None, cap_s=None, published_caps=False):
        super().__init__(plan, max_vus)
        self.cap_calls = cap_calls
        self.cap_s = None if cap_calls else (cap_s or (QUICK_CAP_S if plan.quick
                                                       else F.STUDY_CAP_S["direct"]))
        self.published_caps = published_caps

    def cap(self, capacity, cap_s=None):
        """(calls, seconds of `capacity`) of the run's cap, or of a cap of `cap_s` seconds."""
        if cap_s is None and self.cap_calls:
            return self.cap_calls, self.cap_calls / float(capacity)
        s = self.cap_s if cap_s is None else cap_s
        return max(1, int(round(s * capacity))), s

    def needed(self, rates, capacity):
        """The most VUs any of the run's ramps holds: its cap, or a larger published one."""
        caps = [self.cap(capacity)[0]] + [self.cap(capacity, s)[0] for a in self.PUBLISHED
                                          for s in self.extra_caps(a, capacity)]
        return max(caps)

    def garbage_calls(self, rates):
        """0: with the VUs bounded by the cap, Go's collector may run when k6's heap nears
        GOMEMLIMIT (a cycle marks the cap's VUs, ~2,000 at the full run's 1.994 s of
        1,000/s, every ~150,000 calls), so the calls' garbage bounds no VU."""
        return 0

    def ramp(self, rates, mu, capacity, cap_s=None):
        """The cap's VUs, whatever the arm serves (its deadline from `mu`)."""
        calls, seconds = self.cap(capacity, cap_s)
        return self.sizing(calls, calls, mu, cap_calls=calls, cap_s=seconds)

    def extra_caps(self, arm, capacity):
        """The published caps (seconds) `arm` runs an extra ramp at: those of PUBLISHED whose
        calls differ from the run's cap."""
        if not self.published_caps:
            return []
        own = self.cap(capacity)[0]
        return [s for s in self.PUBLISHED.get(arm, ()) if self.cap(capacity, s)[0] != own]

    def label(self):
        if self.cap_calls:
            return "capped %d calls" % self.cap_calls
        return "capped " + F.cap_text(self.cap_s)

    def describe(self, capacity):
        calls, seconds = self.cap(capacity)
        return ("capped at %d VUs = calls in flight (%s of capacity; ramping-arrival-rate with "
                "maxVUs = preAllocatedVUs, k6 dropping every iteration that finds no free VU)"
                % (calls, F.cap_text(seconds)))

    def problems(self, res, arms):
        """The steps of any of an arm's ramps where k6 went past the cap or ran out of its own
        core (its figures are then k6's); a step's drops are the regime, not a problem."""
        out = []
        for arm in arms:
            for name, steps, run in ramps(res[arm], arm):
                cap = (run or {}).get("cap_calls")
                for s in steps:
                    where = "%s, ramp %.2gx (%d/s)" % (name, s["fraction"], s["offered"])
                    if cap and (s.get("busy_vus_max") or 0) > cap:
                        out.append("%s: %d VUs busy, past the cap of %d" % (
                            where, s["busy_vus_max"], cap))
                    if (s.get("k6_cores") or 0) >= K6_CORE:
                        out.append("%s: k6 used %.2f of its core (at most %.2f: the step "
                                   "measured k6, not the server)" % (where, s["k6_cores"],
                                                                     K6_CORE))
        return out + self.stream_problems(res, arms) + self.cpu_problems(res, arms)
