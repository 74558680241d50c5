"""The synthetic cost a study run charges per call, and its calibration: the one number x that
puts the direct arm's capacity on one whole CPU at --capacity calls/s."""

import os

import yaml

from .. import paths
from . import log


class Cost:
    """The synthetic cost a run charges, and the one number x its calibration turns.

    flat:  every call and every bidi message burns work.defaults.cpu_us = x, whatever the arm
           does (what bench/study charged before work.model existed);
    model: work.model from a preset (--model, e.g. config/models/grpc-java-study.yaml), every
           unit cost times x. The preset's units are the study's grpc-java at its own scale
           (direct: 2,140 calls/s); scaling them all by one factor keeps every ratio between
           arms and moves direct's capacity to --capacity, which one k6 core can offer past the
           top step. The units are whole µs, so a small one (step, 1 µs) is rounded. The
           background (background_millicores) is a share of the CPU, not a time: it is the
           same share at any scale, so x leaves it as it is;
    model over flat work (scale="flat"): work.model from a preset whose units are a real
           server's machinery as measured (config/models/grpc-java-here.yaml: grpc-java on this
           machine at no work), charged as they are, and x flat work per call and per message
           in the handler on top: what the witness runs (its own machinery, -Dpeer.cpu_us = x)."""

    UNITS = ("call", "step", "handoff", "handoff_wake", "handoff_wake_loop", "message", "wakeup",
             "wakeup_short")
    SCALES = ("units", "flat")

    def __init__(self, model_file=None, scale="units"):
        if scale not in self.SCALES:
            raise ValueError("scale %r: one of %s" % (scale, ", ".join(self.SCALES)))
        self.file = model_file
        self.scale = scale if model_file else "units"
        self.name = "flat"
        self.units = None
        self.background = 0
        self.wake_sleep = None
        if model_file:
            with open(model_file) as fh:
                doc = yaml.safe_load(fh) or {}
            m = (doc.get("work") or {}).get("model") or {}
            self.units = {u: int(m.get(u + "_cpu_us", 0)) for u in self.UNITS}
            self.background = int(m.get("background_millicores", 0))
            # a wake-up's price by the loop's sleep: a time and an exponent, the same at any scale
            self.wake_sleep = {"wakeup_full_sleep_us": int(m.get("wakeup_full_sleep_us", 0)),
                               "wakeup_sleep_exponent": float(m.get("wakeup_sleep_exponent", 0.5))}
            if not m.get("enabled") or not any(self.units.values()):
                raise ValueError("%s: no enabled work.model with unit costs" % model_file)
            self.name = "model:" + os.path.splitext(os.path.basename(model_file))[0]
            if self.scale == "flat":
                self.name += "+flat"

    def over_flat(self):
        return self.scale == "flat"

    def scaled(self, x):
        if self.over_flat():
            return dict(self.units)
        return {u: int(round(v * x)) for u, v in self.units.items()}

    def sets(self, x):
        """echod's --set values for x."""
        if not self.units:
            return ["work.defaults.cpu_us=%d" % x]
        return ["work.defaults.cpu_us=%d" % (x if self.over_flat() else 0), "work.model.enabled=true"] + [
            "work.model.%s_cpu_us=%d" % (u, v) for u, v in self.scaled(x).items()] + [
            "work.model.background_millicores=%d" % self.background] + (
            ["work.model.%s=%s" % kv for kv in self.wake_sleep.items()]
            if self.wake_sleep["wakeup_full_sleep_us"] else [])

    def per_call(self, x):
        """Synthetic µs a direct unary call burns: cpu_us, or call + 6 steps + 2 messages (the
        model charges direct no hand-off)."""
        if not self.units:
            return x
        u = self.scaled(x)
        return (x if self.over_flat() else 0) + u["call"] + 6 * u["step"] + 2 * u["message"]

    def per_message(self, x):
        """Synthetic µs a direct bidi message burns: cpu_us, or one step + 2 messages."""
        if not self.units:
            return x
        u = self.scaled(x)
        return (x if self.over_flat() else 0) + u["step"] + 2 * u["message"]

    def slope(self):
        """d per_call / dx, for the calibration's next guess."""
        if not self.units or self.over_flat():
            return 1.0
        return self.units["call"] + 6 * self.units["step"] + 2 * self.units["message"]

    def first(self, target_us):
        if not self.units or self.over_flat():
            return max(0, int(target_us) - 10 - (self.per_call(0) if self.units else 0))
        return (target_us - 10) / self.slope()

    def next(self, x, target_us, measured_us):
        x = x + (target_us - measured_us) / self.slope()
        return max(0, int(round(x))) if not self.units or self.over_flat() else max(0.001, round(x, 4))

    def describe(self, x):
        if not self.units:
            return "%d µs" % x
        if self.over_flat():
            return "%d µs over the units" % x
        return "x%.3f" % x

    def variant(self, x):
        """(name, text) of the variant, for the findings and study.md."""
        if not self.units:
            return "flat", "flat: work.defaults.cpu_us = %d µs per call and per bidi message" % x
        u = self.scaled(x)
        if self.over_flat():
            return self.name, ("model over flat work: %s as measured: call %d, step %d, handoff %d "
                               "(+%d waking, +%d more the loop), message %d, wake-up %d µs, background "
                               "%d millicores; "
                               "and work.defaults.cpu_us = %d µs per call and per bidi message "
                               "(direct: %d µs a unary call, %d µs a bidi message)" % (
                                   self.relpath(), u["call"], u["step"], u["handoff"],
                                   u["handoff_wake"], u["handoff_wake_loop"], u["message"],
                                   u["wakeup"], self.background, x, self.per_call(x),
                                   self.per_message(x)))
        return self.name, ("model: %s x %.3f: call %d, step %d, handoff %d (+%d waking, +%d more "
                           "the loop), message %d, wake-up %d µs, background %d millicores "
                           "(direct: %d µs a unary call, %d µs a bidi message)" % (
                               self.relpath(), x, u["call"], u["step"], u["handoff"],
                               u["handoff_wake"], u["handoff_wake_loop"], u["message"],
                               u["wakeup"], self.background,
                               self.per_call(x), self.per_message(x)))

    def relpath(self):
        """The preset's path from the repository root (study.json's cost.model), or None."""
        return self.file and os.path.relpath(self.file, paths.ROOT)

    def stream_capacity(self, x, cap):
        """Bidi messages/s direct serves on one CPU, which the stream ramp's steps are fractions
        of: the unary capacity under the flat cost (a message costs what a call does); under the
        model, 1e6 over a message's synthetic µs plus what echod's own work adds to a unary call
        in the same proportion (a slight overstatement: a message carries no headers)."""
        if not self.units:
            return cap
        return cap * self.per_call(x) / self.per_message(x)


