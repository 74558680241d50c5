"""Operating echod in a capacity study (README: Synthetic work): synthetic work from request metadata and
config, the echod-timing trailer, admission (limits.max_calls_in_flight), the saturation
metrics and stage marks.

Run on its own:
  ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_operate.py
"""

import os
import re
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

from echod_harness import (EchoTestCase, BIDI, SERVICE, SLOW, UNARY, Daemon, EchoStub, main,  # noqa: E402
                           metric_delta, pb_encode)

T = 30.0 * SLOW  # per-call timeout
TIMING_RE = re.compile(r"^queue=(\d+)us;handler=(\d+)us;total=(\d+)us$")
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
ON_PURPOSE = "echod-status: failing on purpose"


def md(**kw):
    """metadata from keyword arguments: cpu_us=5 -> ("echod-cpu-us", "5")."""
    return [("echod-" + k.replace("_", "-"), str(v)) for k, v in kw.items()]


def timing_of(metadata):
    """(queue, handler, total) in microseconds from the echod-timing entry of metadata."""
    values = [v for k, v in (metadata or ()) if k == "echod-timing"]
    if len(values) != 1:
        raise AssertionError("expected one echod-timing entry in %r" % (metadata,))
    m = TIMING_RE.match(values[0])
    if not m:
        raise AssertionError("malformed echod-timing %r" % values[0])
    return tuple(int(x) for x in m.groups())


def post(port, path, timeout=10.0):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def request(port, method, path, timeout=10.0):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def health_stub(channel):
    return channel.unary_unary(HEALTH_CHECK, request_serializer=pb_encode,
                               response_deserializer=lambda b: bytes(b))


def rpc_error(fn, *args, **kw):
    """Calls fn and returns the grpc.RpcError it raised (fails if it returned)."""
    try:
        r = fn(*args, **kw)
    except grpc.RpcError as e:
        return e
    if hasattr(r, "__iter__") and not isinstance(r, (str, bytes)):
        try:
            got = list(r)
        except grpc.RpcError as e:
            return e
        raise AssertionError("call succeeded with %r" % got)
    raise AssertionError("call succeeded with %r" % (r,))


# ---------------------------------------------------------------------------------------------


