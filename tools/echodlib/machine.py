"""The machine a benchmark ran on (for its report) and what it needs of it: tools on PATH, CPUs
to pin to."""

import os
import platform
import shutil
import subprocess


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def perf_support():
    """Whether `perf stat -e instructions` counts here (a VM often has no PMU), as a sentence."""
    perf = "perf not installed"
    try:
        r = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                           capture_output=True, text=True, timeout=20)
        line = next((l for l in r.stderr.splitlines() if "instructions" in l), "")
        if "not supported" in line or "not counted" in line:
            perf = "`perf stat -e instructions`: not supported (no PMU in this VM; use callgrind)"
        elif line and line.split(",")[0].strip().isdigit():
            perf = "`perf stat -e instructions`: supported"
        else:
            last = (line or r.stderr.strip() or "?").splitlines()[-1]
            perf = "`perf stat -e instructions`: unavailable (%s)" % last
    except (OSError, subprocess.SubprocessError, StopIteration, IndexError):
        pass
    return perf


def info(perf=False):
    """{nproc, affinity, kernel, cpu_model, loadavg} (and perf: perf_support())."""
    out = {"nproc": os.cpu_count(), "affinity": sorted(os.sched_getaffinity(0)),
           "kernel": platform.release(), "cpu_model": cpu_model(), "loadavg": os.getloadavg()}
    if perf:
        out["perf"] = perf_support()
    return out


# tool: the Debian package that has it
PACKAGES = {"h2load": "nghttp2-client", "taskset": "util-linux", "valgrind": "valgrind"}
# what a benchmark that pins the server and its load apart needs
LOAD_TOOLS = ("h2load", "taskset")


def missing_tool(*tools):
    """The first of tools not on PATH, as 'TOOL not found (apt-get install PACKAGE)', or None."""
    for tool in tools:
        if not shutil.which(tool):
            return "%s not found (apt-get install %s)" % (tool, PACKAGES.get(tool, tool))
    return None


def parse_cpu_list(text):
    """taskset -c syntax without strides: 1 / 0,1 / 0-3; None when it is not one."""
    cpus = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        return None
    return cpus
