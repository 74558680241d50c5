"""HTTP/2 conformance (issues 17 and 25), against the default config.

H2spec: h2spec-grpc (h2spec whose requests carry gRPC headers, ../shared/tools/h2spec-grpc from
the repository root) against two methods. ClientStreamingEcho: h2spec's requests (END_STREAM,
no message) are valid calls, answered with a message, so every case tests what it means to, and
every case must pass. UnaryEcho: the same requests break gRPC's rule of one request message and
are answered at once, Trailers-Only; the cases that wait for a response body, or for streams to
stay open, then fail or skip, and only those are allowed (ALLOWED_UNARY, each with the reason).
Without the binary the class says so and skips (docs/http2-conformance.md).

ClosedStreams (raw frames, always runs): DATA and HEADERS on closed and half-closed (remote)
streams, answered as RFC 9113 5.1 says whatever the interleaving: each case is made in both
orders the network allows (in one write, and after echod has provably acted), and the answer is
checked on the wire and in echod_closed_stream_frames_total. Nothing waits for time: a PING and
its ack say that echod has read what came before it.

ConcurrencyLimit (python3-h2, always runs): the stream past max_concurrent_streams in one burst,
before the client has acked echod's SETTINGS, is refused with RST_STREAM(REFUSED_STREAM),
counted in echod_streams_refused_total, and every other stream of the burst completes.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_h2spec.py
"""

import os
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpack  # noqa: E402

from echod_harness import (CLIENT_STREAMING, ROOT, SLOW, UNARY, Daemon, DaemonTestCase, StreamState,  # noqa: E402
                           grpc_frame, main, metric_delta, pb_encode)
from test_abuse import (ACK, DATA, END_HEADERS, END_STREAM, HEADERS, PING, PROTOCOL_ERROR,  # noqa: E402
                        RST_STREAM, STREAM_CLOSED, RawConn, frame, settings)

H2SPEC = os.path.join(ROOT, "..", "shared", "tools", "h2spec-grpc")
REFUSED_STREAM = 7
NO_ERROR = 0

# h2spec's per-case timeout (-o, seconds). Its default, 2 s, is what a case waits for a frame
# that should come; the allowed cases that fail wait it out in full, the others answer within
# milliseconds. 5 s (x4 under sanitizers) leaves a shared 2-core machine room.
H2SPEC_TIMEOUT = int(5 * SLOW)

TRAILERS_ONLY = ("gRPC: a unary request that ends with no message is answered at once with "
                 "Trailers-Only (INTERNAL, 'Half-closed without a request'); h2spec waits for DATA")

# UnaryEcho: case id (h2spec's package/number) -> why it may fail. The four cases h2spec skips
# against it (6.5.3/1, 6.9.1/1, 6.9.2/1-2: no DATA in the response to change windows around) are
# the same rule's doing, and pass against ClientStreamingEcho.
ALLOWED_UNARY = {
    "generic/2/2": TRAILERS_ONLY,   # WINDOW_UPDATE on a half-closed (remote) stream
    "generic/2/3": TRAILERS_ONLY,   # PRIORITY on a half-closed (remote) stream
    "http2/5.1.2/1": ("gRPC: each request ends with no message and is answered Trailers-Only at once "
                      "(HEADERS need no flow-control window, so h2spec's INITIAL_WINDOW_SIZE 0 holds "
                      "nothing open): streams close as they come, and stream 1001 finds fewer than "
                      "1000 open, which RFC 9113 5.1.2 allows; against ClientStreamingEcho the held "
                      "answers keep them open and the 1001st is refused"),
}


def h2spec_cases(junit_path):
    """{case id: None (passed), 'skipped', or the failure text} from h2spec's JUnit XML."""
    cases = {}
    for suite in ET.parse(junit_path).getroot().iter("testsuite"):
        for i, case in enumerate(suite.iter("testcase"), 1):
            cid = "%s/%d" % (suite.get("package"), i)
            bad = case.find("error")
            if bad is None:
                bad = case.find("failure")
            if case.find("skipped") is not None:
                cases[cid] = "skipped"
            elif bad is not None:
                cases[cid] = "%s: %s" % (case.get("classname"), (bad.text or "").strip())
            else:
                cases[cid] = None
    return cases


@unittest.skipUnless(os.access(H2SPEC, os.X_OK), "no h2spec-grpc at %s (see ../shared/tools/README.md)"
                     % os.path.normpath(H2SPEC))
