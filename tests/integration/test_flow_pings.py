"""transport.flow_control_pings (docs/work-model.md, "The capped ramp's tail"), as a client sees it.

grpc-java's server sends a PING on a DATA frame when none of its own is unacked (its automatic
flow control), and Netty writes it, with the acks of the client's PINGs, at the end of the
connection's read, while the calls' answers wait in gRPC's WriteQueue for the loop's flush. So
under `direct` a call that sleeps on the loop brings its client the server's PING and the ack of
the client's PING before its answer, in an earlier read; the next call, once the client acked,
brings another. Off, the client gets no PING of echod's, and nghttp2's ack comes with the answer.
echod_flow_control_pings_total and echod_ping_acks_at_read_total count them.

Run alone: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_flow_pings.py
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import (ROOT, SLOW, Daemon, H2Client, StreamState, echod_check_config, grpc_frame,  # noqa: E402
                           main, metric_delta, pb_encode, tls_client_context)
from test_tls import make_cert  # noqa: E402

ARM = os.path.join("config", "arms", "direct.yaml")
SLEEP_US = int(200000 * SLOW)  # the call holds the loop this long: its answer leaves after it
OPAQUE = b"clientpg"


def ping_and_call(c):
    """A PING and a unary call that sleeps on the loop, in one write: echod reads them together."""
    sid = c.conn.get_next_available_stream_id()
    c.streams[sid] = StreamState(sid)
    c.conn.ping(OPAQUE)
    c.conn.send_headers(sid, c.grpc_headers(extra=[("echod-sleep-us", str(SLEEP_US))]))
    c.conn.send_data(sid, grpc_frame(pb_encode("flow")), end_stream=True)
    c.flush()
    st = c.wait_done(sid, 30 * SLOW)
    assert dict(st.trailers).get("grpc-status") == "0", st
    return st


def counters(d):
    m = d.metrics()
    return m.metric("echod_flow_control_pings_total"), m.metric("echod_ping_acks_at_read_total")


class FlowControlPings(unittest.TestCase):
    def test_on_pings_and_acks_before_the_answer(self):
        with Daemon(config=ARM, sets=["transport.flow_control_pings=true"]) as d:
            c = H2Client(d.grpc_port)
            c.wait(lambda: c.settings_acked, what="SETTINGS ack")
            st = ping_and_call(c)
            self.assertEqual(len(c.server_pings), 1, c.server_pings)
            read, opaque = c.server_pings[0]
            self.assertEqual(opaque, b"echodbdp")
            self.assertLess(read, st.headers_read, "the server's PING came with the answer")
            self.assertEqual(len(c.ping_acks), 1, c.ping_acks)
            self.assertLess(c.ping_acks[0], st.headers_read, "the ack of the client's PING came with the answer")
            self.assertEqual(d.wait_metrics(lambda m: m.metric("echod_flow_control_pings_total") >= 1,
                                            what="the PING counted").metric("echod_flow_control_pings_total"), 1)
            # h2 acked the server's PING before this call went out: it brings a new one
            ping_and_call(c)
            self.assertEqual(len(c.server_pings), 2, c.server_pings)
            self.assertEqual(counters(d), (2, 2))
            c.close()

    def test_off_no_ping_and_the_ack_with_the_answer(self):
        with Daemon(config=ARM, sets=["transport.flow_control_pings=false"]) as d:
            c = H2Client(d.grpc_port)
            c.wait(lambda: c.settings_acked, what="SETTINGS ack")
            st = ping_and_call(c)
            self.assertEqual(c.server_pings, [])
            self.assertEqual(len(c.ping_acks), 1, c.ping_acks)
            self.assertGreaterEqual(c.ping_acks[0], st.headers_read)
            self.assertEqual(counters(d), (0, 0))
            c.close()

    def test_tls_the_answers_leave_in_the_counted_flush(self):
        """Over TLS the PINGs go through the write queue, and their write completes while the
        batch's flush is due: the answers must wait for that flush, not leave with the PINGs'
        completion uncounted (echod_flush_frames would miss them)."""
        calls = 8
        with tempfile.TemporaryDirectory(prefix="echod-pings-tls-") as tmp:
            cert, key = make_cert(tmp)
            with Daemon(config=ARM, sets=["transport.flow_control_pings=true"], tls=(cert, key)) as d:
                c = H2Client(d.grpc_port, tls_context=tls_client_context(cafile=cert), server_hostname="localhost")
                c.wait(lambda: c.settings_acked, what="SETTINGS ack")
                m0 = d.metrics()
                sids = []
                c.conn.ping(OPAQUE)
                for i in range(calls):  # one write, one TLS record: echod reads them together
                    sid = c.conn.get_next_available_stream_id()
                    c.streams[sid] = StreamState(sid)
                    c.conn.send_headers(sid, c.grpc_headers())
                    c.conn.send_data(sid, grpc_frame(pb_encode("tls-%d" % i)), end_stream=True)
                    sids.append(sid)
                c.flush()
                for i, sid in enumerate(sids):
                    st = c.wait_done(sid, 30 * SLOW)
                    self.assertEqual((dict(st.trailers).get("grpc-status"), st.messages()), ("0", ["tls-%d" % i]))
                self.assertEqual(len(c.server_pings), 1, c.server_pings)
                self.assertEqual(len(c.ping_acks), 1, c.ping_acks)
                self.assertLess(c.ping_acks[0], max(c.streams[s].headers_read for s in sids))
                m1 = d.wait_metrics(lambda m: metric_delta(m, m0, "echod_flush_frames_sum") >= 3 * calls,
                                    what="every answer's HEADERS, DATA and trailers in a counted flush")
                self.assertEqual(metric_delta(m1, m0, "echod_flow_control_pings_total"), 1)
                self.assertEqual(metric_delta(m1, m0, "echod_ping_acks_at_read_total"), 1)
                c.close()

    def test_every_arm_sends_them(self):
        """The arms model grpc-java, whose server sends them whatever its executor (each arm's
        PINGs are counted under load in test_arms)."""
        arms = os.path.join(ROOT, "config", "arms")
        for name in sorted(os.listdir(arms)):
            r = echod_check_config(os.path.join(arms, name))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"\n  flow_control_pings: true\n", name)


if __name__ == "__main__":
    main()