class Work(EchoTestCase):
    """The echod-* work knobs as request metadata, on one default (direct) daemon."""

    # -- echod-response-bytes

    def test_response_bytes_pads_and_truncates(self):
        u = self.stub.UnaryEcho
        self.assertEqual(u("hi", metadata=md(response_bytes=10), timeout=T), "hi........")
        self.assertEqual(u("hello world", metadata=md(response_bytes=5), timeout=T), "hello")
        self.assertEqual(u("hello", metadata=md(response_bytes=5), timeout=T), "hello")
        self.assertEqual(u("hello", metadata=md(response_bytes=0), timeout=T), "")
        self.assertEqual(u("", metadata=md(response_bytes=3), timeout=T), "...")
        big = u("x", metadata=md(response_bytes=1 << 20), timeout=T)
        self.assertEqual(len(big), 1 << 20)
        self.assertEqual(big, "x" + "." * ((1 << 20) - 1))

    def test_response_bytes_keeps_utf8_whole(self):
        u = self.stub.UnaryEcho
        # "é" is 2 bytes at offsets 1-2, "✓" 3 bytes at 3-5: a cut inside either backs up and pads
        text = "h\u00e9\u2713z"
        for n, want in ((1, "h"), (2, "h."), (3, "h\u00e9"), (4, "h\u00e9."), (5, "h\u00e9.."),
                        (6, "h\u00e9\u2713"), (7, "h\u00e9\u2713z"), (9, "h\u00e9\u2713z..")):
            got = u(text, metadata=md(response_bytes=n), timeout=T)
            self.assertEqual(got, want, "response_bytes=%d" % n)
            self.assertEqual(len(got.encode("utf-8")), n, "response_bytes=%d" % n)

    def test_response_bytes_on_every_method(self):
        meta = md(response_bytes=4)
        self.assertEqual(list(self.stub.ServerStreamingEcho("abcdefg", metadata=meta, timeout=T)),
                         ["abcd"] * 10)
        self.assertEqual(self.stub.ClientStreamingEcho(iter(["ab", "cdef"]), metadata=meta, timeout=T),
                         "abcd")
        self.assertEqual(self.stub.ClientStreamingEcho(iter(["a"]), metadata=meta, timeout=T), "a...")
        got = list(self.stub.BidirectionalStreamingEcho(iter(["a", "abcdef", "", "xyzw"]),
                                                        metadata=meta, timeout=T))
        self.assertEqual(got, ["a...", "abcd", "....", "xyzw"])  # per message

    # -- echod-cpu-us

    def test_cpu_us_burns_handler_cpu(self):
        calls, cpu_us = 20, 25000  # 0.5 s of CPU in all
        before = self.d.metrics()
        handlers = []
        for _ in range(calls):
            r, call = self.stub.UnaryEcho.with_call("burn", metadata=md(cpu_us=cpu_us), timeout=T)
            self.assertEqual(r, "burn")
            q, h, total = timing_of(call.trailing_metadata())
            handlers.append(h)
            self.assertGreaterEqual(h, cpu_us)
            self.assertGreaterEqual(total, h)
        after = self.d.metrics()
        spent = metric_delta(after, before, "process_cpu_seconds_total")
        want = calls * cpu_us / 1e6
        print("cpu: %d calls x %d us -> process CPU +%.3f s (want %.3f); handler us %d..%d"
              % (calls, cpu_us, spent, want, min(handlers), max(handlers)))
        self.assertGreaterEqual(spent, want * 0.9)
        self.assertLessEqual(spent, want * 1.6 + 0.3)  # a busy loop, not a multi-thread spin

    def test_cpu_us_per_bidi_message(self):
        n, cpu_us = 4, 20000
        got = self.stub.BidirectionalStreamingEcho(iter(["m%d" % i for i in range(n)]),
                                                   metadata=md(cpu_us=cpu_us), timeout=T)
        self.assertEqual(list(got), ["m%d" % i for i in range(n)])
        q, h, total = timing_of(got.trailing_metadata())
        self.assertGreaterEqual(h, n * cpu_us)
        self.assertGreaterEqual(total, h)

    # -- echod-sleep-us

    def test_sleep_us_blocks(self):
        t0 = time.monotonic()
        r, call = self.stub.UnaryEcho.with_call("zz", metadata=md(sleep_us=200000), timeout=T)
        wall = time.monotonic() - t0
        self.assertEqual(r, "zz")
        self.assertGreaterEqual(wall, 0.2)
        q, h, total = timing_of(call.trailing_metadata())
        self.assertGreaterEqual(h, 200000)
        self.assertGreaterEqual(total, h)

    def test_sleep_us_on_every_method(self):
        meta = md(sleep_us=100000)
        t0 = time.monotonic()
        self.assertEqual(list(self.stub.ServerStreamingEcho("s", metadata=meta, timeout=T)), ["s"] * 10)
        self.assertGreaterEqual(time.monotonic() - t0, 0.1)
        t0 = time.monotonic()
        self.assertEqual(self.stub.ClientStreamingEcho(iter(["a", "b"]), metadata=meta, timeout=T), "ab")
        self.assertGreaterEqual(time.monotonic() - t0, 0.1)
        t0 = time.monotonic()
        self.assertEqual(list(self.stub.BidirectionalStreamingEcho(iter(["1", "2", "3"]), metadata=meta,
                                                                   timeout=T)), ["1", "2", "3"])
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)  # 100 ms per message

    # -- echod-status and echod-error-rate

    def test_status_fails_every_call(self):
        for code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE,
                     grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.DATA_LOSS):
            meta = md(status=code.value[0])
            for _ in range(3):
                e = rpc_error(self.stub.UnaryEcho, "x", metadata=meta, timeout=T)
                self.assertEqual(e.code(), code)
                self.assertEqual(e.details(), ON_PURPOSE)
        self.assertEqual(self.stub.UnaryEcho("x", metadata=md(status=0), timeout=T), "x")

    def test_status_on_every_method(self):
        meta = md(status=7)
        for fn, arg in ((self.stub.UnaryEcho, "x"), (self.stub.ServerStreamingEcho, "x"),
                        (self.stub.ClientStreamingEcho, iter(["a", "b"])),
                        (self.stub.BidirectionalStreamingEcho, iter(["a", "b"]))):
            e = rpc_error(fn, arg, metadata=meta, timeout=T)
            self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, fn)
            self.assertEqual(e.details(), ON_PURPOSE, fn)
        # server streaming fails before its first response
        it = self.stub.ServerStreamingEcho("x", metadata=meta, timeout=T)
        got = []
        with self.assertRaises(grpc.RpcError):
            for r in it:
                got.append(r)
        self.assertEqual(got, [])

    def _error_rate(self, n, rate, status=None):
        meta = md(error_rate=rate) + (md(status=status) if status is not None else [])
        futs = [self.stub.UnaryEcho.future("r", metadata=meta, timeout=T) for _ in range(n)]
        codes = {}
        for f in futs:
            try:
                self.assertEqual(f.result(), "r")
                c = grpc.StatusCode.OK
            except grpc.RpcError as e:
                c = e.code()
                self.assertEqual(e.details(), ON_PURPOSE)
            codes[c] = codes.get(c, 0) + 1
        return codes

    def test_error_rate(self):
        n = 400
        codes = self._error_rate(n, "0.25")
        failed = n - codes.get(grpc.StatusCode.OK, 0)
        print("error_rate 0.25 over %d calls: %r" % (n, codes))
        self.assertEqual(set(codes) - {grpc.StatusCode.OK}, {grpc.StatusCode.INTERNAL})
        # mean 100, sd ~8.7: +-5 sd
        self.assertGreaterEqual(failed, 55)
        self.assertLessEqual(failed, 145)

        codes = self._error_rate(n, "0.5", status=9)
        failed = codes.get(grpc.StatusCode.FAILED_PRECONDITION, 0)
        print("error_rate 0.5 with status 9 over %d calls: %r" % (n, codes))
        self.assertEqual(set(codes), {grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION})
        self.assertGreaterEqual(failed, 150)
        self.assertLessEqual(failed, 250)

    def test_error_rate_zero_and_one(self):
        self.assertEqual(self._error_rate(100, "0.0"), {grpc.StatusCode.OK: 100})
        # error_rate 0 leaves it to status alone (config/echod.yaml): every call fails with it
        self.assertEqual(self._error_rate(100, "0", status=5), {grpc.StatusCode.NOT_FOUND: 100})
        self.assertEqual(self._error_rate(100, "1.0"), {grpc.StatusCode.INTERNAL: 100})
        self.assertEqual(self._error_rate(100, "1", status=10), {grpc.StatusCode.ABORTED: 100})

    # -- echod-echo-metadata

    def test_echo_metadata(self):
        meta = [("echod-echo-metadata", "true"), ("x-one", "1"), ("x-two", "two words"),
                ("x-data-bin", b"\x00\x01\xfe\xff")]
        r, call = self.stub.UnaryEcho.with_call("m", metadata=meta, timeout=T)
        self.assertEqual(r, "m")
        got = dict(call.initial_metadata())
        self.assertEqual(got.get("x-one"), "1")
        self.assertEqual(got.get("x-two"), "two words")
        self.assertEqual(got.get("x-data-bin"), b"\x00\x01\xfe\xff")
        self.assertEqual(got.get("echod-echo-metadata"), "true")
        self.assertNotIn("user-agent", got)
        # off (the default, and explicitly): nothing echoed
        for meta2 in ([("x-one", "1")], [("echod-echo-metadata", "false"), ("x-one", "1")]):
            r, call = self.stub.UnaryEcho.with_call("m", metadata=meta2, timeout=T)
            self.assertNotIn("x-one", dict(call.initial_metadata()))

    def test_echo_metadata_excludes_reserved_headers(self):
        """Raw HTTP/2: te, user-agent, host and grpc-* stay out; everything else comes back."""
        h = self.d.h2()
        try:
            sid = h.start(UNARY, timeout="10S", extra=[
                ("user-agent", "raw-h2/1"), ("host", "example"), ("grpc-accept-encoding", "identity"),
                ("grpc-previous-rpc-attempts", "0"), ("echod-echo-metadata", "true"),
                ("x-keep", "yes"), ("x-keep", "twice")])
            h.send_message(sid, "raw", end_stream=True)
            st = h.wait_done(sid)
            self.assertEqual(st.grpc_status, 0, st)
            self.assertEqual(st.messages(), ["raw"])
            names = [k for k, _ in st.headers]
            self.assertEqual([v for k, v in st.headers if k == "x-keep"], ["yes", "twice"], st)
            self.assertIn("echod-echo-metadata", names)
            for reserved in ("te", "user-agent", "host", "grpc-timeout", "grpc-previous-rpc-attempts"):
                self.assertNotIn(reserved, names, st)
            # the server's own grpc-accept-encoding (docs/compression.md), not the request's echoed
            self.assertEqual([v for k, v in st.headers if k == "grpc-accept-encoding"], ["identity,deflate,gzip"], st)
            self.assertEqual(names.count("content-type"), 1, st)
            self.assertEqual(names.count(":status"), 1, st)
        finally:
            h.close()

    def test_echo_metadata_on_streams(self):
        meta = [("echod-echo-metadata", "true"), ("x-s", "v")]
        it = self.stub.ServerStreamingEcho("a", metadata=meta, timeout=T)
        self.assertEqual(dict(it.initial_metadata()).get("x-s"), "v")
        self.assertEqual(list(it), ["a"] * 10)
        it = self.stub.BidirectionalStreamingEcho(iter(["a", "b"]), metadata=meta, timeout=T)
        self.assertEqual(dict(it.initial_metadata()).get("x-s"), "v")
        self.assertEqual(list(it), ["a", "b"])

    # -- bad values

    def test_malformed_values_are_invalid_argument(self):
        cases = [("echod-response-bytes", "abc"), ("echod-response-bytes", "-1"),
                 ("echod-response-bytes", "1.5"), ("echod-response-bytes", ""),
                 ("echod-cpu-us", "1.5"), ("echod-cpu-us", "-3"), ("echod-cpu-us", "10ms"),
                 ("echod-sleep-us", "x"), ("echod-sleep-us", "99999999999999999999"),
                 ("echod-status", "17"), ("echod-status", "OK"), ("echod-status", "-1"),
                 ("echod-error-rate", "1.5"), ("echod-error-rate", "abc"), ("echod-error-rate", "-0.1"),
                 ("echod-echo-metadata", "yes"), ("echod-echo-metadata", "1")]
        for key, value in cases:
            e = rpc_error(self.stub.UnaryEcho, "x", metadata=[(key, value)], timeout=T)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, (key, value))
            self.assertTrue(e.details().startswith(key + ": expected"), (key, value, e.details()))
        e = rpc_error(self.stub.UnaryEcho, "x", metadata=[("echod-cpu-us", "abc")], timeout=T)
        self.assertTrue(e.details().startswith("echod-cpu-us: expected microseconds"), e.details())
        # on a stream too, before any response
        e = rpc_error(self.stub.BidirectionalStreamingEcho, iter(["a"]),
                      metadata=[("echod-sleep-us", "soon")], timeout=T)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("echod-sleep-us", e.details())
        # unknown echod-* names are plain metadata, not errors
        self.assertEqual(self.stub.UnaryEcho("x", metadata=[("echod-nothing", "q")], timeout=T), "x")

    def test_default_caps(self):
        """config/echod.yaml caps: cpu and sleep 10 s, response 4 MiB."""
        for key, value, cap in (("echod-cpu-us", "10000001", "work.max_cpu"),
                                ("echod-sleep-us", "10000001", "work.max_sleep"),
                                ("echod-response-bytes", str(4194305), "work.max_response_bytes")):
            t0 = time.monotonic()
            e = rpc_error(self.stub.UnaryEcho, "x", metadata=[(key, value)], timeout=T)
            self.assertLess(time.monotonic() - t0, 5.0 * SLOW)  # refused, not run
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, key)
            self.assertIn(key, e.details())
            self.assertIn(cap, e.details())
        r = self.stub.UnaryEcho("x", metadata=md(response_bytes=4194304), timeout=T)
        self.assertEqual(len(r), 4194304)


