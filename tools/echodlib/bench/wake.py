"""bench/model wake: what a wake-up costs grpc-java's event loop, by how long the loop slept.

grpc-java's `direct` (JDK 21, no work per call) warmed as `bench/model peer` warms it, then at each
of --wake-rates calls/s (k6 constant-arrival-rate, after 5 s unmeasured at the same rate) a window
under `perf sched record`: every run of the event-loop threads from a wake-up to their next sleep
(`perf sched timehist --state`: the slices of a run that was preempted are summed, so a run is the
CPU one wake-up bought), with the sleep before it (its first slice's wait time). At these rates a
call's request finds the loop asleep since the previous call: the run after that long sleep does
the call's work, so its CPU less the call's cost on a loop that never sleeps (`--hot-us`: direct
at saturation, from `bench/model peer`) is what the wake-up cost. The runs after 0.1-0.3 ms sleeps
(a call's short second wake) give the price of a wake-up after almost no sleep. The fit is the model's
(work.model, docs/work-model.md): w(s) = short + (full - short) x (s / S)^e, S the longest sleep
measured (the slowest rate's gap), full and e by least squares over the long-sleep runs of every
window (at 2,000 calls/s a run still lasts a fifth of the gap: it rarely finds a second call).

Then echod's own `direct` (no model, no work) under the same CPU model, the same rates and rounds,
measured the same way: a wake-up costs any process on this machine (the kernel's wake path, the
caches and TLB a sleep lost), and echod's loop pays that itself, on top of what the model charges.
Its hot call is its loop's CPU a call in a closed loop (h2load 64 x 1). The model's price is the
difference, window by window (same rate, same round): what grpc-java's wake-up costs beyond
echod's own, fitted as above ("fit"; the gross curves beside it). --no-own leaves echod out and
fits grpc-java's gross curve, as before 2026-12-05."""

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from .. import daemon, fmt, jvm, paths, procstat
from ..study import server
from . import peer_load, shapes
from .model import log

# perf sched timehist --state: time, [cpu], comm[tid/pid], wait, sch delay, run time (ms), the state
# the slice ended in (R: preempted, still runnable; S, D: asleep)
_SLICE = re.compile(r"^\s*[\d.]+\s+\[\d+\]\s+\S+\[(\d+)/\d+\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")
SHORT_MS = (0.1, 0.3)  # the sleeps of a call's second wake-up (its client's next frame)
# the loop's CPU a call at saturation, direct, net: bench/results/model/peer-virtual.md and
# peer-virtual-quota.md (the presets' sources)
HOT_US = {"pinned": 21.5, "quota": 25.5}


def unusable():
    """Why perf cannot record the scheduler here, or None."""
    if not shutil.which("perf"):
        return "perf is not installed (Debian: linux-perf)"
    if os.geteuid() != 0:
        return "perf sched record needs root (every CPU's scheduler events)"
    return None


