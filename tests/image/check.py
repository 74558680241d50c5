"""The container image, built and run: deploy/Dockerfile with podman, as a user would deploy it,
for amd64 and arm64, and the manifest list that names both.

    /usr/bin/python3 tests/image/check.py          (as root; deploy/bootstrap.sh test runs it)

Builds deploy/Dockerfile with podman from a copy of the checkout made under umask 077 (every
file 0600/0700, owner root: the image must not depend on the checkout's modes), once per
architecture (`podman build --platform linux/ARCH`; a foreign one runs under qemu-user through
binfmt_misc), on local debian:bookworm and debian:bookworm-slim bases that mmdebstrap makes from
the Debian mirror of the machine's apt configuration (its sources, proxy and Release checks:
tools/echodlib/debmirror.py) the first time. No container registry is needed or asked: as on a
registry, each base name is a manifest list of one image per architecture, so the unchanged
Dockerfile's FROM lines pick the platform's. The images go into a manifest list
(`podman manifest`), which must name every architecture built. Then each image runs
--read-only --cap-drop=ALL --security-opt=no-new-privileges and is checked for what a deployment
relies on: the image's user, UnaryEcho and a bidi stream, /metrics and /readyz,
grpc.health.v1 as the kubelet's gRPC probe asks it, every config/arms file passing
--check-config inside the image, SIGTERM during a call in flight (the call finishes, exit 0
within the grace period), the image's size, and that it is the architecture it says.

Everything lives in a podman store of the check's own (ECHOD_IMAGE_STORE), so the bases, their
layer cache and the cache's pruning never touch the machine's other images.

Exit status: 0 passed, 1 failed, 77 skipped (the reason is printed: not root, no podman or
runc, podman cannot start a container here, no mirror for the bases). An architecture that
cannot run here (no binfmt_misc entry for it) is left out with the reason; the native one never is.

podman on this kind of host (Debian 12, podman 4.3, cgroup v1/hybrid): crun (podman's default
runtime) refuses hybrid cgroups, so runc with the cgroupfs manager; podman asks for nofile
1048576 and nproc above what the host allows, so both are capped at the host's hard limits
(podman lowers its own nproc to 32768 when it starts, which caps it too).

Environment:
  ECHOD_IMAGE_ARCHES   the architectures to build and check (default: this host's and, on
                       amd64, arm64)
  ECHOD_IMAGE_STORE    the check's podman store (default /var/lib/echod-image-check)
  ECHOD_IMAGE_NAME     the name the images and the manifest list get (default
                       localhost/echod-check; tagged with the pid and the architecture)
  ECHOD_IMAGE_MAX_MB   the largest image size accepted, in MB (default 120)
  ECHOD_IMAGE_KEEP     keep the built images and manifest list after the run
"""

import copy
import fnmatch
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import echod_harness as h  # noqa: E402
from echodlib import debmirror  # noqa: E402  (echod_harness put tools/ on the path)

ROOT = h.ROOT
SUITE = "bookworm"
MAX_MB = float(os.environ.get("ECHOD_IMAGE_MAX_MB", "120"))
GRACE = 30  # seconds, as k8s/base's terminationGracePeriodSeconds
PODMAN_NPROC_CAP = 32768
STORE = os.environ.get("ECHOD_IMAGE_STORE", "/var/lib/echod-image-check")
# one tag per run: checks of several clones may run at once
NAME = os.environ.get("ECHOD_IMAGE_NAME", "localhost/echod-check")
LIST = "%s:%d" % (NAME, os.getpid())
# Debian's architecture names, and what `uname -m` says in a container of each.
MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}
QEMU = {"amd64": "qemu-x86_64", "arm64": "qemu-aarch64"}

# The architecture under test (Image and Drain read these; main sets them per architecture), and
# how much longer than natively its waits may take: a foreign one runs under qemu-user.
ARCH = None
IMAGE = None
SLOW = 1.0


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
    return ["podman", "--runtime", runc, "--cgroup-manager", "cgroupfs",
            "--root", os.path.join(STORE, "storage"), "--runroot", os.path.join(STORE, "run")]


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
# preflight, the architectures and the base images


def preflight():
    if os.geteuid() != 0:
        raise Skip("needs root (rootful podman with runc and the cgroupfs manager)")
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            raise Skip("%s is not installed (deploy/bootstrap.sh test installs it)" % tool)
    os.makedirs(STORE, mode=0o700, exist_ok=True)
    r = podman("info", check=False, timeout=60)
    if r.returncode != 0:
        raise Skip("podman cannot run here: %s" % r.stderr.strip()[-500:])


