"""The second witness (bench/study --witness): the study's protocol against the real grpc-java
here, each of its arms beside echod's counterpart, on the same machine under the same load.

The grpc-java 1.41 peer of ../shared/peers (echodlib.peers) runs `direct` (directExecutor():
handlers on the Netty event loop), `direct-drain` (direct with the study's drainNow prototype:
the WriteQueue drained at each read batch's end, channelReadComplete), `virtual`
(newVirtualThreadPerTaskExecutor(), JDK 21: the study's virtual-thread arm), `default` (grpc's
cached pool) and `fixed:N` (newFixedThreadPool(N)) on the server CPU as echod does (the CPU
model's prefix: taskset, or the quota's cgroup), with flat work per call and per bidi message at
the run's scale (`-Dpeer.cpu_us=N`: N is the run's calibrated work.defaults.cpu_us, or under
--model the synthetic µs the model charges a direct call, or with --model-scale flat the flat
work alone, its own machinery in the units' place; a run of witness arms alone calibrates
N on the peer's direct arm itself). Without ARMS, --witness runs the study's three (DEFAULT_ARMS).

The JVM (JDK): every witness arm runs on the JDK 21 of the peers dir's install-jdk21.sh (the
study's JVM; PEER_JDK=21) when it is complete (peers.jdk21_missing); without it an arm that needs
it (`virtual`) cannot run (prepare: bench/study exits 2 naming install-jdk21.sh), and the others
run on the system's JDK 17, which study.json's witness section records (`jdk`, and per peer the
`java` version it printed at start).

After a warm-up that lets its JIT finish (jvm.warm_up: the compiler threads below
WARMUP_THRESHOLD of its CPU), each arm goes through the same fixed-rate grid and unary ramp as
echod's arms (the same k6 scripts and h2load runs), and the arms in the findings' direct and
virtual roles through the stream ramps as well (STREAM_ROLES: F5's witness; the peer's flat work
applies per bidi message, so their steps are fractions of the unary capacity, as echod's under
the flat cost). The peer has no /metrics: its calls are the drivers' counts, its CPU its process
clock. Over each peer's measured run (everything after its warm-up) MeasuredRun reads its JVM:
the compiler threads' share of its CPU and its GC pauses (-Xlog:gc*, jvm.pause_log_option), and
an arm whose JIT was still compiling (COMPILER_MAX_SHARE) or whose collector stopped it for
more than GC_MAX_SHARE of the run is flagged: the findings it takes a role in are not judged
(computed without it: "not measured", with the reason in `not_judged`).

Pairs (PAIRS): each grpc-java arm beside the echod arm of the same dispatch: direct, direct-drain
and virtual beside echod's arms of those names, default beside cached (both a cached pool),
fixed:1 beside fixed (one thread on one CPU). Findings: the five computed from the witness arms
as from echod's (label LABEL), with the roles of ROLES: the witness's `virtual` in the study's
virtual-thread arm's (its `default` pool when the run has no `virtual`), `direct-drain` in the
drain's (F4).
"""

import os
import re
import shutil
import time

from .. import findings as F, fmt, jvm, peers, procstat
from . import log, mux
from .figures import measured_figures, step_at

LABEL = "witness:grpc-java"
DEFAULT_ARMS = "direct,direct-drain,virtual"
PAIRS = {"direct": "direct", "direct-drain": "direct-drain", "virtual": "virtual",
         "default": "cached", "fixed:1": "fixed"}
# the findings' arm names (findings.compute) and the witness arms that can take each role, the
# first one the run has
ROLES = {"direct": ("direct",), "virtual": ("virtual", "default"),
         "direct-drain": ("direct-drain",)}
STREAM_ROLES = ("direct", "virtual")  # F5 compares these two arms' stream ramps
WARMUP_THRESHOLD = 0.02  # the compiler threads' share of the JVM's CPU in a warm-up chunk
# Flags (flags()). The CPU-per-call and plateau figures the findings compare repeat within 2%
# run to run (their noise floors in findings.py): a JVM that spent more than that of its CPU
# compiling over the measured run, or was stopped by its collector for more than 3% of it, can
# move them by more than the noise, so the finding would judge the JIT or the heap, not the
# dispatch. The compiler's limit is the warm-up's own (the JIT is "settled" below it); GC
# pauses stop every thread and add to the tail as well, and a few short young collections are
# normal at any heap (the 1-CPU JVM's SerialGC), hence a little above the floor.
COMPILER_MAX_SHARE = WARMUP_THRESHOLD
GC_MAX_SHARE = 0.03


