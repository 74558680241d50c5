"""The REST control arm (config/arms/rest.yaml, listen.rest): HTTP/1.1 echo on the I/O loop,
beside the gRPC listener and outside the dispatch model.

Run on its own:
  ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_rest_arm.py
"""

import http.client
import os
import signal
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import (DaemonTestCase, ROOT, SLOW, Daemon, EchoStub, free_port, main,  # noqa: E402
                           metric_delta)

T = 30.0 * SLOW
REST_YAML = os.path.join(ROOT, "config", "arms", "rest.yaml")
MAX_BODY = 4 * 1024 * 1024


class RestDaemon(Daemon):
    """Daemon on config/arms/rest.yaml with listen.rest on a free loopback port too."""

    def __init__(self, sets=(), **kw):
        super().__init__(config=REST_YAML, sets=sets, **kw)
        self.rest_port = None

    def command(self):
        cmd = super().command()
        return cmd + ["--set", "listen.rest=127.0.0.1:%d" % self.rest_port]

    def start(self):
        last = None
        for _ in range(3):
            self.rest_port = free_port()
            try:
                super().start()
            except AssertionError as e:  # listen.rest's port taken meanwhile: pick others
                last = e
                if "in use" in self.stderr_text():
                    self.cleanup()
                    continue
                raise
            if self.rest_port in (self.grpc_port, self.admin_port):
                self.stop()
                self.cleanup()
                continue
            self._wait_rest()
            return self
        raise last

    def _wait_rest(self):
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.rest_port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def http(self):
        return http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=T)


