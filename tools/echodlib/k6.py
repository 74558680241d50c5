"""The real k6: where it is, which version it is, the oldest version the scripts load on, and
its REST API's busy VUs.

Looked for as ../shared/tools/k6 relative to the repository root (the project's copy), then
K6 in the environment, then `k6` on PATH.
"""

import json
import os
import re
import shutil
import subprocess
import urllib.request

from . import paths

# deploy/k6 uses object spread (k6 before v0.53 runs scripts through Babel, which rejects it)
# and k6/timers (from v0.50).
MIN_VERSION = (0, 53, 0)


def find():
    """Path of a k6 binary, or None."""
    env = os.environ.get("K6")
    cands = [os.path.join(paths.ROOT, "..", "shared", "tools", "k6")] + ([env] if env else [])
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return shutil.which("k6")


def version(k6):
    """(major, minor, patch) of `k6 version`, or None when it cannot be read."""
    try:
        out = subprocess.run([k6, "version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"v(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else None


def unusable():
    """None when a usable k6 exists, else why not (for a skip message)."""
    k6 = find()
    if not k6:
        return ("no k6: neither ../shared/tools/k6 (relative to the repository root), $K6 nor "
                "`k6` on PATH")
    v = version(k6)
    if v is None:
        return "%s: `k6 version` does not say its version" % k6
    if v < MIN_VERSION:
        return "%s is k6 v%d.%d.%d; deploy/k6 needs v%d.%d.%d or later" % ((k6,) + v + MIN_VERSION)
    return None


def busy_vus(api_port, timeout=1.0):
    """VUs running an iteration now, from the REST API of a `k6 run --address 127.0.0.1:PORT`:
    its `vus` gauge, which under an arrival-rate executor counts the VUs busy with an iteration,
    not the pre-allocated pool (k6 v0.53). None when the API does not answer (k6 still
    initialising its VUs, or gone)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/metrics/vus" % api_port,
                                    timeout=timeout) as r:
            return json.load(r)["data"]["attributes"]["sample"]["value"]
    except (OSError, ValueError, KeyError):
        return None
