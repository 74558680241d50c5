"""bench/compare's tables: medians over the rounds, ratios against echod `direct`, context
switches against each arm's grpc-java counterpart, issue 6's targets, and the report around them
(problems, commands, machine), from the rounds measure_arm() returned or from a --json file."""

import shlex

from .. import fmt, h2load, paths, stats
from ..stats import get
from .compare import ECHOD_ARMS, SUSTAINED, names

# The grpc-java arm each echod arm models (ARM+batch: ARM's; workstealing has none among the
# peers: Debian's JDK 17 has no virtual threads, so it is held against `default`)
COUNTERPART = {"direct": ("java", "direct"), "fixed": ("java", "fixed:1"),
               "fixed+t2": ("java", "fixed:2"), "fixed-unwrapped": ("java", "fixed:1"),
               "cached": ("java", "default"), "workstealing": ("java", "default"),
               "virtual": ("java", "default")}
CSW_TOLERANCE = 0.20   # issue 15: each pool arm within ±20% of its counterpart's switches per call
CSW_FLOOR = 0.5        # below this per call on both sides a ratio says nothing (idle timers, noise)


METRICS = {  # summary key: where a round's results hold it, phase by phase
    "cpu_fixed": ("fixed", "cpu_us_per_call"),
    "sys_fixed": ("fixed", "server_sys_fraction"),
    "fixed_rps": ("fixed", "rps"),
    "p50": ("fixed", "latency", "p50_us"),
    "p99": ("fixed", "latency", "p99_us"),
    "csw_fixed": ("fixed", "csw", "per"),
    "csw_fixed_vol": ("fixed", "csw", "vol"),
    "csw_fixed_invol": ("fixed", "csw", "invol"),
    "csw_sat": ("sat", "csw", "per"),
    "csw_sat_vol": ("sat", "csw", "vol"),
    "csw_sat_invol": ("sat", "csw", "invol"),
    "sat_threads": ("sat", "csw", "threads"),
    "sat_rps": ("sat", "rps"),
    "sat_server_share": ("sat", "server_share"),
    "sat_client_share": ("sat", "client_share"),
    "sat_busy_server_cpu": ("sat", "busy_server_cpu"),
    "sat_busy_client_cpu": ("sat", "busy_client_cpu"),
    "cpu_sat": ("sat", "cpu_us_per_call"),
    "sys_bidi": ("bidi", "server_sys_fraction"),
    "cpu_bidi": ("bidi", "cpu_us_per_msg"),
    "bidi_rate": ("bidi", "msgs_per_s"),
    "bidi_client_share": ("bidi", "client_share"),
    "idle_rss_kb": ("idle_rss_kb",),
    "rss_per_conn_kb": ("rss_per_conn_kb",),
    "loaded_rss_kb": ("loaded_rss_kb",),
}


def summarize(runs):
    s = {"rounds": len(runs), "errors": [], "warnings": []}
    for r in runs:
        for e in r["errors"]:
            s["errors"].append("round %d: %s" % (r["round"] + 1, e))
        for e in r.get("warnings", []):
            s["warnings"].append("round %d: %s" % (r["round"] + 1, e))
    for k, path in METRICS.items():
        vals = [get(r, *path) for r in runs]
        vals = [v for v in vals if v is not None]
        s[k] = stats.median(vals)
        s[k + "_all"] = vals
    # CPU per call or message: the median of the rounds that kept the offered rate; only if
    # none did, of all rounds (marked †)
    for k, ph in (("cpu_fixed", "fixed"), ("sys_fixed", "fixed"), ("cpu_bidi", "bidi"),
                  ("sys_bidi", "bidi")):
        kept = [get(r, *METRICS[k]) for r in runs if not get(r, ph, "not_sustained")]
        kept = [v for v in kept if v is not None]
        if kept:
            s[k] = stats.median(kept)
        s[k + "_used"] = len(kept)
    s["fixed_short"] = sum(1 for r in runs if get(r, "fixed", "not_sustained"))
    s["bidi_short"] = sum(1 for r in runs if get(r, "bidi", "not_sustained"))
    s["fixed_rounds"] = sum(1 for r in runs if get(r, "fixed", "cpu_us_per_call") is not None)
    s["bidi_rounds"] = sum(1 for r in runs if get(r, "bidi", "cpu_us_per_msg") is not None)
    return s


