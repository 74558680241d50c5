"""The README's reference tables against the daemon itself, so that neither drifts.

Configuration reference: a row for every key of `echod --check-config`'s dump of the built-in
defaults and no other, each with the dump's default; each row's type, and its range or values
where it gives them as numbers or names, as the key's own error message states them; a
per_method row naming the keys an entry has.

Metrics: every family a scrape shows, after calls of the four kinds on the arms that produce
them (direct with synthetic work, cached, virtual, the cost model, REST), is a row with the
scrape's type and every label name the scrape shows; and every row's family is in one of those
scrapes, or, for the ones a CPU quota produces, in a scrape of echod under a 1-CPU cgroup v1
quota (root only, as test_cgroup); the latency buckets it lists are every latency histogram's.

Set-up and Tests: the default suites of `bootstrap.sh test` in the README's words and table, every
package its arrays install named in Set-up, every meson test (`meson introspect --tests` of the
build around ECHOD_BIN) and every fuzz target in the Tests section, and nothing else there.

  ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_readme.py
"""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from echod_harness import (ECHOD_BIN, ROOT, SLOW, Daemon, EchoStub, bidi_roundtrip, echod_check_config,  # noqa: E402
                           http_get, main)
from test_cgroup import CgroupDaemon, v1_quota_cgroup  # noqa: E402
from test_rest_arm import RestDaemon  # noqa: E402

T = 30.0 * SLOW
CONFIG_HEADER = "| key | type | default | range / values | meaning |"
METRICS_HEADER = "| metric | type | labels | meaning |"
ENTRY = "/grpc.examples.echo.Echo/UnaryEcho"


