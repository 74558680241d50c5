"""The grpc-java peer of ../shared/peers (the grpc-java 1.41 server of echod's wire contract, built
from Debian packages): building it, and running one arm of it on a pinned CPU, for benchmarks
that put echod's figures beside grpc-java's (bench/model; bench/compare keeps its own, older
launcher for both peers).

    peer = JavaPeer("direct", build="/tmp/echod-peers", prefix=["taskset", "-c", "1"]).start()
    ... peer.port, peer.pid ...
    peer.stop()

The peer needs Debian's openjdk-17-jdk-headless, libgrpc-java, libnetty-java, libguava-java,
libperfmark-java and libgoogle-gson-java; `unusable()` says which are missing.
"""

import os
import shutil
import signal
import subprocess
import time

from . import daemon, paths, ports

PEERS_DIR = os.path.normpath(os.path.join(paths.ROOT, "..", "shared", "peers"))
JAVA_PACKAGES = ["openjdk-17-jdk-headless", "libgrpc-java", "libnetty-java", "libguava-java",
                 "libperfmark-java", "libgoogle-gson-java"]


def unusable(peers_dir=PEERS_DIR):
    """None when the Java peer can be built here, else why not."""
    if not os.path.isdir(os.path.join(peers_dir, "java")):
        return "no grpc-java peer at %s" % peers_dir
    if shutil.which("javac") is None:
        return "no javac (openjdk-17-jdk-headless)"
    if not os.path.exists("/usr/share/java/grpc-netty.jar"):
        return "grpc-java jars missing (apt-get install %s)" % " ".join(JAVA_PACKAGES[1:])
    return None


def build(build_dir, peers_dir=PEERS_DIR):
    """Compiles the peer into build_dir (once; again when the source is newer)."""
    out = os.path.join(build_dir, "java", "EchoPeer.class")
    src = os.path.join(peers_dir, "java", "EchoPeer.java")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        subprocess.run([os.path.join(peers_dir, "build-java.sh")], check=True, env=dict(os.environ, BUILD=build_dir),
                       stdout=subprocess.DEVNULL)
    return out


class JavaPeer:
    """One grpc-java arm (default, direct, fixed:N) listening on a free loopback port; pid is the
    JVM itself (taskset and run-java.sh exec)."""

    def __init__(self, arm, build, prefix=(), log_path=None, java_opts=None, peers_dir=PEERS_DIR):
        self.arm = arm
        self.port = ports.free_port()
        self.cmd = list(prefix) + [os.path.join(peers_dir, "run-java.sh"), str(self.port), arm]
        self.env = dict(os.environ, BUILD=build)
        if java_opts:
            self.env["JAVA_OPTS"] = java_opts
        self.log_path = log_path or os.devnull
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid

    def start(self, timeout=30.0):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not daemon.listening(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError("grpc-java %s: %s before listening (%s)" % (
                    self.arm, daemon.describe_exit(self.proc.returncode), self.log_path))
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("grpc-java %s: not listening within %.0f s" % (self.arm, timeout))
            time.sleep(0.05)
        return self

    def stop(self, timeout=15.0):
        """SIGTERM (the JVM exits 143), then SIGKILL if it does not go."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
