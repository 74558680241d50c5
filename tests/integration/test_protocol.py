"""The protocol-behaviour table (README: Protocol behaviour), one test per row, with a raw HTTP/2 client (python3-h2).

Every error case also proves that the connection it happened on, and a bidi stream that was
already open on that connection (the "witness"), still work afterwards, and that the daemon
freed the call (echod_calls_in_flight back to 0).

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_protocol.py
"""

import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

from echod_harness import (DaemonTestCase, BIDI, CLIENT_STREAMING, SERVER_STREAMING, SLOW, UNARY,  # noqa: E402
                           Daemon, EchoStub, grpc_frame, pb_encode, main)

LIMIT = 1024  # transport.max_receive_message_bytes for this file's daemon

# HTTP/2 error codes
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, CANCEL = 0, 1, 3, 6, 8


def raw_frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


class Base(DaemonTestCase):
    SETS = ["transport.max_receive_message_bytes=%d" % LIMIT]

    @classmethod
    def start_daemon(cls):
        return Daemon(sets=cls.SETS).start()

    def setUp(self):
        self.c = self.d.h2()
        # The witness: a bidi stream opened before the error, used again after it.
        self.witness = self.c.start(BIDI)
        self.c.send_message(self.witness, "before")
        self.assertEqual(self.c.wait_messages(self.witness, 1), ["before"])

    def tearDown(self):
        self.c.close()
        self.d.wait_idle()
        self.assertTrue(self.d.alive(), "echod died")

    def assert_connection_works(self, c=None, witness=True):
        """The witness stream still echoes and ends OK; a new unary call on the connection works."""
        c = c or self.c
        self.assertIsNone(c.goaway, "server sent GOAWAY")
        if witness:
            c.send_message(self.witness, "after")
            c.end(self.witness)
            st = c.wait_done(self.witness)
            self.assertEqual(st.messages(), ["before", "after"])
            self.assertEqual(st.grpc_status, 0, st)
        st = c.unary("still-alive")
        self.assertEqual(st.status, 200)
        self.assertEqual(st.grpc_status, 0, st)
        self.assertEqual(st.messages(), ["still-alive"])

    def wait_only_witness(self):
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 1,
                            what="echod_calls_in_flight == 1 (only the witness call)")

    def assert_trailers_only(self, st, grpc_status):
        self.assertEqual(st.status, 200, st)
        self.assertTrue(st.trailers_only, "expected a single HEADERS frame with END_STREAM: %r" % st)
        self.assertEqual(len(st.data), 0, st)
        self.assertEqual(st.grpc_status, grpc_status, st)

    def assert_grpc_status(self, st, grpc_status):
        self.assertEqual(st.status, 200, st)
        self.assertEqual(st.grpc_status, grpc_status, st)


