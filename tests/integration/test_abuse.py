"""Hostile peers (README: Connection guards): HTTP/2 and gRPC abuse, floods, peers that never read, slowloris,
connection limits, TLS garbage. One bad connection must never hurt another: every test runs
while a well-behaved grpcio client (the "witness", a thread) keeps calling the same daemon, and
every witness call must succeed. Memory bounds are read from /metrics
(process_resident_memory_bytes) and printed, so a run shows the figures.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_abuse.py
"""

import os
import random
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpack  # noqa: E402

from echod_harness import (DaemonTestCase, BIDI, CLIENT_STREAMING, SANITIZER, SERVER_STREAMING, SLOW,  # noqa: E402
                           UNARY, Daemon, EchoStub, grpc_frame, main, pb_encode,
                           tls_client_context)

# HTTP/2 frame types and error codes (RFC 9113)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED, \
    FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, CONNECT_ERROR, \
    ENHANCE_YOUR_CALM = range(12)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

MiB = 1 << 20
# ASan keeps freed memory in quarantine and has its own allocator overhead: RSS bounds grow.
RSS_SLACK = 4.0 if SANITIZER else 1.0
ASAN_ENV = {"ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=32").lstrip(":")}


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def settings(**kv):
    ids = {"header_table_size": 1, "enable_push": 2, "max_concurrent_streams": 3,
           "initial_window_size": 4, "max_frame_size": 5, "max_header_list_size": 6}
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", ids[k], v) for k, v in kv.items()))


