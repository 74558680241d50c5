"""A real Prometheus on this machine, and PromQL over its HTTP API.

Debian's `prometheus` (2.42) runs as a plain process on a free loopback port, with its own
directory (config, file_sd targets, TSDB): it scrapes the echod processes added to it,
receives k6's remote write (--web.enable-remote-write-receiver) and stores k6's trends as
native histograms (--enable-feature=native-histograms), which is what lets several runners'
percentiles merge. bench/study --prometheus, the tests and deploy/report share it:

    p = Prometheus(rule_files=[...]).start()       # or Prometheus(directory=D, keep=True)
    p.add_target(d.admin_port, arm="direct")        # scraped every scrape_interval
    env = p.k6_env(); args = p.k6_args()            # k6 run --out experimental-prometheus-rw
    Client(p.url).query('sum(rate(grpc_server_handled_total[10s]))')
    p.stop()                                        # the TSDB stays in p.directory when keep

Prometheus(directory=D, scrape=False).start() opens a kept TSDB again, to query a finished run.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from . import ports

FLAGS = ["--web.enable-remote-write-receiver", "--enable-feature=native-histograms"]


def find(name="prometheus"):
    """Path of Debian's prometheus (or promtool), or None."""
    return shutil.which(name) or next((p for p in ("/usr/bin/" + name,) if os.access(p, os.X_OK)),
                                      None)


def unusable():
    """None when a local Prometheus can run here, else why not (for a skip message)."""
    if not find():
        return "no prometheus (apt-get install prometheus: Debian's Prometheus 2.42)"
    return None


class PrometheusError(Exception):
    pass


class Client:
    """The HTTP API of a Prometheus at url (http://host:port)."""

    def __init__(self, url, timeout=30.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path, params):
        q = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen("%s%s?%s" % (self.url, path, q), timeout=self.timeout) as r:
                doc = json.load(r)
        except urllib.error.HTTPError as e:
            try:
                doc = json.load(e)
            except ValueError:
                raise PrometheusError("%s%s: HTTP %d" % (self.url, path, e.code))
        except (OSError, ValueError) as e:
            raise PrometheusError("%s%s: %s" % (self.url, path, e))
        if doc.get("status") != "success":
            raise PrometheusError("%s: %s (%s)" % (params.get("query", path), doc.get("error"),
                                                   doc.get("errorType")))
        return doc["data"]

    def query(self, expr, at=None):
        """An instant query at time `at` (Unix seconds; now by default): the raw result list
        ([{"metric": {...}, "value": [t, "v"]} or "histogram"/"values"...])."""
        params = {"query": expr}
        if at is not None:
            params["time"] = "%.3f" % at
        return self._get("/api/v1/query", params)["result"]

    def query_range(self, expr, start, end, step):
        return self._get("/api/v1/query_range", {"query": expr, "start": "%.3f" % start,
                                                  "end": "%.3f" % end, "step": str(step)})["result"]

    def vector(self, expr, at=None):
        """[(labels, float)] of an instant query whose result is a vector of floats."""
        return [(r["metric"], float(r["value"][1])) for r in self.query(expr, at) if "value" in r]

    def samples(self, selector, start, end):
        """Every raw sample of the series a selector picks in (start, end]:
        [(labels, [(t, float)])]; a native histogram's samples come as (t, None)."""
        rng = max(1, int(round(end - start)))
        out = []
        for r in self.query("%s[%ds]" % (selector, rng), end):
            pts = [(float(t), float(v)) for t, v in r.get("values", [])]
            pts += [(float(t), None) for t, _ in r.get("histograms", [])]
            out.append((r["metric"], sorted(pts, key=lambda p: p[0])))
        return out

    def ready(self):
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


