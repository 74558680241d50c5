#!/bin/sh
# valgrind memcheck over a chosen part of the integration suite, once: every echod those tests
# start runs under memcheck (through ECHOD_WRAPPER, which tests/integration/echod_harness.py puts
# in front of the daemon). Any memcheck error, or a definite or indirect leak, makes that
# daemon exit 99 instead of 0, which fails its test with the report in the output.
#
#   tests/memcheck.sh                     the default selection (about 4 minutes here)
#   tests/memcheck.sh test_protocol test_abuse.GrpcAbuse    files, or file.Class[.test]
#
# ECHOD_BIN: a build without sanitizers (valgrind and ASan do not mix); default build/daemon/echod,
# else build-release/. Suppressions: tests/valgrind.supp (libh2o 2.2.5's per-thread pools).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || { echo "memcheck: valgrind not found (apt-get install valgrind)" >&2; exit 2; }
if [ -z "${ECHOD_BIN:-}" ]; then
    for b in build build-release; do
        [ -x "$ROOT/$b/daemon/echod" ] && ECHOD_BIN=$ROOT/$b/daemon/echod && break
    done
fi
[ -x "${ECHOD_BIN:-}" ] || { echo "memcheck: no echod binary; set ECHOD_BIN" >&2; exit 2; }
if nm -D "$ECHOD_BIN" 2>/dev/null | grep -q -e __asan_init -e __tsan_init; then
    echo "memcheck: $ECHOD_BIN is a sanitizer build; use a plain one" >&2
    exit 2
fi

# What the selection covers: every method and the protocol table, TLS, the REST arm, shutdown
# with calls in flight, every abuse and fault test, start-up failures. Left out: tests that
# measure time or throughput (`h2load`, arms, callgrind, operate, drain under `h2load`, services'
# benchmark counts), which memcheck's 20-50x slow-down defeats.
DEFAULT="test_echo_grpcio test_protocol test_tls test_rest_arm test_config_cli.Shutdown test_abuse test_faults
test_config_errors.OperatorErrors test_compression.FrameLevel"
SELECTION=${*:-$DEFAULT}

export ECHOD_BIN
export ECHOD_SOURCE_ROOT=$ROOT
export PYTHONDONTWRITEBYTECODE=1
# every wait in the suite grows (SLOW), loads shrink, as under the sanitizers
export ECHOD_SANITIZER=${ECHOD_SANITIZER:-valgrind}
export ECHOD_WRAPPER="valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --num-callers=30 \
--suppressions=$ROOT/tests/valgrind.supp --quiet"

failed=""
for item in $SELECTION; do
    file=${item%%.*}
    names=""
    [ "$file" != "$item" ] && names=${item#*.}
    echo "== memcheck: $item"
    # shellcheck disable=SC2086
    if ! /usr/bin/python3 "$ROOT/tests/integration/$file.py" $names; then
        failed="$failed $item"
    fi
done
if [ -n "$failed" ]; then
    echo "memcheck: FAILED:$failed"
    exit 1
fi
echo "memcheck: clean"