def readme_table(header):
    """The rows of the README table under `header`, as lists of cells (a cell with a `|` of its
    own would shift the rest: a row of the wrong width fails)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    if header not in lines:
        raise AssertionError("README.md has no table headed %s" % header)
    width = header.count("|") - 1
    rows = []
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip()[1:-1].split("|")]
        if len(cells) != width:
            raise AssertionError("README row with %d cells, not %d: %s" % (len(cells), width, line))
        rows.append(cells)
    return rows


def ticked(cell):
    """The `quoted` words of a cell."""
    return re.findall(r"`([^`]*)`", cell)


# ---------------------------------------------------------------------------------------------
# configuration


def check_config(*sets):
    r = echod_check_config("/dev/null", sets=sets, timeout=T)
    return r.returncode, r.stdout, r.stderr.strip()


def dump_leaves(text):
    """{dotted key: the value as dump wrote it} of every leaf of a dump (an empty per_method
    dictionary, `{}`, is a leaf; an entry's method path is one segment, quoted as dumped)."""
    leaves, path = {}, []
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        key, _, value = line.strip().partition(": ") if ": " in line else (line.strip()[:-1], "", "")
        del path[indent // 2:]
        if value == "":
            path.append(key)
        else:
            leaves[".".join(path + [key])] = value
    return leaves


def numbers(text):
    """A README range as echod's errors write numbers: -1 for −1, 2^64−1 spelt out."""
    text = re.sub(r"2\^(\d+)−1", lambda m: str(2 ** int(m[1]) - 1), text)
    return text.replace("−", "-")


def as_in_readme(value):
    """A dumped value as the README's default column writes it: strings unquoted, but `""`."""
    if value.startswith('"'):
        return json.loads(value) or '""'
    return value


# The error a key gives for a value of the wrong shape says what it accepts. Each pattern: the
# README type the row must have (its start), and from the match, the range or values the row's
# range column must start with (None: that column is free text).
ACCEPTS = [
    (r"an integer from (-?\d+) to (\d+)", "int", lambda m: "%s..%s" % (m[1], m[2])),
    (r"a duration up to (\w+) ", "duration", lambda m: "0..%s" % m[1]),
    (r"a number from 0\.0 to 1\.0 ", "float", lambda m: "0.0..1.0"),
    (r"one of ([\w, ]+), got", "enum", lambda m: ", ".join("`%s`" % v for v in m[1].split(", "))),
    (r"a boolean ", "bool", None),
    (r"a non-empty string", "string", None),
    (r"a string", "path", None),
    (r'"" \(off\) or host:port ', 'host:port or `""`', None),
    (r"host:port ", "host:port", None),
    (r"a mapping", "map: method path", None),
]


class ConfigurationReference(unittest.TestCase):
    """Each test gathers every mismatch and fails once, listing them all."""

    @classmethod
    def setUpClass(cls):
        rc, out, err = check_config()
        assert rc == 0, err
        cls.defaults = dump_leaves(out)
        cls.rows = {}
        for cells in readme_table(CONFIG_HEADER):
            (key,) = ticked(cells[0])
            cls.rows[key] = cells

    def test_every_key_with_its_default(self):
        problems = ["%s: in the dump, no row" % k for k in sorted(set(self.defaults) - set(self.rows))]
        problems += ["%s: a row, not a key echod has" % k for k in sorted(set(self.rows) - set(self.defaults))]
        for key, value in self.defaults.items():
            if key in self.rows and ticked(self.rows[key][2]) != [as_in_readme(value)]:
                problems.append("%s: default %s in the README, %s in the dump" % (key, self.rows[key][2], value))
        self.assertEqual(problems, [], "the README's configuration reference against the built-in defaults")

    def test_types_and_ranges_as_the_errors_state_them(self):
        problems = []
        for key, (_, kind, _, rng, _) in self.rows.items():
            rc, _, err = check_config("%s=[bad]" % key)
            accepts = err.partition(": expected ")[2]
            for pattern, want_kind, want_range in ACCEPTS:
                m = re.match(pattern, accepts)
                if m:
                    break
            else:
                problems.append("%s: no README type for what it accepts (exit %d): %s" % (key, rc, err))
                continue
            if not kind.startswith(want_kind):
                problems.append("%s: type %s in the README, but echod accepts %s" % (key, kind, accepts))
            # a range naming another key's cap (0..`max_cpu`) is finish's check, not the key's
            if want_range is not None and "`max_" not in rng and numbers(rng.split(";")[0]) != want_range(m):
                problems.append("%s: %s in the README, but echod accepts %s" % (key, rng, accepts))
        self.assertEqual(problems, [], "the README's types and ranges against echod's errors")

    def test_per_method_entries_name_their_keys(self):
        maps = {key: cells for key, cells in self.rows.items() if cells[1].startswith("map:")}
        self.assertEqual(sorted(maps), ["dispatch.per_method", "work.per_method"])
        for key, cells in maps.items():
            rc, out, err = check_config("%s.%s={}" % (key, ENTRY))
            self.assertEqual(rc, 0, err)
            prefix = '%s."%s".' % (key, ENTRY)
            has = sorted(k[len(prefix):] for k in dump_leaves(out) if k.startswith(prefix))
            listed = re.search(r"`\{([\w, ]+)\}`", cells[1])
            of = re.search(r"keys of `([\w.]+)`", cells[1])
            if listed:
                self.assertEqual(sorted(listed[1].split(", ")), has, "%s: the keys of an entry" % key)
            else:
                self.assertIsNotNone(of, "%s: the row says neither `{keys}` nor keys of `section`" % key)
                section = sorted(k[len(of[1]) + 1:] for k in self.defaults if k.startswith(of[1] + "."))
                self.assertEqual(section, has, "%s: the keys of an entry are %s's" % (key, of[1]))


# ---------------------------------------------------------------------------------------------
# metrics


def families(m):
    """{family: (type, label names)} of a scrape (Metrics): each `# TYPE` line, and the label
    names of its samples (a histogram's _bucket, _sum and _count included, `le` left out)."""
    out = {}
    for line in m.text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            out[name] = (kind, set())
    for (name, labels), _ in m.samples.items():
        stem = re.sub(r"_(bucket|sum|count)$", "", name)
        family = name if name in out else stem
        if family not in out:
            raise AssertionError("a sample with no # TYPE: %s" % name)
        out[family][1].update(k for k, _ in labels if k != "le")
    return out


def calls(d):
    """One call of each kind, the last with a 1 ms sleep (a virtual thread parks on it)."""
    with d.channel() as ch:
        stub = EchoStub(ch)
        stub.UnaryEcho("readme", timeout=T)
        list(stub.ServerStreamingEcho("readme", timeout=T))
        stub.ClientStreamingEcho(iter(["a", "b"]), timeout=T)
        bidi_roundtrip(stub, 2, timeout=T)
        stub.UnaryEcho("readme", timeout=T, metadata=[("echod-sleep-us", "1000")])


class MetricsReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rows = {}
        for cells in readme_table(METRICS_HEADER):
            for name in ticked(cells[0]):
                cls.rows[name] = cells
        arms = {
            "direct with synthetic work": Daemon(sets=["work.defaults.cpu_us=20", "work.defaults.sleep_us=20"]),
            "cached": Daemon(config=os.path.join(ROOT, "config/arms/cached.yaml")),
            "virtual": Daemon(config=os.path.join(ROOT, "config/arms/virtual.yaml")),
            "the cost model": Daemon(config=os.path.join(ROOT, "config/models/grpc-java-study.yaml")),
            "rest": RestDaemon(),
        }
        cls.scraped = {}  # family -> (type, label names, the arms that showed it)
        cls.bounds = {}  # histogram family -> its finite `le` bounds, as numbers
        for arm, d in arms.items():
            with d:
                calls(d)
                if arm == "rest":
                    status, _ = http_get(d.rest_port, "/echo?message=readme")
                    assert status == 200, status
                cls.add(arm, d.metrics())

    @classmethod
    def add(cls, arm, m):
        for name, (kind, labels) in families(m).items():
            seen = cls.scraped.setdefault(name, (kind, set(), []))
            seen[1].update(labels)
            seen[2].append(arm)
        for (name, labels), _ in m.samples.items():
            le = dict(labels).get("le")
            if name.endswith("_bucket") and le != "+Inf":
                cls.bounds.setdefault(name[:-len("_bucket")], set()).add(float(le))

    def mismatches(self, scraped):
        """What the README's metrics table says otherwise than the scrapes."""
        problems = []
        for name, (kind, labels, arms) in sorted(scraped.items()):
            if name not in self.rows:
                problems.append("%s (%s, scraped on %s): no row" % (name, kind, ", ".join(arms)))
                continue
            _, row_kind, row_labels, _ = self.rows[name]
            if row_kind != kind:
                problems.append("%s: %s in the README, %s in the scrape" % (name, row_kind, kind))
            unnamed = sorted(labels - set(ticked(row_labels)))
            if unnamed:
                problems.append("%s: labels %s in the scrape, not named in the README" % (name, ", ".join(unnamed)))
        return problems

    def test_every_family_scraped_is_a_row(self):
        self.assertEqual(self.mismatches(self.scraped), [], "the README's metrics table against the scrapes")

    def test_latency_buckets_as_scraped(self):
        """The README's latency buckets are the bounds of every latency histogram scraped (they
        once stopped at 1 s in both while a saturated arm's p99 ran to tens of seconds)."""
        text = re.sub(r"\s+", " ", readme_section("Admin endpoints and metrics"))
        m = re.search(r"Histogram buckets: latencies [^(]*\(([^)]*)\)", text)
        self.assertIsNotNone(m, "no 'Histogram buckets: latencies ... (...)' in the README")
        scale = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}
        readme = [round(float(n) * scale[unit], 9)
                  for run, unit in re.findall(r"((?:[\d.]+, )*[\d.]+) (µs|ms|s)\b", m[1])
                  for n in run.split(", ")]
        latency = sorted(f for f in self.bounds if f.endswith("_seconds"))
        self.assertIn("grpc_server_handling_seconds", latency)
        for family in latency:
            self.assertEqual(sorted(round(b, 9) for b in self.bounds[family]), readme, family)

    def test_every_row_is_scraped(self):
        missing = sorted(set(self.rows) - set(self.scraped))
        if not missing:
            return
        # what only a CPU quota shows (echod_cgroup_cpu_quota_cpus): a scrape of echod in a 1-CPU cgroup
        self.assertEqual([n for n in missing if "only when" not in self.rows[n][3]], [],
                         "rows no scrape shows (and whose row names no condition)")
        cgroup = v1_quota_cgroup(self, "readme")
        with CgroupDaemon(os.path.join(cgroup, "cgroup.procs")) as d:
            quota = {name: (kind, labels, ["direct in a 1-CPU cgroup"])
                     for name, (kind, labels) in families(d.metrics()).items()}
        self.assertEqual(self.mismatches(quota), [], "the README's metrics table against a scrape under a quota")
        self.assertEqual(sorted(set(missing) - set(quota)), [], "rows no scrape shows, a quota's included")


# ---------------------------------------------------------------------------------------------
# the set-up and test lists


def readme_section(title):
    """The text of the README section headed `## title`, up to the next `## `."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n## %s\n" % title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def bootstrap():
    with open(os.path.join(ROOT, "deploy", "bootstrap.sh"), encoding="utf-8") as f:
        return f.read()


class CommandReference(unittest.TestCase):
    """The Set-up and Tests sections against what deploy/bootstrap.sh runs and installs, what
    meson registers and the fuzz targets there are: each says which of them the README lacks or
    names wrongly. No daemon runs."""

    def test_suites_as_bootstrap_runs_them(self):
        script, setup = bootstrap(), readme_section("Set-up (fresh Debian 12, as root)")
        default = re.search(r"local suites=\$\{ECHOD_SUITES:-([^}]*)\}", script)[1].split()
        body = script[script.index("run_tests() {"):]
        body = body[:body.index("\n}\n")]
        known = re.findall(r"^        ([a-z0-9]+)\)$", body, re.M)
        self.assertIn("default `%s`" % " ".join(default), " ".join(setup.split()),
                      "the README's default ECHOD_SUITES is bootstrap.sh's")
        rows = [ticked(cells[0])[0] for cells in readme_table("| suite | what |")]
        self.assertEqual(rows, default + sorted(set(known) - set(default)),
                         "the README's suites table: bootstrap.sh's default suites in their order, then the others")

    def test_packages_as_bootstrap_installs_them(self):
        script, setup = bootstrap(), readme_section("Set-up (fresh Debian 12, as root)")
        named = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", setup))
        missing = []
        for array in ("BUILD_PKGS", "TEST_PKGS", "PEER_PKGS", "IMAGE_PKGS", "ARM64_PKGS"):
            pkgs = re.search(r"^%s=\(([^)]*)\)" % array, script, re.M)[1].split()
            missing += ["%s (%s)" % (p, array) for p in pkgs if p not in named]
        self.assertEqual(missing, [], "packages bootstrap.sh installs that the README's Set-up does not name")

    def test_peer_packages_as_echodlib_needs_them(self):
        """bootstrap.sh installs for the grpc-java witness what echodlib.peers checks for."""
        from echodlib import peers
        pkgs = re.search(r"^PEER_PKGS=\(([^)]*)\)", bootstrap(), re.M)[1].split()
        self.assertEqual(sorted(pkgs), sorted(peers.JAVA_PACKAGES))

    def test_every_test_is_listed(self):
        meson = shutil.which("meson")
        build = os.path.dirname(os.path.dirname(os.path.abspath(ECHOD_BIN)))
        if not meson or not os.path.isdir(os.path.join(build, "meson-info")):
            self.skipTest("no meson build directory around ECHOD_BIN (%s)" % build)
        out = subprocess.run([meson, "introspect", "--tests", build], capture_output=True, text=True,
                             check=True).stdout
        registered = {t["name"] for t in json.loads(out)}
        fuzz = {f[:-2] for f in os.listdir(os.path.join(ROOT, "tests", "fuzz"))
                if f.startswith("fuzz_") and f.endswith(".c")}
        section = readme_section("Tests")
        listed = set(re.findall(r"`(test_\w+)`", section))
        self.assertEqual(sorted(registered - listed), [], "meson tests the README's Tests section does not list")
        self.assertEqual(sorted(listed - registered), [], "tests the README lists that meson does not have")
        fuzz_listed = set(re.findall(r"`(fuzz_\w+)`", section))
        self.assertEqual(sorted(fuzz ^ fuzz_listed), [], "fuzz targets (tests/fuzz/fuzz_*.c) against the README's")


if __name__ == "__main__":
    main()