def request_headers(path=UNARY, extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"), ("te", "trailers")] + list(extra)


class RawConn:
    """HTTP/2 by hand over a plain socket: exactly the bytes a test wants, whatever the RFC says.
    Reads are explicit, so a test can also be a peer that never reads."""

    def __init__(self, port, preface=True, initial=None, tcp_rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if tcp_rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, tcp_rcvbuf)
        self.sock.settimeout(10 * SLOW)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.enc = hpack.Encoder()
        self.buf = bytearray()
        self.frames = []      # (type, flags, stream id, payload) received so far
        self.eof = False
        self.next_sid = 1
        self.ack_settings = preface  # a peer that never spoke HTTP/2 does not ack either
        if preface:
            self.sock.sendall(PREFACE + (initial if initial is not None else settings()))

    def send(self, data):
        self.sock.sendall(data)

    def try_send(self, data):
        """Sends; False once the server has closed (a flood ends that way)."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def headers(self, path=UNARY, extra=(), end_stream=False, sid=None):
        """Opens a stream; a block above 16 KiB goes out as HEADERS + CONTINUATION frames."""
        sid = sid or self.new_sid()
        block = self.enc.encode(request_headers(path, extra))
        parts = [block[i:i + 16384] for i in range(0, len(block), 16384)] or [b""]
        es = END_STREAM if end_stream else 0
        out = frame(HEADERS, es | (END_HEADERS if len(parts) == 1 else 0), sid, parts[0])
        for k, part in enumerate(parts[1:], 2):
            out += frame(CONTINUATION, END_HEADERS if k == len(parts) else 0, sid, part)
        self.send(out)
        return sid

    def new_sid(self):
        sid = self.next_sid
        self.next_sid += 2
        return sid

    def read(self, timeout):
        """Reads what arrives within timeout; returns False once the server closed."""
        if self.eof:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return True
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            self.frames.append((self.buf[3], self.buf[4], sid, bytes(self.buf[9:9 + n])))
            if self.buf[3] == SETTINGS and not self.buf[4] & ACK and self.ack_settings:
                self.try_send(frame(SETTINGS, ACK, 0))  # echod's settings apply once acked
            del self.buf[:9 + n]
        return True

    def wait(self, pred, timeout=10.0, what="condition"):
        deadline = time.monotonic() + timeout * SLOW
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %s; frames %s" % (what, self.summary()))
            if not self.read(min(left, 0.5)) and not pred():
                raise AssertionError("closed while waiting for %s; frames %s" % (what, self.summary()))

    def wait_closed(self, timeout=10.0):
        """Reads until the server closes the socket; True if it did within timeout."""
        deadline = time.monotonic() + timeout * SLOW
        while not self.eof and time.monotonic() < deadline:
            self.read(min(0.5, max(0.01, deadline - time.monotonic())))
        return self.eof

    def goaway(self):
        """(last stream id, error code) of the last GOAWAY received, or None."""
        gs = [(struct.unpack(">I", p[:4])[0] & 0x7FFFFFFF, struct.unpack(">I", p[4:8])[0])
              for t, _, _, p in self.frames if t == GOAWAY]
        return gs[-1] if gs else None

    def resets(self):
        return {sid: struct.unpack(">I", p)[0] for t, _, sid, p in self.frames if t == RST_STREAM}

    def summary(self):
        names = ["DATA", "HEADERS", "PRIORITY", "RST", "SETTINGS", "PUSH", "PING", "GOAWAY", "WU", "CONT"]
        out = [("%s(%d)" % (names[t] if t < len(names) else t, sid), p[:8].hex()) for t, _, sid, p in self.frames]
        return "%r eof=%s" % (out[-12:], self.eof)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Witness:
    """A well-behaved grpcio client calling the daemon from a thread for as long as a test runs:
    unary calls back to back, a bidi stream every tenth. Every call must succeed."""

    def __init__(self, d):
        self.d = d
        self.stop_flag = threading.Event()
        self.first = threading.Event()
        self.ok = 0
        self.errors = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        with self.d.channel() as ch:
            stub = EchoStub(ch)
            i = 0
            while not self.stop_flag.is_set():
                try:
                    msg = "witness-%d" % i
                    if i % 10 == 9:
                        msgs = ["%s-%d" % (msg, k) for k in range(5)]
                        got = list(stub.BidirectionalStreamingEcho(iter(msgs), timeout=20 * SLOW))
                        if got != msgs:
                            raise AssertionError("bidi echoed %r" % got)
                    else:
                        got = stub.UnaryEcho(msg, timeout=20 * SLOW)
                        if got != msg:
                            raise AssertionError("unary echoed %r" % got)
                    self.ok += 1
                    self.first.set()
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    self.errors.append(repr(e)[:300])
                    self.first.set()
                i += 1
                time.sleep(0.005)

    def __enter__(self):
        self.thread.start()
        if not self.first.wait(20 * SLOW):
            raise AssertionError("the witness client never completed a call")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop_flag.set()
        self.thread.join(60 * SLOW)
        if exc_type is None:
            if self.thread.is_alive():
                raise AssertionError("the witness client is stuck in a call")
            if self.errors:
                raise AssertionError("%d witness calls failed (of %d), first: %s"
                                     % (len(self.errors), self.ok + len(self.errors), self.errors[0]))
            if self.ok == 0:
                raise AssertionError("the witness made no call")
        return False


def rss(d):
    return d.metrics().metric("process_resident_memory_bytes")


class Base(DaemonTestCase):
    SETS = []

    @classmethod
    def start_daemon(cls):
        return Daemon(sets=cls.SETS, env=ASAN_ENV if SANITIZER == "asan" else None).start()

    def setUp(self):
        self.conns = []
        self.witness = Witness(self.d).__enter__()

    def tearDown(self):
        for c in self.conns:
            c.close()
        self.witness.__exit__(None, None, None)
        self.assertTrue(self.d.alive(), "echod died")
        # every call ended (the witness has stopped), and every abusive connection is gone
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 0
                            and m.metric("echod_connections") == 0, 15 * SLOW,
                            "no call in flight and no connection left")

    def raw(self, **kw):
        c = RawConn(self.d.grpc_port, **kw)
        self.conns.append(c)
        return c

    def assert_serves(self):
        """A fresh connection still gets a correct answer."""
        c = self.raw()
        sid = c.headers(UNARY)
        c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("still here"))))
        c.wait(lambda: any(t == HEADERS and s == sid and f & END_STREAM for t, f, s, _ in c.frames),
               what="the unary response")
        data = b"".join(p for t, _, s, p in c.frames if t == DATA and s == sid)
        self.assertEqual(data, grpc_frame(pb_encode("still here")))
        c.close()


# ---------------------------------------------------------------------------------------------
# HTTP/2 level

RESETS = 200  # transport.max_resets_per_second of this class's daemon


def closed_delta(reason, before, after):
    """echod_connections_closed_total{reason} between two scrapes."""
    return (after.metric("echod_connections_closed_total", reason=reason)
            - before.metric("echod_connections_closed_total", reason=reason))


class H2Abuse(Base):
    SETS = ["transport.max_resets_per_second=%d" % RESETS, "transport.max_concurrent_streams=8"]

    def test_rapid_reset(self):
        """CVE-2023-44487: HEADERS then RST_STREAM as fast as possible. The work echod does is
        bounded by the reset rate, and the offender gets GOAWAY(ENHANCE_YOUR_CALM)."""
        before = self.d.metrics()
        c = self.raw()
        hdr = c.enc.encode(request_headers(BIDI))
        t0 = time.monotonic()
        sent = 0
        batch = bytearray()
        for _ in range(50000):
            sid = c.new_sid()
            # the same header block each time: hpack's dynamic table makes it a few bytes
            batch += frame(HEADERS, END_HEADERS, sid, hdr) + frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))
            hdr = c.enc.encode(request_headers(BIDI))
            sent += 1
            if len(batch) > 32768:
                if not c.try_send(bytes(batch)):
                    break
                batch.clear()
        closed = c.wait_closed(10)
        elapsed = time.monotonic() - t0
        self.assertTrue(closed, "the rapid-reset connection was not closed: %s" % c.summary())
        ga = c.goaway()
        self.assertIsNotNone(ga, "closed without GOAWAY")
        self.assertEqual(ga[1], ENHANCE_YOUR_CALM, ga)
        processed = (ga[0] + 1) // 2
        # the token bucket: one second's worth at once, then the rate; plus scheduling slack
        bound = RESETS * (1 + elapsed) + 50
        self.assertLessEqual(processed, bound, "streams processed before GOAWAY")
        after = self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") <= 1)
        started = (after.metric("echod_call_steps_total", step="method_lookup")
                   - before.metric("echod_call_steps_total", step="method_lookup"))
        self.assertLessEqual(started, bound + self.witness.ok + 1000, "calls started by the attack")
        sys.stderr.write("\n  rapid reset: %d HEADERS+RST_STREAM pairs sent in %.2fs; GOAWAY(%d) after "
                         "stream %d (%d streams processed, bound %d)\n"
                         % (sent, elapsed, ga[1], ga[0], processed, bound))
        self.assertEqual(closed_delta("reset_flood", before, after), 1)
        self.assert_serves()

    def test_resets_below_the_rate_are_fine(self):
        """A client cancelling at a normal pace is not cut off."""
        c = self.raw()
        for _ in range(RESETS // 4):
            sid = c.headers(BIDI)
            c.send(frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)))
        sid = c.headers(UNARY)
        c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("after resets"))))
        c.wait(lambda: any(t == HEADERS and s == sid and f & END_STREAM for t, f, s, _ in c.frames),
               what="the unary response")
        self.assertIsNone(c.goaway(), c.summary())

    def test_continuation_flood(self):
        """HEADERS without END_HEADERS, then CONTINUATION frames without end: the connection is
        closed after a few, with bounded memory."""
        base = rss(self.d)
        before = self.d.metrics()
        for payload in ("literal", "empty"):
            c = self.raw()
            c.send(frame(HEADERS, 0, 1, c.enc.encode(request_headers(UNARY))))
            n = 0
            for i in range(20000):
                block = c.enc.encode([("x-flood-%d" % i, "v" * 200)]) if payload == "literal" else b""
                if not c.try_send(frame(CONTINUATION, 0, 1, block)):
                    break
                n += 1
            self.assertTrue(c.wait_closed(10), "CONTINUATION flood not closed: %s" % c.summary())
            self.assertLess(n, 20000, "all CONTINUATION frames were accepted")
            ga = c.goaway()
            self.assertIsNotNone(ga, c.summary())
            self.assertNotEqual(ga[1], NO_ERROR, ga)
        grew = rss(self.d) - base
        self.assertLess(grew, 8 * MiB * RSS_SLACK, "RSS grew by %d bytes" % grew)
        self.d.wait_metrics(lambda m: closed_delta("flood", before, m) == 2, what="2 flood closes counted")
        self.assert_serves()

    def test_oversized_header_block(self):
        """Above transport.max_header_list_bytes (16 KiB): that stream is reset, counted, and the
        connection goes on. Split over CONTINUATION frames it is the same."""
        before = self.d.metrics().metric("echod_header_lists_too_large_total")
        c = self.raw()
        big = c.headers(UNARY, extra=[("x-big", "b" * 15000), ("x-big2", "c" * 5000)])
        c.wait(lambda: big in c.resets(), what="RST_STREAM of the oversized header block")
        block = c.enc.encode(request_headers(UNARY, [("x-part-%d" % i, "p" * 4000) for i in range(6)]))
        sid = c.new_sid()
        chunks = [block[i:i + 8000] for i in range(0, len(block), 8000)]
        c.send(frame(HEADERS, 0, sid, chunks[0]))
        for k, ch in enumerate(chunks[1:], 1):
            c.send(frame(CONTINUATION, END_HEADERS if k == len(chunks) - 1 else 0, sid, ch))
        c.wait(lambda: sid in c.resets(), what="RST_STREAM of the split oversized block")
        self.assertIsNone(c.goaway(), c.summary())
        ok = c.headers(UNARY)
        c.send(frame(DATA, END_STREAM, ok, grpc_frame(pb_encode("fine"))))
        c.wait(lambda: any(t == HEADERS and s == ok and f & END_STREAM for t, f, s, _ in c.frames),
               what="a normal call after the reset")
        after = self.d.metrics().metric("echod_header_lists_too_large_total")
        self.assertEqual(after - before, 2)

    def _flood(self, one, count, expect_close):
        base = rss(self.d)
        before = self.d.metrics()
        c = self.raw(tcp_rcvbuf=4096)
        c.wait(lambda: any(t == SETTINGS for t, _, _, _ in c.frames), what="SETTINGS")
        batch = one * 256
        sent = 0
        t0 = time.monotonic()
        while sent < count and time.monotonic() - t0 < 20 * SLOW:
            if not c.try_send(batch):  # the peer never reads while it floods
                break
            sent += 256
        if expect_close:
            self.assertTrue(c.wait_closed(10), "flood connection not closed: %s" % c.summary())
            ga = c.goaway()
            if ga is not None:  # the GOAWAY may be lost in the reset of a socket with unread data
                self.assertEqual(ga[1], ENHANCE_YOUR_CALM, ga)
            self.d.wait_metrics(lambda m: closed_delta("flood", before, m) == 1, what="the flood close counted")
        grew = rss(self.d) - base
        sys.stderr.write("\n  flood of %d %s frames: closed=%s, RSS +%.1f MiB\n"
                         % (sent, ["DATA", "HEADERS", "PRIORITY", "RST", "SETTINGS", "PUSH", "PING",
                                   "GOAWAY", "WINDOW_UPDATE"][one[3]], c.eof, grew / MiB))
        self.assertLess(grew, 8 * MiB * RSS_SLACK, "RSS grew by %d bytes" % grew)
        return c

    def test_settings_flood(self):
        self._flood(frame(SETTINGS, 0, 0, b""), 400000, True)
        self.assert_serves()

    def test_ping_flood(self):
        self._flood(frame(PING, 0, 0, b"flooding"), 400000, True)
        self.assert_serves()

    def test_window_update_flood(self):
        """WINDOW_UPDATE costs no reply: a flood of small ones is just work, and the connection
        still serves afterwards; one that overflows the window is a FLOW_CONTROL_ERROR."""
        c = self._flood(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)), 200000, False)
        sid = c.headers(UNARY)
        c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("wu"))))
        c.wait(lambda: any(t == HEADERS and s == sid and f & END_STREAM for t, f, s, _ in c.frames), 20,
               what="a call after the WINDOW_UPDATE flood")
        c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF)))
        self.assertTrue(c.wait_closed(10), c.summary())
        self.assertEqual(c.goaway()[1], FLOW_CONTROL_ERROR, c.summary())

    def test_more_streams_than_advertised(self):
        """max_concurrent_streams 8: streams above it are refused (REFUSED_STREAM), the first 8 work."""
        c = self.raw()
        sids = [c.headers(BIDI) for _ in range(20)]
        c.wait(lambda: len(c.resets()) >= 12, what="12 refused streams")
        refused = c.resets()
        self.assertEqual(sorted(refused), sids[8:], c.summary())
        self.assertEqual(set(refused.values()), {REFUSED_STREAM})
        for sid in sids[:8]:
            c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("s%d" % sid))))
        c.wait(lambda: sum(1 for t, f, s, _ in c.frames if t == HEADERS and f & END_STREAM) >= 8,
               what="the 8 admitted streams to finish")
        self.assertIsNone(c.goaway(), c.summary())

    def test_data_after_end_stream(self):
        """DATA on a stream the client already half-closed: STREAM_CLOSED (as RST_STREAM or GOAWAY)."""
        c = self.raw()
        sid = c.headers(BIDI)
        c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("a"))) + frame(DATA, 0, sid, grpc_frame(pb_encode("b"))))
        c.wait(lambda: sid in c.resets() or c.goaway() is not None or c.eof, what="STREAM_CLOSED")
        code = c.resets().get(sid) if sid in c.resets() else c.goaway()[1]
        self.assertEqual(code, STREAM_CLOSED, c.summary())

    # (name, bytes after the preface and SETTINGS, expected GOAWAY codes; None: stays usable)
    MALFORMED = [
        ("DATA on stream 0", frame(DATA, 0, 0, b"x"), {PROTOCOL_ERROR}),
        ("DATA on an idle stream", frame(DATA, 0, 7, b"x"), {PROTOCOL_ERROR}),
        ("HEADERS on stream 0", frame(HEADERS, END_HEADERS, 0, b"\x82"), {PROTOCOL_ERROR}),
        ("HEADERS on an even stream", frame(HEADERS, END_HEADERS, 2, b"\x82"), {PROTOCOL_ERROR}),
        ("HEADERS with a bad HPACK index", frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\x0f"),
         {COMPRESSION_ERROR}),
        ("HEADERS padding longer than the frame", frame(HEADERS, END_HEADERS | PADDED, 1, b"\xf0\x82"),
         {PROTOCOL_ERROR, FRAME_SIZE_ERROR}),
        ("PRIORITY of the wrong length", frame(PRIORITY, 0, 1, b"\x00\x00"), {FRAME_SIZE_ERROR, PROTOCOL_ERROR}),
        ("RST_STREAM on stream 0", frame(RST_STREAM, 0, 0, b"\x00\x00\x00\x08"), {PROTOCOL_ERROR}),
        ("RST_STREAM on an idle stream", frame(RST_STREAM, 0, 9, b"\x00\x00\x00\x08"), {PROTOCOL_ERROR}),
        ("RST_STREAM of the wrong length", frame(RST_STREAM, 0, 1, b"\x00\x08"), {FRAME_SIZE_ERROR, PROTOCOL_ERROR}),
        ("SETTINGS ack with a payload", frame(SETTINGS, ACK, 0, b"\x00\x03\x00\x00\x00\x01"), {FRAME_SIZE_ERROR}),
        ("SETTINGS on a stream", frame(SETTINGS, 0, 1, b""), {PROTOCOL_ERROR}),
        ("SETTINGS_ENABLE_PUSH 2", settings(enable_push=2), {PROTOCOL_ERROR}),
        ("SETTINGS_INITIAL_WINDOW_SIZE 2^31", settings(initial_window_size=1 << 31), {FLOW_CONTROL_ERROR}),
        ("SETTINGS_MAX_FRAME_SIZE 100", settings(max_frame_size=100), {PROTOCOL_ERROR}),
        ("PING of the wrong length", frame(PING, 0, 0, b"1234"), {FRAME_SIZE_ERROR}),
        ("PING on a stream", frame(PING, 0, 1, b"12345678"), {PROTOCOL_ERROR}),
        ("GOAWAY on a stream", frame(GOAWAY, 0, 1, b"\x00" * 8), {PROTOCOL_ERROR}),
        ("WINDOW_UPDATE of the wrong length", frame(WINDOW_UPDATE, 0, 0, b"\x00\x01"), {FRAME_SIZE_ERROR}),
        ("CONTINUATION without HEADERS", frame(CONTINUATION, END_HEADERS, 1, b"\x82"), {PROTOCOL_ERROR}),
        ("PUSH_PROMISE from a client", frame(PUSH_PROMISE, END_HEADERS, 1, b"\x00\x00\x00\x02\x82"),
         {PROTOCOL_ERROR}),
        ("a frame longer than SETTINGS_MAX_FRAME_SIZE", frame(0xEE, 0, 0, b"\x00" * 17000), {FRAME_SIZE_ERROR}),
        ("an unknown frame type (ignored)", frame(0xEE, 0xFF, 3, b"whatever"), None),
    ]

    def test_malformed_frames(self):
        for name, data, codes in self.MALFORMED:
            with self.subTest(name):
                c = self.raw()
                c.wait(lambda: any(t == SETTINGS for t, _, _, _ in c.frames), what="SETTINGS")
                c.try_send(data)
                if codes is None:
                    sid = c.headers(UNARY)
                    c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("ok"))))
                    c.wait(lambda: any(t == HEADERS and s == sid and f & END_STREAM for t, f, s, _ in c.frames),
                           what="a call after %s" % name)
                    self.assertIsNone(c.goaway(), c.summary())
                else:
                    self.assertTrue(c.wait_closed(10), "%s: still open: %s" % (name, c.summary()))
                    self.assertIsNotNone(c.goaway(), "%s: closed without GOAWAY" % name)
                    self.assertIn(c.goaway()[1], codes, "%s: %s" % (name, c.summary()))
                c.close()
        self.assert_serves()

    def test_bad_prefaces(self):
        cases = [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
                 b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n", PREFACE[:10], PREFACE + b"\x00" * 3,
                 PREFACE + frame(PING, 0, 0, b"12345678"),  # the first frame must be SETTINGS
                 b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 200]  # a TLS ClientHello
        before = self.d.metrics()
        for data in cases:
            with self.subTest(data[:24]):
                c = self.raw(preface=False)
                c.send(data)
                if len(data) < len(PREFACE):  # a truncated preface, then the client goes away
                    c.sock.shutdown(socket.SHUT_WR)
                # a preface followed by half a frame header is closed only by the default 10 s
                # transport.handshake_timeout: wait past it (a 10 s wait lost that race under load)
                self.assertTrue(c.wait_closed(20), "bad preface %r left open: %s" % (data[:24], c.summary()))
                c.close()
        # the four wrong prefaces and the TLS ClientHello at least; a truncated preface (the peer
        # leaves first) and one followed by half a frame header are not errors yet
        self.d.wait_metrics(lambda m: closed_delta("protocol_error", before, m) >= 4,
                            what="protocol_error closes for the bad prefaces")
        self.assert_serves()

    def test_garbage_bytes(self):
        rnd = random.Random(7)
        for i in range(40):
            c = self.raw(preface=i % 2 == 0)
            c.try_send(bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 3000))))
            if i % 4 == 1:
                c.close()  # some go away at once, some wait for the verdict
                continue
            c.sock.shutdown(socket.SHUT_WR)
            self.assertTrue(c.wait_closed(10), "garbage connection %d left open: %s" % (i, c.summary()))
            c.close()
        self.assert_serves()


# ---------------------------------------------------------------------------------------------
# gRPC level

LIMIT = 1024  # transport.max_receive_message_bytes of this class's daemon


class GrpcAbuse(Base):
    SETS = ["transport.max_receive_message_bytes=%d" % LIMIT]

    def call(self, path, body, extra=(), end=True):
        """One stream with body as its DATA; returns (conn, sid) once it ended."""
        c = self.raw()
        sid = c.headers(path, extra)
        if body:
            c.send(frame(DATA, END_STREAM if end else 0, sid, body))
        elif end:
            c.send(frame(DATA, END_STREAM, sid, b""))
        c.wait(lambda: any(t == HEADERS and s == sid and f & END_STREAM for t, f, s, _ in c.frames)
               or sid in c.resets(), what="the call to end")
        return c, sid

    def status(self, c, sid):
        """grpc-status of the stream's last HEADERS (trailers or Trailers-Only)."""
        blocks = [p for t, f, s, p in c.frames if t == HEADERS and s == sid]
        dec = hpack.Decoder()
        out = None
        for b in blocks:  # decoded in order: the dynamic table is shared
            hs = dict((k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v)
                      for k, v in dec.decode(b))
            out = hs.get("grpc-status", out)
        return int(out) if out is not None else None

    def messages(self, c, sid):
        data = b"".join(p for t, _, s, p in c.frames if t == DATA and s == sid)
        out = []
        while len(data) >= 5:
            n = struct.unpack(">I", data[1:5])[0]
            out.append(data[5:5 + n])
            data = data[5 + n:]
        return out

    def test_length_prefix_over_the_limit(self):
        for n in (LIMIT + 1, 1 << 24, 0xFFFFFFFF):
            c, sid = self.call(UNARY, struct.pack(">BI", 0, n) + b"x" * 10)
            self.assertEqual(self.status(c, sid), 8, c.summary())  # RESOURCE_EXHAUSTED

    def test_lying_lengths(self):
        # says 100, brings 50, ends
        c, sid = self.call(UNARY, struct.pack(">BI", 0, 100) + b"y" * 50)
        self.assertEqual(self.status(c, sid), 13, c.summary())
        # says 5, brings 20: the rest is an unfinished second message
        c, sid = self.call(UNARY, struct.pack(">BI", 0, 5) + b"\x0a\x03abc" + b"z" * 15)
        self.assertEqual(self.status(c, sid), 13, c.summary())
        # a prefix cut short
        c, sid = self.call(UNARY, b"\x00\x00\x00")
        self.assertEqual(self.status(c, sid), 13, c.summary())
        # bidi: the lie comes after good messages, which are still echoed
        c, sid = self.call(BIDI, grpc_frame(pb_encode("good")) + struct.pack(">BI", 0, 900) + b"q")
        self.assertEqual(self.status(c, sid), 13, c.summary())
        self.assertEqual(self.messages(c, sid), [pb_encode("good")])

    def test_zero_length_messages(self):
        c, sid = self.call(UNARY, grpc_frame(b""))
        self.assertEqual(self.status(c, sid), 0, c.summary())
        self.assertEqual(self.messages(c, sid), [b""])
        c, sid = self.call(BIDI, grpc_frame(b"") * 200)
        self.assertEqual(self.status(c, sid), 0, c.summary())
        self.assertEqual(self.messages(c, sid), [b""] * 200)
        c, sid = self.call(CLIENT_STREAMING, grpc_frame(b"") * 50)
        self.assertEqual(self.status(c, sid), 0, c.summary())

    def test_huge_metadata(self):
        # just under the 16 KiB header list limit: served
        c, sid = self.call(UNARY, grpc_frame(pb_encode("m")), extra=[("x-meta-%d" % i, "v" * 1000) for i in range(14)])
        self.assertEqual(self.status(c, sid), 0, c.summary())
        # one value far above it: the stream is reset, nothing more
        c, sid = self.call(UNARY, grpc_frame(pb_encode("m")), extra=[("x-huge", "h" * 60000)])
        self.assertIn(sid, c.resets(), c.summary())
        self.assertIsNone(c.goaway(), c.summary())

    def test_bad_grpc_timeouts(self):
        bad = ["", "1", "S", "123456789S", "-1S", "1x", "1.5S", "0x10S", "１S", "1s"]
        for v in bad:
            with self.subTest(v):
                c, sid = self.call(UNARY, grpc_frame(pb_encode("t")), extra=[("grpc-timeout", v)])
                self.assertEqual(self.status(c, sid), 13, "grpc-timeout %r: %s" % (v, c.summary()))
        # white space around a field value, or a NUL in it, makes the request malformed HTTP/2
        # (RFC 9113 8.2.1): nghttp2 resets the stream before echod sees it
        for v in (" 1S", "1S ", "1\x00S"):
            with self.subTest(v):
                c, sid = self.call(UNARY, grpc_frame(pb_encode("t")), extra=[("grpc-timeout", v)])
                self.assertEqual(c.resets().get(sid), PROTOCOL_ERROR, "grpc-timeout %r: %s" % (v, c.summary()))
        for v in ("99999999H", "0n", "1n"):  # valid: huge, and expired at once
            with self.subTest(v):
                c, sid = self.call(UNARY, grpc_frame(pb_encode("t")), extra=[("grpc-timeout", v)])
                self.assertIn(self.status(c, sid), (0, 4), "grpc-timeout %r: %s" % (v, c.summary()))

    def test_invalid_utf8(self):
        """proto3 string fields must be UTF-8: INTERNAL (as grpc-java's parser fails)."""
        for payload in (b"\x0a\x02\xff\xfe", b"\x0a\x03\xed\xa0\x80", b"\x0a\x02\xc0\xaf", b"\x0a\x01\x80"):
            for path in (UNARY, BIDI, SERVER_STREAMING, CLIENT_STREAMING):
                with self.subTest(path=path, payload=payload):
                    c, sid = self.call(path, grpc_frame(payload))
                    self.assertEqual(self.status(c, sid), 13, c.summary())

    def test_invalid_protobuf(self):
        for payload in (b"\x0a", b"\x0a\x05ab", b"\x0b", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                        b"\x00\x01"):
            with self.subTest(payload):
                c, sid = self.call(UNARY, grpc_frame(payload))
                self.assertEqual(self.status(c, sid), 13, c.summary())

    def test_client_streaming_concatenation_is_bounded(self):
        """The one response of ClientStreamingEcho may not grow past the message limit."""
        c, sid = self.call(CLIENT_STREAMING, grpc_frame(pb_encode("a" * 500)) * 3)
        self.assertEqual(self.status(c, sid), 8, c.summary())
        c, sid = self.call(CLIENT_STREAMING, grpc_frame(pb_encode("a" * 500)) * 2)
        self.assertEqual(self.status(c, sid), 0, c.summary())


# ---------------------------------------------------------------------------------------------
# peers that never read: memory stays bounded by config


class Memory(Base):
    SETS = ["work.max_response_bytes=1048576", "echo.server_streaming_count=1000"]

    def fill_bidi(self, c, sids, chunk, limit_s=20):
        """Sends chunk on every stream while flow control allows; stops once nothing moved for a
        while. Returns bytes sent. The peer never reads (nor acks) what echod sends back."""
        sent = 0
        # echod's initial_window_bytes (its SETTINGS came first); the connection starts at
        # 65535 and gets the rest in echod's first WINDOW_UPDATE, counted below
        window = {sid: 1 << 20 for sid in sids}
        conn_window = 65535
        t0 = time.monotonic()
        idle_since = None
        while time.monotonic() - t0 < limit_s * SLOW:
            moved = False
            for sid in sids:
                if window[sid] >= len(chunk) and conn_window >= len(chunk):
                    c.send(frame(DATA, 0, sid, chunk))
                    window[sid] -= len(chunk)
                    conn_window -= len(chunk)
                    sent += len(chunk)
                    moved = True
            if moved:
                idle_since = None
                continue
            # WINDOW_UPDATEs are the one thing read: that is how echod grants more
            c.read(0.1)
            for t, _, s, p in c.frames:  # echod's first one (stream 0) included
                if t == WINDOW_UPDATE:
                    inc = struct.unpack(">I", p)[0] & 0x7FFFFFFF
                    if s == 0:
                        conn_window += inc
                    elif s in window:
                        window[s] += inc
            c.frames = [f for f in c.frames if f[0] != WINDOW_UPDATE]
            if idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 1.0 * SLOW:
                break
        return sent

    def test_bidi_client_not_reading(self):
        """Zero-window peers (SETTINGS_INITIAL_WINDOW_SIZE 0: echod may never send) streaming
        bidi messages on 4 connections x 8 streams: echod stops granting window, RSS stays bounded."""
        base = rss(self.d)
        conns = [self.raw(initial=settings(initial_window_size=0)) for _ in range(4)]
        chunk = grpc_frame(pb_encode("z" * 16000))
        total = 0
        for c in conns:
            c.wait(lambda: any(t == SETTINGS and not f & ACK for t, f, _, _ in c.frames), what="SETTINGS")
            sids = [c.headers(BIDI) for _ in range(8)]
            total += self.fill_bidi(c, sids, chunk)
        for c in conns:
            c.read(0.1)
            self.assertIsNone(c.goaway(), c.summary())
            self.assertFalse(c.eof, "echod closed a peer that merely does not read")
        m = self.d.metrics()
        self.assertGreaterEqual(m.metric("echod_calls_in_flight"), 32)
        peak = rss(self.d)
        grew = peak - base
        sys.stderr.write("\n  zero-window peers: %.1f MiB sent on 4 connections x 8 bidi streams, "
                         "never read; RSS %.1f -> %.1f MiB (+%.1f)\n"
                         % (total / MiB, base / MiB, peak / MiB, grew / MiB))
        # per connection: its 1 MiB window held in deframers, plus each stream's send buffer
        self.assertLess(total, 4 * 4 * MiB, "echod kept granting window to peers that never read")
        self.assertLess(grew, 32 * MiB * RSS_SLACK, "RSS grew by %.1f MiB" % (grew / MiB))
        for c in conns:
            c.close()

    def test_server_streaming_client_not_reading(self):
        """1000 responses of 1 MiB per tiny request (server_streaming_count, echod-response-bytes)
        to peers that never read: echod sends while the stream is ready, so RSS stays near
        2 x 1 MiB per call instead of 1 GiB."""
        base = rss(self.d)
        conns = [self.raw(initial=settings(initial_window_size=0)) for _ in range(2)]
        for c in conns:
            for _ in range(5):
                sid = c.headers(SERVER_STREAMING, extra=[("echod-response-bytes", "1048576")])
                c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("s"))))
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") >= 10, what="10 calls open")
        time.sleep(1.0 * SLOW)
        peak = rss(self.d)
        grew = peak - base
        sys.stderr.write("\n  server streaming to zero-window peers: 10 calls x 1000 x 1 MiB asked; "
                         "RSS %.1f -> %.1f MiB (+%.1f)\n" % (base / MiB, peak / MiB, grew / MiB))
        self.assertLess(grew, 64 * MiB * RSS_SLACK, "RSS grew by %.1f MiB" % (grew / MiB))
        for c in conns:
            c.close()

    def test_tcp_peer_not_reading(self):
        """A peer with huge HTTP/2 windows that never reads its socket: echod's output stops at
        its write high-water mark and the responses stay queued per stream, bounded."""
        base = rss(self.d)
        big = settings(initial_window_size=0x7FFFFFFF) + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF - 65535))
        c = self.raw(initial=big, tcp_rcvbuf=4096)
        for _ in range(8):
            sid = c.headers(SERVER_STREAMING, extra=[("echod-response-bytes", "1048576")])
            c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("t"))))
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") >= 8, what="8 calls open")
        time.sleep(1.5 * SLOW)
        peak = rss(self.d)
        grew = peak - base
        sys.stderr.write("\n  TCP peer not reading: 8 calls x 1000 x 1 MiB asked; RSS +%.1f MiB\n" % (grew / MiB))
        self.assertLess(grew, 64 * MiB * RSS_SLACK, "RSS grew by %.1f MiB" % (grew / MiB))
        c.close()