def do(conn, method, path, body=None, headers=None):
    """One request on conn (kept open); returns (status, headers dict lower-cased, body)."""
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def raw_exchange(port, data, timeout=10.0):
    """Sends raw bytes, reads until the server closes or goes quiet; returns what came back."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        s.settimeout(2.0 * SLOW)
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


class RestArm(DaemonTestCase):
    @classmethod
    def start_daemon(cls):
        return RestDaemon().start()

    def setUp(self):
        self.conn = self.d.http()

    def tearDown(self):
        self.conn.close()

    def test_post_echoes_body_and_content_type(self):
        body = bytes(range(256)) * 4096  # 1 MiB, every byte value
        before = self.d.metrics()
        status, h, data = do(self.conn, "POST", "/echo", body,
                             {"Content-Type": "application/x-test; charset=binary"})
        self.assertEqual(status, 200)
        self.assertEqual(data, body)
        self.assertEqual(h.get("content-type"), "application/x-test; charset=binary")
        self.assertEqual(int(h.get("content-length")), len(body))
        status, h, data = do(self.conn, "POST", "/echo", b"no type")
        self.assertEqual((status, data), (200, b"no type"))
        self.assertEqual(h.get("content-type"), "application/octet-stream")
        status, h, data = do(self.conn, "POST", "/echo", b"")
        self.assertEqual((status, data), (200, b""))
        after = self.d.metrics()
        n = len(body) + len(b"no type")
        self.assertEqual(metric_delta(after, before, "echod_rest_requests_total", code="200"), 3)
        self.assertEqual(metric_delta(after, before, "echod_rest_body_bytes_total", direction="in"), n)
        self.assertEqual(metric_delta(after, before, "echod_rest_body_bytes_total", direction="out"), n)

    def test_post_at_the_body_limit(self):
        body = b"z" * MAX_BODY
        status, _, data = do(self.conn, "POST", "/echo", body)
        self.assertEqual(status, 200)
        self.assertEqual(len(data), MAX_BODY)
        self.assertEqual(data, body)

    def test_post_chunked(self):
        def chunks():
            yield b"abc"
            yield b"defg"
        self.conn.request("POST", "/echo", body=chunks(), encode_chunked=True,
                          headers={"Content-Type": "text/plain"})
        r = self.conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, b"abcdefg"))

    def test_get_message(self):
        before = self.d.metrics()
        status, h, data = do(self.conn, "GET", "/echo?message=hi%20there")
        self.assertEqual((status, data), (200, b"hi there"))
        self.assertTrue(h.get("content-type", "").startswith("text/plain"), h)
        self.assertEqual(do(self.conn, "GET", "/echo?message=a+b%2Bc")[2], b"a b+c")
        self.assertEqual(do(self.conn, "GET", "/echo?x=1&message=%E2%9C%93&y=2")[2],
                         "\u2713".encode())
        self.assertEqual(do(self.conn, "GET", "/echo?message=")[:3:2], (200, b""))
        after = self.d.metrics()
        self.assertEqual(metric_delta(after, before, "echod_rest_requests_total", code="200"), 4)
        self.assertEqual(metric_delta(after, before, "echod_rest_body_bytes_total", direction="out"),
                         len(b"hi there") + len(b"a b+c") + 3)
        self.assertEqual(metric_delta(after, before, "echod_rest_body_bytes_total", direction="in"), 0)

    def test_get_bad_message(self):
        before = self.d.metrics()
        self.assertEqual(do(self.conn, "GET", "/echo")[0], 400)
        self.assertEqual(do(self.conn, "GET", "/echo?other=1")[0], 400)
        self.assertEqual(do(self.conn, "GET", "/echo?message=%zz")[0], 400)
        after = self.d.metrics()
        self.assertEqual(metric_delta(after, before, "echod_rest_requests_total", code="400"), 3)

    def test_head(self):
        before = self.d.metrics()
        self.conn.request("HEAD", "/echo?message=hello")
        r = self.conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.read(), b"")
        self.assertEqual(r.getheader("content-length"), "5")
        # the connection is still usable after a HEAD (no stray body bytes)
        self.assertEqual(do(self.conn, "GET", "/echo?message=next")[:3:2], (200, b"next"))
        after = self.d.metrics()
        self.assertEqual(metric_delta(after, before, "echod_rest_body_bytes_total", direction="out"), 4)

    def test_keep_alive(self):
        before = self.d.metrics()
        self.assertEqual(do(self.conn, "POST", "/echo", b"one")[2], b"one")
        sock = self.conn.sock
        self.assertIsNotNone(sock)
        self.assertEqual(do(self.conn, "GET", "/echo?message=two")[2], b"two")
        self.assertIs(self.conn.sock, sock, "the second request needed a new connection")
        self.assertEqual(do(self.conn, "POST", "/echo", b"three")[2], b"three")
        self.assertIs(self.conn.sock, sock)
        after = self.d.metrics()
        self.assertEqual(metric_delta(after, before, "echod_rest_connections_accepted_total"), 1)
        self.assertGreaterEqual(after.metric("echod_rest_connections_open"), 1)

    def test_pipelined_requests(self):
        req = (b"GET /echo?message=p1 HTTP/1.1\r\nHost: x\r\n\r\n"
               b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\np2"
               b"GET /echo?message=p3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = raw_exchange(self.d.rest_port, req)
        self.assertEqual(out.count(b"HTTP/1.1 200"), 3, out)
        self.assertLess(out.index(b"p1"), out.index(b"p2"))
        self.assertLess(out.index(b"p2"), out.index(b"p3"))

    def test_not_found_and_method_not_allowed(self):
        before = self.d.metrics()
        for path in ("/", "/echoes", "/echo/x", "/metrics", "/grpc.examples.echo.Echo/UnaryEcho"):
            self.assertEqual(do(self.conn, "GET", path)[0], 404, path)
        self.assertEqual(do(self.conn, "POST", "/other", b"x")[0], 404)
        for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
            status, h, _ = do(self.conn, method, "/echo", b"" if method != "DELETE" else None)
            self.assertEqual(status, 405, method)
            allow = {m.strip() for m in h.get("allow", "").split(",")}
            self.assertEqual(allow, {"GET", "HEAD", "POST"}, h)
        after = self.d.metrics()
        self.assertEqual(metric_delta(after, before, "echod_rest_requests_total", code="404"), 6)
        self.assertEqual(metric_delta(after, before, "echod_rest_requests_total", code="405"), 4)

    def test_too_large(self):
        before = self.d.metrics()
        # the header alone: refused without reading 4 MiB
        head = ("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1)).encode()
        out = raw_exchange(self.d.rest_port, head)
        self.assertTrue(out.startswith(b"HTTP/1.1 413"), out[:200])
        # and a whole body one byte over, on its own connection
        conn = self.d.http()
        try:
            try:
                status = do(conn, "POST", "/echo", b"q" * (MAX_BODY + 1))[0]
            except (BrokenPipeError, ConnectionResetError):
                status = 413  # answered and closed while the body was still going out
            self.assertEqual(status, 413)
        finally:
            conn.close()
        after = self.d.wait_metrics(
            lambda m: metric_delta(m, before, "echod_rest_requests_total", code="413") >= 2,
            what="two 413s counted")
        self.assertEqual(metric_delta(after, before, "echod_rest_requests_total", code="413"), 2)
        self.assertEqual(metric_delta(after, before, "echod_rest_body_bytes_total", direction="in"), 0)
        # the listener is fine afterwards
        self.assertEqual(do(self.conn, "POST", "/echo", b"ok")[2], b"ok")

    def test_grpc_beside_rest(self):
        before = self.d.metrics()
        with self.d.channel() as ch:
            stub = EchoStub(ch)
            for i in range(5):
                self.assertEqual(stub.UnaryEcho("g%d" % i, timeout=T), "g%d" % i)
                self.assertEqual(do(self.conn, "GET", "/echo?message=r%d" % i)[2], b"r%d" % i)
            self.assertEqual(list(stub.BidirectionalStreamingEcho(iter(["a", "b"]), timeout=T)),
                             ["a", "b"])
        mid = self.d.wait_metrics(
            lambda m: metric_delta(m, before, "grpc_server_handled_total") >= 6
            and m.metric("echod_calls_in_flight") == 0, what="the 6 gRPC calls done")
        # REST requests add no call steps, dispatches or loop tasks; the gRPC ones count as direct
        for i in range(20):
            do(self.conn, "POST", "/echo", b"x" * 100)
        after = self.d.metrics()
        for name in ("echod_call_steps_total", "echod_executor_dispatches_total", "echod_loop_tasks_total",
                     "grpc_server_started_total"):
            self.assertEqual(metric_delta(after, mid, name), 0, name)
        self.assertEqual(metric_delta(after, before, "grpc_server_handled_total",
                                      grpc_method="UnaryEcho", grpc_code="OK"), 5)
        self.assertEqual(metric_delta(mid, before, "echod_executor_dispatches_total"), 0)
        self.assertEqual(metric_delta(mid, before, "echod_call_steps_total", step="closed"), 6)
        self.assertEqual(metric_delta(after, before, "echod_rest_requests_total", code="200"), 25)

    def test_build_info_names_the_arm(self):
        m = self.d.metrics()
        info = m.series("echod_build_info")
        self.assertEqual(len(info), 1)
        self.assertEqual(info[0][0].get("arm"), "rest")
        self.assertEqual(info[0][0].get("executor"), "direct")


class RestOff(unittest.TestCase):
    def test_no_rest_listener_or_metrics_by_default(self):
        with Daemon() as d:
            m = d.metrics()
            self.assertFalse(m.has("echod_rest_requests_total"))
            self.assertFalse(m.has("echod_rest_connections_accepted_total"))


class RestDrain(unittest.TestCase):
    def test_sigterm_with_keep_alive_connection_open(self):
        d = RestDaemon(sets=["shutdown.drain_timeout=5s"]).start()
        try:
            idle = d.http()
            busy = d.http()
            self.assertEqual(do(idle, "POST", "/echo", b"hello")[2], b"hello")
            self.assertEqual(do(busy, "GET", "/echo?message=x")[2], b"x")
            d.wait_metrics(lambda m: m.metric("echod_rest_connections_open") == 2,
                           what="2 REST connections open")
            # a request in progress when the signal comes: headers and half the body sent
            s = socket.create_connection(("127.0.0.1", d.rest_port), timeout=T)
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf-")
            time.sleep(0.1)
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            s.sendall(b"done!")
            s.settimeout(5.0 * SLOW)
            resp = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                resp += chunk
            s.close()
            self.assertTrue(resp.startswith(b"HTTP/1.1 200"), resp)
            self.assertTrue(resp.endswith(b"half-done!"), resp)
            d.proc.wait(timeout=10 * SLOW)
            took = time.monotonic() - t0
            d.stop()  # exited: checks status 0 and no sanitizer report
            # the idle keep-alive connection was closed by the server, not waited for
            self.assertLess(took, 4.0 * SLOW, "exit waited for the keep-alive connection")
            idle.sock.settimeout(2.0)
            self.assertEqual(idle.sock.recv(1), b"")
            idle.close()
            busy.close()
        finally:
            d.cleanup()


if __name__ == "__main__":
    main()
