"""bench/ab's round: one binary, a fresh echod on the server CPU, one figure (server CPU per call
or per message, or RSS per busy connection)."""

import os
import sys

from .. import bidi, daemon, h2load, paths, procstat

RSS_CONNECTIONS = 100
TIMEOUT = 600  # seconds for a run of a fixed number of calls: a wedged server, not a slow one


def fail(res):
    """Exits on an h2load run with an error or no call succeeded."""
    if res["error"] or not res["succeeded"]:
        sys.exit("bench/ab: h2load did not succeed:\n" + res["output"][-2000:])
    return res


def one_round(binary, a, request_file):
    """a: bench/ab's arguments (arm, set, mode, seconds, server_cpu, client_cpu)."""
    server = daemon.Echod(config=os.path.join(paths.ROOT, "config", "arms", a.arm + ".yaml"),
                          binary=binary, sets=["log.level=warn"] + a.set,
                          prefix=["taskset", "-c", a.server_cpu], start_timeout=10)
    try:
        server.start()
    except daemon.EchodError as e:
        sys.exit("bench/ab: %s" % e)
    try:
        if a.mode == "bidi":
            d = bidi.run(server.target, server.pid, a.client_cpu, streams=20, rate=20000,
                         duration=a.seconds, warmup=1)
            if not d.get("ok"):
                sys.exit("bench/ab: bidi client failed: %s" % d.get("errors"))
            return d["server_cpu_s"] * 1e6 / d["window_msgs"]
        load = h2load.Client(server.port, request_file, client_cpu=a.client_cpu)
        fail(load.run(TIMEOUT, keep_output=True, n=20000, clients=4, streams=16))
        if a.mode == "rss":
            idle = procstat.proc_status(server.pid)["VmRSS"]
            fail(load.run(TIMEOUT, keep_output=True, n=200000, clients=RSS_CONNECTIONS, streams=10))
            return (procstat.proc_status(server.pid)["VmHWM"] - idle) / RSS_CONNECTIONS
        if a.mode == "sat":
            res = load.run(TIMEOUT, True, server.pid, n=300000, clients=4, streams=16)
        else:
            res = load.run(a.seconds + 60, True, server.pid, duration=a.seconds,
                           rps=int(a.mode) // 4, clients=4, streams=1)
        return fail(res)["server_cpu_s"] * 1e6 / res["done"]
    finally:
        server.stop()
