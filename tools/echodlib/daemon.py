"""Starting and stopping echod on free loopback ports: one launcher for the tests, bench/* and
bench/study.

    d = Echod(config="config/arms/direct.yaml", sets=["log.level=warn"],
              prefix=["taskset", "-c", "0"]).start()
    ... d.grpc_target, d.admin_port, d.scrape() ...
    rc = d.stop()

The prefix (taskset, a cgroup entry, valgrind) must exec echod, so that d.pid is echod's own
pid and its CPU can be read from /proc. stdout and stderr go to one log file (a temporary file
unless log_path is given).

A server under test, echod here or a peer (echodlib.peers), offers the same few things to a
benchmark: start() (raising a ServerError), pid, port and target (its gRPC listener), proc,
alive(), stop() (an error string, or None), log_tail() and shown_command().
"""

import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time

from . import paths, ports, prom


class ServerError(Exception):
    """A server under test did not start."""


class EchodError(ServerError):
    pass


def describe_exit(rc):
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit status %d" % rc


def listening(port):
    """True when some socket listens on port (IPv4 or IPv6 table), without connecting."""
    want = ":%04X" % port
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if len(cols) > 3 and cols[1].endswith(want) and cols[3] == "0A":
                        return True
        except OSError:
            pass
    return False


class Echod:
    """One echod process; ready when /readyz answers 200 and the gRPC port accepts."""

    error_class = EchodError

    def __init__(self, config=None, sets=(), args=(), prefix=(), env=None, start_timeout=20.0,
                 binary=None, log_path=None, cwd=None):
        self.config = config
        self.sets = list(sets)
        self.args = list(args)
        self.prefix = list(prefix)
        self.env = env
        self.start_timeout = start_timeout
        self.binary = binary or paths.ECHOD_BIN
        self.log_path = log_path
        self.cwd = cwd or paths.ROOT
        self.proc = None
        self.grpc_port, self.admin_port = ports.free_ports(2)  # command() works before start()
        self.returncode = None
        self._stderr = None
        self.stderr_path = None

    # -- life cycle

    def extra_sets(self):
        """--set values a subclass adds after the listeners (before the caller's sets)."""
        return []

    def command(self):
        cmd = self.prefix + [self.binary]
        if self.config:
            cmd += ["--config", self.config]
        cmd += ["--set", "listen.grpc=127.0.0.1:%d" % self.grpc_port,
                "--set", "listen.admin=127.0.0.1:%d" % self.admin_port]
        for s in self.extra_sets() + self.sets:
            cmd += ["--set", s]
        return cmd + self.args

    def _open_log(self):
        if self.log_path:
            self._stderr = open(self.log_path, "ab")
            self.stderr_path = self.log_path
        else:
            self._stderr = tempfile.NamedTemporaryFile(prefix="echod-stderr-", suffix=".log",
                                                       delete=False)
            self.stderr_path = self._stderr.name

    def started(self):
        """Called once the process exists (before it is ready)."""

    def start(self):
        last = None
        for attempt in range(3):  # a free port can be taken by someone else in between
            if attempt:
                self.grpc_port, self.admin_port = ports.free_ports(2)
            self._open_log()
            env = dict(os.environ)
            if self.env:
                env.update(self.env)
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=self._stderr, stderr=self._stderr, env=env,
                                         cwd=self.cwd)
            self.started()
            try:
                self._wait_ready()
                return self
            except EchodError as e:
                last = e
                if self.proc.poll() is not None and "in use" in self.stderr_text():
                    continue  # port race: try other ports
                self.kill()
                raise
        raise last

    def _wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                raise self.error_class("echod exited with %s before it was ready:\n%s"
                                       % (self.proc.returncode, self.stderr_text()))
            try:
                if self.ready():
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise self.error_class("echod not ready after %.0fs:\n%s" % (self.start_timeout,
                                                                     self.stderr_text()))

    def ready(self):
        """True once echod serves; OSError counts as not yet."""
        # /readyz, not /healthz: 200 only once every loop and executor thread runs
        # (a thread count scraped before that is short of them)
        status, _ = prom.http_get(self.admin_port, "/readyz", timeout=1.0)
        if status != 200:
            return False
        with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=1.0):
            return True

    def signal_and_wait(self, sig=signal.SIGTERM, timeout=30.0):
        """Signals echod and waits for it: (exit status, None) or (status after SIGKILL, why)."""
        if self.proc is None:
            return None, "not started"
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.returncode = self.proc.wait(timeout=timeout)
            return self.returncode, None
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait()
            return self.returncode, "did not exit within %ss of %s; killed" % (
                timeout, signal.Signals(sig).name)

    def stop(self, timeout=30.0):
        """SIGTERM; returns an error string, or None when echod exited 0. Closes the log."""
        rc, why = self.signal_and_wait(timeout=timeout)
        self.close_log()
        if why:
            return why
        if rc != 0:
            return "%s after SIGTERM (expected exit status 0)" % describe_exit(rc)
        return None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.returncode = self.proc.wait()

    def close_log(self):
        if self._stderr:
            self._stderr.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid

    def stderr_text(self):
        if not self.stderr_path:
            return ""
        try:
            with open(self.stderr_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, n=3000):
        return self.stderr_text()[-n:].strip()

    # -- talking to it

    @property
    def grpc_target(self):
        return "127.0.0.1:%d" % self.grpc_port

    port = property(lambda self: self.grpc_port)
    target = grpc_target

    def shown_command(self):
        return shlex.join(self.command())

    def scrape(self, timeout=10.0):
        """The text of /metrics."""
        return prom.scrape(self.admin_port, timeout)