class Routing(Base):
    def test_unknown_method(self):
        sid = self.c.start("/grpc.examples.echo.Echo/NoSuchMethod")
        self.c.send_message(sid, "x", end_stream=True)
        self.assert_trailers_only(self.c.wait_done(sid), 12)
        self.assert_connection_works()

    def test_unknown_service(self):
        sid = self.c.start("/no.such.Service/UnaryEcho")
        self.c.send_message(sid, "x", end_stream=True)
        self.assert_trailers_only(self.c.wait_done(sid), 12)
        self.assert_connection_works()

    def test_malformed_paths(self):
        for path in ("/", "/grpc.examples.echo.Echo", "/grpc.examples.echo.Echo/",
                     "/grpc.examples.echo.Echo/UnaryEcho/extra"):
            sid = self.c.start(path)
            self.c.send_message(sid, "x", end_stream=True)
            st = self.c.wait_done(sid)
            self.assertEqual(st.status, 200, (path, st))
            self.assertEqual(st.grpc_status, 12, (path, st))
        # Not an origin-form path at all: a malformed HTTP/2 request (RFC 9113 8.3.1), which
        # may be refused as such (RST_STREAM PROTOCOL_ERROR) instead of answered.
        sid = self.c.start("nope")
        self.c.send_message(sid, "x", end_stream=True)
        st = self.c.wait_done(sid)
        if st.reset_code is not None and st.headers is None:
            self.assertEqual(st.reset_code, PROTOCOL_ERROR, st)
        else:
            self.assertEqual(st.grpc_status, 12, st)
        self.assert_connection_works()

    def test_unknown_method_headers_end_stream(self):
        """HEADERS with END_STREAM, no body at all."""
        sid = self.c.start("/grpc.examples.echo.Echo/Nope", end_stream=True)
        self.assert_trailers_only(self.c.wait_done(sid), 12)
        self.assert_connection_works()

    def test_unknown_method_grpcio(self):
        with self.d.channel() as ch:
            call = ch.unary_unary("/grpc.examples.echo.Echo/Missing")
            with self.assertRaises(grpc.RpcError) as cm:
                call(b"", timeout=10 * SLOW)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assert_connection_works()

    def test_wrong_content_type(self):
        for ctype in ("text/plain", "application/json", "application/grpc-web",
                      "application/grpcx", None):
            sid = self.c.start(UNARY, content_type=ctype)
            self.c.send_message(sid, "x", end_stream=True)
            st = self.c.wait_done(sid)
            self.assertEqual(st.status, 415, (ctype, st))
        self.assert_connection_works()

    def test_accepted_content_types(self):
        for ctype in ("application/grpc", "application/grpc+proto",
                      "application/grpc;charset=utf-8", "application/grpc; foo=bar"):
            sid = self.c.start(UNARY, content_type=ctype)
            self.c.send_message(sid, "ct", end_stream=True)
            st = self.c.wait_done(sid)
            self.assert_grpc_status(st, 0)
            self.assertEqual(st.messages(), ["ct"], ctype)
            self.assertTrue(st.header("content-type").startswith("application/grpc"), st)
        self.assert_connection_works()

    def test_method_not_post(self):
        for method in ("GET", "PUT"):
            sid = self.c.start(UNARY, method=method, end_stream=(method == "GET"))
            if method != "GET":
                self.c.send_message(sid, "x", end_stream=True)
            st = self.c.wait_done(sid)
            self.assertEqual(st.status, 405, (method, st))
        self.assert_connection_works()

    def test_response_headers_and_trailers(self):
        sid = self.c.start(UNARY)
        self.c.send_message(sid, "shape", end_stream=True)
        st = self.c.wait_done(sid)
        self.assertFalse(st.trailers_only)
        self.assertEqual(st.status, 200)
        self.assertTrue(st.header("content-type").startswith("application/grpc"), st)
        self.assertIsNotNone(st.trailers, st)
        self.assertEqual(st.trailer("grpc-status"), "0")
        self.assertEqual(st.messages(), ["shape"])
        # Echo does not re-encode: the response message is the request's bytes.
        self.assertEqual(bytes(st.data), grpc_frame(pb_encode("shape")))
        self.assert_connection_works()