class WorkConfig(unittest.TestCase):
    """work.* in config: caps, defaults, per_method, allow_metadata_overrides."""

    def test_caps_from_config(self):
        sets = ["work.max_cpu=10ms", "work.max_sleep=20ms", "work.max_response_bytes=100"]
        with Daemon(sets=sets) as d, d.channel() as ch:
            stub = EchoStub(ch)
            for key, value, cap in (("echod-cpu-us", "10001", "work.max_cpu"),
                                    ("echod-sleep-us", "20001", "work.max_sleep"),
                                    ("echod-response-bytes", "101", "work.max_response_bytes")):
                e = rpc_error(stub.UnaryEcho, "x", metadata=[(key, value)], timeout=T)
                self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, key)
                self.assertIn(key, e.details())
                self.assertIn(cap, e.details())
            # at the caps: fine
            meta = md(cpu_us=10000, sleep_us=20000, response_bytes=100)
            self.assertEqual(stub.UnaryEcho("x", metadata=meta, timeout=T), "x" + "." * 99)
            e = rpc_error(stub.ClientStreamingEcho, iter(["a"]), metadata=md(response_bytes=101),
                          timeout=T)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_defaults_and_per_method(self):
        sets = ["work.defaults.response_bytes=5",
                "work.per_method./grpc.examples.echo.Echo/UnaryEcho.response_bytes=3",
                "work.per_method./grpc.examples.echo.Echo/ClientStreamingEcho.status=6"]
        with Daemon(sets=sets) as d, d.channel() as ch:
            stub = EchoStub(ch)
            self.assertEqual(stub.UnaryEcho("hello world", timeout=T), "hel")
            self.assertEqual(list(stub.ServerStreamingEcho("hello world", timeout=T)), ["hello"] * 10)
            self.assertEqual(list(stub.BidirectionalStreamingEcho(iter(["ab", "abcdefg"]), timeout=T)),
                             ["ab...", "abcde"])
            e = rpc_error(stub.ClientStreamingEcho, iter(["a"]), timeout=T)
            self.assertEqual(e.code(), grpc.StatusCode.ALREADY_EXISTS)
            self.assertEqual(e.details(), ON_PURPOSE)
            # metadata still overrides (allow_metadata_overrides defaults to true)
            self.assertEqual(stub.UnaryEcho("hello", metadata=md(response_bytes=7), timeout=T),
                             "hello..")
            self.assertEqual(stub.ClientStreamingEcho(iter(["a"]), metadata=md(status=0), timeout=T),
                             "a....")

    def test_overrides_disabled_ignores_headers(self):
        sets = ["work.allow_metadata_overrides=false", "work.defaults.response_bytes=5"]
        with Daemon(sets=sets) as d, d.channel() as ch:
            stub = EchoStub(ch)
            self.assertEqual(stub.UnaryEcho("hello world", timeout=T), "hello")
            for meta in (md(response_bytes=2), md(status=5), md(error_rate="1.0"),
                         md(cpu_us=20000000), md(sleep_us=20000000)):
                t0 = time.monotonic()
                self.assertEqual(stub.UnaryEcho("hello world", metadata=meta, timeout=T), "hello", meta)
                self.assertLess(time.monotonic() - t0, 5.0 * SLOW, meta)
            r, call = stub.UnaryEcho.with_call("hi", metadata=[("echod-echo-metadata", "true"),
                                                              ("x-one", "1")], timeout=T)
            self.assertEqual(r, "hi...")
            self.assertNotIn("x-one", dict(call.initial_metadata()))

    def test_overrides_disabled_ignores_malformed_headers(self):
        """Ignored means ignored: a malformed knob must not fail the call either."""
        sets = ["work.allow_metadata_overrides=false", "work.defaults.response_bytes=5"]
        with Daemon(sets=sets) as d, d.channel() as ch:
            stub = EchoStub(ch)
            for key, value in (("echod-cpu-us", "lots"), ("echod-status", "99"),
                               ("echod-response-bytes", "-1")):
                try:
                    r = stub.UnaryEcho("hello world", metadata=[(key, value)], timeout=T)
                except grpc.RpcError as e:
                    self.fail("with work.allow_metadata_overrides=false, %s: %s failed the call: "
                              "%s %r" % (key, value, e.code(), e.details()))
                self.assertEqual(r, "hello")

    def test_config_sleep_default_on_fixed_executor(self):
        sets = ["executor.mode=fixed", "executor.threads=2", "work.defaults.sleep_us=100000",
                "work.defaults.cpu_us=5000"]
        with Daemon(sets=sets) as d, d.channel() as ch:
            stub = EchoStub(ch)
            t0 = time.monotonic()
            r, call = stub.UnaryEcho.with_call("w", timeout=T)
            self.assertGreaterEqual(time.monotonic() - t0, 0.1)
            q, h, total = timing_of(call.trailing_metadata())
            self.assertGreaterEqual(h, 105000)
            self.assertGreaterEqual(total, h)
            m = d.metrics()
            self.assertGreater(m.metric("echod_step_runs_total", thread="worker"), 0)


