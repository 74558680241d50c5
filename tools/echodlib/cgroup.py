"""A CPU-quota cgroup for one process: a plain Kubernetes CPU limit (CFS bandwidth) on this
machine, on cgroup v1 (the cpu controller mounted on its own, as on hybrid hosts) or v2.

    g = CpuQuota.create("echod-study", cpus=1.0)   # needs root; None + why when impossible
    prefix = g.exec_prefix()                        # sh that joins the group, then exec
    why = g.remove()                                # None, or why the group is still there

Throttling is read from echod's own echod_cgroup_cpu_* metrics (bench/study), as a cluster
user would see it, not from here.
"""

import os
import time

V1_CPU = "/sys/fs/cgroup/cpu"
V2_ROOT = "/sys/fs/cgroup"
PERIOD_US = 100000


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read()


class CpuQuota:
    def __init__(self, path, version, cpus):
        self.path = path
        self.version = version
        self.cpus = cpus

    @classmethod
    def create(cls, name, cpus=1.0):
        """(CpuQuota, None) or (None, why not)."""
        quota = int(PERIOD_US * cpus)
        name = "%s-%d" % (name, os.getpid())
        try:
            if os.path.exists(os.path.join(V1_CPU, "cpu.cfs_quota_us")):
                path = os.path.join(V1_CPU, name)
                os.makedirs(path, exist_ok=True)
                _write(os.path.join(path, "cpu.cfs_period_us"), str(PERIOD_US))
                _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota))
                return cls(path, 1, cpus), None
            ctl = os.path.join(V2_ROOT, "cgroup.controllers")
            if os.path.exists(ctl) and "cpu" in _read(ctl).split():
                _write(os.path.join(V2_ROOT, "cgroup.subtree_control"), "+cpu")
                path = os.path.join(V2_ROOT, name)
                os.makedirs(path, exist_ok=True)
                _write(os.path.join(path, "cpu.max"), "%d %d" % (quota, PERIOD_US))
                return cls(path, 2, cpus), None
        except OSError as e:
            return None, "cannot make a CPU-quota cgroup: %s (run as root)" % e
        return None, "no cgroup cpu controller mounted (v1 %s or v2 %s)" % (V1_CPU, V2_ROOT)

    def describe(self):
        if self.version == 1:
            return "cgroup v1 %s: cpu.cfs_quota_us %d / cpu.cfs_period_us %d" % (
                self.path, int(PERIOD_US * self.cpus), PERIOD_US)
        return "cgroup v2 %s: cpu.max %d %d" % (self.path, int(PERIOD_US * self.cpus), PERIOD_US)

    def exec_prefix(self):
        """A command prefix that moves itself into the group and execs the rest (the pid the
        caller sees is the program's own)."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path]

    def remove(self):
        """None once the group is gone, else why not, naming the processes still in it. Its
        last process may still be leaving (a daemon just reaped), so it tries for 5 s; a group
        left behind keeps its quota for whatever is moved into it by name later."""
        err = None
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return None
            except FileNotFoundError:
                return None
            except OSError as e:
                err = e
                time.sleep(0.1)
        try:
            pids = _read(os.path.join(self.path, "cgroup.procs")).split()
        except OSError:
            pids = []
        return "cannot remove the cgroup %s after 5 s: %s; processes still in it: %s" % (
            self.path, err.strerror, ", ".join(pids) or "none")
