"""A real client's check of a server before it is measured: grpcio unary calls (several payloads)
and a 100-message bidi stream, echoed in order with grpc-status OK.

check() runs it as a process of its own (`bench/compare --check-echo HOST:PORT`, Debian's
/usr/bin/python3 with python3-grpcio), so that grpcio's threads never live in the benchmark's
process; main() is that process.
"""

import os
import subprocess

from . import h2load, paths

ENTRY = os.path.join(paths.ROOT, "bench", "compare")


def main(target):
    """A real client: grpcio unary (several payloads) and a 100-message bidi stream."""
    import grpc

    def enc(s):
        b = s.encode("utf-8") if isinstance(s, str) else s
        if not b:
            return b""
        n, v = len(b), bytearray()
        while True:
            if n < 0x80:
                v.append(n)
                break
            v.append((n & 0x7F) | 0x80)
            n >>= 7
        return b"\x0a" + bytes(v) + b

    failures = []
    ch = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(ch).result(timeout=20)
        unary = ch.unary_unary(h2load.UNARY_PATH)
        for msg in ["hello", "", "x" * 100, "héllo wörld", "y" * 5000]:
            try:
                resp, call = unary.with_call(enc(msg), timeout=10)
                if call.code() != grpc.StatusCode.OK or resp != enc(msg):
                    failures.append("UnaryEcho %r: code %s, response %r" % (
                        msg[:20], call.code(), resp[:40]))
            except grpc.RpcError as e:
                failures.append("UnaryEcho %r: %s %s" % (msg[:20], e.code(), e.details()))
        bidi = ch.stream_stream(h2load.BIDI_PATH)
        msgs = ["msg-%d" % i for i in range(100)]
        try:
            call = bidi(iter([enc(m) for m in msgs]), timeout=20)
            got = list(call)
            if call.code() != grpc.StatusCode.OK:
                failures.append("BidirectionalStreamingEcho: code %s" % call.code())
            if got != [enc(m) for m in msgs]:
                failures.append("BidirectionalStreamingEcho: %d of 100 echoed, in order: %s" % (
                    len(got), got == [enc(m) for m in msgs][:len(got)]))
        except grpc.RpcError as e:
            failures.append("BidirectionalStreamingEcho: %s %s" % (e.code(), e.details()))
    except grpc.FutureTimeoutError:
        failures.append("channel not ready within 20 s")
    finally:
        ch.close()
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    print("OK: UnaryEcho (5 payloads) and BidirectionalStreamingEcho (100 messages, in order), "
          "grpc-status OK")
    return 0


def check(target, timeout=90):
    try:
        r = subprocess.run([paths.PY3, ENTRY, "--check-echo", target], capture_output=True, text=True,
                           timeout=timeout)
        return r.returncode == 0, (r.stdout + r.stderr).strip()[-1500:]
    except subprocess.TimeoutExpired:
        return False, "grpcio check did not finish within %d s" % timeout
