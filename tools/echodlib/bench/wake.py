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
window (at 2,000 calls/s a run still lasts a fifth of the gap: it rarely finds a second call)."""

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from .. import fmt, jvm, procstat
from . import peer_load
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


def loop_runs(pid, record):
    """record() inside `perf sched record`: its result, and [(sleep ms, CPU µs)] of each run of the
    JVM's event-loop threads from a wake-up to their next sleep."""
    loops = [tid for tid, (name, _, _, _) in procstat.threads(pid).items()
             if jvm.thread_group(name) == "event loop"]
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
                w, runs = loop_runs(p.peer.pid, lambda: p.low(rate, args.seconds))
                windows.append(window_figures(rate, rnd, w, runs, args.hot_us))
    out = {"cpu_model": args.cpu.text, "rates": args.wake_rates, "rounds": args.rounds, "seconds": args.seconds,
           "hot_us": args.hot_us, "warmup": p.warmup, "windows": windows, "fit": fit(windows),
           "machine": peer_load.machine_note()}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    render(out)
    return 0


def render(out):
    print("## grpc-java direct's loop: a wake-up's cost by its sleep (%s)\n" % out["cpu_model"])
    print("Each rate: k6 constant-arrival-rate for %d s under perf sched; a run is the loop's CPU from a "
          "wake-up to its next sleep; the call's hot loop cost %.1f µs (direct at saturation) taken off "
          "the run after its long sleep.\n" % (out["seconds"], out["hot_us"]))
    print("| calls/s | round | loop µs/call, parks | runs a call, their µs | long sleeps a call | their median "
          "sleep, ms | run µs | wake µs | fit µs | runs after 0.1-0.3 ms: a call, µs | compiler s |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---|---:|")
    f = fit(out["windows"])
    for x in out["windows"]:
        print("| %d | %d | %s, %s | %s, %s | %s | %s | %s | %s | %s | %s, %s | %s |" % (
            x["rate"], x["round"], fmt.num(x["loop_us"], 0), fmt.num(x["loop_parks"], 2),
            fmt.num(x["runs_per_call"], 2), fmt.num(x["runs_us_per_call"], 0), fmt.num(x["long_per_call"], 2),
            fmt.num(x["long_sleep_ms"], 1), fmt.num(x["long_run_us"], 0), fmt.num(x["wake_us"], 0),
            fmt.num(price(f, x["long_sleep_ms"]), 0) if f and x["long_sleep_ms"] is not None else "-",
            fmt.num(x["short_per_call"], 2), fmt.num(x["short_run_us"], 0), fmt.num(x["compiler_s"], 2)))
    if not f:
        print("\nno fit: fewer than two windows with long sleeps")
        return
    print("\nfit over %d windows (rms %.0f µs): w(s) = %.0f + (%.0f - %.0f) x (s / %.0f ms)^%.2f" % (
        f["points"], f["rms_us"], f["short_us"], f["full_us"], f["short_us"], f["full_sleep_ms"], f["exponent"]))
    print("\n| sleep, ms | %s |" % " | ".join("%g" % s for s in (0.05, 0.2, 1, 5, 20, f["full_sleep_ms"])))
    print("|---|%s" % ("---:|" * 6))
    print("| w, µs | %s |" % " | ".join("%.0f" % price(f, s) for s in (0.05, 0.2, 1, 5, 20, f["full_sleep_ms"])))
    print("\nwork.model: wakeup_cpu_us: %d, wakeup_short_cpu_us: %d, wakeup_full_sleep_us: %d, "
          "wakeup_sleep_exponent: %.2f" % (round(f["full_us"]), round(f["short_us"]),
                                           round(f["full_sleep_ms"] * 1000, -3), f["exponent"]))
