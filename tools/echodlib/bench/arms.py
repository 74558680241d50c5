"""bench/arms' measurements and tables: each dispatch arm (config/arms/NAME.yaml) in a fresh echod
pinned to the server CPU, h2load on the other, server CPU from the kernel and per-call counters
from /metrics around each run; medians over the rounds, ratios against `direct`."""

import os
import shlex
import sys
import time
import urllib.error

from .. import daemon, fmt, h2load, paths, procstat, prom, stats
from ..stats import get


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Daemon(daemon.Echod):
    """echod pinned to the server CPU (echodlib.daemon.Echod, with bench/arms' error style)."""

    def __init__(self, echod, arm_file, server_cpu, workdir, sets=()):
        super().__init__(config=arm_file, sets=["log.level=warn"] + list(sets), binary=echod,
                         prefix=["taskset", "-c", str(server_cpu)], start_timeout=15.0,
                         log_path=os.path.join(workdir, "echod-%s.stderr" %
                                               os.path.basename(arm_file).rsplit(".", 1)[0]))

    def stderr_tail(self, n=3000):
        return self.log_tail(n)

    def start(self):
        """Returns None when echod is ready, else an error string."""
        try:
            super().start()
            return None
        except daemon.EchodError as e:
            return str(e)

    def scrape(self):
        return prom.samples(super().scrape())

    def stop(self, timeout=15.0):
        """SIGTERM; returns (exit code, error string or None)."""
        if self.proc is None:
            return None, "not started"
        rc, why = self.signal_and_wait(timeout=timeout)
        self.close_log()
        if why:
            return None, why
        if rc != 0:
            return rc, "%s after SIGTERM (expected exit status 0)" % daemon.describe_exit(rc)
        return rc, None



def counters(samples):
    return {
        "ok": prom.metric_sum(samples, "grpc_server_handled_total", grpc_code="OK"),
        "handled": prom.metric_sum(samples, "grpc_server_handled_total"),
        "codes": prom.metric_by(samples, "grpc_server_handled_total", "grpc_code"),
        "steps": prom.metric_by(samples, "echod_call_steps_total", "step"),
        "dispatches": prom.metric_by(samples, "echod_executor_dispatches_total", "executor"),
        "inline": prom.metric_sum(samples, "echod_inline_runs_total"),
        "loop_tasks": prom.metric_by(samples, "echod_loop_tasks_total", "kind"),
        "flushes": prom.metric_by(samples, "echod_flushes_total", "trigger"),
        "frames_sum": prom.metric_sum(samples, "echod_flush_frames_sum"),
        "frames_count": prom.metric_sum(samples, "echod_flush_frames_count"),
        "qwait_sum": prom.metric_sum(samples, "echod_executor_queue_wait_seconds_sum"),
        "qwait_count": prom.metric_sum(samples, "echod_executor_queue_wait_seconds_count"),
        "threads": prom.metric_by(samples, "echod_executor_threads", "executor"),
        "csw": prom.metric_by(samples, "echod_context_switches_total", "kind"),
    }


def _delta(a, b):
    if isinstance(a, dict):
        return {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}
    return b - a


class RunFailed(Exception):
    """The daemon stopped answering during a run; .partial holds what h2load saw."""

    def __init__(self, msg, partial):
        super().__init__(msg)
        self.partial = partial


