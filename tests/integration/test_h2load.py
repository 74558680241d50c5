"""`h2load` (nghttp2-client) sends 100k unary calls over 4 connections: zero failures, then
/metrics shows exactly one OK call and six steps per request.

ECHOD_SANITIZER set (sanitizer builds): 20k calls instead. ECHOD_H2LOAD_N overrides.
Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_h2load.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import SANITIZER, SERVICE, SLOW, STEPS, Daemon, main  # noqa: E402
import echodlib.h2load as h2load_cmd  # noqa: E402  (echod_harness put tools/ on sys.path)

N = int(os.environ.get("ECHOD_H2LOAD_N") or (20000 if SANITIZER else 100000))
# gRPC frame: not compressed, length 7, EchoRequest{message: "hello"}
BODY = bytes.fromhex("00" "00000007" "0a05" "68656c6c6f")


def h2load(port, n, clients=4, streams=16, body=BODY, path="/grpc.examples.echo.Echo/UnaryEcho",
           timeout=600):
    """Runs `h2load` against 127.0.0.1:port; returns summary()'s (its summary, full output)."""
    with h2load_cmd.body(body) as f:
        return summary(h2load_cmd.run(h2load_cmd.command(port, f, n=n, clients=clients,
                                                         streams=streams, path=path),
                                      timeout, keep_output=True))


def summary(res):
    """(echodlib.h2load's dict of a run kept with its output, the output); AssertionError when
    `h2load` printed no summary."""
    if res["total"] is None:
        raise AssertionError("h2load: no requests line (exit %s):\n%s" % (res["returncode"],
                                                                                res["output"]))
    return res, res["output"]


@unittest.skipUnless(shutil.which("h2load"), "nghttp2-client (h2load) not installed")
class H2Load(unittest.TestCase):
    def test_100k_unary_calls(self):
        with Daemon() as d:
            res, out = h2load(d.grpc_port, N, timeout=600 * SLOW)
            sys.stdout.write(out)
            self.assertIn("%d succeeded, 0 failed, 0 errored" % N, out)
            m = d.wait_metrics(lambda m: m.metric("echod_call_steps_total", step="closed") >= N
                               and m.metric("echod_calls_in_flight") == 0,
                               what="%d closed steps" % N)
            lbl = dict(grpc_service=SERVICE, grpc_method="UnaryEcho", grpc_type="unary")
            self.assertEqual(m.metric("grpc_server_handled_total", grpc_code="OK", **lbl), N)
            self.assertEqual(m.metric("grpc_server_handled_total"), N)
            self.assertEqual(m.metric("grpc_server_started_total", **lbl), N)
            self.assertEqual(m.metric("grpc_server_msg_received_total", **lbl), N)
            self.assertEqual(m.metric("grpc_server_msg_sent_total", **lbl), N)
            for step in STEPS:
                self.assertEqual(m.metric("echod_call_steps_total", step=step), N, step)
            self.assertEqual(m.metric_sum("echod_call_steps_total"), 6 * N)
            self.assertEqual(m.metric_sum("echod_executor_dispatches_total"), 0)
            self.assertEqual(m.metric_sum("echod_loop_tasks_total"), 0)
            cpu = m.metric("process_cpu_seconds_total")
            print("echod CPU: %.3f s for %d calls (%.2f us/call, includes start-up)"
                  % (cpu, N, cpu / N * 1e6))

    def test_grpc_status_is_ok(self):
        """h2load only checks :status; check grpc-status with one request's trailers via nghttp."""
        if not shutil.which("nghttp"):
            self.skipTest("nghttp not installed")
        with Daemon() as d, tempfile.NamedTemporaryFile(delete=False) as f:
            f.write(BODY)
            f.flush()
            r = subprocess.run(["nghttp", "-v", "-d", f.name, "-H", "content-type: application/grpc",
                                "-H", "te: trailers",
                                "http://127.0.0.1:%d/grpc.examples.echo.Echo/UnaryEcho" % d.grpc_port],
                               capture_output=True, text=True, timeout=60 * SLOW)
            os.unlink(f.name)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertRegex(r.stdout, r"grpc-status: 0")
            self.assertRegex(r.stdout, r":status: 200")


if __name__ == "__main__":
    main()
