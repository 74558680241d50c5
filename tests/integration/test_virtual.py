"""executor.mode virtual (issue 13): a virtual thread per dispatch, and echod-sleep-us parks it.

What parking buys is proved through the daemon's own counters (parks, unparks, live virtual
threads, busy carriers), with wall time printed and used as a loose bound only:
  - one carrier, 64 concurrent unary calls each sleeping: all 64 parked at once with the carrier
    idle; with 10 ms sleeps the 64 finish far sooner than the 640 ms one thread needs;
  - bidi, 3 streams x 1000 messages each sleeping, every echo in order, one park per message;
  - a deadline, or the client's cancel, during a sleep: the status at once, the virtual thread
    woken early and gone long before its sleep would have ended;
  - SIGTERM with sleeping virtual threads: the short sleeps finish, the long ones are cut at
    shutdown.drain_timeout, and the daemon exits then, not when the sleeps end;
  - grpc.health.v1 answers while the only carrier is busy computing;
  - executor.stack_bytes: shown in /metrics beside the deepest stack use seen; bad values exit 2.
Killed clients mid-sleep are in test_faults (KillClients.test_virtual_killed_mid_sleep), the arm's
step and dispatch arithmetic in test_arms (config/arms/virtual.yaml).

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_virtual.py
"""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

from echod_harness import ROOT, SLOW, Daemon, DaemonTestCase, EchoStub, echod_check_config, main, metric_delta  # noqa: E402

T = 30 * SLOW
VT = "echod_executor_virtual_threads"
PARKS = "echod_executor_virtual_thread_parks_total"
UNPARKS = "echod_executor_virtual_thread_unparks_total"
STARTED = "echod_executor_virtual_threads_started_total"
ONE_CARRIER = ["executor.mode=virtual", "executor.threads=1"]


def sleep_md(us):
    return (("echod-sleep-us", str(us)),)


