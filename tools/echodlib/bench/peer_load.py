"""bench/model's grpc-java measurements that depend on load (issue 30 item 3, issue 31 item 4):
what a JVM server pays besides its calls, read from outside it (echodlib.jvm).

  PeerArm        one arm of the peer pinned to the server CPU, warmed until its JIT is done,
                 measured in windows: idle (its background), at low load (k6's evenly spaced
                 constant-arrival-rate, the study's fixed-rate grid) and at saturation (h2load,
                 many connections of one call each), each with its CPU and context switches per
                 thread group (procstat.ThreadWindow, jvm.thread_group)
  derive_wakes   background B, the direct loop's wake-up w, the waking and queued hand-off
                 costs Hw and Hq, and the preset they give (docs/work-model.md)
  stalls_main    bench/model stalls: direct and default at the study's low load with the JVM's
                 pauses logged (-Xlog:safepoint*,gc*), without and with the peer's per-call
                 blocking stalls

A voluntary context switch of a receiving thread is one time it parked: per call, the event
loop's are its selector wake-ups, the pool's the hand-offs that had to wake a worker.
"""

import json
import os
import platform
import sys
import tempfile
import time

from .. import fmt, jvm, k6, peers, procstat, stats
from ..study import server
from ..study.cost import Cost, calibrate
from ..study.drivers import Drivers

STUDY_DIRECT_CALL_US = 1e6 / 2140  # the study's direct call on its pods: 467 µs
LOW_LOAD = 0.1  # the study's fixed-rate grid: 10% of the direct arm's capacity


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def machine_note():
    return "%s, %s; load average %s" % (platform.node(), platform.machine(), ", ".join(
        "%.2f" % x for x in os.getloadavg()))


class PeerArm:
    """One grpc-java arm (direct, default, fixed:N) under args.cpu (the server CPU, or the
    quota's cgroup: study.server.CpuModel), JAVA_OPTS from
    peers.java_opts(**opts), warmed (jvm.warm_up on closed-loop calls) before it is measured;
    jdk as peers.Peer's."""

    def __init__(self, args, arm, workdir, drivers, name=None, jdk=None, **opts):
        self.args, self.arm, self.drivers = args, arm, drivers
        self.name = name or arm
        self.peer = peers.JavaPeer(arm, args.peers_build,
                                   prefix=args.cpu.server_prefix,
                                   java_opts=peers.java_opts(**opts),
                                   log_path=os.path.join(workdir, "java-%s.log" % self.name),
                                   jdk=jdk)
        self.target = None
        self.warmup = None

    def __enter__(self):
        self.peer.start()
        self.target = server.peer_target(self.peer)
        self.warmup = jvm.warm_up(self.peer.pid, lambda s: self.drivers.closed_loop(
                                      self.target, s, 4, 16, peers.NO_WORK),
                                  chunk_s=self.args.warmup_chunk, max_s=self.args.warmup_max,
                                  threshold=self.args.jit_threshold, log=log)
        return self

    def __exit__(self, *exc):
        self.peer.stop()

    def window(self, load):
        """load() -> (calls, its own figures) inside a ThreadWindow: the window's figures."""
        # under a quota the server has no CPU of its own whose other load could be read
        pinned = self.args.cpu.name == "pinned"
        return measure(self.peer.pid, jvm.thread_group, load, self.args.server_cpu if pinned else None)

    def idle(self, seconds):
        return self.window(lambda: (time.sleep(seconds) or 0, {}))

    def low(self, rate, seconds):
        """k6 constant-arrival-rate at `rate` (the study's unary-fixed-rate.js)."""
        def load():
            s = self.drivers.fixed_k6(self.target, self.name, rate, seconds)
            return s["ok"], {"p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "offered": rate,
                             "failed": s["failed"]}
        return self.window(load)

    def saturation(self, seconds, conns=64):
        """A closed loop of `conns` connections, one call in flight each (h2load -m 1)."""
        def load():
            res = self.drivers.closed_loop(self.target, seconds, conns, 1)
            return res["succeeded"], {"calls_per_s": res["rps"]}
        return self.window(load)