class Messages(Base):
    def test_message_over_limit(self):
        sid = self.c.start(UNARY)
        self.c.send_message(sid, "a" * 2047, end_stream=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 8)
        self.assert_connection_works()

    def test_message_over_limit_prefix_only(self):
        """The prefix alone announces too much: rejected without waiting for the bytes."""
        sid = self.c.start(BIDI)
        self.c.send_data(sid, struct.pack(">BI", 0, 50 * 1024 * 1024))
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 8)
        self.assert_connection_works()

    def test_message_limit_boundary(self):
        payload = pb_encode("b" * (LIMIT - 3))  # tag + 2-byte varint + LIMIT-3 bytes == LIMIT
        self.assertEqual(len(payload), LIMIT)
        sid = self.c.start(UNARY)
        self.c.send_message(sid, payload, end_stream=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 0)
        self.assertEqual(st.messages(), ["b" * (LIMIT - 3)])
        payload = pb_encode("b" * (LIMIT - 2))
        sid = self.c.start(UNARY)
        self.c.send_message(sid, payload, end_stream=True)
        self.assert_grpc_status(self.c.wait_done(sid), 8)
        self.assert_connection_works()

    def test_message_over_limit_on_bidi_other_streams_unaffected(self):
        other = self.c.start(BIDI)
        self.c.send_message(other, "o1")
        self.assertEqual(self.c.wait_messages(other, 1), ["o1"])
        sid = self.c.start(BIDI)
        self.c.send_message(sid, "fine")
        self.assertEqual(self.c.wait_messages(sid, 1), ["fine"])
        self.c.send_message(sid, "x" * (2 * LIMIT))
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 8)
        self.assertEqual(st.messages(), ["fine"])
        self.c.send_message(other, "o2")
        self.c.end(other)
        st = self.c.wait_done(other)
        self.assertEqual(st.messages(), ["o1", "o2"])
        self.assert_grpc_status(st, 0)
        self.assert_connection_works()

    def test_compressed_flag(self):
        sid = self.c.start(UNARY)
        self.c.send_message(sid, "x", end_stream=True, compressed=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 13)
        self.assert_connection_works()

    def test_compressed_flag_mid_bidi(self):
        sid = self.c.start(BIDI)
        self.c.send_message(sid, "plain")
        self.assertEqual(self.c.wait_messages(sid, 1), ["plain"])
        self.c.send_message(sid, "squeezed", compressed=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 13)
        self.assert_connection_works()

    def test_unsupported_grpc_encoding(self):
        # gzip and deflate are supported (tests/integration/test_compression.py)
        for enc in ("snappy", "br", "gzip,deflate"):
            sid = self.c.start(UNARY, extra=[("grpc-encoding", enc)])
            self.c.send_message(sid, "x", end_stream=True)
            st = self.c.wait_done(sid)
            self.assert_grpc_status(st, 12)
            accept = st.trailer("grpc-accept-encoding") or st.header("grpc-accept-encoding")
            self.assertEqual(accept, "identity,deflate,gzip", st)
        self.assert_connection_works()

    def test_identity_grpc_encoding_is_fine(self):
        sid = self.c.start(UNARY, extra=[("grpc-encoding", "identity"),
                                         ("grpc-accept-encoding", "identity,gzip")])
        self.c.send_message(sid, "id", end_stream=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 0)
        self.assertEqual(st.messages(), ["id"])
        self.assert_connection_works()

    def test_end_stream_mid_message(self):
        sid = self.c.start(UNARY)
        frame = grpc_frame(pb_encode("truncated message"))
        self.c.send_data(sid, frame[:9], end_stream=True)
        self.assert_grpc_status(self.c.wait_done(sid), 13)
        self.assert_connection_works()

    def test_end_stream_mid_prefix(self):
        sid = self.c.start(BIDI)
        self.c.send_data(sid, b"\x00\x00\x00", end_stream=True)
        self.assert_grpc_status(self.c.wait_done(sid), 13)
        self.assert_connection_works()

    def test_unary_zero_messages(self):
        sid = self.c.start(UNARY)
        self.c.end(sid)
        self.assert_grpc_status(self.c.wait_done(sid), 13)
        sid = self.c.start(UNARY, end_stream=True)
        self.assert_grpc_status(self.c.wait_done(sid), 13)
        self.assert_connection_works()

    def test_unary_two_messages(self):
        sid = self.c.start(UNARY)
        self.c.send_data(sid, grpc_frame(pb_encode("one")) + grpc_frame(pb_encode("two")),
                         end_stream=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 13)
        self.assertEqual(st.messages(), [])
        self.assert_connection_works()

    def test_server_streaming_two_messages(self):
        sid = self.c.start(SERVER_STREAMING)
        self.c.send_data(sid, grpc_frame(pb_encode("one")) + grpc_frame(pb_encode("two")),
                         end_stream=True)
        self.assert_grpc_status(self.c.wait_done(sid), 13)
        self.assert_connection_works()

    def test_split_and_merged_frames(self):
        """Messages split across DATA frames one byte at a time, and several in one frame."""
        sid = self.c.start(BIDI)
        blob = b"".join(grpc_frame(pb_encode("m%d" % i)) for i in range(5))
        for i in range(len(blob)):
            self.c.send_data(sid, blob[i:i + 1])
        self.c.send_data(sid, b"".join(grpc_frame(pb_encode("n%d" % i)) for i in range(20)),
                         end_stream=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 0)
        self.assertEqual(st.messages(), ["m%d" % i for i in range(5)] + ["n%d" % i for i in range(20)])
        self.assert_connection_works()

    def test_client_streaming_concat_raw(self):
        sid = self.c.start(CLIENT_STREAMING)
        for part in ("ab", "cd", "ef"):
            self.c.send_message(sid, part)
        self.c.end(sid)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 0)
        self.assertEqual(st.messages(), ["abcdef"])
        self.assert_connection_works()


