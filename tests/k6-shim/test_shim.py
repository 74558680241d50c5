"""Runs one of echod's k6 scripts (deploy/k6) for a few iterations through the Node k6 shim
against a live echod, or the shim's negative tests. One meson test per argument:

    ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/k6-shim/test_shim.py unary-fixed-rate
    ... unary-ramp | bidi-ramp | rest-control | negative

Exit 77 (meson: skipped) when node or tests/k6-shim/node_modules is missing (run `npm ci` in
tests/k6-shim), and for rest-control when the daemon does not serve `listen.rest` yet.
Each script runs with server reflection when the daemon offers it, and always once more with
REFLECT=0 (the shipped proto/echo.proto).
"""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import echod_harness as h  # noqa: E402

ROOT = h.ROOT
SHIM = os.path.join(ROOT, "tests", "k6-shim", "run.js")
K6_DIR = os.path.join(ROOT, "deploy", "k6")
SKIP = 77
CSV_HEADER = ("metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,"
              "method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,"
              "metadata").split(",")
ITERATIONS = 3


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(SKIP)


def node_or_skip():
    node = shutil.which("node")
    if not node:
        skip("node is not installed (Debian package nodejs)")
    if not os.path.isdir(os.path.join(ROOT, "tests", "k6-shim", "node_modules", "@grpc", "grpc-js")):
        skip("tests/k6-shim/node_modules is missing: run `npm ci` in tests/k6-shim")
    return node


def run_shim(node, script, target, args=(), env=(), timeout=120):
    cmd = [node, SHIM, script, "--target", target]
    for k, v in env:
        cmd += ["--env", "%s=%s" % (k, v)]
    cmd += list(args)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout * h.SLOW)
    return p, " ".join(cmd)


def show(p, cmd):
    return "command: %s\nexit %s\n--- stdout\n%s\n--- stderr\n%s" % (cmd, p.returncode, p.stdout[-6000:],
                                                                    p.stderr[-6000:])