# ---------------------------------------------------------------------------------------------
# slowloris and idle connections


class Slowloris(Base):
    SETS = ["transport.handshake_timeout=2s", "transport.idle_timeout=1500ms"]

    def closed_by(self, reason, before, after):
        return closed_delta(reason, before, after)

    def test_one_byte_per_second(self):
        """The preface one byte a second: closed at handshake_timeout, counted."""
        before = self.d.metrics()
        c = self.raw(preface=False)
        t0 = time.monotonic()
        for b in PREFACE:
            if not c.try_send(bytes([b])):
                break
            if c.read(1.0) is False:
                break
        self.assertTrue(c.wait_closed(5), c.summary())
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, 1.9)
        self.assertLess(took, 5 * SLOW)
        after = self.d.metrics()
        self.assertEqual(self.closed_by("handshake_timeout", before, after), 1)

    def test_silent_connections(self):
        """30 connections that never send the preface: each closed at handshake_timeout,
        counted, and its descriptor closed."""
        before = self.d.metrics()
        socks = [self.raw(preface=False) for _ in range(30)]
        for c in socks:
            self.assertTrue(c.wait_closed(6), "a silent connection outlived handshake_timeout")
        # A scrape is not a snapshot: process_open_fds is read before the connection gauges,
        # so a scrape taken while connections arrive shows fewer descriptors than connections.
        # This test once took its baseline from the scrape that first showed the 30 accepted
        # and waited in vain (memcheck, CI of 2026-12-04: 3 short). The descriptors that no
        # connection holds are compared between two quiet scrapes instead (the witness's
        # connection is open in both); a leaked one would never come back.
        def spare(m):
            return m.metric("process_open_fds") - m.metric("echod_connections")
        self.d.wait_metrics(lambda m: self.closed_by("handshake_timeout", before, m) >= 30
                            and spare(m) <= spare(before),
                            what="30 handshake timeouts counted and no descriptor left beyond "
                            "the %d of before" % spare(before))

    def test_idle_connection(self):
        """No stream for idle_timeout: GOAWAY(NO_ERROR), then closed, counted as idle."""
        before = self.d.metrics()
        c = self.raw()
        t0 = time.monotonic()
        # acknowledges the GOAWAY PING like a good client: the final GOAWAY follows at once
        c.wait(lambda: any(t == PING and not f & ACK for t, f, _, _ in c.frames), 5, "the GOAWAY PING")
        ping = [p for t, f, _, p in c.frames if t == PING and not f & ACK][0]
        c.send(frame(PING, ACK, 0, ping))
        self.assertTrue(c.wait_closed(5), c.summary())
        took = time.monotonic() - t0
        self.assertEqual(c.goaway(), (0, NO_ERROR), c.summary())
        self.assertGreaterEqual(took, 1.4)
        self.assertLess(took, 1.5 + 2 * SLOW)
        self.assertEqual(self.closed_by("idle", before, self.d.metrics()), 1)

    def test_idle_peer_that_never_acks_ping(self):
        """A peer that ignores the GOAWAY PING still gets the final GOAWAY and is closed."""
        c = self.raw()
        t0 = time.monotonic()
        self.assertTrue(c.wait_closed(10), "idle connection that never acks PING left open: %s" % c.summary())
        self.assertLess(time.monotonic() - t0, 1.5 + 2 + 3 * SLOW)
        self.assertEqual(c.goaway(), (0, NO_ERROR), c.summary())

    def test_slow_stream_is_not_idle(self):
        """A connection with a call open longer than idle_timeout is not idle."""
        c = self.raw()
        sid = c.headers(BIDI)
        for i in range(4):
            c.send(frame(DATA, 0, sid, grpc_frame(pb_encode("slow%d" % i))))
            c.read(0.8)
        c.send(frame(DATA, END_STREAM, sid, b""))
        c.wait(lambda: any(t == HEADERS and s == sid and f & END_STREAM for t, f, s, _ in c.frames),
               what="the slow call to end")
        self.assertIsNone(c.goaway(), "a connection with an open call was treated as idle")
        data = b"".join(p for t, _, s, p in c.frames if t == DATA and s == sid)
        self.assertEqual(data, b"".join(grpc_frame(pb_encode("slow%d" % i)) for i in range(4)))