def cpu_cell(v, sysf, used, rounds):
    if v is None:
        return "-"
    out = fmt.num(v, 2, 1)
    if sysf is not None:
        out += " (%.0f%% sys)" % (100 * sysf)
    if used == 0:
        return out + " †"
    if used < rounds:
        return out + " [%d/%d]" % (used, rounds)
    return out


def render(plan, names, summ, args):
    L = []
    base = summ.get(("echod", "direct"))
    hdr = ["server", "arm",
           "unary CPU µs/call @%d/s" % args.rate, "× direct", "p50 µs", "p99 µs",
           "sat calls/s", "sat CPU µs/call", "sat CPU share server / h2load",
           "bidi CPU µs/msg @%d/s" % args.bidi_rate, "× direct",
           "idle RSS MiB", "KiB / idle conn", "loaded RSS MiB", "problems"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---", "---"] + ["---:"] * (len(hdr) - 3) + ["---"]) + "|")
    dagger = False
    for key in plan:
        s = summ.get(key)
        srv, arm = names[key]
        if s is None:
            continue
        if s["cpu_fixed"] is None and s["sat_rps"] is None:
            L.append("| %s | %s | %s |" % (srv, arm, " | ".join(["-"] * (len(hdr) - 3) +
                                                                  ["**did not run** (see below)"])))
            continue
        dagger = dagger or s["fixed_short"] or s["bidi_short"]
        n = len(s["errors"]) + len(s["warnings"])
        probs = "%d (see below)" % n if n else "0"
        L.append("| " + " | ".join([
            srv, arm,
            cpu_cell(s["cpu_fixed"], s["sys_fixed"], s["cpu_fixed_used"], s["fixed_rounds"]),
            fmt.times(s["cpu_fixed"], base and base["cpu_fixed"]),
            fmt.num(s["p50"], 0), fmt.num(s["p99"], 0),
            fmt.num(s["sat_rps"], 0), fmt.num(s["cpu_sat"], 2, 1),
            fmt.pair(s["sat_server_share"], s["sat_client_share"]),
            cpu_cell(s["cpu_bidi"], s["sys_bidi"], s["cpu_bidi_used"], s["bidi_rounds"]),
            fmt.times(s["cpu_bidi"], base and base["cpu_bidi"]),
            fmt.num(s["idle_rss_kb"] / 1024 if s["idle_rss_kb"] is not None else None, 1, 1),
            fmt.num(s["rss_per_conn_kb"], 1, 1),
            fmt.num(s["loaded_rss_kb"] / 1024 if s["loaded_rss_kb"] is not None else None, 1, 1),
            probs]) + " |")
    L.append("")
    L.append("Medians over %d round(s). CPU = utime+stime of the server process, all threads "
             "(process CPU clock), over the measured window, ÷ successful calls (unary) or "
             "echoed messages (bidi); `sys` = the kernel's share of it (/proc/PID/stat). "
             "Unary: h2load -c %d -m 1 at a fixed total rate: every call is a separate wake-up, "
             "so this includes the per-wake-up cost (epoll_wait, read, writev, loopback TCP). "
             "`sat`: h2load -c 4 -m 16 closed loop, as fast as it goes: requests arrive in "
             "batches, so `sat CPU µs/call` is closer to the marginal cost of a call; `sat CPU "
             "share`: CPU seconds per wall second (1.00 = one core busy), the side near 1.00 "
             "(or the server's whole core) was the limit. Bidi: %d streams on one connection, "
             "a fixed total rate, written every %.0f ms. p50/p99: h2load --log-file of the "
             "fixed-rate run. RSS: VmRSS; KiB / idle conn = RSS growth with %d idle HTTP/2 "
             "connections open ÷ %d; loaded = largest VmRSS during saturation and bidi." % (
                 args.repeat, args.fixed_conns, args.bidi_streams, 1000 * args.tick, args.idle_conns,
                 args.idle_conns))
    if dagger:
        L.append("")
        L.append("A run that achieved less than %.0f%% of its offered rate measured its CPU at a "
                 "lower rate; such rounds are left out of the CPU medians: `[2/3]` = the median "
                 "of the 2 rounds of 3 that kept the rate; `†` = no round kept it (median of "
                 "all, not comparable). See the problems below." % (100 * SUSTAINED))
    # spread
    L.append("")
    L.append("Every round ((max − min) / median = spread):")
    L.append("")
    L.append("| server | arm | unary CPU µs/call | spread | sat CPU µs/call | spread | "
             "bidi CPU µs/msg | spread | achieved: fixed calls/s, bidi msgs/s | "
             "sat: CPU %s / CPU %s busy |" % (args.server_cpu, args.client_cpu))
    L.append("|---|---|---|---:|---|---:|---|---:|---|---|")
    for key in plan:
        s = summ.get(key)
        if s is None:
            continue
        srv, arm = names[key]
        cells = []
        for k in ("cpu_fixed", "cpu_sat", "cpu_bidi"):
            sp = stats.spread(s[k + "_all"])
            cells += [", ".join(fmt.num(v, 2, 1) for v in s[k + "_all"]) or "-",
                      "-" if sp is None else "%.0f%%" % (100 * sp)]
        L.append("| %s | %s | %s | %s / %s | %s / %s |" % (
            srv, arm, " | ".join(cells),
            ", ".join(fmt.num(v, 0) for v in s["fixed_rps_all"]) or "-",
            ", ".join(fmt.num(v, 0) for v in s["bidi_rate_all"]) or "-",
            fmt.num(s["sat_busy_server_cpu"], 2, 1), fmt.num(s["sat_busy_client_cpu"], 2, 1)))
    L.append("")
    L.append("`CPU N busy`: share of the saturation run that each CPU was busy with anything "
             "(/proc/stat, all processes and the kernel). When it is near 1.00 but the server's "
             "(or h2load's) own share is well below, something else on the machine took that "
             "CPU: the round was disturbed.")
    L.append("")
    L.extend(render_switches(plan, names, summ, args))
    L.append("")
    L.extend(render_targets(summ))
    return "\n".join(L)


def counterpart(arm):
    return COUNTERPART.get(arm) or COUNTERPART.get(arm.partition("+")[0])


def render_switches(plan, names, summ, args):
    """Context switches per call (issue 15): the cost floor of a dispatch strategy, far less
    sensitive to a shared machine than CPU time, every server side by side."""
    L = ["### Context switches per call", "",
         "| server | arm | @%d/s: all (vol / invol) | saturation: all (vol / invol) | threads | "
         "counterpart | ratio @%d/s | ratio sat |" % (args.rate, args.rate),
         "|---|---|---:|---:|---:|---|---:|---:|"]

    def cell(s, ph):
        if s.get("csw_" + ph) is None:
            return "-"
        out = "%s (%s)" % (fmt.num(s["csw_" + ph], 2, 1),
                           fmt.pair(s["csw_%s_vol" % ph], s["csw_%s_invol" % ph]))
        # a fixed-rate run below its rate counted its switches at a lower rate (see problems)
        return out + (" [%d short]" % s["fixed_short"] if ph == "fixed" and s["fixed_short"] else "")

    def judged(x, y):
        if x is None or not y:
            return "-"
        if x < CSW_FLOOR and y < CSW_FLOOR:
            return "both < %.1f" % CSW_FLOOR
        r = x / y
        return "%.2f×%s" % (r, "" if abs(r - 1) <= CSW_TOLERANCE else " **off**")

    for key in plan:
        s = summ.get(key)
        if s is None:
            continue
        srv, arm = names[key]
        # workstealing models virtual threads, which no peer has: no counterpart to judge by
        cp = counterpart(key[1]) if key[0] == "echod" and not key[1].startswith("workstealing") else None
        c = summ.get(cp) if cp else None
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            srv, arm, cell(s, "fixed"), cell(s, "sat"), fmt.num(s["sat_threads"], 0),
            "grpc-java %s" % cp[1] if cp else "",
            judged(s["csw_fixed"], c and c["csw_fixed"]) if c else "-",
            judged(s["csw_sat"], c and c["csw_sat"]) if c else "-"))
    L.append("")
    L.append("voluntary (the thread blocked: a park, an epoll_wait) + involuntary (preempted) "
             "switches of all the server's live threads (/proc/PID/task/*/status, the same "
             "reading for every server), over the measured window, ÷ successful calls; threads "
             "= the server's threads at the end of the saturation run. Ratios are against the "
             "grpc-java arm the echod arm models; **off** = outside ±%.0f%%. `+t2` = "
             "executor.threads=2; `fixed-unwrapped` (the unwrap proposal) is shown against "
             "stock `fixed:1` for reference; `[N short]`: N rounds did not keep the fixed rate; "
             "`workstealing` has none (no peer runs virtual threads); `both < %.1f`: too few "
             "switches on either side for a ratio to mean anything. Involuntary switches include preemption by anything else on the server "
             "CPU (other processes on a shared machine, the JVM's GC and JIT threads)." % (
                 100 * CSW_TOLERANCE, CSW_FLOOR))
    return L


