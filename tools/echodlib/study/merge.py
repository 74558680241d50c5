"""bench/study --merge: the findings of several runs (cost variants, regimes) side by side."""

import json
import os

from .. import findings as F
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
    """(label, findings) of the run in directory d: labelled as it labelled itself (its cost
    variant and regime, "flat, capped 1.99 s"; a run from before the regimes by its cost
    variant alone), and by the directory too when an earlier run has that label; a run from
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
    return label, F.relabel(found, sources)


def merge_runs(dirs, out):
    """Writes out/findings.md and out/findings.json; returns the Markdown."""
    runs = []
    for d in dirs:
        runs.append(read_run(d, [l for l, _ in runs]))
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
    text = "\n".join(md) + "\n"
    with open(os.path.join(out, "findings.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(out, "findings.json"), "w") as fh:
        json.dump({"variants": labels, "runs": dirs, "findings": merged}, fh, indent=1)
    return text
