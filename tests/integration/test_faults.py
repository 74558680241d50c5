"""Faults: clients killed with SIGKILL in the middle of their streams, under load, many
times, for every executor mode. Afterwards nothing may be left behind: no call in flight, no
connection, open fds and threads back to their baseline, RSS near it, no executor thread stuck
busy, and every method still answers.

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_faults.py
"""

import os
import random
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import SANITIZER, SLOW, Daemon, EchoStub, main  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
ROUNDS = 4 if SANITIZER else 6
CLIENTS = 3  # killed together in each round

# A client process: every method at once on one channel, streams that never end by themselves,
# unary calls with a little synthetic work (so pool workers are inside handlers when the
# connection dies). It prints "ready" once responses flow, then runs until it is killed.
# argv[3], if given, is an echod-sleep-us for every call but the server-streaming one, and 16
# more unary calls sleep it at once (a virtual thread parks: killed mid-sleep, it must wake).
CLIENT = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import grpc
from echod_harness import EchoStub
ch = grpc.insecure_channel(sys.argv[2], options=[("grpc.use_local_subchannel_pool", 1)])
stub = EchoStub(ch)
flowing = threading.Event()
sleep = (("echod-sleep-us", sys.argv[3]),) if len(sys.argv) > 3 else ()

def forever(tag):
    i = 0
    while True:
        yield "%s-%d-%s" % (tag, i, "x" * (i % 200))
        i += 1

def bidi(tag):
    while True:
        for n, _ in enumerate(stub.BidirectionalStreamingEcho(forever(tag), metadata=sleep)):
            if n == 20:
                flowing.set()

def unary():
    md = (("echod-cpu-us", "300"),) + sleep
    while True:
        stub.UnaryEcho("u" * 100, metadata=md)
        flowing.set()

def server_streaming():
    while True:
        list(stub.ServerStreamingEcho("s" * 1000))

def client_streaming():
    while True:
        stub.ClientStreamingEcho(iter(["c"] * 50))

workers = [lambda: bidi("a"), lambda: bidi("b"), unary, unary, server_streaming, client_streaming]
if sleep:
    workers += [unary] * 16
for w in workers:
    threading.Thread(target=w, daemon=True).start()
