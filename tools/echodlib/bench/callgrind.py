"""bench/callgrind-check's measurement and verdict: instructions per unary call of the `direct`
arm under callgrind, (Ir(N2) - Ir(N1)) / (N2 - N1) over two daemon lifetimes, against
bench/callgrind-baseline.json. How and why: bench/callgrind-check's docstring."""

import datetime
import glob
import json
import os
import platform
import shlex
import subprocess

from .. import daemon, h2load, paths, stats

BASELINE = os.path.join(paths.ROOT, "bench", "callgrind-baseline.json")
KEY = "direct_unary_instructions_per_call"
# The figures: name -> extra --set. KEY is the default config of the direct arm (what the
# arm really costs). Its echod-timing trailer carries per-call times; when that header is
# HPACK-indexed, nghttp2's dynamic table churns with values that depend on how fast the
# machine was, and the count moves by several percent with the load (measured: 26.2k to
# 29.4k for one binary). The second figure switches the trailer off, and the flow-control
# PINGs too: whether a PING's ACK arrives in the read of the next call or in a read of its own
# is the client's timing (with them on, runs spread by 1-5%; off, 0.11%), so the check always
# has a stable guard. A figure whose recorded runs spread by more than DETERMINISTIC is
# reported but not gated.
FIGURES = [
    (KEY, []),
    (KEY + "_no_timing_trailer", ["telemetry.timing_trailer=false",
                                  "transport.flow_control_pings=false"]),
]
DETERMINISTIC = 0.01


def log(msg):
    print(msg, flush=True)


