"""The second witness (bench/study --witness): the study's protocol against the real grpc-java
here, each of its arms beside echod's counterpart, on the same machine under the same load.

The grpc-java 1.41 peer of ../shared/peers (echodlib.peers) runs `direct` (directExecutor():
handlers on the Netty event loop), `default` (grpc's cached pool) and `fixed:N`
(newFixedThreadPool(N)) on the server CPU as echod does (the CPU model's prefix: taskset, or
the quota's cgroup), with flat work per call and per bidi message at the run's scale
(`-Dpeer.cpu_us=N`: N is the run's calibrated work.defaults.cpu_us, or under --model the
synthetic µs the model charges a direct call; a run of witness arms alone calibrates N on the
peer's direct arm itself). After a warm-up that lets its JIT finish (jvm.warm_up: the compiler
threads below WARMUP_THRESHOLD of its CPU), each arm goes through the same fixed-rate grid and
unary ramp as echod's arms (the same k6 scripts and h2load runs; not the stream ramps, which
issue 30's witness does not ask for and which would add ~8 minutes an arm: F5 is not measured).
The peer has no /metrics: its calls are the drivers' counts, its CPU its process clock.

Pairs (PAIRS): grpc-java direct beside echod direct, default beside cached (both a cached
pool), fixed:1 beside fixed (one thread on one CPU). Findings: the five computed from the
witness arms as from echod's (label LABEL), with grpc-java's default pool in the role of the
study's virtual-thread arm (JDK 17 has none) and no drain arm (F4 not measured).
"""

import os
import re

from .. import findings as F, fmt, jvm, peers
from . import log
from .figures import measured_figures, step_at

LABEL = "witness:grpc-java"
DEFAULT_ARMS = "direct,default,fixed:1"
PAIRS = {"direct": "direct", "default": "cached", "fixed:1": "fixed"}
# the witness arm in each role of the findings (findings.compute's arm names)
ROLES = {"direct": "direct", "virtual": "default"}
WARMUP_THRESHOLD = 0.02  # the compiler threads' share of the JVM's CPU in a warm-up chunk


def label(arm):
    """The witness arm's name in the results, tables and reports."""
    return "java-" + arm


def add_arguments(ap):
    """bench/study's witness options."""
    ap.add_argument("--witness", nargs="?", const=DEFAULT_ARMS, metavar="ARMS",
                    help="also run the grpc-java peer's arms (%s without ARMS: direct, "
                    "default = its cached pool, fixed:N) through the same experiments, each "
                    "beside its echod counterpart (direct, cached, fixed): a witness column in "
                    "the findings and a per-step table; needs Java and the grpc-java jars "
                    "(exit 2 without). With --arms '' the witness arms alone, calibrated on the "
                    "peer's direct" % DEFAULT_ARMS)
    ap.add_argument("--peers-build", default="/tmp/echod-peers",
                    help="where the peer is built (%(default)s)")
    ap.add_argument("--peers-dir", default=peers.PEERS_DIR, help="the peers' sources "
                    "(%(default)s)")


def prepare(args, has_echod_arms):
    """Why the witness cannot run (None when it can, or when there is none): its arms in
    args.witness (a list), the peer built."""
    if not args.witness:
        args.witness = []
        return None
    arms = [a.strip() for a in args.witness.split(",") if a.strip()]
    for a in arms:
        if a not in ("direct", "default") and not re.fullmatch(r"fixed:[1-9]\d*", a):
            return "--witness: %r is not a grpc-java arm (direct, default, fixed:N)" % a
    if not arms:
        return "--witness: no arm"
    if not has_echod_arms and args.cost.units:
        return ("--witness without echod arms runs flat work on the peer: --model has no "
                "meaning there")
    why = peers.unusable(args.peers_dir)
    if why:
        return "--witness: the grpc-java peer cannot run here: %s" % why
    try:
        peers.build(args.peers_build, peers_dir=args.peers_dir, log=log)
    except peers.PeerError as e:
        return "--witness: %s" % e
    args.witness = arms
    return None


def cpu_us(run):
    """The peer's flat work per call: the run's cpu_us, or the model's direct call."""
    return int(round(run.cost.per_call(run.x)))


