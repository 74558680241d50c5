"""bench/model's two experiments: `peer`, the calibration's independent source on grpc-java (CPU
per call and per message, hand-offs counted on echod's cached arm, a JFR profile's step share,
the preset they derive), and `arms`, echod's arms flat and on the cost model beside the study's
published figures. What each measures: bench/model's docstring."""

import collections
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from .. import daemon, fmt, h2load, paths, peers, procstat, prom, stats
from ..study import server
from . import peer_load

PRESET = os.path.join(paths.ROOT, "config", "models", "grpc-java-study.yaml")
BIDI_MSGS = 1000  # EchoRequests in one stream's body

# The study's published figures (grpc-java 1.83 on 1-CPU pods; ../shared/study).
PUB_UNARY_PLATEAU = {"direct": 2140, "virtual": 2060, "direct-drain": 2137}
PUB_STREAM_PLATEAU = {"direct": 16000, "virtual": 16000 - 625}  # virtual shed 625 of 16k offered
# the kinds of echod_work_model_cpu_seconds_total a call is charged (background: per second)
CHARGED = ("call", "step", "handoff", "handoff_wake", "handoff_wake_loop", "message", "wakeup")
PUB_FIXED_CPU_US = {"direct": 145e3 / 200, "virtual": 220e3 / 200}  # 145 and 220 millicores at 200 calls/s
DEFAULT_ARMS = ["direct", "direct-drain", "virtual", "cached", "merged", "coalesced", "merged-coalesced"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Load:
    """h2load against one server: unary calls of one EchoRequest, bidi streams of BIDI_MSGS."""

    def __init__(self, args, port, workdir):
        unary = h2load.write_body(os.path.join(workdir, "unary.grpc"))
        bidi = h2load.write_body(os.path.join(workdir, "bidi.grpc"), count=BIDI_MSGS)
        self.unary = h2load.Client(port, unary, client_cpu=args.client_cpu)
        self.bidi = h2load.Client(port, bidi, client_cpu=args.client_cpu, path=h2load.BIDI_PATH)

    @staticmethod
    def run(client, timeout=300, **opts):
        res = client.run(timeout, **opts)
        if res["error"]:
            raise RuntimeError(res["error"])
        return res


class Window:
    """A server's CPU (procstat.CpuWindow) and, for echod, its /metrics over one load run."""

    def __init__(self, pid, admin_port=None):
        self.admin_port = admin_port
        self.m0 = self.scrape()
        self.cpu = procstat.CpuWindow(pid)

    def scrape(self):
        return prom.samples(prom.scrape(self.admin_port)) if self.admin_port else None

    def close(self):
        self.cpu.close()
        self.cpu_s, self.wall_s = self.cpu.cpu_s, self.cpu.wall_s
        self.m1 = self.scrape()
        return self

    def delta(self, name, **match):
        return prom.metric_sum(self.m1, name, **match) - prom.metric_sum(self.m0, name, **match)


def settle(d, timeout=30.0):
    """echod: until no call is in flight (h2load -D leaves its last calls to the server)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if prom.metric_sum(prom.samples(d.scrape()), "echod_calls_in_flight") == 0:
            return
        time.sleep(0.05)


# ---------------------------------------------------------------- peer: the independent source

# A JFR sample is classified by the innermost frame that names one of these (docs/work-model.md,
# "The step's cost"): the six steps' own machinery, whatever runs inside them that is a message's
# or the call's work being counted there instead.
PROFILE_RULES = [
    ("message", ["EchoPeer$BytesMarshaller", "EchoPeer$BytesStream", "io/grpc/internal/MessageDeframer",
                 "io/grpc/internal/MessageFramer", "io/grpc/internal/ServerCallImpl.sendMessage",
                 "io/grpc/internal/AbstractStream.writeMessage", "io/grpc/netty/NettyServerStream$Sink.writeFrame",
                 "io/grpc/netty/NettyWritableBuffer", "io/grpc/internal/CompositeReadableBuffer",
                 "io/grpc/internal/ReadableBuffers", "DefaultHttp2ConnectionEncoder$FlowControlledData",
                 "DefaultHttp2FrameWriter.writeData", "DefaultHttp2ConnectionDecoder$FrameReadListener.onDataRead",
                 "NettyServerHandler.onDataRead", "io/grpc/netty/SendGrpcFrameCommand"]),
    ("call", ["io/netty/handler/codec/http2/HpackDecoder", "io/netty/handler/codec/http2/HpackEncoder",
              "DefaultHttp2HeadersDecoder", "DefaultHttp2HeadersEncoder", "io/grpc/netty/Utils.convert",
              "io/grpc/Metadata", "io/grpc/internal/ServerCallImpl.close", "io/grpc/internal/ServerCallImpl.sendHeaders",
              "NettyServerHandler.onHeadersRead", "DefaultHttp2Connection", "io/grpc/netty/NettyServerStream",
              "io/grpc/internal/AbstractServerStream", "io/grpc/Context", "io/grpc/internal/StatsTraceContext",
              "io/grpc/netty/SendResponseHeadersCommand", "io/grpc/netty/CancelServerStreamCommand",
              "DefaultHttp2FrameWriter.writeHeaders", "ServerImpl$ServerTransportListenerImpl.streamCreated",
              "io/grpc/internal/ServerCallImpl.<init>", "ServerImpl$ServerTransportListenerImpl.createContext"]),
    ("step", ["ServerImpl$JumpToApplicationThreadServerStreamListener", "SerializeReentrantCallsDirectExecutor",
              "io/grpc/internal/SerializingExecutor", "io/grpc/internal/ContextRunnable", "$1MethodLookup",
              "$1HandleServerCall", "$1StreamCreated", "ServerCallImpl$ServerStreamListenerImpl", "io/grpc/stub/ServerCalls",
              "io/perfmark", "AbstractStream$TransportState.onStreamAllocated",
              "ServerImpl$ServerTransportListenerImpl.startCall", "ServerImpl$ServerTransportListenerImpl.startWrappedCall"]),
]


def classify_profile(jfr_path):
    """{category: samples} of the event loop's busy samples (execution samples and native samples
    in a system call; a selector waiting is idle) in a JFR recording."""
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "512", "--events",
                          "jdk.ExecutionSample,jdk.NativeMethodSample", jfr_path],
                         capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for e in json.loads(out)["recording"]["events"]:
        v = e["values"]
        thread = (v.get("sampledThread") or {}).get("javaName") or ""
        if not thread.startswith("nioEventLoopGroup-3"):  # the worker event loop (2 is the boss)
            continue
        frames = ["%s.%s" % (fr["method"]["type"]["name"], fr["method"]["name"]) for fr in v["stackTrace"]["frames"]]
        if not frames or frames[0].endswith("EPoll.wait"):
            continue
        got = "io"  # reads, writes, flushes, buffers, the event loop itself
        for name in frames:
            hit = next((c for c, pats in PROFILE_RULES if any(p in name for p in pats)), None)
            if hit:
                got = hit
                break
        counts[got] += 1
    return counts


def saturation_and_streams(args, load, srv, admin, arm, res):
    """The unary run at saturation (64 connections, one call in flight each) and the bidi run
    (20 streams) against a warmed server, into res[arm, ...]."""
    w = Window(srv.pid, admin)
    r = load.run(load.unary, clients=64, streams=1, duration=args.seconds)
    if admin:
        settle(srv)
    w.close()
    calls = r["succeeded"]
    res[arm, "unary_us"].append(w.cpu_s / calls * 1e6)
    res[arm, "unary_share"].append(w.cpu_s / w.wall_s)
    res[arm, "unary_rps"].append(r["rps"])
    if admin:
        res[arm, "dispatches"].append(w.delta("echod_executor_dispatches_total") / calls)
        res[arm, "tasks"].append(w.delta("echod_loop_tasks_total") / calls)
    w = Window(srv.pid, admin)
    r = load.run(load.bidi, clients=1, streams=20, n=20 * args.streams)
    w.close()
    msgs = r["succeeded"] * BIDI_MSGS
    res[arm, "bidi_us"].append(w.cpu_s / msgs * 1e6)
    res[arm, "bidi_share"].append(w.cpu_s / w.wall_s)
    if admin:
        res[arm, "bidi_dispatches"].append(w.delta("echod_executor_dispatches_total") / msgs)
        res[arm, "bidi_tasks"].append(w.delta("echod_loop_tasks_total") / msgs)


def measure_echod_cached(args, workdir, res, drivers, rate):
    """echod's cached arm under the peer's loads: its dispatches and loop tasks per call at
    saturation, per bidi message, and at the low load's rate (k6)."""
    pin = args.cpu.server_prefix
    srv = daemon.Echod(config=os.path.join(paths.ROOT, "config", "arms", "cached.yaml"),
                       binary=args.echod, prefix=pin, sets=["log.level=warn"],
                       log_path=os.path.join(workdir, "echod.log")).start()
    load = Load(args, srv.port, workdir)
    try:
        load.run(load.unary, clients=64, streams=1, duration=2)
        saturation_and_streams(args, load, srv, srv.admin_port, "echod-cached", res)
        if rate:
            w = Window(srv.pid, srv.admin_port)
            drivers.fixed_k6(server.echod_target(srv), "echod-cached", rate, args.seconds)
            settle(srv)
            w.close()
            calls = w.delta("grpc_server_handled_total", grpc_code="OK", grpc_method="UnaryEcho")
            res["echod-cached", "low_dispatches"].append(
                w.delta("echod_executor_dispatches_total") / calls)
            res["echod-cached", "low_tasks"].append(w.delta("echod_loop_tasks_total") / calls)
    finally:
        srv.stop()