def measure(pid, group, load, server_cpu=None):
    """load() -> (calls, its own figures), run inside a ThreadWindow of pid's threads grouped by
    group(name): window_figures of it (server_cpu: the CPU whose busy share is read, if any)."""
    tw = procstat.ThreadWindow(pid, group)
    cpus0 = procstat.cpu_times()
    calls, extra = load()
    tw.close()
    return window_figures(tw, calls, procstat.cpu_times(), cpus0, server_cpu, extra)


def window_figures(tw, calls, cpus1, cpus0, server_cpu, extra):
    """A ThreadWindow's figures: the JVM's CPU and its compiler threads' (s), per call the
    whole and per group (CPU µs, voluntary and involuntary switches), the server CPU's busy
    share and the JVM's share of it (what is left is other load on that CPU; None without a
    server CPU: under a quota)."""
    comp = tw.groups.get("compiler", {}).get("cpu_s", 0.0)
    busy = procstat.busy_share(cpus0, cpus1, int(server_cpu)) if server_cpu is not None else None
    return dict(extra, calls=calls, wall_s=tw.wall_s, cpu_s=tw.cpu_s, compiler_s=comp,
                exited_s=tw.exited_s, per=tw.per(calls),
                groups={g: dict(v) for g, v in tw.groups.items()},
                server_cpu_busy=busy, jvm_share=tw.cpu_s / tw.wall_s if tw.wall_s else None)


def net_us(w, background_cores):
    """A window's CPU per call less its compiler threads' and the background's share (B x the
    window's seconds): what the calls themselves cost."""
    if not w["calls"] or w["cpu_s"] is None:
        return None
    return (w["cpu_s"] - w["compiler_s"] - background_cores * w["wall_s"]) / w["calls"] * 1e6


def background_m(idle):
    """The JVM's idle CPU less its compiler threads', millicores."""
    if idle["cpu_s"] is None or not idle["wall_s"]:
        return None
    return (idle["cpu_s"] - idle["compiler_s"]) / idle["wall_s"] * 1000.0


def group_per_call(w, group, key):
    """A group's figure per call in a window (cpu_us, vol, invol), 0 when it has no thread."""
    if not w["per"]:
        return None
    return w["per"]["groups"].get(group, {}).get(key, 0.0)


# ---------------------------------------------------------------------------- the derivation

def wake_figures(runs, hops):
    """The derivation's inputs from one round's windows: runs[arm] = {"idle", "low", "sat"}
    (PeerArm windows), hops = {"low", "sat"}: grpc-java's hand-offs per call (echod's cached
    arm's dispatches under the same load, and two event-loop tasks)."""
    f = {"B_m": {}, "net_us": {}, "loop_vol": {}, "pool_vol": {}, "hops": dict(hops)}
    for arm, r in runs.items():
        b = background_m(r["idle"])
        f["B_m"][arm] = b
        f["net_us"][arm] = {L: net_us(r[L], (b or 0) / 1000.0) for L in ("low", "sat")}
        f["loop_vol"][arm] = {L: group_per_call(r[L], "event loop", "vol") for L in ("low", "sat")}
        f["pool_vol"][arm] = {L: group_per_call(r[L], "pool", "vol") for L in ("low", "sat")}
    return f


