"""The Debian mirror this machine's apt reaches, and how: for tools that run an apt of their own
(mmdebstrap for the image check's bases and the arm64 sysroot), so that they use the mirror,
proxy and checks the machine is configured with rather than a hard-coded address.

    sources("bookworm")          ["deb MIRROR bookworm main", "deb MIRROR bookworm-updates main",
                                  "deb SECURITY-MIRROR bookworm-security main"]  (the host's own)
    sources("bookworm", "arm64") the same lines with [arch=arm64]
    apt_options()                ['Acquire::http::Proxy "http://proxy:3128";', ...] for --aptopt
    proxy_env()                  {"http_proxy": ...} for programs that read the environment

Everything comes from the host's apt: `apt-get indextargets` for the sources (one-line and deb822
files alike, with what each entry's Release file says), or, where apt has no index yet (before a
first apt-get update, or with the lists removed), the source files apt-config names, read as
apt reads them; `apt-config dump` for the options. APT_CONFIG is honoured like apt honours it.
A suite the host does not list is a MirrorError: there is no fallback address.

    /usr/bin/python3 -m echodlib.debmirror [SUITE [ARCH]]     prints the lines and options
"""

import os
import re
import subprocess
import sys


class MirrorError(Exception):
    pass


# What an apt of another root needs from the host's to reach the same mirror the same way.
_OPTION_RE = re.compile(r"^Acquire::(?:(?:https?|ftp)::Proxy(?:-Auto-Detect)?(?:::[^ ]+)?"
                        r"|Check-Valid-Until|Check-Date|Max-FutureTime)$")


def _run(cmd):
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MirrorError("%s: %s" % (cmd[0], e))
    if r.returncode != 0:
        raise MirrorError("%s failed: %s" % (" ".join(cmd), r.stderr.strip()[-500:]))
    return r.stdout


def index_targets():
    """(repo URI, release as written, component, origin, codename) of every deb Packages index."""
    fmt = "$(REPO_URI)\t$(RELEASE)\t$(COMPONENT)\t$(ORIGIN)\t$(CODENAME)\t$(TARGET_OF)\t$(IDENTIFIER)"
    rows = set()
    for line in _run(["apt-get", "indextargets", "--format", fmt]).splitlines():
        f = line.split("\t")
        if len(f) == 7 and f[5] == "deb" and f[6] == "Packages":
            rows.add(tuple(f[:5]))
    return sorted(rows)


def _deb822(text):
    """The paragraphs of a deb822 file as dicts (keys lower-cased, continuation lines joined)."""
    paras, cur, key = [], {}, None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                paras.append(cur)
            cur, key = {}, None
        elif line[0] in " \t" and key:
            cur[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            cur[key] = value.strip()
    return paras


def source_files():
    """(repo URI, suite as written, component) of every enabled deb entry in the files apt reads."""
    out = _run(["apt-config", "shell", "L", "Dir::Etc::sourcelist/f", "P", "Dir::Etc::sourceparts/d"])
    paths = dict(re.findall(r"^(\w)='(.*)'$", out, re.M))
    files = [paths.get("L", "")]
    parts = paths.get("P", "")
    if parts and os.path.isdir(parts):
        files += [os.path.join(parts, f) for f in sorted(os.listdir(parts)) if f.endswith((".list", ".sources"))]
    rows = []
    for path in files:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        if path.endswith(".sources"):
            for p in _deb822(text):
                if p.get("enabled", "yes").lower() == "no" or "deb" not in p.get("types", "").split():
                    continue
                for uri in p.get("uris", "").split():
                    for suite in p.get("suites", "").split():
                        rows += [(uri, suite, c) for c in p.get("components", "").split()]
            continue
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 4 and words[0] == "deb":
                rows += [(words[1], words[2], c) for c in words[3:]]
    return rows


def sources(suite, arch=None):
    """One-line sources for suite and its -updates and -security, from the host's apt entries of
    the Debian archive (by the Release file's Origin and Codename, or, before the first apt-get
    update, by the suite name as written). Raises MirrorError when the host has no such entry."""
    wanted = [suite, suite + "-updates", suite + "-security"]
    found = {}
    targets = index_targets() or [(uri, release, c, "", "") for uri, release, c in source_files()]
    for uri, release, component, origin, codename in targets:
        name = codename or release
        if name not in wanted or (origin and origin != "Debian"):
            continue
        found.setdefault(name, (uri, release, set()))[2].add(component)
    if suite not in found:
        raise MirrorError("the host's apt sources have no Debian %s entry (apt-get indextargets)" % suite)
    opt = "[arch=%s] " % arch if arch else ""
    return ["deb %s%s %s %s" % (opt, found[n][0], found[n][1], " ".join(sorted(found[n][2])))
            for n in wanted if n in found]


def apt_config():
    """apt-config dump as {key: value} (last one wins)."""
    out = {}
    for line in _run(["apt-config", "dump"]).splitlines():
        m = re.match(r'^(\S+) "(.*)";$', line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def apt_options():
    """The host's proxy and Release-check settings, as --aptopt values."""
    return ['%s "%s";' % (k, v) for k, v in sorted(apt_config().items()) if _OPTION_RE.match(k) and v != ""]


def proxy_env():
    """http_proxy/https_proxy for programs that read the environment (podman build's RUN steps):
    the environment's own, else apt's Acquire::http(s)::Proxy. Empty when there is none."""
    env = {}
    cfg = apt_config()
    for scheme in ("http", "https"):
        var = scheme + "_proxy"
        value = os.environ.get(var) or os.environ.get(var.upper()) or cfg.get("Acquire::%s::Proxy" % scheme, "")
        if value and value.upper() != "DIRECT":
            env[var] = value
    return env


def main(argv):
    suite = argv[1] if len(argv) > 1 else "bookworm"
    arch = argv[2] if len(argv) > 2 else None
    try:
        for line in sources(suite, arch):
            print(line)
        for opt in apt_options():
            print("aptopt: %s" % opt)
        for k, v in sorted(proxy_env().items()):
            print("env: %s=%s" % (k, v))
    except MirrorError as e:
        print("debmirror: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
