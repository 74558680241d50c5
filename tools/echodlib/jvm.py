"""What a JVM server (the grpc-java peer of echodlib.peers) does besides its calls, read from
outside it: its threads by kind, its JIT's warm-up, and its own pauses from unified logging.

Threads. HotSpot names its native threads (the kernel keeps 15 characters: "C2 CompilerThre",
"nioEventLoopGro"); thread_group() sorts them into the groups a per-thread reading
(procstat.ThreadWindow) is summed by:

  event loop   Netty's loops (NIO or epoll: nioEventLoopGroup-*, epollEventLoopGroup-*), the
               boss (accepts) and the worker (every connection's I/O) alike: the kernel's 15
               characters do not tell them apart, and the boss is idle once the connections
               are open
  pool         the executor's threads: grpc's cached pool (grpc-default-executor-*), a
               newFixedThreadPool (pool-N-thread-M), the carriers of JDK 21's virtual threads
               (ForkJoinPool-1-worker-N: a virtual thread's CPU is its carrier's) and their
               unparker (VirtualThread-unparker)
  compiler     the JIT's C1 and C2 compiler threads
  VM           the VM thread (safepoint operations; with SerialGC, which a 1-CPU JVM picks, the
               collections too), its periodic task thread, GC threads of another collector,
               the monitor deflation, service and code sweeper threads
  other        the rest: main, finalizer, reference handler, signal dispatcher, cleaners

A receiving thread's voluntary context switch is one time it parked (a pool thread waiting
for a task, the loop in its selector's epoll_wait): per call, the hand-offs that had to wake
it, counted without instrumenting the JVM.

Pauses. pause_log_option(path) is the -Xlog option that writes safepoints and collections
with wall-clock time decorations; parse_pauses() reads such a file (JDK 17's and JDK 21's
format, with or without the wall-clock decoration) and pause_summary() sums a window of it.
"""

import re
import time

from . import procstat, stats

GROUPS = ("event loop", "pool", "compiler", "VM", "other")
_GROUP_PREFIXES = (
    ("event loop", ("nioEventLoopGro", "epollEventLoopG", "grpc-nio-worker", "grpc-nio-boss",
                    "grpc-default-wo", "grpc-default-bo")),
    ("pool", ("grpc-default-ex", "pool-", "ForkJoinPool-", "VirtualThread-u")),
    ("compiler", ("C1 CompilerThre", "C2 CompilerThre")),
    ("VM", ("VM Thread", "VM Periodic Tas", "GC Thread", "G1 ", "Monitor Deflati",
            "Service Thread", "Sweeper thread")),
)


def thread_group(name):
    """The group (GROUPS) of a JVM thread by its kernel name."""
    for group, prefixes in _GROUP_PREFIXES:
        if name.startswith(prefixes):
            return group
    return "other"


def calls_cpu_s(pid):
    """CPU seconds the JVM's threads that run calls (its event loops and pools) have used: how
    a step tells the peer still working off a previous step's calls from its compiler and GC
    threads, which run on their own (study/server.quiet)."""
    return sum(ns for name, ns, _, _ in procstat.threads(pid).values()
               if thread_group(name) in ("event loop", "pool")) / 1e9


# ---------------------------------------------------------------------------- the JIT's warm-up

def compiler_share(window):
    """The compiler threads' share of the JVM's CPU over a closed procstat.ThreadWindow (of
    thread_group), or None (no CPU)."""
    comp = window.groups.get("compiler", {}).get("cpu_s", 0.0)
    return comp / window.cpu_s if window.cpu_s else None


def warm_up(pid, load, chunk_s=5, max_s=60, threshold=0.02, log=None):
    """Drives the JVM with load(seconds) (a closed loop) in chunks until its compiler threads
    took less than `threshold` of its CPU in a chunk (the JIT has compiled the paths the load
    takes), or until max_s. Returns {"seconds", "chunks": [compiler share of each], "settled"}:
    an unsettled warm-up is reported, and its compiler CPU in the measured windows is shown apart
    (and left out of the figures that exclude it).

    On one CPU the warm-up is mostly the compilers' own CPU time (C2 on Netty's and grpc's
    paths): the grpc-java peer's compiler threads took about half of its CPU for the first 15 s
    of calls that ask for no work (peers.NO_WORK), then fell under 2% after 40-50 s on a shared
    machine; with 2 ms of synthetic work a call (about 250 calls/s) they took 14-27% for 25 s
    and fell under 2% after 50 s."""
    shares = []
    spent = 0
    answered = False
    while True:
        w = procstat.ThreadWindow(pid, thread_group)
        try:
            load(chunk_s)
            answered = True
        except RuntimeError as e:
            # a cold JVM on a busy CPU may answer nothing in a first short chunk: warming up
            if log:
                log("  warm-up: %s" % str(e)[:160])
        w.close()
        share = compiler_share(w)
        shares.append(share)
        spent += chunk_s
        if log:
            log("  warm-up %d s: the compiler threads took %s of the JVM's CPU" % (
                spent, "-" if share is None else "%.1f%%" % (100 * share)))
        if answered and share is not None and share < threshold:
            return {"seconds": spent, "chunks": shares, "settled": True}
        if spent >= max_s:
            if not answered:
                raise RuntimeError("the JVM answered no call in %d s of warm-up" % spent)
            return {"seconds": spent, "chunks": shares, "settled": False}


