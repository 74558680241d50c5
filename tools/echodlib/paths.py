"""Where the repository and the daemon binary are (ECHOD_SOURCE_ROOT, ECHOD_BIN override)."""

import os

ROOT = os.environ.get("ECHOD_SOURCE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ECHOD_BIN = os.environ.get("ECHOD_BIN") or os.path.join(ROOT, "build", "daemon", "echod")
