"""CPU time and memory of a process (and of the machine's CPUs) from the kernel.

A process's CPU is read two ways: the process CPU-time clock of another pid
(clock_getcpuclockid(pid), ns resolution) and /proc/PID/stat utime/stime (all threads, live
and exited, in clock ticks of usually 10 ms: too coarse for a short run at µs per call, but it
splits user from system time).
"""

import os
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_clock(pid):
    """utime+stime of the whole process in seconds, ns resolution; None when unreadable.
    MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) is the clock id of another process."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, OverflowError):
        return None


def cpu_proc_stat(pid):
    """(utime, stime) in seconds from /proc/PID/stat fields 14 and 15."""
    with open("/proc/%d/stat" % pid) as f:
        data = f.read()
    rest = data[data.rindex(")") + 2:].split()   # rest[0] is field 3 (state)
    return int(rest[14 - 3]) / CLK_TCK, int(rest[15 - 3]) / CLK_TCK


def task_switches(pid):
    """(voluntary, involuntary, threads) summed over pid's live threads from
    /proc/PID/task/*/status: the same reading for every server (a thread that exits takes its
    count along; echod's own /metrics figure keeps them, see echod_context_switches_total)."""
    vol = invol = n = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
            n += 1
        except (OSError, ValueError, IndexError):
            continue  # a thread that just exited
    return vol, invol, n


def cpu_sample(pid):
    """{"clock": s or None, "utime", "stime", "stat": utime+stime (None when unreadable),
    "csw": task_switches(pid)}."""
    try:
        ut, st = cpu_proc_stat(pid)
    except (OSError, ValueError, IndexError):
        ut = st = None
    return {"clock": cpu_clock(pid), "utime": ut, "stime": st,
            "stat": None if ut is None else ut + st, "csw": task_switches(pid)}


def csw_delta(a, b, n):
    """Context switches per unit (call, message) between two samples: (all, voluntary,
    involuntary, threads at the end), or None."""
    if not n or a.get("csw") is None or b.get("csw") is None:
        return None
    v, i = b["csw"][0] - a["csw"][0], b["csw"][1] - a["csw"][1]
    return {"per": (v + i) / n, "vol": v / n, "invol": i / n, "threads": b["csw"][2]}


def cpu_delta(a, b):
    """CPU seconds between two cpu_sample()s and which source gave them: (s, 'clock'|'stat')."""
    if a["clock"] is not None and b["clock"] is not None:
        return b["clock"] - a["clock"], "clock"
    if a["utime"] is not None and b["utime"] is not None:
        return b["stat"] - a["stat"], "stat"
    return None, None


class CpuWindow:
    """A process's CPU over one measured window, the one way every tool reads it: opened just
    before the load, closed just after.

        w = CpuWindow(pid, machine=True)
        ... the load ...
        w.close()
        w.cpu_s, w.source, w.sys_fraction, w.wall_s, w.csw(calls), w.busy()

    cpu_s is the process CPU clock's delta (ns), or /proc/PID/stat's when the clock cannot be
    read (source says which); with machine, busy() is each CPU's busy share of the window (any
    process: what tells a disturbed run)."""

    def __init__(self, pid, machine=False):
        self.pid = pid
        self.before = cpu_sample(pid)
        self._cpus0 = cpu_times() if machine else None
        self._t0 = time.monotonic()
        self.after = None

    def close(self):
        self.wall_s = time.monotonic() - self._t0
        self.after = cpu_sample(self.pid)
        self._cpus1 = cpu_times() if self._cpus0 is not None else None
        self.cpu_s, self.source = cpu_delta(self.before, self.after)
        self.sys_fraction = sys_fraction(self.before, self.after)
        return self

    def csw(self, n):
        """Context switches per unit over the window (csw_delta), or None."""
        return csw_delta(self.before, self.after, n)

    def busy(self):
        """{cpu: busy share of the window}, with machine=True; else {}."""
        if self._cpus1 is None:
            return {}
        return {c: busy_share(self._cpus0, self._cpus1, c) for c in self._cpus1}


def thread_cpu(pid, prefix):
    """CPU seconds of pid's live threads whose name starts with prefix (schedstat: ns); a thread
    that exits takes its time along."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if not f.read().startswith(prefix):
                    continue
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except OSError:
            continue  # a worker that just exited
    return total / 1e9


def threads(pid):
    """{tid: (name, CPU ns, voluntary, involuntary context switches)} of pid's live threads:
    the name from /proc/PID/task/TID/stat (the kernel's 15 characters), the CPU from its
    schedstat (ns; stat's utime + stime in clock ticks where there is none), the switches from
    its status. A thread that exits between the listing and its reads is left out."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            with open(base + "stat") as f:
                data = f.read()
            name = data[data.index("(") + 1:data.rindex(")")]
            try:
                with open(base + "schedstat") as f:
                    ns = int(f.read().split()[0])
            except OSError:
                rest = data[data.rindex(")") + 2:].split()
                ns = (int(rest[14 - 3]) + int(rest[15 - 3])) * 10**9 // CLK_TCK
            vol = invol = 0
            with open(base + "status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = (name, ns, vol, invol)
    return out


def thread_groups(before, after, classify):
    """Per group of threads between two threads() readings: {group: {"cpu_s", "vol", "invol",
    "threads"}}, a thread's group classify(name). A thread born in between counts from zero;
    one that exited in between is gone with its counts (thread_groups' caller compares the sum
    with the process clock: `exited` is what is missing)."""
    out = {}
    for tid, (name, ns, vol, invol) in after.items():
        b = before.get(tid)
        if b is not None and b[0] != name:  # a reused thread id: a new thread
            b = None
        g = out.setdefault(classify(name), {"cpu_s": 0.0, "vol": 0, "invol": 0, "threads": 0})
        g["cpu_s"] += (ns - (b[1] if b else 0)) / 1e9
        g["vol"] += vol - (b[2] if b else 0)
        g["invol"] += invol - (b[3] if b else 0)
        g["threads"] += 1
    return out


class ThreadWindow:
    """A process's CPU and context switches over one window, by group of threads (classify:
    thread name -> group), beside the process clock (which keeps exited threads' time):

        w = ThreadWindow(pid, classify)
        ... the load ...
        w.close()
        w.cpu_s, w.wall_s, w.groups, w.exited_s, w.per(calls)"""

    def __init__(self, pid, classify):
        self.pid, self.classify = pid, classify
        self.t0 = time.monotonic()
        self.clock0 = cpu_clock(pid)
        self.before = threads(pid)

    def close(self):
        self.after = threads(self.pid)
        clock1 = cpu_clock(self.pid)
        self.wall_s = time.monotonic() - self.t0
        self.groups = thread_groups(self.before, self.after, self.classify)
        self.cpu_s = None if self.clock0 is None or clock1 is None else clock1 - self.clock0
        live = sum(g["cpu_s"] for g in self.groups.values())
        # the CPU of threads that exited inside the window (the process clock keeps it)
        self.exited_s = None if self.cpu_s is None else max(0.0, self.cpu_s - live)
        return self

    def per(self, n):
        """Per unit (call) over the window: {"cpu_us", "exited_us", "groups": {group: {"cpu_us",
        "vol", "invol", "threads"}}}; None without units."""
        if not n:
            return None
        return {"cpu_us": self.cpu_s / n * 1e6 if self.cpu_s is not None else None,
                "exited_us": self.exited_s / n * 1e6 if self.exited_s is not None else None,
                "groups": {g: {"cpu_us": v["cpu_s"] / n * 1e6, "vol": v["vol"] / n,
                               "invol": v["invol"] / n, "threads": v["threads"]}
                           for g, v in self.groups.items()}}


def sys_fraction(a, b):
    """stime share of the CPU between two samples (10 ms ticks: rough on short runs)."""
    if a["utime"] is None or b["utime"] is None:
        return None
    u, s = b["utime"] - a["utime"], b["stime"] - a["stime"]
    return s / (u + s) if u + s > 0 else None


def cpu_times():
    """{cpu number: (busy jiffies, total jiffies)} from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                p = line.split()
                v = list(map(int, p[1:]))
                total = sum(v[:8])
                out[int(p[0][3:])] = (total - v[3] - v[4], total)
    return out


def cpu_taken_s(cpu):
    """Seconds CPU `cpu` has run anything but interrupts (user, nice, system) or had its time
    taken by the hypervisor (steal), from /proc/stat; None when there is no such CPU. Less a
    process's own CPU clock over the same interval: what other processes and the host took of
    the CPU that process was pinned to (its softirq, the network work it causes, left out)."""
    with open("/proc/stat") as f:
        for line in f:
            p = line.split()
            if p[0] == "cpu%d" % cpu:
                v = list(map(int, p[1:]))
                return (v[0] + v[1] + v[2] + v[7]) / float(CLK_TCK)
    return None


def busy_share(a, b, cpu):
    """Share of the interval between two cpu_times() this CPU was busy (any process)."""
    try:
        db, dt = b[cpu][0] - a[cpu][0], b[cpu][1] - a[cpu][1]
    except KeyError:
        return None
    return db / dt if dt else None


def proc_status(pid):
    """VmRSS, VmHWM (kB) and Threads of /proc/PID/status ({} when the process is gone)."""
    d = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "Threads"):
                    d[k] = int(v.split()[0])
    except OSError:
        pass
    return d


def open_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


class RssSampler:
    """Largest VmRSS (kB) of pid while the with-block runs, sampled every `every` seconds."""

    def __init__(self, pid, every=0.25):
        self.pid = pid
        self.every = every
        self.max_kb = proc_status(pid).get("VmRSS")
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _note(self):
        v = proc_status(self.pid).get("VmRSS")
        if v is not None and (self.max_kb is None or v > self.max_kb):
            self.max_kb = v

    def _run(self):
        while not self._stop.wait(self.every):
            self._note()

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self._note()