class H2spec(DaemonTestCase):
    def run_h2spec(self, path, allowed, min_passed):
        with tempfile.TemporaryDirectory() as tmp:
            junit = os.path.join(tmp, "h2spec.xml")
            cmd = [H2SPEC, "-h", "127.0.0.1", "-p", str(self.d.grpc_port), "-P", path,
                   "-o", str(H2SPEC_TIMEOUT), "-j", junit]
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 timeout=600 * SLOW).stdout.decode("utf-8", "replace")
            self.assertTrue(os.path.exists(junit), "h2spec wrote no report:\n" + out[-3000:])
            cases = h2spec_cases(junit)
        self.assertGreaterEqual(len(cases), 146, out[-3000:])
        failed = {c: why for c, why in cases.items() if why not in (None, "skipped")}
        unexpected = {c: why for c, why in failed.items() if c not in allowed}
        passed = sum(1 for why in cases.values() if why is None)
        print("h2spec-grpc -P %s -o %d: %d cases, %d passed, %d skipped, %d failed (allowed: %s)" % (
            path, H2SPEC_TIMEOUT, len(cases), passed, list(cases.values()).count("skipped"), len(failed),
            " ".join(sorted(failed)) or "-"))
        report = out[out.find("Failures:"):] if "Failures:" in out else out[-6000:]
        self.assertEqual(unexpected, {}, "h2spec-grpc failures not on the allow-list:\n" + report)
        self.assertGreaterEqual(passed, min_passed, report)
        self.assertTrue(self.d.alive(), "echod died")

    def test_h2spec_grpc_client_streaming(self):
        self.run_h2spec(CLIENT_STREAMING, {}, 146)

    def test_h2spec_grpc_unary(self):
        self.run_h2spec(UNARY, ALLOWED_UNARY, 146 - 4 - len(ALLOWED_UNARY))


def closed_frames(metrics, answer):
    return metrics.metric("echod_closed_stream_frames_total", answer=answer)


class Raw(RawConn):
    """test_abuse's RawConn, reading the response header blocks too, and with PINGs as the
    barrier: once echod acks a PING, it has read everything sent before it."""

    def __init__(self, port, **kw):
        super().__init__(port, **kw)
        self.dec = hpack.Decoder()
        self.decoded = 0  # HEADERS frames decoded so far, in order (HPACK state is per connection)
        self.fields = {}  # stream id -> [header list of each HEADERS frame]
        self.pings = 0

    def barrier(self):
        self.pings += 1
        opaque = b"i25b%04d" % self.pings
        self.send(frame(PING, 0, 0, opaque))
        self.wait(lambda: any(t == PING and f & ACK and p == opaque for t, f, _, p in self.frames),
                  what="the ack of PING %r" % opaque)

    def header_lists(self, sid):
        for t, f, s, p in self.frames[self.decoded:]:
            self.decoded += 1
            if t == HEADERS:
                self.fields.setdefault(s, []).append(dict(self.dec.decode(p)))
        return self.fields.get(sid, [])

    def ended(self, sid):
        return any(s == sid and t in (DATA, HEADERS) and f & END_STREAM for t, f, s, _ in self.frames)

    def grpc_status(self, sid):
        lists = self.header_lists(sid)
        return lists[-1].get("grpc-status") if lists else None

    def data(self, sid, payload=b"test", end_stream=False):
        self.send(frame(DATA, END_STREAM if end_stream else 0, sid, payload))

    def trailers(self, sid):
        self.send(frame(HEADERS, END_STREAM | END_HEADERS, sid, self.enc.encode([("x-trailer", "1")])))

    def goaway_code(self):
        """The GOAWAY's error code, once echod sent one and closed."""
        self.wait(lambda: self.goaway() is not None or self.eof, what="GOAWAY")
        self.wait_closed()
        return self.goaway()[1] if self.goaway() else None