def measure_peer_arm(args, arm, workdir, res, drivers, rate, runs):
    """One grpc-java arm, warmed until its JIT is done: idle (its background), saturation and
    streams (res, as before), then the low load at `rate` (or 10% of its own saturation
    capacity): the thread-group windows in runs[arm]."""
    with peer_load.PeerArm(args, arm, workdir, drivers) as p:
        load = Load(args, p.peer.port, workdir)
        one = {"warmup": p.warmup, "idle": p.idle(args.idle_seconds),
               "java": peers.java_version(p.peer.log_tail(1 << 20))}
        one["sat"] = p.saturation(args.seconds)
        # the warm-up drove the unary path alone: a short stream run first, so that the stream
        # window's CPU (the JVM's whole, compiler included) does not pay for compiling that path
        load.run(load.bidi, clients=1, streams=20, n=40)
        saturation_and_streams(args, load, p.peer, None, arm, res)
        rate = rate or round(peer_load.LOW_LOAD * one["sat"]["calls"] / one["sat"]["wall_s"])
        one["low"] = p.low(rate, args.seconds)
    runs[arm].append(one)
    return rate


def measure_profile(args, workdir, res):
    """The JFR profile of direct (a run of its own: sampling every millisecond costs the JVM
    CPU the other figures must not carry)."""
    jfr = os.path.join(workdir, "direct.jfr")
    opts = ("-XX:FlightRecorderOptions:stackdepth=512 -XX:StartFlightRecording=filename=%s,"
            "settings=profile,jdk.ExecutionSample#period=1ms,jdk.NativeMethodSample#period=1ms,"
            "delay=%ds,duration=%ds" % (jfr, args.java_warmup + 3, args.seconds))
    pin = args.cpu.server_prefix
    srv = peers.JavaPeer("direct", args.peers_build, prefix=pin, java_opts=opts,
                         log_path=os.path.join(workdir, "java-profile.log")).start()
    load = Load(args, srv.port, workdir)
    try:
        load.run(load.unary, clients=64, streams=1, duration=args.java_warmup)
        load.run(load.bidi, clients=1, streams=20, n=40)
        saturation_and_streams(args, load, srv, None, "profile", collections.defaultdict(list))
    finally:
        srv.stop()
    time.sleep(0.5)
    res["profile"] = classify_profile(jfr)


