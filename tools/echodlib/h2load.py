"""h2load (nghttp2-client) against echod: the one place that builds an h2load command line and
runs it, reads its summary and its --log-file.

    c = Client(port, body, client_cpu=0)                        # what every run against it shares
    r = c.run(60, n=20000, clients=4, streams=16)               # a closed-loop run
    r = c.run(70, clients=4, streams=1, rps=500, duration=10, log_file=path,
              server_pid=pid)                                   # a fixed rate; the server's CPU
    r["rps"], r["succeeded"], r["error"], r["server_cpu_s"], read_latency_log(path)

`command()` / `run()` / `parse()` are the same steps one at a time, `start()` runs h2load in the
background (a test that signals the server under load), `body()` writes a request body.
"""

import contextlib
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time

from . import daemon, procstat, stats

UNARY_PATH = "/grpc.examples.echo.Echo/UnaryEcho"
BIDI_PATH = "/grpc.examples.echo.Echo/BidirectionalStreamingEcho"
GRPC_HEADERS = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
# EchoRequest{message: "hello"} in its gRPC frame: what every tool sends with -d
REQUEST_FRAME = bytes.fromhex("00" "00000007" "0a05" "68656c6c6f")

_REQ_RE = re.compile(r"requests:\s*(\d+) total,\s*(\d+) started,\s*(\d+) done,\s*(\d+) succeeded,"
                     r"\s*(\d+) failed,\s*(\d+) errored(?:,\s*(\d+) timeout)?")
_FIN_RE = re.compile(r"finished in\s*([\d.]+)(us|ms|s),\s*([\d.]+) req/s")
_CODES_RE = re.compile(r"status codes:\s*(\d+) 2xx")


def _arg(v):
    return v if isinstance(v, str) else str(v) if isinstance(v, int) else "%g" % v


def options(headers=(), n=None, clients=None, streams=None, rps=None, duration=None,
            log_file=None):
    """h2load's options, in the order every command line shows them: request headers
    ("NAME: VALUE"), -n calls, -c connections, -m streams per connection, --rps per connection,
    -D seconds, --log-file. A whole number prints as one, a float as %g."""
    out = [x for h in headers for x in ("-H", h)]
    for flag, v in (("-n", n), ("-c", clients), ("-m", streams), ("--rps", rps), ("-D", duration),
                    ("--log-file", log_file)):
        if v is not None:
            out += [flag, _arg(v)]
    return out


def command(port, body, extra=(), client_cpu=None, path=UNARY_PATH, host="127.0.0.1", **opts):
    """h2load EXTRA OPTIONS -d BODY (gRPC headers) http://host:port/path, pinned with taskset
    when client_cpu is given (a CPU list; "" or None for none); opts are options()'."""
    cmd = ["h2load"] + list(extra) + options(**opts) + ["-d", body] + GRPC_HEADERS + \
        ["http://%s:%d%s" % (host, port, path)]
    if client_cpu is not None and client_cpu != "":
        cmd = ["taskset", "-c", str(client_cpu)] + cmd
    return cmd


def parse(out):
    """h2load's summary -> {total, started, done, succeeded, failed, errored, timeout,
    elapsed_s, rps, status_2xx}; keys whose line is missing are None."""
    res = dict.fromkeys(("total", "started", "done", "succeeded", "failed", "errored", "timeout",
                         "elapsed_s", "rps", "status_2xx"))
    m = _REQ_RE.search(out)
    if m:
        g = [int(x) if x is not None else 0 for x in m.groups()]
        res.update(total=g[0], started=g[1], done=g[2], succeeded=g[3], failed=g[4], errored=g[5],
                   timeout=g[6])
    m = _FIN_RE.search(out)
    if m:
        res["elapsed_s"] = float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
        res["rps"] = float(m.group(3))
    m = _CODES_RE.search(out)
    if m:
        res["status_2xx"] = int(m.group(1))
    return res


