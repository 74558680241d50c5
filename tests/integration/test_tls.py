"""TLS with ALPN h2 on the gRPC listener, with a throw-away certificate made by openssl.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_tls.py
"""

import concurrent.futures
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

from echod_harness import (DaemonTestCase, BIDI, SLOW, Daemon, EchoStub, H2Client, bidi_roundtrip,  # noqa: E402
                           main, tls_client_context)

T = 30 * SLOW


def make_cert(directory):
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-days", "1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class TLS(DaemonTestCase):
    @classmethod
    def start_daemon(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="echod-tls-")
        cls.cert, cls.key = make_cert(cls.tmp.name)
        return Daemon(tls=(cls.cert, cls.key)).start()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.tmp.cleanup()

    def test_grpcio_all_methods(self):
        with self.d.channel() as ch:
            stub = EchoStub(ch)
            self.assertEqual(stub.UnaryEcho("secure", timeout=T), "secure")
            self.assertEqual(list(stub.ServerStreamingEcho("s", timeout=T)), ["s"] * 10)
            self.assertEqual(stub.ClientStreamingEcho(iter(["a", "b"]), timeout=T), "ab")
            msgs, got = bidi_roundtrip(stub, 1000)
            self.assertEqual(got, msgs)

    def test_grpcio_concurrent_and_large(self):
        with self.d.channel() as ch:
            stub = EchoStub(ch)
            big = "L" * (2 << 20)
            self.assertEqual(stub.UnaryEcho(big, timeout=T), big)

            def one(i):
                msgs, got = bidi_roundtrip(stub, 100, prefix="t%d" % i)
                return got == msgs

            with concurrent.futures.ThreadPoolExecutor(max_workers=20) as ex:
                self.assertTrue(all(ex.map(one, range(20))))

    def test_wrong_root_is_rejected(self):
        """Sanity: the client really verifies the server (a different CA fails)."""
        with tempfile.TemporaryDirectory() as other:
            other_cert, _ = make_cert(other)
            with open(other_cert, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            with grpc.secure_channel(self.d.grpc_target, creds) as ch:
                with self.assertRaises(grpc.RpcError) as cm:
                    EchoStub(ch).UnaryEcho("x", timeout=5 * SLOW)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_raw_h2_over_tls(self):
        ctx = tls_client_context(cafile=self.cert)
        c = H2Client(self.d.grpc_port, host="127.0.0.1", tls_context=ctx,
                     server_hostname="localhost")
        try:
            self.assertEqual(c.sock.selected_alpn_protocol(), "h2")
            st = c.unary("over tls")
            self.assertEqual(st.grpc_status, 0, st)
            self.assertEqual(st.messages(), ["over tls"])
            sid = c.start(BIDI)
            for i in range(10):
                c.send_message(sid, "b%d" % i)
            c.end(sid)
            st = c.wait_done(sid)
            self.assertEqual(st.messages(), ["b%d" % i for i in range(10)])
        finally:
            c.close()

    def _assert_closed_by_server(self, alpn):
        """Connects with the given ALPN list (None: no ALPN). echod must close the connection."""
        ctx = tls_client_context(cafile=self.cert, alpn=alpn)
        raw = socket.create_connection(("127.0.0.1", self.d.grpc_port), timeout=5 * SLOW)
        try:
            try:
                s = ctx.wrap_socket(raw, server_hostname="localhost")
            except (ssl.SSLError, ConnectionResetError, OSError):
                return  # handshake refused (no_application_protocol alert): closed, fine
            self.assertNotEqual(s.selected_alpn_protocol(), "h2")
            # Send an HTTP/2 preface anyway: it must not be served.
            try:
                s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            except OSError:
                return
            deadline = time.monotonic() + 5 * SLOW
            while time.monotonic() < deadline:
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    self.fail("connection without ALPN h2 still open after 5 s")
                except (ssl.SSLError, OSError):
                    return
                if not data:
                    return
                self.assertFalse(data.startswith(b"\x00"), "echod spoke HTTP/2 without ALPN h2")
            self.fail("connection without ALPN h2 still open")
        finally:
            raw.close()

    def test_client_without_alpn_is_closed(self):
        self._assert_closed_by_server(None)
        self._assert_closed_by_server(["http/1.1"])
        # and the listener still serves proper clients
        with self.d.channel() as ch:
            self.assertEqual(EchoStub(ch).UnaryEcho("after", timeout=T), "after")

    def test_plaintext_client_on_tls_port(self):
        """An h2c client on the TLS port gets closed, and the daemon keeps serving."""
        s = socket.create_connection(("127.0.0.1", self.d.grpc_port), timeout=5 * SLOW)
        try:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
        finally:
            s.close()
        with self.d.channel() as ch:
            self.assertEqual(EchoStub(ch).UnaryEcho("still", timeout=T), "still")

    def test_bad_cert_path_is_a_startup_error(self):
        d = Daemon(tls=(os.path.join(self.tmp.name, "nope.pem"), self.key))
        with self.assertRaises(AssertionError) as cm:
            d.start()
        d.cleanup()
        self.assertIn("nope.pem", str(cm.exception))
        self.assertNotEqual(d.returncode, 0)


if __name__ == "__main__":
    main()