def derive_wakes(f, study_call_us=STUDY_DIRECT_CALL_US, pool="default"):
    """From wake_figures (or their medians):

      B    the direct JVM's idle CPU (millicores), its background
      w    the direct loop's wake-up: (direct's net CPU per call at low load - at saturation)
           / (its loop's voluntary switches per call at low load - at saturation), µs a wake
           (the wake-up, and the read and flush a batch would have shared)
      Hw, Hq  a hand-off that wakes its receiver and one that finds it running: at each load
           the pool arm's net CPU per call over direct's, D = wakes x Hw + queued x Hq, with
           wakes = the pool's voluntary switches per call + the loop's over direct's (the loop
           woken by a worker's write), queued = hops - wakes; two loads, two equations. When
           they do not determine both (no queued hand-off at either load), Hw = D_low / wakes_low
           with Hq taken as 0, and `solved` says so.

    Each also as a ratio to the peer's direct call at saturation (net), and the preset: that
    ratio x the study's direct call (467 µs), B scaled alike."""
    net, lv, pv, hops = f["net_us"], f["loop_vol"], f["pool_vol"], f["hops"]
    out = {"B_m": f["B_m"].get("direct"), "c_sat_us": net["direct"]["sat"],
           "c_low_us": net["direct"]["low"]}
    c_sat = out["c_sat_us"]
    dv = (lv["direct"]["low"] or 0) - (lv["direct"]["sat"] or 0)
    out["direct_wakes"] = {"low": lv["direct"]["low"], "sat": lv["direct"]["sat"]}
    out["w_us"] = (net["direct"]["low"] - c_sat) / dv \
        if dv > 0 and c_sat is not None and net["direct"]["low"] is not None else None
    wakes, queued, delta = {}, {}, {}
    for L in ("low", "sat"):
        wakes[L] = (pv[pool][L] or 0) + max(0.0, (lv[pool][L] or 0) - (lv["direct"][L] or 0))
        queued[L] = max(0.0, hops[L] - wakes[L]) if hops.get(L) is not None else None
        delta[L] = net[pool][L] - net["direct"][L] \
            if net[pool][L] is not None and net["direct"][L] is not None else None
    out.update(wakes=wakes, queued=queued, delta_us=delta, hops=dict(hops))
    hw = hq = None
    solved = "two loads"
    if None not in (delta["low"], delta["sat"], queued["low"], queued["sat"]):
        det = wakes["low"] * queued["sat"] - wakes["sat"] * queued["low"]
        # well-conditioned only when the two loads mix wakes and queued hand-offs differently
        if abs(det) > 0.05 * max(1e-9, (wakes["low"] + queued["low"]) *
                                 (wakes["sat"] + queued["sat"])):
            hw = (delta["low"] * queued["sat"] - delta["sat"] * queued["low"]) / det
            hq = (wakes["low"] * delta["sat"] - wakes["sat"] * delta["low"]) / det
    if hw is None and delta["low"] is not None and wakes["low"]:
        hw, hq, solved = delta["low"] / wakes["low"], 0.0, "low load alone (Hq taken as 0)"
    elif hw is not None and min(hw, hq) < 0:
        # a hand-off costs something: the counts did not separate the two kinds here (a busy
        # machine, a JIT still compiling, or few queued hand-offs at either load)
        solved = "two loads, **a negative cost: not determined by these runs**"
    out.update(Hw_us=hw, Hq_us=hq, solved=solved if hw is not None else "not solvable")
    scale = study_call_us / c_sat if c_sat else None
    out["ratio"] = {k: (out[k] / c_sat if out[k] is not None and c_sat else None)
                    for k in ("w_us", "Hw_us", "Hq_us")}
    out["scale"] = scale
    out["preset"] = {
        "background_m": out["B_m"] * scale if out["B_m"] is not None and scale else None,
        "wake_us": out["w_us"] * scale if out["w_us"] is not None and scale else None,
        "handoff_wake_us": hw * scale if hw is not None and scale else None,
        "handoff_queued_us": hq * scale if hq is not None and scale else None}
    return out


