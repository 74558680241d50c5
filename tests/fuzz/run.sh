#!/bin/sh
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan + libFuzzer) and runs each
# for a bounded time against its corpus. Fails on any crash, leak, sanitizer report or hang.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]     SECONDS per target (default 60); all targets by default
#
# Environment:
#   ECHOD_FUZZ_BUILD  build directory (default: <root>/build-fuzz; configured here when missing)
#   ECHOD_FUZZ_OUT    where crash inputs and logs go (default: <build>/fuzz-out)
#   CC                a clang (default: clang)
#   ECHOD_FUZZ_SET    more config for fuzz_conn, "key=value;key=value" (e.g. executor.mode=fixed)
#
# Needs Debian's clang and libclang-rt-14-dev (libFuzzer, the sanitizer runtimes). The corpus in
# tests/fuzz/corpus/<target>/ only seeds the run: what the fuzzer adds goes to a scratch copy, so
# the repository stays small. A crash input is kept in ECHOD_FUZZ_OUT; reproduce with
#   <build>/tests/fuzz/<target> <crash file>
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DURATION=${1:-60}
[ $# -gt 0 ] && shift
TARGETS=${*:-fuzz_deframe fuzz_inflate fuzz_timeout fuzz_status fuzz_work fuzz_config fuzz_conn}
BUILD=${ECHOD_FUZZ_BUILD:-$ROOT/build-fuzz}
OUT=${ECHOD_FUZZ_OUT:-$BUILD/fuzz-out}
CC=${CC:-clang}

case $DURATION in '' | *[!0-9]*) echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2 ;; esac
command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

if [ ! -f "$BUILD/build.ninja" ]; then
    # the daemon's code gets coverage instrumentation (fuzzer-no-link); only the targets link
    # libFuzzer's main. UBSan must stop at the first report, or libFuzzer would not see it.
    CC=$CC meson setup "$BUILD" "$ROOT" -Dfuzz=true -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
fi
ninja -C "$BUILD" $(for t in $TARGETS; do printf 'tests/fuzz/%s ' "$t"; done)

mkdir -p "$OUT"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/tests/lsan.supp}

failed=0
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
for t in $TARGETS; do
    seeds=$ROOT/tests/fuzz/corpus/$t
    work=$(mktemp -d "${TMPDIR:-/tmp}/echod-fuzz-$t.XXXXXX")
    log=$OUT/$t.log
    echo "== $t: ${DURATION}s (log: $log)"
    rc=0
    "$BUILD/tests/fuzz/$t" -max_total_time="$DURATION" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$OUT/$t-" "$work" "$seeds" >"$log" 2>&1 || rc=$?
    # libFuzzer exits non-zero on a crash, leak or timeout; a sanitizer report is a failure whatever
    if [ $rc -ne 0 ] || grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error:' \
        -e '==ERROR' "$log"; then
        result="FAILED (exit $rc)"
        failed=1
        grep -m 30 -e 'ERROR' -e 'runtime error' -e '#[0-9]* 0x' -e 'Test unit written' "$log" | sed 's/^/   /' || true
    else
        result=ok
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*' "$log" | tail -1)
    printf '%-14s %-22s execs %-10s exec/s %-7s %s\n' "$t" "$result" "${execs:-?}" "${rate:-?}" "${cov:-?}" >>"$summary"
    rm -rf "$work"
done
echo
echo "== summary (${DURATION}s per target)"
cat "$summary"
exit $failed