class Grind(daemon.Echod):
    """echod (config/arms/direct.yaml) under valgrind --tool=callgrind, writing to out. Ready
    once the gRPC port is in LISTEN state (/proc/net/tcp, no probe connection): a probe of
    /readyz would add the admin thread's instructions, a number of times that depends on how
    slowly valgrind starts it."""

    def __init__(self, echod, out, log_path, start_timeout, sets=(), grpc_port=None, admin_port=None):
        super().__init__(config=os.path.join(paths.ROOT, "config", "arms", "direct.yaml"),
                         sets=["log.level=warn"] + list(sets), binary=echod, log_path=log_path,
                         start_timeout=start_timeout,
                         prefix=["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                 "--dump-instr=no", "--compress-strings=no"] if out else [])
        self.grpc_port = grpc_port or self.grpc_port
        self.admin_port = admin_port or self.admin_port

    def ready(self):
        return daemon.listening(self.grpc_port)


def unary_calls(port, n, body, timeout):
    """h2load -n N -c 1 -m 1: every call must succeed."""
    res = h2load.run(h2load.command(port, body, n=n, clients=1, streams=1), timeout,
                     keep_output=True)
    if res["returncode"] != 0 or (res["succeeded"], res["failed"], res["errored"]) != (n, 0, 0):
        raise RuntimeError("h2load did not get %d succeeded, 0 failed, 0 errored (exit %s):\n%s" % (
            n, res["returncode"], res["output"][-2000:]))


def measure_once(echod, n, warmup, body, workdir, timeout, sets=()):
    """Total Ir of one daemon lifetime serving warmup + n unary calls."""
    out = os.path.join(workdir, "callgrind.out.%d" % n)
    errf = os.path.join(workdir, "valgrind.%d.log" % n)
    for f in glob.glob(out + "*") + glob.glob(errf):
        os.unlink(f)
    d = Grind(echod, out, errf, 60 * timeout, sets)
    try:
        try:
            d.start()
        except daemon.EchodError as e:
            raise RuntimeError("echod under valgrind: %s" % e)
        if warmup:
            unary_calls(d.grpc_port, warmup, body, 120 * timeout)
        unary_calls(d.grpc_port, n, body, 300 * timeout)
        err = d.stop(60 * timeout)
        if err:
            raise RuntimeError("echod under valgrind: %s:\n%s" % (err, d.log_tail()))
    finally:
        d.kill()
    files = glob.glob(out + "*")
    if not files:
        raise RuntimeError("no callgrind output %s*:\n%s" % (out, d.log_tail()))
    total = 0
    for path in files:   # one file unless threads were separated; sum to be safe
        with open(path) as f:
            for line in f:
                if line.startswith("totals:") or line.startswith("summary:"):
                    total += int(line.split()[1])
                    break
    return total


def measure(args, echod, body, workdir, sets):
    """args.runs figures of instructions per call, each from two lifetimes (n1 and n2 calls)."""
    figures = []
    for i in range(args.runs):
        ir = {}
        for n in (args.n1, args.n2):
            ir[n] = measure_once(echod, n, args.warmup, body, workdir, args.timeout_multiplier, sets)
        per = (ir[args.n2] - ir[args.n1]) / (args.n2 - args.n1)
        figures.append(per)
        log("  run %d: Ir(%d)=%d Ir(%d)=%d -> %.1f instructions per unary call"
            % (i + 1, args.n1, ir[args.n1], args.n2, ir[args.n2], per))
    return figures


def spread(vals):
    return stats.spread(vals) or 0.0


def describe(name, vals):
    return "%s: %.0f instructions per unary call (median of %d: %s; spread %.2f%%)" % (
        name, stats.median(vals), len(vals), ", ".join("%.0f" % x for x in vals),
        100 * spread(vals))


def git_describe():
    try:
        r = subprocess.run(["git", "-C", paths.ROOT, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        head = r.stdout.strip()
        r = subprocess.run(["git", "-C", paths.ROOT, "status", "--porcelain", "--untracked-files=no",
                            "daemon", "proto", "meson.build"], capture_output=True, text=True, timeout=10)
        return head + ("+dirty" if r.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def tool_version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip() \
            .splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


def how(args):
    """The recipe, as the baseline records it."""
    return ("for N in %d %d: valgrind --tool=callgrind echod --config "
            "config/arms/direct.yaml --set log.level=warn [--set ...]; h2load -c 1 -m 1 -n %d, "
            "then -n N, UnaryEcho EchoRequest{message:'hello'}; SIGTERM. "
            "Figure = (Ir(%d)-Ir(%d))/%d, median of %d"
            % (args.n1, args.n2, args.warmup, args.n2, args.n1, args.n2 - args.n1, args.runs))


def record(args, results, bdesc):
    """Writes the figures as the new baseline."""
    rec = {}
    for name, sets in FIGURES:
        vals = results[name]
        rec[name] = round(stats.median(vals), 1)
        rec[name + "_runs"] = [round(x, 1) for x in vals]
        rec[name + "_sets"] = sets
        rec[name + "_gated"] = spread(vals) <= DETERMINISTIC
    rec.update({
        "recorded": "%s, git %s, %s" % (
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            git_describe(), bdesc),
        "command": "bench/callgrind-check --record  # " + how(args),
        "n1": args.n1, "n2": args.n2, "warmup": args.warmup, "runs": args.runs,
        "tolerance": args.tolerance,
        "valgrind": tool_version(["valgrind", "--version"]),
        "compiler": tool_version(["cc", "--version"]),
        "machine": "%s, kernel %s" % (platform.machine(), platform.release()),
    })
    with open(args.baseline, "w") as f:
        json.dump(rec, f, indent=2)
        f.write("\n")
    log("recorded in %s:" % os.path.relpath(args.baseline))
    for name, _ in FIGURES:
        log("  %s = %.1f%s" % (name, rec[name], "" if rec[name + "_gated"] else
                               " (spread over %.0f%%: reported, not gated)"
                               % (100 * DETERMINISTIC)))


def verdict(args, base, results, echod):
    """Each figure against the baseline: 0 within the tolerance, 1 grown beyond it, None when
    no figure of the baseline could be compared."""
    failed = []
    gated_any = False
    for name, _ in FIGURES:
        if name not in base:
            log("%s: not in the baseline (re-record it)" % name)
            continue
        b = float(base[name])
        now = stats.median(results[name])
        growth = now / b - 1.0
        gated = base.get(name + "_gated", True)
        # the default-config figure is gated when no deterministic figure exists at all
        if not gated and not any(base.get(n + "_gated", True) for n, _ in FIGURES if n in base):
            gated = True
        verdict = "limit +%.0f%%" % (100 * args.tolerance) if gated else \
            "not gated: its recorded runs were not deterministic"
        log("%s: baseline %.0f, now %.0f: %+.1f%% (%s)" % (name, b, now, 100 * growth, verdict))
        if gated:
            gated_any = True
            if growth > args.tolerance:
                failed.append((name, growth))
            elif growth < -args.tolerance:
                log("  note: %.1f%% fewer instructions than the baseline; re-record it "
                    "(bench/callgrind-check --record) so the check keeps guarding the gain"
                    % (-100 * growth))
        if spread(results[name]) > DETERMINISTIC:
            log("  note: this figure's runs spread by %.1f%%: not deterministic. With the "
                "echod-timing trailer on, the usual cause is nghttp2 indexing its per-call "
                "values in the HPACK dynamic table (see bench/README.md)." %
                (100 * spread(results[name])))
    if failed:
        for name, growth in failed:
            log("callgrind-check: FAIL: %s grew by %.1f%%, more than %.0f%%."
                % (name, 100 * growth, 100 * args.tolerance))
        profile = Grind(echod, None, None, 0, grpc_port=50051, admin_port=8080).command()
        log("Profile: valgrind --tool=callgrind %s; callgrind_annotate callgrind.out.PID. If the "
            "growth is intended, re-record from a release build: bench/callgrind-check --record"
            % shlex.join(profile))
        return 1
    return 0 if gated_any else None