# ---------------------------------------------------------------------------------------------


class Timing(unittest.TestCase):
    def test_timing_trailer_on_every_kind_of_call(self):
        with Daemon(sets=["executor.mode=cached"]) as d, d.channel() as ch:
            stub = EchoStub(ch)
            _, call = stub.UnaryEcho.with_call("t", metadata=md(cpu_us=3000), timeout=T)
            q, h, total = timing_of(call.trailing_metadata())
            self.assertGreaterEqual(h, 3000)
            self.assertGreaterEqual(total, h)
            it = stub.ServerStreamingEcho("t", timeout=T)
            self.assertEqual(len(list(it)), 10)
            timing_of(it.trailing_metadata())
            _, call = stub.ClientStreamingEcho.with_call(iter(["a", "b"]), timeout=T)
            timing_of(call.trailing_metadata())
            it = stub.BidirectionalStreamingEcho(iter(["a"]), timeout=T)
            self.assertEqual(list(it), ["a"])
            timing_of(it.trailing_metadata())
            # failures: deliberate, invalid argument
            e = rpc_error(stub.UnaryEcho, "x", metadata=md(status=5, cpu_us=2000), timeout=T)
            q, h, total = timing_of(e.trailing_metadata())
            self.assertGreaterEqual(h, 2000)
            self.assertGreaterEqual(total, h)
            e = rpc_error(stub.UnaryEcho, "x", metadata=[("echod-cpu-us", "nope")], timeout=T)
            timing_of(e.trailing_metadata())

            # raw HTTP/2: in the trailers of a normal call, in the single HEADERS of Trailers-Only
            h2 = d.h2()
            try:
                st = h2.unary("raw")
                self.assertFalse(st.trailers_only)
                self.assertEqual(st.grpc_status, 0)
                self.assertIsNone(st.header("echod-timing"))  # not in the leading headers
                timing_of(st.trailers)
                sid = h2.start(UNARY, extra=md(status=5))
                h2.send_message(sid, "x", end_stream=True)
                st = h2.wait_done(sid)
                self.assertTrue(st.trailers_only, st)
                self.assertEqual(st.grpc_status, 5)
                timing_of(st.headers)
            finally:
                h2.close()

    def test_timing_trailer_off(self):
        with Daemon(sets=["telemetry.timing_trailer=false"]) as d, d.channel() as ch:
            stub = EchoStub(ch)
            _, call = stub.UnaryEcho.with_call("t", timeout=T)
            self.assertNotIn("echod-timing", dict(call.trailing_metadata()))
            it = stub.BidirectionalStreamingEcho(iter(["a"]), timeout=T)
            self.assertEqual(list(it), ["a"])
            self.assertNotIn("echod-timing", dict(it.trailing_metadata()))
            e = rpc_error(stub.UnaryEcho, "x", metadata=md(status=5), timeout=T)
            self.assertNotIn("echod-timing", dict(e.trailing_metadata() or ()))