def measured(srv, load, timeout, **opts):
    """One h2load run (load.run's opts) with echod's CPU and counters around it: per call."""
    w, m0 = procstat.CpuWindow(srv.pid), counters(srv.scrape())
    h = load.run(timeout, **opts)
    # A fixed-rate run ends on a timer; let the last responses' `closed` steps land.
    time.sleep(0.2)
    try:
        w.close()
        m1 = counters(srv.scrape())
    except (OSError, urllib.error.URLError) as e:
        rc = srv.proc.poll()
        why = ("echod died (%s)" % daemon.describe_exit(rc)) if rc is not None else \
            "/metrics failed after the run: %s" % e
        raise RunFailed(why, {"h2load": h, "calls": None, "grpc_not_ok": None})
    d = {k: _delta(m0[k], m1[k]) for k in m0 if k != "threads"}
    calls = d["ok"]
    c0, c1 = w.before, w.after
    cpu_stat = c1["stat"] - c0["stat"]
    cpu_clk = (c1["clock"] - c0["clock"]) if c0["clock"] is not None and c1["clock"] is not None \
        else None

    def per(x):
        return x / calls if calls > 0 else None

    flushes = sum(d["flushes"].values())
    return {
        "h2load": h,
        "calls": calls,
        "grpc_not_ok": d["handled"] - d["ok"],
        "grpc_not_ok_by_code": {k: v for k, v in sorted(d["codes"].items()) if v and k != "OK"},
        "cpu_s_proc_stat": cpu_stat,
        "cpu_s_clock": cpu_clk,
        "cpu_us_per_call": per(1e6 * (cpu_clk if cpu_clk is not None else cpu_stat)),
        "cpu_us_per_call_proc_stat": per(1e6 * cpu_stat),
        "csw_per_call": per(sum(d["csw"].values())),
        "csw_voluntary_per_call": per(d["csw"].get("voluntary", 0.0)),
        "steps_per_call": per(sum(d["steps"].values())),
        "steps_by_label": {k: v for k, v in sorted(d["steps"].items()) if v},
        "dispatches_per_call": per(sum(d["dispatches"].values())),
        "dispatches_by_executor": {k: v for k, v in sorted(d["dispatches"].items()) if v},
        "inline_runs_per_call": per(d["inline"]),
        "loop_tasks_per_call": per(sum(d["loop_tasks"].values())),
        "loop_tasks_by_kind": {k: v for k, v in sorted(d["loop_tasks"].items()) if v},
        "flushes_per_call": per(flushes),
        "flushes_by_trigger": {k: v for k, v in sorted(d["flushes"].items()) if v},
        "frames_per_flush": (d["frames_sum"] / d["frames_count"]) if d["frames_count"] else None,
        "queue_wait_us_mean": (1e6 * d["qwait_sum"] / d["qwait_count"])
        if d["qwait_count"] else None,
        "executor_threads_after": m1["threads"],
    }


def run_arm(args, echod, arm, arm_file, body, workdir, rep):
    """One round of one arm in a fresh echod: a warm-up, a saturation run (-n CALLS -c 4 -m 16)
    and a fixed-rate run (-c 4 -m 1, --rate in all, --duration, its latency log)."""
    res = {"arm": arm, "rep": rep, "errors": []}
    d = Daemon(echod, arm_file, args.server_cpu, workdir, args.set)
    res["echod_cmd"] = d.shown_command()
    err = d.start()
    if err:
        res["errors"].append("start: " + err)
        d.stop()
        res["error"] = res["errors"][0]
        return res
    # --header: on every request of every run (e.g. echod-sleep-us for a blocking handler)
    load = h2load.Client(d.grpc_port, body, client_cpu=args.client_cpu, headers=args.header)
    phase = "warm-up"
    try:
        if args.warmup > 0:
            res["warmup"] = load.run(60 + args.warmup / 200, n=args.warmup, clients=4, streams=16)
        phase = "saturation"
        res["sat"] = measured(d, load, 60 + args.calls / 500, n=args.calls, clients=4, streams=16)
        phase = "fixed rate"
        logf = os.path.join(workdir, "h2load-%s-%d.log" % (arm, rep))
        res["fixed"] = measured(d, load, 60 + 3 * args.duration, clients=4, streams=1,
                                rps=max(1, round(args.rate / 4)), duration=args.duration,
                                log_file=logf)
        res["fixed"]["latency"] = h2load.read_latency_log(logf)
        if not args.keep_logs:
            try:
                os.unlink(logf)
            except OSError:
                pass
    except RunFailed as e:  # a dead or wedged daemon must not take the other arms down
        res["sat" if phase == "saturation" else "fixed"] = e.partial
        res["errors"].append("%s run: %s" % (phase, e))
    except (OSError, urllib.error.URLError) as e:
        res["errors"].append("%s run: %s: %s" % (phase, type(e).__name__, e))
    finally:
        rc = d.proc.poll()
        if rc is not None:
            res["exit_status"] = rc
            res["errors"].append("echod was not running at the end (%s)" % daemon.describe_exit(rc))
        else:
            rc, err = d.stop()
            res["exit_status"] = rc
            if err:
                res["errors"].append("stop: " + err)
        if res["errors"]:
            tail = d.stderr_tail()
            if tail:
                res["errors"].append("echod stderr (tail):\n" + tail)
    res["error"] = "\n".join(res["errors"]) or None
    return res


