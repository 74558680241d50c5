"""echod's /metrics: scraping and the Prometheus text format (0.0.4)."""

import re
import urllib.error
import urllib.request

_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


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


def _unescape(v):
    return v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def parse_metrics(text):
    """Prometheus text format 0.0.4 -> {(name, frozenset(labels.items())): float}."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            labels_text, value_text = rest.rsplit("}", 1)
            labels = {}
            pos = 0
            while pos < len(labels_text):
                m = _LABEL_RE.match(labels_text, pos)
                if not m:
                    if labels_text[pos:].strip():
                        raise ValueError("bad label set in metrics line: %r" % line)
                    break
                labels[m.group(1)] = _unescape(m.group(2))
                pos = m.end()
        else:
            name, value_text = line.split(None, 1)
            labels = {}
        value = value_text.split()[0]  # an optional timestamp may follow
        out[(name.strip(), frozenset(labels.items()))] = float(value)
    return out


def samples(text):
    """[(name, labels dict, value)] of a scrape (the form bench/* and deploy/report sum over)."""
    return [(n, dict(l), v) for (n, l), v in parse_metrics(text).items()]


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
