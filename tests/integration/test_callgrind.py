"""CPU regression check: instructions per unary call of the `direct` arm under callgrind
must not grow by more than 10% over bench/callgrind-baseline.json (bench/callgrind-check).

Exit 77 (meson: SKIP) when valgrind or `h2load` is missing, in sanitizer builds
(ECHOD_SANITIZER set) and when ECHOD_BIN is not from a release build (the baseline is a
release figure; a debugoptimized build would fail it for no reason).
Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_callgrind.py
"""

import os
import shutil
import subprocess
import sys

ROOT = os.environ.get("ECHOD_SOURCE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ECHOD_BIN = os.environ.get("ECHOD_BIN") or os.path.join(ROOT, "build", "daemon", "echod")
SKIP = 77


def main():
    if os.environ.get("ECHOD_SANITIZER"):
        print("SKIP: sanitizer build (ECHOD_SANITIZER=%s): instruction counts are not comparable"
              % os.environ["ECHOD_SANITIZER"])
        return SKIP
    for tool, pkg in dict(valgrind="valgrind", h2load="nghttp2-client").items():
        if not shutil.which(tool):
            print("SKIP: %s not installed (apt-get install %s)" % (tool, pkg))
            return SKIP
    if not os.access(ECHOD_BIN, os.X_OK):
        print("echod binary not found at %s (set ECHOD_BIN)" % ECHOD_BIN)
        return 1
    cmd = [sys.executable, os.path.join(ROOT, "bench", "callgrind-check"), "--echod", ECHOD_BIN]
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT, timeout=840).returncode
    if rc in (0, 1, SKIP):
        return rc
    print("callgrind-check could not measure (exit %d)" % rc)
    return 1


if __name__ == "__main__":
    sys.exit(main())