def warm_up(run, target):
    """The JIT's warm-up (jvm.warm_up) on closed-loop calls that do no work (peers.NO_WORK:
    thousands a second, so the JIT reaches its invocation counts in seconds)."""
    quick = run.plan.quick
    return jvm.warm_up(target.pid, lambda s: run.drivers.closed_loop(target, s, 4, 16,
                                                                     peers.NO_WORK),
                       chunk_s=2 if quick else 5, max_s=6 if quick else 90,
                       threshold=WARMUP_THRESHOLD, log=log)


def transport(log_text):
    """The peer's Netty transport from its start line (nio or epoll), or None."""
    m = re.search(r"transport=(\w+)", log_text or "")
    return m.group(1) if m else None


# ---------------------------------------------------------------------------- figures

def role_results(wres):
    """The witness results under findings.compute's arm names (ROLES) and those arms."""
    res = {role: wres[label(arm)] for role, arm in ROLES.items() if label(arm) in wres}
    return res, list(res)


def findings(wres, cap, cpu):
    """The five findings from the witness arms (LABEL)."""
    res, arms = role_results(wres)
    return F.compute(measured_figures(res, arms, cap, cpu), LABEL)


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


# ---------------------------------------------------------------------------- outputs

def outputs(run, found, variant, out, problems):
    """The witness's part of a run's outputs: its experiments' reports in out/witness, its
    findings beside echod's, the per-step comparison. Returns (study.md's section, study.json's
    `witness`), ([], None) without witness arms."""
    if not run.wres:
        return [], None
    from .outputs import experiment_reports, ramp_summaries  # outputs imports this module
    from .runner import call_problems
    warms = list(run.wres)
    reports = experiment_reports(run.wres, warms, os.path.join(out, "witness"),
                                 run.args.p99_threshold_ms, problems)
    ramp_summaries(run.wres, warms, reports)
    problems += call_problems(run.wres, warms) + run.regime.problems(run.wres, warms)
    n = cpu_us(run)
    found_w = findings(run.wres, run.cap, n)
    runs = [(variant, found), (LABEL, found_w)] if run.arms else [(LABEL, found_w)]
    merged = F.merge(runs)
    rows = comparison(run.res, run.wres, run.witness, run.plan, unsettled(run.wrun))
    # every peer the witness started: with the grid's stalls its grid ran on a peer of its own
    # (name-stalls), whose warm-up the server-wide stalls can keep from settling
    info = {a: dict(v) for a, v in run.wrun.items()}
    for a in info:
        with open(info[a].pop("log"), errors="replace") as fh:
            info[a]["transport"] = transport(fh.read(4000))
    md = ["## Witness: grpc-java on this machine", "",
          "The grpc-java 1.41 peer (../shared/peers, Netty transport %s) through the same "
          "experiments, on the same CPU model, with flat work `-Dpeer.cpu_us=%d` per call and per "
          "bidi message (%s), each arm after a warm-up of its JIT (closed-loop calls until the "
          "compiler threads took under %.0f%% of its CPU: %s). Its calls are k6's and h2load's "
          "counts (no /metrics), its CPU its process clock. Pairs: %s." % (
              "/".join(sorted({i["transport"] or "?" for i in info.values()})), n,
              "the run's calibrated cost" if run.arms else "calibrated on the peer's direct arm",
              100 * WARMUP_THRESHOLD, "; ".join(
                  "%s %d s%s" % (a, i["warmup"]["seconds"], "" if i["warmup"]["settled"] else
                                 " (**not settled**: compiler share %s at the end)" %
                                 fmt.num(100 * (i["warmup"]["chunks"][-1] or 0), 1))
                  for a, i in info.items()),
              ", ".join("grpc-java %s / echod %s" % (a, PAIRS[a]) for a in run.witness)), "",
          "### Findings, echod and grpc-java", "",
          "The five findings from the witness arms as from echod's: grpc-java `direct` in the "
          "direct role, its `default` (cached) pool in the virtual-thread arm's (JDK 17 has no "
          "virtual threads); the peer has no drain arm, so F4 is not measured there.", ""]
    md += F.merged_table(merged, [l for l, _ in runs])
    md += ["", "### Step by step, grpc-java / echod", ""] + comparison_table(rows)
    md += ["", "Plateau and knee (the ramps' reports):", ""] + \
        plateau_table(run.res, run.wres, run.witness, run.cap) + [""]
    doc = {"label": LABEL, "arms": run.witness, "pairs": {a: PAIRS.get(a) for a in run.witness},
           "roles": ROLES, "cpu_us": n, "runs": info, "results": run.wres,
           "findings": found_w, "findings_merged": merged, "comparison": rows}
    return md, doc