# ---------------------------------------------------------------------------------------------


class Admission(unittest.TestCase):
    def _health(self, channel, case):
        """Health/Check answers SERVING despite the limit (skipped while Health is missing)."""
        try:
            resp = health_stub(channel)(b"", timeout=T)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                print("Health/Check not implemented yet: exemption not checked")
                return
            case.fail("Health/Check at the limit failed: %s %s" % (e.code(), e.details()))
        self.assertEqual(resp, b"\x08\x01")  # status: SERVING

    def test_parked_bidi_streams_fill_the_limit(self):
        with Daemon(sets=["limits.max_calls_in_flight=3"]) as d:
            h = d.h2()
            ch = d.channel()
            try:
                stub = EchoStub(ch)
                sids = []
                for i in range(3):
                    sid = h.start(BIDI)
                    h.send_message(sid, "p%d" % i)
                    self.assertEqual(h.wait_messages(sid, 1), ["p%d" % i])
                    sids.append(sid)
                d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 3, what="3 in flight")
                before = d.metrics()
                # a fourth call, from another connection and on the same one: refused at once
                t0 = time.monotonic()
                e = rpc_error(stub.UnaryEcho, "late", timeout=T)
                self.assertLess(time.monotonic() - t0, 2.0 * SLOW)
                self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertIn("max_calls_in_flight", e.details())
                e = rpc_error(stub.BidirectionalStreamingEcho, iter(["late"]), timeout=T)
                self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                sid4 = h.start(UNARY)
                h.send_message(sid4, "late", end_stream=True)
                st = h.wait_done(sid4)
                self.assertEqual(st.grpc_status, 8, st)
                self._health(ch, self)
                # A refused or health call's `closed` step runs on the loop after its trailers are
                # written, so the client can scrape before the gauge has let go of it: wait for it.
                m = d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 3,
                                   what="the refused and health calls closed, the 3 parked ones in flight")
                self.assertEqual(metric_delta(m, before, "echod_calls_shed_total"), 3)
                self.assertEqual(m.metric("echod_calls_admitted"), 3)
                # nothing accepted was dropped: the parked streams go on and end OK
                for i, sid in enumerate(sids):
                    h.send_message(sid, "q%d" % i, end_stream=True)
                for i, sid in enumerate(sids):
                    st = h.wait_done(sid)
                    self.assertEqual(st.grpc_status, 0, st)
                    self.assertEqual(st.messages(), ["p%d" % i, "q%d" % i])
                d.wait_idle()
                self.assertEqual(stub.UnaryEcho("room again", timeout=T), "room again")
                lbl = dict(grpc_service=SERVICE, grpc_method="UnaryEcho")
                m = d.wait_metrics(lambda m: m.metric("grpc_server_handled_total", grpc_code="OK",
                                                      **lbl) >= 1, what="the UnaryEcho call counted")
                self.assertEqual(m.metric("echod_calls_shed_total"), 3)
                self.assertEqual(m.metric("grpc_server_handled_total", grpc_code="OK", **lbl), 1)
            finally:
                h.close()
                ch.close()

    def test_sleeping_unary_calls_on_fixed_executor(self):
        sets = ["limits.max_calls_in_flight=2", "executor.mode=fixed", "executor.threads=2"]
        with Daemon(sets=sets) as d, d.channel() as ch:
            stub = EchoStub(ch)
            parked = [stub.UnaryEcho.future("slow%d" % i, metadata=md(sleep_us=1500000), timeout=T)
                      for i in range(2)]
            d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 2, what="2 in flight")
            shed = 0
            for _ in range(5):
                t0 = time.monotonic()
                e = rpc_error(stub.UnaryEcho, "more", timeout=T)
                self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertLess(time.monotonic() - t0, 1.0 * SLOW)
                shed += 1
            self._health(ch, self)
            self.assertEqual(d.metrics().metric("echod_calls_shed_total"), shed)
            self.assertEqual([f.result() for f in parked], ["slow0", "slow1"])
            d.wait_idle()
            self.assertEqual(stub.UnaryEcho("fits", timeout=T), "fits")

    def test_unlimited_by_default(self):
        with Daemon() as d, d.channel() as ch:
            stub = EchoStub(ch)
            futs = [stub.UnaryEcho.future("u%d" % i, metadata=md(sleep_us=20000), timeout=T)
                    for i in range(50)]
            self.assertEqual([f.result() for f in futs], ["u%d" % i for i in range(50)])
            self.assertEqual(d.metrics().metric("echod_calls_shed_total"), 0)


