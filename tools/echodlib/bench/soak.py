"""bench/soak's arm: a long run at a fixed rate in h2load slices, echod's gauges sampled through
it, each slice's failures classified from echod's own counters, and the growth rule that judges
the samples. The rules and their tolerances are argued in bench/soak's docstring."""

import os
import sys
import tempfile
import time
import urllib.error

from .. import daemon, fmt, h2load, paths, prom, stats
from ..sampler import Sampler

MiB = 1 << 20
SLICE_CLIENTS = 4
SLICE_STREAMS = 16  # per connection

# name, (absolute, relative) tolerance: the reasons are in the docstring
WATCHED = [
    ("rss", (1 * MiB, 0.05)),
    ("fds", (2, 0.0)),  # beyond one per open connection
    ("threads", (1, 0.0)),
    ("cpu_us", (0.5, 0.5)),  # echod's CPU per call: drift
    ("p99_us", (2000, 1.0)),  # drift
]
DRIFT = ("cpu_us", "p99_us")
# echod counters of which any increase is a failure (summed over their labels)
FAILURE_COUNTERS = {
    "echod_connections_closed_total": "connections the server closed",
    "echod_streams_refused_total": "streams refused",
    "echod_calls_shed_total": "calls shed",
    "echod_header_lists_too_large_total": "header lists too large",
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- echod and its /metrics

def metrics(port):
    """/metrics -> {name: value summed over labels}, plus handled_<CODE> (grpc_server_handled_total
    per grpc_code) and closed_frames_<answer>."""
    samples = prom.samples(prom.scrape(port, timeout=5))
    out = {}
    for name, _labels, v in samples:
        out[name] = out.get(name, 0.0) + v
    for code, v in prom.metric_by(samples, "grpc_server_handled_total", "grpc_code").items():
        out["handled_" + code] = v
    for answer, v in prom.metric_by(samples, "echod_closed_stream_frames_total", "answer").items():
        out["closed_frames_" + answer] = v
    return out


def delta(after, before, key):
    return after.get(key, 0.0) - before.get(key, 0.0)


class Echod(daemon.Echod):
    def __init__(self, args, config):
        prefix = ["taskset", "-c", args.server_cpu] if args.server_cpu else []
        super().__init__(config=config, sets=["log.level=warn"] + args.set, prefix=prefix,
                         binary=args.echod, start_timeout=20.0)
        try:
            self.start()
        except daemon.EchodError as e:
            raise RuntimeError(str(e))
        self.cmd = self.command()

    def metrics(self):
        return metrics(self.admin_port)

    def settle(self, timeout=10.0):
        """Waits until echod has no connection and no call left: (metrics then, True), or
        (metrics, False) after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if m.get("echod_calls_in_flight", 0) == 0 and m.get("echod_connections", 0) == 0:
                return m, True
            if time.monotonic() > deadline:
                return m, False
            time.sleep(0.05)


# ---------------------------------------------------------------- one slice

def probe_knee(load, probe_calls):
    """The most calls/s h2load -c 4 -m 16 gets (after a tenth of the calls as a warm-up)."""
    for n in (max(1000, probe_calls // 10), probe_calls):
        res = load.run(300, n=n, clients=4, streams=16)
        if res["error"]:
            raise RuntimeError("saturation probe: " + res["error"])
    return res["rps"]


# echod's gauges, sampled every --sample seconds through the slices (echodlib.sampler)
GAUGES = (("rss", "process_resident_memory_bytes"), ("fds", "process_open_fds"), ("threads", "echod_threads"),
          ("in_flight", "echod_calls_in_flight"), ("connections", "echod_connections"))


def gauges(d):
    """One sample of GAUGES; fds less one per open connection, so that a sample between slices
    counts as one within."""
    m = d.metrics()
    s = {k: m.get(name) for k, name in GAUGES}
    if s["fds"] is not None and s["connections"] is not None:
        s["fds"] -= s["connections"]
    return s


def classify(after, before, res):
    """(calls failed, calls abandoned, reasons) for one slice from echod's counters and h2load's
    summary; any reason fails the slice (a counter's event need not be one call's failure)."""
    reasons = []
    bound = max(0, (res.get("started") or 0) - (res.get("done") or 0))
    codes = {k[len("handled_"):]: delta(after, before, k) for k in after
             if k.startswith("handled_") and k != "handled_OK" and delta(after, before, k) > 0}
    cancelled = int(codes.pop("CANCELLED", 0))
    abandoned = min(cancelled, bound)
    if cancelled > bound:
        reasons.append("%d CANCELLED, %d more than the %d calls h2load abandoned" % (cancelled, cancelled - bound,
                                                                                     bound))
    failed = cancelled - abandoned
    for code, n in sorted(codes.items()):
        failed += int(n)
        reasons.append("%d %s" % (n, code))
    for name, what in FAILURE_COUNTERS.items():
        n = int(delta(after, before, name))
        if n:
            reasons.append("%d %s (%s)" % (n, what, name))
    for answer in ("stream_closed", "protocol_error"):
        n = int(delta(after, before, "closed_frames_" + answer))
        if n:
            reasons.append("%d frames on closed streams answered %s" % (n, answer))
    for k in ("failed", "errored", "timeout"):
        n = res.get(k) or 0
        if n:
            reasons.append("h2load: %d %s" % (n, k))
    return failed, abandoned, reasons


# ---------------------------------------------------------------- verdict

def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def show(key, v):
    """A watched quantity with its unit; plain counts as the kernel gives them."""
    if v is None:
        return "-"
    if key == "rss":
        return fmt.num(v / MiB, 1, 1) + " MiB"
    if key == "cpu_us":
        return fmt.num(v, 2, 2) + " us"
    if key.endswith("_us"):
        return fmt.num(v / 1000, 2, 2) + " ms"
    return "%g" % v


def grows(points, key, tol):
    """(verdict, description) for one quantity: points are (t, value) after warm-up."""
    pts = [(t, v) for t, v in points if v is not None]
    if len(pts) < 3:
        return False, "too few samples (%d)" % len(pts)
    third = max(1, len(pts) // 3)
    first = stats.median(v for _, v in pts[:third])
    last = stats.median(v for _, v in pts[-third:])
    allowed = tol[0] + tol[1] * abs(first)
    climb = slope([t for t, _ in pts], [v for _, v in pts]) * (pts[-1][0] - pts[0][0])
    bad = last - first > allowed and climb > allowed
    return bad, "first third %s, last third %s, slope over the run %s (allowed %s)" % (
        show(key, first), show(key, last), ("+" if climb >= 0 else "") + show(key, climb), show(key, allowed))


# ---------------------------------------------------------------- one arm

def soak_arm(args, name, config, body):
    """Runs the soak on one config; prints its table and verdict; returns its record."""
    rec = {"arm": name, "config": config, "slices": [], "samples": [], "verdicts": {}, "problems": [], "notes": []}
    problems, notes = rec["problems"], rec["notes"]
    print("\n== %s (%s)" % (name, os.path.relpath(config, paths.ROOT) if config else "built-in defaults"), flush=True)
    try:
        d = Echod(args, config)
    except RuntimeError as e:
        problems.append("could not start echod: %s" % e)
        return rec
    rec["echod"] = d.cmd
    slices = max(3, int(round(args.duration / args.interval)))
    work = tempfile.mkdtemp(prefix="echod-soak-")
    sampler = None
    try:
        load = h2load.Client(d.grpc_port, body, client_cpu=args.client_cpu)
        rate = args.rate
        if rate is None:
            log("%s: probing the knee: h2load -n %d -c 4 -m 16 (after a warm-up)" % (name, args.probe_calls))
            rec["knee"] = probe_knee(load, args.probe_calls)
            rate = max(4.0, rec["knee"] * args.knee_fraction)
        per_client = max(1, int(round(rate / SLICE_CLIENTS)))
        rec["rate"] = per_client * SLICE_CLIENTS
        print("%.0f calls/s (%s) for %d slices of %g s; echod %s" % (
            rec["rate"], "%.0f%% of a knee of %.0f calls/s" % (args.knee_fraction * 100, rec["knee"])
            if "knee" in rec else "--rate", slices, args.interval, " ".join(d.cmd)), flush=True)
        header = "%6s %8s %9s %5s %6s %8s %8s %9s %9s %5s %8s %10s" % (
            "t(s)", "calls/s", "ok", "fail", "aband", "p50(ms)", "p99(ms)", "cpu(us)", "rss(MiB)", "fds", "threads",
            "in_flight")
        print("(rss, fds, threads, in_flight: the most of the slice's samples; fds less one per open connection)")
        print(header)
        print("-" * len(header), flush=True)
        t0 = time.time()  # the sampler's clock
        before, _ = d.settle()
        sampler = Sampler({"echod": lambda: gauges(d)}, every=min(args.sample, args.interval / 2)).start()
        for i in range(slices):
            logf = os.path.join(work, "slice-%d.log" % i)
            ts = time.time() - t0
            res = load.run(args.interval + 60, clients=SLICE_CLIENTS, streams=SLICE_STREAMS,
                           rps=per_client, duration=float(args.interval), log_file=logf)
            after, settled = d.settle()
            te = time.time() - t0
            lat = h2load.read_latency_log(logf) if os.path.exists(logf) else None
            if os.path.exists(logf):
                os.unlink(logf)
            failed, abandoned, reasons = classify(after, before, res)
            seen = sampler.window(t0 + ts, t0 + te, "rss")
            top = {k: max((s[k] for s in seen if s.get(k) is not None), default=None)
                   for k in ("rss", "fds", "threads", "in_flight")}
            calls = sum(delta(after, before, k) for k in after if k.startswith("handled_"))
            cpu = delta(after, before, "process_cpu_seconds_total")
            row = {"t": round(te, 1), "rps": res.get("rps"), "ok": int(delta(after, before, "handled_OK")),
                   "cpu_us": cpu * 1e6 / calls if calls else None,
                   "failed": failed, "abandoned": abandoned, "reasons": reasons,
                   "p50_us": lat["p50_us"] if lat else None, "p99_us": lat["p99_us"] if lat else None,
                   "error": res["error"], **top}
            before = after
            rec["slices"].append(row)
            print("%6.0f %8.0f %9d %5d %6d %8s %8s %9s %9s %5s %8s %10s" % (
                row["t"], row["rps"] or 0, row["ok"], failed, abandoned,
                "%.2f" % (row["p50_us"] / 1000) if row["p50_us"] else "-",
                "%.2f" % (row["p99_us"] / 1000) if row["p99_us"] else "-",
                "%.2f" % row["cpu_us"] if row["cpu_us"] else "-",
                "%.1f" % (row["rss"] / MiB) if row["rss"] else "-", show("fds", row["fds"]),
                show("threads", row["threads"]), show("in_flight", row["in_flight"])), flush=True)
            if res["error"]:
                problems.append("slice %d: %s" % (i, res["error"]))
            row["offered"] = (row["rps"] or 0) >= 0.9 * rec["rate"]
            if not res["error"] and i > 0 and not row["offered"]:
                notes.append("slice %d reached %.0f of %d calls/s (client-bound, or echod is past its knee)"
                             % (i, row["rps"] or 0, rec["rate"]))
            if reasons:
                problems.append("slice %d: %d calls failed: %s" % (i, failed, "; ".join(reasons)))
            if not settled:
                problems.append("after slice %d: %g calls in flight, %g connections 10 s later (expected 0)" % (
                    i, after.get("echod_calls_in_flight", 0), after.get("echod_connections", 0)))
            if d.proc.poll() is not None:
                problems.append("echod died (%s):\n%s" % (daemon.describe_exit(d.proc.returncode), d.log_tail()))
                break
    except (RuntimeError, OSError, urllib.error.URLError) as e:
        problems.append("could not run: %s" % e)
    finally:
        if sampler is not None:
            sampler.stop()
        rc, _ = d.signal_and_wait(timeout=30)
        if rc != 0:
            problems.append("echod exited %s on SIGTERM:\n%s" % (rc, d.log_tail()))
        d.close_log()
        for f in os.listdir(work):
            os.unlink(os.path.join(work, f))
        os.rmdir(work)
    if sampler is not None:
        rec["samples"] = [dict(s, t=round(s["t"] - t0, 1)) for s in sampler.samples if "rss" in s]
        holes = len(sampler.samples) - len(rec["samples"])
        if holes:
            notes.append("%d of %d scrapes failed (holes in the series)" % (holes, len(sampler.samples)))

    abandoned = sum(r["abandoned"] for r in rec["slices"])
    if abandoned:
        notes.append("%d calls abandoned by h2load at slice ends (counted CANCELLED by echod, and no more than "
                     "h2load started without finishing): the client's doing, not failures" % abandoned)
    # warm-up: the first slice's samples and row are not judged
    warm = rec["slices"][0]["t"] if rec["slices"] else 0
    print()
    judged = rec["slices"][1:]
    for key, tol in WATCHED:
        if key in ("p99_us", "cpu_us"):
            pts = [(r["t"], r[key]) for r in judged]
        else:
            pts = [(s["t"], s[key]) for s in rec["samples"] if s["t"] > warm]
        short = [i + 1 for i, r in enumerate(judged) if not r.get("offered")]
        if key in DRIFT and (short or args.no_drift):
            text = "not judged: " + ("--no-drift" if args.no_drift else "slice%s %s fell below 90%% of the offered "
                                     "rate (a busy machine, or past the knee)" % ("s" if len(short) > 1 else "",
                                                                                    ", ".join(map(str, short))))
            rec["verdicts"][key] = {"grows": False, "judged": False, "detail": text}
            print("%-10s %s  %s" % (key, "-    ", text))
            continue
        bad, text = grows(pts, key, tol)
        rec["verdicts"][key] = {"grows": bad, "judged": True, "detail": text}
        print("%-10s %s  %s" % (key, "GROWS" if bad else "ok   ", text))
        if bad:
            problems.append("%s grows: %s" % (key, text))
    for title, items in (("Notes", notes), ("Problems", problems)):
        if items:
            print("\n%s:" % title)
            for n in items:
                print("  - " + n)
    print("\n%s: %s" % (name, "FAILED" if problems else "ok"), flush=True)
    return rec
