"""Idle HTTP/2 connections, raw: what a server holds per connection that does nothing
(bench/compare's RSS per idle connection). Standard library only: a preface, an empty SETTINGS,
the server's SETTINGS and PINGs acknowledged, nothing else.

    socks, err = idle_connections(port, 200)
    ... RSS now ...
    close_all(socks)
"""

import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def idle_connections(port, n, settle=1.0):
    """Opens n HTTP/2 connections (preface + empty SETTINGS; the server's SETTINGS and PINGs
    are acknowledged) and leaves them idle. Returns (sockets, error)."""
    socks, err = [], None
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(PREFACE + frame(4, 0, 0))
            socks.append(s)
        deadline = time.monotonic() + 10
        pending = {s: b"" for s in socks}
        acked = set()
        while len(acked) < len(socks) and time.monotonic() < deadline:
            for s in socks:
                if s in acked:
                    continue
                s.settimeout(0.01)
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    raise OSError("server closed an idle connection during set-up")
                buf = pending[s] + data
                while len(buf) >= 9:
                    ln = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + ln:
                        break
                    ftype, flags, payload = buf[3], buf[4], buf[9:9 + ln]
                    buf = buf[9 + ln:]
                    if ftype == 4 and not flags & 1:
                        s.sendall(frame(4, 1, 0))
                        acked.add(s)
                    elif ftype == 6 and not flags & 1:
                        s.sendall(frame(6, 1, 0, payload))
                    elif ftype == 7:
                        raise OSError("server sent GOAWAY on an idle connection")
                pending[s] = buf
        if len(acked) < len(socks):
            err = "only %d of %d connections got the server's SETTINGS" % (len(acked), len(socks))
        time.sleep(settle)
    except OSError as e:
        err = "%s after %d connections" % (e, len(socks))
    return socks, err


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass

