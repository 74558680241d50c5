"""The container image, built and run: deploy/Dockerfile with podman, as a user would deploy it.

    /usr/bin/python3 tests/image/check.py          (as root; deploy/bootstrap.sh test runs it)

Builds deploy/Dockerfile with podman from a copy of the checkout made under umask 077 (every
file 0600/0700, owner root: the image must not depend on the checkout's modes), on local
debian:bookworm and debian:bookworm-slim bases that mmdebstrap makes from Debian's mirror the
first time (no container registry is needed or asked; the bases stay in podman's store and are
reused). Then runs the image --read-only --cap-drop=ALL --security-opt=no-new-privileges and
checks what a deployment relies on: the image's user, UnaryEcho and a bidi stream, /metrics and
/readyz, grpc.health.v1 as the kubelet's gRPC probe asks it, every config/arms file passing
--check-config inside the image, SIGTERM during a call in flight (the call finishes, exit 0
within the grace period), and the image's size.

Exit status: 0 passed, 1 failed, 77 skipped (the reason is printed: not root, no podman or
runc, podman cannot start a container here, no mirror for the bases).

podman on this kind of host (Debian 12, podman 4.3, cgroup v1/hybrid): crun (podman's default
runtime) refuses hybrid cgroups, so runc with the cgroupfs manager; podman asks for nofile
1048576 and nproc above what the host allows, so both are capped at the host's hard limits
(podman lowers its own nproc to 32768 when it starts, which caps it too).

Environment:
  ECHOD_IMAGE_MAX_MB   the largest image size accepted, in MB (default 120)
  ECHOD_IMAGE_KEEP     keep the built image (localhost/echod-check:PID) after the run
"""

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import echod_harness as h  # noqa: E402

ROOT = h.ROOT
# one tag per run: checks of several clones may run at once
IMAGE = "localhost/echod-check:%d" % os.getpid()
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
MAX_MB = float(os.environ.get("ECHOD_IMAGE_MAX_MB", "120"))
GRACE = 30  # seconds, as k8s/base's terminationGracePeriodSeconds
PODMAN_NPROC_CAP = 32768


class Skip(Exception):
    pass


def log(msg):
    print("image: %s" % msg, file=sys.stderr, flush=True)


def hard_limit(res, cap=None):
    hard = resource.getrlimit(res)[1]
    if hard == resource.RLIM_INFINITY:
        hard = cap or 1048576
    return min(hard, cap) if cap else hard


def podman_base():
    runc = shutil.which("runc")
    return ["podman", "--runtime", runc, "--cgroup-manager", "cgroupfs"]


def ulimits():
    nofile = hard_limit(resource.RLIMIT_NOFILE)
    nproc = hard_limit(resource.RLIMIT_NPROC, PODMAN_NPROC_CAP)
    return ["--ulimit", "nofile=%d:%d" % (nofile, nofile), "--ulimit", "nproc=%d:%d" % (nproc, nproc)]


def podman(*args, check=True, timeout=120, **kw):
    cmd = podman_base() + list(args)
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError("%s: exit %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:],
                                                    r.stderr[-3000:]))
    return r


# ---------------------------------------------------------------------------------------------
# preflight and the base images


def preflight():
    if os.geteuid() != 0:
        raise Skip("needs root (rootful podman with runc and the cgroupfs manager)")
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            raise Skip("%s is not installed (deploy/bootstrap.sh test installs it)" % tool)
    r = podman("info", check=False, timeout=60)
    if r.returncode != 0:
        raise Skip("podman cannot run here: %s" % r.stderr.strip()[-500:])


# The two bases, as Debian's own images are made: minbase (Priority: required + apt), merged /usr
# without the usrmerge package, no apt caches kept; the slim one without docs, man pages and
# translations. Each is made once and then reused from podman's store.
SLIM_EXCLUDES = ["path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
                 "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
                 "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
                 "path-exclude=/usr/share/lintian/*", "path-exclude=/usr/share/groff/*"]
APT_CLEAN = ('DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
             '/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n'
             'APT::Update::Post-Invoke { "rm -f /var/cache/apt/*.bin || true"; };\n'
             'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";\n')


