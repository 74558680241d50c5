"""Every dispatch arm in config/arms/ end to end, verified from /metrics (docs/dispatch-model.md, sections 5-8).

For each arm file: start echod with it, then
  1. N unary calls with grpcio, one channel, one after the other: total steps = 6N / 5N / 4N
     (merge_lookup_and_start, coalesce_end_stream), each step label as expected; the direct
     executor with an inline runner has 0 dispatches and 0 loop tasks, a serializing or pool
     arm between N and (steps per call)*N dispatches; every step ran on the loop thread
     (direct) or on a worker (pools); flush triggers match the policy; grpc-java's
     flow-control PINGs are sent where the arm turns them on;
  2. `h2load` unary calls over 4 connections: same step arithmetic, zero failures;
  3. bidi: 3 connections x 3 streams x 1000 messages each at once, every echo in order.
In each, echod_handoffs_total adds up: a worker received every dispatch that crossed threads (none
through `direct`), the loop every loop task, and each wake-up by a task batch is a loop hand-off
found parked (tests/integration/test_work_model.py, HandOffs, takes them across loads).

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_arms.py
(one arm: ... test_arms.py Arms.test_arm_fixed)
"""

import concurrent.futures
import glob
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402
import yaml  # noqa: E402

from echod_harness import (ROOT, SERVICE, SLOW, Daemon, EchoStub, echod_check_config,  # noqa: E402
                           main, metric_delta)
from test_h2load import (h2load)  # noqa: E402

ARMS_DIR = os.path.join(ROOT, "config", "arms")
EXPECTED_ARMS = ("direct", "direct-drain", "cached", "fixed", "workstealing", "virtual", "merged",
                 "coalesced", "merged-coalesced", "direct-serialized", "per-method", "fixed-unwrapped")
N = int(os.environ.get("ECHOD_ARMS_N", "200"))
N_H2LOAD = int(os.environ.get("ECHOD_ARMS_H2LOAD_N", "2000"))
BIDI_CONNS, BIDI_STREAMS, BIDI_MSGS = 3, 3, 1000
T = 60 * SLOW


def effective_config(path):
    r = echod_check_config(path)
    if r.returncode != 0:
        raise AssertionError("echod --check-config %s failed (%d): %s" % (path, r.returncode, r.stderr))
    return yaml.safe_load(r.stdout)


def uses_inline_runner(cfg):
    """docs/dispatch-model.md, section 3: serialize auto picks the inline runner for direct without per-method
    executors, as stock grpc-java does; every other executor gets the serializing executor."""
    d = cfg["dispatch"]
    if d["serialize"] != "auto":
        return False
    return cfg["executor"]["mode"] == "direct" and not d.get("per_method")


def uses_pass_through(cfg, cpus):
    """dispatch.unwrap_sequential (grpc-java PR #5521): a fixed pool of one thread as built
    (threads: 0 resolves to the CPUs echod may use) gets no wrapper, one dispatch per step."""
    d, ex = cfg["dispatch"], cfg["executor"]
    threads = ex.get("threads") or cpus
    return (d["serialize"] == "auto" and bool(d.get("unwrap_sequential")) and not d.get("per_method")
            and ex["mode"] == "fixed" and threads == 1)


def handoff_counts(m1, m0):
    """Hand-offs between two scrapes, by receiver and finding, beside what they should add up to:
    the dispatches to an executor that is not `direct` (its label's mode: "cached",
    "fixed:BidirectionalStreamingEcho"), the loop tasks, and the wake-ups by a task batch."""
    c = {(r, f): metric_delta(m1, m0, "echod_handoffs_total", receiver=r, found=f)
         for r in ("worker", "loop") for f in ("parked", "running")}
    c["crossing"] = sum(v - m0.metric("echod_executor_dispatches_total", **l)
                        for l, v in m1.series("echod_executor_dispatches_total")
                        if l["executor"].split(":")[0] != "direct")
    c["tasks"] = metric_delta(m1, m0, "echod_loop_tasks_total")
    c["task_wakeups"] = metric_delta(m1, m0, "echod_loop_wakeups_total", cause="task")
    return c


