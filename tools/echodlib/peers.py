"""The peers of ../shared/peers: the grpc-java 1.41 and grpc C++ 1.51 servers of echod's wire
contract, built from Debian packages: building them, and running one arm of one on a pinned CPU,
for the benchmarks that put echod's figures beside theirs (bench/compare, bench/model).

    peer = Peer("java", "direct", build="/tmp/echod-peers", prefix=["taskset", "-c", "1"]).start()
    ... peer.port, peer.pid ...
    peer.stop()

A Peer is a server under test as echodlib.daemon.Echod is one (start, pid, port, target, stop,
log_tail, shown_command). grpc-java needs Debian's openjdk-17-jdk-headless, libgrpc-java,
libnetty-java, libguava-java, libperfmark-java and libgoogle-gson-java; grpc C++ libgrpc++-dev,
protobuf and its compilers; `unusable()` and `missing()` say what is not there.

JDK 21. The peer's `virtual` arm (newVirtualThreadPerTaskExecutor()) needs a JDK 21, which
Debian 12 does not have: the peers dir's install-jdk21.sh lays one from Debian 13's packages into
$JDK21_ROOT (default /opt/echod-jdk21) and marks it complete when done; its java21.sh runs it.
`jdk21_missing()` says why there is none; a Peer with jdk=21 runs any arm on it (PEER_JDK=21 for
run-java.sh, which always does for `virtual`). The JVM an arm ran on is its start line's
`java=` (`java_version()`).
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import time

from . import daemon, jvm, paths, ports

PEERS_DIR = os.path.normpath(os.path.join(paths.ROOT, "..", "shared", "peers"))
JAVA_PACKAGES = ["openjdk-17-jdk-headless", "libgrpc-java", "libnetty-java", "libguava-java",
                 "libperfmark-java", "libgoogle-gson-java"]
CPP_PACKAGES = ["libgrpc++-dev", "libprotobuf-dev", "protobuf-compiler", "protobuf-compiler-grpc",
                "g++", "pkg-config"]
# kind: (the name a table shows, its Debian packages, build script, what it builds, its sources)
KINDS = {
    "java": ("grpc-java", JAVA_PACKAGES, "build-java.sh", os.path.join("java", "EchoPeer.class"),
             [os.path.join("java", "EchoPeer.java")]),
    "cpp": ("grpc C++", CPP_PACKAGES, "build-cpp.sh", os.path.join("cpp", "echo_peer"),
            [os.path.join("cpp", "echo_peer.cc"), "echo.proto"]),
}


JDK21_ROOT = "/opt/echod-jdk21"  # install-jdk21.sh's and java21.sh's default ($JDK21_ROOT)
JDK21_MARKER = ".echod-jdk21-complete"  # what install-jdk21.sh writes last, once it is complete
JDK21_ARMS = ("virtual",)  # the Java peer's arms that only run on JDK 21


class PeerError(daemon.ServerError, RuntimeError):
    pass


def jdk21_root():
    """Where install-jdk21.sh puts the JDK 21 and java21.sh looks for it: $JDK21_ROOT, else
    /opt/echod-jdk21."""
    return os.environ.get("JDK21_ROOT") or JDK21_ROOT


def jdk21_missing(peers_dir=PEERS_DIR):
    """None when the peers dir's java21.sh has a complete JDK 21 to run (install-jdk21.sh's
    marker in jdk21_root()), else why not, naming the script that installs it."""
    script = os.path.join(os.path.relpath(peers_dir, paths.ROOT), "install-jdk21.sh")
    if not os.path.exists(os.path.join(peers_dir, "java21.sh")):
        return "no java21.sh in %s (a peers dir without JDK 21 support)" % peers_dir
    root = jdk21_root()
    if not os.path.exists(os.path.join(root, JDK21_MARKER)):
        return ("no complete JDK 21 in %s (%s missing): run %s as root (once, a few minutes; "
                "JDK21_ROOT sets another place)" % (root, JDK21_MARKER, script))
    return None


def java_version(log_text):
    """The JVM version the Java peer printed at start (`java=21.0.13`), or None."""
    m = re.search(r"\bjava=(\S+)", log_text or "")
    return m.group(1) if m else None


def unusable(peers_dir=PEERS_DIR):
    """None when the Java peer can be built and run here, else why not."""
    if not os.path.isdir(os.path.join(peers_dir, "java")):
        return "no grpc-java peer at %s" % peers_dir
    if shutil.which("javac") is None or shutil.which("java") is None:
        return "no java or javac (openjdk-17-jdk-headless)"
    if not os.path.exists("/usr/share/java/grpc-netty.jar"):
        return "grpc-java jars missing (apt-get install %s)" % " ".join(JAVA_PACKAGES[1:])
    return None


def installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


def missing(kind):
    """The Debian packages of a peer kind that are not installed."""
    return [p for p in KINDS[kind][1] if not installed(p)]


def _newer(out, srcs):
    if not os.path.exists(out):
        return True
    t = os.path.getmtime(out)
    return any(os.path.exists(s) and os.path.getmtime(s) > t for s in srcs)


def build_command(kind, build_dir, peers_dir=PEERS_DIR):
    """The build as a shell would show it: env BUILD=DIR .../build-KIND.sh."""
    return ["env", "BUILD=" + build_dir, os.path.join(peers_dir, KINDS[kind][2])]


def build(build_dir, kind="java", peers_dir=PEERS_DIR, force=False, log=None):
    """Builds a peer into build_dir (once; again when a source is newer, or with force) and
    returns what it built; PeerError when the build fails. log gets the command it runs."""
    _, _, script, out, srcs = KINDS[kind]
    out = os.path.join(build_dir, out)
    if force or _newer(out, [os.path.join(peers_dir, s) for s in srcs]):
        cmd = [os.path.join(peers_dir, script)]
        if log:
            log("+ " + shlex.join(cmd))
        r = subprocess.run(cmd, env=dict(os.environ, BUILD=build_dir), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise PeerError("%s failed (exit %d): %s" % (script, r.returncode, r.stdout.strip()[-800:]))
    return out


# request metadata for calls that do no synthetic work whatever the server-wide defaults (the
# peer's and echod's): what a JIT's warm-up sends, as k6's ramp warm-up does
NO_WORK = ("echod-cpu-us: 0", "echod-sleep-us: 0")


def java_opts(cpu_us=0, stall_fraction=0.0, stall_us=0, seed=None, pause_log=None, extra=()):
    """JAVA_OPTS of the grpc-java peer: its server-wide synthetic work per call (busy CPU µs on
    the thread that runs the handler, as echod's work.defaults.cpu_us), a blocking stall of
    stall_us for a fraction stall_fraction of the calls (drawn from seed), the JVM's pauses
    logged to pause_log (jvm.pause_log_option), and any extra options. None when there is
    nothing to set (the plain server)."""
    opts = []
    if cpu_us:
        opts.append("-Dpeer.cpu_us=%d" % cpu_us)
    if stall_fraction and stall_us:
        opts += ["-Dpeer.stall_fraction=%g" % stall_fraction, "-Dpeer.stall_us=%d" % stall_us]
    if seed is not None:
        opts.append("-Dpeer.seed=%d" % seed)
    if pause_log:
        opts.append(jvm.pause_log_option(pause_log))
    opts += list(extra)
    return " ".join(opts) or None


class Peer:
    """One arm of a peer (java: default, direct, direct-drain, fixed:N, virtual; cpp: callback,
    async:N) listening on a free loopback port; pid is the server itself (taskset, run-KIND.sh
    and java21.sh exec). jdk (java only): 21 runs the arm on the JDK 21 (PEER_JDK=21), 17 on
    the system's java (PEER_JDK unset; `virtual` runs on 21 whatever it says), None leaves
    PEER_JDK as the environment has it."""

    def __init__(self, kind, arm, build, prefix=(), log_path=None, java_opts=None,
                 peers_dir=PEERS_DIR, jdk=None):
        self.kind, self.arm = kind, arm
        self.name = "%s %s" % (KINDS[kind][0], arm)
        self.port = ports.free_port()
        self.cmd = list(prefix) + [os.path.join(peers_dir, "run-%s.sh" % kind), str(self.port), arm]
        self.env = dict(os.environ, BUILD=build)
        if java_opts:
            self.env["JAVA_OPTS"] = java_opts
        if jdk == 21:
            self.env["PEER_JDK"] = "21"
        elif jdk is not None:
            self.env.pop("PEER_JDK", None)
        self.log_path = log_path or os.devnull
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid

    @property
    def target(self):
        return "127.0.0.1:%d" % self.port

    def command(self):
        return self.cmd

    def shown_command(self):
        jdk = ["PEER_JDK=21"] if self.env.get("PEER_JDK") == "21" else []
        return shlex.join(["env", "BUILD=" + self.env["BUILD"]] + jdk + self.cmd)

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:].strip()
        except OSError:
            return ""

    def start(self, timeout=30.0):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=paths.ROOT,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not daemon.listening(self.port):
            if self.proc.poll() is not None:
                raise PeerError("%s: %s before listening:\n%s" % (
                    self.name, daemon.describe_exit(self.proc.returncode), self.log_tail()))
            if time.monotonic() > deadline:
                self.kill()
                raise PeerError("%s: not listening on %d within %.0f s:\n%s" % (
                    self.name, self.port, timeout, self.log_tail()))
            time.sleep(0.05)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=15.0):
        """SIGTERM, then SIGKILL if it does not go: an error string or None. The exit status
        after SIGTERM is not checked (the JVM exits 143)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            return "had exited before the stop (%s)" % daemon.describe_exit(self.proc.returncode)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return "did not exit within %.0f s of SIGTERM; killed" % timeout
        return None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class JavaPeer(Peer):
    """One grpc-java arm (bench/model's, bench/study --witness's)."""

    def __init__(self, arm, build, **kw):
        super().__init__("java", arm, build, **kw)