class Deadlines(Base):
    def assert_deadline(self, sid, started, at_least):
        st = self.c.wait_done(sid, timeout=10 * SLOW)
        elapsed = time.monotonic() - started
        self.assert_grpc_status(st, 4)
        self.assertGreaterEqual(elapsed, at_least * 0.9, "deadline fired early")
        # The server also resets the stream since the client never half-closed; NO_ERROR, as
        # CANCEL races the trailers in grpc-core clients, which then report CANCELLED.
        self.c.wait(lambda: self.c.streams[sid].reset_code is not None, 5 * SLOW, "RST_STREAM")
        self.assertEqual(self.c.streams[sid].reset_code, NO_ERROR)
        return st

    def test_bidi_deadline(self):
        t0 = time.monotonic()
        sid = self.c.start(BIDI, timeout="200m")
        self.c.send_message(sid, "tick")
        self.assertEqual(self.c.wait_messages(sid, 1), ["tick"])
        st = self.assert_deadline(sid, t0, 0.2)
        self.assertEqual(st.messages(), ["tick"])
        self.wait_only_witness()
        self.assert_connection_works()

    def test_unary_deadline_waiting_for_end_stream(self):
        t0 = time.monotonic()
        sid = self.c.start(UNARY, timeout="300m")
        self.c.send_message(sid, "never ends")
        self.assert_deadline(sid, t0, 0.3)
        self.wait_only_witness()
        self.assert_connection_works()

    def test_deadline_units(self):
        t0 = time.monotonic()
        sid = self.c.start(BIDI, timeout="250000u")
        self.assert_deadline(sid, t0, 0.25)
        self.assert_connection_works()

    def test_deadline_not_reached(self):
        sid = self.c.start(UNARY, timeout="10S")
        self.c.send_message(sid, "in time", end_stream=True)
        st = self.c.wait_done(sid)
        self.assert_grpc_status(st, 0)
        self.assertEqual(st.messages(), ["in time"])
        self.assert_connection_works()

    def test_grpcio_deadline(self):
        with self.d.channel() as ch:
            stub = EchoStub(ch)

            def forever():
                yield "a"
                time.sleep(0.5)

            # Repeated: the status must survive the race between our trailers, our RST_STREAM and
            # the client's own timer (with RST_STREAM(CANCEL), grpcio saw CANCELLED 1 time in 12).
            codes = []
            for _ in range(20):
                with self.assertRaises(grpc.RpcError) as cm:
                    list(stub.BidirectionalStreamingEcho(forever(), timeout=0.1))
                codes.append(cm.exception.code())
            self.assertEqual(codes, [grpc.StatusCode.DEADLINE_EXCEEDED] * 20)
        self.assert_connection_works()


