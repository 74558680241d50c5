"""Config and operator errors (README: Configuration reference).

Every key documented in config/echod.yaml (the file is walked, so a new key is covered the day
it is added) gets bad values: each must make echod exit 2 with one line naming FILE:LINE:COL and
the key, from a file as from --set. Then the errors an operator makes that no schema catches:
a listen address in use, an unusable certificate or key, more threads than the cap or the
system allows. Each exits 2 with a line that says what to change, and leaves nothing running:
the process is gone and every port it was given is free again.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_config_errors.py
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yaml  # noqa: E402

from echod_harness import ECHOD_BIN, ROOT, SANITIZER, SLOW, Daemon, free_port, main  # noqa: E402

DEFAULT_CONFIG = os.path.join(ROOT, "config", "echod.yaml")
METHOD = "/grpc.examples.echo.Echo/UnaryEcho"

# Bad values by the kind of key, as YAML text. Every scalar key also gets a sequence and a mapping.
ENUMS = {"transport.flush", "executor.mode", "dispatch.serialize", "dispatch.sched_policy", "log.level",
         "log.format", "work.defaults.cpu_dist", "work.defaults.sleep_dist"}
HOSTPORTS = {"listen.grpc", "listen.admin", "listen.rest"}
DURATION_RE = re.compile(r"^\d+(ms|s|m)$")
BAD = {
    "int": ['"many"', "-1", "99999999999999999999", "1.5", "0x10", "''"],
    "bool": ["maybe", "2", '"truthy"'],
    "float": ["1.5", "-0.1", "lots", ".nan", ".inf"],
    "duration": ["soon", "-1s", "99999999m", "1.5s", "10h", "10 s"],
    "enum": ["sideways", '""', "1"],
    "hostport": ['"nowhere"', '"127.0.0.1:99999"', '"127.0.0.1:0"', '"[::1"', '"1.2.3.4.5:80"'],
    "name": ['""'],
    "string": [],
    "per_method": ["[1]", '"x"', "5"],
}
STRUCTURAL = ["[1, 2]", "{a: 1}"]
PER_METHOD_ENTRIES = {
    "dispatch.per_method": ["{ %s: { mode: sideways } }" % METHOD, "{ %s: { bogus: 1 } }" % METHOD,
                            "{ %s: { threads: many } }" % METHOD, "{ %s: 5 }" % METHOD],
    "work.per_method": ["{ %s: { cpu_us: lots } }" % METHOD, "{ %s: { bogus: 1 } }" % METHOD,
                        "{ %s: { error_rate: 2.0 } }" % METHOD, "{ %s: [] }" % METHOD],
}


def documented_keys():
    """[(key path, kind, value node)] for every leaf of config/echod.yaml, in file order."""
    with open(DEFAULT_CONFIG) as f:
        root = yaml.compose(f.read())
    out = []

    def walk(node, path):
        for k, v in node.value:
            p = path + [k.value]
            key = ".".join(p)
            if isinstance(v, yaml.MappingNode):
                if key.endswith("per_method"):
                    out.append((key, "per_method", v))
                else:
                    walk(v, p)
                continue
            if key in ENUMS:
                kind = "enum"
            elif key in HOSTPORTS:
                kind = "hostport"
            elif key == "arm":
                kind = "name"
            elif v.tag.endswith(":int"):
                kind = "int"
            elif v.tag.endswith(":bool"):
                kind = "bool"
            elif v.tag.endswith(":float"):
                kind = "float"
            elif DURATION_RE.match(v.value):
                kind = "duration"
            else:
                kind = "string"
            out.append((key, kind, v))

    walk(root, [])
    return out


def bad_values(key, kind):
    vals = list(BAD[kind]) + PER_METHOD_ENTRIES.get(key, [])
    if kind == "int" and key == "work.defaults.response_bytes":  # -1 means "as received" there
        vals = ["-2" if v == "-1" else v for v in vals]
    if kind != "per_method":
        vals += STRUCTURAL
    return vals


def run(args, timeout=15):
    return subprocess.run([ECHOD_BIN] + list(args), capture_output=True, text=True,
                          timeout=timeout * SLOW, cwd=ROOT, stdin=subprocess.DEVNULL)


def port_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def make_cert(directory, name):
    cert, key = os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-subj", "/CN=localhost", "-days", "1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class EveryKey(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="echod-cfgerr-")
        with open(DEFAULT_CONFIG) as f:
            cls.lines = f.read().splitlines(keepends=True)
        cls.keys = documented_keys()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_walk_sees_every_section(self):
        keys = {k for k, _, _ in self.keys}
        for k in ("arm", "listen.grpc", "tls.cert", "io.event_loops", "transport.flush", "limits.max_connections",
                  "executor.keep_alive", "dispatch.per_method", "echo.server_streaming_count",
                  "work.defaults.error_rate", "work.per_method", "telemetry.timing_trailer",
                  "shutdown.drain_timeout", "log.format"):
            self.assertIn(k, keys)
        self.assertGreaterEqual(len(keys), 40)

    def bad_file(self, node, value):
        """config/echod.yaml with node's value replaced by value, on the same line."""
        lines = list(self.lines)
        (l0, c0), (l1, c1) = (node.start_mark.line, node.start_mark.column), (node.end_mark.line, node.end_mark.column)
        self.assertEqual(l0, l1, "multi-line default value")
        lines[l0] = lines[l0][:c0] + value + lines[l0][c1:]
        path = os.path.join(self.tmp.name, "bad.yaml")
        with open(path, "w") as f:
            f.write("".join(lines))
        return path, l0 + 1, c0 + 1

    def test_every_key_in_a_file(self):
        tried = 0
        for key, kind, node in self.keys:
            # a sanitizer build starts slowly: a few values per key there, all of them in release
            for value in bad_values(key, kind)[:3 if SANITIZER else None]:
                with self.subTest(key=key, value=value):
                    path, line, col = self.bad_file(node, value)
                    r = run(["--check-config", path])
                    self.assertEqual(r.returncode, 2, "%s: %s accepted:\n%s" % (key, value, r.stdout[-300:]))
                    err = r.stderr.strip()
                    self.assertEqual(len(err.splitlines()), 1, "one line: %r" % err)
                    m = re.match(r"echod: %s:(\d+):(\d+): (\S+): \S" % re.escape(path), err)
                    self.assertIsNotNone(m, "no FILE:LINE:COL: key: in %r" % err)
                    self.assertEqual(int(m.group(1)), line, err)
                    self.assertGreaterEqual(int(m.group(2)), col, err)  # at the value, or inside it
                    self.assertTrue(m.group(3) == key or m.group(3).startswith(key + "."), err)
                    self.assertNotIn("Sanitizer", r.stderr)
                    tried += 1
        sys.stderr.write("\n  %d bad values over %d documented keys\n" % (tried, len(self.keys)))

    def test_every_key_at_start_up(self):
        """A normal start (not --check-config) rejects them the same way, before binding anything."""
        grpc, admin = free_port(), free_port()
        for key, kind, node in self.keys:
            value = bad_values(key, kind)[0]
            with self.subTest(key=key, value=value):
                path, line, _ = self.bad_file(node, value)
                r = run(["--config", path, "--set", "listen.grpc=127.0.0.1:%d" % grpc,
                         "--set", "listen.admin=127.0.0.1:%d" % admin])
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertRegex(r.stderr, r"%s:%d:\d+: %s" % (re.escape(path), line, re.escape(key)))
        self.assertTrue(port_free(grpc) and port_free(admin))

    def test_every_key_with_set(self):
        for key, kind, _ in self.keys:
            for value in bad_values(key, kind)[:2]:
                with self.subTest(key=key, value=value):
                    r = run(["--check-config", DEFAULT_CONFIG, "--set", "%s=%s" % (key, value)])
                    self.assertEqual(r.returncode, 2, "--set %s=%s accepted" % (key, value))
                    self.assertRegex(r.stderr.strip(), r"^echod: --set %s(\.\S+)?: \S" % re.escape(key))

    def test_cross_field_errors_name_the_keys(self):
        """Checks that involve two keys have no single place: they name the file and both keys."""
        cases = [
            ("work:\n  defaults:\n    cpu_us: 20000000\n", ("work.defaults.cpu_us", "work.max_cpu")),
            ("work:\n  max_response_bytes: 10\n  defaults:\n    response_bytes: 11\n",
             ("work.defaults.response_bytes", "work.max_response_bytes")),
            ('listen:\n  grpc: "127.0.0.1:5000"\n  admin: "127.0.0.1:5000"\n', ("listen.grpc", "listen.admin")),
            ('listen:\n  grpc: "127.0.0.1:5000"\n  rest: "127.0.0.1:5000"\n', ("listen.rest", "listen.grpc")),
            ('tls:\n  cert: "/tmp/x.pem"\n', ("tls",)),
            ("dispatch:\n  merge_lookup_and_start: true\n  per_method: { %s: { mode: fixed } }\n" % METHOD,
             ("merge_lookup_and_start", "per_method")),
        ]
        for text, names in cases:
            with self.subTest(text):
                path = os.path.join(self.tmp.name, "cross.yaml")
                with open(path, "w") as f:
                    f.write(text)
                r = run(["--check-config", path])
                self.assertEqual(r.returncode, 2, r.stdout)
                self.assertIn(path, r.stderr)
                for n in names:
                    self.assertIn(n, r.stderr)