class Arms(unittest.TestCase):
    def check_handoffs(self, arm, m1, m0, calls, what):
        """A worker receives every dispatch that crossed threads, the loop every loop task (none on
        a direct arm); a task batch that woke the loop is its first task's hand-off, found parked."""
        c = handoff_counts(m1, m0)
        self.assertEqual(c["worker", "parked"] + c["worker", "running"], c["crossing"], "%s, %s: %r" % (arm, what, c))
        self.assertEqual(c["loop", "parked"] + c["loop", "running"], c["tasks"], "%s, %s: %r" % (arm, what, c))
        self.assertEqual(c["task_wakeups"], c["loop", "parked"], "%s, %s: %r" % (arm, what, c))
        print("  %s: hand-offs per call (%s), parked/running: worker %.2f/%.2f, loop %.2f/%.2f" % (
            arm, what, c["worker", "parked"] / calls, c["worker", "running"] / calls, c["loop", "parked"] / calls,
            c["loop", "running"] / calls))
        return c

    def test_every_expected_arm_exists(self):
        have = {os.path.basename(p)[:-5] for p in glob.glob(os.path.join(ARMS_DIR, "*.yaml"))}
        missing = set(EXPECTED_ARMS) - have
        self.assertFalse(missing, "missing arm files in config/arms: %s" % sorted(missing))

    def run_arm(self, path):
        cfg = effective_config(path)
        arm = os.path.basename(path)[:-5]
        merge = bool(cfg["dispatch"]["merge_lookup_and_start"])
        coalesce = bool(cfg["dispatch"]["coalesce_end_stream"])
        k = 6 - merge - coalesce
        mode = cfg["executor"]["mode"]
        flush = cfg["transport"]["flush"]
        inline = uses_inline_runner(cfg)
        wrapper = "inline" if inline else "serializing"

        with Daemon(config=path) as d:
            m0 = d.metrics()
            info = m0.series("echod_build_info")
            self.assertEqual(len(info), 1, info)
            labels = info[0][0]
            self.assertEqual(labels.get("arm"), cfg["arm"])
            self.assertEqual(labels.get("executor"), mode)
            self.assertEqual(labels.get("flush"), flush)
            self.assertEqual(labels.get("serialize"), cfg["dispatch"]["serialize"])
            self.assertEqual(labels.get("unwrap_sequential"), str(bool(cfg["dispatch"]["unwrap_sequential"])).lower())
            if uses_pass_through(cfg, int(m0.metric("echod_effective_cpus"))):
                wrapper = "pass-through"
            self.assertEqual(labels.get("merge_lookup_and_start"), str(merge).lower())
            self.assertEqual(labels.get("coalesce_end_stream"), str(coalesce).lower())

            # 1. N sequential unary calls on one channel.
            ch = d.channel()
            grpc.channel_ready_future(ch).result(timeout=T)
            stub = EchoStub(ch)
            m0 = d.metrics()
            for i in range(N):
                self.assertEqual(stub.UnaryEcho("%s-%d" % (arm, i), timeout=T), "%s-%d" % (arm, i))
            # A step is counted when submitted and counted again (echod_step_runs_total) when it
            # runs: a scrape taken while the last closed step runs can read the runs before it
            # and echod_calls_in_flight after it, so wait for the runs too.
            m1 = d.wait_metrics(
                lambda m: metric_delta(m, m0, "echod_call_steps_total", step="closed") >= N
                and m.metric("echod_calls_in_flight") == 0
                and metric_delta(m, m0, "echod_step_runs_total") >= k * N, what="%d closed steps" % N)

            def steps(step):
                return metric_delta(m1, m0, "echod_call_steps_total", step=step)

            total = metric_delta(m1, m0, "echod_call_steps_total")
            detail = {s: steps(s) for s in ("method_lookup", "start_call", "lookup_and_start",
                                            "on_ready", "messages_available", "half_closed",
                                            "messages_and_half_close", "closed")}
            self.assertEqual(total, k * N, "%s: steps %r, expected %d per call" % (arm, detail, k))
            if merge:
                self.assertEqual((detail["lookup_and_start"], detail["method_lookup"],
                                  detail["start_call"]), (N, 0, 0), detail)
            else:
                self.assertEqual((detail["lookup_and_start"], detail["method_lookup"],
                                  detail["start_call"]), (0, N, N), detail)
            if coalesce:
                self.assertEqual((detail["messages_and_half_close"], detail["messages_available"],
                                  detail["half_closed"]), (N, 0, 0), detail)
            else:
                self.assertEqual((detail["messages_and_half_close"], detail["messages_available"],
                                  detail["half_closed"]), (0, N, N), detail)
            self.assertEqual((detail["on_ready"], detail["closed"]), (N, N), detail)

            dispatches = metric_delta(m1, m0, "echod_executor_dispatches_total")
            loop_tasks = metric_delta(m1, m0, "echod_loop_tasks_total")
            self.assertTrue(m1.has("echod_executor_dispatches_total") or inline,
                            "no echod_executor_dispatches_total in /metrics")
            if inline:
                self.assertEqual(dispatches, 0, "%s: inline runner but %d dispatches" % (arm, dispatches))
                self.assertEqual(loop_tasks, 0, "%s: direct but %d loop tasks" % (arm, loop_tasks))
                self.assertGreater(metric_delta(m1, m0, "echod_inline_runs_total"), 0)
            elif wrapper == "pass-through":
                self.assertEqual(dispatches, k * N, "%s: pass-through, one dispatch per step" % arm)
            else:
                self.assertGreaterEqual(dispatches, N, "%s: %d dispatches for %d calls" % (arm, dispatches, N))
                self.assertLessEqual(dispatches, k * N, "%s: %d dispatches for %d calls" % (arm, dispatches, N))
            if mode == "virtual":
                started = metric_delta(m1, m0, "echod_executor_virtual_threads_started_total")
                self.assertEqual(started, dispatches, "%s: a virtual thread per dispatch" % arm)
                self.assertEqual(metric_delta(m1, m0, "echod_executor_virtual_thread_parks_total"), 0,
                                 "%s: parks without sleeps" % arm)
            if mode == "direct":
                self.assertEqual(loop_tasks, 0, "%s: direct executor but loop tasks" % arm)
            else:
                self.assertGreater(loop_tasks, 0, "%s: pool executor without loop tasks" % arm)

            # The handler ran on the expected kind of thread.
            self.assertTrue(m1.has("echod_step_runs_total"), "no echod_step_runs_total")
            runs = {t: metric_delta(m1, m0, "echod_step_runs_total", thread=t) for t in ("loop", "worker")}
            if mode == "direct":
                self.assertEqual(runs, {"loop": k * N, "worker": 0}, "%s: step runs" % arm)
            else:
                self.assertEqual(runs, {"loop": 0, "worker": k * N}, "%s: step runs" % arm)

            def flushes(trigger):
                return metric_delta(m1, m0, "echod_flushes_total", trigger=trigger)

            fl = {t: flushes(t) for t in ("loop_tail", "read_complete", "immediate", "loop_task")}
            if mode == "direct":
                self.assertEqual(fl["loop_task"], 0, "%s: flushes %r" % (arm, fl))
                self.assertGreater(fl[flush], 0, "%s: flushes %r" % (arm, fl))
                if flush == "loop_tail":
                    self.assertEqual((fl["read_complete"], fl["immediate"]), (0, 0),
                                     "%s: flushes %r" % (arm, fl))
                if flush == "read_complete":
                    self.assertEqual(fl["immediate"], 0, "%s: flushes %r" % (arm, fl))
            else:
                self.assertGreater(fl["loop_task"], 0, "%s: flushes %r" % (arm, fl))
            # grpc-java's flow-control PINGs (test_flow_pings): whatever the executor, grpcio's
            # calls bring them, and grpcio's acks let the next DATA frame bring another
            pings = metric_delta(m1, m0, "echod_flow_control_pings_total")
            if cfg["transport"]["flow_control_pings"]:
                self.assertGreater(pings, 1, "%s: flow_control_pings on, but %d PINGs for %d calls" % (arm, pings, N))
            else:
                self.assertEqual(pings, 0, arm)
            lbl = dict(grpc_service=SERVICE, grpc_method="UnaryEcho", grpc_type="unary")
            self.assertEqual(metric_delta(m1, m0, "grpc_server_handled_total", grpc_code="OK", **lbl), N)
            print("\n  %s: per unary call (grpcio, sequential): %.2f steps, %.2f dispatches, "
                  "%.2f loop tasks, %.2f PINGs, flushes %s" % (
                      arm, total / N, dispatches / N, loop_tasks / N, pings / N,
                      ", ".join("%s=%.2f" % (t, v / N) for t, v in fl.items() if v)))
            c = self.check_handoffs(arm, m1, m0, N, "grpcio, sequential")
            if inline or mode == "direct":
                self.assertEqual(sum(c[r, f] for r in ("worker", "loop") for f in ("parked", "running")), 0, c)

            # 2. `h2load` over 4 connections.
            if shutil.which("h2load"):
                res, out = h2load(d.grpc_port, N_H2LOAD, clients=4, streams=8, timeout=300 * SLOW)
                self.assertEqual((res["succeeded"], res["failed"], res["errored"]),
                                 (N_H2LOAD, 0, 0), out)
                m2 = d.wait_metrics(
                    lambda m: metric_delta(m, m1, "echod_call_steps_total", step="closed") >= N_H2LOAD
                    and m.metric("echod_calls_in_flight") == 0, what="h2load calls closed")
                self.assertEqual(metric_delta(m2, m1, "echod_call_steps_total"), k * N_H2LOAD)
                self.assertEqual(metric_delta(m2, m1, "grpc_server_handled_total", grpc_code="OK"),
                                 N_H2LOAD)
                d2 = metric_delta(m2, m1, "echod_executor_dispatches_total")
                fl2 = {t: metric_delta(m2, m1, "echod_flushes_total", trigger=t)
                       for t in ("loop_tail", "read_complete", "immediate", "loop_task")}
                print("  %s: per unary call (`h2load -c 4 -m 8`): %.2f dispatches, %.2f loop tasks, "
                      "flushes %s" % (arm, d2 / N_H2LOAD,
                                      metric_delta(m2, m1, "echod_loop_tasks_total") / N_H2LOAD,
                                      ", ".join("%s=%.3f" % (t, v / N_H2LOAD)
                                                for t, v in fl2.items() if v)))
                self.check_handoffs(arm, m2, m1, N_H2LOAD, "`h2load -c 4 -m 8`")
                if inline:
                    self.assertEqual(d2, 0)
                elif wrapper == "pass-through":
                    self.assertEqual(d2, k * N_H2LOAD, "%s: pass-through under load" % arm)
                elif mode != "direct":
                    # A pool's serializer coalesces under load: the loop submits method_lookup
                    # and start_call back to back, the second finds the drain pending.
                    self.assertGreaterEqual(d2, N_H2LOAD)
                    self.assertLess(d2, k * N_H2LOAD, "%s: serializing but nothing coalesced" % arm)
                else:
                    self.assertGreaterEqual(d2, N_H2LOAD)
                    self.assertLessEqual(d2, k * N_H2LOAD)
            else:
                m2 = m1

            # 3. bidi: several connections, several streams each, order checked.
            channels = [d.channel() for _ in range(BIDI_CONNS)]
            try:
                stubs = [EchoStub(c) for c in channels]

                def one(idx):
                    s = stubs[idx // BIDI_STREAMS]
                    msgs = ["%s-c%d-s%d-%d" % (arm, idx // BIDI_STREAMS, idx % BIDI_STREAMS, j)
                            for j in range(BIDI_MSGS)]
                    got = list(s.BidirectionalStreamingEcho(iter(msgs), timeout=T))
                    return got == msgs, len(got)

                with concurrent.futures.ThreadPoolExecutor(BIDI_CONNS * BIDI_STREAMS) as ex:
                    results = list(ex.map(one, range(BIDI_CONNS * BIDI_STREAMS)))
                self.assertTrue(all(ok for ok, _ in results), "%s: bidi out of order or short: %r"
                                % (arm, results))
            finally:
                for c in channels:
                    c.close()
            ch.close()
            nb = BIDI_CONNS * BIDI_STREAMS
            m3 = d.wait_metrics(lambda m: m.metric("echod_calls_in_flight") == 0
                                and metric_delta(m, m2, "grpc_server_handled_total") >= nb,
                                what="bidi calls done")
            blbl = dict(grpc_service=SERVICE, grpc_method="BidirectionalStreamingEcho")
            self.assertEqual(metric_delta(m3, m2, "grpc_server_handled_total", grpc_code="OK", **blbl), nb)
            self.assertEqual(metric_delta(m3, m2, "grpc_server_msg_received_total", **blbl), nb * BIDI_MSGS)
            self.assertEqual(metric_delta(m3, m2, "grpc_server_msg_sent_total", **blbl), nb * BIDI_MSGS)
            self.assertEqual(metric_delta(m3, m2, "echod_call_steps_total", step="closed"), nb)
            self.check_handoffs(arm, m3, m2, nb * BIDI_MSGS, "bidi, per message")
            if cfg["dispatch"].get("per_method"):
                used = {l.get("executor") for l, v in m3.series("echod_executor_dispatches_total") if v > 0}
                self.assertGreaterEqual(len(used), 2, "%s: per-method executor never dispatched: %r"
                                        % (arm, m3.series("echod_executor_dispatches_total")))


SCHED_OTHER, SCHED_BATCH = 0, 3  # policy, field 41 of /proc/PID/task/TID/stat


def thread_policies(pid):
    """{thread name: scheduling policy} of every thread of pid."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                stat = f.read()
        except OSError:
            continue  # a cached worker that just exited
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        out["%s/%s" % (name, tid)] = int(stat[stat.rindex(")") + 2:].split()[38])
    return out


class SchedPolicy(unittest.TestCase):
    """dispatch.sched_policy: every thread runs under the policy (the loop, the workers, admin), and
    the dispatch model's counts do not change with it: same steps and dispatches per call."""

    def run_fixed(self, policy):
        calls = 100
        with Daemon(config=os.path.join(ARMS_DIR, "fixed.yaml"),
                    sets=["dispatch.sched_policy=" + policy, "executor.threads=2"]) as d:
            m0 = d.metrics()
            ch = d.channel()
            stub = EchoStub(ch)
            for i in range(calls):
                stub.UnaryEcho("p%d" % i, timeout=T)
            ch.close()
            m1 = d.wait_metrics(lambda m: metric_delta(m, m0, "echod_call_steps_total", step="closed") >= calls,
                                what="calls closed")
            labels = m1.series("echod_build_info")[0][0]
            self.assertEqual(labels.get("sched_policy"), policy)
            policies = thread_policies(d.proc.pid)
            self.assertGreaterEqual(len([n for n in policies if n.startswith("echod-fixed")]), 2, policies)
            want = SCHED_BATCH if policy == "batch" else SCHED_OTHER
            self.assertEqual({n: p for n, p in policies.items() if p != want}, {}, "threads off %s" % policy)
            return (metric_delta(m1, m0, "echod_call_steps_total"),
                    metric_delta(m1, m0, "echod_executor_dispatches_total"))

    def test_batch_and_other_count_the_same(self):
        other = self.run_fixed("other")
        batch = self.run_fixed("batch")
        # fixed, 2 threads: a serializing executor, 6 steps per call and N..6N dispatches (how
        # many steps one drain takes depends on timing, under either policy)
        for steps, dispatches in (other, batch):
            self.assertEqual(steps, 600)
            self.assertTrue(100 <= dispatches <= 600, (other, batch))


def live_task_switches(pid):
    """Voluntary + involuntary context switches of pid's live threads (/proc/PID/task/*/status),
    as bench/compare reads the peers: an exited thread's count is gone from here."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                total += sum(int(line.split()[1]) for line in f
                             if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")))
        except OSError:
            continue  # a cached worker that just exited
    return total


class ContextSwitches(unittest.TestCase):
    """echod_context_switches_total moves with hand-offs and keeps the switches of threads that
    have exited (a cached pool's workers age out after keep_alive)."""

    def test_counts_move_and_survive_thread_exit(self):
        calls = 200
        with Daemon(config=os.path.join(ARMS_DIR, "cached.yaml"), sets=["executor.keep_alive=200ms"]) as d:
            ch = d.channel()
            stub = EchoStub(ch)
            grpc.channel_ready_future(ch).result(timeout=T)
            m0 = d.metrics()
            for i in range(calls):
                stub.UnaryEcho("cs%d" % i, timeout=T)
            m1 = d.wait_metrics(lambda m: metric_delta(m, m0, "echod_call_steps_total", step="closed") >= calls,
                                what="calls closed")
            vol = metric_delta(m1, m0, "echod_context_switches_total", kind="voluntary")
            # One call at a time: between calls the loop blocks in epoll_wait and the worker parks.
            self.assertGreaterEqual(vol, calls, "voluntary switches for %d sequential pool calls" % calls)
            self.assertGreaterEqual(metric_delta(m1, m0, "echod_context_switches_total", kind="involuntary"), 0)
            ch.close()
            base = m0.metric("echod_threads") - m0.metric("echod_executor_threads", executor="cached")
            d.wait_metrics(lambda m: m.metric("echod_executor_threads", executor="cached") == 0
                           and len(os.listdir("/proc/%d/task" % d.proc.pid)) == base,
                           timeout=30 * SLOW, what="cached workers aged out and gone")
            # Live threads first: the scrape after it only adds to what they had.
            live = live_task_switches(d.proc.pid)
            after = d.metrics().metric("echod_context_switches_total")
            self.assertGreaterEqual(after, m1.metric("echod_context_switches_total"))
            print("\n  cached, %d sequential calls: %.2f voluntary switches per call; after the workers "
                  "exited: %d counted, %d on live threads" % (calls, vol / calls, after, live))
            # The workers that exited parked at least once each: their switches stay counted.
            self.assertGreater(after, live, "exited workers' switches lost (metric %d, live threads %d)"
                               % (after, live))


def _make_test(path):
    def test(self):
        self.run_arm(path)
    test.__doc__ = "arm %s" % os.path.basename(path)
    return test


for _path in sorted(glob.glob(os.path.join(ARMS_DIR, "*.yaml"))):
    setattr(Arms, "test_arm_" + os.path.basename(_path)[:-5].replace("-", "_"), _make_test(_path))


if __name__ == "__main__":
    main()