flowing.wait(30)
print("ready", flush=True)
time.sleep(3600)
"""


def spawn_client(d, sleep_us=None):
    extra = [str(sleep_us)] if sleep_us else []
    return subprocess.Popen([sys.executable, "-c", CLIENT, HERE, "127.0.0.1:%d" % d.grpc_port] + extra,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


def snapshot(m):
    return {
        "calls": m.metric("echod_calls_in_flight"),
        "connections": m.metric("echod_connections"),
        "fds": m.metric("process_open_fds"),
        "threads": m.metric("echod_threads"),
        "busy": m.metric("echod_executor_busy_threads"),
        "queued": m.metric("echod_executor_queue_depth"),
        "rss": m.metric("process_resident_memory_bytes"),
        "virtual": m.metric("echod_executor_virtual_threads") if m.has("echod_executor_virtual_threads") else 0,
    }


class KillClients(unittest.TestCase):
    def settle(self, d, threads=None, no_workers=False):
        """Waits until the kills are fully absorbed; returns that scrape."""
        def quiet(m):
            s = snapshot(m)
            return (s["calls"] == 0 and s["connections"] == 0 and s["busy"] == 0 and s["queued"] == 0
                    and s["virtual"] == 0
                    and (threads is None or s["threads"] == threads)
                    and (not no_workers or m.metric("echod_executor_threads") == 0))
        what = "no call, connection or busy worker left" + ("" if threads is None else ", %d threads" % threads)
        # A scrape is not a snapshot: process_open_fds is read before the gauges, so the first
        # quiet scrape can still count the descriptor of a connection that closed between the two
        # reads (memcheck, CI of 2026-12-04: a baseline of 22 that a quiet server, at 21, never
        # came back to). The next scrape read its descriptors after that one saw no connection.
        d.wait_metrics(quiet, 30 * SLOW, what)
        return snapshot(d.wait_metrics(quiet, 30 * SLOW, what))

    def kill_round(self, d, rnd, sleep_us=None):
        procs = [spawn_client(d, sleep_us) for _ in range(CLIENTS)]
        try:
            for p in procs:
                line = p.stdout.readline()
                self.assertEqual(line.strip(), b"ready", "a client never got going")
            m = d.metrics()
            self.assertGreaterEqual(m.metric("echod_calls_in_flight"), 2 * CLIENTS, "bidi streams not in flight")
            time.sleep(rnd.uniform(0.05, 0.4))  # somewhere in the middle of the streams
        finally:
            for p in procs:
                p.send_signal(signal.SIGKILL)
            for p in procs:
                p.wait()
                p.stdout.close()

    def check_methods(self, d):
        with d.channel() as ch:
            stub = EchoStub(ch)
            t = 20 * SLOW
            self.assertEqual(stub.UnaryEcho("after", timeout=t), "after")
            self.assertEqual(list(stub.ServerStreamingEcho("s", timeout=t)), ["s"] * 10)
            self.assertEqual(stub.ClientStreamingEcho(iter(["a", "b"]), timeout=t), "ab")
            self.assertEqual(list(stub.BidirectionalStreamingEcho(iter(["x", "y"]), timeout=t)), ["x", "y"])

    def run_mode(self, mode, extra=(), sleep_us=None):
        sets = ["executor.mode=%s" % mode] + list(extra)
        rnd = random.Random(mode)
        with Daemon(sets=sets) as d:
            # the threads of an idle daemon: its pools start with it, cached workers come later
            start_threads = d.metrics().metric("echod_threads")
            # one round first: pools, arenas and caches reach their working size
            self.kill_round(d, rnd, sleep_us)
            # cached workers come and go (keep_alive): compare with none alive. A worker leaves
            # echod_executor_threads before its thread is gone (slow under valgrind), so the
            # thread count must come back to the start's as well.
            base = self.settle(d, threads=start_threads, no_workers=mode == "cached")
            for _ in range(ROUNDS):
                self.kill_round(d, rnd, sleep_us)
            after = self.settle(d, threads=base["threads"])
            # Both counts come from a scrape after a quiet one (settle). A count still apart is
            # waited for, as a descriptor may close late; a leaked one would stay, so it is then
            # compared exactly.
            if after["fds"] != base["fds"]:
                after = snapshot(d.wait_metrics(lambda m: snapshot(m)["fds"] == base["fds"], 10 * SLOW,
                                                "open descriptors back to %d" % base["fds"]))
            grew = after["rss"] - base["rss"]
            sys.stderr.write("\n  %s: %d x %d clients killed; fds %d -> %d, threads %d -> %d, "
                             "RSS %.1f -> %.1f MiB\n" % (mode, ROUNDS, CLIENTS, base["fds"], after["fds"],
                                                         base["threads"], after["threads"],
                                                         base["rss"] / MiB, after["rss"] / MiB))
            self.assertEqual(after["fds"], base["fds"], "open fds")
            self.assertEqual(after["threads"], base["threads"], "threads")
            # malloc keeps some of what was freed; a leak per killed call would be far more. ASan's
            # quarantine holds freed memory on purpose: there LeakSanitizer, at exit, is the check.
            if not SANITIZER:
                self.assertLess(grew, 6 * MiB, "RSS grew by %.1f MiB" % (grew / MiB))
            self.check_methods(d)
            # every killed call closed: the gauge settles at 0 (a call's `closed` step runs just
            # after its trailers are written, so the last check's call may still be finishing)
            d.wait_idle()

    def test_direct(self):
        self.run_mode("direct")

    def test_fixed(self):
        self.run_mode("fixed", ["executor.threads=2"])

    def test_cached(self):
        # idle workers leave after 300 ms, so "back to baseline" is visible within the test
        self.run_mode("cached", ["executor.keep_alive=300ms"])

    def test_workstealing(self):
        self.run_mode("workstealing", ["executor.threads=2"])

    def test_virtual_killed_mid_sleep(self):
        # every call sleeps 50 ms, so most virtual threads are parked when their client dies
        self.run_mode("virtual", ["executor.threads=2"], sleep_us=50000)


if __name__ == "__main__":
    main()