class Running:
    """h2load started in the background (start()); wait() ends it as run() does."""

    def __init__(self, cmd, server_pid=None):
        self.cmd = cmd
        self._out = tempfile.TemporaryFile(mode="w+", errors="replace")
        # the server's CPU over the same interval as the load (its window opens first)
        self.window = procstat.CpuWindow(server_pid, machine=True) if server_pid else None
        self._t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT)

    def wait(self, timeout, keep_output=False, strict=False):
        """run()'s dict, h2load killed after timeout seconds."""
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            self.proc.kill()

        killer = threading.Timer(timeout, kill)
        killer.start()
        try:
            _, status, ru = os.wait4(self.proc.pid, 0)  # its own CPU: the child's rusage
        finally:
            killer.cancel()
        wall = time.monotonic() - self._t0
        if self.window:
            self.window.close()
        rc = self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._out.seek(0)
        out = self._out.read()
        self._out.close()
        res = parse(out)
        res.update(cmd=shlex.join(self.cmd), returncode=rc, wall_s=wall,
                   client_cpu_s=ru.ru_utime + ru.ru_stime)
        if self.window:
            w = self.window
            res.update(server_cpu_s=w.cpu_s, cpu_source=w.source, server_sys_fraction=w.sys_fraction,
                       csw=w.csw(res["succeeded"]), cpu_busy=w.busy())
        if keep_output:
            res["output"] = out
        res["error"] = None
        if timed_out.is_set():
            res["error"] = "h2load did not finish within %.0f s: %s" % (timeout, out[-1500:].strip())
        elif strict and (rc != 0 or res["status_2xx"] is None or res["failed"] or res["errored"]):
            res["error"] = "h2load %s, %s failed, %s errored: %s" % (
                daemon.describe_exit(rc), res["failed"], res["errored"], out[-1200:].strip())
        elif rc != 0 or res["total"] is None or res["rps"] is None:
            res["error"] = "h2load exit %s: %s" % (rc, out[-1500:].strip())
        return res


def start(cmd, server_pid=None):
    """Starts h2load in the background: a Running, whose wait() gives run()'s dict."""
    return Running(cmd, server_pid)


def run(cmd, timeout, keep_output=False, server_pid=None, strict=False):
    """Runs h2load to the end: parse()'s dict plus cmd, returncode, wall_s, client_cpu_s
    (h2load's own CPU), error (None, or why the run is unusable: a non-zero exit, no summary, no
    finish within timeout; with strict, any failed or errored call too) and, with keep_output,
    its output. With server_pid, the server's CPU over the run (procstat.CpuWindow):
    server_cpu_s, cpu_source, server_sys_fraction, csw (per succeeded call), cpu_busy."""
    return start(cmd, server_pid).wait(timeout, keep_output, strict)


class Client:
    """h2load against one server: the port, body, path, pinning and headers all its runs share."""

    def __init__(self, port, body, client_cpu=None, path=UNARY_PATH, headers=(),
                 host="127.0.0.1"):
        self.port, self.body, self.client_cpu, self.path = port, body, client_cpu, path
        self.headers, self.host = list(headers), host

    def command(self, **opts):
        return command(self.port, self.body, client_cpu=self.client_cpu, path=self.path,
                       host=self.host, headers=self.headers + list(opts.pop("headers", ())), **opts)

    def run(self, timeout, keep_output=False, server_pid=None, strict=False, **opts):
        return run(self.command(**opts), timeout, keep_output, server_pid, strict)


def write_body(path, frame=REQUEST_FRAME, count=1):
    """A request body file for -d: count gRPC frames (a stream's messages, for a bidi call)."""
    with open(path, "wb") as f:
        f.write(frame * count)
    return path


@contextlib.contextmanager
def body(frame=REQUEST_FRAME, count=1):
    """A temporary write_body() file, removed at the end of the with-block."""
    fd, path = tempfile.mkstemp(prefix="echod-body-", suffix=".grpc")
    os.close(fd)
    try:
        yield write_body(path, frame, count)
    finally:
        os.unlink(path)


def read_latency_log(path, pct=stats.nearest_rank, keep_samples=False):
    """h2load --log-file (start µs since epoch TAB status, -1 failed, TAB µs to the response's
    end) -> {n, non_200, p50_us, p99_us, max_us} (and samples: the sorted µs of status 200,
    with keep_samples), or None
    when the file cannot be read."""
    ok, bad = [], 0
    try:
        with open(path) as f:
            for line in f:
                cols = line.split("\t")
                if len(cols) < 3:
                    continue
                try:
                    status, dur = int(cols[1]), int(cols[2])
                except ValueError:
                    continue
                if status == 200:
                    ok.append(dur)
                else:
                    bad += 1
    except OSError:
        return None
    ok.sort()
    return {"n": len(ok), "non_200": bad, "p50_us": pct(ok, 50), "p99_us": pct(ok, 99),
            "max_us": ok[-1] if ok else None, **({"samples": ok} if keep_samples else {})}