def ensure_base(tag, slim):
    name = "docker.io/library/debian:%s" % tag
    if podman("image", "exists", name, check=False).returncode == 0:
        log("base %s: present" % name)
        return 0.0
    if shutil.which("mmdebstrap") is None:
        raise Skip("base %s is missing and mmdebstrap is not installed" % name)
    started = time.monotonic()
    cmd = ["mmdebstrap", "--variant=minbase", "--quiet", "--format=tar",
           "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
           "--customize-hook=printf '%%s' '%s' > \"$1/etc/apt/apt.conf.d/docker-clean\"" % APT_CLEAN,
           "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin"]
    if slim:
        cmd += ["--dpkgopt=%s" % o for o in SLIM_EXCLUDES]
    with tempfile.TemporaryDirectory(prefix="echod-base-") as tmp:
        tar = os.path.join(tmp, "rootfs.tar")
        log("base %s: mmdebstrap %s from %s" % (name, SUITE, MIRROR))
        r = subprocess.run(cmd + [SUITE, tar, MIRROR], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        if r.returncode != 0:
            raise Skip("cannot make base %s with mmdebstrap (Debian's mirror unreachable?):\n%s"
                       % (name, r.stdout[-2000:]))
        podman("import", "--change", 'CMD ["bash"]', tar, name, timeout=300)
    took = time.monotonic() - started
    log("base %s: made in %.0f s" % (name, took))
    return took


# ---------------------------------------------------------------------------------------------
# the build


def checkout_files():
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise AssertionError("git ls-files failed in %s: %s" % (ROOT, r.stderr.decode()))
    return [p for p in r.stdout.decode().split("\0") if p and os.path.isfile(os.path.join(ROOT, p))]


def make_context(dst):
    """The checkout as a clone made under umask 077 would have it: files 0600 (0700 if
    executable), directories 0700, all root's."""
    old = os.umask(0o077)
    try:
        for rel in checkout_files():
            src = os.path.join(ROOT, rel)
            os.makedirs(os.path.dirname(os.path.join(dst, rel)) or dst, exist_ok=True)
            shutil.copyfile(src, os.path.join(dst, rel))
            os.chmod(os.path.join(dst, rel), 0o700 if os.access(src, os.X_OK) else 0o600)
    finally:
        os.umask(old)


def build_image():
    # Earlier runs' untagged stage images are the layer cache (the apt layers of both stages);
    # each run adds a few, so those older than a day go.
    podman("image", "prune", "-f", "--filter", "until=24h", check=False)
    with tempfile.TemporaryDirectory(prefix="echod-context-") as ctx:
        make_context(ctx)
        mode = os.stat(os.path.join(ctx, "config", "echod.yaml")).st_mode & 0o777
        assert mode == 0o600, "the context's config is %o, not 0600" % mode
        started = time.monotonic()
        # --network=host: the build stages run apt-get against the host's mirror.
        r = podman("build", "--pull=never", "--network=host", *ulimits(), "-f",
                   os.path.join(ctx, "deploy", "Dockerfile"), "-t", IMAGE, ctx, check=False,
                   timeout=900)
        if r.returncode != 0:
            raise AssertionError("podman build failed:\n%s\n%s" % (r.stdout[-4000:], r.stderr[-4000:]))
        log("image built in %.0f s" % (time.monotonic() - started))


# ---------------------------------------------------------------------------------------------
# one running container


HARDENED = ["--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges"]


class Container:
    def __init__(self, *args):
        self.args = list(args)
        self.cid = None

    def start(self):
        r = podman("run", "-d", *ulimits(), *HARDENED, "-p", "127.0.0.1::50051",
                   "-p", "127.0.0.1::8080", IMAGE, *self.args)
        self.cid = r.stdout.strip()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.state("{{.State.Running}}") != "true":
                raise AssertionError("the container exited with %s:\n%s"
                                     % (self.state("{{.State.ExitCode}}"), self.logs()))
            try:
                self.grpc_port = self.port(50051)
                self.admin_port = self.port(8080)
                if h.http_get(self.admin_port, "/readyz", timeout=1.0)[0] == 200:
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise AssertionError("the container did not become healthy:\n%s" % self.logs())

    def port(self, inner):
        out = podman("port", self.cid, "%d/tcp" % inner).stdout.strip()
        port = out.rpartition(":")[2]
        return int(port)  # ValueError while podman has not published it yet

    def state(self, fmt):
        return podman("inspect", "-f", fmt, self.cid).stdout.strip()

    def pid_status(self):
        with open("/proc/%s/status" % self.state("{{.State.Pid}}")) as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)

    def logs(self):
        if self.cid is None:
            return ""
        r = podman("logs", self.cid, check=False)
        return r.stdout + r.stderr

    def grpc_target(self):
        return "127.0.0.1:%d" % self.grpc_port

    def remove(self):
        if self.cid is not None:
            podman("rm", "-f", "-t", "0", self.cid, check=False)