def read_csv(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        rows = [dict(zip(header, row)) for row in r]
    for row in rows:
        extra = row.get("extra_tags") or ""
        row["tags"] = dict(kv.split("=", 1) for kv in extra.split("&") if kv)
    return header, rows


def metric(summary, name, stat):
    m = summary["summary"]["metrics"].get(name)
    return None if m is None else m["values"].get(stat)


def reflection_supported(d):
    """Does the daemon answer grpc.reflection.v1alpha list_services?"""
    import grpc
    with d.channel() as ch:
        call = ch.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
        try:
            list(call(iter([b"\x3a\x00"]), timeout=5 * h.SLOW))  # list_services: ""
            return True
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                return False
            raise


def timing_expected():
    """True when the daemon knows telemetry.timing_trailer (then it sends echod-timing)."""
    p = subprocess.run([h.ECHOD_BIN, "--check-config", os.path.join(ROOT, "config", "echod.yaml"),
                        "--set", "telemetry.timing_trailer=true"], capture_output=True, text=True)
    return p.returncode == 0


def modes(d):
    out = []
    if reflection_supported(d):
        out.append("1")
    else:
        print("note: the daemon has no server reflection yet; REFLECT=0 only")
    out.append("0")
    return out


class Failure(AssertionError):
    pass


def expect(cond, msg, p=None, cmd=None):
    if not cond:
        raise Failure(msg + ("\n" + show(p, cmd) if p is not None else ""))


def check_common(p, cmd, summary_path, csv_path, script, expected_ok, timing):
    expect(p.returncode == 0, "%s: the shim failed" % script, p, cmd)
    with open(summary_path) as f:
        s = json.load(f)
    expect(s.get("echod_k6") == 1 and s.get("script") == script and s.get("arm") == "shimtest",
           "%s: handleSummary JSON lacks its header: %r" % (script, {k: s.get(k) for k in
                                                                     ("echod_k6", "script", "arm")}))
    ok = metric(s, "echo_ok", "count")
    expect(ok == expected_ok, "%s: echo_ok %r, want %d" % (script, ok, expected_ok), p, cmd)
    expect(not metric(s, "echo_failed", "count"), "%s: echo_failed %r" % (
        script, metric(s, "echo_failed", "count")), p, cmd)
    header, rows = read_csv(csv_path)
    expect(header == CSV_HEADER, "%s: CSV header %r is not k6's %r" % (script, header, CSV_HEADER))
    load = [r for r in rows if r["metric_name"] == s["latency_metric"] and r["tags"].get("stage")]
    expect(load, "%s: no %s rows tagged with a stage in the CSV" % (script, s["latency_metric"]))
    for r in load:
        expect(r["tags"].get("arm") == "shimtest" and r["scenario"],
               "%s: a sample lacks the arm tag or scenario: %r" % (script, r))
    if timing:
        total = metric(s, "server_total_us", "count")
        expect(total and total >= 1 and not metric(s, "server_timing_missing", "count"),
               "%s: echod-timing was not recorded (server_total_us count %r, missing %r)" % (
                   script, total, metric(s, "server_timing_missing", "count")), p, cmd)
    return s, rows


def test_unary(node, script):
    timing = timing_expected()
    with h.Daemon() as d:
        for reflect in modes(d):
            tmp = tempfile.mkdtemp(prefix="k6shim-")
            try:
                summary = os.path.join(tmp, "summary.json")
                out = os.path.join(tmp, "out.csv")
                env = [("ARM", "shimtest"), ("REFLECT", reflect), ("SUMMARY_FILE", summary),
                       ("STEP_DURATION", "2s"), ("DURATION", "2s")]
                p, cmd = run_shim(node, os.path.join(K6_DIR, script + ".js"), d.grpc_target,
                                  ["--iterations", str(ITERATIONS), "--out", "csv=" + out], env)
                s, rows = check_common(p, cmd, summary, out, script, ITERATIONS, timing)
                grpc_rows = [r for r in rows if r["metric_name"] == "grpc_req_duration"]
                expect(len(grpc_rows) == ITERATIONS and all(
                    r["status"] == "0" and r["name"] == "/grpc.examples.echo.Echo/UnaryEcho"
                    and r["method"] == "UnaryEcho" and r["service"] == "grpc.examples.echo.Echo"
                    for r in grpc_rows), "%s: grpc_req_duration rows %r" % (script, grpc_rows))
                print("%s REFLECT=%s: ok (%d calls)" % (script, reflect, ITERATIONS))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        if script == "unary-ramp":
            # scheduled as k6 would: 2 steps of 2 s at 10 and 20 calls/s -> 60 calls, both stages
            tmp = tempfile.mkdtemp(prefix="k6shim-")
            try:
                summary = os.path.join(tmp, "summary.json")
                out = os.path.join(tmp, "out.csv")
                env = [("ARM", "shimtest"), ("REFLECT", "0"), ("SUMMARY_FILE", summary),
                       ("START", "10"), ("END", "20"), ("STEP", "10"), ("STEP_DURATION", "2s")]
                p, cmd = run_shim(node, os.path.join(K6_DIR, script + ".js"), d.grpc_target,
                                  ["--schedule", "--warmup-iterations", "1", "--max-lag-ms", "3000",
                                   "--out", "csv=" + out], env)
                expect(p.returncode == 0, "%s --schedule: the shim failed" % script, p, cmd)
                with open(summary) as f:
                    s = json.load(f)
                per = {st: metric(s, "echo_ok{stage:%s}" % st, "count") for st in ("s01", "s02")}
                dropped = metric(s, "dropped_iterations", "count") or 0  # a very loaded machine
                expect(per["s01"] and per["s02"] and per["s01"] + per["s02"] + dropped == 60,
                       "%s --schedule: calls per stage %r (+ %d dropped), want both stages, 60 in "
                       "all" % (script, per, dropped), p, cmd)
                print("%s --schedule: ok (calls per stage %r, %d dropped)" % (script, per, dropped))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


def test_bidi(node):
    timing = timing_expected()
    with h.Daemon() as d:
        for reflect in modes(d):
            tmp = tempfile.mkdtemp(prefix="k6shim-")
            try:
                summary = os.path.join(tmp, "summary.json")
                out = os.path.join(tmp, "out.csv")
                # 2 streams, 100 then 200 msg/s aggregate for 1 s each: 150 messages per stream
                env = [("ARM", "shimtest"), ("REFLECT", reflect), ("SUMMARY_FILE", summary),
                       ("STREAMS", "2"), ("START", "100"), ("END", "200"), ("STEP", "100"),
                       ("STEP_DURATION", "1s"), ("PROBE_RATE", "5")]
                p, cmd = run_shim(node, os.path.join(K6_DIR, "bidi-ramp.js"), d.grpc_target,
                                  ["--vus", "2", "--iterations", "1", "--out", "csv=" + out], env)
                expect(p.returncode == 0, "bidi-ramp: the shim failed", p, cmd)
                with open(summary) as f:
                    s = json.load(f)
                sent = metric(s, "echo_sent", "count") or 0
                dropped = metric(s, "echo_dropped", "count") or 0
                ok = metric(s, "echo_ok", "count") or 0
                expect(sent + dropped == 300 and ok == sent and sent > 0,
                       "bidi-ramp: sent %r + dropped %r should be 300 and all sent echoed (ok %r)" % (
                           sent, dropped, ok), p, cmd)
                for st in ("s01", "s02"):
                    expect(metric(s, "bidi_msg_latency_ms{stage:%s}" % st, "count"),
                           "bidi-ramp: no latency samples in stage %s" % st, p, cmd)
                expect(metric(s, "probe_ok", "count") == 2, "bidi-ramp: probe_ok %r, want 2 (1 iteration x 2 VUs)"
                       % metric(s, "probe_ok", "count"), p, cmd)
                if timing:
                    expect(metric(s, "server_total_us", "count") == 2,
                           "bidi-ramp: the probe's echod-timing was not recorded", p, cmd)
                header, _ = read_csv(out)
                expect(header == CSV_HEADER, "bidi-ramp: CSV header %r" % header)
                print("bidi-ramp REFLECT=%s: ok (%d sent, %d dropped)" % (reflect, sent, dropped))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def test_rest(node):
    rest_port = h.free_port()
    cfg = os.path.join(ROOT, "config", "arms", "rest.yaml")
    if not os.path.exists(cfg):
        skip("config/arms/rest.yaml does not exist yet")
    probe = subprocess.run([h.ECHOD_BIN, "--check-config", cfg, "--set",
                            "listen.rest=127.0.0.1:%d" % rest_port], capture_output=True, text=True)
    if probe.returncode != 0:
        skip("the daemon does not know listen.rest yet: " + probe.stderr.strip())
    d = h.Daemon(config=cfg, sets=["listen.rest=127.0.0.1:%d" % rest_port]).start()
    try:
        deadline = time.monotonic() + 5 * h.SLOW
        while not port_open(rest_port):
            if time.monotonic() > deadline:
                d.stop()
                skip("echod accepts listen.rest but does not listen on it yet (REST listener "
                     "not built)")
            time.sleep(0.05)
        tmp = tempfile.mkdtemp(prefix="k6shim-")
        try:
            summary = os.path.join(tmp, "summary.json")
            out = os.path.join(tmp, "out.csv")
            env = [("ARM", "shimtest"), ("SUMMARY_FILE", summary), ("STEP_DURATION", "2s")]
            p, cmd = run_shim(node, os.path.join(K6_DIR, "rest-control.js"),
                              "127.0.0.1:%d" % rest_port,
                              ["--iterations", str(ITERATIONS), "--out", "csv=" + out], env)
            s, rows = check_common(p, cmd, summary, out, "rest-control", ITERATIONS, False)
            http_rows = [r for r in rows if r["metric_name"] == "http_req_duration"]
            expect(len(http_rows) == ITERATIONS and all(
                r["status"] == "200" and r["method"] == "POST" and r["expected_response"] == "true"
                for r in http_rows), "rest-control: http_req_duration rows %r" % http_rows)
            print("rest-control: ok (%d requests)" % ITERATIONS)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        d.stop()
    except BaseException:
        if d.alive():
            h.report_daemon(d, "stderr (test failed)")
            d.stop(check=False, timeout=10.0 * h.SLOW)
        raise
    finally:
        d.cleanup()


BAD_SCRIPTS = {
    # a method echod does not have
    "missing-method": ("grpc.examples.echo.Echo/NoSuchEcho", "r.message.message === 'x'",
                       "not found in file descriptors"),
    # the right method, but the response read wrong (the field is `message`)
    "misread": ("grpc.examples.echo.Echo/UnaryEcho", "r.message.msg === 'x'", "check failed"),
    # an invoke parameter k6 rejects
    "bad-param": ("grpc.examples.echo.Echo/UnaryEcho", "r.message.message === 'x'",
                  'unknown param: "deadline"'),
}

BAD_TEMPLATE = """
import grpc from 'k6/net/grpc';
import { check } from 'k6';

const client = new grpc.Client();
if (__ENV.REFLECT === '0') client.load([__ENV.PROTO_DIR], 'echo.proto');

export default function () {
  if (__ITER === 0) client.connect(__ENV.TARGET, { plaintext: true, reflect: __ENV.REFLECT !== '0' });
  const r = client.invoke('%(method)s', { message: 'x' }%(params)s);
  check(r, { 'answered right': (r) => r.status === grpc.StatusOK && %(cond)s });
}
"""


def test_negative(node):
    tmp = tempfile.mkdtemp(prefix="k6shim-bad-")
    try:
        with h.Daemon() as d:
            for reflect in modes(d):
                for name, (method, cond, needle) in BAD_SCRIPTS.items():
                    path = os.path.join(tmp, name + ".js")
                    params = ", { deadline: '1s' }" if name == "bad-param" else ""
                    with open(path, "w") as f:
                        f.write(BAD_TEMPLATE % {"method": method, "cond": cond, "params": params})
                    p, cmd = run_shim(node, path, d.grpc_target, ["--iterations", "2"],
                                      [("REFLECT", reflect),
                                       ("PROTO_DIR", os.path.join(ROOT, "proto"))])
                    expect(p.returncode != 0, "%s (REFLECT=%s): the shim exited 0" % (name, reflect),
                           p, cmd)
                    expect(needle in p.stderr, "%s (REFLECT=%s): stderr does not say %r" % (
                        name, reflect, needle), p, cmd)
                    print("%s REFLECT=%s: fails as it should (exit %d)" % (name, reflect, p.returncode))
            # and a good script of the same shape passes, so the failures above are the scripts'
            path = os.path.join(tmp, "good.js")
            with open(path, "w") as f:
                f.write(BAD_TEMPLATE % {"method": "grpc.examples.echo.Echo/UnaryEcho",
                                        "cond": "r.message.message === 'x'", "params": ""})
            p, cmd = run_shim(node, path, d.grpc_target, ["--iterations", "2"],
                              [("REFLECT", "0"), ("PROTO_DIR", os.path.join(ROOT, "proto"))])
            expect(p.returncode == 0, "good.js: the shim failed", p, cmd)
            print("good.js: passes")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_shim.py unary-fixed-rate|unary-ramp|bidi-ramp|rest-control|negative")
    what = sys.argv[1]
    node = node_or_skip()
    try:
        if what in ("unary-fixed-rate", "unary-ramp"):
            test_unary(node, what)
        elif what == "bidi-ramp":
            test_bidi(node)
        elif what == "rest-control":
            test_rest(node)
        elif what == "negative":
            test_negative(node)
        else:
            sys.exit("unknown test %s" % what)
    except Failure as e:
        print("FAIL: %s" % e)
        print("0 passed, 1 failed")
        sys.exit(1)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