def label(arm):
    """The witness arm's name in the results, tables and reports."""
    return "java-" + arm


def add_arguments(ap):
    """bench/study's witness options."""
    ap.add_argument("--witness", nargs="?", const=DEFAULT_ARMS, metavar="ARMS",
                    help="also run the grpc-java peer's arms (%s without ARMS; also default = "
                    "its cached pool, fixed:N) through the same experiments, each beside its "
                    "echod counterpart (direct, direct-drain, virtual, cached, fixed): a witness "
                    "column in the findings, a per-step table and each arm's GC and compiler "
                    "share; on the JDK 21 of ../shared/peers/install-jdk21.sh (JDK 17 without "
                    "it, except `virtual`, which needs it); needs Java and the grpc-java jars "
                    "(exit 2 without). With --arms '' the witness arms alone, calibrated on the "
                    "peer's direct" % DEFAULT_ARMS)
    ap.add_argument("--peers-build", default="/tmp/echod-peers",
                    help="where the peer is built (%(default)s)")
    ap.add_argument("--peers-dir", default=peers.PEERS_DIR, help="the peers' sources "
                    "(%(default)s)")


def prepare(args, has_echod_arms):
    """Why the witness cannot run (None when it can, or when there is none): its arms in
    args.witness (a list), its JVM in args.witness_jdk ({"version": 21 or 17, "why": why not
    21, or None}), the peer built."""
    args.witness_jdk = None
    if not args.witness:
        args.witness = []
        return None
    arms = []
    for a in (a.strip() for a in args.witness.split(",")):
        if a and a not in arms:
            arms.append(a)
    for a in arms:
        if a not in ("direct", "direct-drain", "virtual", "default") and \
                not re.fullmatch(r"fixed:[1-9]\d*", a):
            return ("--witness: %r is not a grpc-java arm (direct, direct-drain, virtual, "
                    "default, fixed:N)" % a)
    if not arms:
        return "--witness: no arm"
    if not has_echod_arms and args.cost.units:
        return ("--witness without echod arms runs flat work on the peer: --model has no "
                "meaning there")
    why = peers.unusable(args.peers_dir)
    if why:
        return "--witness: the grpc-java peer cannot run here: %s" % why
    no21 = peers.jdk21_missing(args.peers_dir)
    need = [a for a in arms if a in peers.JDK21_ARMS]
    if no21 and need:
        return "--witness: the grpc-java arm%s %s need%s a JDK 21: %s" % (
            "" if len(need) == 1 else "s", ", ".join(need), "s" if len(need) == 1 else "", no21)
    if no21:
        log("note: the witness arms run on JDK 17, not the study's JDK 21: %s" % no21)
    args.witness_jdk = {"version": 17 if no21 else 21, "why": no21}
    try:
        peers.build(args.peers_build, peers_dir=args.peers_dir, log=log)
    except peers.PeerError as e:
        return "--witness: %s" % e
    args.witness = arms
    return None


def jdk(args, arm):
    """The JDK (21 or 17) the witness runs `arm` on: prepare's choice (`virtual` is 21)."""
    if arm in peers.JDK21_ARMS:
        return 21
    return ((getattr(args, "witness_jdk", None) or {}).get("version")) or 17


def roles(arms):
    """{findings.compute's arm name: the witness arm in that role} among `arms` (ROLES)."""
    out = {}
    for role, cands in ROLES.items():
        arm = next((a for a in cands if a in arms), None)
        if arm:
            out[role] = arm
    return out


def stream_arms(arms):
    """The witness arms that run the stream ramps: those in STREAM_ROLES."""
    r = roles(arms)
    return {r[k] for k in STREAM_ROLES if k in r}


def cpu_us(run):
    """The peer's flat work per call: the run's cpu_us, or the model's direct call; over flat
    work (--model-scale flat) the flat work alone, the peer's own machinery in the units' place."""
    return int(round(run.x if run.cost.over_flat() else run.cost.per_call(run.x)))


