"""echod's /metrics: scraping and the Prometheus text format (0.0.4), parsed by Debian's
python3-prometheus-client (prometheus_client.parser), not by hand.

    samples(text)          [(name, labels dict, value)]: what bench/* and deploy/report sum over
    parse_metrics(text)    {(name, frozenset(labels.items())): value}
    Metrics(text)          one scrape, with metric(name, **labels) sums
    check_exposition(text) [problems]: what a Prometheus server would reject or misread
"""

import math
import urllib.error
import urllib.request


def http_get(port, path, timeout=5.0, host="127.0.0.1"):
    """GET http://host:port/path -> (status, body bytes); an HTTP error status is returned too."""
    try:
        with urllib.request.urlopen("http://%s:%d%s" % (host, port, path), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape(port, timeout=10.0, host="127.0.0.1"):
    """The text of GET /metrics on the admin port (raises OSError on failure)."""
    status, body = http_get(port, "/metrics", timeout, host)
    if status != 200:
        raise OSError("GET /metrics on port %d: HTTP %d" % (port, status))
    return body.decode("utf-8")


def families(text):
    """The metric families of a scrape (prometheus_client.metrics_core.Metric objects). Raises
    ValueError on text the format does not allow, ImportError without python3-prometheus-client."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as e:
        raise ImportError("the Prometheus text format is read with python3-prometheus-client "
                          "(apt-get install python3-prometheus-client): %s" % e)
    return list(text_string_to_metric_families(text))


def parse_metrics(text):
    """Prometheus text format 0.0.4 -> {(name, frozenset(labels.items())): float}."""
    out = {}
    for fam in families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = float(s.value)
    return out


def samples(text):
    """[(name, labels dict, value)] of a scrape (the form bench/* and deploy/report sum over)."""
    return [(n, dict(l), v) for (n, l), v in parse_metrics(text).items()]


def check_exposition(text):
    """What is wrong with a /metrics text as a Prometheus server would read it: a list of
    sentences, empty when nothing is. Parsing is prometheus_client's; on top of it: every
    sample belongs to a family with a # TYPE, no series twice, counters and bucket counts not
    negative, histogram buckets cumulative in `le` and ending in +Inf equal to _count."""
    problems = []
    try:
        fams = families(text)
    except ValueError as e:
        return ["does not parse: %s" % e]
    typed = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                typed.add(parts[2])
    seen = set()
    for fam in fams:
        if fam.type == "unknown" or fam.name not in typed and fam.name + "_total" not in typed:
            problems.append("%s: no # TYPE line" % fam.name)
        hist = {}
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            if key in seen:
                problems.append("%s%s: the same series twice" % (s.name, dict(s.labels)))
            seen.add(key)
            if math.isnan(s.value):
                continue
            if fam.type in ("counter", "histogram") and s.value < 0:
                problems.append("%s%s: negative %s" % (s.name, dict(s.labels), fam.type))
            if fam.type == "histogram":
                rest = frozenset((k, v) for k, v in s.labels.items() if k != "le")
                h = hist.setdefault(rest, {"buckets": [], "count": None})
                if s.name.endswith("_bucket"):
                    h["buckets"].append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    h["count"] = s.value
        for rest, h in hist.items():
            where = "%s%s" % (fam.name, dict(rest))
            b = sorted(h["buckets"])
            if not b or b[-1][0] != math.inf:
                problems.append("%s: no +Inf bucket" % where)
                continue
            if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
                problems.append("%s: bucket counts fall as le grows" % where)
            if h["count"] is not None and b[-1][1] != h["count"]:
                problems.append("%s: +Inf bucket %g != _count %g" % (where, b[-1][1], h["count"]))
    return problems


def metric_sum(samples_, name, **match):
    """Sum of samples() called name whose labels include every given label."""
    return sum(v for n, l, v in samples_
               if n == name and all(l.get(k) == want for k, want in match.items()))


def metric_by(samples_, name, label):
    """{value of label: summed value} of samples() called name."""
    d = {}
    for n, l, v in samples_:
        if n == name:
            key = l.get(label, "")
            d[key] = d.get(key, 0.0) + v
    return d


class Metrics:
    """One scrape of /metrics."""

    def __init__(self, text):
        self.text = text
        self.samples = parse_metrics(text)

    def has(self, name):
        return any(n == name for n, _ in self.samples)

    def series(self, name):
        """[(labels dict, value)] of every sample called name."""
        return [(dict(l), v) for (n, l), v in self.samples.items() if n == name]

    def metric(self, name, **labels):
        """Sum of the samples called name whose labels include every given label (0 if none)."""
        want = set(labels.items())
        return sum(v for (n, l), v in self.samples.items() if n == name and want <= l)

    def metric_sum(self, name):
        return self.metric(name)

    def __getitem__(self, key):
        name, labels = key
        return self.samples[(name, frozenset(labels.items()))]


def metric_delta(after, before, name, **labels):
    return after.metric(name, **labels) - before.metric(name, **labels)


def fetch(port, timeout=10.0):
    """Metrics of one scrape of the admin port."""
    return Metrics(scrape(port, timeout))