def progress(r):
    """One round's line on stderr."""
    if not r.get("sat"):
        return "    ERROR " + (r.get("error") or "?")
    return "    sat %s calls/s, %s µs CPU/call; fixed p99 %s µs%s" % (
        fmt.num(get(r, "sat", "h2load", "rps"), 0), fmt.num(get(r, "sat", "cpu_us_per_call"), 2, 1),
        fmt.num(get(r, "fixed", "latency", "p99_us"), 0),
        ("; ERROR " + r["error"].splitlines()[0]) if r.get("error") else "")


def summarize(runs):
    """Median over the repeats of one arm."""
    ok = [r for r in runs if r.get("sat")]
    s = {
        "reps": len(runs),
        "errors": ["round %d: %s" % (r["rep"] + 1, r["error"]) for r in runs if r.get("error")],
        "sat_rps": stats.median([get(r, "sat", "h2load", "rps") for r in ok]),
        "cpu_sat": stats.median([get(r, "sat", "cpu_us_per_call") for r in ok]),
        "fixed_rps": stats.median([get(r, "fixed", "h2load", "rps") for r in ok]),
        "cpu_fixed": stats.median([get(r, "fixed", "cpu_us_per_call") for r in ok]),
        "p50": stats.median([get(r, "fixed", "latency", "p50_us") for r in ok]),
        "p99": stats.median([get(r, "fixed", "latency", "p99_us") for r in ok]),
        "fail_h2load": sum((get(r, "sat", "h2load", k) or 0) + (get(r, "fixed", "h2load", k) or 0)
                           for r in ok for k in ("failed",)),
        "fail_grpc": sum((get(r, "sat", "grpc_not_ok") or 0) + (get(r, "fixed", "grpc_not_ok") or 0)
                         for r in ok),
        "fail_grpc_codes": sorted({"%s (%s)" % (c, ph) for r in ok for ph in ("sat", "fixed")
                                   for c in (get(r, ph, "grpc_not_ok_by_code") or {})}),
        "h2load_errors": [e for r in ok for e in (get(r, "sat", "h2load", "error"),
                                                  get(r, "fixed", "h2load", "error")) if e],
    }
    for phase in ("sat", "fixed"):
        for k in ("csw_per_call", "steps_per_call", "dispatches_per_call", "loop_tasks_per_call",
                  "flushes_per_call", "frames_per_flush", "inline_runs_per_call"):
            s["%s_%s" % (phase, k)] = stats.median([get(r, phase, k) for r in ok])
    return s



def render(arms, summ, args):
    lines = []
    hdr = ["arm", "sat calls/s", "CPU µs/call sat", "fixed calls/s", "CPU µs/call fixed",
           "p50 µs", "p99 µs", "ctx switches/call",
           "steps/call", "dispatches/call", "loop tasks/call", "flushes/call", "frames/flush",
           "failures"]
    lines.append("| " + " | ".join(hdr) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 2) + ["---"]) + "|")
    cancelled_note = False
    for a in arms:
        s = summ[a]
        if s["sat_rps"] is None and s["errors"]:
            lines.append("| %s | %s |" % (a, " | ".join(["-"] * (len(hdr) - 2) + ["**did not run** (see below)"])))
            continue
        steps = fmt.num(s["sat_steps_per_call"], 2, 1)
        if s["fixed_steps_per_call"] is not None and s["sat_steps_per_call"] is not None and \
                abs(s["fixed_steps_per_call"] - s["sat_steps_per_call"]) > 0.01:
            steps = fmt.pair(s["sat_steps_per_call"], s["fixed_steps_per_call"])
        fails = []
        if s["fail_h2load"]:
            fails.append("%d h2load" % s["fail_h2load"])
        if s["fail_grpc"]:
            fails.append("%d non-OK: %s" % (s["fail_grpc"], ", ".join(s["fail_grpc_codes"])))
            if any(c.endswith("(fixed)") and c.startswith("CANCELLED") for c in s["fail_grpc_codes"]):
                cancelled_note = True
        if s["errors"] or s["h2load_errors"]:
            fails.append("errors (see below)")
        lines.append("| " + " | ".join([
            a, fmt.num(s["sat_rps"], 0), fmt.num(s["cpu_sat"], 2, 1), fmt.num(s["fixed_rps"], 0),
            fmt.num(s["cpu_fixed"], 2, 1),
            fmt.num(s["p50"], 0), fmt.num(s["p99"], 0),
            fmt.pair(s["sat_csw_per_call"], s["fixed_csw_per_call"]), steps,
            fmt.pair(s["sat_dispatches_per_call"], s["fixed_dispatches_per_call"]),
            fmt.pair(s["sat_loop_tasks_per_call"], s["fixed_loop_tasks_per_call"]),
            fmt.pair(s["sat_flushes_per_call"], s["fixed_flushes_per_call"], 3),
            fmt.pair(s["sat_frames_per_flush"], s["fixed_frames_per_flush"], 1, 0),
            ", ".join(fails) or "0"]) + " |")
    lines.append("")
    lines.append("Counter columns with two values are `saturation / fixed rate`; one value: the "
                 "same in both runs. Per-call values are deltas over the run divided by the OK "
                 "calls the server counted. Context switches: echod_context_switches_total "
                 "(voluntary + involuntary, every thread, exited ones included).")
    if cancelled_note:
        lines.append("CANCELLED in a fixed-rate run with no h2load failures: most likely h2load -D "
                     "stopping at its deadline and closing its connections with up to 4 calls (one "
                     "per connection) still in flight; h2load does not count those.")

    base = summ.get("direct")
    if base and base["sat_rps"]:
        lines.append("")
        lines.append("| arm | CPU/call vs direct (sat) | CPU/call vs direct (fixed) | "
                     "throughput vs direct | p99 vs direct |")
        lines.append("|---|---:|---:|---:|---:|")
        for a in arms:
            s = summ[a]
            lines.append("| %s | %s | %s | %s | %s |" % (
                a, fmt.times(s["cpu_sat"], base["cpu_sat"]), fmt.times(s["cpu_fixed"], base["cpu_fixed"]),
                fmt.times(s["sat_rps"], base["sat_rps"]), fmt.times(s["p99"], base["p99"])))
    return "\n".join(lines)