class Prometheus:
    """One Prometheus process with its own directory (see the module's text)."""

    def __init__(self, directory=None, scrape_interval="1s", rule_files=(), scrape=True,
                 keep=False, binary=None, start_timeout=60.0):
        self.binary = binary or find()
        self.own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="echod-prometheus-")
        self.scrape_interval = scrape_interval
        self.rule_files = [os.path.abspath(f) for f in rule_files]
        self.scrape = scrape
        self.keep = keep
        self.start_timeout = start_timeout
        self.port = None
        self.proc = None
        self.targets = []
        self.log_path = os.path.join(self.directory, "prometheus.log")

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def remote_write_url(self):
        return self.url + "/api/v1/write"

    @property
    def client(self):
        return Client(self.url)

    def config_text(self):
        sd = os.path.join(self.directory, "targets.json")
        lines = ["global:", "  scrape_interval: %s" % self.scrape_interval,
                 "  evaluation_interval: %s" % self.scrape_interval]
        if self.rule_files:
            lines += ["rule_files:"] + ["  - %s" % json.dumps(f) for f in self.rule_files]
        lines += ["scrape_configs:"]
        if self.scrape:
            # the targets file is re-read when it changes: echod processes come and go
            lines += ["  - job_name: echod", "    file_sd_configs:",
                      "      - files: [%s]" % json.dumps(sd), "        refresh_interval: 1s"]
        else:
            lines[-1] += " []"
        return "\n".join(lines) + "\n"

    def _write_targets(self):
        path = os.path.join(self.directory, "targets.json")
        with open(path + ".tmp", "w") as f:
            json.dump([{"targets": [t], "labels": l} for t, l in self.targets], f)
        os.replace(path + ".tmp", path)

    def start(self):
        if not self.binary:
            raise PrometheusError(unusable())
        os.makedirs(self.directory, exist_ok=True)
        self._write_targets()
        config = os.path.join(self.directory, "prometheus.yml")
        with open(config, "w") as f:
            f.write(self.config_text())
        for attempt in range(3):  # a free port can be taken before Prometheus binds it
            self.port = ports.free_port()
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [self.binary, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(self.directory, "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % self.port,
                 "--storage.tsdb.retention.time=30d", "--log.level=warn"] + FLAGS,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            log.close()
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self.client.ready():
                    return self
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.stop()
                raise PrometheusError("prometheus not ready after %.0f s:\n%s" % (
                    self.start_timeout, self.log_tail()))
            if "address already in use" not in self.log_tail():
                break
        raise PrometheusError("prometheus exited with %s:\n%s" % (self.proc.returncode,
                                                                  self.log_tail()))

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def add_target(self, admin_port, host="127.0.0.1", **labels):
        """Scrape an echod's /metrics (its admin port) with these target labels (arm=...)."""
        self.targets.append(("%s:%d" % (host, admin_port), {k: str(v) for k, v in labels.items()}))
        self._write_targets()

    def remove_target(self, admin_port, host="127.0.0.1"):
        self.targets = [t for t in self.targets if t[0] != "%s:%d" % (host, admin_port)]
        self._write_targets()

    def wait_up(self, admin_port, host="127.0.0.1", timeout=30.0):
        """Waits until the target has been scraped successfully (up == 1)."""
        sel = 'up{instance="%s:%d"}' % (host, admin_port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(v == 1 for _, v in self.client.vector(sel)):
                return
            time.sleep(0.2)
        raise PrometheusError("%s never 1 within %.0f s" % (sel, timeout))

    def k6_env(self):
        """Environment for k6's experimental-prometheus-rw output into this Prometheus: trends
        as native histograms, pushed every second."""
        return {"K6_PROMETHEUS_RW_SERVER_URL": self.remote_write_url,
                "K6_PROMETHEUS_RW_TREND_AS_NATIVE_HISTOGRAM": "true",
                "K6_PROMETHEUS_RW_PUSH_INTERVAL": "1s"}

    @staticmethod
    def k6_args():
        return ["--out", "experimental-prometheus-rw"]

    def stop(self):
        """SIGTERM (Prometheus flushes its head block); the directory is removed unless kept or
        given by the caller."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.own_dir and not self.keep:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