def median_tree(items):
    """The median of each number at the same place in a list of nested dicts (None where it is
    missing in all)."""
    items = [x for x in items if x is not None]
    if not items:
        return None
    if all(isinstance(x, dict) for x in items):
        keys = []
        for x in items:
            keys += [k for k in x if k not in keys]
        return {k: median_tree([x.get(k) for x in items]) for k in keys}
    nums = [x for x in items if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if nums:
        return stats.median(nums)
    return items[0]


# ---------------------------------------------------------------------------- tables

def load_table(runs, arms):
    """Per arm and window (idle, low, sat): the JVM's CPU per call (all, less compiler, net of
    the background), then per thread group CPU µs and voluntary / involuntary switches per call
    (idle: per second), the server CPU's other load."""
    out = ["| arm | window | calls/s | p99 ms | JVM µs/call | net µs/call | exited µs | " +
           " | ".join("%s µs, vol, invol" % g for g in jvm.GROUPS) + " | other load on the "
           "server CPU |", "|---|---|---:|---:|---:|---:|---:|" + "---|" * len(jvm.GROUPS) +
           "---:|"]
    for arm in arms:
        r = runs.get(arm)
        if not r:
            continue
        b = (background_m(r["idle"]) or 0) / 1000.0
        for L in ("idle", "low", "sat"):
            w = r.get(L)
            if not w:
                continue
            if L == "idle":  # per second, in millicores and switches per second
                per_s = {g: (v["cpu_s"] / w["wall_s"] * 1000.0, v["vol"] / w["wall_s"],
                             v["invol"] / w["wall_s"]) for g, v in w["groups"].items()}
                cells = ["%s millicores, %s/s, %s/s" % tuple(fmt.num(x, 1) for x in per_s[g])
                         if g in per_s else "-" for g in jvm.GROUPS]
                head = ["-", "-", "%s millicores" % fmt.num(background_m(w), 1), "(B)", "-"]
            else:
                pg = (w["per"] or {}).get("groups", {})
                cells = ["%s, %s, %s" % (fmt.num(pg[g]["cpu_us"], 1), fmt.num(pg[g]["vol"], 2),
                                         fmt.num(pg[g]["invol"], 2))
                         if g in pg else "-" for g in jvm.GROUPS]
                head = [fmt.num(w["calls"] / w["wall_s"], 0), fmt.num(w.get("p99_ms"), 2),
                        fmt.num((w["per"] or {}).get("cpu_us"), 1),
                        fmt.num(net_us(w, b), 1), fmt.num((w["per"] or {}).get("exited_us"), 1)]
            other = None
            if w.get("server_cpu_busy") is not None and w.get("jvm_share") is not None:
                other = max(0.0, w["server_cpu_busy"] - w["jvm_share"])
            out.append("| %s | %s | %s | %s | %s |" % (arm, L, " | ".join(head), " | ".join(cells),
                                                      fmt.num(other, 2)))
    return out


def derivation_text(d, pool="default"):
    """The derivation of `pool` against direct as docs/work-model.md will state it."""
    def us(v):
        return fmt.num(v, 1)
    w, q, dl, h = d["wakes"], d["queued"], d["delta_us"], d["hops"]
    lines = [
        "background B: the direct JVM idle, less its compiler threads: %s millicores" % fmt.num(d["B_m"], 1),
        "direct's net CPU per call (less compiler and B's share): %s µs at low load, %s µs at "
        "saturation; its loop's voluntary switches per call %s and %s" % (
            us(d["c_low_us"]), us(d["c_sat_us"]), fmt.num(d["direct_wakes"]["low"], 2),
            fmt.num(d["direct_wakes"]["sat"], 2)),
        "w, the direct loop's wake-up: (%s - %s) / (%s - %s) = %s µs a wake" % (
            us(d["c_low_us"]), us(d["c_sat_us"]), fmt.num(d["direct_wakes"]["low"], 2),
            fmt.num(d["direct_wakes"]["sat"], 2), us(d["w_us"])),
        "%s over direct, per call: low load %s µs with %s waking and %s queued hand-offs "
        "(of %s); saturation %s µs with %s waking and %s queued (of %s)" % (
            pool, us(dl["low"]), fmt.num(w["low"], 2), fmt.num(q["low"], 2), fmt.num(h["low"], 2),
            us(dl["sat"]), fmt.num(w["sat"], 2), fmt.num(q["sat"], 2), fmt.num(h["sat"], 2)),
        "Hw (a hand-off that wakes) %s µs, Hq (one that queues) %s µs (%s)" % (
            us(d["Hw_us"]), us(d["Hq_us"]), d["solved"]),
        "as ratios to the peer's direct call at saturation (%s µs): w %s, Hw %s, Hq %s" % (
            us(d["c_sat_us"]), fmt.num(d["ratio"]["w_us"], 3), fmt.num(d["ratio"]["Hw_us"], 3),
            fmt.num(d["ratio"]["Hq_us"], 3)),
        "preset at the study's direct call (%.0f µs, x %s): background %s millicores, loop wake-up %s µs, "
        "waking hand-off %s µs, queued hand-off %s µs" % (
            STUDY_DIRECT_CALL_US, fmt.num(d["scale"], 2),
            fmt.num(d["preset"]["background_m"], 0), fmt.num(d["preset"]["wake_us"], 0),
            fmt.num(d["preset"]["handoff_wake_us"], 0),
            fmt.num(d["preset"]["handoff_queued_us"], 0))]
    return lines


# ---------------------------------------------------------------------------- stalls

def stall_kinds(fractions, stall_us):
    """[(name, fraction, µs)]: none, then every fraction x length."""
    kinds = [("none", 0.0, 0)]
    for f in fractions:
        for n in stall_us:
            kinds.append(("%g%% x %s ms" % (100 * f, fmt.num(n / 1000.0, 1)), f, n))
    return kinds


def stalls_table(res, kinds):
    """Per kind: each arm's p50 / p99 (k6) and its JVM's pauses, and p99 direct / default."""
    out = ["| kind | direct p50 ms | p99 ms | default p50 ms | p99 ms | p99 direct / default | "
           "pauses/s direct, default | pause p99 ms | pause max ms | stopped share | GCs |",
           "|---|---:|---:|---:|---:|---:|---|---|---|---|---|"]
    for name, _, _ in kinds:
        d, p = res.get(("direct", name)), res.get(("default", name))

        def g(r, *path):
            return stats.get(r, *path) if r else None

        def both(*path, f=fmt.ms):
            return "%s, %s" % (f(g(d, *path)), f(g(p, *path)))
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, fmt.ms(g(d, "p50_ms")), fmt.ms(g(d, "p99_ms")), fmt.ms(g(p, "p50_ms")),
            fmt.ms(g(p, "p99_ms")), fmt.num(fmt.ratio(g(d, "p99_ms"), g(p, "p99_ms")), 2),
            both("pauses", "safepoint", "per_s", f=lambda v: fmt.num(v, 2)),
            both("pauses", "safepoint", "p99_ms"), both("pauses", "safepoint", "max_ms"),
            both("pauses", "safepoint", "share", f=lambda v: fmt.num(v, 4)),
            both("pauses", "gc", "count", f=lambda v: fmt.num(v, 0))))
    return out


