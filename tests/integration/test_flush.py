"""The three flush policies (docs/dispatch-model.md, section 6), told apart by echod's own counters.

A burst of calls spread over several connections (h2load: 4 connections x 16 streams):
- loop_tail flushes each dirty connection once per loop iteration, after every read of it:
  far fewer flushes than calls, all with trigger loop_tail;
- read_complete drains each connection at the end of its own read (trigger read_complete), so
  a burst on one connection does not wait for the others;
- immediate flushes right after each call's trailers: one flush per call.

Run alone: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_flush.py
"""

import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import SANITIZER, SLOW, Daemon, main  # noqa: E402
from test_h2load import (h2load)  # noqa: E402

N = 2000 if SANITIZER else 20000
TRIGGERS = ("loop_tail", "read_complete", "immediate", "loop_task")


def flushes(m):
    return {t: m.metric("echod_flushes_total", trigger=t) for t in TRIGGERS}


@unittest.skipUnless(shutil.which("h2load"), "nghttp2-client (h2load) not installed")
class FlushPolicies(unittest.TestCase):
    def burst(self, policy):
        with Daemon(config=os.path.join("config", "arms", "direct.yaml"),
                    sets=["transport.flush=%s" % policy]) as d:
            before = flushes(d.metrics())
            res, out = h2load(d.grpc_port, N, clients=4, streams=16, timeout=300 * SLOW)
            self.assertEqual(res["succeeded"], N, out)
            m = d.wait_metrics(lambda m: m.metric_sum("echod_call_steps_total") >= 6 * N, what="every step counted")
            after = flushes(m)
            delta = {t: after[t] - before[t] for t in TRIGGERS}
            print("%s: %d calls, flushes %r" % (policy, N, delta))
            return delta

    def test_loop_tail_batches_a_burst(self):
        f = self.burst("loop_tail")
        self.assertEqual((f["read_complete"], f["immediate"], f["loop_task"]), (0, 0, 0), f)
        self.assertGreater(f["loop_tail"], 0, f)
        # 64 calls in flight: each flush carries several calls' frames
        self.assertLess(f["loop_tail"], N / 2, f)

    def test_read_complete_drains_each_read(self):
        f = self.burst("read_complete")
        self.assertEqual((f["immediate"], f["loop_task"]), (0, 0), f)
        self.assertGreater(f["read_complete"], 0, f)
        # whatever a read produced went out at its end: the loop tail finds little left
        self.assertGreater(f["read_complete"], f["loop_tail"], f)
        self.assertLess(f["read_complete"], N / 2, f)

    def test_immediate_flushes_every_call(self):
        f = self.burst("immediate")
        self.assertEqual((f["read_complete"], f["loop_task"]), (0, 0), f)
        # one flush per call's trailers (protocol frames may add a few loop_tail ones)
        self.assertGreaterEqual(f["immediate"], N, f)
        self.assertLess(f["loop_tail"], N / 10, f)


if __name__ == "__main__":
    main()
