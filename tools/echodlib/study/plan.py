"""A study run's durations and steps: the full run, --quick (what CI runs), --step-seconds,
--top and the regime's default step."""

import math

DEFAULT_ARMS = ["direct", "direct-drain", "virtual", "cached"]
# the study's ramp, 400 ... 2,400 calls/s as multiples of its 2,000 calls/s
RAMP_FRACTIONS = [0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.2]
CAPACITY = 1000.0  # --capacity: direct's calls/s on one CPU
QUICK_CAPACITY = 500.0  # --quick's
# the unary ramp's step in a full run: the study's own 2 minutes in the capped regime (its VUs
# are the cap, whatever the step's length), 15 s in the open model (its backlog, and so its
# VUs, grow with the step: 120 s steps need 8x the VUs, docs/study-load.md)
RAMP_S = {"capped": 120, "open": 15}
MUX_ROUNDS = 3  # --mux-rounds: the multiplexed shape's open steps, each this many times


class Plan:
    """Durations (seconds) and steps (multiples of capacity) of a full run or of --quick."""

    def __init__(self, quick, step_s=None, top=1.2, regime="open", mux_rounds=None):
        self.quick = quick
        self.top = top
        self.calib_rounds = 2 if quick else 3
        self.calib_s = 2 if quick else 5
        self.probe_s = 1 if quick else 3
        self.fixed_s = 2 if quick else 30
        above = [round(1.2 + 0.1 * k, 3) for k in range(1, 100) if 1.2 + 0.1 * k < top - 1e-9]
        self.ramp_fractions = ([0.4] if quick else RAMP_FRACTIONS[:-1]) + [1.2] + above + \
            ([round(top, 3)] if top > 1.2 + 1e-9 else [])
        self.ramp_s = 2 if quick else RAMP_S[regime]
        # bidi-ramp.js steps linearly: 0.3, 0.6, ... to the first step at or past --top (--quick:
        # half of it, then all of it)
        self.stream_fractions = [round(top / 2, 3), round(top, 3)] if quick else \
            [round(0.3 * k, 3) for k in range(1, int(math.ceil(top / 0.3 - 1e-9)) + 1)]
        self.stream_s = 1 if quick else 10
        self.stream_counts = [20] if quick else [20, 40]
        # the multiplexed shape's open steps (study.mux): the open model's length whatever the
        # regime, as their backlog grows with it
        self.mux_s = 2 if quick else RAMP_S["open"]
        # each open step of that shape as many times: under directExecutor its answers leave
        # in whole read passes that grow through the step, so what one step's window cuts off
        # is most of its spread (study.mux); the figures are the rounds' median and range
        self.mux_rounds = mux_rounds or (1 if quick else MUX_ROUNDS)
        if step_s:  # a longer step buys precision at the knee with time
            self.ramp_s = self.stream_s = self.mux_s = step_s
            self.fixed_s = max(self.fixed_s, step_s)
        # the p99 of the calls sent in each fifth of a step (at least 1 s)
        self.slice_s = max(1, int(round(self.ramp_s / 5.0)))

    @property
    def mux_fractions(self):
        """The multiplexed shape's open steps (study.mux), multiples of capacity: the ramp's
        from 1.1x up."""
        return [x for x in self.ramp_fractions if x > 1.05]

    def ramp_rates(self, capacity):
        """The unary ramp's calls/s against a server of `capacity`."""
        return [round(x * capacity) for x in self.ramp_fractions]

    def stream_rates(self, stream_capacity):
        """The stream ramp's msg/s: bidi-ramp.js steps linearly (START, START + STEP, ...), so
        the fractions of `stream_capacity` rounded as its first two steps fall."""
        first = round(stream_capacity * self.stream_fractions[0])
        step = round(stream_capacity * self.stream_fractions[1]) - first
        return [first + k * step for k in range(len(self.stream_fractions))]

    def estimate_s(self, arms, ramp_setup_s=0.0, extra_ramps=0, mux=False):
        """Seconds the steps themselves take, and the ramp's set-up per arm (the regime's:
        k6's VUs, their connections and warm-up), with `extra_ramps` unary ramps more in all
        (the capped regime's at the published caps) and with `mux` the multiplexed shape's
        steps (study.mux); calibration and start-up add a few per cent."""
        ramp = len(self.ramp_fractions) * self.ramp_s + ramp_setup_s
        per_arm = (2 * self.fixed_s + self.probe_s + ramp
                   + len(self.stream_counts) * len(self.stream_fractions) * self.stream_s)
        if mux:
            per_arm += self.fixed_s + len(self.mux_fractions) * self.mux_rounds * self.mux_s
        return self.calib_rounds * (self.calib_s + 1) + arms * per_arm + extra_ramps * ramp

    def as_dict(self):
        """study.json's `plan`."""
        return {"ramp_fractions": self.ramp_fractions, "ramp_s": self.ramp_s,
                "slice_s": self.slice_s, "stream_fractions": self.stream_fractions,
                "stream_s": self.stream_s, "fixed_s": self.fixed_s, "mux_s": self.mux_s,
                "mux_rounds": self.mux_rounds}
