"""Several real k6 processes splitting one deploy/k6 test by execution segments, as the
Kubernetes runners do: the shell of the Indexed Job that `k8s/k6/make-run --parallelism N`
renders (kubectl kustomize) runs here with each pod's JOB_COMPLETION_INDEX, its /scripts and
/results paths pointed at the checkout and a temporary directory. Without kubectl the same
k6 command line is built here instead (and the test says so). Shared by test_report and
test_prometheus.
"""

import os
import shutil
import subprocess
import tempfile

import yaml

from echodlib import k6 as k6lib
from echodlib.paths import ROOT

KUBECTL = shutil.which("kubectl")
MAKE_RUN = os.path.join(ROOT, "k8s", "k6", "make-run")


def rendered_job(runners, script, env, prometheus=None):
    """(the k6 container's shell, its env) of the Job make-run renders, or None without kubectl."""
    if not KUBECTL:
        return None
    with tempfile.TemporaryDirectory(prefix="k6-runners-") as tmp:
        d = os.path.join(tmp, "run")
        cmd = [MAKE_RUN, "--dir", d, "--parallelism", str(runners)]
        if prometheus:
            cmd += ["--prometheus", prometheus]
        cmd += ["direct", script] + ["%s=%s" % kv for kv in env.items()]
        subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp)
        out = subprocess.run([KUBECTL, "kustomize", d], check=True, capture_output=True,
                             text=True, timeout=120).stdout
    job = next(doc for doc in yaml.safe_load_all(out) if doc and doc["kind"] == "Job")
    assert job["spec"].get("completions", 1) == runners, job["spec"]
    c = job["spec"]["template"]["spec"]["containers"][0]
    return c["args"][0], {e["name"]: e["value"] for e in c["env"]}


class Runners:
    """N k6 runners of SCRIPT against target: runner i writes tmp/runner-i.csv.gz (k6's default
    whole-second timestamps for the indexes in whole_seconds, milliseconds otherwise) and
    tmp/summary-i.json; with prometheus (a base URL) they also remote-write to it."""

    def __init__(self, n, script, target, arm, env, tmp, whole_seconds=(0,), prometheus=None):
        self.n, self.tmp, self.arm = n, tmp, arm
        self.csv = [os.path.join(tmp, "runner-%d.csv.gz" % i) for i in range(n)]
        self.summary = [os.path.join(tmp, "summary-%d.json" % i) for i in range(n)]
        bindir = os.path.join(tmp, "bin")
        os.makedirs(bindir, exist_ok=True)
        if not os.path.exists(os.path.join(bindir, "k6")):
            os.symlink(k6lib.find(), os.path.join(bindir, "k6"))
        job = rendered_job(n, script, env, prometheus)
        self.how = "the Indexed Job of make-run --parallelism %d" % n if job else \
            "k6 command lines built here (no kubectl to render make-run's Job)"
        self.procs = []
        for i in range(n):
            run_env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
            if job:
                shell, job_env = job
                run_env.update(job_env)
                shell = shell.replace('"/results/${ARM}-${SCRIPT%.js}"', '"%s"' % os.path.join(
                    tmp, "runner")).replace('"/scripts/${SCRIPT}"', '"%s/${SCRIPT}"' % os.path.join(
                        ROOT, "deploy", "k6"))
                assert os.path.join(tmp, "runner") in shell and ROOT in shell, shell
                if n == 1:
                    shell = shell.replace('out="$out.csv.gz"', 'out="$out-0.csv.gz"')
                cmd = ["sh", "-c", shell]
            else:
                lo = "0" if i == 0 else "%d/%d" % (i, n)
                hi = "1" if i + 1 == n else "%d/%d" % (i + 1, n)
                seq = ",".join(["0"] + ["%d/%d" % (k, n) for k in range(1, n)] + ["1"])
                cmd = [k6lib.find(), "run", "--tag", "arm=" + arm, "--tag",
                       "script=" + script[:-3], "--tag", "instance_id=%d" % i, "--out",
                       "csv=" + self.csv[i]]
                if n > 1:
                    cmd += ["--execution-segment", "%s:%s" % (lo, hi),
                            "--execution-segment-sequence", seq]
                if prometheus:
                    cmd += ["--out", "experimental-prometheus-rw"]
                    run_env["K6_PROMETHEUS_RW_SERVER_URL"] = prometheus.rstrip("/") + "/api/v1/write"
                    run_env["K6_PROMETHEUS_RW_TREND_AS_NATIVE_HISTOGRAM"] = "true"
                run_env.update(env)
                cmd.append(os.path.join(ROOT, "deploy", "k6", script))
            run_env.update(TARGET=target, ARM=arm, JOB_COMPLETION_INDEX=str(i), HOLD_SECONDS="0",
                           PROTO_DIR=os.path.join(ROOT, "proto"), REFLECT="0",
                           SUMMARY_FILE=self.summary[i], SUMMARY_STDOUT="0",
                           K6_NO_USAGE_REPORT="true", K6_PROMETHEUS_RW_PUSH_INTERVAL="1s")
            if i in whole_seconds:
                run_env.pop("K6_CSV_TIME_FORMAT", None)  # k6's default: unix seconds
            else:
                run_env["K6_CSV_TIME_FORMAT"] = "unix_milli"
            log = open(os.path.join(tmp, "runner-%d.log" % i), "w")
            self.procs.append((subprocess.Popen(cmd, cwd=ROOT, env=run_env, stdout=log,
                                                stderr=subprocess.STDOUT), log))

    def wait(self, timeout):
        """Waits for every runner; raises AssertionError with the logs of any that failed."""
        bad = []
        for i, (p, log) in enumerate(self.procs):
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
            log.close()
            if rc != 0 or not os.path.exists(self.csv[i]):
                with open(log.name) as f:
                    bad.append("runner %d: exit %d (%s)\n%s" % (i, rc, self.how, f.read()[-3000:]))
        if bad:
            raise AssertionError("\n".join(bad))
        return self

    def kill(self):
        for p, log in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
