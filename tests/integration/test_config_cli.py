"""The command line, config validation as seen from outside, and SIGTERM/SIGINT shutdown.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_config_cli.py
DefaultFile checks config/echod.yaml, or the file ECHOD_DEFAULT_YAML names.
"""

import glob
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yaml  # noqa: E402

from echod_harness import (BIDI, ECHOD_BIN, ROOT, SLOW, Daemon, echod_check_config,  # noqa: E402
                           main)

DEFAULT_CONFIG = os.path.join(ROOT, "config", "echod.yaml")
# The file DefaultFile checks; another copy (e.g. `git show HEAD:config/echod.yaml`) may be named here.
DEFAULT_FILE = os.environ.get("ECHOD_DEFAULT_YAML", DEFAULT_CONFIG)
DEFAULT_FILE_NAME = (os.path.relpath(DEFAULT_FILE, ROOT)
                     if os.path.abspath(DEFAULT_FILE).startswith(ROOT + os.sep) else DEFAULT_FILE)


def run(args, timeout=15):
    return subprocess.run([ECHOD_BIN] + list(args), capture_output=True, text=True,
                          timeout=timeout * SLOW, cwd=ROOT, stdin=subprocess.DEVNULL)


class ConfigErrors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="echod-cfg-")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, text, name="bad.yaml"):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def assert_config_error(self, path, line, cols, key, also=()):
        """Both --check-config and a normal start reject the file: exit 2, one clear line."""
        for args in (["--check-config", path], ["--config", path,
                                                "--set", "listen.grpc=127.0.0.1:1",
                                                "--set", "listen.admin=127.0.0.1:2"]):
            r = run(args)
            self.assertEqual(r.returncode, 2, (args, r.returncode, r.stderr))
            m = re.search(r"%s:(\d+):(\d+): ([^:]+): (.+)" % re.escape(path), r.stderr)
            self.assertIsNotNone(m, "no FILE:LINE:COL: key.path: message in stderr: %r" % r.stderr)
            self.assertEqual(int(m.group(1)), line, r.stderr)
            self.assertIn(int(m.group(2)), cols, r.stderr)
            self.assertEqual(m.group(3), key, r.stderr)
            for text in also:
                self.assertIn(text, m.group(4), r.stderr)
            self.assertNotIn("Sanitizer", r.stderr)
        return r.stderr

    def test_wrong_type(self):
        p = self.write("arm: bad\ntransport:\n  max_concurrent_streams: many\n")
        self.assert_config_error(p, 3, (3, 27), "transport.max_concurrent_streams",
                                 also=('"many"',))

    def test_out_of_range(self):
        p = self.write("executor:\n  mode: fixed\n  threads: 5000\n")
        self.assert_config_error(p, 3, (3, 12), "executor.threads", also=('"5000"',))

    def test_unknown_key(self):
        p = self.write("transport:\n  flush: loop_tail\n  bogus_key: 1\n")
        self.assert_config_error(p, 3, (3, 14), "transport.bogus_key")

    def test_unknown_top_level_key(self):
        p = self.write("arm: x\nnot_a_section:\n  a: 1\n")
        self.assert_config_error(p, 2, (1, 15), "not_a_section")

    def test_bad_enum(self):
        p = self.write("transport:\n  flush: sometimes\n")
        self.assert_config_error(p, 2, (3, 10), "transport.flush", also=('"sometimes"',))

    def test_section_not_a_mapping(self):
        p = self.write("arm: x\nlisten: 5\n")
        self.assert_config_error(p, 2, (1, 9), "listen")

    def test_bad_duration(self):
        p = self.write("shutdown:\n  drain_timeout: soon\n")
        self.assert_config_error(p, 2, (3, 18), "shutdown.drain_timeout")

    def test_bad_listen_address(self):
        p = self.write("listen:\n  grpc: \"0.0.0.0:99999\"\n")
        self.assert_config_error(p, 2, (3, 9), "listen.grpc")

    def test_yaml_syntax_error(self):
        p = self.write("arm: x\nlisten: [unclosed\n")
        for args in (["--check-config", p], ["--config", p]):
            r = run(args)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertRegex(r.stderr, re.escape(p) + r":\d+:\d+: ")

    def test_merge_with_per_method_is_an_error(self):
        p = self.write("dispatch:\n  merge_lookup_and_start: true\n  per_method:\n"
                       "    /grpc.examples.echo.Echo/BidirectionalStreamingEcho: { mode: fixed, threads: 2 }\n")
        r = run(["--check-config", p])
        self.assertEqual(r.returncode, 2, r.stderr)
        # named where the later of the two keys is written (per_method entries are read last)
        self.assertIn("%s:3:3: dispatch.merge_lookup_and_start and dispatch.per_method" % p, r.stderr)

    def test_per_method_names_a_served_method(self):
        # a typo in a method path would configure nothing: the check and start-up both refuse it
        for key in ("dispatch.per_method./grpc.examples.echo.Echo/UnaryEchoo.mode=fixed",
                    "work.per_method./grpc.examples.echo.Echo/Unary.cpu_us=5"):
            for args in (["--check-config", DEFAULT_CONFIG], ["--config", DEFAULT_CONFIG]):
                r = run(args + ["--set", key])
                self.assertEqual(r.returncode, 2, r.stderr)
                # the override wrote it, so the error points there, not at the file
                self.assertIn("--set: %s.per_method: no such method" % key.split(".")[0], r.stderr)
        r = run(["--check-config", DEFAULT_CONFIG, "--set",
                 "work.per_method./grpc.examples.echo.Echo/UnaryEcho.cpu_us=5"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_whole_config_errors_name_the_line(self):
        """Errors found only once the whole config is read (a method nobody serves, a value above
        a work cap) name FILE:LINE:COL and the key, as a wrong type does."""
        p = self.write("work:\n  per_method:\n    /grpc.examples.echo.Echo/Unary:\n      cpu_us: 5\n")
        self.assert_config_error(p, 3, (5,), "work.per_method",
                                 also=('no such method "/grpc.examples.echo.Echo/Unary"',))
        p = self.write("dispatch:\n  per_method:\n    /grpc.examples.echo.Echo/Bidi: {mode: fixed}\n")
        self.assert_config_error(p, 3, (5,), "dispatch.per_method", also=("no such method",))
        p = self.write("work:\n  max_cpu: 2ms\n  per_method:\n    /grpc.examples.echo.Echo/UnaryEcho:\n"
                       "      cpu_us: 2500\n")
        self.assert_config_error(p, 5, (15,), "work.per_method./grpc.examples.echo.Echo/UnaryEcho.cpu_us",
                                 also=("more than work.max_cpu allows",))
        p = self.write("listen:\n  rest: \"127.0.0.1:8080\"\n")
        r = run(["--check-config", p])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("%s:2:9: listen.rest and listen.admin: both bind port 8080" % p, r.stderr)

    def test_only_one_of_cert_and_key(self):
        r = run(["--check-config", DEFAULT_CONFIG, "--set", "tls.cert=/tmp/x.pem"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("tls", r.stderr)

    def test_missing_file(self):
        missing = os.path.join(self.tmp.name, "does-not-exist.yaml")
        for args in (["--check-config", missing], ["--config", missing]):
            r = run(args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(missing, r.stderr)
            self.assertLessEqual(len(r.stderr.strip().splitlines()), 2, "a clear error: %r" % r.stderr)

    def test_unreadable_file(self):
        if os.geteuid() == 0:
            # root reads anything: use a directory instead, which is unreadable as a file.
            path = self.tmp.name
        else:
            path = self.write("arm: x\n")
            os.chmod(path, 0)
        r = run(["--check-config", path])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(path, r.stderr)

    def test_set_bad_value(self):
        r = run(["--check-config", DEFAULT_CONFIG, "--set", "transport.max_concurrent_streams=abc"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("transport.max_concurrent_streams", r.stderr)
        self.assertIn('"abc"', r.stderr)
        r = run(["--config", DEFAULT_CONFIG, "--set", "executor.mode=sideways"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("executor.mode", r.stderr)

    def test_set_unknown_key(self):
        r = run(["--check-config", DEFAULT_CONFIG, "--set", "no.such.key=1"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no", r.stderr)

    def test_set_without_equals(self):
        r = run(["--check-config", DEFAULT_CONFIG, "--set", "transport.flush"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertTrue(r.stderr.strip())

    def test_unknown_option(self):
        r = run(["--no-such-option"])
        self.assertNotEqual(r.returncode, 0)
        self.assertGreater(r.returncode, 0, "killed by a signal")
        self.assertTrue(r.stderr.strip())


class CheckConfig(unittest.TestCase):
    def test_default_config(self):
        r = echod_check_config(DEFAULT_CONFIG)
        self.assertEqual(r.returncode, 0, r.stderr)
        cfg = yaml.safe_load(r.stdout)
        self.assertIsInstance(cfg, dict, r.stdout)
        for key in ("arm", "listen", "tls", "transport", "executor", "dispatch", "echo",
                    "shutdown", "log"):
            self.assertIn(key, cfg, r.stdout)
        self.assertEqual(cfg["transport"]["max_receive_message_bytes"], 4194304)
        self.assertEqual(cfg["transport"]["max_concurrent_streams"], 1000)
        self.assertEqual(cfg["executor"]["mode"], "direct")
        self.assertEqual(cfg["transport"]["flush"], "loop_tail")
        self.assertEqual(cfg["echo"]["server_streaming_count"], 10)
        self.assertIs(cfg["dispatch"]["merge_lookup_and_start"], False)

    def test_output_round_trips(self):
        r = echod_check_config(DEFAULT_CONFIG, sets=["executor.mode=fixed", "executor.threads=3",
                                                     "shutdown.drain_timeout=1500ms"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(r.stdout)
        try:
            r2 = echod_check_config(f.name)
            self.assertEqual(r2.returncode, 0, r2.stderr)
            self.assertEqual(r2.stdout, r.stdout)
        finally:
            os.unlink(f.name)
        cfg = yaml.safe_load(r.stdout)
        self.assertEqual(cfg["executor"]["mode"], "fixed")
        self.assertEqual(cfg["executor"]["threads"], 3)

    def test_defaults_equal_default_file(self):
        """A file that sets nothing but the arm name gives the same effective config."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("arm: default\n")
        try:
            a = echod_check_config(DEFAULT_CONFIG)
            b = echod_check_config(f.name)
            self.assertEqual(a.returncode, 0, a.stderr)
            self.assertEqual(b.returncode, 0, b.stderr)
            self.assertEqual(yaml.safe_load(a.stdout), yaml.safe_load(b.stdout))
        finally:
            os.unlink(f.name)

    def test_set_overrides(self):
        r = echod_check_config(DEFAULT_CONFIG, sets=["listen.grpc=127.0.0.1:50061",
                                                     "transport.flush=immediate",
                                                     "dispatch.coalesce_end_stream=true",
                                                     "arm=side-by-side"])
        self.assertEqual(r.returncode, 0, r.stderr)
        cfg = yaml.safe_load(r.stdout)
        self.assertEqual(cfg["listen"]["grpc"], "127.0.0.1:50061")
        self.assertEqual(cfg["transport"]["flush"], "immediate")
        self.assertIs(cfg["dispatch"]["coalesce_end_stream"], True)
        self.assertEqual(cfg["arm"], "side-by-side")

    def test_every_arm_passes(self):
        arms = sorted(glob.glob(os.path.join(ROOT, "config", "arms", "*.yaml")))
        self.assertTrue(arms, "no config/arms/*.yaml")
        for path in arms:
            with self.subTest(arm=os.path.basename(path)):
                r = echod_check_config(path)
                self.assertEqual(r.returncode, 0, "%s: %s" % (path, r.stderr))
                cfg = yaml.safe_load(r.stdout)
                self.assertEqual(cfg["arm"], os.path.basename(path)[:-5],
                                 "arm name should match the file name")

    def test_files_in_order(self):
        """--config more than once: each file over the ones before it, --set over them all, and
        an error in a later file named by that file's line."""
        with tempfile.TemporaryDirectory(prefix="echod-cfg-") as tmp:
            later = os.path.join(tmp, "model.yaml")
            with open(later, "w") as f:
                f.write("work:\n  model: {enabled: true, step_cpu_us: 20}\ntransport: {flush: read_complete}\n")
            arm = os.path.join(ROOT, "config", "arms", "cached.yaml")
            r = run(["--config", arm, "--check-config", later, "--set", "work.model.step_cpu_us=30"])
            self.assertEqual(r.returncode, 0, r.stderr)
            cfg = yaml.safe_load(r.stdout)
            self.assertEqual((cfg["arm"], cfg["executor"]["mode"]), ("cached", "cached"))
            self.assertEqual(cfg["transport"]["flush"], "read_complete")
            self.assertEqual((cfg["work"]["model"]["enabled"], cfg["work"]["model"]["step_cpu_us"]), (True, 30))
            with open(later, "w") as f:
                f.write("work:\n  model: {enabled: maybe}\n")
            r = run(["--config", arm, "--check-config", later])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("%s:2:20: work.model.enabled: expected a boolean" % later, r.stderr)

    def test_version_and_help(self):
        r = run(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("0.", r.stdout + r.stderr)
        r = run(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout + r.stderr
        for opt in ("--config", "--set", "--check-config", "--version"):
            self.assertIn(opt, text)


def leaves(doc, path=()):
    """{key path tuple: value} of every leaf of a loaded config; an empty mapping ({}, as an
    unset per_method) is a leaf."""
    if isinstance(doc, dict) and doc:
        out = {}
        for k, v in doc.items():
            out.update(leaves(v, path + (k,)))
        return out
    return {path: doc}


class DefaultFile(unittest.TestCase):
    """config/echod.yaml is the built-in defaults, commented: every key of --check-config's dump of
    the defaults (an empty file), each with the dumped value, and no other key (issue 37)."""

    @classmethod
    def setUpClass(cls):
        with open(DEFAULT_FILE) as f:
            cls.text = f.read()
        cls.doc = yaml.safe_load(cls.text)
        r = echod_check_config("/dev/null")
        assert r.returncode == 0, r.stderr
        cls.dump = yaml.safe_load(r.stdout)

    def test_every_key_with_its_default(self):
        name = DEFAULT_FILE_NAME
        ours, built_in = leaves(self.doc), leaves(self.dump)
        self.assertTrue(built_in and ours)
        key = ".".join
        missing = [key(p) for p in built_in if p not in ours]
        self.assertEqual(missing, [], "keys of the --check-config dump missing from %s" % name)
        extra = [key(p) for p in ours if p not in built_in]
        self.assertEqual(extra, [], "keys in %s that the --check-config dump does not have" % name)
        for p, default in built_in.items():
            with self.subTest(key=key(p)):
                value = ours[p]
                # 0 and 0.0, or 1 and true, would load alike in echod but are not what the dump says
                self.assertTrue(type(value) is type(default) and value == default,
                                "%s: %s has %r, the built-in default is %r" % (key(p), name, value, default))

    def test_comments_list_every_executor_mode(self):
        """Each mode echod accepts for executor.mode (from its own error message, so a new mode is
        caught the day it is added) opens a line of the comment above executor.mode."""
        r = echod_check_config("/dev/null", sets=["executor.mode=nope"])
        self.assertEqual(r.returncode, 2, r.stderr)
        m = re.search(r"executor\.mode: expected one of (.+), got", r.stderr)
        self.assertIsNotNone(m, "no list of modes in %r" % r.stderr)
        modes = m.group(1).split(", ")
        self.assertIn("direct", modes)
        root = yaml.compose(self.text)
        executor = next(v for k, v in root.value if k.value == "executor")
        mode = next(k for k, _ in executor.value if k.value == "mode")
        lines = self.text.splitlines()
        listed = set()
        i = mode.start_mark.line - 1
        while i >= 0 and lines[i].lstrip().startswith("#"):
            words = lines[i].lstrip().lstrip("#").split()
            if words:
                listed.add(words[0])
            i -= 1
        for name in modes:
            self.assertIn(name, listed, "executor.mode %s (echod accepts %s) is not listed in the comment "
                          "above executor.mode in %s" % (name, ", ".join(modes), DEFAULT_FILE_NAME))


class Shutdown(unittest.TestCase):
    def test_sigterm_idle(self):
        d = Daemon().start()
        try:
            t0 = time.monotonic()
            d.stop(signal.SIGTERM, timeout=10 * SLOW)
            self.assertLess(time.monotonic() - t0, 5 * SLOW)
        finally:
            d.cleanup()

    def test_sigint_idle(self):
        d = Daemon().start()
        try:
            d.stop(signal.SIGINT, timeout=10 * SLOW)
        finally:
            d.cleanup()

    def test_sigterm_with_open_bidi_stream_drain_timeout(self):
        drain = 1.0
        d = Daemon(sets=["shutdown.drain_timeout=1s"]).start()
        try:
            c = d.h2()
            sid = c.start(BIDI)
            c.send_message(sid, "open")
            self.assertEqual(c.wait_messages(sid, 1), ["open"])
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            c.wait(lambda: c.goaway is not None or c.closed, 5 * SLOW, "GOAWAY")
            self.assertIsNotNone(c.goaway, "no GOAWAY before the connection closed")
            self.assertEqual(c.goaway[0], 0, "GOAWAY should carry NO_ERROR: %r" % (c.goaway,))
            self.assertGreaterEqual(c.goaway[1], sid, "GOAWAY last_stream_id excludes the open stream")
            # While draining, /readyz says so (the stream keeps the daemon draining for 1 s).
            try:
                status, _ = d.http_get("/readyz")
            except OSError:
                status = None  # the admin listener may already be gone
            if status is not None and d.alive():
                self.assertEqual(status, 503)
            # The client never half-closes: at the drain timeout the stream ends (trailers or a
            # reset) and the connection closes.
            deadline = time.monotonic() + 10 * SLOW
            while not c.closed and time.monotonic() < deadline:
                c.pump(0.2)
            self.assertTrue(c.closed or c.streams[sid].done, "stream still open after drain")
            rc = d.proc.wait(timeout=10 * SLOW)
            elapsed = time.monotonic() - t0
            d.returncode = rc
            d.check_clean_exit()
            self.assertGreaterEqual(elapsed, drain * 0.9, "drain cut short")
            self.assertLess(elapsed, drain + 3.0 * SLOW, "drain_timeout not honoured")
        finally:
            d.kill()
            d.cleanup()

    def test_sigterm_lets_calls_finish(self):
        d = Daemon(sets=["shutdown.drain_timeout=20s"]).start()
        try:
            c = d.h2()
            sid = c.start(BIDI)
            c.send_message(sid, "one")
            self.assertEqual(c.wait_messages(sid, 1), ["one"])
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            c.wait(lambda: c.goaway is not None, 5 * SLOW, "GOAWAY")
            # No new connections once draining.
            refused = False
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", d.grpc_port), timeout=1).close()
                except OSError:
                    refused = True
                    break
                time.sleep(0.05)
            self.assertTrue(refused, "listener still accepting while draining")
            # The call in flight still works and ends OK.
            c.send_message(sid, "two")
            c.end(sid)
            st = c.wait_done(sid)
            self.assertEqual(st.messages(), ["one", "two"])
            self.assertEqual(st.grpc_status, 0, st)
            rc = d.proc.wait(timeout=10 * SLOW)
            d.returncode = rc
            d.check_clean_exit()
            self.assertLess(time.monotonic() - t0, 10 * SLOW, "waited for drain_timeout needlessly")
        finally:
            d.kill()
            d.cleanup()

    def test_sigterm_grpcio_stream_sees_end(self):
        import grpc
        from echod_harness import EchoStub
        d = Daemon(sets=["shutdown.drain_timeout=1s"]).start()
        try:
            ch = d.channel()
            stub = EchoStub(ch)
            import queue
            q = queue.Queue()

            def gen():
                yield "hello"
                while True:
                    item = q.get()
                    if item is None:
                        return
                    yield item

            call = stub.BidirectionalStreamingEcho(gen(), timeout=60 * SLOW)
            self.assertEqual(next(call), "hello")
            d.proc.send_signal(signal.SIGTERM)
            try:
                with self.assertRaises(grpc.RpcError):
                    # the stream ends with an error status before the client half-closes
                    for _ in call:
                        pass
            finally:
                q.put(None)
                ch.close()
            d.returncode = d.proc.wait(timeout=10 * SLOW)
            d.check_clean_exit()
        finally:
            d.kill()
            d.cleanup()


if __name__ == "__main__":
    main()