class ClosedStreams(DaemonTestCase):
    def conn(self, **kw):
        c = Raw(self.d.grpc_port, **kw)
        self.addCleanup(c.close)
        return c

    def unary_ok(self, c):
        """A unary call on c still works (and so the connection is up)."""
        sid = c.headers(UNARY)
        c.data(sid, grpc_frame(pb_encode("still here")), end_stream=True)
        c.wait(lambda: c.ended(sid), what="the unary call on stream %d" % sid)
        self.assertEqual(c.grpc_status(sid), "0", c.summary())
        self.assertIsNone(c.goaway(), c.summary())

    def expect(self, c, code, answer, before):
        self.assertEqual(c.goaway_code(), code, c.summary())
        self.assertEqual(closed_frames(self.d.metrics(), answer) - closed_frames(before, answer), 1)

    def test_after_both_ends(self):
        """5.1/11, 5.1/12: the call is over (END_STREAM both ways): DATA or HEADERS on it is a
        connection error STREAM_CLOSED."""
        for late in ("data", "headers"):
            before = self.d.metrics()
            c = self.conn()
            sid = c.headers(UNARY)
            c.data(sid, grpc_frame(pb_encode("x")), end_stream=True)
            c.wait(lambda: c.ended(sid), what="the answer")
            c.data(sid) if late == "data" else c.trailers(sid)
            self.expect(c, STREAM_CLOSED, "stream_closed", before)

    def test_after_the_clients_reset(self):
        """5.1/8, 5.1/9: after the client's RST_STREAM, in the same write and after echod read it."""
        for together in (True, False):
            for late in ("data", "headers"):
                before = self.d.metrics()
                c = self.conn()
                sid = c.headers(CLIENT_STREAMING)
                if together:
                    c.send(frame(RST_STREAM, 0, sid, struct.pack(">I", 8)) +
                           (frame(DATA, 0, sid, b"test") if late == "data" else
                            frame(HEADERS, END_STREAM | END_HEADERS, sid, c.enc.encode([("x-trailer", "1")]))))
                else:
                    c.send(frame(RST_STREAM, 0, sid, struct.pack(">I", 8)))
                    c.barrier()
                    c.data(sid) if late == "data" else c.trailers(sid)
                self.expect(c, STREAM_CLOSED, "stream_closed", before)

    def test_half_closed_remote_whatever_the_timing(self):
        """5.1/5, 6.1/2: DATA after the client's END_STREAM is STREAM_CLOSED whether the stream is
        still half-closed (remote) or echod's answer has closed it by then."""
        # in one write: echod may read both at once (half-closed) or answer in between (closed)
        before = self.d.metrics()
        c = self.conn()
        sid = c.new_sid()
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, sid, c.enc.encode(
            [(":method", "POST"), (":scheme", "http"), (":path", UNARY), (":authority", "127.0.0.1"),
             ("content-type", "application/grpc"), ("te", "trailers")])) + frame(DATA, 0, sid, b"test"))
        self.assertEqual(c.goaway_code(), STREAM_CLOSED, c.summary())
        # held half-closed: the answer's DATA waits for window (INITIAL_WINDOW_SIZE 0), so the
        # stream stays half-closed (remote); nghttp2 answers it (its "DATA: stream in half-closed(remote)")
        c = self.conn(initial=settings(initial_window_size=0))
        sid = c.headers(CLIENT_STREAMING, end_stream=True)
        c.wait(lambda: len(c.header_lists(sid)) == 1, what="the response headers")
        c.data(sid)
        self.assertEqual(c.goaway_code(), STREAM_CLOSED, c.summary())
        # closed: after echod's Trailers-Only answer
        c = self.conn()
        sid = c.headers(UNARY, end_stream=True)
        c.wait(lambda: c.ended(sid), what="the Trailers-Only answer")
        c.data(sid)
        self.assertEqual(c.goaway_code(), STREAM_CLOSED, c.summary())
        after = self.d.metrics()
        # the held case was nghttp2's; the closed one echod's; the first either
        self.assertIn(closed_frames(after, "stream_closed") - closed_frames(before, "stream_closed"), (1, 2))

    def test_after_echods_reset_until_the_client_has_read_it(self):
        """echod reset the stream while the client was sending: the client's frames sent before it
        read the reset are discarded (RFC 9113 5.1) and the connection goes on; once it has acked
        the PING echod sent after the reset, a frame on that stream is its error."""
        before = self.d.metrics()
        c = self.conn()
        # an unsupported grpc-encoding is refused at once, Trailers-Only, then RST_STREAM(NO_ERROR)
        sid = c.headers(UNARY, extra=[("grpc-encoding", "br")])
        c.wait(lambda: c.resets().get(sid) == NO_ERROR, what="echod's RST_STREAM")
        c.data(sid, grpc_frame(pb_encode("in flight")))
        c.trailers(sid)  # its header block is still decoded: the next HEADERS must decode after it
        self.unary_ok(c)
        after = self.d.metrics()
        self.assertEqual(closed_frames(after, "discarded") - closed_frames(before, "discarded"), 2)
        self.assertEqual(closed_frames(after, "stream_closed") - closed_frames(before, "stream_closed"), 0)
        # the PING echod sent after its reset: acked, and echod has read the ack (the barrier)
        c.wait(lambda: any(t == PING and not f & ACK and p == b"echodrst" for t, f, _, p in c.frames),
               what="echod's PING after its reset")
        c.send(frame(PING, ACK, 0, b"echodrst"))
        c.barrier()
        c.data(sid)
        self.expect(c, STREAM_CLOSED, "stream_closed", after)

    def test_skipped_ids(self):
        """5.1.1: ids below the highest that the client never opened are closed: HEADERS on one
        would open a stream below the highest (PROTOCOL_ERROR), DATA on one is STREAM_CLOSED."""
        for late, code, answer in (("headers", PROTOCOL_ERROR, "protocol_error"),
                                   ("data", STREAM_CLOSED, "stream_closed")):
            before = self.d.metrics()
            c = self.conn()
            c.headers(CLIENT_STREAMING, sid=5)
            c.barrier()
            if late == "headers":
                c.headers(CLIENT_STREAMING, sid=3)
            else:
                c.data(3)
            self.expect(c, code, answer, before)


