"""bench/compare's measurements: echod's arms and the peers (grpc-java, grpc C++), one server arm
at a time in a fresh process, pinned to the server CPU; the load on the client CPU. What each
phase measures is in bench/compare's docstring; compare_report turns the rounds into tables."""

import os
import sys
import time

from .. import bidi, daemon, fmt, grpccheck, h2idle, h2load, paths, peers, procstat
from ..stats import get

SUSTAINED = 0.95   # a fixed-rate run that achieved less than this share of its rate is flagged
# ARM+batch: config/arms/ARM.yaml with dispatch.sched_policy=batch (SCHED_BATCH: same steps and
# dispatches, but a woken thread does not preempt the running one, so hand-offs cost less)
# ARM+t2: two threads (fixed, against grpc-java fixed:2); fixed-unwrapped: the unwrap proposal
ECHOD_ARMS = ["direct", "fixed", "fixed+t2", "fixed-unwrapped", "fixed+batch", "workstealing",
              "workstealing+batch", "virtual", "virtual+batch", "cached", "cached+batch"]
ARM_VARIANTS = {"batch": ["dispatch.sched_policy=batch"], "t2": ["executor.threads=2"]}
JAVA_ARMS = ["default", "direct", "fixed:1", "fixed:2"]
CPP_ARMS = ["callback", "async:1"]
SERVER_NAMES = {"echod": "echod", "java": "grpc-java", "cpp": "grpc C++"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def names(plan):
    """{(kind, arm): (server's name, arm)} as the tables show them."""
    return {(k, a): (SERVER_NAMES[k], a) for k, a in plan}


def arm_plan(args):
    """(kind, arm) in the order they are measured: echod direct first (the baseline)."""
    plan = []
    for kind, arms in (("echod", ECHOD_ARMS), ("java", JAVA_ARMS), ("cpp", CPP_ARMS)):
        for arm in arms:
            if args.only and "%s:%s" % (kind, arm) not in args.only and kind not in args.only:
                continue
            plan.append((kind, arm))
    return plan


def build_peers(args, notes, build_cmds):
    """Returns {"java": bool, "cpp": bool}: which peers can run (built when their Debian packages
    are installed; a note says why one cannot)."""
    have = {"java": False, "cpp": False}
    if not ({"java", "cpp"} & args.servers_wanted):
        return have
    if not os.path.isdir(args.peers_dir):
        notes.append("peers: %s not found; grpc-java and grpc C++ skipped" % args.peers_dir)
        return have
    for kind in ("java", "cpp"):
        if kind not in args.servers_wanted:
            continue
        missing = peers.missing(kind)
        if missing:
            notes.append("%s skipped: Debian packages missing: %s (install them with %s/install-deps.sh "
                         "or the apt-get line in its README)" % (
                             peers.KINDS[kind][0], " ".join(missing), args.peers_dir))
            continue
        try:
            peers.build(args.peers_build, kind, args.peers_dir, force=args.rebuild_peers, log=log)
        except peers.PeerError as e:
            notes.append("%s skipped: %s" % (kind, e))
            continue
        build_cmds.append(peers.build_command(kind, args.peers_build, args.peers_dir))
        have[kind] = True
    return have


def server(kind, arm, args, workdir, echod):
    """One server arm pinned to the server CPU (not started): echod (config/arms/ARM.yaml, and
    ARM+VARIANT's --set) or a peer."""
    pin = ["taskset", "-c", args.server_cpu]
    log_path = os.path.join(workdir, "%s-%s.log" % (kind, arm.replace(":", "_")))
    if kind == "echod":
        base, _, variant = arm.partition("+")
        return daemon.Echod(config=os.path.join(paths.ROOT, "config", "arms", base + ".yaml"),
                            sets=["log.level=warn"] + ARM_VARIANTS.get(variant, []), prefix=pin,
                            binary=echod, log_path=log_path, start_timeout=30.0)
    return peers.Peer(kind, arm, args.peers_build, prefix=pin, log_path=log_path,
                      peers_dir=args.peers_dir)


def start(srv):
    """None once srv serves, else why not."""
    try:
        srv.start()
        return None
    except daemon.ServerError as e:
        return str(e)


def check(args, kind, arm, workdir, echod):
    """(ok, what the grpcio check said) for one arm in a server of its own."""
    srv = server(kind, arm, args, workdir, echod)
    err = start(srv)
    if err:
        return False, err
    ok, text = grpccheck.check(srv.target)
    e = srv.stop(15.0)
    if e:
        return False, text + "; stop: " + e
    return ok, text


def measure_arm(args, kind, arm, echod, body, workdir, rnd):
    """One round of one arm: (d) idle RSS and RSS per idle connection, warm-up, (a) fixed rate,
    (b) saturation, (c) bidi, in a fresh server."""
    d = args.durations
    res = {"kind": kind, "arm": arm, "round": rnd, "errors": [], "warnings": []}
    srv = server(kind, arm, args, workdir, echod)
    res["server_cmd"] = srv.shown_command()
    err = start(srv)
    if err:
        res["errors"].append("start: " + err)
        return res
    load = h2load.Client(srv.port, body, client_cpu=args.client_cpu)
    phase = "idle"
    try:
        time.sleep(d["settle_java"] if kind == "java" else d["settle"])
        res["idle_rss_kb"] = procstat.proc_status(srv.pid).get("VmRSS")
        phase = "idle connections"
        before = procstat.proc_status(srv.pid).get("VmRSS")
        socks, cerr = h2idle.idle_connections(srv.port, args.idle_conns)
        after = procstat.proc_status(srv.pid).get("VmRSS")
        h2idle.close_all(socks)
        if cerr:
            res["errors"].append("idle connections: " + cerr)
        elif before is not None and after is not None:
            res["rss_per_conn_kb"] = (after - before) / args.idle_conns
        time.sleep(0.3)
        phase = "warm-up"
        w = d["warmup_java"] if kind == "java" else d["warmup"]
        res["warmup"] = load.run(w + 60, strict=True, clients=4, streams=16, duration=w)
        phase = "fixed rate"
        logf = os.path.join(workdir, "latency-%s-%s-%d.log" % (kind, arm.replace(":", "_"), rnd))
        per_client = max(1, round(args.rate / args.fixed_conns))
        fx = load.run(d["fixed"] + 60, server_pid=srv.pid, strict=True, clients=args.fixed_conns,
                      streams=1, rps=per_client, duration=d["fixed"], log_file=logf)
        fx["latency"] = h2load.read_latency_log(logf)
        try:
            os.unlink(logf)
        except OSError:
            pass
        calls = fx["succeeded"]
        fx["cpu_us_per_call"] = 1e6 * fx["server_cpu_s"] / calls \
            if calls and fx.get("server_cpu_s") is not None else None
        if fx.get("rps") is not None and fx["rps"] < SUSTAINED * args.rate:
            fx["not_sustained"] = True
            res["warnings"].append("fixed rate not sustained: %.0f of %d calls/s; its CPU per "
                                   "call is not comparable" % (fx["rps"], args.rate))
        res["fixed"] = fx
        with procstat.RssSampler(srv.pid) as rss:
            phase = "saturation"
            res["sat"] = saturation(args, load, srv, d["sat"])
            phase = "bidi"
            bw = d["bidi_warmup_java"] if kind == "java" else d["bidi_warmup"]
            res["bidi"] = bidi_window(args, srv, d["bidi"], bw, res["warnings"])
        res["loaded_rss_kb"] = rss.max_kb
        res["hwm_kb"] = procstat.proc_status(srv.pid).get("VmHWM")
        res["threads"] = procstat.proc_status(srv.pid).get("Threads")
        for ph in ("warmup", "fixed", "sat"):
            if res.get(ph, {}).get("error"):
                res["errors"].append("%s: %s" % (ph, res[ph]["error"]))
        if res.get("bidi") and not res["bidi"].get("ok"):
            res["errors"].append("bidi: " + "; ".join(res["bidi"].get("errors") or ["failed"]))
        for w in get(res, "bidi", "warnings") or []:
            res["warnings"].append("bidi: " + w)
    except OSError as e:
        res["errors"].append("%s: %s: %s" % (phase, type(e).__name__, e))
    finally:
        if not srv.alive():
            res["errors"].append("server was not running at the end (%s)" %
                                 daemon.describe_exit(srv.proc.returncode))
        else:
            e = srv.stop(15.0)
            if e:
                res["errors"].append("stop: " + e)
        if res["errors"]:   # a hard failure: show what the server said
            tail = srv.log_tail(1200)
            if tail:
                res["errors"].append("server output (tail):\n" + tail)
    return res


def saturation(args, load, srv, seconds):
    """(b): h2load -c 4 -m 16 closed loop: calls/s, the server's and h2load's CPU shares, each
    CPU's busy share, the server's CPU per call."""
    sat = load.run(seconds + 60, server_pid=srv.pid, strict=True, clients=4, streams=16,
                   duration=seconds)
    if sat.get("wall_s"):
        sat["server_share"] = sat["server_cpu_s"] / sat["wall_s"] \
            if sat.get("server_cpu_s") is not None else None
        sat["client_share"] = sat["client_cpu_s"] / sat["wall_s"]
    sat["busy_server_cpu"] = sat.get("cpu_busy", {}).get(int(args.server_cpu))
    sat["busy_client_cpu"] = sat.get("cpu_busy", {}).get(int(args.client_cpu))
    if sat["succeeded"] and sat.get("server_cpu_s") is not None:
        sat["cpu_us_per_call"] = 1e6 * sat["server_cpu_s"] / sat["succeeded"]
    return sat


def bidi_window(args, srv, seconds, warmup, warnings):
    """(c): the bidi generator at --bidi-rate over --bidi-streams: the server's CPU per message."""
    bd = bidi.run(srv.target, srv.pid, args.client_cpu, args.bidi_streams, args.bidi_rate,
                  seconds, warmup)
    if bd.get("window_msgs") and bd.get("server_cpu_s") is not None:
        bd["cpu_us_per_msg"] = 1e6 * bd["server_cpu_s"] / bd["window_msgs"]
        bd["msgs_per_s"] = bd["window_msgs"] / bd["window_s"]
        bd["client_share"] = bd["client_cpu_s"] / bd["window_s"]
        if bd["msgs_per_s"] < SUSTAINED * args.bidi_rate:
            bd["not_sustained"] = True
            warnings.append(
                "bidi rate not sustained: %.0f of %d messages/s (server or load "
                "generator behind); its CPU per message is not comparable" % (
                    bd["msgs_per_s"], args.bidi_rate))
    return bd


def progress(r):
    """One round's line on stderr."""
    return ("    unary %s µs/call (p99 %s µs), sat %s calls/s (server %s, h2load %s), "
            "bidi %s µs/msg, RSS idle %s kB, %s kB/conn%s" % (
                fmt.num(get(r, "fixed", "cpu_us_per_call"), 2, 1),
                fmt.num(get(r, "fixed", "latency", "p99_us"), 0), fmt.num(get(r, "sat", "rps"), 0),
                fmt.num(get(r, "sat", "server_share"), 2, 1), fmt.num(get(r, "sat", "client_share"), 2, 1),
                fmt.num(get(r, "bidi", "cpu_us_per_msg"), 2, 1), r.get("idle_rss_kb"),
                fmt.num(r.get("rss_per_conn_kb"), 1, 1),
                ("; ERROR " + r["errors"][0].splitlines()[0]) if r["errors"] else
                ("; " + r["warnings"][0]) if r["warnings"] else ""))