def calibrate(cost, capacity, rounds, measure, fixed=None):
    """(x, direct's capacity on one CPU, the rounds) for which the direct arm serves `capacity`
    calls/s on one whole CPU. A call costs its synthetic µs plus echod's own work o, both on
    the server's CPU clock: each round measures CPU per call under a closed-loop probe
    (measure(x, i) -> (CPU seconds, calls, the probe's calls/s)), solves for o and sets x
    again, for at most `rounds` rounds or until within 2%. The CPU clock, not the probe's
    calls/s, so that other load on a shared machine (which stretches wall time, not CPU time)
    does not move the calibration; the probe's calls/s are printed beside it. `fixed` (--cpu-us)
    is measured once, not calibrated."""
    out = []
    target = 1e6 / capacity
    x = fixed if fixed is not None else cost.first(target)
    for i in range(1 if fixed is not None else rounds):
        cpu_s, calls, rps = measure(x, i)
        if not cpu_s or not calls:
            raise RuntimeError("calibration: no server CPU or calls measured")
        per_call = cpu_s / calls * 1e6
        out.append({"cpu_us": x, "cost": cost.describe(x), "cpu_us_per_call": per_call,
                    "capacity": 1e6 / per_call, "probe_calls_per_s": rps,
                    "overhead_us": per_call - cost.per_call(x)})
        log("calibration %d: %s %s -> %.1f µs of server CPU per call: %.0f calls/s on one "
            "CPU (the probe got %.0f/s here)" % (i + 1, "cpu_us" if cost.name == "flat" else
                                                 cost.name, cost.describe(x), per_call,
                                                 1e6 / per_call, rps))
        if fixed is not None or abs(1e6 / per_call - capacity) / capacity < 0.02:
            break
        if i + 1 < rounds:
            x = cost.next(x, target, per_call)
    return x, out[-1]["capacity"], out
