"""A time series of a run, sampled in the background: what a stepped load test needs to cut the
server's and the load generator's figures by step when the steps run back to back in one run
(bench/study's open-model ramp), instead of one measured window per step.

    s = Sampler({"echod": echod_probe, "k6": k6_probe}, every=0.5).start()
    ... the run ...
    s.stop()
    w = s.window(t0, t1)             # the samples inside [t0, t1] (wall clock, time.time())
    s.delta(t0, t1, "echod_cpu")     # a counter's increase over [t0, t1], from the nearest samples

A probe is a function returning a dict of figures (a failed probe returns {}: a missing sample
is a hole, not a zero). Every sample is {"t": time.time(), **each probe's dict}.
"""

import threading
import time


class Sampler:
    def __init__(self, probes, every=0.5):
        self.probes = probes
        self.every = every
        self.samples = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def sample(self):
        s = {"t": time.time()}
        for probe in self.probes.values():
            try:
                s.update(probe() or {})
            except (OSError, ValueError, KeyError):
                pass  # the process may be starting or gone: a hole in the series
        self.samples.append(s)
        return s

    def _run(self):
        while not self._stop.is_set():
            t = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.every - (time.monotonic() - t)))

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()
        self.sample()
        return self

    def window(self, t0, t1, key=None):
        return [s for s in self.samples if t0 <= s["t"] <= t1 and (key is None or key in s)]

    def at(self, t, key):
        """The sample with `key` nearest to wall time t, or None."""
        have = [s for s in self.samples if s.get(key) is not None]
        return min(have, key=lambda s: abs(s["t"] - t)) if have else None

    def delta(self, t0, t1, key):
        """(increase of a counter over [t0, t1], the seconds between the samples used)."""
        a, b = self.at(t0, key), self.at(t1, key)
        if a is None or b is None or b["t"] <= a["t"]:
            return None, None
        return b[key] - a[key], b["t"] - a["t"]

    def stats(self, t0, t1, key):
        """(mean, max) of a gauge over the samples inside [t0, t1], or (None, None)."""
        vals = [s[key] for s in self.window(t0, t1, key) if s[key] is not None]
        if not vals:
            return None, None
        return sum(vals) / len(vals), max(vals)