# ---------------------------------------------------------------------------------------------
# limits.max_connections


class ConnectionLimit(Base):
    SETS = ["limits.max_connections=4"]

    def test_max_connections(self):
        # the witness holds one connection
        before = self.d.metrics()
        ok = [self.raw() for _ in range(3)]
        for c in ok:
            c.wait(lambda: any(t == SETTINGS for t, _, _, _ in c.frames), what="SETTINGS")
        self.d.wait_metrics(lambda m: m.metric("echod_connections") == 4, what="4 connections")
        over = [self.raw(preface=False) for _ in range(6)]
        for c in over:
            self.assertTrue(c.wait_closed(5), "a connection above limits.max_connections was served")
        after = self.d.metrics()
        self.assertEqual(after.metric("echod_connections_closed_total", reason="limit")
                         - before.metric("echod_connections_closed_total", reason="limit"), 6)
        for c in ok:  # the ones below the limit still work
            sid = c.headers(UNARY)
            c.send(frame(DATA, END_STREAM, sid, grpc_frame(pb_encode("in"))))
            c.wait(lambda: any(t == HEADERS and s == sid and f & END_STREAM for t, f, s, _ in c.frames),
                   what="a call below the limit")
        ok[0].close()
        self.d.wait_metrics(lambda m: m.metric("echod_connections") == 3, what="3 connections")
        self.assert_serves()  # room again