def health_check(channel, timeout):
    """grpc.health.v1.Health/Check for the server (service ""): an empty request, by hand."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    return check(b"", timeout=timeout)


class OneCarrier(DaemonTestCase):
    """One daemon, one carrier, for the whole class."""

    @classmethod
    def start_daemon(cls):
        return Daemon(sets=ONE_CARRIER).start()

    def setUp(self):
        self.channel = self.d.channel()
        grpc.channel_ready_future(self.channel).result(timeout=T)
        self.stub = EchoStub(self.channel)

    def tearDown(self):
        self.channel.close()

    def settled(self, m0, what):
        return self.d.wait_metrics(lambda m: m.metric(VT) == 0 and m.metric("echod_calls_in_flight") == 0
                                   and metric_delta(m, m0, UNPARKS) == metric_delta(m, m0, PARKS), what=what)

    def test_threads_are_carriers_plus_the_unparker(self):
        m = self.d.metrics()
        self.assertEqual(m.metric("echod_executor_threads", executor="virtual"), 2)
        info = m.series("echod_build_info")[0][0]
        self.assertEqual(info.get("executor"), "virtual")
        # the switch this build was meant to test (meson: host CPU and -Dfiber; set by meson test)
        want = os.environ.get("ECHOD_EXPECT_FIBER_SWITCH")
        if want:
            self.assertEqual(info.get("fiber_switch"), want)
        self.assertIn(info.get("fiber_switch"), ("x86_64", "aarch64", "ucontext"))

    def unary_sleepers(self, n, us):
        futures = [self.stub.UnaryEcho.future("s%d" % i, timeout=T, metadata=sleep_md(us)) for i in range(n)]
        return futures

    def test_64_sleepers_park_at_once(self):
        # 1 s sleeps: long enough to see all 64 parked together, the carrier idle meanwhile
        m0 = self.d.metrics()
        futures = self.unary_sleepers(64, 1000000)
        m = self.d.wait_metrics(lambda m: metric_delta(m, m0, PARKS) >= 64, what="64 parks")
        self.assertGreaterEqual(m.metric(VT), 64, "64 calls asleep, each on a virtual thread")
        self.assertEqual(m.metric("echod_executor_busy_threads", executor="virtual"), 0,
                         "the carrier is free while they sleep")
        self.assertEqual([f.result() for f in futures], ["s%d" % i for i in range(64)])
        m1 = self.settled(m0, "every virtual thread ended")
        self.assertEqual((metric_delta(m1, m0, PARKS), metric_delta(m1, m0, UNPARKS)), (64, 64))

    def test_64_unary_10ms_sleeps_on_one_carrier(self):
        m0 = self.d.metrics()
        t0 = time.monotonic()
        futures = self.unary_sleepers(64, 10000)
        got = [f.result() for f in futures]
        wall = time.monotonic() - t0
        self.assertEqual(got, ["s%d" % i for i in range(64)])
        m1 = self.settled(m0, "every virtual thread ended")
        self.assertEqual(metric_delta(m1, m0, PARKS), 64)
        self.assertEqual(metric_delta(m1, m0, UNPARKS), 64)
        started = metric_delta(m1, m0, STARTED)
        self.assertEqual(started, metric_delta(m1, m0, "echod_executor_dispatches_total"),
                         "a virtual thread per dispatch")
        self.assertTrue(64 <= started <= 6 * 64, started)
        print("\n  virtual, 1 carrier: 64 unary calls sleeping 10 ms took %.0f ms (one thread: >= 640 ms)"
              % (wall * 1000))
        # loose: a carrier held by each sleep could not finish in less than 640 ms
        self.assertLess(wall, 0.6 * SLOW)

    def test_bidi_three_streams_in_order(self):
        n, streams = 1000, 3
        m0 = self.d.metrics()
        channels = [self.d.channel() for _ in range(streams)]
        results = [None] * streams

        def one(i):
            msgs = ["b%d-%d" % (i, j) for j in range(n)]
            got = list(EchoStub(channels[i]).BidirectionalStreamingEcho(iter(msgs), timeout=120 * SLOW,
                                                                        metadata=sleep_md(500)))
            results[i] = (msgs, got)

        t0 = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        for c in channels:
            c.close()
        for i, r in enumerate(results):
            self.assertIsNotNone(r, "stream %d failed" % i)
            self.assertEqual(r[1], r[0], "stream %d out of order or short" % i)
        m1 = self.settled(m0, "every virtual thread ended")
        self.assertEqual(metric_delta(m1, m0, PARKS), n * streams, "one park per message")
        self.assertEqual(metric_delta(m1, m0, UNPARKS), n * streams)
        print("\n  virtual, 1 carrier: 3 bidi streams x 1000 messages sleeping 0.5 ms each took %.2f s"
              % wall)

    def test_deadline_during_sleep(self):
        m0 = self.d.metrics()
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.UnaryEcho("late", timeout=0.3, metadata=sleep_md(8000000))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.settled(m0, "the sleeping virtual thread woken and gone")
        gone = time.monotonic() - t0
        self.assertLess(gone, 6.0, "the virtual thread slept on instead of waking at the deadline")
        m1 = self.d.metrics()
        self.assertEqual((metric_delta(m1, m0, PARKS), metric_delta(m1, m0, UNPARKS)), (1, 1))
        # the server's timer and the client's RST_STREAM race for the same instant: either ends it
        ended = {c: metric_delta(m1, m0, "grpc_server_handled_total", grpc_method="UnaryEcho", grpc_code=c)
                 for c in ("DEADLINE_EXCEEDED", "CANCELLED")}
        self.assertEqual(sum(ended.values()), 1, ended)
        # the carrier is free and answers at once
        self.assertEqual(self.stub.UnaryEcho("after", timeout=T), "after")

    def test_cancel_during_sleep(self):
        m0 = self.d.metrics()
        f = self.stub.UnaryEcho.future("gone", timeout=T, metadata=sleep_md(8000000))
        self.d.wait_metrics(lambda m: metric_delta(m, m0, PARKS) == 1, what="the call asleep")
        t0 = time.monotonic()
        f.cancel()
        self.settled(m0, "the cancelled call's virtual thread woken and gone")
        self.assertLess(time.monotonic() - t0, 6.0, "a cancel did not wake the sleeper")

    def test_health_answers_while_the_carrier_computes(self):
        # one call computing for a second (4 under sanitizers) holds the only carrier throughout
        f = self.stub.UnaryEcho.future("cpu", timeout=T, metadata=(("echod-cpu-us", str(int(1000000 * SLOW))),))
        self.d.wait_metrics(lambda m: m.metric("echod_executor_busy_threads", executor="virtual") == 1,
                            what="the carrier busy")
        t0 = time.monotonic()
        self.assertEqual(health_check(self.channel, timeout=T), b"\x08\x01")  # SERVING
        took = time.monotonic() - t0
        self.assertFalse(f.done(), "the carrier was still computing when health answered")
        self.assertEqual(f.result(), "cpu")
        print("\n  health answered in %.1f ms while the only carrier computed" % (took * 1000))
        self.assertLess(took, 0.1 * SLOW)


class Stacks(unittest.TestCase):
    def test_stack_bytes_and_peak(self):
        with Daemon(sets=ONE_CARRIER + ["executor.stack_bytes=32768"]) as d:
            with d.channel() as ch:
                stub = EchoStub(ch)
                for i in range(20):
                    self.assertEqual(stub.UnaryEcho("x" * 1000, timeout=T, metadata=sleep_md(100)), "x" * 1000)
            m = d.wait_metrics(lambda m: m.metric(VT) == 0, what="idle")
            self.assertEqual(m.metric("echod_executor_virtual_stack_bytes", executor="virtual"), 32768)
            peak = m.metric("echod_executor_virtual_stack_peak_bytes", executor="virtual")
            self.assertGreater(peak, 0)
            self.assertLess(peak, 32768)
            print("\n  deepest virtual thread stack seen: %d bytes" % peak)

    def test_bad_stack_bytes_exits_2(self):
        r = echod_check_config(os.path.join(ROOT, "config", "echod.yaml"),
                               sets=["executor.mode=virtual", "executor.stack_bytes=1000"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("executor.stack_bytes", r.stderr)


class Drain(unittest.TestCase):
    def test_sigterm_with_sleeping_virtual_threads(self):
        sets = ONE_CARRIER + ["shutdown.announce=0ms", "shutdown.drain_timeout=1s"]
        with Daemon(sets=sets) as d:
            ch = d.channel()
            stub = EchoStub(ch)
            m0 = d.metrics()
            short = [stub.UnaryEcho.future("short", timeout=T, metadata=sleep_md(300000)) for _ in range(4)]
            long_ = [stub.UnaryEcho.future("long", timeout=T, metadata=sleep_md(8000000)) for _ in range(4)]
            d.wait_metrics(lambda m: metric_delta(m, m0, PARKS) == 8, what="8 calls asleep")
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            self.assertEqual([f.result() for f in short], ["short"] * 4, "sleeps shorter than the drain finish")
            for f in long_:
                with self.assertRaises(grpc.RpcError) as cm:
                    f.result()
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
            ch.close()
            try:
                d.proc.wait(timeout=10 * SLOW)
            except subprocess.TimeoutExpired:
                raise AssertionError("echod still running after SIGTERM:\n%s" % d.stderr_text())
            took = time.monotonic() - t0
            d.stop()  # exited already: checks status 0 and no sanitizer report
            print("\n  SIGTERM with 8 sleeping virtual threads: exited after %.2f s (drain_timeout 1 s)" % took)
            self.assertGreaterEqual(took, 0.9)
            self.assertLess(took, 6.0, "shutdown waited for the 8 s sleeps")


if __name__ == "__main__":
    main()