def peer_main(args):
    ready = peer_load.setup(args, "peer", "the low load (constant-arrival-rate)")
    if not ready:
        return 2
    workdir, drivers = ready
    res = collections.defaultdict(list)
    runs = collections.defaultdict(list)
    arms = ["direct"] + [a for a in args.peer_arms.split(",") if a and a != "direct"]
    for rnd in range(args.rounds):
        rate = args.low_rate or None  # else 10% of this round's direct capacity, for every arm
        for arm in arms:
            log("round %d: %s" % (rnd + 1, arm))
            rate = measure_peer_arm(args, arm, workdir, res, drivers, rate, runs)
        log("round %d: echod-cached" % (rnd + 1))
        measure_echod_cached(args, workdir, res, drivers, rate)
        res["low_rate"].append(rate)
    if args.profile:
        log("profile: direct")
        measure_profile(args, workdir, res)
    med = {k: stats.median(v) for k, v in res.items() if isinstance(k, tuple)}
    hops = {"low": med.get(("echod-cached", "low_dispatches")),
            "sat": med.get(("echod-cached", "dispatches"))}
    hops = {k: v + 2 if v is not None else None for k, v in hops.items()}
    # each pool arm's waking and queued hand-offs against direct, round by round
    derived = {pool: [peer_load.derive_wakes(peer_load.wake_figures(
        {a: runs[a][i] for a in ("direct", pool)},
        {"low": res["echod-cached", "low_dispatches"][i] + 2,
         "sat": res["echod-cached", "dispatches"][i] + 2}), pool=pool)
        for i in range(args.rounds)] for pool in arms if pool != "direct"}
    out = {"rounds": args.rounds, "arms": arms, "peer": {"%s|%s" % k: v for k, v in med.items()},
           "profile": dict(res["profile"]) if "profile" in res else None,
           "low_rate": stats.median(res["low_rate"]), "hops": hops,
           "loads": {a: peer_load.median_tree(runs[a]) for a in arms},
           "loads_per_round": {a: runs[a] for a in arms},
           "derivations": {p: peer_load.median_tree(d) for p, d in derived.items()},
           "derivations_per_round": derived,
           "load_average": os.getloadavg(), "machine": "%s, %s" % (platform.node(), platform.machine()),
           "cpu_model": args.cpu.text}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    render_peer(args, out)
    return 0