# ---------------------------------------------------------------------------- pauses (-Xlog)

def pause_log_option(path):
    """-Xlog for safepoints and collections in `path`, each line with its wall-clock time in ms
    since the epoch (timemillis) and the JVM's uptime."""
    return "-Xlog:safepoint*=info,gc*=info:file=%s:timemillis,uptime,level,tags" % path


_DECOR = re.compile(r"\[([^\]]*)\]")
# JDK 21 adds "Leaving safepoint: N ns" before the total
_SAFEPOINT = re.compile(r'Safepoint "([^"]+)", Time since last: (\d+) ns, Reaching safepoint: '
                        r'(\d+) ns, (?:Cleanup: \d+ ns, )?At safepoint: (\d+) ns, '
                        r'(?:Leaving safepoint: \d+ ns, )?Total: (\d+) ns')
_GC_PAUSE = re.compile(r"GC\((\d+)\) (Pause\b.*?)\s+([\d.]+)ms\s*$")
_HEAP = re.compile(r"\s*\d+[KMGB]?->\d+[KMGB]?\(\d+[KMGB]?\)")


def _decorations(line):
    """(wall seconds or None, uptime seconds or None, tags, message) of one unified-logging
    line."""
    wall = up = None
    tags = ""
    pos = 0
    while True:
        m = _DECOR.match(line, pos)
        if not m:
            break
        d = m.group(1).strip()
        pos = m.end()
        if re.fullmatch(r"\d+ms", d) and int(d[:-2]) > 10**12:
            wall = int(d[:-2]) / 1000.0
        elif re.fullmatch(r"[\d.]+s", d):
            up = float(d[:-1])
        elif d not in ("info", "debug", "trace", "warning", "error"):
            tags = d
    return wall, up, tags, line[pos:].strip()


def parse_pauses(text):
    """The pauses a -Xlog:safepoint*,gc* file records: a list of
    {"kind": "safepoint"|"gc", "what": the VM operation or the collection, "t": wall seconds
    (None without the timemillis decoration), "uptime": s, "total_ms", and for a safepoint
    "reaching_ms" (threads brought to a stop) and "at_ms" (the operation itself)}."""
    out = []
    for line in text.splitlines():
        wall, up, tags, msg = _decorations(line)
        tagset = {t.strip() for t in tags.split(",")}
        if tagset == {"safepoint"}:
            m = _SAFEPOINT.search(msg)
            if m:
                out.append({"kind": "safepoint", "what": m.group(1), "t": wall, "uptime": up,
                            "reaching_ms": int(m.group(3)) / 1e6, "at_ms": int(m.group(4)) / 1e6,
                            "total_ms": int(m.group(5)) / 1e6})
        elif tagset == {"gc"}:
            m = _GC_PAUSE.search(msg)
            if m:
                out.append({"kind": "gc", "what": _HEAP.sub("", m.group(2)).strip(), "t": wall,
                            "uptime": up, "total_ms": float(m.group(3))})
    return out


def in_window(events, t0, t1):
    """The events logged inside [t0, t1] (wall seconds; an event without wall time is kept)."""
    return [e for e in events if e["t"] is None or t0 <= e["t"] <= t1]


def pause_summary(events, seconds):
    """Per kind (safepoint, gc): count, per second, p50 / p99 / max of the pause (ms), the share
    of the window's time the JVM was stopped, and for safepoints the p99 of the time to reach
    them and the count per VM operation."""
    out = {}
    for kind in ("safepoint", "gc"):
        ev = [e for e in events if e["kind"] == kind]
        ms = sorted(e["total_ms"] for e in ev)
        s = {"count": len(ev), "per_s": len(ev) / seconds if seconds else None,
             "p50_ms": stats.percentile(ms, 0.5), "p99_ms": stats.percentile(ms, 0.99),
             "max_ms": ms[-1] if ms else None,
             "share": sum(ms) / 1000.0 / seconds if seconds else None}
        if kind == "safepoint":
            s["reaching_p99_ms"] = stats.percentile(sorted(e["reaching_ms"] for e in ev), 0.99)
            by = {}
            for e in ev:
                by[e["what"]] = by.get(e["what"], 0) + 1
            s["by_operation"] = by
        out[kind] = s
    return out


def read_pauses(path, t0=None, t1=None, settle_s=0.5):
    """parse_pauses of a log file, inside [t0, t1] when given (after settle_s: the JVM writes
    its log asynchronously to the events)."""
    time.sleep(settle_s)
    try:
        with open(path, errors="replace") as fh:
            events = parse_pauses(fh.read())
    except OSError:
        return []
    return in_window(events, t0, t1) if t0 is not None else events