def warm_up(run, target):
    """The JIT's warm-up (jvm.warm_up) on closed-loop calls that do no work (peers.NO_WORK:
    thousands a second, so the JIT reaches its invocation counts in seconds)."""
    quick = run.plan.quick
    return jvm.warm_up(target.pid, lambda s: run.drivers.closed_loop(target, s, 4, 16,
                                                                     peers.NO_WORK),
                       chunk_s=2 if quick else 5, max_s=6 if quick else 90,
                       threshold=WARMUP_THRESHOLD, log=log)


class MeasuredRun:
    """A peer's JVM over its measured run (after its warm-up), read from outside it: the
    compiler threads' share of its CPU (procstat.ThreadWindow by jvm.thread_group) and its
    pauses from its -Xlog file (jvm.pause_log_option: GC and safepoints):

        m = MeasuredRun(pid, pause_log)
        ... the experiments ...
        m.close() -> {"seconds", "cpu_s", "compiler_share", "vm_share", "pool_share",
                      "gc": {count, total_s, share, max_ms, p99_ms}, "safepoint": {...}}"""

    def __init__(self, pid, pause_log):
        self.pause_log = pause_log
        self.t0 = time.time()
        self.window = procstat.ThreadWindow(pid, jvm.thread_group)

    def close(self):
        w = self.window.close()
        t1 = time.time()
        events = jvm.read_pauses(self.pause_log, self.t0, t1) if self.pause_log else []
        summary = jvm.pause_summary(events, w.wall_s)

        def share(group):
            g = w.groups.get(group)
            return g["cpu_s"] / w.cpu_s if g and w.cpu_s else None
        out = {"seconds": w.wall_s, "cpu_s": w.cpu_s, "compiler_share": jvm.compiler_share(w),
               "vm_share": share("VM"), "pool_share": share("pool"),
               "pause_log": bool(self.pause_log and os.path.exists(self.pause_log))}
        for kind in ("gc", "safepoint"):
            k = summary[kind]
            total = k["share"] * w.wall_s if k["share"] is not None else None
            out[kind] = {"count": k["count"], "total_s": total, "share": k["share"],
                         "max_ms": k["max_ms"], "p99_ms": k["p99_ms"]}
        return out


def jvm_text(m):
    """A measured run's JVM in a log line."""
    return ("GC %d pauses, %s s = %s%% of %.0f s; compiler threads %s%% of its CPU" % (
        m["gc"]["count"], fmt.num(m["gc"]["total_s"], 2), fmt.num(pct(m["gc"]["share"]), 1),
        m["seconds"], fmt.num(pct(m["compiler_share"]), 1)))


def pct(v):
    return None if v is None else 100.0 * v


def flag_reasons(m):
    """Why a measured run's JVM is flagged (COMPILER_MAX_SHARE, GC_MAX_SHARE): [] when not."""
    if not m:
        return ["its JVM was not measured"]
    out = []
    if m["compiler_share"] is not None and m["compiler_share"] > COMPILER_MAX_SHARE:
        out.append("compiler threads %.1f%% of its CPU over the measured run (over %.0f%%: the "
                   "JIT had not settled)" % (100 * m["compiler_share"], 100 * COMPILER_MAX_SHARE))
    if m["gc"]["share"] is not None and m["gc"]["share"] > GC_MAX_SHARE:
        out.append("GC pauses %.1f%% of the measured run (over %.0f%%)" % (
            100 * m["gc"]["share"], 100 * GC_MAX_SHARE))
    if not m.get("pause_log"):
        out.append("no GC log")
    return out


def flags(wrun):
    """{witness label: [why]} of the flagged arms: each peer's measured run (an arm with the
    grid's stalls had two peers, name and name-stalls: either flags it)."""
    out = {}
    for name, r in wrun.items():
        base = name[:-len("-stalls")] if name.endswith("-stalls") else name
        why = flag_reasons(r.get("jvm"))
        if why:
            out.setdefault(base, []).extend(
                ("its grid's peer (stalls): %s" % w) if name != base else w for w in why)
    return out