class OperatorErrors(unittest.TestCase):
    """Start-up failures: exit 2, a line that says what to change, and nothing left running."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="echod-operr-")
        cls.cert, cls.key = make_cert(cls.tmp.name, "a")
        cls.other_cert, cls.other_key = make_cert(cls.tmp.name, "b")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def start_fails(self, sets, says, ports=None, prefix=()):
        """Starts echod with sets; asserts exit 2, stderr mentioning each of says, and every port
        in ports (default: the grpc and admin ports it was given) free afterwards."""
        grpc, admin = free_port(), free_port()
        args = ["--set", "listen.grpc=127.0.0.1:%d" % grpc, "--set", "listen.admin=127.0.0.1:%d" % admin]
        args += [a for s in sets for a in ("--set", s % {"grpc": grpc, "admin": admin})]
        t0 = time.monotonic()
        r = subprocess.run(list(prefix) + [ECHOD_BIN] + args, capture_output=True, text=True,
                           timeout=30 * SLOW, cwd=ROOT, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 2, "exit %d:\n%s" % (r.returncode, r.stderr))
        self.assertLess(time.monotonic() - t0, 10 * SLOW, "slow to give up")
        for text in says:
            self.assertIn(text, r.stderr)
        self.assertNotIn("Sanitizer", r.stderr)
        self.assertNotIn("runtime error", r.stderr)
        for port in (ports if ports is not None else (grpc, admin)):
            self.assertTrue(port_free(port), "port %d still bound after a failed start" % port)
        return r.stderr

    def held_port(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        self.addCleanup(s.close)
        return s, s.getsockname()[1]

    def test_grpc_address_in_use(self):
        _, port = self.held_port()
        err = self.start_fails(["listen.grpc=127.0.0.1:%d" % port], ["listen.grpc", "in use"], ports=())
        self.assertIn(str(port), err)

    def test_admin_address_in_use(self):
        s, port = self.held_port()
        grpc = free_port()
        self.start_fails(["listen.grpc=127.0.0.1:%d" % grpc, "listen.admin=127.0.0.1:%d" % port],
                         ["listen.admin", "in use"], ports=(grpc,))

    def test_rest_address_in_use(self):
        s, port = self.held_port()
        grpc, admin = free_port(), free_port()
        self.start_fails(["listen.grpc=127.0.0.1:%d" % grpc, "listen.admin=127.0.0.1:%d" % admin,
                          "listen.rest=127.0.0.1:%d" % port], ["listen.rest", "in use"], ports=(grpc, admin))

    def test_grpc_address_held_by_another_echod(self):
        """The listeners use SO_REUSEPORT (one per I/O loop), which alone would let a second echod
        bind the same port and share its connections: echod checks the port is free first."""
        with Daemon() as first:
            grpc = first.grpc_port
            admin = free_port()
            r = subprocess.Popen([ECHOD_BIN, "--set", "listen.grpc=127.0.0.1:%d" % grpc,
                                  "--set", "listen.admin=127.0.0.1:%d" % admin],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
            try:
                rc = r.wait(timeout=5 * SLOW)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                if r.poll() is None:
                    r.kill()
                    r.wait()
                r.stderr.close()
            self.assertEqual(rc, 2, "a second echod shares listen.grpc with the first")

    def test_unassignable_address(self):
        self.start_fails(["listen.grpc=192.0.2.1:%(grpc)d"], ["listen.grpc", "192.0.2.1"], ports=())

    def test_missing_certificate(self):
        self.start_fails(["tls.cert=%s" % os.path.join(self.tmp.name, "nope.pem"), "tls.key=%s" % self.key],
                         ["tls.cert", "nope.pem"])

    def test_unreadable_certificate(self):
        if os.geteuid() == 0:
            path = self.tmp.name  # root reads any file; a directory is unreadable as a PEM file
        else:
            path = os.path.join(self.tmp.name, "locked.pem")
            shutil.copy(self.cert, path)
            os.chmod(path, 0)
        self.start_fails(["tls.cert=%s" % path, "tls.key=%s" % self.key], ["tls.cert", path])

    def test_certificate_is_not_pem(self):
        path = os.path.join(self.tmp.name, "garbage.pem")
        with open(path, "wb") as f:
            f.write(os.urandom(600))
        self.start_fails(["tls.cert=%s" % path, "tls.key=%s" % self.key], ["tls.cert", "garbage.pem"])

    def test_key_is_a_certificate(self):
        self.start_fails(["tls.cert=%s" % self.cert, "tls.key=%s" % self.cert], ["tls.key"])

    def test_key_does_not_match_certificate(self):
        # OpenSSL notices when the key is loaded ("key values mismatch"), else echod's own check
        err = self.start_fails(["tls.cert=%s" % self.cert, "tls.key=%s" % self.other_key],
                               ["tls.key", os.path.basename(self.other_key)])
        self.assertRegex(err, "mismatch|does not match")
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_threads_above_the_cap(self):
        for sets, key in ((["executor.mode=fixed", "executor.threads=1025"], "executor.threads"),
                          (["executor.mode=cached", "executor.max_threads=4097"], "executor.max_threads"),
                          (["io.event_loops=65"], "io.event_loops"),
                          (["dispatch.per_method.%s.threads=5000" % METHOD], "threads")):
            with self.subTest(key):
                self.start_fails(sets, [key])

    def test_threads_above_what_the_system_allows(self):
        """Within the cap, but more than RLIMIT_NPROC lets the process start: exit 2 naming the
        key to lower, and no thread or port left behind."""
        if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("prlimit"):
            self.skipTest("needs root, setpriv and prlimit (to run as nobody with a process limit)")
        if not os.access(ECHOD_BIN, os.X_OK) or os.stat(ECHOD_BIN).st_mode & 0o005 != 0o005:
            self.skipTest("echod is not executable by nobody")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "prlimit", "--nproc=40"]
        self.start_fails(["executor.mode=fixed", "executor.threads=200"], ["executor.threads"], prefix=prefix)


if __name__ == "__main__":
    main()