# ---------------------------------------------------------------------------------------------


class Saturation(unittest.TestCase):
    def test_loop_and_process_gauges(self):
        with Daemon(sets=["io.event_loops=2"]) as d, d.channel() as ch:
            stub = EchoStub(ch)
            for i in range(20):
                stub.UnaryEcho("g%d" % i, timeout=T)
            lbl = dict(grpc_service=SERVICE, grpc_method="UnaryEcho")
            m = d.wait_metrics(lambda m: m.metric("echod_loop_lag_distribution_seconds_count") >= 4
                               and m.metric("grpc_server_handling_seconds_count", **lbl) >= 20
                               and m.metric("echod_calls_in_flight") == 0,
                               what="loop lag samples and 20 calls done")
            for loop in ("0", "1"):
                ratio = m["echod_loop_busy_ratio", {"loop": loop}]
                self.assertGreaterEqual(ratio, 0.0)
                self.assertLessEqual(ratio, 1.0)
                self.assertGreaterEqual(m["echod_loop_lag_seconds", {"loop": loop}], 0.0)
                self.assertGreaterEqual(m["echod_loop_cpu_seconds_total", {"loop": loop}], 0.0)
            self.assertGreater(m.metric("echod_loop_cpu_seconds_total"), 0.0)
            self.assertEqual(m.metric("echod_loop_lag_distribution_seconds_bucket", le="+Inf"),
                             m.metric("echod_loop_lag_distribution_seconds_count"))
            cpus = m.metric("echod_effective_cpus")
            self.assertGreaterEqual(cpus, 1)
            self.assertLessEqual(cpus, len(os.sched_getaffinity(0)))
            self.assertEqual(m.metric("echod_calls_in_flight"), 0)
            self.assertEqual(m.metric("echod_calls_shed_total"), 0)
            self.assertEqual(m.metric("echod_deadline_expired_queued_total"), 0)
            self.assertTrue(m.has("echod_executor_queue_depth"))
            self.assertEqual(m.metric("grpc_server_handling_seconds_count", **lbl), 20)
            self.assertEqual(m.metric("grpc_server_handling_seconds_bucket", le="+Inf", **lbl), 20)
            self.assertEqual(m.metric("echod_step_runs_total", thread="loop"), 6 * 20)
            self.assertEqual(m.metric("echod_step_runs_total", thread="worker"), 0)
            # cgroup throttling: only where cgroup v2 cpu.stat is readable
            if _cgroup_cpu_stat_readable():
                self.assertTrue(m.has("echod_cgroup_cpu_throttled_periods_total"), _names(m))
                self.assertTrue(m.has("echod_cgroup_cpu_throttled_seconds_total"), _names(m))
            else:
                print("cgroup v2 cpu.stat not readable here: echod_cgroup_cpu_* not required")

    def test_handling_histograms_in_microseconds(self):
        with Daemon() as d, d.channel() as ch:
            stub = EchoStub(ch)
            stub.UnaryEcho("fast", timeout=T)
            stub.UnaryEcho("slow", metadata=md(sleep_us=30000), timeout=T)
            lbl = dict(grpc_service=SERVICE, grpc_method="UnaryEcho")
            # observed as the call completes, which may be just after the client has its answer
            m = d.wait_metrics(lambda m: m.metric("grpc_server_handling_seconds_count", **lbl) >= 2,
                               what="2 UnaryEcho calls observed")
            buckets = sorted((float(l["le"]), v) for l, v in m.series("grpc_server_handling_seconds_bucket")
                             if l.get("grpc_method") == "UnaryEcho")
            self.assertLessEqual(buckets[0][0], 1e-5, buckets)  # microsecond-scale buckets
            self.assertGreaterEqual(buckets[-2][0], 1.0, buckets)
            self.assertGreaterEqual(m.metric("grpc_server_handling_seconds_sum", **lbl), 0.03)
            below_10ms = [v for le, v in buckets if le <= 0.01]
            self.assertEqual(below_10ms[-1], 1, buckets)  # the fast one only
            # per stream message: a bidi stream of 5 messages is 5 observations
            before = d.metrics()
            msgs = ["b%d" % i for i in range(5)]
            got = list(stub.BidirectionalStreamingEcho(iter(msgs), metadata=md(sleep_us=20000), timeout=T))
            self.assertEqual(got, msgs)
            bl = dict(grpc_service=SERVICE, grpc_method="BidirectionalStreamingEcho")
            after = d.wait_metrics(lambda m: m.metric("grpc_server_handling_seconds_count", **bl) >= 1,
                                   what="the bidi call observed")
            self.assertEqual(metric_delta(after, before, "echod_message_handling_seconds_count", **bl), 5)
            self.assertGreaterEqual(metric_delta(after, before, "echod_message_handling_seconds_sum", **bl),
                                    0.1)
            self.assertEqual(metric_delta(after, before, "grpc_server_handling_seconds_count", **bl), 1)

    def test_latency_buckets_past_a_second(self):
        """A 3 s call has a finite bucket: saturation p99s run 2-40 s, and histogram_quantile (the
        recording rules, the dashboard) answers the last finite bound for anything past it."""
        with Daemon() as d, d.channel() as ch:
            stub = EchoStub(ch)
            d.wait_metrics(lambda m: m.metric("echod_loop_lag_distribution_seconds_count") >= 1,
                           what="a loop sample")
            # direct executor: the sleep holds the loop, so its 100 ms timer fires ~2.9 s late
            stub.UnaryEcho("slow", metadata=md(sleep_us=3000000), timeout=T)
            lbl = dict(grpc_service=SERVICE, grpc_method="UnaryEcho")
            m = d.wait_metrics(lambda m: m.metric("grpc_server_handling_seconds_count", **lbl) >= 1
                               and m.metric("echod_loop_lag_distribution_seconds_sum") >= 2.5,
                               what="the 3 s call and the late timer observed")
            for name, labels in (("grpc_server_handling_seconds", lbl),
                                 ("echod_loop_lag_distribution_seconds", {})):
                # by value: the rendering of a bound ("60", "6e+01") is not the point here
                b = {float(l["le"]): v for l, v in m.series(name + "_bucket")
                     if labels.items() <= l.items()}
                finite = sorted(le for le in b if le != float("inf"))
                self.assertEqual(finite[-1], 60.0, b)
                # the slow one in (2.5 s, 5 s], nothing past 5 s; the loop's other samples are fast
                self.assertEqual(b.get(5.0, 0) - b.get(2.5, 0), 1, (name, b))
                self.assertEqual(b[float("inf")], b.get(5.0), (name, b))

    def test_busy_loop_and_lag_on_direct_executor(self):
        """Work on the loop thread (direct) shows as loop busy ratio and loop lag."""
        with Daemon() as d, d.channel() as ch:
            stub = EchoStub(ch)
            before = d.wait_metrics(lambda m: m.metric("echod_loop_lag_distribution_seconds_count") >= 2,
                                    what="loop samples")
            stop = threading.Event()
            peak = [0.0]

            def scrape():
                while not stop.is_set():
                    peak[0] = max(peak[0], d.metrics().metric("echod_loop_busy_ratio"))
                    time.sleep(0.05)

            t = threading.Thread(target=scrape)
            t.start()
            calls = 0
            try:
                # back-to-back 50 ms burns for 1 s (longer on a loaded machine, up to 20 calls)
                t0 = time.monotonic()
                while calls < 20 and (time.monotonic() - t0 < 1.0 or calls < 10):
                    stub.UnaryEcho("busy", metadata=md(cpu_us=50000), timeout=T)
                    calls += 1
                stub.UnaryEcho("sleepy", metadata=md(sleep_us=400000), timeout=T)
            finally:
                stop.set()
                t.join()
            after = d.wait_metrics(
                lambda m: metric_delta(m, before, "echod_loop_lag_distribution_seconds_count") >= 3,
                what="more loop samples")
            loop_cpu = metric_delta(after, before, "echod_loop_cpu_seconds_total")
            print("%d x 50 ms on the loop: loop CPU +%.3f s, busy ratio peak %.3f; lag sum +%.3f s" % (
                calls, loop_cpu, peak[0],
                metric_delta(after, before, "echod_loop_lag_distribution_seconds_sum")))
            # the burns ran on the loop thread (direct executor) and its busy ratio showed it
            self.assertGreaterEqual(loop_cpu, 0.9 * calls * 0.05)
            self.assertGreater(peak[0], 0.25)
            # the 400 ms sleep held the 100 ms timer back by ~300 ms
            self.assertGreaterEqual(metric_delta(after, before, "echod_loop_lag_distribution_seconds_sum"),
                                    0.2)
            self.assertGreaterEqual(after.metric("echod_loop_lag_distribution_seconds_bucket", le="+Inf")
                                    - after.metric("echod_loop_lag_distribution_seconds_bucket", le="0.1"), 1)

    def test_queue_depth_wait_and_deadline_expired_while_queued(self):
        sets = ["executor.mode=fixed", "executor.threads=1"]
        with Daemon(sets=sets) as d:
            h = d.h2()
            try:
                # the single worker sleeps 1 s in the first call
                busy = h.start(UNARY, extra=md(sleep_us=1000000))
                h.send_message(busy, "busy", end_stream=True)
                d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 1, what="1 in flight")
                time.sleep(0.05)
                before = d.metrics()
                # a call with 100 ms to live queues behind it and expires there
                t0 = time.monotonic()
                late = h.start(UNARY, timeout="100m")
                h.send_message(late, "late", end_stream=True)
                m = d.wait_metrics(lambda m: m.metric("echod_executor_queue_depth") >= 1,
                                   timeout=0.5, what="a queued step")
                st = h.wait_done(late)
                waited = time.monotonic() - t0
                self.assertEqual(st.grpc_status, 4, st)  # DEADLINE_EXCEEDED
                self.assertLess(waited, 0.8, st)         # at its deadline, not after the sleep
                m = d.metrics()
                self.assertEqual(metric_delta(m, before, "echod_deadline_expired_queued_total"), 1)
                st = h.wait_done(busy)
                self.assertEqual(st.grpc_status, 0, st)
                self.assertEqual(st.messages(), ["busy"])
                m = d.wait_idle()
                self.assertEqual(m.metric("echod_deadline_expired_queued_total"), 1)
                self.assertEqual(m.metric("echod_executor_queue_depth"), 0)
                # the queued steps waited ~the rest of the sleep
                self.assertGreaterEqual(m.metric("echod_executor_queue_wait_seconds_sum"), 0.5)
                self.assertGreater(m.metric("echod_executor_queue_wait_seconds_count"), 0)
                self.assertGreater(m.metric("echod_step_runs_total", thread="worker"), 0)
                # a call that starts its handler before its deadline is not counted as queued
                sid = h.start(UNARY, timeout="200m", extra=md(sleep_us=400000))
                h.send_message(sid, "handler", end_stream=True)
                st = h.wait_done(sid)
                self.assertEqual(st.grpc_status, 4, st)
                m = d.wait_idle()
                self.assertEqual(m.metric("echod_deadline_expired_queued_total"), 1)
            finally:
                h.close()