def gc_log_name(name):
    """The file name of a peer's GC log (-Xlog's file=: its options are colon-separated, so
    fixed:N's colon is a dash there)."""
    return "%s-gc.log" % name.replace(":", "-")


def transport(log_text):
    """The peer's Netty transport from its start line (nio or epoll), or None."""
    m = re.search(r"transport=(\w+)", log_text or "")
    return m.group(1) if m else None


# ---------------------------------------------------------------------------- figures

def arms_of(wres):
    """The witness arms whose results `wres` holds (by label; not a grid's own peer)."""
    return [k[len(label("")):] for k in wres if k.startswith(label(""))
            and not k.endswith("-stalls")]


def role_results(wres, arms=None, flagged=()):
    """The witness results under findings.compute's arm names (roles() of `arms`, by default
    those wres holds), leaving out the `flagged` arms (labels), and those role names."""
    arms = arms_of(wres) if arms is None else arms
    res = {role: wres[label(arm)] for role, arm in roles(arms).items()
           if label(arm) in wres and label(arm) not in flagged}
    return res, list(res)


def findings(wres, cap, cpu, flagged=None, arms=None, regime=None, sources=None):
    """The five findings from the witness arms (LABEL; `arms`, by default those wres holds),
    in the run's `regime` with the inputs `sources` set from published figures (findings.
    compute's), without the `flagged` arms ({label: [why]}): a finding that one of them takes a
    role in is "not measured" where it would have been measured, and says why in `not_judged`
    {"why", "verdict": what it would read, "parts": the parts not judged, "measured": {part
    key: what it would read}}."""
    flagged = flagged or {}

    def without(labels):
        res, names = role_results(wres, arms, labels)
        return F.compute(measured_figures(res, names, cap, cpu, regime=regime), LABEL, sources)
    found_all = without(())
    if not flagged:
        return found_all

    def lost(fd, fa):
        return [i for i, (p, q) in enumerate(zip(fd["parts"], fa["parts"]))
                if p["measured"] is None and q["measured"] is not None]
    found = without(flagged)
    # which flagged arm each finding lost (one left out at a time)
    by_arm = {a: without([a]) for a in flagged}
    for k, (fd, fa) in enumerate(zip(found, found_all)):
        parts = lost(fd, fa)
        if parts:
            who = [a for a in flagged if lost(by_arm[a][k], fa)] or list(flagged)
            fd["not_judged"] = {"arms": who, "verdict": fa["verdict"],
                                "why": "; ".join("%s flagged: %s" % (a, ", ".join(flagged[a]))
                                                 for a in who),
                                "parts": [fa["parts"][i]["figure"] for i in parts],
                                "measured": {fa["parts"][i]["key"]: fa["parts"][i]["measured"]
                                             for i in parts}}
    return found


def _fig(step):
    """(p99 ms, goodput/s, CPU µs/call) of a step."""
    if not step:
        return None, None, None
    answered = step.get("answered")
    if answered is None:
        answered = step["ok"]
    return step["p99_ms"], answered / step["duration_s"], step.get("cpu_us_per_call")


def unsettled(wrun):
    """The witness arms (labels) whose grid ran on a peer whose JIT had not settled (its own
    peer with the grid's stalls, name-stalls, else the arm's): their grid's CPU includes the
    compiler threads'."""
    out = set()
    for name, r in wrun.items():
        if not r.get("warmup", {}).get("settled", True):
            base = name[:-len("-stalls")] if name.endswith("-stalls") else name
            if name.endswith("-stalls") or base + "-stalls" not in wrun:
                out.add(base)
    return out