# ---------------------------------------------------------------------------------------------
# TLS


def client_hello():
    """The bytes of a real TLS ClientHello (ALPN h2), made without a socket."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def make_cert(directory):
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-days", "1", "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    return cert, key


class TLSAbuse(Base):
    SETS = ["transport.handshake_timeout=2s"]

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="echod-abuse-tls-")
        cls.cert, cls.key = make_cert(cls.tmp.name)
        cls.d = Daemon(sets=cls.SETS, tls=(cls.cert, cls.key),
                       env=ASAN_ENV if SANITIZER == "asan" else None).start()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.tmp.cleanup()

    def assert_serves(self):
        c = socket.create_connection(("127.0.0.1", self.d.grpc_port), timeout=10 * SLOW)
        s = tls_client_context(cafile=self.cert).wrap_socket(c, server_hostname="localhost")
        self.assertEqual(s.selected_alpn_protocol(), "h2")
        s.close()

    def test_garbage_instead_of_client_hello(self):
        rnd = random.Random(11)
        for i in range(20):
            c = self.raw(preface=False)
            junk = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 2000)))
            if i % 3 == 0:
                junk = b"\x16\x03\x01" + junk  # looks like a handshake record at first
            c.try_send(junk)
            self.assertTrue(c.wait_closed(5), "TLS garbage left open")
        self.assert_serves()

    def test_truncated_client_hello(self):
        hello = client_hello()
        before = self.d.metrics()
        for cut in (1, 5, 40, len(hello) // 2, len(hello) - 1):
            c = self.raw(preface=False)
            c.send(hello[:cut])
            if cut % 2:
                c.close()  # the client goes away mid-record
            else:
                self.assertTrue(c.wait_closed(5), "truncated ClientHello (%d bytes) left open" % cut)
        self.d.wait_metrics(lambda m: m.metric("echod_connections_closed_total", reason="handshake_timeout")
                            > before.metric("echod_connections_closed_total", reason="handshake_timeout"),
                            what="a handshake timeout counted")
        self.assert_serves()

    def test_client_goes_away_mid_handshake(self):
        """The client reads the ServerHello and then closes, or sends garbage instead of Finished."""
        hello = client_hello()
        for how in ("close", "garbage"):
            c = self.raw(preface=False)
            c.send(hello)
            c.read(2)  # ServerHello .. ServerHelloDone
            self.assertTrue(c.buf or c.frames, "no ServerHello")
            if how == "close":
                c.close()
            else:
                c.try_send(b"\x14\x03\x03\x00\x01\x01" + b"\x17\x03\x03\x00\x20" + b"\xaa" * 32)
                self.assertTrue(c.wait_closed(5), "garbage Finished left open")
        self.assert_serves()

    def test_garbage_after_handshake(self):
        """A forged TLS record once the handshake is done: closed.

        When the forged record arrives in the same read as the client's Finished, libh2o 2.2.5
        drops the decryption error; that connection is then one that said SETTINGS and went
        quiet (idle_timeout's business), and the next byte it sends closes it."""
        for same_read in (False, True):
            raw = self.raw(preface=False)
            ctx = tls_client_context(cafile=self.cert)
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
            deadline = time.monotonic() + 10 * SLOW
            while True:
                try:
                    obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    raw.send(outgoing.read())
                    raw.sock.settimeout(max(0.1, deadline - time.monotonic()))
                    incoming.write(raw.sock.recv(65536))
            obj.write(PREFACE + settings())
            forged = b"\x17\x03\x03\x00\x10" + b"\x00" * 16 + b"garbage"
            if same_read:
                raw.send(outgoing.read() + forged)
                if not raw.wait_closed(1):
                    raw.try_send(b"?")
            else:
                raw.send(outgoing.read())
                raw.read(1.0)  # session tickets and echod's SETTINGS: the handshake is over
                raw.send(forged)
            self.assertTrue(raw.wait_closed(5), "TLS connection with a forged record left open")
        self.assert_serves()


class TLSShutdown(unittest.TestCase):
    def test_sigterm_during_tls_handshake(self):
        """SIGTERM while TLS clients sit in their handshake: exit 0, no crash."""
        with tempfile.TemporaryDirectory(prefix="echod-abuse-tls-") as tmp:
            cert, key = make_cert(tmp)
            d = Daemon(tls=(cert, key), env=ASAN_ENV if SANITIZER == "asan" else None).start()
            try:
                silent = socket.create_connection(("127.0.0.1", d.grpc_port))
                partial = socket.create_connection(("127.0.0.1", d.grpc_port))
                partial.sendall(client_hello()[:30])
                time.sleep(0.3)
                d.stop()  # asserts exit 0 and no sanitizer report
                silent.close()
                partial.close()
            finally:
                d.cleanup()


if __name__ == "__main__":
    main()