def _cgroup_cpu_stat_readable():
    try:
        with open("/proc/self/cgroup") as f:
            first = f.readline().strip()
        if not first.startswith("0::"):
            return False
        rel = first[3:]
        path = "/sys/fs/cgroup%s/cpu.stat" % ("" if rel == "/" else rel)
        with open(path) as f:
            return "nr_throttled" in f.read()
    except OSError:
        return False


def _names(m):
    return sorted({n for n, _ in m.samples})


# ---------------------------------------------------------------------------------------------


class StageMarks(unittest.TestCase):
    def test_mark(self):
        with Daemon() as d:
            p = d.admin_port
            m0 = d.metrics()
            t0 = time.time()
            self.assertEqual(post(p, "/admin/mark?stage=ramp-1"), (200, b"marked\n"))
            m = d.metrics()
            self.assertEqual(m["echod_stage_info", {"stage": "ramp-1"}], 1)
            self.assertEqual(len(m.series("echod_stage_info")), 1)
            self.assertEqual(metric_delta(m, m0, "echod_stage_marks_total"), 1)
            started = m.metric("echod_stage_started_timestamp_seconds")
            self.assertLessEqual(abs(started - t0), 5.0)
            time.sleep(0.02)
            self.assertEqual(post(p, "/admin/mark?stage=Steady_2.b:c-" + "x" * 87)[0], 200)  # 100 chars
            m2 = d.metrics()
            self.assertEqual(m2.series("echod_stage_info"),
                             [({"stage": "Steady_2.b:c-" + "x" * 87}, 1.0)])
            self.assertEqual(metric_delta(m2, m0, "echod_stage_marks_total"), 2)
            self.assertGreater(m2.metric("echod_stage_started_timestamp_seconds"), started)

            for bad in ("/admin/mark", "/admin/mark?stage=", "/admin/mark?stage=a%20b",
                        "/admin/mark?stage=a/b", "/admin/mark?stage=" + "y" * 101,
                        "/admin/mark?stage=%22q%22", "/admin/mark?other=x"):
                self.assertEqual(post(p, bad)[0], 400, bad)
            status, _, headers = request(p, "GET", "/admin/mark?stage=get")
            self.assertEqual(status, 405)
            m3 = d.metrics()
            self.assertEqual(metric_delta(m3, m0, "echod_stage_marks_total"), 2)
            self.assertEqual(len(m3.series("echod_stage_info")), 1)
            self.assertIn("Steady_2", m3.series("echod_stage_info")[0][0]["stage"])


    def test_stage_header(self):
        """echod-stage request metadata (the k6 scripts send one per call) names the stage: only a
        change is a mark, over several connections and loops alike, and a name that is not
        [A-Za-z0-9._:-]{1,100} is ignored (it would break the Prometheus label)."""
        with Daemon(sets=["io.event_loops=2"]) as d:
            m0 = d.metrics()
            channels = [d.channel() for _ in range(4)]
            try:
                stubs = [EchoStub(ch) for ch in channels]
                for stage in ("s01", "s02"):
                    for stub in stubs:
                        for _ in range(5):
                            self.assertEqual(stub.UnaryEcho("x", metadata=[("echod-stage", stage)], timeout=T), "x")
                    m = d.metrics()
                    self.assertEqual(m.series("echod_stage_info"), [({"stage": stage}, 1.0)])
                for bad in ('s"03', "s 03", "s{03}", "z" * 101):
                    self.assertEqual(stubs[0].UnaryEcho("x", metadata=[("echod-stage", bad)], timeout=T), "x")
                m = d.metrics()
                self.assertEqual(m.series("echod_stage_info"), [({"stage": "s02"}, 1.0)])
                self.assertEqual(metric_delta(m, m0, "echod_stage_marks_total"), 2)
            finally:
                for ch in channels:
                    ch.close()