def comparison(res, wres, witness_arms, plan, unsettled_jit=()):
    """Per pair and step (the fixed-rate grid by driver, the ramp by multiple of capacity):
    {"witness", "echod", "step", "offered", "echod_fig", "witness_fig", "ratio"}, each figure
    (p99 ms, goodput/s, CPU µs/call), the ratio grpc-java / echod. A grid step of a witness in
    `unsettled_jit` is named so (its CPU includes the compiler threads')."""
    rows = []
    for arm in witness_arms:
        w, e = label(arm), PAIRS.get(arm)
        if w not in wres:
            continue
        er = res.get(e) or {"fixed": [], "ramp": []}
        for ws in wres[w]["fixed"]:
            drv = ws["driver"].split(" ")[0]
            es = next((s for s in er["fixed"] if s["driver"].split(" ")[0] == drv), None)
            step = "fixed 10%% (%s%s)" % (drv, ", JIT not settled" if w in unsettled_jit else "")
            rows.append(_row(w, e if e in res else None, step, ws["offered"], es, ws))
        for i, frac in enumerate(plan.ramp_fractions):
            ws = step_at(wres, w, i)
            if ws is None:
                continue
            es = step_at(res, e, i) if e in res else None
            rows.append(_row(w, e if e in res else None, "ramp %.2gx" % frac, ws["offered"], es,
                             ws))
    return rows


def stream_comparison(res, wres, witness_arms, plan):
    """comparison()'s rows for the stream ramps (the witness arms that ran them), by stream
    count and step (a multiple of the stream capacity): p99 and goodput in messages/s (a stream
    step has no CPU of its own)."""
    rows = []
    for arm in witness_arms:
        w, e = label(arm), PAIRS.get(arm)
        if w not in wres:
            continue
        for run in wres[w].get("streams") or []:
            erun = next((r for r in (res.get(e) or {}).get("streams") or []
                         if r["streams"] == run["streams"]), None)
            for i, ws in enumerate(run["steps"]):
                es = erun["steps"][i] if erun and i < len(erun["steps"]) else None
                frac = plan.stream_fractions[i] if i < len(plan.stream_fractions) else None
                rows.append(_row(w, e if erun else None, "streams x%d %sx" % (
                    run["streams"], "?" if frac is None else "%g" % frac), ws["offered"], es,
                    ws))
    return rows


def _row(w, e, step, offered, es, ws):
    ef, wf = _fig(es), _fig(ws)
    return {"witness": w, "echod": e, "step": step, "offered": offered,
            "echod_fig": dict(zip(("p99_ms", "goodput", "cpu_us"), ef)),
            "witness_fig": dict(zip(("p99_ms", "goodput", "cpu_us"), wf)),
            "ratio": dict(zip(("p99_ms", "goodput", "cpu_us"),
                              (fmt.ratio(b, a) for a, b in zip(ef, wf))))}


def comparison_table(rows):
    out = ["| grpc-java | echod | step | offered/s | p99 ms echod | grpc-java | ratio | goodput/s "
           "echod | grpc-java | ratio | CPU µs/call echod | grpc-java | ratio |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = []
        for k in ("p99_ms", "goodput", "cpu_us"):
            cells += [fmt.num(r["echod_fig"][k], 2, 0), fmt.num(r["witness_fig"][k], 2, 0),
                      fmt.num(r["ratio"][k], 2)]
        out.append("| %s | %s | %s | %.0f | %s |" % (r["witness"], r["echod"] or "-", r["step"],
                                                     r["offered"], " | ".join(cells)))
    return out


def plateau_table(res, wres, witness_arms, cap):
    out = ["| grpc-java | plateau goodput/s | knee offered/s | echod | plateau | knee | "
           "plateau, grpc-java / echod |", "|---|---:|---:|---|---:|---:|---:|"]
    for arm in witness_arms:
        w, e = label(arm), PAIRS.get(arm)
        if w not in wres:
            continue
        ws = wres[w].get("ramp_summary") or {}
        es = (res.get(e) or {}).get("ramp_summary") or {}
        wp, ep = ws.get("plateau") or ws.get("peak"), es.get("plateau") or es.get("peak")
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            w, fmt.num(wp, 0), fmt.num(ws.get("knee"), 0), e if e in res else "-",
            fmt.num(ep, 0), fmt.num(es.get("knee"), 0), fmt.num(fmt.ratio(wp, ep), 2)))
    return out


