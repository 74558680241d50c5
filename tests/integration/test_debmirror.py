"""tools/echodlib/debmirror.py: the Debian mirror, proxy and Release checks come from the machine's
apt configuration (the image check's bases and the arm64 sysroot are made from them), and no
Debian mirror address is written into the tools.

Each case points apt at a configuration of its own (APT_CONFIG, as apt itself honours it): its
sources, one-line or deb822, and its proxies. None of them is fetched.

Run on its own: /usr/bin/python3 tests/integration/test_debmirror.py
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from echod_harness import ROOT, main  # noqa: E402  (puts tools/ on the path)
from echodlib import debmirror  # noqa: E402


class AptConfig:
    """A throw-away apt configuration: sources.list text, sources.list.d files, extra options."""

    def __init__(self, sources_list="", parts=None, options=""):
        self.dir = tempfile.TemporaryDirectory(prefix="echod-apt-")
        d = self.dir.name
        for sub in ("parts", "lists/partial", "cache"):
            os.makedirs(os.path.join(d, sub))
        with open(os.path.join(d, "sources.list"), "w") as f:
            f.write(sources_list)
        for name, text in (parts or {}).items():
            with open(os.path.join(d, "parts", name), "w") as f:
                f.write(text)
        self.path = os.path.join(d, "apt.conf")
        with open(self.path, "w") as f:
            f.write('Dir::Etc::sourcelist "%s/sources.list";\n' % d)
            f.write('Dir::Etc::sourceparts "%s/parts";\n' % d)
            f.write('Dir::State::Lists "%s/lists";\nDir::Cache "%s/cache";\n' % (d, d))
            f.write(options)

    def __enter__(self):
        self.old = os.environ.get("APT_CONFIG")
        os.environ["APT_CONFIG"] = self.path
        return self

    def __exit__(self, *exc):
        if self.old is None:
            del os.environ["APT_CONFIG"]
        else:
            os.environ["APT_CONFIG"] = self.old
        self.dir.cleanup()


ONE_LINE = """# a local mirror and a proxy, as a site would have them
deb http://mirror.example.invalid/debian bookworm main contrib
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example.invalid/debian bookworm-updates main
deb-src http://mirror.example.invalid/debian bookworm main
deb http://security.example.invalid/debian-security bookworm-security main
deb http://other.example.invalid/ubuntu jammy main
"""

DEB822 = """Types: deb
URIs: http://snapshot.example.invalid/archive/debian/20250520T000000Z
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://old.example.invalid/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb deb-src
URIs: http://snapshot.example.invalid/archive/debian-security/20250520T000000Z
Suites: bookworm-security
Components: main
"""


class Sources(unittest.TestCase):
    def test_one_line_sources_and_a_proxy(self):
        opts = ('Acquire::http::Proxy "http://proxy.example.invalid:3128";\n'
                'Acquire::http::Proxy::localhost "DIRECT";\nAcquire::Check-Valid-Until "false";\n')
        with AptConfig(ONE_LINE, options=opts):
            self.assertEqual(debmirror.sources("bookworm", "arm64"), [
                "deb [arch=arm64] http://mirror.example.invalid/debian bookworm contrib main",
                "deb [arch=arm64] http://mirror.example.invalid/debian bookworm-updates main",
                "deb [arch=arm64] http://security.example.invalid/debian-security bookworm-security main",
            ])
            opts = debmirror.apt_options()
            self.assertIn('Acquire::http::Proxy "http://proxy.example.invalid:3128";', opts)
            self.assertIn('Acquire::http::Proxy::localhost "DIRECT";', opts)
            self.assertIn('Acquire::Check-Valid-Until "false";', opts)
            env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
            saved, os.environ = os.environ, env
            try:
                self.assertEqual(debmirror.proxy_env().get("http_proxy"), "http://proxy.example.invalid:3128")
            finally:
                os.environ = saved

    def test_deb822_sources(self):
        with AptConfig(parts={"debian.sources": DEB822, "ignored.txt": "deb http://x.invalid/d bookworm main\n"}):
            self.assertEqual(debmirror.sources("bookworm"), [
                "deb http://snapshot.example.invalid/archive/debian/20250520T000000Z bookworm main",
                "deb http://snapshot.example.invalid/archive/debian/20250520T000000Z bookworm-updates main",
                "deb http://snapshot.example.invalid/archive/debian-security/20250520T000000Z bookworm-security main",
            ])

    def test_no_entry_for_the_suite_is_an_error(self):
        with AptConfig("deb http://other.example.invalid/ubuntu jammy main\n"):
            with self.assertRaises(debmirror.MirrorError):
                debmirror.sources("bookworm")

    def test_the_hosts_own_mirror(self):
        # whatever this machine's apt uses for bookworm, debmirror says the same
        try:
            got = debmirror.sources("bookworm")[0].split()[1]
        except debmirror.MirrorError as e:
            self.skipTest("this machine's apt has no bookworm entry: %s" % e)
        r = subprocess.run(["apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE)"],
                           capture_output=True, text=True)
        uris = {line.split()[0] for line in r.stdout.splitlines() if line.endswith(" bookworm")}
        if not uris:
            uris = {u for u, s, _ in debmirror.source_files() if s == "bookworm"}
        self.assertIn(got, uris)


class NoMirrorWritten(unittest.TestCase):
    def test_no_debian_mirror_address_in_the_tools(self):
        # the mirror is the machine's: none is written into what makes images, sysroots or runs
        # (any host in Debian's own two domains, the archive's, its security and snapshot hosts)
        pattern = re.compile(r"\b[a-z0-9.-]*\.?debian\.(org|net)\b")
        found = []
        for top in ("tests", "deploy", "bench", "tools"):
            for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
                dirnames[:] = [d for d in dirnames if d not in ("node_modules", "__pycache__")]
                for name in filenames:
                    path = os.path.join(dirpath, name)
                    try:
                        with open(path, errors="replace") as f:
                            for n, line in enumerate(f, 1):
                                if pattern.search(line):
                                    found.append("%s:%d" % (os.path.relpath(path, ROOT), n))
                    except OSError:
                        pass
        self.assertEqual(found, [], "a Debian mirror address is written in")


if __name__ == "__main__":
    main()