class ProbeAtSaturation(unittest.TestCase):
    """Issue 4: a Kubernetes gRPC probe passes while the executor is saturated, because Health
    is answered on the I/O loop and never queued behind the executor."""

    def test_health_answers_within_100ms_while_the_pool_is_full(self):
        with Daemon(sets=["executor.mode=fixed", "executor.threads=1"]) as d:
            ch = d.channel()
            unary = ch.unary_unary(UNARY, request_serializer=pb_encode, response_deserializer=lambda b: b)
            # 12 calls of 250 ms each on one worker: 3 s of queue ahead of anything new
            md = [("echod-sleep-us", "250000")]
            futures = [unary.future("busy-%d" % i, metadata=md, timeout=60 * SLOW) for i in range(12)]
            d.wait_metrics(lambda m: m.metric("echod_executor_queue_depth", executor="fixed") >= 5,
                           what="the one-thread pool to have a queue")
            probe = health_stub(ch)
            worst = 0.0
            for _ in range(10):
                t0 = time.monotonic()
                resp = probe(b"", timeout=5 * SLOW)
                worst = max(worst, time.monotonic() - t0)
                self.assertEqual(resp, b"\x08\x01", "Health/Check did not say SERVING")
            queued = d.metrics().metric("echod_executor_queue_depth", executor="fixed")
            print("worst Health/Check latency %.1f ms with %d calls queued on the one worker"
                  % (worst * 1000, queued))
            self.assertGreater(queued, 0, "the pool drained before the probes: nothing was proven")
            self.assertLess(worst, 0.1 * SLOW, "a probe waited behind the executor")
            for f in futures:
                f.result(timeout=60 * SLOW)
            ch.close()


if __name__ == "__main__":
    main()
