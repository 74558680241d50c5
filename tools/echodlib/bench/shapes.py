"""bench/model shapes: which thread does a call's work, and which one parks, per client shape.

The same closed loop (h2load, `--shapes` CONNSxSTREAMS: connections with that many calls in flight
each) against grpc-java's arms (--peer-arms, on the JDK 21 when it is installed, flat work
-Dpeer.cpu_us in the handler) and echod's (--arms) three ways: the same flat work
(work.defaults.cpu_us); the study's cost model (--preset) scaled so that direct's synthetic call is
--cpu-us; and grpc-java's machinery as measured here (--here-preset, charged as it is) with the
same flat work on top, which is what the witness runs. Per call: the server's CPU (capacity = 1e6 / it), and per thread group (event loop,
pool: grpc-java's carriers or pool threads, echod's workers) its CPU and its voluntary switches
(the times it parked), and echod's hand-offs by receiver and what they found
(echod_handoffs_total). The ratios: each server's arms' capacity over its direct's, per shape.

Why (docs/work-model.md, "Where the work runs"): a hand-off that wakes a parked thread costs what
the thread that parks makes it cost, and which thread parks is set by which one does the call's
work: grpc-java's witness burns its flat work in the handler (on the executor), the cost model
charges most of a call to the loop (C, the call's unit), as grpc-java's transport spends it."""

import json
import os
import statistics
import sys
import tempfile
import time

from .. import daemon, fmt, jvm, paths, peers, procstat
from ..study import server
from ..study.cost import Cost
from . import model, peer_load, wake

DEFAULT_SHAPES = "800x1,32x8"
# grpc-java's machinery as measured in each CPU model (bench/results/model/peer-virtual*.md)
HERE_PRESETS = {"pinned": os.path.join(paths.ROOT, "config", "models", "grpc-java-here.yaml"),
                "quota": os.path.join(paths.ROOT, "config", "models", "grpc-java-here-quota.yaml")}
WARM_S = 5  # an unmeasured run of each shape first: a JVM compiles a new shape's paths
QUIET_MAX_S = 30  # at most this long for the server to work off the unmeasured run
GROUPS = ("event loop", "pool")
# echod's threads by name (daemon/dispatch/exec.c: echod-<executor mode>-N; dispatcher.c: echod-pmN)
_ECHOD_OTHER = ("echod-bg", "echod-admin")


def echod_group(name):
    """The group of an echod thread, named as jvm.thread_group's."""
    if name.startswith("echod-io"):
        return "event loop"
    if name.startswith("echod-") and not name.startswith(_ECHOD_OTHER):
        return "pool"
    return "other"


def parse_shapes(text):
    """"800x1,32x8" -> [(800, 1), (32, 8)]; ValueError naming a bad one."""
    out = []
    for item in (s for s in text.split(",") if s):
        c, sep, m = item.partition("x")
        if not sep or not c.isdigit() or not m.isdigit() or int(c) < 1 or int(m) < 1:
            raise ValueError("--shapes: %r is not CONNSxSTREAMS (e.g. 800x1)" % item)
        out.append((int(c), int(m)))
    return out


def load_key(load):
    """A load's name in tables and JSON: a closed shape "800x1", an open rate "k6 319/s"."""
    return "%dx%d" % load if isinstance(load, tuple) else "k6 %d/s" % load


def groups_of(tw, calls):
    """(whole CPU µs a call net of a JVM's compiler threads, compiler share, {group: per call})."""
    comp = tw.groups.get("compiler", {}).get("cpu_s", 0.0)
    per = tw.per(calls)
    return ((tw.cpu_s - comp) / calls * 1e6, comp / tw.cpu_s if tw.cpu_s else None,
            {g: per["groups"].get(g, {"cpu_us": 0.0, "vol": 0.0, "invol": 0.0}) for g in GROUPS})


def handoffs_of(w, calls):
    return {"%s %s" % (rc, f): w.delta("echod_handoffs_total", receiver=rc, found=f) / calls
            for rc in ("loop", "worker") for f in ("parked", "running")}


# --loop-runs: the sleeps (ms) that split the loop's runs: a monitor's convoy (under 0.02 ms), a
# burst of hand-offs, a call's second wake (0.1-0.3 ms), a carrier's work, the gap between calls
SLEEP_BINS_MS = ((0, 0.02), (0.02, 0.1), (0.1, 0.5), (0.5, 2.0), (2.0, None))


def sleep_bin(lo, hi):
    return "%g-%g ms" % (lo, hi) if hi else "%g ms+" % lo