class Image(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Container().start()

    @classmethod
    def tearDownClass(cls):
        cls.c.remove()

    def channel(self):
        import grpc
        return grpc.insecure_channel(self.c.grpc_target())

    def test_user(self):
        self.assertEqual(podman("image", "inspect", "-f", "{{.Config.User}}", IMAGE).stdout.strip(),
                         "10001:10001")
        st = self.c.pid_status()
        self.assertEqual(st["Uid"].split()[0], "10001", "echod runs as uid 10001")
        self.assertEqual(st["Gid"].split()[0], "10001")
        # --cap-drop=ALL and no-new-privileges took effect, and echod still serves
        self.assertEqual(int(st["CapEff"], 16), 0)
        self.assertEqual(st["NoNewPrivs"].strip(), "1")
        self.assertEqual(self.c.state("{{.HostConfig.ReadonlyRootfs}}"), "true")

    def test_echo(self):
        with self.channel() as ch:
            stub = h.EchoStub(ch)
            self.assertEqual(stub.UnaryEcho("from the image", timeout=10), "from the image")
            sent, got = h.bidi_roundtrip(stub, 50, prefix="image")
            self.assertEqual(got, sent)

    def test_admin(self):
        status, body = h.http_get(self.c.admin_port, "/readyz")
        self.assertEqual(status, 200, body)
        status, body = h.http_get(self.c.admin_port, "/metrics")
        self.assertEqual(status, 200)
        m = h.Metrics(body.decode() if isinstance(body, bytes) else body)
        self.assertTrue(m.has("echod_build_info"), "echod_build_info in /metrics")
        self.assertGreaterEqual(m.metric("echod_effective_cpus"), 1)

    def test_health_probe(self):
        # What the kubelet's gRPC probe sends: Health/Check with service "" (an empty message)
        # and a kube-probe user agent; SERVING is status 1 (field 1, varint).
        import grpc
        with grpc.insecure_channel(self.c.grpc_target(),
                                   options=[("grpc.primary_user_agent", "kube-probe/1.27")]) as ch:
            check = ch.unary_unary("/grpc.health.v1.Health/Check")
            self.assertEqual(check(b"", timeout=10), b"\x08\x01")

    def test_arms_check_config(self):
        arms = sorted(f for f in os.listdir(os.path.join(ROOT, "config", "arms")) if f.endswith(".yaml"))
        self.assertTrue(arms)
        script = ('for f; do /usr/local/bin/echod --check-config "/etc/echod/arms/$f" >/dev/null'
                  ' || { echo "--check-config failed: $f"; exit 1; }; done; echo checked $#')
        r = podman("run", "--rm", *ulimits(), *HARDENED, "--network=none", "--entrypoint", "/bin/sh",
                   IMAGE, "-c", script, "sh", *arms, check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("checked %d" % len(arms), r.stdout)

    def test_size(self):
        size = int(podman("image", "inspect", "-f", "{{.Size}}", IMAGE).stdout.strip())
        log("image size %.1f MB" % (size / 1e6))
        self.assertLessEqual(size / 1e6, MAX_MB, "image larger than ECHOD_IMAGE_MAX_MB")


class Drain(unittest.TestCase):
    def test_sigterm_in_flight(self):
        c = Container().start()
        try:
            import grpc
            result = {}
            with grpc.insecure_channel(c.grpc_target()) as ch:
                stub = h.EchoStub(ch)
                self.assertEqual(stub.UnaryEcho("warm", timeout=10), "warm")

                def call():
                    try:
                        result["reply"] = stub.UnaryEcho(
                            "in flight", timeout=20, metadata=[("echod-sleep-us", "1500000")])
                    except Exception as e:  # noqa: BLE001 (reported below)
                        result["error"] = e

                t = threading.Thread(target=call)
                t.start()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    m = h.Metrics(h.http_get(c.admin_port, "/metrics")[1].decode())
                    if m.metric_sum("echod_calls_in_flight") >= 1:
                        break
                    time.sleep(0.02)
                else:
                    self.fail("the call never showed in echod_calls_in_flight")
                started = time.monotonic()
                podman("stop", "-t", str(GRACE), c.cid, timeout=GRACE + 30)
                took = time.monotonic() - started
                t.join(20)
            self.assertNotIn("error", result, "the call in flight failed: %r" % result.get("error"))
            self.assertEqual(result.get("reply"), "in flight")
            self.assertEqual(c.state("{{.State.ExitCode}}"), "0", c.logs())
            self.assertLess(took, GRACE, "echod took longer than the grace period")
            self.assertIn("draining", c.logs())
        finally:
            c.remove()


def main():
    started = time.monotonic()
    try:
        preflight()
        base_secs = ensure_base(SUITE, slim=False) + ensure_base(SUITE + "-slim", slim=True)
    except Skip as e:
        log("SKIP: %s" % e)
        return 77
    try:
        build_image()
        prog = unittest.main(module=__name__, argv=[sys.argv[0]] + sys.argv[1:], exit=False,
                             verbosity=2)
        ok = prog.result.wasSuccessful()
    except AssertionError as e:
        log("FAILED: %s" % e)
        ok = False
    finally:
        if not os.environ.get("ECHOD_IMAGE_KEEP"):
            podman("rmi", "-f", IMAGE, check=False)
    log("%s in %.0f s (bases made in this run: %.0f s)"
        % ("passed" if ok else "FAILED", time.monotonic() - started, base_secs))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