def loop_runs(pid, classify, record):
    """record() inside `perf sched record`: its result, and [(sleep ms, CPU µs)] of each run of the
    server's event-loop threads (classify(name): jvm.thread_group, shapes.echod_group) from a
    wake-up to their next sleep."""
    loops = [tid for tid, (name, _, _, _) in procstat.threads(pid).items()
             if classify(name) == "event loop"]
    fd, data = tempfile.mkstemp(prefix="echod-wake-", suffix=".data")
    os.close(fd)
    rec = subprocess.Popen(["perf", "sched", "record", "-q", "-o", data],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # perf's own start
        out = record()
    finally:
        rec.send_signal(2)
        rec.wait()
    try:
        text = subprocess.run(["perf", "sched", "timehist", "--state", "-i", data, "-t",
                               ",".join(map(str, loops))], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(data)
    return out, runs_of(text, loops)


def runs_of(text, loops):
    """[(sleep ms, CPU µs)] of each run of the threads `loops` in `perf sched timehist --state`
    output: a slice that ended preempted (R) goes on with the thread's next one."""
    runs, open_runs = [], {}  # tid -> [sleep ms, µs so far] of a run that was preempted
    for line in text.splitlines():
        m = _SLICE.match(line)
        if not m or int(m.group(1)) not in loops:
            continue
        tid, wait, run_us, state = int(m.group(1)), float(m.group(2)), float(m.group(4)) * 1000.0, m.group(5)
        run = open_runs.pop(tid, None) or [wait, 0.0]
        run[1] += run_us
        if state.startswith("R"):
            open_runs[tid] = run
        else:
            runs.append(tuple(run))
    return runs


def window_figures(rate, rnd, w, runs, hot_us):
    """One rate's window: the loop's whole figures, its long-sleep runs' wake cost, its short
    sleeps' runs."""
    calls = w["calls"] or 1
    lo = 0.5 * 1000.0 / rate  # a long sleep: over half the gap between calls
    longs = [(s, r) for s, r in runs if s >= lo]
    shorts = [r for s, r in runs if SHORT_MS[0] <= s < SHORT_MS[1]]
    loop = w["per"]["groups"].get("event loop", {})
    return {"rate": rate, "round": rnd, "calls": w["calls"], "compiler_s": w["compiler_s"],
            "loop_us": loop.get("cpu_us"), "loop_parks": loop.get("vol"),
            "long_per_call": len(longs) / calls,
            "long_sleep_ms": statistics.median(s for s, _ in longs) if longs else None,
            "long_run_us": statistics.median(r for _, r in longs) if longs else None,
            "wake_us": statistics.median(r for _, r in longs) - hot_us if longs else None,
            "short_run_us": statistics.median(shorts) if shorts else None, "short_per_call": len(shorts) / calls,
            "runs_per_call": len(runs) / calls, "runs_us_per_call": sum(r for _, r in runs) / calls}


def fit(windows):
    """(short, full, S ms, e, rms) of w(s) = short + (full - short) (s / S)^e over the windows'
    long-sleep wakes, short from their short runs."""
    pts = [(x["long_sleep_ms"], x["wake_us"]) for x in windows if x["wake_us"] is not None]
    shorts = [x["short_run_us"] for x in windows if x["short_run_us"] is not None]
    if len(pts) < 2 or not shorts:
        return None
    short, S = statistics.median(shorts), max(s for s, _ in pts)
    best = None
    for e100 in range(5, 101):
        e = e100 / 100.0
        f = [min(1.0, s / S) ** e for s, _ in pts]
        y = [w - short for _, w in pts]
        k = sum(a * b for a, b in zip(f, y)) / sum(a * a for a in f)
        err = sum((b - k * a) ** 2 for a, b in zip(f, y))
        if best is None or err < best[0]:
            best = (err, e, k + short)
    err, e, full = best
    return {"short_us": short, "full_us": full, "full_sleep_ms": S, "exponent": e,
            "rms_us": math.sqrt(err / len(pts)), "points": len(pts)}


def net_windows(gross, own):
    """grpc-java's windows less echod's own of the same rate and round: the wake and the short run
    each less echod's, at grpc-java's sleeps (None where either side has none)."""
    mine = {(x["rate"], x["round"]): x for x in own}
    out = []
    for x in gross:
        o = mine.get((x["rate"], x["round"]), {})
        less = lambda k: x[k] - o[k] if x.get(k) is not None and o.get(k) is not None else None
        out.append({"rate": x["rate"], "round": x["round"], "long_sleep_ms": x["long_sleep_ms"],
                    "wake_us": less("wake_us"), "short_run_us": less("short_run_us")})
    return out


def price(f, sleep_ms):
    return f["short_us"] + (f["full_us"] - f["short_us"]) * min(1.0, sleep_ms / f["full_sleep_ms"]) ** f["exponent"]


def wake_main(args):
    why = unusable()
    if why:
        log("bench/model wake: %s" % why)
        return 2
    ready = peer_load.setup(args, "wake", "the paced calls (constant-arrival-rate)")
    if not ready:
        return 2
    workdir, drivers = ready
    windows = []
    with peer_load.PeerArm(args, "direct", workdir, drivers, jdk=21) as p:
        for rnd in range(1, args.rounds + 1):
            for rate in args.wake_rates:
                log("round %d: %d calls/s" % (rnd, rate))
                drivers.fixed_k6(p.target, "warm", rate, 5)
                w, runs = loop_runs(p.peer.pid, jvm.thread_group, lambda: p.low(rate, args.seconds))
                windows.append(window_figures(rate, rnd, w, runs, args.hot_us))
    out = {"cpu_model": args.cpu.text, "rates": args.wake_rates, "rounds": args.rounds, "seconds": args.seconds,
           "hot_us": args.hot_us, "warmup": p.warmup, "windows": windows, "fit_grpc_java": fit(windows),
           "machine": peer_load.machine_note()}
    if args.no_own:
        out["fit"] = out["fit_grpc_java"]
    else:
        out.update(own_windows(args, workdir, drivers))
        out["fit_own"] = fit(out["own_windows"])
        out["fit"] = fit(net_windows(windows, out["own_windows"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    render(out)
    return 0


def own_windows(args, workdir, drivers):
    """echod's own direct loop (no model, no work) under args.cpu: its hot call (a closed loop,
    h2load 64 x 1) and the windows of wake_main's rates and rounds, measured as grpc-java's."""
    d = daemon.Echod(config=os.path.join(paths.ROOT, "config", "arms", "direct.yaml"), binary=args.echod,
                     prefix=args.cpu.server_prefix, sets=["log.level=warn"],
                     log_path=os.path.join(workdir, "echod-direct.log")).start()
    target = server.echod_target(d)

    def window(load):
        return peer_load.measure(d.pid, shapes.echod_group, lambda: (load(), {}))

    try:
        drivers.closed_loop(target, 5, 64, 1)
        hot = window(lambda: drivers.closed_loop(target, args.seconds, 64, 1)["succeeded"])
        hot_us = hot["per"]["groups"]["event loop"]["cpu_us"]
        log("echod direct: its loop's hot call %.1f µs" % hot_us)
        windows = []
        for rnd in range(1, args.rounds + 1):
            for rate in args.wake_rates:
                log("echod, round %d: %d calls/s" % (rnd, rate))
                drivers.fixed_k6(target, "warm", rate, 5)
                w, runs = loop_runs(d.pid, shapes.echod_group,
                                    lambda: window(lambda: drivers.fixed_k6(target, "echod", rate, args.seconds)["ok"]))
                windows.append(window_figures(rate, rnd, w, runs, hot_us))
    finally:
        rc = d.stop()
    if rc:
        raise RuntimeError("echod direct: %s" % rc)
    return {"own_hot_us": hot_us, "own_windows": windows}


def render(out):
    gross = out.get("fit_grpc_java", out["fit"])
    print("## grpc-java direct's loop: a wake-up's cost by its sleep (%s)\n" % out["cpu_model"])
    print("Each rate: k6 constant-arrival-rate for %d s under perf sched; a run is the loop's CPU from a "
          "wake-up to its next sleep; the call's hot loop cost %.1f µs (direct at saturation) taken off "
          "the run after its long sleep.\n" % (out["seconds"], out["hot_us"]))
    render_windows(out["windows"], gross, "compiler s")
    render_fit("grpc-java's wake-up", gross, model="own_windows" not in out)
    if "own_windows" not in out:
        return
    print("\n## echod's own direct loop, measured the same way (no model, no work)\n")
    print("Its hot call: %.1f µs (its loop's CPU a call, h2load 64 x 1).\n" % out["own_hot_us"])
    render_windows(out["own_windows"], out["fit_own"], None)
    render_fit("echod's own wake-up", out["fit_own"])
    print("\n## The model's price: grpc-java's wake-up less echod's own\n")
    print("Window by window (same rate and round): the wake and the short run each less echod's.\n")
    print("| calls/s | round | grpc-java's sleep, ms | wake µs beyond echod's | short run µs beyond echod's |")
    print("|---:|---:|---:|---:|---:|")
    for x in net_windows(out["windows"], out["own_windows"]):
        print("| %d | %d | %s | %s | %s |" % (x["rate"], x["round"], fmt.num(x["long_sleep_ms"], 1),
                                            fmt.num(x["wake_us"], 0), fmt.num(x["short_run_us"], 0)))
    render_fit("grpc-java's wake-up beyond echod's", out["fit"], model=True)


def render_windows(windows, f, last):
    print("| calls/s | round | loop µs/call, parks | runs a call, their µs | long sleeps a call | their median "
          "sleep, ms | run µs | wake µs | fit µs | runs after 0.1-0.3 ms: a call, µs |%s" % (
              " %s |" % last if last else ""))
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---|%s" % ("---:|" if last else ""))
    for x in windows:
        print("| %d | %d | %s, %s | %s, %s | %s | %s | %s | %s | %s | %s, %s |%s" % (
            x["rate"], x["round"], fmt.num(x["loop_us"], 0), fmt.num(x["loop_parks"], 2),
            fmt.num(x["runs_per_call"], 2), fmt.num(x["runs_us_per_call"], 0), fmt.num(x["long_per_call"], 2),
            fmt.num(x["long_sleep_ms"], 1), fmt.num(x["long_run_us"], 0), fmt.num(x["wake_us"], 0),
            fmt.num(price(f, x["long_sleep_ms"]), 0) if f and x["long_sleep_ms"] is not None else "-",
            fmt.num(x["short_per_call"], 2), fmt.num(x["short_run_us"], 0),
            " %s |" % fmt.num(x["compiler_s"], 2) if last else ""))


def render_fit(what, f, model=False):
    if not f:
        print("\n%s: no fit (fewer than two windows with long sleeps)" % what)
        return
    print("\n%s, fit over %d windows (rms %.0f µs): w(s) = %.0f + (%.0f - %.0f) x (s / %.0f ms)^%.2f" % (
        what, f["points"], f["rms_us"], f["short_us"], f["full_us"], f["short_us"], f["full_sleep_ms"],
        f["exponent"]))
    print("\n| sleep, ms | %s |" % " | ".join("%g" % s for s in (0.05, 0.2, 1, 5, 20, f["full_sleep_ms"])))
    print("|---|%s" % ("---:|" * 6))
    print("| w, µs | %s |" % " | ".join("%.0f" % price(f, s) for s in (0.05, 0.2, 1, 5, 20, f["full_sleep_ms"])))
    if model:
        print("\nwork.model: wakeup_cpu_us: %d, wakeup_short_cpu_us: %d, wakeup_full_sleep_us: %d, "
              "wakeup_sleep_exponent: %.2f" % (round(f["full_us"]), round(f["short_us"]),
                                               round(f["full_sleep_ms"] * 1000, -3), f["exponent"]))