class Cancellation(Base):
    def test_client_rst_stream_bidi(self):
        sid = self.c.start(BIDI)
        self.c.send_message(sid, "x")
        self.assertEqual(self.c.wait_messages(sid, 1), ["x"])
        before = self.d.metrics().metric("echod_calls_in_flight")
        self.assertGreaterEqual(before, 2)  # this one and the witness
        self.c.reset(sid, CANCEL)
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == before - 1,
                            what="the reset call freed")
        self.assert_connection_works()

    def test_client_rst_stream_mid_message(self):
        sid = self.c.start(UNARY)
        self.c.send_data(sid, grpc_frame(pb_encode("partial"))[:7])
        self.c.reset(sid, CANCEL)
        self.assert_connection_works()

    def test_client_rst_stream_right_after_headers(self):
        for _ in range(20):
            sid = self.c.start(BIDI)
            self.c.reset(sid, CANCEL)
        self.assert_connection_works()

    def test_client_rst_stream_after_end_stream(self):
        """Reset a unary call as soon as it is sent, racing the response."""
        for _ in range(20):
            sid = self.c.start(UNARY)
            self.c.send_message(sid, "race", end_stream=True)
            self.c.reset(sid, CANCEL)
        self.assert_connection_works()

    def test_client_disconnect_mid_call(self):
        c2 = self.d.h2()
        sids = [c2.start(BIDI) for _ in range(5)]
        for sid in sids:
            c2.send_message(sid, "hi")
        for sid in sids:
            self.assertEqual(c2.wait_messages(sid, 1), ["hi"])
        u = c2.start(UNARY)
        c2.send_data(u, grpc_frame(pb_encode("half a message"))[:6])  # a partial message pending
        # the unary's HEADERS may still be on its way (a slow build, or valgrind)
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") >= 7,
                            what="5 bidi + the unary + the witness in flight")
        c2.sock.close()  # no GOAWAY, no RST_STREAM: the TCP connection just goes away
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 1,
                            what="only the witness call left")
        self.assert_connection_works()

    def test_client_disconnect_abortive(self):
        """RST on the TCP connection (SO_LINGER 0) while the server is writing."""
        c2 = self.d.h2(auto_ack=False)
        sid = c2.start(BIDI)
        for i in range(50):
            c2.send_message(sid, "r" * 1000)
        c2.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c2.sock.close()
        self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 1,
                            what="only the witness call left")
        self.assert_connection_works()

    def test_grpcio_cancel(self):
        with self.d.channel() as ch:
            stub = EchoStub(ch)

            def gen():
                yield "a"
                time.sleep(0.5)
                yield "b"

            call = stub.BidirectionalStreamingEcho(gen(), timeout=30 * SLOW)
            self.assertEqual(next(call), "a")
            call.cancel()
            self.d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 1,
                                what="cancelled call freed")
        self.assert_connection_works()


def fill_until_stalled(c2, sid, chunk, cap=64 * 1024 * 1024):
    """Sends chunk after chunk on sid, never reading the echoes, until the server stops granting
    window for a while. Returns the bytes sent (cap if it never stalled)."""
    sent = 0
    stalled_since = None
    while sent < cap:
        window = min(c2.conn.local_flow_control_window(sid), c2.conn.max_outbound_frame_size)
        if window >= len(chunk):
            c2.conn.send_data(sid, chunk)
            c2.flush()
            sent += len(chunk)
            stalled_since = None
            continue
        if stalled_since is None:
            stalled_since = time.monotonic()
        elif time.monotonic() - stalled_since > 1.0 * SLOW:
            break
        c2.pump(0.1)
    return sent


class Backpressure(Base):
    def test_bidi_client_not_reading(self):
        """A bidi client that never reads: echod stops granting window instead of buffering."""
        c2 = self.d.h2(auto_ack=False)
        sid = c2.start(BIDI)
        chunk = grpc_frame(pb_encode("w" * 1000))
        cap = 64 * 1024 * 1024
        sent = fill_until_stalled(c2, sid, chunk, cap)
        self.assertLess(sent, cap, "echod kept granting window to a client that never reads")
        # Now read everything: every message comes back, in order, and the call ends OK.
        total = sent // len(chunk)
        c2.auto_ack = True
        c2.ack_all()
        c2.wait(lambda: len(c2.streams[sid].messages()) >= total, 30 * SLOW, "all echoes")
        c2.end(sid)
        st = c2.wait_done(sid)
        self.assertEqual(st.grpc_status, 0, st)
        self.assertEqual(len(st.messages()), total)
        c2.close()
        self.assert_connection_works()


