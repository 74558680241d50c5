"""The four Echo methods against the real daemon with Debian's python3-grpcio, then /metrics.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_echo_grpcio.py
"""

import concurrent.futures
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

from echod_harness import (EchoTestCase, SERVICE, SLOW, STEPS, MERGED_STEPS, Daemon, EchoStub,  # noqa: E402
                           bidi_roundtrip, main)

T = 30.0 * SLOW  # per-call timeout


class EchoMethods(EchoTestCase):
    """One daemon for the class; each test uses its own channel."""

    def test_unary(self):
        self.assertEqual(self.stub.UnaryEcho("hello", timeout=T), "hello")

    def test_unary_empty_message(self):
        self.assertEqual(self.stub.UnaryEcho("", timeout=T), "")

    def test_unary_utf8_and_large(self):
        self.assertEqual(self.stub.UnaryEcho("héllo wörld ✓", timeout=T), "héllo wörld ✓")
        big = "x" * (1 << 20)  # 1 MiB: several DATA frames and window updates both ways
        self.assertEqual(self.stub.UnaryEcho(big, timeout=T), big)

    def test_unary_just_below_default_limit(self):
        msg = "y" * (4 * 1024 * 1024 - 16)  # the default limit is 4 MiB of serialized message
        self.assertEqual(self.stub.UnaryEcho(msg, timeout=T), msg)

    def test_unary_above_default_limit(self):
        msg = "z" * (4 * 1024 * 1024 + 1)
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.UnaryEcho(msg, timeout=T)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        # The channel still works.
        self.assertEqual(self.stub.UnaryEcho("after", timeout=T), "after")

    def test_unary_with_metadata(self):
        resp, call = self.stub.UnaryEcho.with_call("meta", metadata=[("x-test", "1")], timeout=T)
        self.assertEqual(resp, "meta")
        self.assertEqual(call.code(), grpc.StatusCode.OK)

    def test_server_streaming(self):
        got = list(self.stub.ServerStreamingEcho("again", timeout=T))
        self.assertEqual(got, ["again"] * 10)

    def test_client_streaming_concatenates(self):
        parts = ["a", "bc", "", "def", "ghij"]
        self.assertEqual(self.stub.ClientStreamingEcho(iter(parts), timeout=T), "abcdefghij")

    def test_client_streaming_no_messages(self):
        self.assertEqual(self.stub.ClientStreamingEcho(iter([]), timeout=T), "")

    def test_client_streaming_many(self):
        parts = ["%04d" % i for i in range(500)]
        self.assertEqual(self.stub.ClientStreamingEcho(iter(parts), timeout=T), "".join(parts))

    def test_bidi_small(self):
        msgs, got = bidi_roundtrip(self.stub, 3)
        self.assertEqual(got, msgs)

    def test_bidi_no_messages(self):
        self.assertEqual(list(self.stub.BidirectionalStreamingEcho(iter([]), timeout=T)), [])

    def test_bidi_1000_in_order(self):
        msgs, got = bidi_roundtrip(self.stub, 1000)
        self.assertEqual(len(got), 1000)
        self.assertEqual(got, msgs)

    def test_bidi_ping_pong(self):
        """Each response arrives before the next request is sent (no batching hides bugs)."""
        import queue
        q = queue.Queue()

        def gen():
            for i in range(100):
                yield "pp-%d" % i
                item = q.get(timeout=T)
                if item is None:
                    return

        call = self.stub.BidirectionalStreamingEcho(gen(), timeout=T)
        got = []
        try:
            for resp in call:
                got.append(resp)
                q.put(resp)
        finally:
            q.put(None)
        self.assertEqual(got, ["pp-%d" % i for i in range(100)])

    def test_bidi_large_messages(self):
        msgs = [("%d:" % i) + "q" * 100000 for i in range(50)]
        got = list(self.stub.BidirectionalStreamingEcho(iter(msgs), timeout=T))
        self.assertEqual(got, msgs)

    def test_50_concurrent_streams_one_channel(self):
        def one(i):
            if i % 2:
                return self.stub.UnaryEcho("c%d" % i, timeout=T) == "c%d" % i
            msgs, got = bidi_roundtrip(self.stub, 100, prefix="s%d" % i)
            return got == msgs

        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as ex:
            results = list(ex.map(one, range(50)))
        self.assertTrue(all(results), results)

    def test_50_concurrent_bidi_streams_open_at_once(self):
        """50 bidi streams all open on one connection at the same time, then finished."""
        barrier = threading.Barrier(50, timeout=T)

        def one(i):
            def gen():
                yield "first-%d" % i
                barrier.wait()  # every stream is open and has sent a message
                yield "second-%d" % i
            return list(self.stub.BidirectionalStreamingEcho(gen(), timeout=T))

        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as ex:
            results = list(ex.map(one, range(50)))
        for i, got in enumerate(results):
            self.assertEqual(got, ["first-%d" % i, "second-%d" % i])

    def test_several_channels(self):
        channels = [self.d.channel() for _ in range(5)]
        try:
            stubs = [EchoStub(c) for c in channels]

            def one(i):
                s = stubs[i % len(stubs)]
                ok = s.UnaryEcho("ch%d" % i, timeout=T) == "ch%d" % i
                msgs, got = bidi_roundtrip(s, 200, prefix="ch%d" % i)
                return ok and got == msgs

            with concurrent.futures.ThreadPoolExecutor(max_workers=10) as ex:
                self.assertTrue(all(ex.map(one, range(20))))
            # Each channel has its own TCP connection (local subchannel pools).
            m = self.d.metrics()
            if m.has("echod_connections"):
                self.assertGreaterEqual(m.metric("echod_connections"), len(channels))
        finally:
            for c in channels:
                c.close()

    def test_admin_endpoints(self):
        status, body = self.d.http_get("/healthz")
        self.assertEqual(status, 200)
        status, _ = self.d.http_get("/readyz")
        self.assertEqual(status, 200)
        status, _ = self.d.http_get("/no-such-page")
        self.assertEqual(status, 404)
        m = self.d.metrics()
        for name in ("echod_call_steps_total", "grpc_server_started_total",
                     "grpc_server_handled_total", "grpc_server_msg_received_total",
                     "grpc_server_msg_sent_total", "process_cpu_seconds_total",
                     "process_resident_memory_bytes", "echod_build_info",
                     "echod_calls_in_flight"):
            self.assertTrue(m.has(name), "missing metric %s in /metrics" % name)
        info = m.series("echod_build_info")
        self.assertEqual(len(info), 1, info)
        labels, value = info[0]
        self.assertEqual(value, 1)
        for label in ("version", "arm", "executor", "serialize", "merge_lookup_and_start",
                      "coalesce_end_stream", "flush", "config_sha256"):
            self.assertIn(label, labels)
        self.assertEqual(labels["executor"], "direct")
        self.assertEqual(labels["flush"], "loop_tail")
        self.assertRegex(labels["config_sha256"], "^[0-9a-f]{64}$")


