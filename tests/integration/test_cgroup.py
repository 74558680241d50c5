"""echod in a real cgroup v1 cpu cgroup with a quota of one CPU: echod_effective_cpus is 1, a
`threads: 0` pool has one thread, and the throttling counters come from the v1 cpu.stat.

Needs root and the cgroup v1 cpu controller mounted (as on hybrid hosts: /sys/fs/cgroup/cpu);
skipped with the reason otherwise. The reader itself, on fixture trees for v2, v1, hybrid,
nested, unlimited and unreadable files, is tests/unit/test_cgroup.c.
"""

import contextlib
import os
import shlex
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from echod_harness import SLOW, Daemon, EchoStub  # noqa: E402
from echodlib import cgroup  # noqa: E402  (echod_harness put tools/ on sys.path)


def v1_cpu_mount():
    """The mount point of the v1 hierarchy holding the cpu controller, or None."""
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype, opts = line.split()[:4]
            if fstype == "cgroup" and "cpu" in opts.split(","):
                return mnt
    return None


def own_v1_path(mount):
    """Our cgroup in that hierarchy, from /proc/self/cgroup."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            if "cpu" in controllers.split(","):
                return path
    return "/"


class CgroupDaemon(Daemon):
    """A Daemon whose process enters `procs` (a cgroup.procs file) before exec'ing echod, so
    every thread it starts is in that cgroup."""

    def __init__(self, procs, **kw):
        super().__init__(**kw)
        self.procs = procs

    def command(self):
        return ["/bin/sh", "-c", 'echo $$ > %s && exec "$@"' % shlex.quote(self.procs), "sh"] + super().command()


def v1_quota_cgroup(test, name):
    """A new v1 cpu cgroup below ours with a quota of one CPU, removed when `test` ends; its
    directory. Skips the test without root or a v1 cpu controller (test_readme uses it too)."""
    if os.geteuid() != 0:
        test.skipTest("needs root to make a cgroup")
    mount = v1_cpu_mount()
    if mount is None:
        test.skipTest("no cgroup v1 cpu controller mounted (a pure cgroup v2 host)")
    parent = os.path.join(mount, own_v1_path(mount).lstrip("/"))
    path = os.path.join(parent, "echod-%s-%d" % (name, os.getpid()))

    def remove():
        with contextlib.suppress(OSError):
            os.rmdir(path)

    try:
        os.mkdir(path)
        test.addCleanup(remove)
        with open(os.path.join(path, "cpu.cfs_period_us")) as f:
            period = int(f.read())
        with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
            f.write("%d\n" % period)  # one CPU
    except OSError as e:
        test.skipTest("cannot make a v1 cpu cgroup with a quota under %s: %s" % (parent, e))
    return path


class V1Quota(unittest.TestCase):
    def setUp(self):
        self.dir = v1_quota_cgroup(self, "test")

    def cpu_stat(self):
        with open(os.path.join(self.dir, "cpu.stat")) as f:
            return {k: int(v) for k, v in (line.split() for line in f)}

    def wait_for_a_period(self):
        """The cgroup's nr_periods once it is above 0. The period timer was started by the
        calls' CPU use and fires at the period's end (100 ms by default), so this is bounded by
        one period; the deadline only turns a kernel that never counts into a clear failure."""
        with open(os.path.join(self.dir, "cpu.cfs_period_us")) as f:
            period_s = int(f.read()) / 1e6
        deadline = time.monotonic() + 20 * period_s * SLOW
        while True:
            n = self.cpu_stat()["nr_periods"]
            if n > 0:
                return n
            if time.monotonic() > deadline:
                self.fail("the cgroup's cpu.stat counted no CFS period %.1f s after 40 ms of work"
                          % (20 * period_s * SLOW))
            time.sleep(period_s / 10)

    def test_one_cpu_quota(self):
        cpus = len(os.sched_getaffinity(0))
        sets = ["executor.mode=fixed", "executor.threads=0"]
        with CgroupDaemon(os.path.join(self.dir, "cgroup.procs"), sets=sets) as d:
            with open(os.path.join(self.dir, "cgroup.procs")) as f:
                self.assertIn(str(d.proc.pid), f.read().split(), "echod is in the test cgroup")
            with d.channel() as ch:
                stub = EchoStub(ch)
                for _ in range(20):
                    self.assertEqual(stub.UnaryEcho("q", timeout=20 * SLOW,
                                                    metadata=[("echod-cpu-us", "2000")]), "q")
            # The kernel adds to nr_periods when a CFS period's timer fires, up to one period
            # after the work: a scrape straight after the calls can rightly read 0 (CI did).
            # Wait for the cgroup's own cpu.stat to count a period, then scrape.
            kernel_periods = self.wait_for_a_period()
            m = d.metrics()
            self.assertEqual(m.metric("echod_effective_cpus"), 1,
                             "a 1-CPU v1 quota on a %d-CPU machine" % cpus)
            self.assertEqual(m.metric("echod_executor_threads"), 1, "threads: 0 sizes the pool to 1")
            self.assertEqual(m.metric("echod_cgroup_info", cpu="v1"), 1)
            self.assertEqual(m.metric("echod_cgroup_cpu_quota_cpus"), 1)
            # the v1 cpu.stat of our cgroup: 40 ms of handler CPU ran in CFS periods
            self.assertTrue(m.has("echod_cgroup_cpu_throttled_periods_total"), "v1 throttling counters")
            # what the kernel said before the scrape, at least: echod reads cpu.stat per scrape
            self.assertGreaterEqual(m.metric("echod_cgroup_cpu_periods_total"), kernel_periods)

        # the same machine without the quota: the affinity mask
        with Daemon(sets=sets) as d:
            m = d.metrics()
            self.assertEqual(m.metric("echod_effective_cpus"), cpus)
            self.assertEqual(m.metric("echod_executor_threads"), cpus)



def pids_in(procs):
    with open(procs) as f:
        return f.read().split()


class StudyQuota(unittest.TestCase):
    """echodlib.cgroup.CpuQuota, the group bench/study and bench/model run echod in under
    --cpu-model quota. Removing it while a process is still in it must say so, naming the
    process: it used to give up after 5 s without a word, and a group left by an earlier run
    was found only by hand."""

    def test_remove_names_what_is_left(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to make a cgroup")
        group, why = cgroup.CpuQuota.create("echod-test-remove", 1.0)
        if group is None:
            self.skipTest(why)
        procs = os.path.join(group.path, "cgroup.procs")
        p = subprocess.Popen(group.exec_prefix() + ["sleep", "60"])
        try:
            deadline = time.monotonic() + 10 * SLOW
            while str(p.pid) not in pids_in(procs):
                self.assertLess(time.monotonic(), deadline, "sleep never joined %s" % group.path)
                time.sleep(0.02)
            why = group.remove()
            self.assertIsNotNone(why, "the group went while a process was in it")
            self.assertIn(group.path, why)
            self.assertIn("processes still in it: %d" % p.pid, why)
            self.assertTrue(os.path.isdir(group.path))
        finally:
            p.kill()
            p.wait()
        self.assertIsNone(group.remove())
        self.assertFalse(os.path.exists(group.path))


if __name__ == "__main__":
    unittest.main(verbosity=2)
