"""The fixed-rate grid's stalls (bench/study --grid-stalls; issue 31 item 4, docs/work-model.md
"Stalls").

The study's low-load tails are stalls: at 10% load its p99s are 22-43 times their p50s (virtual
threads p50 ~3.1 ms, p99 65-72 ms; direct ~2.9 ms, 115-137 ms), while its ramp's 400 calls/s step
(20%) has p99s of 9.6-12.8 ms. Measured on the grpc-java peer here at the grid's load (bench/model
stalls, bench/results/model/stalls.md), the JVM's own pauses are 0.1-0.2 safepoints a second of
0.2-1 ms, with no collection in two minutes: they cannot make a 65 ms tail. A per-call blocking
stall (a sleep on the thread that runs the handler: the event loop under direct) does, and it is
what separates direct from the pool: 1% of the calls stalled 100 ms gave direct a 103 ms p99 and
the default pool 10.7 ms; 3% x 350 ms, 1,324 against 354 ms.

So the grid's calls stall as a per-call blocking sleep (echod's sleep_dist `stall`, the peer's
-Dpeer.stall_*): a fraction F of the calls sleeps L on the thread that runs their handler. L is
fitted to the study's virtual-thread p99 (the arm whose stall blocks only its own call): 65 ms
(its p99's midpoint, 68.5 ms, less its p50). F is not in any published figure (above 1% every F
puts that p99 at L); the default, 2%, is the smallest round fraction that puts the pool's p99
inside the stalls with room for a run's spread, and direct's p99 is then the prediction (F2):
docs/work-model.md gives its sensitivity to F. The rule that scales a stall to a run: the same
number of direct calls' service time, L x (the run's direct call / the study's 467 µs), so at
--capacity 400 (2,500 µs a call) 65 ms becomes 348 ms, as the grid's 10% load keeps the same
calls per stall.
"""

STUDY_CALL_US = 467.0  # the study's direct call: 1e6 / 2,140 calls/s
DEFAULT = "0.02:65"


class GridStalls:
    """A fraction of the grid's calls that sleep `ms` at the study's scale (ms of its 467 µs
    calls)."""

    def __init__(self, fraction, ms):
        self.fraction = fraction
        self.ms = ms

    @classmethod
    def parse(cls, text):
        """'F:MS' (e.g. 0.02:65) -> GridStalls, 'none' -> None; ValueError otherwise."""
        if text in (None, "", "none"):
            return None
        try:
            f, ms = (float(x) for x in text.split(":"))
        except ValueError:
            raise ValueError("--grid-stalls takes FRACTION:MS (e.g. %s) or none, got %r"
                             % (DEFAULT, text))
        if not 0 < f < 1 or ms <= 0:
            raise ValueError("--grid-stalls: a fraction in (0, 1) and a positive length, got %r"
                             % text)
        return cls(f, ms)

    def us(self, call_us):
        """The stall at a run whose direct call burns call_us (the scaling rule)."""
        return int(round(self.ms * 1000.0 * call_us / STUDY_CALL_US))

    def headers(self, call_us):
        """The per-call metadata that draws the stall on echod (README, Synthetic work)."""
        return {"echod-sleep-dist": "stall", "echod-sleep-stall-fraction": "%g" % self.fraction,
                "echod-sleep-stall-us": str(self.us(call_us))}

    def k6_env(self, call_us):
        """deploy/k6's WORK_* for the same (common.js workMetadata)."""
        return {"WORK_SLEEP_DIST": "stall", "WORK_SLEEP_STALL_FRACTION": "%g" % self.fraction,
                "WORK_SLEEP_STALL_US": str(self.us(call_us))}

    def doc(self, call_us):
        """study.json's grid_stalls."""
        return {"fraction": self.fraction, "study_ms": self.ms, "us": self.us(call_us),
                "kind": "per-call blocking sleep on the handler's thread"}

    def describe(self, call_us):
        return ("%g%% of the grid's calls sleep %.0f ms on their handler's thread (the study's "
                "%g ms at %.0f µs a direct call)" % (100 * self.fraction, self.us(call_us) / 1000.0,
                                                     self.ms, call_us))