def pauses_table(res, kinds):
    """Per run: the safepoints by operation and the collections."""
    out = ["| arm | kind | safepoints | p50 / p99 / max ms | reaching p99 ms | by operation | "
           "GC pauses | GC p99 / max ms |", "|---|---|---:|---|---:|---|---:|---|"]
    for name, _, _ in kinds:
        for arm in ("direct", "default"):
            r = res.get((arm, name))
            if not r or not r.get("pauses"):
                continue
            sp, gc = r["pauses"]["safepoint"], r["pauses"]["gc"]
            out.append("| %s | %s | %s | %s / %s / %s | %s | %s | %s | %s / %s |" % (
                arm, name, fmt.num(sp["count"], 0), fmt.ms(sp["p50_ms"]), fmt.ms(sp["p99_ms"]),
                fmt.ms(sp["max_ms"]), fmt.ms(sp["reaching_p99_ms"]),
                ", ".join("%s %s" % (k, fmt.num(v, 0)) for k, v in sorted(
                    sp["by_operation"].items(), key=lambda kv: -kv[1])) or "-",
                fmt.num(gc["count"], 0), fmt.ms(gc["p99_ms"]), fmt.ms(gc["max_ms"])))
    return out


def peer_drivers(args, workdir):
    """Drivers for the peer: k6 (None without it) and h2load on the client CPU."""
    why = k6.unusable()
    return Drivers(None if why else k6.find(), ["taskset", "-c", str(args.client_cpu)], {}, None,
                   workdir), why


def calibrate_peer(args, workdir, drivers):
    """-Dpeer.cpu_us for which the peer's direct arm serves args.capacity calls/s on one CPU
    (its CPU clock, after its warm-up): study.cost.calibrate on the peer, or --cpu-us."""
    def measure(x, i):
        with PeerArm(args, "direct", workdir, drivers, name="calibrate-%d" % i, cpu_us=x) as p:
            return drivers.cpu_per_call(p.target, args.calib_seconds)
    x, cap, _ = calibrate(Cost(None), args.capacity, args.calib_rounds, measure, args.cpu_us)
    return x, cap


