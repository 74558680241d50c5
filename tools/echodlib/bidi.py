"""The bidi load generator: BidirectionalStreamingEcho streams on one HTTP/2 connection at a
fixed total rate of messages, every echo checked in order, and the server's CPU per message over a
measured window (python3-h2 on asyncio, Debian's /usr/bin/python3).

It runs as a process of its own, pinned apart from the server: `bench/compare --bidi-client
HOST:PORT --streams N --rate R --duration S --warmup W --server-pid PID` prints one JSON line
(client_main); run() starts it so and reads that line (bench/compare, bench/ab).
"""

import asyncio
import json
import os
import resource
import shlex
import socket
import struct
import subprocess
import time

from . import h2load, paths, procstat

ENTRY = os.path.join(paths.ROOT, "bench", "compare")


def client_main(target, streams, rate, duration, warmup, server_pid=0, tick=0.005):
    """The generator itself: prints its JSON result; exit status 0 when every echo came back in
    order and every stream ended with grpc-status 0."""
    return asyncio.run(_bidi(target, streams, rate, duration, warmup, server_pid, tick))


async def _bidi(target, streams, rate, duration, warmup, server_pid, tick):
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions
    import h2.settings

    host, _, port = target.rpartition(":")
    res = {"ok": False, "errors": [], "streams": streams, "rate": rate}
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24,
                          h2.settings.SettingCodes.ENABLE_PUSH: 0})
    conn.increment_flow_control_window((1 << 30))
    hdrs = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", h2load.BIDI_PATH.encode()),
            (b":authority", ("%s:%s" % (host, port)).encode()),
            (b"content-type", b"application/grpc"), (b"te", b"trailers")]
    sids = []
    st = {}
    for i in range(streams):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, hdrs)
        sids.append(sid)
        st[sid] = {"i": i, "next_send": 0, "next_recv": 0, "buf": b"", "pending": [],
                   "status": None, "http": None, "ended": False}
    writer.write(conn.data_to_send())
    counters = {"sent": 0, "recv": 0, "bad": 0, "backlog_skips": 0}
    ended = asyncio.Event()
    failed = []

    def payload(i, seq):
        m = b"%02d:%011d" % (i, seq)
        return b"\x00" + struct.pack(">I", len(m) + 2) + b"\x0a" + bytes([len(m)]) + m

    def try_send(sid):
        s = st[sid]
        while s["pending"]:
            frame = s["pending"][0]
            if conn.local_flow_control_window(sid) < len(frame):
                return
            conn.send_data(sid, frame)
            s["pending"].pop(0)

    def on_data(sid, data):
        s = st[sid]
        buf = s["buf"] + data
        while len(buf) >= 5:
            ln = struct.unpack(">I", buf[1:5])[0]
            if len(buf) < 5 + ln:
                break
            msg, buf = buf[5:5 + ln], buf[5 + ln:]
            want = payload(s["i"], s["next_recv"])[5:]
            if msg != want:
                counters["bad"] += 1
                if len(failed) < 5:
                    failed.append("stream %d: echo %d was %r, expected %r" % (
                        s["i"], s["next_recv"], msg[:40], want))
            s["next_recv"] += 1
            counters["recv"] += 1
        s["buf"] = buf

    def headers_status(sid, headers):
        for k, v in headers:
            if k == b":status":
                st[sid]["http"] = v.decode()
            elif k == b"grpc-status":
                st[sid]["status"] = v.decode()

    async def read_loop():
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    if not all(s["ended"] for s in st.values()):
                        failed.append("connection closed by the server")
                    break
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.ProtocolError as e:
                    failed.append("protocol error: %s" % e)
                    break
                for ev in events:
                    if isinstance(ev, h2.events.DataReceived):
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                        on_data(ev.stream_id, ev.data)
                    elif isinstance(ev, h2.events.ResponseReceived):
                        headers_status(ev.stream_id, ev.headers)
                    elif isinstance(ev, h2.events.TrailersReceived):
                        headers_status(ev.stream_id, ev.headers)
                    elif isinstance(ev, h2.events.StreamEnded):
                        st[ev.stream_id]["ended"] = True
                    elif isinstance(ev, h2.events.StreamReset):
                        st[ev.stream_id]["ended"] = True
                        failed.append("stream %d reset (error %s)" % (st[ev.stream_id]["i"],
                                                                      ev.error_code))
                    elif isinstance(ev, h2.events.WindowUpdated):
                        for sid in ([ev.stream_id] if ev.stream_id else sids):
                            if sid in st:
                                try_send(sid)
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        failed.append("GOAWAY (error %s)" % ev.error_code)
                out = conn.data_to_send()
                if out:
                    writer.write(out)
                if all(s["ended"] for s in st.values()):
                    break
        finally:
            ended.set()

    reader_task = asyncio.create_task(read_loop())
    pid = server_pid
    t_start = time.monotonic()
    t_win0 = t_start + warmup
    t_win1 = t_win0 + duration
    win0 = win1 = None
    rr = 0
    max_outstanding = max(50, int(rate / streams * 2))   # 2 s of backlog per stream
    while not ended.is_set():
        now = time.monotonic()
        if win0 is None and now >= t_win0:
            win0 = (now, counters["recv"], procstat.CpuWindow(pid) if pid else None,
                    resource.getrusage(resource.RUSAGE_SELF))
        if now >= t_win1:
            win1 = (now, counters["recv"], win0[2] and win0[2].close(),
                    resource.getrusage(resource.RUSAGE_SELF))
            break
        due = int(rate * (now - t_start)) - counters["sent"] - counters["backlog_skips"]
        for _ in range(max(0, due)):
            sid = sids[rr % len(sids)]
            rr += 1
            s = st[sid]
            if s["next_send"] - s["next_recv"] >= max_outstanding:
                counters["backlog_skips"] += 1
                continue
            s["pending"].append(payload(s["i"], s["next_send"]))
            s["next_send"] += 1
            counters["sent"] += 1
            try_send(sid)
        out = conn.data_to_send()
        if out:
            writer.write(out)
        await asyncio.sleep(tick)
    # drain: every message sent must come back, then half-close and expect grpc-status 0
    deadline = time.monotonic() + 15
    while counters["recv"] < counters["sent"] and not ended.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if counters["recv"] < counters["sent"]:
        failed.append("%d messages not echoed" % (counters["sent"] - counters["recv"]))
    if not ended.is_set():
        for sid in sids:
            if not st[sid]["pending"]:
                conn.end_stream(sid)
        writer.write(conn.data_to_send())
        try:
            await asyncio.wait_for(ended.wait(), 15)
        except asyncio.TimeoutError:
            failed.append("streams did not end within 15 s of the half-close")
    reader_task.cancel()
    try:
        writer.close()
    except OSError:
        pass
    statuses = sorted({str(s["status"]) for s in st.values()})
    if statuses != ["0"]:
        failed.append("grpc-status of the streams: %s" % ", ".join(statuses))
    warnings = []
    if counters["backlog_skips"]:
        warnings.append("%d messages not sent: a stream fell %d messages behind (rate not "
                        "sustained)" % (counters["backlog_skips"], max_outstanding))
    res.update(counters)
    if win0 and win1:
        res["window_s"] = win1[0] - win0[0]
        res["window_msgs"] = win1[1] - win0[1]
        if pid:
            res["server_cpu_s"], res["cpu_source"] = win1[2].cpu_s, win1[2].source
            res["server_sys_fraction"] = win1[2].sys_fraction
        res["client_cpu_s"] = (win1[3].ru_utime + win1[3].ru_stime) - \
            (win0[3].ru_utime + win0[3].ru_stime)
    else:
        failed.append("measurement window not reached")
    res["errors"] = failed
    res["warnings"] = warnings
    res["ok"] = not failed
    print(json.dumps(res))
    return 0 if res["ok"] else 1


def command(target, server_pid, client_cpu, streams=20, rate=20000, duration=4, warmup=1):
    return ["taskset", "-c", str(client_cpu), paths.PY3, ENTRY, "--bidi-client", target,
            "--streams", str(streams), "--rate", str(rate), "--duration", str(duration),
            "--warmup", str(warmup), "--server-pid", str(server_pid)]


def run(target, server_pid, client_cpu, streams=20, rate=20000, duration=4, warmup=1):
    """Runs the generator against target, pinned to client_cpu, the server's CPU read from
    server_pid: client_main()'s JSON as a dict (ok False and errors when it did not finish or
    printed none), with cmd, the command with PID for the pid."""
    cmd = command(target, server_pid, client_cpu, streams, rate, duration, warmup)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + warmup + 90)
    except subprocess.TimeoutExpired:
        return {"ok": False, "errors": ["bidi client did not finish"], "cmd": shlex.join(cmd)}
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        res = {"ok": False, "errors": ["bidi client (exit %d): %s" % (
            r.returncode, (r.stdout + r.stderr).strip()[-1500:])]}
    res["cmd"] = shlex.join(cmd[:-2] + ["--server-pid", "PID"])
    return res