def native_arch():
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def foreign_reason(arch):
    """Why this host cannot run arch's binaries, or None when it can (binfmt_misc + qemu-user)."""
    if arch not in QEMU:
        return "no qemu-user for %s" % arch
    entry = "/proc/sys/fs/binfmt_misc/%s" % QEMU[arch]
    try:
        with open(entry) as f:
            text = f.read()
    except OSError:
        return ("%s is not registered with binfmt_misc (install qemu-user-static and binfmt-support; "
                "deploy/bootstrap.sh test mounts binfmt_misc and enables it)" % QEMU[arch])
    if not text.startswith("enabled"):
        return "%s is disabled in binfmt_misc (update-binfmts --enable %s)" % (QEMU[arch], QEMU[arch])
    flags = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")]
    if not flags or "F" not in flags[0]:
        return "%s's binfmt_misc entry has no F flag: a container could not reach the interpreter" % QEMU[arch]
    if shutil.which("arch-test") is not None and subprocess.run(
            ["arch-test", arch], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        return "arch-test %s fails: the kernel cannot run %s binaries here" % (arch, arch)
    return None


def arches():
    """[(arch, None or why it is left out)], the native one first."""
    native = native_arch()
    wanted = os.environ.get("ECHOD_IMAGE_ARCHES", "").split() or [native] + (["arm64"] if native == "amd64" else [])
    out = []
    for arch in [native] + [a for a in wanted if a != native]:
        out.append((arch, None if arch == native else foreign_reason(arch)))
    return out


# The two bases, as Debian's own images are made: minbase (Priority: required + apt), merged /usr
# without the usrmerge package, no apt caches kept; the slim one without docs, man pages and
# translations. One image per architecture, made once and then reused from the check's store; the
# name the Dockerfile uses (docker.io/library/debian:TAG) is a manifest list of them, as on Docker Hub.
SLIM_EXCLUDES = ["path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
                 "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
                 "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
                 "path-exclude=/usr/share/lintian/*", "path-exclude=/usr/share/groff/*"]
APT_CLEAN = ('DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
             '/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n'
             'APT::Update::Post-Invoke { "rm -f /var/cache/apt/*.bin || true"; };\n'
             'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";\n')


def base_image(tag, arch):
    return "localhost/echod-check-base:%s-%s" % (tag, arch)


def _kept(path, rules):
    """dpkg's --path-exclude/--path-include: the last pattern that matches decides."""
    keep = True
    for kind, pattern in rules:
        if fnmatch.fnmatchcase(path, pattern):
            keep = kind == "path-include"
    return keep


def _abspath(member):
    """A tar member's path as dpkg's filters see it ("./usr/share" -> "/usr/share", "./" -> "/")."""
    name = member.name[2:] if member.name.startswith("./") else member.name.lstrip("/")
    return "/" + name.rstrip("/")


DPKG_CFG = "/etc/dpkg/dpkg.cfg.d/99mmdebstrap"  # where mmdebstrap --dpkgopt writes its options


def slim_tar(full, slim):
    """The slim base from the full one: the same packages without what SLIM_EXCLUDES leaves out,
    and the excludes in dpkg's configuration for what the Dockerfile installs later (as
    mmdebstrap --dpkgopt does). Made from the full base's tar rather than by a second mmdebstrap,
    which for a foreign architecture runs every maintainer script again under emulation."""
    rules = [tuple(o.split("=", 1)) for o in SLIM_EXCLUDES]
    with tarfile.open(full) as src:
        members = [m for m in src.getmembers() if _abspath(m) != DPKG_CFG]
        path = {m.name: _abspath(m) for m in members}
        files = {m.name for m in members if not m.isdir() and _kept(path[m.name], rules)}
        # as dpkg does, a directory stays if it is not excluded or if something kept lies below it
        parents = set()
        for n in files:
            d = os.path.dirname(path[n])
            while d not in parents and d != "/":
                parents.add(d)
                d = os.path.dirname(d)
        moved = {}  # a left-out hard-link target -> the first kept name, which carries the content
        with tarfile.open(slim, "w", format=tarfile.PAX_FORMAT) as dst:
            for m in members:
                if m.isdir():
                    if not (_kept(path[m.name], rules) or path[m.name] in parents):
                        continue
                elif m.name not in files:
                    continue
                elif m.islnk() and m.linkname not in files:
                    m = copy.copy(m)
                    # a pax linkpath (or size) would override the fields set here
                    m.pax_headers = {k: v for k, v in m.pax_headers.items() if k not in ("linkpath", "size")}
                    if m.linkname in moved:
                        m.linkname = moved[m.linkname]
                    else:
                        target = src.getmember(m.linkname)
                        moved[m.linkname] = m.name
                        m.type, m.linkname, m.size = tarfile.REGTYPE, "", target.size
                        dst.addfile(m, src.extractfile(target))
                        continue
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
            cfg = "".join(o + "\n" for o in SLIM_EXCLUDES).encode()
            info = tarfile.TarInfo("." + DPKG_CFG)
            info.size, info.mode, info.mtime = len(cfg), 0o644, int(time.time())
            dst.addfile(info, io.BytesIO(cfg))


def ensure_bases(arch):
    """debian:bookworm and debian:bookworm-slim for arch, made once (one mmdebstrap) and kept in the
    check's store; returns the seconds it took in this run."""
    names = {tag: base_image(tag, arch) for tag in (SUITE, SUITE + "-slim")}
    missing = [n for n in names.values() if podman("image", "exists", n, check=False).returncode != 0]
    if not missing:
        log("bases %s: present" % ", ".join(names.values()))
        return 0.0
    if shutil.which("mmdebstrap") is None:
        raise Skip("bases %s are missing and mmdebstrap is not installed" % ", ".join(missing))
    try:
        sources = debmirror.sources(SUITE, arch)
        aptopts = debmirror.apt_options()
    except debmirror.MirrorError as e:
        raise Skip("no Debian mirror for the bases: %s" % e)
    # The host's Release checks (a snapshot mirror needs Check-Valid-Until off) stay in the base,
    # for the Dockerfile's own apt-get; a proxy does not: the build gets it in its environment.
    checks = "".join(o + "\n" for o in aptopts if "::Proxy" not in o)
    started = time.monotonic()
    cmd = ["mmdebstrap", "--variant=minbase", "--quiet", "--format=tar", "--architectures=" + arch,
           "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
           "--customize-hook=printf '%%s' '%s' > \"$1/etc/apt/apt.conf.d/docker-clean\"" % APT_CLEAN,
           "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin"]
    if checks:
        cmd += ["--customize-hook=printf '%%s' '%s' > \"$1/etc/apt/apt.conf.d/50echod-mirror\"" % checks]
    cmd += ["--aptopt=" + o for o in aptopts]
    with tempfile.TemporaryDirectory(prefix="echod-base-") as tmp:
        tar, slim = os.path.join(tmp, "rootfs.tar"), os.path.join(tmp, "slim.tar")
        log("bases %s: mmdebstrap %s %s from %s" % (arch, SUITE, arch, sources[0].split()[-3]))
        r = subprocess.run(cmd + [SUITE, tar] + sources, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=1800,
                           env=dict(os.environ, **debmirror.proxy_env()))
        if r.returncode != 0:
            raise Skip("cannot make the %s bases with mmdebstrap (the mirror unreachable?):\n%s"
                       % (arch, r.stdout[-2000:]))
        slim_tar(tar, slim)
        for tag, path in ((SUITE, tar), (SUITE + "-slim", slim)):
            podman("rmi", "-f", names[tag], check=False)
            podman("import", "--arch", arch, "--change", 'CMD ["bash"]', path, names[tag], timeout=300)
    took = time.monotonic() - started
    log("bases %s: made in %.0f s" % (", ".join(names.values()), took))
    return took


def list_arches(name):
    """The architectures a manifest list names, or None when name is not one."""
    r = podman("manifest", "inspect", name, check=False)
    if r.returncode != 0:
        return None
    try:
        return sorted(m["platform"]["architecture"] for m in json.loads(r.stdout).get("manifests", []))
    except (ValueError, KeyError, TypeError):
        return None


def ensure_base_lists(tags, archs, remake):
    """docker.io/library/debian:TAG as a manifest list of exactly these architectures' bases
    (kept when it already is one and no base was made anew: another check may be building from
    it right now)."""
    for tag in tags:
        name = "docker.io/library/debian:%s" % tag
        if not remake and list_arches(name) == sorted(archs):
            continue
        podman("manifest", "rm", name, check=False)
        podman("rmi", "-f", name, check=False)  # an image of that name made by an older check
        podman("manifest", "create", name)
        for arch in archs:
            podman("manifest", "add", "--arch", arch, name, "containers-storage:" + base_image(tag, arch))


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


def arch_image(arch):
    return "%s-%s" % (LIST, arch)


def build_images(archs):
    """Builds every architecture's image from one context; returns seconds per architecture."""
    # Earlier runs' untagged stage images are the layer cache (the apt layers of both stages);
    # each run adds a few, so those older than a day go. The store is the check's own.
    podman("image", "prune", "-f", "--filter", "until=24h", check=False)
    took = {}
    env = dict(os.environ, **debmirror.proxy_env())  # podman passes *_proxy on to RUN steps
    with tempfile.TemporaryDirectory(prefix="echod-context-") as ctx:
        make_context(ctx)
        mode = os.stat(os.path.join(ctx, "config", "echod.yaml")).st_mode & 0o777
        assert mode == 0o600, "the context's config is %o, not 0600" % mode
        for arch in archs:
            started = time.monotonic()
            # --network=host: the build stages run apt-get against the host's mirror.
            r = podman("build", "--pull=never", "--network=host", "--platform", "linux/" + arch, *ulimits(),
                       "-f", os.path.join(ctx, "deploy", "Dockerfile"), "-t", arch_image(arch), ctx,
                       check=False, timeout=3600, env=env)
            if r.returncode != 0:
                raise AssertionError("podman build (%s) failed:\n%s\n%s" % (arch, r.stdout[-4000:], r.stderr[-4000:]))
            took[arch] = time.monotonic() - started
            log("image %s built in %.0f s" % (arch_image(arch), took[arch]))
    return took


def make_list(archs):
    """The manifest list users push (deploy/README.md): one entry per architecture built."""
    podman("manifest", "create", LIST)
    for arch in archs:
        podman("manifest", "add", LIST, "containers-storage:" + arch_image(arch))


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
        deadline = time.monotonic() + 20 * SLOW
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

    def test_architecture(self):
        # the image says it is ARCH, and what runs in it is: uname in a container of a foreign
        # image answers the emulated machine
        self.assertEqual(podman("image", "inspect", "-f", "{{.Architecture}}", IMAGE).stdout.strip(), ARCH)
        r = podman("run", "--rm", *ulimits(), *HARDENED, "--network=none", "--entrypoint", "/bin/uname",
                   IMAGE, "-m")
        self.assertEqual(r.stdout.strip(), MACHINE.get(ARCH, ARCH))
        status, body = h.http_get(self.c.admin_port, "/metrics")
        m = h.Metrics(body.decode() if isinstance(body, bytes) else body)
        # the virtual threads' switch is the architecture's own assembly, not the ucontext fallback
        self.assertEqual(m.series("echod_build_info")[0][0].get("fiber_switch"), MACHINE.get(ARCH, ARCH))

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
                deadline = time.monotonic() + 10 * SLOW
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


def run_checks(arch, slow):
    """Image and Drain against arch's image; True when they pass."""
    global ARCH, IMAGE, SLOW
    ARCH, IMAGE, SLOW = arch, arch_image(arch), slow
    log("checking %s (%s)" % (IMAGE, "native" if slow == 1.0 else "emulated"))
    suite = unittest.defaultTestLoader.loadTestsFromNames(sys.argv[1:] or ["Image", "Drain"], sys.modules[__name__])
    return unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()


def main():
    started = time.monotonic()
    plan = arches()
    build = [a for a, why in plan if why is None]
    for arch, why in plan:
        if why is not None:
            log("%s: left out: %s" % (arch, why))
    base_secs = 0.0
    try:
        preflight()
        for arch in build:
            base_secs += ensure_bases(arch)
        ensure_base_lists([SUITE, SUITE + "-slim"], build, remake=base_secs > 0)
    except Skip as e:
        log("SKIP: %s" % e)
        return 77
    results = {}
    built = {}
    try:
        built = build_images(build)
        make_list(build)
        listed = list_arches(LIST)
        if listed != sorted(build):
            raise AssertionError("manifest list %s names %s, not %s" % (LIST, listed, sorted(build)))
        log("manifest list %s: %s" % (LIST, ", ".join(listed)))
        for arch in build:
            results[arch] = run_checks(arch, 1.0 if arch == native_arch() else 4.0)
        ok = all(results.values())
    except AssertionError as e:
        log("FAILED: %s" % e)
        ok = False
    finally:
        if not os.environ.get("ECHOD_IMAGE_KEEP"):
            podman("manifest", "rm", LIST, check=False)
            for arch in build:
                podman("rmi", "-f", arch_image(arch), check=False)
    left_out = ["%s left out" % a for a, why in plan if why is not None]
    log("%s in %.0f s: %s (builds: %s; bases made in this run: %.0f s)"
        % ("passed" if ok else "FAILED", time.monotonic() - started,
           ", ".join(["%s %s" % (a, "passed" if results.get(a) else "FAILED") for a in build] + left_out),
           ", ".join("%s %.0f s" % (a, t) for a, t in built.items()) or "none", base_secs))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