def render_targets(summ):
    """The targets of issue 6, evaluated on the medians: at the fixed rate (the issue's
    definition) and, for the unary ones, also on the saturation figures."""
    def g(k, a, m):
        s = summ.get((k, a))
        return s.get(m) if s else None

    rows = []

    def verdict(value, limit):
        if value is None or limit is None:
            return "-", "-", "n/a"
        return fmt.num(value, 2, 1), "≤ " + fmt.num(limit, 2, 1), "met" if value <= limit else "**missed**"

    def check(what, fixed, sat=None):
        """fixed, sat: (value, limit) pairs or None."""
        a = verdict(*fixed)
        b = verdict(*sat) if sat is not None else ("", "", "")
        if a[2] == "n/a" and b[2] in ("n/a", ""):
            return
        rows.append("| %s | %s | %s | %s | %s | %s | %s |" % ((what,) + a + b))

    def scale(v, f):
        return v * f if v is not None else None

    du, ds = g("echod", "direct", "cpu_fixed"), g("echod", "direct", "cpu_sat")
    check("echod direct: unary CPU µs/call ≤ 3.0", (du, 3.0), (ds, 3.0))
    check("echod direct: unary ≤ 1/3 grpc-java direct",
          (du, scale(g("java", "direct", "cpu_fixed"), 1 / 3)),
          (ds, scale(g("java", "direct", "cpu_sat"), 1 / 3)))
    check("echod direct: unary ≤ 1/5 grpc C++ callback",
          (du, scale(g("cpp", "callback", "cpu_fixed"), 1 / 5)),
          (ds, scale(g("cpp", "callback", "cpu_sat"), 1 / 5)))
    db = g("echod", "direct", "cpu_bidi")
    check("echod direct: bidi CPU µs/msg ≤ 1.0", (db, 1.0))
    for arm in [a for a in ECHOD_ARMS if a != "direct"]:
        check("echod %s: unary ≤ 2.5× echod direct" % arm,
              (g("echod", arm, "cpu_fixed"), scale(du, 2.5)),
              (g("echod", arm, "cpu_sat"), scale(ds, 2.5)))
        check("echod %s: bidi ≤ 2.5× echod direct" % arm, (g("echod", arm, "cpu_bidi"), scale(db, 2.5)))
        pk, pa = counterpart(arm)
        check("echod %s: unary ≤ 1/3 grpc-java %s" % (arm, pa),
              (g("echod", arm, "cpu_fixed"), scale(g(pk, pa, "cpu_fixed"), 1 / 3)),
              (g("echod", arm, "cpu_sat"), scale(g(pk, pa, "cpu_sat"), 1 / 3)))
    idle = g("echod", "direct", "idle_rss_kb")
    check("echod direct: idle RSS MiB ≤ 8", (scale(idle, 1 / 1024), 8.0))
    for arm in ECHOD_ARMS:
        check("echod %s: RSS KiB per idle connection ≤ 64" % arm,
              (g("echod", arm, "rss_per_conn_kb"), 64.0))
    out = ["### Targets (issue 6), on the medians", "",
           "| target | fixed rate | limit | | saturation | limit | |",
           "|---|---:|---:|---|---:|---:|---|"] + rows
    out.append("")
    out.append("The issue defines the CPU targets at the same fixed offered rate; the saturation "
               "columns apply them to `sat CPU µs/call` for comparison. The Java counterpart of "
               "`workstealing` and `virtual` (virtual threads) is not among the peers (Debian's "
               "JDK 17 has none): both are held against grpc-java `default`, the cached pool. "
               "`fixed` (threads: 0 = 1 CPU "
               "here) is held against grpc-java `fixed:1`.")
    return out