class ClosedStreamsAfterGoaway(DaemonTestCase):
    """RFC 9113 6.8: frames on streams above the last-stream-id of echod's GOAWAY are discarded
    (the client opened them before it read the GOAWAY), while the streams below it finish."""
    @classmethod
    def start_daemon(cls):
        return Daemon(sets=["transport.max_connection_age=200ms", "transport.max_connection_age_grace=30s"]).start()

    def test_streams_above_the_goaway_are_discarded(self):
        before = self.d.metrics()
        c = Raw(self.d.grpc_port)
        self.addCleanup(c.close)
        sid = c.headers(CLIENT_STREAMING)
        c.data(sid, grpc_frame(pb_encode("before")))
        # the age's GOAWAY notice and its PING; the ack makes echod send the final GOAWAY
        c.wait(lambda: any(t == PING and not f & ACK and p == b"echodgoa" for t, f, _, p in c.frames),
               timeout=30, what="the GOAWAY notice's PING")
        c.send(frame(PING, ACK, 0, b"echodgoa"))
        c.wait(lambda: c.goaway() is not None and c.goaway()[0] == sid, what="the final GOAWAY")
        late = c.headers(CLIENT_STREAMING)  # ignored by nghttp2: above the last-stream-id
        c.barrier()
        c.data(late)
        c.barrier()
        c.data(sid, grpc_frame(pb_encode(" after")), end_stream=True)
        c.wait(lambda: c.ended(sid), what="the stream below the GOAWAY to finish")
        self.assertEqual(c.grpc_status(sid), "0", c.summary())
        self.assertEqual(c.goaway()[1], NO_ERROR, c.summary())
        after = self.d.metrics()
        self.assertEqual(closed_frames(after, "discarded") - closed_frames(before, "discarded"), 1)


class ConcurrencyLimit(DaemonTestCase):
    def test_stream_past_the_limit_in_one_burst_is_refused(self):
        before = self.d.metrics()
        limit = 1000  # the default transport.max_concurrent_streams
        c = self.d.h2()
        # Unary calls whose message is not sent yet stay open. All limit + 1 HEADERS leave in one
        # write, before this client has read (or acked) echod's SETTINGS.
        sids = []
        for _ in range(limit + 1):
            sid = c.conn.get_next_available_stream_id()
            c.streams[sid] = StreamState(sid)
            c.conn.send_headers(sid, c.grpc_headers(UNARY), end_stream=False)
            sids.append(sid)
        c.flush()
        last = sids[-1]
        c.wait(lambda: c.streams[last].reset_code is not None, what="the stream past the limit reset")
        self.assertEqual(c.streams[last].reset_code, REFUSED_STREAM, c.streams[last])
        for sid in sids[:-1]:
            c.conn.send_data(sid, grpc_frame(pb_encode("m%d" % sid)), end_stream=True)
        c.flush()
        c.wait(lambda: all(c.streams[s].done for s in sids[:-1]), timeout=30 * SLOW,
               what="the admitted streams to finish")
        for sid in sids[:-1]:
            st = c.streams[sid]
            self.assertEqual((st.grpc_status, st.reset_code), (0, None), st)
            self.assertEqual(st.messages(), ["m%d" % sid], st)
        self.assertIsNone(c.goaway)
        # the connection carries on: a new stream on it is served
        sid = c.start(UNARY)
        c.send_message(sid, "after", end_stream=True)
        c.wait(lambda: c.streams[sid].done, what="a call after the burst")
        self.assertEqual(c.streams[sid].grpc_status, 0, c.streams[sid])
        after = self.d.metrics()
        self.assertEqual(metric_delta(after, before, "echod_streams_refused_total"), 1)


if __name__ == "__main__":
    main()
