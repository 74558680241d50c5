"""bench/drain-depth's run: one arm at one offered rate under one h2load window (connections x
streams per connection): goodput, the latency of every answered call, Little's bound and
echod's flushes by trigger."""

import os
import tempfile

from .. import daemon, h2load, paths, prom, stats


def print_header(args):
    print("offered %.0f calls/s, work.defaults.cpu_us %d, %d s per run, echod on CPU %s, h2load "
          "on CPU %s" % (args.rate, args.cpu_us, args.seconds, args.server_cpu, args.client_cpu))
    print()
    print("| window (conns x streams) | arm | goodput/s | p50 ms | p99 ms | mean ms | "
          "window / goodput ms | p99 / first arm's | flushes |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")


def run(args, arm, conns, streams, body):
    d = daemon.Echod(config=os.path.join(paths.ROOT, "config", "arms", arm + ".yaml"),
                     sets=["work.defaults.cpu_us=%d" % args.cpu_us, "log.level=warn"],
                     prefix=["taskset", "-c", args.server_cpu], binary=args.echod).start()
    try:
        with tempfile.NamedTemporaryFile(prefix="drain-depth-", suffix=".log") as logf:
            load = h2load.Client(d.grpc_port, body, client_cpu=args.client_cpu)
            res = load.run(args.seconds + 60, clients=conns, streams=streams,
                           rps=args.rate / conns, duration=args.seconds, log_file=logf.name)
            if res["error"]:
                raise RuntimeError(res["error"])
            lat = h2load.read_latency_log(logf.name, keep_samples=True)
            if not lat or not lat["n"]:
                raise RuntimeError("%s, %dx%d: no call answered: %s" % (
                    arm, conns, streams, res["cmd"]))
        flushes = prom.metric_by(prom.samples(d.scrape()), "echod_flushes_total", "trigger")
    finally:
        d.stop()
    ms = [v / 1000.0 for v in lat["samples"]]
    goodput = lat["n"] / args.seconds
    return {"goodput": goodput, "p50": stats.percentile(ms, 0.5),
            "p99": stats.percentile(ms, 0.99), "mean": sum(ms) / len(ms) if ms else None,
            "little": conns * streams / goodput * 1000 if goodput else None,
            "flushes": {k: int(v) for k, v in sorted(flushes.items()) if v}}
