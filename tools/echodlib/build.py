"""The release build the benchmarks measure (bench/arms, bench/compare, bench/callgrind-check):
building it, choosing the binary, and telling a release build from another."""

import json
import os
import shlex
import subprocess
import sys

from . import paths

BUILD_DIR = os.path.join(paths.ROOT, "build-release")


class BuildError(Exception):
    pass


def release(build_dir=BUILD_DIR, log=None):
    """meson setup (or reconfigure) for a release build + ninja; returns (the echod path, the
    commands run). log gets each command; a failure's output goes to stderr, then BuildError."""
    if os.path.exists(os.path.join(build_dir, "build.ninja")):
        cmds = [["meson", "configure", build_dir, "-Dbuildtype=release", "-Dwerror=true"]]
    else:
        cmds = [["meson", "setup", build_dir, "--buildtype=release", "-Dwerror=true"]]
    cmds.append(["ninja", "-C", build_dir, "daemon/echod"])
    for cmd in cmds:
        if log:
            log("+ " + shlex.join(cmd))
        r = subprocess.run(cmd, cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            print(r.stdout[-6000:], file=sys.stderr, flush=True)
            raise BuildError("build failed: %s (exit %d)" % (shlex.join(cmd), r.returncode))
    return os.path.join(build_dir, "daemon", "echod"), cmds


def echod(binary=None, no_build=False, build_dir=BUILD_DIR, log=None):
    """The binary a benchmark measures, as its --echod, --no-build and --build-dir say: (path,
    build commands run). Without either, build_dir is built for release first."""
    if binary:
        return os.path.abspath(binary), []
    if no_build:
        return os.path.join(build_dir, "daemon", "echod"), []
    return release(build_dir, log)


def options(binary):
    """(build dir, {meson option: value}) of the build holding this binary, (None, None) if none
    is found, (dir, None) if its options cannot be read."""
    d = os.path.dirname(os.path.realpath(binary))
    for _ in range(4):
        p = os.path.join(d, "meson-info", "intro-buildoptions.json")
        if os.path.exists(p):
            try:
                with open(p) as f:
                    return d, {o["name"]: o.get("value") for o in json.load(f)}
            except (OSError, ValueError, KeyError, TypeError):
                return d, None
        d = os.path.dirname(d)
    return None, None


def is_release(binary):
    """(is a release build without sanitizers, how that was told)."""
    env_bt = os.environ.get("ECHOD_BUILDTYPE")
    build_dir, opts = options(binary)
    if opts is None:
        if env_bt:
            return env_bt == "release", "ECHOD_BUILDTYPE=%s" % env_bt
        return False, "no meson-info/intro-buildoptions.json near %s (set ECHOD_BUILDTYPE=release " \
                      "to say it is a release build)" % binary
    bt, san = opts.get("buildtype"), opts.get("b_sanitize")
    desc = "%s: buildtype=%s b_sanitize=%s" % (os.path.relpath(build_dir, paths.ROOT)
                                               if build_dir.startswith(paths.ROOT) else build_dir, bt, san)
    return bt == "release" and san in (None, "none", ""), desc