# Below this server CPU share a "saturation" run was not: batching, and so CPU per call, differ.
SATURATED = 0.7


def render_peer(args, out):
    """The peer table and the preset it gives, from peer_main's JSON (--from-json re-renders one)."""
    med = {tuple(k.split("|", 1)): v for k, v in out["peer"].items()}
    arms = out.get("arms") or ["direct", "default"]
    pools = [a for a in arms if a != "direct"]
    u, bu = med["direct", "unary_us"], med["direct", "bidi_us"]
    # grpc-java's hand-offs per unary call: the SerializingExecutor's dispatches (echod's cached
    # arm coalesces as grpc-java's does, docs/pool-arms.md) and two event-loop tasks, request(2)
    # and one WriteQueue flush for the headers, message and trailers (echod posts three). Every
    # pool arm wraps its executor in the same SerializingExecutor, so the counts are the same.
    hops = med["echod-cached", "dispatches"] + 2
    bhops = med["echod-cached", "bidi_dispatches"] + 1  # request(1); the flushes of 20 streams coalesce
    print("## grpc-java on this machine (bench/model peer, %d rounds, medians)\n" % out["rounds"])
    names = {"default": "default (cached pool)", "virtual": "virtual (JDK 21 virtual threads)"}
    print("| figure | %s | echod cached |" % " | ".join(names.get(a, a) for a in arms))
    print("|---|%s---:|" % ("---:|" * len(arms)))
    for key, label in (("unary_us", "unary CPU µs/call, saturation (-c 64 -m 1)"), ("unary_share", "server CPU share"),
                       ("unary_rps", "calls/s"), ("bidi_us", "bidi CPU µs/message, saturation (20 streams)"),
                       ("bidi_share", "server CPU share, bidi")):
        print("| %s | %s |" % (label, " | ".join(fmt.num(med.get((arm, key)), 2, 0)
                                                 for arm in arms + ["echod-cached"])))
    print("| dispatches / loop tasks per call | %s%.2f / %.2f |" % (
        "| " * len(arms), med["echod-cached", "dispatches"], med["echod-cached", "tasks"]))
    print("\nhand-offs in a grpc-java pool arm: %.2f per call (the dispatches echod's cached arm makes under the "
          "same load, request(2), one WriteQueue flush), %.2f per message (a dispatch and request(1); the flushes "
          "of 20 streams coalesce)" % (hops, bhops))
    per_msg = {}
    for pool in pools:
        d, bd = med[pool, "unary_us"], med[pool, "bidi_us"]
        per_msg[pool] = (bd - bu) / bhops / bu
        print("%s, one hand-off, streams: %.4f of a direct message ((%.2f - %.2f) / %.2f / %.2f)%s" % (
            pool, per_msg[pool], bd, bu, bhops, bu, "; the preset's source" if pool == "default" else ""))
        print("%s, one hand-off, unary:   %.4f of a direct call ((%.2f - %.2f) / %.2f / %.2f); a cross-check" % (
            pool, (d - u) / hops / u, d, u, hops, u))
    for shape in ("unary", "bidi"):
        low = [a for a in arms if med[a, shape + "_share"] < SATURATED]
        if low:
            print("**not saturated**: %s %s had %s of its CPU (other load on the machine): its ratio is not usable" % (
                " and ".join(low), shape, " and ".join("%.2f" % med[a, shape + "_share"] for a in low)))
    step_share = args.step_share
    if out.get("profile"):
        p = collections.Counter(out["profile"])
        total = sum(p.values())
        step_share = p["step"] / total
        print("\nJFR profile of direct, event loop busy samples: %s (of %d)" % (
            ", ".join("%s %.1f%%" % (c, 100 * v / total) for c, v in p.most_common()), total))
    if "default" in per_msg:
        unit = derive(step_share, per_msg["default"])
        print("\nderived preset (docs/work-model.md; step share %.4f):" % step_share)
        print("  call_cpu_us: %d\n  step_cpu_us: %d\n  handoff_cpu_us: %d\n  message_cpu_us: %d" % (
            unit["call"], unit["step"], unit["handoff"], unit["message"]))
    else:
        print("\n(no preset: it is derived from the default pool's hand-off, not in --peer-arms)")
    if out.get("loads"):
        render_loads(out)
    # a run from before --cpu-model was pinned
    print("\n%s" % out.get("cpu_model", "pinned core: the server on CPU %s (taskset), the driver on "
                                         "CPU %s" % (args.server_cpu, args.client_cpu)))
    print("machine: %s; load average at the end %s" % (out["machine"],
                                                        ", ".join("%.2f" % x for x in out["load_average"])))


