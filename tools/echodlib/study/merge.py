"""bench/study --merge: the findings of several runs (cost variants, regimes) side by side."""

import json
import os

from .. import findings as F, stats
from ..fmt import num
from . import mux
from .figures import measured_figures
from .tables import published_caps_text


def run_sources(doc):
    """The inputs a run set from published figures: as its study.json says (`published_inputs`),
    or for a run from before it said so, from its cost variant and units, grid stalls and
    regime (findings.run_sources)."""
    if doc.get("published_inputs") is not None:
        return {i: v["published"] for i, v in doc["published_inputs"].items()}
    cost = doc.get("cost") or {}
    return F.run_sources(cost.get("variant") or "flat", cost.get("units"),
                         bool(doc.get("grid_stalls")), doc.get("regime"))


def read_run(d, labels):
    """(label, findings, study.json) of the run in directory d: labelled as it labelled itself
    (its cost variant and regime, "flat, capped 1.99 s"; a run from before the regimes by its
    cost variant alone), and by the directory too when an earlier run has that label; a run from
    before bench/study wrote its findings gets them from its results. Every verdict is the
    current rule's (findings.relabel), whatever rule the run's own study.json applied."""
    with open(os.path.join(d, "study.json")) as fh:
        doc = json.load(fh)
    label = doc.get("label") or (doc.get("cost") or {}).get("variant") or "flat"
    if label in labels:
        label = "%s (%s)" % (label, os.path.basename(os.path.normpath(d)))
    sources = run_sources(doc)
    found = doc.get("findings")
    if found is None:
        found = F.compute(measured_figures(doc["results"], doc["arms"], doc["capacity"],
                                           doc["cpu_us"], regime=doc.get("regime")), label,
                          sources)
    return label, F.relabel(found, sources), doc