class MetricsAccounting(unittest.TestCase):
    """A fresh, idle daemon per test: exact counts."""

    def test_unary_six_steps_per_call(self):
        n = 100
        with Daemon() as d:
            ch = d.channel()
            stub = EchoStub(ch)
            for i in range(n):
                self.assertEqual(stub.UnaryEcho("n%d" % i, timeout=T), "n%d" % i)
            ch.close()
            m = d.wait_metrics(lambda m: m.metric("echod_call_steps_total", step="closed") >= n
                               and m.metric("echod_calls_in_flight") == 0,
                               what="%d closed steps" % n)
            for step in STEPS:
                self.assertEqual(m.metric("echod_call_steps_total", step=step), n,
                                 "step %s" % step)
            for step in MERGED_STEPS:
                self.assertEqual(m.metric("echod_call_steps_total", step=step), 0,
                                 "step %s" % step)
            self.assertEqual(m.metric_sum("echod_call_steps_total"), 6 * n)
            lbl = dict(grpc_service=SERVICE, grpc_method="UnaryEcho")
            self.assertEqual(m.metric("grpc_server_started_total", grpc_type="unary", **lbl), n)
            self.assertEqual(m.metric("grpc_server_handled_total", grpc_type="unary",
                                      grpc_code="OK", **lbl), n)
            self.assertEqual(m.metric("grpc_server_handled_total"), n)
            self.assertEqual(m.metric("grpc_server_msg_received_total", **lbl), n)
            self.assertEqual(m.metric("grpc_server_msg_sent_total", **lbl), n)
            # Direct executor, serialize auto: everything inline, nothing handed off.
            self.assertEqual(m.metric_sum("echod_executor_dispatches_total"), 0)
            self.assertEqual(m.metric_sum("echod_loop_tasks_total"), 0)

    def test_all_methods_handled_ok(self):
        with Daemon() as d:
            ch = d.channel()
            stub = EchoStub(ch)
            for _ in range(3):
                stub.UnaryEcho("u", timeout=T)
            for _ in range(2):
                self.assertEqual(len(list(stub.ServerStreamingEcho("s", timeout=T))), 10)
            for _ in range(4):
                stub.ClientStreamingEcho(iter(["a", "b", "c"]), timeout=T)
            for _ in range(5):
                bidi_roundtrip(stub, 7)
            ch.close()
            m = d.wait_metrics(lambda m: m.metric("grpc_server_handled_total") >= 14
                               and m.metric("echod_calls_in_flight") == 0,
                               what="14 handled calls")
            expect = {
                ("UnaryEcho", "unary"): (3, 3, 3),
                ("ServerStreamingEcho", "server_stream"): (2, 2, 20),
                ("ClientStreamingEcho", "client_stream"): (4, 12, 4),
                ("BidirectionalStreamingEcho", "bidi_stream"): (5, 35, 35),
            }
            for (method, gtype), (calls, received, sent) in expect.items():
                lbl = dict(grpc_service=SERVICE, grpc_method=method, grpc_type=gtype)
                self.assertEqual(m.metric("grpc_server_started_total", **lbl), calls, method)
                self.assertEqual(m.metric("grpc_server_handled_total", grpc_code="OK", **lbl),
                                 calls, method)
                self.assertEqual(m.metric("grpc_server_msg_received_total", **lbl), received,
                                 method)
                self.assertEqual(m.metric("grpc_server_msg_sent_total", **lbl), sent, method)
            self.assertEqual(m.metric("grpc_server_handled_total"), 14)

    def test_bidi_steps(self):
        """docs/dispatch-model.md, section 2: a bidi call makes 5 + one per message (+ extra on_ready)."""
        k = 20
        with Daemon() as d:
            ch = d.channel()
            stub = EchoStub(ch)
            msgs, got = bidi_roundtrip(stub, k)
            self.assertEqual(got, msgs)
            ch.close()
            m = d.wait_metrics(lambda m: m.metric("echod_call_steps_total", step="closed") >= 1
                               and m.metric("echod_calls_in_flight") == 0, what="closed call")
            for step in ("method_lookup", "start_call", "half_closed", "closed"):
                self.assertEqual(m.metric("echod_call_steps_total", step=step), 1, step)
            self.assertEqual(m.metric("echod_call_steps_total", step="messages_available"), k)
            self.assertGreaterEqual(m.metric("echod_call_steps_total", step="on_ready"), 1)


if __name__ == "__main__":
    main()
