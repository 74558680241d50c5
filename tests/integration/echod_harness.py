"""Shared helpers for echod's integration tests.

The parts every tool needs (starting echod, free ports, /metrics, `h2load`, CPU sampling) are in
tools/echodlib, the tooling's one library; this module re-exports them under their old names
and adds what only tests need: the clean-exit and sanitizer checks of Daemon, hand-encoded
protobuf and gRPC framing, grpcio stubs, a raw HTTP/2 client and the test runner.

Runs with Debian's /usr/bin/python3 (python3-grpcio, python3-h2, python3-yaml). Nothing here
needs grpcio-tools: the echo messages are hand-encoded protobuf (field 1, wire type 2) and the
stubs use grpcio's generic API.

Environment:
  ECHOD_BIN          the daemon binary (default: <root>/build/daemon/echod)
  ECHOD_SOURCE_ROOT  the repository root (default: two levels above this file)
  ECHOD_SANITIZER    set by sanitizer builds (asan, tsan): time limits grow, loads shrink
  ECHOD_TEST_VERBOSE print every daemon's stderr when it stops, not only on failure
  ECHOD_WRAPPER      a command put in front of every daemon started, e.g. valgrind (tests/memcheck.sh)
"""

import contextlib
import os
import re
import shlex
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from echodlib.paths import ECHOD_BIN, ROOT  # noqa: E402,F401
from echodlib.ports import free_port, port_open  # noqa: E402,F401
from echodlib.prom import Metrics, http_get, metric_delta, parse_metrics  # noqa: E402,F401
from echodlib.daemon import Echod, EchodError, describe_exit  # noqa: E402,F401

SANITIZER = os.environ.get("ECHOD_SANITIZER", "")
# Sanitizer builds run several times slower: every wait in the suite is scaled by this.
SLOW = 4.0 if SANITIZER else 1.0
VERBOSE = bool(os.environ.get("ECHOD_TEST_VERBOSE"))
WRAPPER = shlex.split(os.environ.get("ECHOD_WRAPPER", ""))

SERVICE = "grpc.examples.echo.Echo"
UNARY = "/%s/UnaryEcho" % SERVICE
SERVER_STREAMING = "/%s/ServerStreamingEcho" % SERVICE
CLIENT_STREAMING = "/%s/ClientStreamingEcho" % SERVICE
BIDI = "/%s/BidirectionalStreamingEcho" % SERVICE

# Lines a sanitizer writes when it finds something; any of them fails the daemon's run.
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer",
                     "SUMMARY: UndefinedBehaviorSanitizer")


# ---------------------------------------------------------------------------------------------
# protobuf and gRPC framing, by hand


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_encode(message):
    """EchoRequest/EchoResponse{message} -> bytes. proto3 omits an empty string."""
    if isinstance(message, str):
        message = message.encode("utf-8")
    if not message:
        return b""
    return b"\x0a" + varint(len(message)) + message


def _read_varint(buf, i):
    shift = 0
    value = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def pb_decode(buf):
    """bytes -> the `message` field (str). Unknown fields are skipped as protobuf does."""
    buf = bytes(buf)
    i = 0
    message = b""
    while i < len(buf):
        key, i = _read_varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _read_varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _read_varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated field")
            if field == 1:
                message = buf[i:i + n]
            i += n
        else:
            raise ValueError("unsupported wire type %d" % wire)
    return message.decode("utf-8")


def grpc_frame(payload, compressed=False):
    """The 5-byte gRPC message prefix plus the payload."""
    return struct.pack(">BI", 1 if compressed else 0, len(payload)) + payload


def grpc_unframe(data):
    """bytes -> ([payloads], leftover bytes of an incomplete message)."""
    out = []
    i = 0
    data = bytes(data)
    while len(data) - i >= 5:
        flag, n = struct.unpack_from(">BI", data, i)
        if len(data) - i - 5 < n:
            break
        out.append(data[i + 5:i + 5 + n])
        i += 5 + n
    return out, data[i:]