def render_loads(out):
    """The load-dependent part: each arm idle, at low load and at saturation by thread group,
    and the derivation of B, w, Hw and Hq (docs/work-model.md)."""
    print("\n## What the JVM pays besides its calls (idle, %s calls/s with k6, saturation)\n" %
          fmt.num(out["low_rate"], 0))
    print("Per call (idle: per second): CPU µs, voluntary and involuntary context switches of "
          "each thread group (a voluntary switch of a receiving thread is one time it parked). "
          "net: the JVM's CPU less its compiler threads' and the background's share (B x the "
          "window's seconds). exited: CPU of threads that ended inside the window. Warm-up: "
          "%s.\n" % "; ".join("%s%s %s s%s" % (a, " (java %s)" % l["java"] if l.get("java") else "",
                                                 fmt.num(l["warmup"]["seconds"], 0), "" if
                                                 l["warmup"]["settled"] else " (not settled)")
                              for a, l in out["loads"].items()))
    print("\n".join(peer_load.load_table(out["loads"], out["arms"])))
    for pool, d in derivations(out).items():
        print("\nDerivation, %s against direct (medians over %d round%s; per round: %s):\n" % (
            pool, out["rounds"], "" if out["rounds"] == 1 else "s", ", ".join(
                "Hw %s Hq %s w %s" % (fmt.num(r["Hw_us"], 1), fmt.num(r["Hq_us"], 1),
                                      fmt.num(r["w_us"], 1))
                for r in derivations(out, per_round=True)[pool])))
        for line in peer_load.derivation_text(d, pool):
            print("- " + line)


