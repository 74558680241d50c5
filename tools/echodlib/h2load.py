"""h2load (nghttp2-client) against echod: the command line of a gRPC call, running it, and
reading its summary and its --log-file."""

import re
import shlex
import subprocess

from . import stats

UNARY_PATH = "/grpc.examples.echo.Echo/UnaryEcho"
GRPC_HEADERS = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
# EchoRequest{message: "hello"} in its gRPC frame: what every tool sends with -d
REQUEST_FRAME = bytes.fromhex("00" "00000007" "0a05" "68656c6c6f")

_REQ_RE = re.compile(r"requests:\s*(\d+) total,\s*(\d+) started,\s*(\d+) done,\s*(\d+) succeeded,"
                     r"\s*(\d+) failed,\s*(\d+) errored(?:,\s*(\d+) timeout)?")
_FIN_RE = re.compile(r"finished in\s*([\d.]+)(us|ms|s),\s*([\d.]+) req/s")
_CODES_RE = re.compile(r"status codes:\s*(\d+) 2xx")


def command(port, body, extra=(), client_cpu=None, path=UNARY_PATH, host="127.0.0.1"):
    """h2load EXTRA -d BODY (gRPC headers) http://host:port/path, pinned with taskset when
    client_cpu is given."""
    cmd = ["h2load"] + list(extra) + ["-d", body] + GRPC_HEADERS + \
        ["http://%s:%d%s" % (host, port, path)]
    if client_cpu is not None:
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


def run(cmd, timeout, keep_output=False):
    """Runs h2load to the end: parse()'s dict plus cmd, returncode, error (None, or why the
    run is unusable: a non-zero exit, no summary, or no finish within timeout) and, with
    keep_output, its output."""
    error = None
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        error = "h2load did not finish within %.0f s" % timeout
        rc = None
    res = parse(out)
    res.update(cmd=shlex.join(cmd), returncode=rc)
    if keep_output:
        res["output"] = out
    if rc not in (0, None) or res["total"] is None or res["rps"] is None:
        error = (error or "h2load exit %s" % rc) + ": " + out[-1500:].strip()
    res["error"] = error
    return res


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