def jvm_table(info, flagged):
    """A row per peer the witness started: its JVM, warm-up, and over its measured run the
    compiler threads' share of its CPU, its GC pauses and safepoints, and whether its arm is
    flagged."""
    out = ["| peer | JVM | warm-up | measured s | compiler share of CPU | GC pauses | GC s | "
           "GC share | GC max ms | safepoint share | flagged |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, i in info.items():
        m = i.get("jvm")
        base = name[:-len("-stalls")] if name.endswith("-stalls") else name
        wu = i["warmup"]
        out.append("| %s | %s | %d s%s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, i.get("java") or "JDK %s" % i.get("jdk"), wu["seconds"],
            "" if wu["settled"] else " (not settled)",
            fmt.num(m and m["seconds"], 0), "-" if not m else "%s%%" % fmt.num(
                pct(m["compiler_share"]), 1),
            "-" if not m else m["gc"]["count"], fmt.num(m and m["gc"]["total_s"], 2),
            "-" if not m else "%s%%" % fmt.num(pct(m["gc"]["share"]), 2),
            fmt.num(m and m["gc"]["max_ms"], 1),
            "-" if not m else "%s%%" % fmt.num(pct(m["safepoint"]["share"]), 2),
            "**flagged**" if base in flagged else "no"))
    return out


# ---------------------------------------------------------------------------- outputs