def print_report(args, arms, summ, results, build_cmds, machine, elapsed, body):
    """The tables, the problems, the commands and the machine, as Markdown on stdout."""
    print("## echod dispatch arms: %d calls saturation, %d calls/s × %d s fixed rate, "
          "%d round(s), median\n" % (args.calls, args.rate, args.duration, args.repeat))
    print(render(arms, summ, args))
    print()
    cpu_src = "process CPU clock (clock_getcpuclockid; same utime+stime as /proc/PID/stat " \
              "fields 14+15, ns resolution)" if procstat.cpu_clock(os.getpid()) is not None \
              else "/proc/PID/stat fields 14+15"
    print("Server CPU: %s, all threads, delta over the run ÷ OK calls. p50/p99: h2load "
          "--log-file of the fixed-rate run, successful requests." % cpu_src)
    print()
    problems = [(a, e) for a in arms for e in summ[a]["errors"] + summ[a]["h2load_errors"]]
    if problems:
        print("### Problems\n")
        for a, e in problems:
            print("- **%s**: " % a + e.replace("\n", "\n  "))
        print()
    print("### Commands\n")
    print("```")
    print("cd %s" % paths.ROOT)
    for c in build_cmds:
        print(shlex.join(c))
    print("# per arm (free ports picked each time):")
    ex = next((r for r in results if r.get("sat")), results[0] if results else None)
    if ex:
        print(ex["echod_cmd"])
        if ex.get("warmup"):
            print(ex["warmup"]["cmd"])
        if ex.get("sat"):
            print(ex["sat"]["h2load"]["cmd"])
        if ex.get("fixed"):
            print(ex["fixed"]["h2load"]["cmd"])
    print("# body: %s = %s (gRPC frame of EchoRequest{message: \"hello\"})" %
          (os.path.basename(body), h2load.REQUEST_FRAME.hex()))
    print("# stop: SIGTERM, expect exit status 0")
    print("```\n")
    print("Machine: nproc %d, kernel %s, %s; load average %.2f at start, %.2f at end; "
          "echod on CPU %s, h2load on CPU %s; %.0f s total." % (
              machine["nproc"], machine["kernel"], machine["cpu_model"] or "cpu ?",
              machine["loadavg"][0], machine["loadavg_end"][0], args.server_cpu,
              args.client_cpu, elapsed))
    print("Note: a noisy %d-core machine: the load generator shares the box with echod (one "
          "core each) and with whatever else runs here, so absolute numbers move by tens of "
          "percent between runs; compare arms within one run, and trust the counter columns "
          "(steps, dispatches, loop tasks) more than the timings." % machine["nproc"])


# ---------------------------------------------------------------- compression (--compression)