class ConnectionErrors(Base):
    """Connection-level errors: GOAWAY with the right code; other connections unaffected."""

    def bad_connection(self):
        c2 = self.d.h2()
        c2.wait(lambda: c2.settings_acked, what="SETTINGS ack")
        st = c2.unary("ok")
        self.assertEqual(st.grpc_status, 0)
        return c2

    def assert_goaway(self, c2, code):
        c2.wait_closed(5 * SLOW)
        self.assertIsNotNone(c2.goaway, "connection closed without GOAWAY")
        self.assertEqual(c2.goaway[0], code, c2.goaway)
        # then the server closes the socket
        deadline = time.monotonic() + 5 * SLOW
        while not c2.closed and time.monotonic() < deadline:
            c2.pump(0.2)
        self.assertTrue(c2.closed, "socket left open after GOAWAY")
        c2.close()
        self.assert_connection_works()

    def test_data_on_stream_zero(self):
        c2 = self.bad_connection()
        c2.send_raw(raw_frame(0, 0, 0, b"xyz"))
        self.assert_goaway(c2, PROTOCOL_ERROR)

    def test_settings_bad_length(self):
        c2 = self.bad_connection()
        c2.send_raw(raw_frame(4, 0, 0, b"\x00\x03\x00\x00\x00"))
        self.assert_goaway(c2, FRAME_SIZE_ERROR)

    def test_headers_on_even_stream(self):
        c2 = self.bad_connection()
        import hpack
        block = hpack.Encoder().encode(c2.grpc_headers(UNARY))
        c2.send_raw(raw_frame(1, 0x4, 2, block))
        self.assert_goaway(c2, PROTOCOL_ERROR)

    def test_window_update_zero(self):
        c2 = self.bad_connection()
        c2.send_raw(raw_frame(8, 0, 0, struct.pack(">I", 0)))
        self.assert_goaway(c2, PROTOCOL_ERROR)

    def test_oversized_frame(self):
        c2 = self.bad_connection()
        sid = c2.start(BIDI)
        c2.send_raw(raw_frame(0, 0, sid, b"\x00" * 20000))  # over SETTINGS_MAX_FRAME_SIZE 16384
        self.assert_goaway(c2, FRAME_SIZE_ERROR)

    def test_flow_control_violation(self):
        """Data beyond the window echod granted: FLOW_CONTROL_ERROR (GOAWAY, or RST_STREAM when
        only the stream window was exceeded)."""
        c2 = self.d.h2(auto_ack=False)
        sid = c2.start(BIDI)
        chunk = grpc_frame(pb_encode("v" * 1000))
        self.assertLess(fill_until_stalled(c2, sid, chunk), 64 * 1024 * 1024, "never stalled")
        frame = raw_frame(0, 0, sid, chunk * 16)
        c2.sock.settimeout(5 * SLOW)
        try:
            for _ in range(256):  # 4 MiB past the window
                c2.sock.sendall(frame)
        except OSError:
            pass
        deadline = time.monotonic() + 5 * SLOW
        while (c2.goaway is None and not c2.closed and c2.streams[sid].reset_code is None
               and time.monotonic() < deadline):
            c2.pump(0.2)
        if c2.goaway is not None:
            self.assertEqual(c2.goaway[0], FLOW_CONTROL_ERROR, c2.goaway)
        else:
            self.assertEqual(c2.streams[sid].reset_code, FLOW_CONTROL_ERROR, c2.streams[sid])
        c2.close()
        self.assert_connection_works()

    def test_bad_preface(self):
        s = socket.create_connection(("127.0.0.1", self.d.grpc_port), timeout=5 * SLOW)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\x00" * 64)
        deadline = time.monotonic() + 5 * SLOW
        closed = False
        while time.monotonic() < deadline:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                closed = True
                break
            if not data:
                closed = True
                break
        s.close()
        self.assertTrue(closed, "server kept a connection with a bad preface open")
        self.assert_connection_works()

    def test_garbage_after_preface(self):
        c2 = self.bad_connection()
        c2.send_raw(b"\xff" * 9 + b"\x00" * 100)
        c2.wait_closed(5 * SLOW)
        c2.close()
        self.assert_connection_works()


if __name__ == "__main__":
    main()
