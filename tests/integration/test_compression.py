"""grpc-encoding gzip and deflate (docs/compression.md), end to end.

  - grpcio with gzip and deflate, channel-wide and per call, on all four Echo methods, under
    `direct`, a pool arm (`fixed`) and the serializing wrapper (`direct-serialized`); where the
    inflating ran is checked from /metrics (steps on the loop or on a worker).
  - transport.compression.respond in each mode, checked by what the client sees: the
    response's grpc-encoding header and the compressed flag of its messages (python3-h2).
  - python3-h2 at the frame level: gzip and deflate bombs, corrupt and truncated streams, the
    compressed flag without an encoding, a grpc-encoding naming several encodings, a message
    exactly at and one byte over the decompressed cap, a 1000-message bidi with mixed flags;
    each beside a well-behaved neighbour stream on the same connection and a grpcio call on
    another one, all of which must succeed.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_compression.py
"""

import gzip
import os
import struct
import sys
import tempfile
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

from echod_harness import (BIDI, CLIENT_STREAMING, ROOT, SERVER_STREAMING, SLOW, UNARY, Daemon,  # noqa: E402
                           DaemonTestCase, EchoStub, echod_check_config, main, metric_delta, pb_decode, pb_encode)

ARMS = ("direct", "fixed", "direct-serialized")
CAP = 65536  # transport.max_receive_message_bytes of the frame-level daemon
T = 30 * SLOW


def compress(enc, data):
    if enc == "gzip":
        return gzip.compress(data)
    return zlib.compress(data)  # gRPC's deflate is the zlib format (RFC 1950)


def decompress(enc, data):
    if enc == "gzip":
        return gzip.decompress(data)
    return zlib.decompress(data)