def derivations(out, per_round=False):
    """{pool arm: its derivation} of a peer JSON (a run from before every pool arm was derived
    has `derivation`, default's alone)."""
    if "derivations" in out:
        return out["derivations_per_round" if per_round else "derivations"]
    key = "derivation_per_round" if per_round else "derivation"
    return {"default": out[key]} if out.get(key) else {}


def derive(step_share, handoff_ratio, unary_plateau=2140.0, stream_plateau=16000.0):
    """The preset's unit costs (µs) from the direct arm's two published plateaus, the steps' share
    of a direct call and a hand-off's cost relative to a direct stream message, both measured on
    grpc-java here (docs/work-model.md, "Calibration")."""
    call_us, msg_us = 1e6 / unary_plateau, 1e6 / stream_plateau  # C + 6S + 2M, and S + 2M
    step = step_share * call_us / 6
    message = (msg_us - step) / 2
    return {"call": round(call_us - 6 * step - 2 * message), "step": round(step), "message": round(message),
            "handoff": round(handoff_ratio * msg_us)}


# ---------------------------------------------------------------- arms: predictions

def arm_main(args):
    workdir = tempfile.mkdtemp(prefix="echod-model-")
    pin = args.cpu.server_prefix
    costs = {"flat": (None, ["work.defaults.cpu_us=%d" % args.flat_us]), "model": (args.preset, [])}
    res = collections.defaultdict(list)
    arms = args.arms.split(",")
    for rnd in range(args.rounds):
        for arm in arms:
            for cost, (extra_config, sets) in costs.items():
                log("round %d: %s, %s" % (rnd + 1, arm, cost))
                cfg = os.path.join(paths.ROOT, "config", "arms", arm + ".yaml")
                d = daemon.Echod(config=cfg, binary=args.echod, prefix=pin,
                                 args=["--config", extra_config] if extra_config else [],
                                 sets=["log.level=warn"] + sets, log_path=os.path.join(workdir, "echod.log")).start()
                try:
                    measure_arm(args, d, Load(args, d.port, workdir), res[arm, cost])
                finally:
                    rc = d.stop()
                    if rc:
                        raise RuntimeError("%s %s: %s" % (arm, cost, rc))
    summary = {"%s %s" % k: {m: stats.median([r[m] for r in v]) for m in v[0]} for k, v in res.items()}
    render(args, arms, summary)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"argv": sys.argv, "summary": summary, "runs": {"%s %s" % k: v for k, v in res.items()}},
                      fh, indent=1)
    return 0


def measure_arm(args, d, load, out):
    r = {}
    load.run(load.unary, clients=64, streams=1, duration=2)
    settle(d)
    # 10% of the direct arm's capacity, as the study's fixed-rate grid (200/s of ~2,140)
    w = Window(d.pid, d.admin_port)
    res = load.run(load.unary, clients=16, streams=1, rps=args.fixed_rate / 16, duration=args.seconds)
    settle(d)
    w.close()
    calls = w.delta("grpc_server_handled_total", grpc_code="OK")
    r["fixed_us"] = w.cpu_s / calls * 1e6
    r["fixed_rps"] = res["rps"]
    # the unary plateau
    w = Window(d.pid, d.admin_port)
    res = load.run(load.unary, clients=64, streams=1, duration=args.seconds)
    settle(d)
    w.close()
    calls = w.delta("grpc_server_handled_total", grpc_code="OK")
    r["sat_us"] = w.cpu_s / calls * 1e6
    r["capacity"] = 1e6 / r["sat_us"]
    r["sat_rps"] = res["rps"]
    r["sat_share"] = w.cpu_s / w.wall_s
    for name, key in (("echod_call_steps_total", "steps"), ("echod_executor_dispatches_total", "dispatches"),
                      ("echod_loop_tasks_total", "tasks")):
        r[key] = w.delta(name) / calls
    # the hand-offs that found their receiver parked: what the CPU model moves (docs/work-model.md)
    r["woken"] = w.delta("echod_handoffs_total", found="parked") / calls
    for kind in CHARGED:
        r["charged_" + kind] = w.delta("echod_work_model_cpu_seconds_total", kind=kind) / calls * 1e6
    # the stream plateau
    w = Window(d.pid, d.admin_port)
    res = load.run(load.bidi, clients=1, streams=20, n=20 * args.streams)
    settle(d)
    w.close()
    msgs = res["succeeded"] * BIDI_MSGS
    r["msg_us"] = w.cpu_s / msgs * 1e6
    r["stream_capacity"] = 1e6 / r["msg_us"]
    r["msg_handoffs"] = (w.delta("echod_executor_dispatches_total") + w.delta("echod_loop_tasks_total")) / msgs
    bad = w.delta("grpc_server_handled_total") - w.delta("grpc_server_handled_total", grpc_code="OK")
    if bad:
        raise RuntimeError("%d calls did not end OK" % bad)
    out.append(r)