# ---------------------------------------------------------------------------------------------
# ports, HTTP, metrics


STEPS = ("method_lookup", "start_call", "on_ready", "messages_available", "half_closed", "closed")
MERGED_STEPS = ("lookup_and_start", "messages_and_half_close")
ALL_STEPS = STEPS + MERGED_STEPS


# ---------------------------------------------------------------------------------------------
# the daemon

_live = []          # daemons started and not yet reported
_current_test = [None]


class DaemonError(AssertionError, EchodError):
    pass


class Daemon(Echod):
    """One echod process on free loopback ports (echodlib.daemon.Echod, with the test suite's
    time scale, ECHOD_WRAPPER, TLS and clean-exit checks). A prefix (taskset) goes before
    ECHOD_WRAPPER and must exec what follows.

        with Daemon(sets=["transport.flush=immediate"]) as d:
            stub = EchoStub(d.channel())
            ...
            m = d.metrics()
        # leaving the block sends SIGTERM and asserts exit 0 with no sanitizer report
    """

    error_class = DaemonError

    def __init__(self, config=None, sets=(), args=(), tls=None, env=None, start_timeout=None, prefix=()):
        super().__init__(config=config, sets=sets, args=args, prefix=list(prefix) + WRAPPER, env=env,
                         start_timeout=start_timeout or 20.0 * SLOW, binary=ECHOD_BIN, cwd=ROOT)
        self.tls = tls  # (cert_path, key_path) or None
        self._reported = False

    # -- life cycle

    def extra_sets(self):
        if self.tls:
            return ["tls.cert=%s" % self.tls[0], "tls.key=%s" % self.tls[1]]
        return []

    def started(self):
        _live.append(self)

    def stop(self, sig=signal.SIGTERM, timeout=None, check=True):
        """Signals the daemon and waits for it; with check, asserts exit 0 and no sanitizer report."""
        if self.proc is None:
            return None
        _, why = self.signal_and_wait(sig, timeout or 30.0 * SLOW)
        if why and check:
            raise DaemonError("echod %s:\n%s" % (why, self.stderr_text()))
        if check:
            self.check_clean_exit()
        return self.returncode

    def check_clean_exit(self):
        text = self.stderr_text()
        bad = [m for m in SANITIZER_MARKERS if m in text]
        if self.returncode != 0 or bad:
            raise DaemonError("echod ended with %s%s:\n%s" % (
                describe_exit(self.returncode), " and a sanitizer report" if bad else "", text))
        if VERBOSE:
            report_daemon(self, "stderr")

    def cleanup(self):
        self.kill()
        if self in _live:
            _live.remove(self)
        self.close_log()
        if self.stderr_path and not VERBOSE:
            with contextlib.suppress(OSError):
                os.unlink(self.stderr_path)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is not None:
                report_daemon(self, "stderr (test failed)")
                self.stop(check=False, timeout=10.0 * SLOW)
            else:
                self.stop()
        finally:
            self.cleanup()
        return False

    # -- talking to it

    @property
    def grpc_target(self):
        return ("localhost:%d" if self.tls else "127.0.0.1:%d") % self.grpc_port

    def channel(self, separate=True, options=()):
        """A grpcio channel. separate: its own TCP connection (no global subchannel sharing)."""
        import grpc
        opts = [("grpc.max_receive_message_length", 64 << 20),
                ("grpc.max_send_message_length", 64 << 20)]
        if separate:
            opts.append(("grpc.use_local_subchannel_pool", 1))
        opts += list(options)
        if self.tls:
            with open(self.tls[0], "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            return grpc.secure_channel(self.grpc_target, creds, options=opts)
        return grpc.insecure_channel(self.grpc_target, options=opts)

    def h2(self, **kw):
        return H2Client(self.grpc_port, **kw)

    def http_get(self, path):
        return http_get(self.admin_port, path)

    def metrics(self):
        try:
            status, body = http_get(self.admin_port, "/metrics")
        except OSError as e:
            if self.proc is not None and self.proc.poll() is not None:
                raise DaemonError("echod died (%s) while the test ran:\n%s" % (
                    describe_exit(self.proc.returncode), self.stderr_text()[-20000:]))
            raise AssertionError("GET /metrics failed: %s" % e)
        if status != 200:
            raise AssertionError("/metrics answered %d" % status)
        return Metrics(body.decode("utf-8"))

    def wait_metrics(self, pred, timeout=None, what="condition"):
        """Scrapes until pred(Metrics) is true; returns that scrape, or raises with the last one."""
        deadline = time.monotonic() + (timeout or 10.0 * SLOW)
        while True:
            m = self.metrics()
            if pred(m):
                return m
            if time.monotonic() > deadline:
                raise AssertionError("metrics never showed %s; last scrape:\n%s" % (
                    what, _interesting(m.text)))
            time.sleep(0.02)

    def wait_idle(self, timeout=None):
        """Waits until no call is in flight; returns a scrape taken after that was seen.

        A scrape is not a snapshot: it reads the step and call counters before the in-flight
        gauge, so the scrape that first shows 0 in flight may miss the last call's closed step,
        submitted between those reads (test_work_model counted 1,201 steps for 200 calls once).
        Every counter of the calls that had ended is final in a scrape begun after it."""
        def idle(m):
            return m.has("echod_calls_in_flight") and m.metric("echod_calls_in_flight") == 0
        deadline = time.monotonic() + (timeout or 10.0 * SLOW)
        while True:
            self.wait_metrics(idle, max(0.1, deadline - time.monotonic()),
                              "echod_calls_in_flight == 0")
            m = self.metrics()
            if idle(m):
                return m


def _interesting(text):
    return "\n".join(l for l in text.splitlines()
                     if l.startswith(("echod_", "grpc_server_handled", "grpc_server_started", "process_")))


def report_daemon(d, what):
    text = d.stderr_text()
    rc = d.proc.poll() if d.proc is not None else None
    sys.stderr.write("---- echod %s (cmd: %s; %s) ----\n%s\n---- end ----\n" % (
        what, " ".join(d.command()) if d.grpc_port else "", describe_exit(rc), text[-20000:]))
    sys.stderr.flush()


def tool_output(p, limit=4000):
    """A finished tool's stdout and stderr for a failure message, each cut to its first and last
    limit / 2 characters: a Go program (k6) that panics names the panic in its first lines and
    prints the stacks after them, and a tail alone keeps only the stacks."""
    def cut(text):
        if len(text) <= limit:
            return text
        return "%s\n[... %d characters ...]\n%s" % (text[:limit // 2], len(text) - limit,
                                                     text[-(limit // 2):])
    return "--- stdout\n%s\n--- stderr\n%s" % (cut(p.stdout or ""), cut(p.stderr or ""))


# ---------------------------------------------------------------------------------------------
# grpcio stubs without generated code


class EchoStub:
    def __init__(self, channel):
        self.channel = channel
        kw = dict(request_serializer=pb_encode, response_deserializer=pb_decode)
        self.UnaryEcho = channel.unary_unary(UNARY, **kw)
        self.ServerStreamingEcho = channel.unary_stream(SERVER_STREAMING, **kw)
        self.ClientStreamingEcho = channel.stream_unary(CLIENT_STREAMING, **kw)
        self.BidirectionalStreamingEcho = channel.stream_stream(BIDI, **kw)


class DaemonTestCase(unittest.TestCase):
    """One daemon for the whole class, in cls.d, stopped (and checked) after its last test.
    Override start_daemon() to configure it."""

    @classmethod
    def start_daemon(cls):
        return Daemon().start()

    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_daemon()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.d.stop()
        finally:
            cls.d.cleanup()


class EchoTestCase(DaemonTestCase):
    """A DaemonTestCase whose every test has its own grpcio channel and Echo stub."""

    def setUp(self):
        self.channel = self.d.channel()
        self.stub = EchoStub(self.channel)

    def tearDown(self):
        self.channel.close()


def bidi_roundtrip(stub, count, prefix="m", timeout=60.0):
    """Streams count messages and returns the echoed messages (all must be read)."""
    msgs = ["%s-%d" % (prefix, i) for i in range(count)]
    got = list(stub.BidirectionalStreamingEcho(iter(msgs), timeout=timeout * SLOW))
    return msgs, got


# ---------------------------------------------------------------------------------------------
# a raw HTTP/2 client on python3-h2, for the protocol table


class StreamState:
    def __init__(self, sid):
        self.id = sid
        self.headers = None          # list of (name, value) of the response HEADERS
        self.trailers_only = False   # the response HEADERS carried END_STREAM
        self.data = bytearray()
        self.trailers = None
        self.ended = False
        self.reset_code = None       # RST_STREAM error code received

    @property
    def done(self):
        return self.ended or self.reset_code is not None

    def header(self, name):
        for k, v in (self.headers or []):
            if k == name:
                return v
        return None

    def trailer(self, name):
        src = self.headers if self.trailers_only else self.trailers
        for k, v in (src or []):
            if k == name:
                return v
        return None

    @property
    def status(self):
        v = self.header(":status")
        return int(v) if v is not None else None

    @property
    def grpc_status(self):
        v = self.trailer("grpc-status")
        return int(v) if v is not None else None

    def messages(self):
        msgs, rest = grpc_unframe(self.data)
        return [pb_decode(m) for m in msgs]

    def __repr__(self):
        return ("<stream %d headers=%r trailers=%r trailers_only=%s data=%dB ended=%s reset=%s>"
                % (self.id, self.headers, self.trailers, self.trailers_only, len(self.data),
                   self.ended, self.reset_code))


class H2Client:
    """A client-side HTTP/2 connection driven by hand: send exactly the frames a test needs,
    read until a condition holds, look at what came back per stream and per connection."""

    def __init__(self, port, host="127.0.0.1", tls_context=None, server_hostname=None,
                 auto_ack=True, timeout=None):
        import h2.config
        import h2.connection
        self.timeout = timeout or 10.0 * SLOW
        sock = socket.create_connection((host, port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_context is not None:
            sock = tls_context.wrap_socket(sock, server_hostname=server_hostname or host)
        self.sock = sock
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                        validate_inbound_headers=False,
                                        validate_outbound_headers=False,
                                        normalize_outbound_headers=False)
        self.conn = h2.connection.H2Connection(config=cfg)
        self.auto_ack = auto_ack
        self.streams = {}
        self.goaway = None          # (error_code, last_stream_id, additional_data)
        self.closed = False         # the server closed the TCP connection
        self.settings_acked = False
        self.pings = 0
        self.reads = 0              # recv()s that brought bytes: what came back together
        self.server_pings = []      # (read, opaque data) of each PING the server sent
        self.ping_acks = []         # the read that brought each ack of ours
        self.unacked = []           # (stream_id, n) of DATA not yet acknowledged (auto_ack off)
        self.conn.initiate_connection()
        self.flush()

    # -- sending

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_raw(self, data):
        self.flush()
        self.sock.sendall(data)

    def grpc_headers(self, path=UNARY, method="POST", content_type="application/grpc",
                     timeout=None, extra=()):
        h = [(":method", method), (":scheme", "http"), (":path", path),
             (":authority", "127.0.0.1")]
        if content_type is not None:
            h.append(("content-type", content_type))
        h.append(("te", "trailers"))
        if timeout is not None:
            h.append(("grpc-timeout", timeout))
        return h + list(extra)

    def start(self, path=UNARY, headers=None, end_stream=False, **kw):
        """Opens a stream with gRPC request headers (or the given ones); returns its id."""
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = StreamState(sid)
        self.conn.send_headers(sid, headers or self.grpc_headers(path, **kw), end_stream=end_stream)
        self.flush()
        return sid

    def send_data(self, sid, data, end_stream=False):
        """Sends data on sid, split to the frame size and waiting for flow-control window."""
        data = bytes(data)
        while True:
            n = min(len(data), self.conn.max_outbound_frame_size,
                    self.conn.local_flow_control_window(sid))
            if n <= 0 and data:
                self.pump(0.5)
                if self.streams[sid].done or self.goaway or self.closed:
                    raise AssertionError("stream %d ended while sending: %r" % (sid, self.streams[sid]))
                continue
            last = n == len(data)
            self.conn.send_data(sid, data[:n], end_stream=end_stream and last)
            self.flush()
            data = data[n:]
            if last:
                return

    def send_message(self, sid, message, end_stream=False, compressed=False):
        payload = message if isinstance(message, (bytes, bytearray)) else pb_encode(message)
        self.send_data(sid, grpc_frame(bytes(payload), compressed), end_stream)

    def end(self, sid):
        self.conn.end_stream(sid)
        self.flush()

    def reset(self, sid, code=8):
        self.conn.reset_stream(sid, error_code=code)
        self.flush()

    def ping(self):
        self.conn.ping(b"echodpng")
        self.flush()

    def ack_all(self):
        for sid, n in self.unacked:
            with contextlib.suppress(Exception):
                self.conn.acknowledge_received_data(n, sid)
        self.unacked = []
        self.flush()

    # -- receiving

    def _receive(self, data):
        """Feeds h2 one frame at a time, so that a graceful GOAWAY reopens h2's state before the
        frames that follow it in the same read (a server's PING right after its GOAWAY notice)."""
        import h2.connection
        import h2.events
        import h2.exceptions
        self._inbuf = getattr(self, "_inbuf", b"") + data
        while len(self._inbuf) >= 9:
            size = 9 + int.from_bytes(self._inbuf[:3], "big")
            if len(self._inbuf) < size:
                break  # the rest of this frame is still on its way
            frame, self._inbuf = self._inbuf[:size], self._inbuf[size:]
            try:
                events = self.conn.receive_data(frame)
            except h2.exceptions.ProtocolError:
                if self.goaway is None:
                    raise
                events = []
            for ev in events:
                if isinstance(ev, h2.events.ConnectionTerminated) and int(ev.error_code) == 0:
                    # A graceful GOAWAY: streams up to last_stream_id may go on (RFC 9113
                    # 6.8), but h2 closes its whole state machine. Reopen it for them.
                    self.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
                yield ev

    def pump(self, timeout=None):
        """Reads once (up to timeout) and handles the events; False once the socket closed."""
        import h2.events
        import h2.exceptions
        if self.closed:
            return False
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return True
        except (ConnectionResetError, ssl.SSLError, OSError):
            data = b""
        if not data:
            self.closed = True
            return False
        self.reads += 1
        for ev in self._receive(data):
            sid = getattr(ev, "stream_id", None)
            st = self.streams.get(sid) if sid else None
            if isinstance(ev, h2.events.ResponseReceived):
                st.headers = list(ev.headers)
                st.headers_read = self.reads
                if ev.stream_ended is not None:
                    st.trailers_only = True
            elif isinstance(ev, h2.events.DataReceived):
                st.data += ev.data
                if ev.flow_controlled_length:
                    if self.auto_ack:
                        with contextlib.suppress(Exception):
                            self.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                    else:
                        self.unacked.append((sid, ev.flow_controlled_length))
            elif isinstance(ev, h2.events.TrailersReceived):
                st.trailers = list(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded):
                st.ended = True
            elif isinstance(ev, h2.events.StreamReset):
                if st is not None:
                    st.reset_code = int(ev.error_code)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = (int(ev.error_code), ev.last_stream_id, ev.additional_data)
            elif isinstance(ev, h2.events.SettingsAcknowledged):
                self.settings_acked = True
            elif isinstance(ev, h2.events.PingAckReceived):
                self.pings += 1
                self.ping_acks.append(self.reads)
            elif isinstance(ev, h2.events.PingReceived):  # h2 queues its ack, flushed below
                self.server_pings.append((self.reads, ev.ping_data))
        with contextlib.suppress(Exception):
            self.flush()
        return True

    def wait(self, pred, timeout=None, what="condition"):
        deadline = time.monotonic() + (timeout or self.timeout)
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %s; streams: %r goaway=%r closed=%s"
                                     % (what, self.streams, self.goaway, self.closed))
            if not self.pump(min(left, 0.5)) and not pred():
                raise AssertionError("connection closed while waiting for %s; streams: %r goaway=%r"
                                     % (what, self.streams, self.goaway))
        return True

    def wait_done(self, sid, timeout=None):
        self.wait(lambda: self.streams[sid].done, timeout, "stream %d to end" % sid)
        return self.streams[sid]

    def wait_messages(self, sid, n, timeout=None):
        self.wait(lambda: len(self.streams[sid].messages()) >= n or self.streams[sid].done,
                  timeout, "%d messages on stream %d" % (n, sid))
        return self.streams[sid].messages()

    def wait_closed(self, timeout=None):
        """Waits until the server sent GOAWAY or closed the socket."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while self.goaway is None and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("connection still open")
            self.pump(min(left, 0.5))

    def unary(self, message="ping", timeout=None):
        """One complete UnaryEcho call on this connection; returns the StreamState."""
        sid = self.start(UNARY)
        self.send_message(sid, message, end_stream=True)
        return self.wait_done(sid, timeout)

    def close(self):
        with contextlib.suppress(Exception):
            self.sock.close()
        self.closed = True


def tls_client_context(cafile=None, alpn=("h2",)):
    ctx = ssl.create_default_context(cafile=cafile)
    if cafile is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


# ---------------------------------------------------------------------------------------------
# running a test file on its own


def echod_check_config(path=None, sets=(), timeout=30):
    """Runs `echod --check-config` and returns CompletedProcess (text)."""
    cmd = [ECHOD_BIN, "--check-config", path] if path else [ECHOD_BIN, "--check-config"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * SLOW, cwd=ROOT)


def require_binary():
    if not os.access(ECHOD_BIN, os.X_OK):
        sys.stderr.write("echod binary not found at %s (set ECHOD_BIN)\n" % ECHOD_BIN)
        print("0 passed, 1 failed")
        sys.exit(1)


class _Result(unittest.TextTestResult):
    def startTest(self, test):
        _current_test[0] = test
        super().startTest(test)

    def _dump_live(self):
        for d in list(_live):
            if d.proc is not None:
                report_daemon(d, "stderr so far")

    def addFailure(self, test, err):
        self._dump_live()
        super().addFailure(test, err)

    def addError(self, test, err):
        self._dump_live()
        super().addError(test, err)


def main():
    """unittest.main with a closing 'N passed, N failed' line and a non-zero exit on failure."""
    require_binary()
    import __main__
    loader = unittest.TestLoader()
    argv = sys.argv[1:]
    if argv:
        suite = loader.loadTestsFromNames(argv, __main__)
    else:
        suite = loader.loadTestsFromModule(__main__)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Result, stream=sys.stdout)
    result = runner.run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    for d in list(_live):
        d.cleanup()
    sys.stdout.flush()
    line = "%d passed, %d failed" % (passed, failed)
    if skipped:
        line += ", %d skipped" % skipped
    print(line)
    sys.stdout.flush()
    sys.exit(1 if failed or result.testsRun == 0 else 0)