def outputs(run, found, variant, out, problems):
    """The witness's part of a run's outputs: its experiments' reports in out/witness (and each
    peer's GC log, PEER-gc.log), its findings beside echod's, the per-step comparison, each
    peer's JVM. Returns (study.md's section, study.json's `witness`), ([], None) without witness
    arms."""
    if not run.wres:
        return [], None
    from .outputs import experiment_reports, ramp_summaries, regime_doc  # outputs imports this
    from .runner import call_problems
    warms = list(run.wres)
    wdir = os.path.join(out, "witness")
    reports = experiment_reports(run.wres, warms, wdir, run.args.p99_threshold_ms, problems)
    ramp_summaries(run.wres, warms, reports)
    problems += call_problems(run.wres, warms) + run.regime.problems(run.wres, warms)
    n = cpu_us(run)
    # every peer the witness started: with the grid's stalls its grid ran on a peer of its own
    # (name-stalls), whose warm-up the server-wide stalls can keep from settling
    info = {a: dict(v) for a, v in run.wrun.items()}
    for a in info:
        with open(info[a].pop("log"), errors="replace") as fh:
            head = fh.read(4000)
        info[a]["transport"] = transport(head)
        info[a]["java"] = peers.java_version(head)
        gc_log = info[a].pop("pause_log", None)
        if gc_log and os.path.exists(gc_log):
            os.makedirs(wdir, exist_ok=True)
            shutil.copyfile(gc_log, os.path.join(wdir, gc_log_name(a)))
    flagged = flags(run.wrun)
    # the run's regime and inputs, as echod's findings had them: the witness runs no ramp at
    # the study's own caps (F4p is echod's alone), and its work is flat
    regime = dict(regime_doc(run), published_caps=False)
    found_w = findings(run.wres, run.cap, n, flagged, run.witness, regime, F.run_sources(
        "flat", None, run.stalls is not None, regime))
    runs = [(variant, found), (LABEL, found_w)] if run.arms else [(LABEL, found_w)]
    merged = F.merge(runs)
    against = F.against(found, found_w) if run.arms else []
    rows = comparison(run.res, run.wres, run.witness, run.plan, unsettled(run.wrun))
    srows = stream_comparison(run.res, run.wres, run.witness, run.plan)
    role = roles(run.witness)
    jdk_doc = dict(getattr(run.args, "witness_jdk", None) or {"version": None, "why": None})
    jdk_doc["versions"] = {a: i["java"] for a, i in info.items()}
    role_text = "; ".join("its `%s` in the %s role" % (a, r) for r, a in role.items())
    missing = [r for r in ROLES if r not in role]
    md = ["## Witness: grpc-java on this machine", "",
          "The grpc-java 1.41 peer (../shared/peers, Netty transport %s, JVM %s) through the same "
          "experiments, on the same CPU model, with flat work `-Dpeer.cpu_us=%d` per call and per "
          "bidi message (%s), each arm after a warm-up of its JIT (closed-loop calls until the "
          "compiler threads took under %.0f%% of its CPU: %s). Its calls are k6's and h2load's "
          "counts (no /metrics), its CPU its process clock. Pairs: %s.%s" % (
              "/".join(sorted({i["transport"] or "?" for i in info.values()})),
              "/".join(sorted({i["java"] or "?" for i in info.values()})), n,
              "the run's calibrated cost" if run.arms else "calibrated on the peer's direct arm",
              100 * WARMUP_THRESHOLD, "; ".join(
                  "%s %d s%s" % (a, i["warmup"]["seconds"], "" if i["warmup"]["settled"] else
                                 " (**not settled**: compiler share %s%% at the end)" %
                                 fmt.num(100 * (i["warmup"]["chunks"][-1] or 0), 1))
                  for a, i in info.items()),
              ", ".join("grpc-java %s / echod %s" % (a, PAIRS.get(a) or "-") for a in run.witness),
              (" Not on the study's JDK 21: %s." % jdk_doc["why"]) if jdk_doc.get("why") else ""),
          "", "### The JVM over each measured run", "",
          "After the warm-up, to the peer's stop: the compiler threads' share of the JVM's CPU "
          "(its threads' clocks), its GC pauses and safepoints (`-Xlog:gc*,safepoint*`, copied to "
          "witness/PEER-gc.log). An arm is flagged when its compiler threads took more than %.0f%% "
          "of its CPU or GC pauses more than %.0f%% of the run (either can move the CPU-per-call "
          "and plateau ratios by more than their noise floors): the findings it takes a role in "
          "are not judged." % (100 * COMPILER_MAX_SHARE, 100 * GC_MAX_SHARE), ""]
    md += jvm_table(info, flagged)
    md += ["", "### Findings, echod and grpc-java", "",
           "The five findings from the witness arms as from echod's: %s%s." % (
               role_text or "no arm in a role", "; no arm in the %s role, so what needs it is "
               "not measured there" % " or ".join(missing) if missing else ""), ""]
    if against:
        md += ["Each part three times: the published figure, the real grpc-java's here (and "
               "whether it shows the published effect, by the study's rule), echod's here (and "
               "its verdict against the published figure); then echod's judged against "
               "grpc-java's of this run, the better judge: *matches* within the tolerance "
               "given, else *differs* (findings.AGAINST_TOL). echod's column is this run's %s; "
               "grpc-java's had flat work at the run's scale." % variant, ""]
        md += F.against_table(against)
    else:
        md += F.merged_table(merged, [l for l, _ in runs])
    nj = [fd for fd in found_w if fd.get("not_judged")]
    if nj:
        md += [""] + ["- %s not judged on grpc-java (it would read %s): %s flagged (the JVM "
                      "table above; study.json's witness.flagged says why)." % (
                          fd["id"], fd["not_judged"]["verdict"],
                          ", ".join(fd["not_judged"]["arms"])) for fd in nj]
    mux_rows = []
    if getattr(run.args, "mux", False):
        names = {r: label(a) for r, a in role.items()}
        mux_rows = mux.against(mux.mux_figures(run.res), mux.mux_figures(run.wres, names),
                               [r for r, a in role.items() if label(a) in flagged])
        md += ["", "### Multiplexed clients, echod and grpc-java", "",
               "The multiplexed shape's ratios (study.md's Multiplexed clients), echod's against "
               "grpc-java's of this run:", ""] + mux.against_table(mux_rows) + [""] + \
            mux.steps_table(run.wres, [label(a) for a in run.witness])
    md += ["", "### Step by step, grpc-java / echod", ""] + comparison_table(rows)
    if srows:
        md += ["", "Stream ramps (messages; %s):" % ", ".join(
            sorted(label(a) for a in stream_arms(run.witness))), ""] + comparison_table(srows)
    md += ["", "Plateau and knee (the ramps' reports):", ""] + \
        plateau_table(run.res, run.wres, run.witness, run.cap) + [""]
    doc = {"label": LABEL, "arms": run.witness, "pairs": {a: PAIRS.get(a) for a in run.witness},
           "roles": role, "stream_arms": sorted(stream_arms(run.witness)), "jdk": jdk_doc,
           "cpu_us": n, "runs": info,
           "limits": {"compiler_max_share": COMPILER_MAX_SHARE, "gc_max_share": GC_MAX_SHARE},
           "flagged": flagged, "results": run.wres, "findings": found_w,
           "findings_merged": merged, "against": against, "mux_against": mux_rows,
           "comparison": rows,
           "stream_comparison": srows}
    return md, doc