def render(args, arms, s):
    def g(arm, cost, key):
        return (s.get("%s %s" % (arm, cost)) or {}).get(key)

    print("## The cost model against the study (bench/model arms, %d round%s, medians)\n" % (
        args.rounds, "" if args.rounds == 1 else "s"))
    print("Flat: `work.defaults.cpu_us=%d` per call (and per bidi message). Model: `%s`. Published: the study's "
          "grpc-java arms; only `direct`'s plateaus were used to calibrate the model, every other model "
          "figure is a prediction.\n" % (args.flat_us, os.path.relpath(args.preset, paths.ROOT)))
    print("| arm | unary plateau/s: flat | model | published | CPU µs/call at %d/s: flat | model | published | "
          "stream plateau msg/s: flat | model | published | streams / unary: flat | model | published |"
          % args.fixed_rate)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for arm in arms:
        pub = {"capacity": PUB_UNARY_PLATEAU.get(arm), "fixed_us": PUB_FIXED_CPU_US.get(arm),
               "stream_capacity": PUB_STREAM_PLATEAU.get(arm)}
        cells = [fmt.num(v, 1, 0) for key in ("capacity", "fixed_us", "stream_capacity")
                 for v in (g(arm, "flat", key), g(arm, "model", key), pub[key])]
        cells += [fmt.num(fmt.ratio(streams, unary), 2, 0) for streams, unary in (
            (g(arm, "flat", "stream_capacity"), g(arm, "flat", "capacity")),
            (g(arm, "model", "stream_capacity"), g(arm, "model", "capacity")),
            (pub["stream_capacity"], pub["capacity"]))]
        print("| `%s` | %s |" % (arm, " | ".join(cells)))
    print("\n| arm | vs direct: plateau flat | model | published | CPU/call at %d/s flat | model | published | "
          "stream plateau flat | model | published |" % args.fixed_rate)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for arm in arms:
        if arm == "direct":
            continue
        row = [arm]
        for key, pub in (("capacity", PUB_UNARY_PLATEAU), ("fixed_us", PUB_FIXED_CPU_US),
                         ("stream_capacity", PUB_STREAM_PLATEAU)):
            for cost in ("flat", "model"):
                row.append(fmt.num(fmt.ratio(g(arm, cost, key), g("direct", cost, key)), 3, 0))
            row.append(fmt.num(fmt.ratio(pub.get(arm), pub.get("direct")), 3, 0))
        print("| `%s` | %s |" % (row[0], " | ".join(row[1:])))
    print("\n| arm, model | steps | dispatches | loop tasks | waking hand-offs per call (saturation) | "
          "hand-offs per message | charged µs per call: %s | server CPU share, h2load calls/s |"
          % " | ".join(CHARGED))
    print("|---|" + "---:|" * (5 + len(CHARGED)) + "---|")
    for arm in arms:
        cells = [fmt.num(g(arm, "model", k), 2, 0) for k in ("steps", "dispatches", "tasks", "woken",
                                                             "msg_handoffs")]
        cells += [fmt.num(g(arm, "model", "charged_" + k), 1, 0) for k in CHARGED]
        print("| `%s` | %s | %s, %s |" % (arm, " | ".join(cells), fmt.num(g(arm, "model", "sat_share"), 2, 0),
                                          fmt.num(g(arm, "model", "sat_rps"), 1, 0)))
    print("\n%s; %s; load average at the end %s" % (
        args.cpu.text, platform.machine(), ", ".join("%.2f" % x for x in os.getloadavg())))