def print_report(args, argv, plan, measured, names, summ, checks, notes, results, build_cmds,
                 machine, elapsed):
    print("## echod vs grpc-java vs grpc C++: one core each (server CPU %s, load CPU %s)\n" % (
        args.server_cpu, args.client_cpu))
    print(render(measured, names, summ, args))
    print()
    if checks:
        print("### Correctness (grpcio, before measuring)\n")
        for key in plan:
            ok, text = checks[key]
            print("- %s %s: %s" % (names[key][0], names[key][1],
                                   text.splitlines()[-1] if ok else "**FAILED, not measured**: " +
                                   text.replace("\n", " ")))
        print()
    problems = [(names[k], e) for k in measured for e in summ[k]["errors"] + summ[k]["warnings"]]
    if problems or notes:
        print("### Problems and notes\n")
        for n in notes:
            print("- " + n)
        for (srv, arm), e in problems:
            print("- **%s %s**: %s" % (srv, arm, e.replace("\n", "\n  ")))
        print()
    print("### Commands\n")
    print("```")
    print("cd %s" % paths.ROOT)
    print(shlex.join(["bench/compare"] + argv))
    for c in build_cmds:
        print(shlex.join(c))
    ex = {}
    for r in results:
        ex.setdefault(r["kind"], r)
    for kind, r in ex.items():
        print("# %s, e.g.:" % kind)
        print(r["server_cmd"])
    r = ex.get("echod") or next(iter(ex.values()), None)
    if r:
        for ph in ("warmup", "fixed", "sat"):
            if get(r, ph, "cmd"):
                print(r[ph]["cmd"])
        if get(r, "bidi", "cmd"):
            print(r["bidi"]["cmd"])
    print("# body %s = %s (gRPC frame of EchoRequest{message: \"hello\"}); bidi messages: "
          "EchoRequest{message: \"SS:NNNNNNNNNNN\"} (stream, sequence), 20 streams, one connection"
          % ("unary.grpc", h2load.REQUEST_FRAME.hex()))
    print("# ports are picked free for each start; every server is stopped with SIGTERM")
    print("```\n")
    print("Machine: nproc %d, kernel %s, %s; %s. Load average %.2f at start, %.2f at end; %.0f s "
          "in all." % (machine["nproc"], machine["kernel"], machine["cpu_model"] or "cpu ?",
                       machine["perf"], machine["loadavg"][0], machine["loadavg_end"][0], elapsed))
    print()
    print("Noise: a shared 2-vCPU VM. The server has CPU %s to itself only as far as the rest of "
          "the machine allows (other sessions' jobs, kernel softirq work for loopback traffic, "
          "and the hypervisor all land there too); times move by 10-30%% between runs, more "
          "when the load average is above ~2. Every arm is measured in each round, interleaved, "
          "and the medians are shown; look at the spread table before trusting a small "
          "difference, and use bench/callgrind-check for instruction counts, which do not "
          "depend on the load. CPU per call at a fixed rate includes each server's idle "
          "overhead (JVM GC and JIT threads, timers) spread over the calls of that rate." %
          args.server_cpu)


def summaries(keys, results):
    """{(kind, arm): summarize(its rounds)} for keys."""
    return {k: summarize([r for r in results if (r["kind"], r["arm"]) == k]) for k in keys}


def reprint(args, data):
    """The report again from a --json file (args: its argv parsed again)."""
    results = data["runs"]
    for r in results:
        r.setdefault("warnings", [])
    order = []
    for r in results:
        if (r["kind"], r["arm"]) not in order:
            order.append((r["kind"], r["arm"]))
    plan = [tuple(x.split(":", 1)) for x in data.get("plan", [])] or order
    checks = {tuple(k.split(":", 1)): tuple(v) for k, v in data.get("checks", {}).items()}
    print_report(args, data["argv"], plan, order, names(plan), summaries(order, results), checks,
                 data.get("notes", []), results, data.get("build_cmds", []), data["machine"],
                 data["elapsed_s"])