# A 1 KiB EchoRequest.message of words (about 3:1 under zlib, like text or JSON payloads).
_WORDS = ("grpc", "echo", "server", "dispatch", "executor", "stream", "message", "loop",
          "worker", "frame", "header", "window", "call", "status", "deadline", "metadata")
COMPRESSION_ROWS = (  # label, request grpc-encoding, transport.compression.respond
    ("identity", "identity", "request"),
    ("gzip", "gzip", "request"),
    ("gzip, identity reply", "gzip", "identity"),
    ("deflate", "deflate", "request"),
    ("deflate, identity reply", "deflate", "identity"),
)


def compression_body(enc, size=1024):
    import zlib
    text, i = [], 0
    while sum(len(w) + 1 for w in text) < size:
        text.append(_WORDS[(i * 7 + i // 16) % len(_WORDS)] + str(i % 13))
        i += 1
    msg = (" ".join(text)).encode()[:size]
    pb = b"\x0a" + bytes([0x80 | (len(msg) & 0x7F), len(msg) >> 7]) + msg
    if enc == "identity":
        return b"\x00" + len(pb).to_bytes(4, "big") + pb
    co = zlib.compressobj(6, zlib.DEFLATED, 31 if enc == "gzip" else 15)
    z = co.compress(pb) + co.flush()
    return b"\x01" + len(z).to_bytes(4, "big") + z


def run_compression(args, echod, arms, workdir):
    """Server CPU per unary call with a 1 KiB message, identity vs gzip vs deflate (and each
    compressed request answered uncompressed: what echoing the request's compressed bytes back
    could save at most), per arm; one saturation run each, rows interleaved within an arm."""
    arms_dir = os.path.join(paths.ROOT, "config", "arms")
    rows = []
    for arm in arms:
        for label, enc, respond in COMPRESSION_ROWS:
            body = os.path.join(workdir, "req-%s.bin" % enc)
            h2load.write_body(body, compression_body(enc))
            d = Daemon(echod, os.path.join(arms_dir, arm + ".yaml"), args.server_cpu, workdir,
                       ["transport.compression.respond=" + respond])
            err = d.start()
            if err:
                sys.exit("bench/arms: %s: %s" % (arm, err))
            load = h2load.Client(d.grpc_port, body, client_cpu=args.client_cpu,
                                 headers=["grpc-encoding: " + enc,
                                          "grpc-accept-encoding: identity,deflate,gzip"])
            try:
                load.run(120, n=max(args.warmup, 1), clients=4, streams=16)
                r = measured(d, load, 60 + args.calls / 500, n=args.calls, clients=4, streams=16)
                wire = os.path.getsize(body) - 5
            finally:
                d.stop()
            log("    %s %s: %s µs CPU/call, %s calls/s" % (arm, label, fmt.num(r["cpu_us_per_call"], 2, 1),
                                                        fmt.num(r["h2load"]["rps"], 0)))
            rows.append((arm, label, enc, respond, wire, r))
    print("## echod compression: UnaryEcho, 1 KiB message, %d calls (-c 4 -m 16), one run\n" % args.calls)
    print("| arm | request | respond | request bytes | server CPU µs/call | vs identity | calls/s | not OK |")
    print("|---|---|---|---|---|---|---|---|")
    base = {}
    for arm, label, enc, respond, wire, r in rows:
        cpu = r["cpu_us_per_call"]
        if enc == "identity":
            base[arm] = cpu
        ratio = cpu / base[arm] if cpu and base.get(arm) else None
        print("| %s | %s | %s | %d | %s | %s | %s | %s |" % (
            arm, enc, respond, wire, fmt.num(cpu, 2, 1), fmt.num(ratio, 2, 1), fmt.num(r["h2load"]["rps"], 0),
            int(r["grpc_not_ok"] + (r["h2load"]["failed"] or 0) + (r["h2load"]["errored"] or 0))))
    print()
    print("respond=identity rows: the request is inflated, the echo goes back uncompressed, so "
          "gzip(request) - gzip(identity) is what compressing the response costs: the most that "
          "echoing the request's compressed bytes back could save.")
    print("Server CPU: all echod threads over the run / OK calls. echod on CPU %s, h2load on CPU %s; "
          "a shared machine: compare rows within this run." % (args.server_cpu, args.client_cpu))
    print("\n```\n%s\n%s\n```" % (rows[-1][5]["h2load"]["cmd"] if rows else "",
                                   "# body: gRPC frame of EchoRequest{1 KiB of words}, compressed per row"))
    return 0