def setup(args, mode, k6_for):
    """(scratch directory, Drivers) of a peer experiment, the peer built; None (said why) when
    the peer or k6 (needed for `k6_for`; None: not needed) cannot run here."""
    why = peers.unusable()
    if not why:
        workdir = tempfile.mkdtemp(prefix="echod-%s-" % mode)
        drivers, why_k6 = peer_drivers(args, workdir)
        why = k6_for and why_k6 and "k6 is needed for %s: %s" % (k6_for, why_k6)
    if why:
        log("bench/model %s: %s" % (mode, why))
        return None
    peers.build(args.peers_build, log=log)
    return workdir, drivers


def stalls_main(args):
    ready = setup(args, "stalls", "the study's fixed-rate grid")
    if not ready:
        return 2
    workdir, drivers = ready
    cpu_us, cap = calibrate_peer(args, workdir, drivers)
    rate = round(LOW_LOAD * cap)
    kinds = stall_kinds(args.stall_fractions, args.stall_us)
    log("peer direct: -Dpeer.cpu_us=%d, %.0f calls/s on one CPU; the grid at %d/s" % (
        cpu_us, cap, rate))
    runs = {}
    for rnd in range(args.rounds):
        for name, frac, us in kinds:
            for arm in ("direct", "default"):
                log("round %d: %s, %s" % (rnd + 1, arm, name))
                path = os.path.join(workdir, "pauses-%s-%d.log" % (arm, len(runs)))
                with PeerArm(args, arm, workdir, drivers, cpu_us=cpu_us, stall_fraction=frac,
                             stall_us=us, pause_log=path) as p:
                    t0 = time.time()
                    s = drivers.fixed_k6(p.target, arm, rate, args.seconds)
                    t1 = time.time()
                    warm = p.warmup
                events = jvm.read_pauses(path, t0, t1)
                runs.setdefault((arm, name), []).append({
                    "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "ok": s["ok"],
                    "failed": s["failed"], "cpu_us_per_call": s["cpu_us_per_call"],
                    "warmup_s": warm["seconds"], "warmup_settled": warm["settled"],
                    "pauses": jvm.pause_summary(events, t1 - t0)})
    res = {k: median_tree(v) for k, v in runs.items()}
    out = {"rounds": args.rounds, "cpu_us": cpu_us, "capacity": cap, "rate": rate,
           "seconds": args.seconds, "kinds": kinds,
           "results": {"%s|%s" % k: v for k, v in res.items()},
           "runs": {"%s|%s" % k: v for k, v in runs.items()}, "machine": machine_note()}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    render_stalls(out)
    failed = sum(r["failed"] for v in runs.values() for r in v)
    return 1 if failed else 0


def render_stalls(out):
    res = {tuple(k.split("|", 1)): v for k, v in out["results"].items()}
    kinds = [tuple(k) for k in out["kinds"]]
    print("## grpc-java's stalls at the study's low load (bench/model stalls, %d round%s, "
          "medians)\n" % (out["rounds"], "" if out["rounds"] == 1 else "s"))
    print("The peer's `direct` and `default` on one CPU with flat work -Dpeer.cpu_us=%d (its "
          "direct arm: %.0f calls/s), k6 constant-arrival-rate at %d calls/s (10%%) for %d s; "
          "kinds: none (the JVM's own pauses alone), and each fraction x length of the peer's "
          "per-call blocking stalls (-Dpeer.stall_fraction, -Dpeer.stall_us: a sleep on the "
          "thread that runs the handler, the event loop under direct). Pauses: the JVM's "
          "safepoints (-Xlog:safepoint*, 'Total': every Java thread stopped; collections are "
          "safepoint operations) and its GC pause lines, in the k6 window.\n" % (
              out["cpu_us"], out["capacity"], out["rate"], out["seconds"]))
    print("\n".join(stalls_table(res, kinds)))
    print("\n" + "\n".join(pauses_table(res, kinds)))
    runs = [r for v in out["runs"].values() for r in v]
    print("\nJIT warm-up: %d of %d runs settled (compiler threads under the threshold), %s s "
          "at most; machine: %s" % (sum(1 for r in runs if r["warmup_settled"]), len(runs),
                                    fmt.num(max(r["warmup_s"] for r in runs), 0), out["machine"]))