def loop_runs_of(runs, calls):
    """{sleep bin: runs a call, their CPU µs a call, the median run's µs} of wake.loop_runs."""
    out = {}
    for lo, hi in SLEEP_BINS_MS:
        b = sorted(r for s, r in runs if s >= lo and (hi is None or s < hi))
        out[sleep_bin(lo, hi)] = {"per_call": len(b) / calls, "us_per_call": sum(b) / calls,
                                  "median_us": b[len(b) // 2] if b else None}
    return out


def measure_open(args, drivers, target, classify, rate, admin=None):
    """One open loop at `rate` calls/s (k6 constant-arrival-rate, the study's fixed-rate grid
    driver): where the CPU of a loaded but unsaturated server goes, which the closed loops, always
    saturated, cannot say. Below saturation the threads sleep between calls, and the CPU a call
    takes there decides whether 0.9x of capacity already saturates the CPU, and so the ramp's p99
    near its knee (docs/work-model.md, "Near the knee")."""
    server.quiet(target.calls_clock or (lambda: procstat.cpu_clock(target.pid)),
                 time.monotonic() + QUIET_MAX_S)
    tw = procstat.ThreadWindow(target.pid, classify)
    w = model.Window(target.pid, admin) if admin else None

    def run():
        return drivers.fixed_k6(target, "open", rate, args.seconds)

    s, runs = wake.loop_runs(target.pid, classify, run) if args.loop_runs else (run(), None)
    if admin:
        w.close()
    tw.close()
    calls = s["ok"]
    if not calls or s["failed"]:
        raise RuntimeError("open loop at %d/s: %d answered, %d failed" % (rate, calls, s["failed"]))
    cpu_us, share, groups = groups_of(tw, calls)
    out = {"calls": calls, "calls_per_s": calls / args.seconds, "cpu_us": cpu_us,
           "compiler_share": share, "groups": groups, "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}
    if admin:
        out["handoffs"] = handoffs_of(w, calls)
    if runs is not None:
        out["loop_runs"] = loop_runs_of(runs, calls)
    return out


def measure(args, load, pid, shape, classify, calls_clock, admin=None):
    """One shape's closed loop after an unmeasured one: per call figures. The window opens once
    the server has worked off the unmeasured run (calls_clock, the CPU of its threads that run
    calls, quiet): h2load -D abandons its calls in flight, and a server that runs them anyway
    (directExecutor() works off its whole read pass) would charge up to a shape's worth of them,
    800 calls of 2.5 ms, to the measured window's calls."""
    conns, streams = shape
    model.Load.run(load.unary, clients=conns, streams=streams, duration=WARM_S)
    server.quiet(calls_clock, time.monotonic() + QUIET_MAX_S)
    tw = procstat.ThreadWindow(pid, classify)
    w = model.Window(pid, admin) if admin else None
    r = model.Load.run(load.unary, clients=conns, streams=streams, duration=args.seconds)
    if admin:
        w.close()
    tw.close()
    calls = r["succeeded"]
    # net of a JVM's compiler threads (shown apart), as peer_load.net_us
    cpu_us, share, groups = groups_of(tw, calls)
    out = {"calls": calls, "calls_per_s": r["rps"], "cpu_us": cpu_us, "compiler_share": share,
           "groups": groups}
    if admin:
        out["handoffs"] = handoffs_of(w, calls)
    return out


def run_peer(args, arm, workdir, drivers, shapes):
    jdk = None if peers.jdk21_missing() else 21
    with peer_load.PeerArm(args, arm, workdir, drivers, jdk=jdk, cpu_us=args.cpu_us) as p:
        load = model.Load(args, p.peer.port, workdir)
        out = {s: measure(args, load, p.peer.pid, s, jvm.thread_group,
                          lambda: jvm.calls_cpu_s(p.peer.pid)) for s in shapes}
        target = server.peer_target(p.peer)
        out.update({r: measure_open(args, drivers, target, jvm.thread_group, r) for r in args.rates})
        return out


WORKS = ("flat", "model", "model+flat")


def works(args):
    """{work: (Cost, x)}: the flat work alone; the study's preset scaled to the same direct call;
    the measured machinery (--here-preset) with the same flat work on top, as the witness."""
    model = Cost(args.preset)
    return {"flat": (Cost(None), args.cpu_us),
            "model": (model, args.cpu_us / model.slope()),
            "model+flat": (Cost(args.here_preset, scale="flat"), args.cpu_us)}


def run_echod(args, arm, work, workdir, shapes, drivers):
    cost, x = works(args)[work]
    d = daemon.Echod(config=os.path.join(paths.ROOT, "config", "arms", arm + ".yaml"),
                     binary=args.echod, prefix=args.cpu.server_prefix,
                     sets=["log.level=warn"] + cost.sets(x),
                     log_path=os.path.join(workdir, "echod-%s-%s.log" % (arm, work))).start()
    try:
        load = model.Load(args, d.port, workdir)
        out = {s: measure(args, load, d.pid, s, echod_group, lambda: procstat.cpu_clock(d.pid),
                          d.admin_port) for s in shapes}
        target = server.echod_target(d)
        out.update({r: measure_open(args, drivers, target, echod_group, r, d.admin_port)
                    for r in args.rates})
        return out
    finally:
        rc = d.stop()
        if rc:
            raise RuntimeError("echod %s %s: %s" % (arm, work, rc))


def shapes_main(args):
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as e:
        model.log("bench/model %s" % e)
        return 2
    if not shapes and not args.rates:
        model.log("bench/model shapes: no load (--shapes and --rates both empty)")
        return 2
    why = args.loop_runs and (wake.unusable() or (
        not args.rates and "the loop's runs are measured in the open loops: give --rates"))
    if why:
        model.log("bench/model shapes --loop-runs: %s" % why)
        return 2
    need_k6 = "--rates" if args.rates else None
    ready = peer_load.setup(args, "shapes", need_k6) if args.peer_arms else None
    workdir = ready[0] if ready else tempfile.mkdtemp(prefix="echod-shapes-")
    drivers = ready[1] if ready else None
    if args.rates and drivers is None:
        drivers, why = peer_load.peer_drivers(args, workdir)
        if why:
            model.log("bench/model shapes: k6 is needed for --rates: %s" % why)
            return 2
    runs = {}
    if ready:
        for arm in args.peer_arms.split(","):
            model.log("grpc-java %s" % arm)
            runs["grpc-java", arm, "flat"] = run_peer(args, arm, workdir, ready[1], shapes)
    elif args.peer_arms:
        model.log("bench/model shapes: no grpc-java arm (above: why)")
    for arm in args.arms.split(","):
        for work in args.works:
            model.log("echod %s %s" % (arm, work))
            runs["echod", arm, work] = run_echod(args, arm, work, workdir, shapes, drivers)
    render(args, shapes + args.rates, runs)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"argv": sys.argv, "cpu_model": args.cpu.name, "cpu_us": args.cpu_us,
                       "runs": {"%s %s %s" % k: {load_key(s): r for s, r in by.items()}
                                for k, by in runs.items()}}, fh, indent=1)
    return 0


def render(args, shapes, runs):
    print("## Who works and who parks, per client shape (bench/model shapes)\n")
    print("Each server on one CPU (%s), the load on CPU %s; closed loops (h2load) %d s after an "
          "unmeasured %d s; flat work %d µs a call in the handler (grpc-java: -Dpeer.cpu_us; echod: "
          "work.defaults.cpu_us), or echod's cost model (model: %s scaled so that direct's call is "
          "the same %d µs; model+flat: %s as measured, and the same flat work on top). Per call: "
          "CPU µs (net of a JVM's compiler threads, whose share is shown), and per thread group "
          "its CPU µs and its voluntary switches (parks); echod's hand-offs that found the loop "
          "or a worker parked.\n" % (
              args.cpu.name, args.client_cpu, args.seconds, WARM_S, args.cpu_us,
              os.path.relpath(args.preset, paths.ROOT), args.cpu_us,
              os.path.relpath(args.here_preset, paths.ROOT)))
    if args.rates:
        print("Open loops (k6 %s/s): k6 constant-arrival-rate for %d s, as the study's fixed-rate "
              "grid drives it; p50 / p99 beside them.\n" % (
                  "/".join(str(r) for r in args.rates), args.seconds))
    print("| load | server | arm | work | calls/s | CPU µs/call | loop µs, parks | pool µs, "
          "parks | echod hand-offs parked: loop, worker | compiler share | p50 / p99 ms |")
    print("|---|---|---|---|---:|---:|---|---|---|---:|---|")
    for s in shapes:
        for (srv, arm, work), by in runs.items():
            r = by[s]
            lo, po = r["groups"]["event loop"], r["groups"]["pool"]
            h = r.get("handoffs")
            print("| %s | %s | %s | %s | %.0f | %.0f | %.0f, %.2f | %.0f, %.2f | %s | %s | %s |" % (
                load_key(s), srv, arm, work, r["calls_per_s"], r["cpu_us"], lo["cpu_us"],
                lo["vol"], po["cpu_us"], po["vol"],
                "%.2f, %.2f" % (h["loop parked"], h["worker parked"]) if h else "-",
                "%.1f%%" % (100 * r["compiler_share"]) if srv == "grpc-java" else "-",
                "%s / %s" % (fmt.ms(r["p50_ms"]), fmt.ms(r["p99_ms"])) if "p99_ms" in r else "-"))
    render_loop_gaps({k: {s: by[s] for s in shapes if s in by} for k, by in runs.items()})
    render_loop_runs(shapes, runs)
    if not any(arm == "direct" for _, arm, _ in runs):
        return  # no ratio without its `direct`
    print("\nCapacity (1e6 / CPU µs a call) over the same server's and work's `direct` (an open "
          "loop: the same rate's CPU a call, inverted):\n")
    print("| shape | " + " | ".join("%s %s %s" % k for k in runs if k[1] != "direct") + " |")
    print("|---|" + "---:|" * sum(1 for k in runs if k[1] != "direct"))
    for s in shapes:
        cells = []
        for (srv, arm, work), by in runs.items():
            if arm == "direct":
                continue
            base = runs.get((srv, "direct", work))
            cells.append("%.2f" % (base[s]["cpu_us"] / by[s]["cpu_us"]) if base else "-")
        print("| %s | %s |" % (load_key(s), " | ".join(cells)))


def loop_gap(peer, ours):
    """(grpc-java's loop µs a call less echod's, and that per hand-off of echod's that found its
    loop parked, or None) for one load's rows of the same arm: what the pinned convoy costs
    beyond what echod's model charges (handoff_wake_loop_cpu_us, docs/work-model.md)."""
    gap = peer["groups"]["event loop"]["cpu_us"] - ours["groups"]["event loop"]["cpu_us"]
    parked = ours["handoffs"]["loop parked"]
    return gap, gap / parked if parked else None


def loop_gaps(runs, arm="virtual"):
    """[(load, echod's work, gap a call, gap a hand-off)] where grpc-java's flat `arm` and
    echod's `arm` ran the same load; `runs` keyed (server, arm, work) or, as in --json, by
    "server arm work"."""
    def key(k):
        return tuple(k.split(" ", 2)) if isinstance(k, str) else k
    runs = {key(k): v for k, v in runs.items()}
    peer = runs.get(("grpc-java", arm, "flat"), {})
    return [(s, work) + loop_gap(peer[s], by[s]) for (srv, a, work), by in runs.items()
            if srv == "echod" and a == arm for s in by if s in peer and by[s].get("handoffs")]


def convoy_unit(docs):
    """The median over every load of --json documents `docs` of grpc-java's `virtual` loop less
    echod's per hand-off that woke echod's loop: config/models/grpc-java-here.yaml's
    handoff_wake_loop_cpu_us, measured on echod without it."""
    per = [g for d in docs for _, _, _, g in loop_gaps(d["runs"]) if g is not None]
    return statistics.median(per) if per else None


def render_loop_gaps(runs):
    rows = loop_gaps(runs)
    if not rows:
        return
    print("\nThe event loops, `virtual`: grpc-java's less echod's (the selector's convoy beyond what "
          "echod's model charges; per hand-off of echod's that woke its loop):\n")
    print("| load | echod's work | µs a call | µs a loop-waking hand-off |")
    print("|---|---|---:|---:|")
    for s, work, gap, per in rows:
        print("| %s | %s | %.0f | %s |" % (load_key(s), work, gap, "-" if per is None else "%.1f" % per))


def render_loop_runs(loads, runs):
    rows = [(s, k, by[s]["loop_runs"]) for s in loads for k, by in runs.items()
            if "loop_runs" in by.get(s, {})]
    if not rows:
        return
    bins = [sleep_bin(lo, hi) for lo, hi in SLEEP_BINS_MS]
    print("\nThe event loop's runs (a wake-up to its next sleep, `perf sched timehist`) by the sleep "
          "before them, per call: runs x the median run's µs = their µs. The CPU figures above were "
          "taken under perf too.\n")
    print("| load | server | arm | work | " + " | ".join("after %s" % b for b in bins) + " |")
    print("|---|---|---|---|" + "---|" * len(bins))
    for s, (srv, arm, work), lr in rows:
        print("| %s | %s | %s | %s | %s |" % (load_key(s), srv, arm, work, " | ".join(
            "%.2f x %s = %.0f" % (lr[b]["per_call"], "-" if lr[b]["median_us"] is None
                                  else "%.0f" % lr[b]["median_us"], lr[b]["us_per_call"])
            for b in bins)))
