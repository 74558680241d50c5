"""Where the repository and the daemon binary are (ECHOD_SOURCE_ROOT, ECHOD_BIN override)."""

import os

ROOT = os.environ.get("ECHOD_SOURCE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ECHOD_BIN = os.environ.get("ECHOD_BIN") or os.path.join(ROOT, "build", "daemon", "echod")
# Debian's interpreter: python3-grpcio, python3-h2 and python3-yaml are installed for it
PY3 = "/usr/bin/python3"