def merge_runs(dirs, out):
    """Writes out/findings.md and out/findings.json; returns the Markdown."""
    runs, docs = [], []
    for d in dirs:
        label, found, doc = read_run(d, [l for l, _ in runs])
        runs.append((label, found))
        name = os.path.basename(os.path.normpath(d))
        docs.append((d if name in [n for n, _ in docs] else name, doc))
    merged = F.merge(runs)
    labels = [l for l, _ in runs]
    os.makedirs(out, exist_ok=True)
    md = ["# The study's findings by cost variant and regime", "",
          "Runs: %s. Verdicts (by the current rule, whatever a run's own study.md said): %s" % (
              ", ".join("%s: `%s`" % (l, d) for (l, _), d in zip(runs, dirs)), F.rule_text()),
          ""]
    md += F.merged_table(merged, labels)
    notes = [n for l, found in runs for n in F.basis_notes(found, "%s: " % l)]
    if notes:
        md += ["", "What the verdicts rest on:", ""] + notes
    for fd in merged:
        if fd["id"] == "F4p":  # its detail: what the caps alone give, in each run that had it
            md += [""] + ["%s: %s" % (l, published_caps_text(dict(v, published=fd["published"])))
                          for l, v in fd["variants"].items()]
    over_md, over_doc = over_runs_section(docs)
    text = "\n".join(md + over_md) + "\n"
    with open(os.path.join(out, "findings.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(out, "findings.json"), "w") as fh:
        json.dump({"variants": labels, "runs": dirs, "findings": merged,
                   "against_over_runs": over_doc}, fh, indent=1)
    return text


# --------------------------------------------------------------------------- over the runs

OVER_RUNS_NOTE = (
    "Each figure of the witness comparison (study.md's \"echod against grpc-java\" and its "
    "multiplexed table) in every run of one CPU model: echod's / grpc-java's (* where a "
    "grpc-java arm of that run was flagged: its figure is what it would read), then each side's "
    "median over the runs with its range, echod's median over grpc-java's and the verdict: "
    "*matches* within the tolerance (findings.AGAINST_TOL), *within the spread* where the "
    "medians are apart but neither side's runs lie wholly beyond the other's (within the "
    "tolerance), *differs* where they do: one run of a figure cannot tell a mechanism from "
    "its noise, two or more can.")


def cpu_model_of(doc):
    """"pinned" or "quota": a run's study.json's cpu_model_name, or (a run before it was written)
    read from the CPU model's description."""
    if doc.get("cpu_model_name"):
        return doc["cpu_model_name"]
    return "quota" if str(doc.get("cpu_model", "")).startswith("CFS quota") else "pinned"


def witness_rows(doc):
    """[(key, figure, echod, grpc-java, flagged)] of one run's witness comparison: the
    findings' parts (witness.against) and the multiplexed figures (witness.mux_against, whose
    key is one per kind of figure, its title one per step); empty for a run without a
    witness."""
    w = doc.get("witness") or {}
    out = [(p["key"], p["figure"], p["echod"], p["java"], p["java_verdict"] == "not judged")
           for fd in w.get("against") or [] for p in fd["parts"]]
    return out + [(r["key"], "multiplexed: " + r["title"], r["echod"], r["java"],
                   r["verdict"] == "not judged") for r in w.get("mux_against") or []]


def over_runs(runs):
    """[(label, doc)] of runs of one CPU model -> per figure of their witness comparisons:
    {key, figure, tol, runs: {label: (echod, grpc-java, flagged)}, echod, java (medians over the
    runs), echod_range, java_range, ratio, verdict} (OVER_RUNS_NOTE), in first-seen order."""
    rows = {}
    for label, doc in runs:
        for key, figure, e, j, flagged in witness_rows(doc):
            row = rows.setdefault(figure, {"key": key, "figure": figure,
                                           "tol": F.AGAINST_TOL.get(key, 0.05), "runs": {}})
            row["runs"][label] = (e, j, flagged)
    for row in rows.values():
        es = [e for e, _, _ in row["runs"].values() if e is not None]
        js = [j for _, j, _ in row["runs"].values() if j is not None]
        row["echod"], row["java"] = stats.median(es), stats.median(js)
        row["echod_range"] = (min(es), max(es)) if es else None
        row["java_range"] = (min(js), max(js)) if js else None
        row["ratio"], v = F.against_part(row["key"], row["echod"], row["java"])
        if v == "differs" and mux.within_spread(row["echod_range"], row["java_range"], row["tol"]):
            v = mux.WITHIN_SPREAD
        row["verdict"] = v
    return list(rows.values())


def over_runs_table(rows, labels):
    out = ["| figure | tol |" + "".join(" %s |" % l for l in labels) +
           " echod | grpc-java | echod / grpc-java | verdict |",
           "|---|---:|" + "---:|" * len(labels) + "---:|---:|---:|---|"]
    for r in rows:
        cells = []
        for l in labels:
            e, j, flagged = r["runs"].get(l, (None, None, False))
            cells.append("-" if e is None and j is None else "%s / %s%s" % (
                num(e, 2), num(j, 2), "*" if flagged else ""))
        out.append("| %s | ±%g |%s %s | %s | %s | %s |" % (
            r["figure"], r["tol"], "".join(" %s |" % c for c in cells),
            mux.ranged(r["echod"], r["echod_range"]), mux.ranged(r["java"], r["java_range"]),
            num(r["ratio"], 2), r["verdict"]))
    return out


def over_runs_section(runs):
    """study --merge's "echod against grpc-java over the runs": a table per CPU model of the
    runs that had a witness (none without)."""
    md, doc = [], {}
    for model in ("pinned", "quota"):
        of = [(l, d) for l, d in runs if cpu_model_of(d) == model and witness_rows(d)]
        if not of:
            continue
        rows = over_runs(of)
        labels = [l for l, _ in of]
        doc[model] = {"runs": labels, "figures": rows}
        md += ["", "## echod against grpc-java over the runs, %s (%d run%s)" % (
            model, len(of), "" if len(of) == 1 else "s"), "", OVER_RUNS_NOTE, ""]
        md += over_runs_table(rows, labels)
    return md, doc