def bomb(enc, size):
    """size zero bytes, compressed at level 9, made in 1 MiB pieces."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31 if enc == "gzip" else 15)
    chunk = bytes(1 << 20)
    out = [co.compress(chunk) for _ in range(size >> 20)]
    out.append(co.flush())
    return b"".join(out)


def pb_of_size(n):
    """An EchoRequest whose encoding is exactly n bytes (n >= 4)."""
    for hdr in (2, 3, 4):
        body = n - 1 - (hdr - 1)
        enc = pb_encode("x" * body)
        if len(enc) == n:
            return enc
    raise ValueError(n)


def frames(data):
    """bytes -> [(flag, payload)] of complete messages."""
    out, i = [], 0
    while len(data) - i >= 5:
        flag, n = struct.unpack_from(">BI", data, i)
        out.append((flag, bytes(data[i + 5:i + 5 + n])))
        i += 5 + n
    return out


def decoded(st):
    """A stream's response messages, inflated per the response's grpc-encoding."""
    enc = st.header("grpc-encoding")
    msgs = []
    for flag, payload in frames(st.data):
        if flag & 1:
            assert enc in ("gzip", "deflate"), "compressed message without a grpc-encoding: %r" % st
            payload = decompress(enc, payload)
        msgs.append(pb_decode(payload))
    return msgs


def send_compressed(c, sid, enc, message, end_stream=False, compressed=True):
    payload = message if isinstance(message, bytes) else pb_encode(message)
    if compressed:
        payload = compress(enc, payload)
    c.send_data(sid, struct.pack(">BI", 1 if compressed else 0, len(payload)) + payload, end_stream)


def enc_headers(enc, accept="identity,deflate,gzip"):
    h = [("grpc-encoding", enc)]
    if accept is not None:
        h.append(("grpc-accept-encoding", accept))
    return h


def all_four(stub, tag, **kw):
    """All four Echo methods with kw (e.g. compression=...); asserts each echo."""
    msg = "%s-" % tag + "z" * 2000  # compressible, above any min_bytes used here
    assert stub.UnaryEcho(msg, timeout=T, **kw) == msg
    got = list(stub.ServerStreamingEcho(msg, timeout=T, **kw))
    assert got and all(g == msg for g in got), got[:2]
    parts = ["%s-%d-" % (tag, i) + "y" * 300 for i in range(5)]
    assert stub.ClientStreamingEcho(iter(parts), timeout=T, **kw) == "".join(parts)
    msgs = ["%s-b%d-" % (tag, i) + "w" * 500 for i in range(20)]
    assert list(stub.BidirectionalStreamingEcho(iter(msgs), timeout=T, **kw)) == msgs


class Arms(unittest.TestCase):
    """grpcio compressing under each dispatch shape; the inflating ran where the steps ran."""

    def run_arm(self, arm):
        with Daemon(config=os.path.join(ROOT, "config", "arms", arm + ".yaml")) as d:
            for enc, algo in (("gzip", grpc.Compression.Gzip), ("deflate", grpc.Compression.Deflate)):
                before = d.metrics()
                ch = d.channel(options=[("grpc.default_compression_algorithm", int(algo))])
                try:
                    all_four(EchoStub(ch), "chan-" + enc)  # channel-wide
                finally:
                    ch.close()
                ch = d.channel()
                try:
                    all_four(EchoStub(ch), "call-" + enc, compression=algo)  # per call
                finally:
                    ch.close()
                after = d.wait_idle()
                got = metric_delta(after, before, "echod_grpc_encoding_messages_total",
                                   direction="received", encoding=enc)
                # per pass: unary 1 + server streaming 1 + client streaming 5 + bidi 20
                self.assertGreaterEqual(got, 2 * 27, "%s: %s messages inflated" % (arm, enc))
                sent = metric_delta(after, before, "echod_grpc_encoding_messages_total",
                                    direction="sent", encoding=enc)
                self.assertGreater(sent, 0, "respond=request answers in the request's encoding")
                wire = metric_delta(after, before, "echod_grpc_encoding_bytes_total",
                                    direction="received", encoding=enc, form="wire")
                plain = metric_delta(after, before, "echod_grpc_encoding_bytes_total",
                                     direction="received", encoding=enc, form="decompressed")
                self.assertLess(wire * 3, plain, "compressible messages: %d wire vs %d bytes" % (wire, plain))
                self.assertEqual(metric_delta(after, before, "echod_grpc_inflate_failures_total",
                                              reason="corrupt"), 0)
                loop = metric_delta(after, before, "echod_step_runs_total", thread="loop")
                worker = metric_delta(after, before, "echod_step_runs_total", thread="worker")
                if arm.startswith("direct"):
                    self.assertEqual(worker, 0, "%s: every step (and inflate) on the loop" % arm)
                else:
                    self.assertGreater(worker, loop, "%s: message steps (and inflate) on workers" % arm)

    def test_direct(self):
        self.run_arm("direct")

    def test_pool_fixed(self):
        self.run_arm("fixed")

    def test_serializing_wrapper(self):
        self.run_arm("direct-serialized")


class Respond(unittest.TestCase):
    """transport.compression.respond, seen by the client: grpc-encoding and each message's flag."""

    def call(self, d, enc, accept="identity,deflate,gzip", message="r" * 1000, path=UNARY):
        c = d.h2()
        try:
            sid = c.start(path, extra=enc_headers(enc, accept))
            send_compressed(c, sid, enc, message, end_stream=True, compressed=enc != "identity")
            st = c.wait_done(sid)
            self.assertEqual(st.grpc_status, 0, st)
            self.assertEqual(st.header("grpc-accept-encoding"), "identity,deflate,gzip", st)
            self.assertTrue(decoded(st) and all(m == message for m in decoded(st)), st)
            return st.header("grpc-encoding") or "identity", [f for f, _ in frames(st.data)]
        finally:
            c.close()

    def test_modes(self):
        cases = {
            # respond: {(request encoding, client accepts): response encoding}
            "request": {("gzip", "identity,deflate,gzip"): "gzip", ("deflate", "identity,deflate,gzip"): "deflate",
                        ("identity", "identity,deflate,gzip"): "identity", ("gzip", "identity"): "identity",
                        ("gzip", None): "identity"},
            "identity": {("gzip", "identity,deflate,gzip"): "identity", ("deflate", "gzip,deflate"): "identity"},
            "gzip": {("deflate", "identity,deflate,gzip"): "gzip", ("identity", "gzip"): "gzip",
                     ("identity", "identity,deflate"): "identity"},
            "deflate": {("gzip", "identity,deflate,gzip"): "deflate", ("identity", "deflate"): "deflate"},
        }
        for respond, table in cases.items():
            with Daemon(sets=["transport.compression.respond=" + respond, "transport.compression.level=1"]) as d:
                for (enc, accept), want in table.items():
                    got, flags = self.call(d, enc, accept)
                    self.assertEqual(got, want, "respond=%s request=%s accept=%s" % (respond, enc, accept))
                    self.assertEqual(set(flags), {1 if want != "identity" else 0}, (respond, enc, flags))
                # streaming methods too
                got, flags = self.call(d, "gzip", path=SERVER_STREAMING)
                self.assertEqual(len(flags), 10)

    def test_min_bytes(self):
        with Daemon(sets=["transport.compression.min_bytes=500"]) as d:
            enc, flags = self.call(d, "gzip", message="s" * 100)  # 102-byte response: flag 0
            self.assertEqual((enc, flags), ("gzip", [0]))
            enc, flags = self.call(d, "gzip", message="s" * 600)
            self.assertEqual((enc, flags), ("gzip", [1]))
            m = d.wait_idle()
            self.assertGreaterEqual(m.metric("echod_grpc_encoding_messages_total", direction="sent",
                                             encoding="identity"), 1)

    def test_check_config(self):
        default = os.path.join(ROOT, "config", "echod.yaml")
        r = echod_check_config(default, sets=["transport.compression.respond=gzip", "transport.compression.level=9",
                                              "transport.compression.min_bytes=64"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("compression:", r.stdout)
        self.assertIn("respond: gzip", r.stdout)
        for bad in ("transport.compression.respond=snappy", "transport.compression.level=0",
                    "transport.compression.level=10"):
            r = echod_check_config(default, sets=[bad])
            self.assertEqual(r.returncode, 2, (bad, r.stdout, r.stderr))
            self.assertIn(bad.split("=")[0], r.stderr)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("transport:\n  compression:\n    respond: brotli\n")
        try:
            r = echod_check_config(f.name)
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn("%s:3:14" % f.name, r.stderr)
            self.assertIn("transport.compression.respond", r.stderr)
        finally:
            os.unlink(f.name)


class FrameLevel(DaemonTestCase):
    """Hostile and odd compressed input at the frame level, each beside neighbours that succeed."""

    @classmethod
    def start_daemon(cls):
        cls.bombs = {enc: bomb(enc, 1 << 30) for enc in ("gzip", "deflate")}
        return Daemon(sets=["transport.max_receive_message_bytes=%d" % CAP]).start()

    def beside(self, bad):
        """Runs bad(c) on a connection where a gzip bidi neighbour is open, then checks that the
        neighbour, a new call on the same connection and a grpcio call elsewhere all succeed."""
        c = self.d.h2()
        try:
            n = c.start(BIDI, extra=enc_headers("gzip"))
            send_compressed(c, n, "gzip", "before")
            self.assertEqual(c.wait(lambda: len(decoded(c.streams[n])) >= 1), True)
            result = bad(c)
            send_compressed(c, n, "gzip", "after", end_stream=True)
            st = c.wait_done(n)
            self.assertEqual((st.grpc_status, decoded(st)), (0, ["before", "after"]), st)
            self.assertIsNone(c.goaway, "the connection carries on")
            sid = c.start(UNARY, extra=enc_headers("deflate"))
            send_compressed(c, sid, "deflate", "same connection", end_stream=True)
            st = c.wait_done(sid)
            self.assertEqual((st.grpc_status, decoded(st)), (0, ["same connection"]), st)
        finally:
            c.close()
        ch = self.d.channel(options=[("grpc.default_compression_algorithm", int(grpc.Compression.Gzip))])
        try:
            self.assertEqual(EchoStub(ch).UnaryEcho("elsewhere", timeout=T), "elsewhere")
        finally:
            ch.close()
        return result

    def one(self, c, enc, payload, flag=1, path=UNARY, extra=None):
        sid = c.start(path, extra=extra if extra is not None else enc_headers(enc))
        c.send_data(sid, struct.pack(">BI", flag, len(payload)) + payload, end_stream=True)
        return c.wait_done(sid)

    def vm_hwm_kib(self):
        with open("/proc/%d/status" % self.d.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def test_bombs(self):
        for enc in ("gzip", "deflate"):
            before = self.d.metrics()
            data = self.bombs[enc]
            self.assertLess(len(data), CAP * 20)  # ~1 MiB that would inflate to 1 GiB
            # the 1 MiB bomb is above this daemon's wire cap: a daemon with the default 4 MiB
            with Daemon() as big:
                c = big.h2()
                try:
                    sid = c.start(UNARY, extra=enc_headers(enc))
                    c.send_data(sid, struct.pack(">BI", 1, len(data)) + data, end_stream=True)
                    st = c.wait_done(sid, timeout=60 * SLOW)
                    self.assertEqual(st.grpc_status, 8, st)
                    self.assertIn("larger than max", st.trailer("grpc-message"))
                    ok = c.unary("neighbour")
                    self.assertEqual((ok.grpc_status, ok.messages()), (0, ["neighbour"]))
                finally:
                    c.close()
                with open("/proc/%d/status" % big.proc.pid) as f:
                    hwm = [int(l.split()[1]) for l in f if l.startswith("VmHWM:")][0]
                limit = (4 << 10) * 8 + (400 << 10 if os.environ.get("ECHOD_SANITIZER") else 64 << 10)
                self.assertLess(hwm, limit, "peak RSS %d KiB: inflating went past the cap" % hwm)
                m = big.wait_idle()
                self.assertEqual(m.metric("echod_grpc_inflate_failures_total", reason="too_large"), 1)
            # a small bomb (64 KiB wire limit here), beside neighbours
            small = bomb(enc, 64 << 20)
            self.assertLess(len(small), CAP)
            st = self.beside(lambda c: self.one(c, enc, small))
            self.assertEqual(st.grpc_status, 8, st)
            after = self.d.wait_idle()
            self.assertEqual(metric_delta(after, before, "echod_grpc_inflate_failures_total", reason="too_large"), 1)

    def test_corrupt(self):
        for enc in ("gzip", "deflate"):
            good = compress(enc, pb_encode("corrupt me " * 50))
            bad = good[:12] + bytes(b ^ 0x5A for b in good[12:40]) + good[40:]
            st = self.beside(lambda c: self.one(c, enc, bad))
            self.assertEqual(st.grpc_status, 13, st)
            self.assertIn("corrupt", st.trailer("grpc-message"))
            # a wrong format: deflate bytes under grpc-encoding gzip
            other = compress("deflate" if enc == "gzip" else "gzip", pb_encode("x"))
            st = self.beside(lambda c: self.one(c, enc, other))
            self.assertEqual(st.grpc_status, 13, st)
            # trailing garbage after a complete stream
            st = self.beside(lambda c: self.one(c, enc, compress(enc, pb_encode("y")) + b"junk"))
            self.assertEqual(st.grpc_status, 13, st)

    def test_truncated(self):
        for enc in ("gzip", "deflate"):
            good = compress(enc, pb_encode("truncate me " * 50))
            for cut in (3, len(good) // 2, len(good) - 1):
                st = self.beside(lambda c: self.one(c, enc, good[:cut]))
                self.assertEqual(st.grpc_status, 13, (cut, st))
                self.assertIn("truncated" if cut > 10 else "", st.trailer("grpc-message"))

    def test_flag_without_encoding(self):
        for extra in ([], [("grpc-encoding", "identity")]):
            st = self.beside(lambda c: self.one(c, "gzip", compress("gzip", pb_encode("x")), extra=extra))
            self.assertEqual(st.grpc_status, 13, st)

    def test_several_encodings_in_header(self):
        for value in ("gzip,deflate", "gzip, identity", "snappy", "GZIP"):
            st = self.beside(lambda c: self.one(c, "gzip", compress("gzip", pb_encode("x")),
                                                extra=[("grpc-encoding", value)]))
            self.assertEqual(st.grpc_status, 12, (value, st))
            self.assertEqual(st.trailer("grpc-accept-encoding") or st.header("grpc-accept-encoding"),
                             "identity,deflate,gzip")

    def test_at_cap_and_one_over(self):
        for enc in ("gzip", "deflate"):
            at = pb_of_size(CAP)
            st = self.beside(lambda c: self.one(c, enc, compress(enc, at)))
            self.assertEqual(st.grpc_status, 0, st)
            self.assertEqual(decoded(st), [pb_decode(at)])
            over = pb_of_size(CAP + 1)
            st = self.beside(lambda c: self.one(c, enc, compress(enc, over)))
            self.assertEqual(st.grpc_status, 8, st)
            self.assertIn("(%d bytes)" % CAP, st.trailer("grpc-message"))

    def test_empty_and_zero_length(self):
        for enc in ("gzip", "deflate"):
            st = self.beside(lambda c: self.one(c, enc, compress(enc, b"")))
            self.assertEqual((st.grpc_status, decoded(st)), (0, [""]), st)
            st = self.beside(lambda c: self.one(c, enc, b""))  # flag set, no bytes: not a stream
            self.assertEqual(st.grpc_status, 13, st)

    def test_bidi_1000_mixed_flags(self):
        def bidi(c):
            sid = c.start(BIDI, extra=enc_headers("deflate"))
            msgs = ["mixed-%d-" % i + "q" * (i % 97) for i in range(1000)]
            for i, m in enumerate(msgs):
                send_compressed(c, sid, "deflate", m, compressed=i % 3 != 0)
                if i % 50 == 49:
                    c.wait(lambda: len(frames(c.streams[sid].data)) >= i - 20)
            c.end(sid)
            st = c.wait_done(sid, timeout=60 * SLOW)
            self.assertEqual(st.grpc_status, 0, st)
            self.assertEqual(decoded(st), msgs)
            return st
        before = self.d.metrics()
        self.beside(bidi)
        after = self.d.wait_idle()
        self.assertGreaterEqual(metric_delta(after, before, "echod_grpc_encoding_messages_total",
                                             direction="received", encoding="identity"), 334)
        self.assertGreaterEqual(metric_delta(after, before, "echod_grpc_encoding_messages_total",
                                             direction="received", encoding="deflate"), 666)


if __name__ == "__main__":
    main()
