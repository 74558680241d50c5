#!/bin/sh
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan + libFuzzer), replays every
# input kept in the repository, then fuzzes each target on. Fails on any crash, leak, sanitizer
# report or hang.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]        replay, then fuzz SECONDS per target (default 60; CI: 30)
#   tests/fuzz/run.sh --replay [TARGET...]         replay only
#   tests/fuzz/run.sh --campaign RUNS [TARGET...]  fuzz RUNS executions per target, then fold what it
#                                                  found into tests/fuzz/corpus/ (minimised); a
#                                                  campaign stopped early is folded in the same way
#   tests/fuzz/run.sh --merge [TARGET...]          re-minimise tests/fuzz/corpus/ only
#
# What is kept, per target (docs/fuzzing.md):
#   tests/fuzz/seeds/<target>/        hand-written inputs, named for what they exercise
#   tests/fuzz/corpus/<target>/       the accumulated corpus: what campaigns found that the seeds do
#                                     not cover, minimised with libFuzzer's -merge=1 (sha1 names)
#   tests/fuzz/regressions/<target>/  one input per finding that was fixed, named for it; never
#                                     minimised away
# The replay runs each of them once (-runs=0); the fuzzing starts from seeds and corpus, and what
# it adds goes to a scratch directory (a campaign merges it back; a CI run drops it).
#
# Stopping: SIGINT or SIGTERM (^C, kill, timeout(1)) is passed on to the fuzzer, which ends with
# its final stats; a campaign then folds in what it found so far, as a finished one does, and the
# run ends there with status 130 or 143. A merge already under way runs to its end first (it
# ignores both signals). A campaign that reaches ECHOD_FUZZ_CAMPAIGN_SECONDS is folded in too.
# tests/fuzz/check-stop.sh shows all three.
#
# Environment:
#   ECHOD_FUZZ_BUILD  build directory (default: <root>/build-fuzz; configured here when missing)
#   ECHOD_FUZZ_OUT    where crash inputs and logs go (default: <build>/fuzz-out)
#   ECHOD_FUZZ_KEPT   the directory of seeds/, corpus/ and regressions/ (default: <root>/tests/fuzz)
#   ECHOD_FUZZ_CAMPAIGN_SECONDS  a campaign's time limit per target (libFuzzer's -max_total_time)
#   CC                a clang (default: clang)
#   ECHOD_FUZZ_SET    more config for fuzz_conn, "key=value;key=value" (e.g. executor.mode=fixed)
#
# Needs Debian's clang and libclang-rt-14-dev (libFuzzer, the sanitizer runtimes). A crash input
# is kept in ECHOD_FUZZ_OUT; reproduce with  <build>/tests/fuzz/<target> <crash file>
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ALL="fuzz_deframe fuzz_inflate fuzz_timeout fuzz_status fuzz_work fuzz_config fuzz_conn"
MODE=fuzz
case ${1:-} in
--replay) MODE=replay; shift ;;
--merge) MODE=merge; shift ;;
--campaign)
    MODE=campaign
    RUNS=${2:-}
    case $RUNS in '' | *[!0-9]*) echo "usage: $0 --campaign RUNS [TARGET...]" >&2; exit 2 ;; esac
    shift 2
    ;;
esac
DURATION=60
if [ $MODE = fuzz ] && [ $# -gt 0 ]; then
    DURATION=$1
    shift
    case $DURATION in '' | *[!0-9]*) echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2 ;; esac
fi
TARGETS=${*:-$ALL}
BUILD=${ECHOD_FUZZ_BUILD:-$ROOT/build-fuzz}
OUT=${ECHOD_FUZZ_OUT:-$BUILD/fuzz-out}
KEPT=${ECHOD_FUZZ_KEPT:-$ROOT/tests/fuzz}
CAMPAIGN_SECONDS=${ECHOD_FUZZ_CAMPAIGN_SECONDS:-0}
case $CAMPAIGN_SECONDS in '' | *[!0-9]*) echo "fuzz: ECHOD_FUZZ_CAMPAIGN_SECONDS is not a number" >&2; exit 2 ;; esac
CC=${CC:-clang}
for t in $TARGETS; do
    case " $ALL " in *" $t "*) ;; *) echo "fuzz: unknown target $t (targets: $ALL)" >&2; exit 2 ;; esac
done
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
# every run of a target: the same limits (a hang is -timeout, a blow-up -rss_limit_mb)
OPTS="-timeout=10 -rss_limit_mb=2048 -max_len=65536"

# kept_dirs T: the kept input directories of target T that exist (git does not keep empty ones, so a
# clone has no regressions/T until a finding is fixed). `if`, not `&&`: a missing last directory
# must not make the function fail, which under set -e ends the run without a word.
kept_dirs() {
    for d in seeds corpus regressions; do
        if [ -d "$KEPT/$d/$1" ]; then printf '%s ' "$KEPT/$d/$1"; fi
    done
}

# files DIR...: how many inputs, how many bytes (no DIR: none; find would count the current directory)
files() {
    if [ $# -eq 0 ]; then echo 0; return 0; fi
    find "$@" -type f 2>/dev/null | wc -l | tr -d ' '
}
bytes() {
    if [ $# -eq 0 ]; then echo 0; return 0; fi
    find "$@" -type f -exec cat {} + 2>/dev/null | wc -c | tr -d ' '
}

# checked LOG RC: 0 when the run was clean; prints the report's head otherwise
checked() {
    # libFuzzer exits non-zero on a crash, leak or timeout; a sanitizer report is a failure whatever
    if [ "$2" -ne 0 ] || grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error:' \
        -e '==ERROR' "$1"; then
        grep -m 30 -e 'ERROR' -e 'runtime error' -e '#[0-9]* 0x' -e 'Test unit written' "$1" | sed 's/^/   /' || true
        return 1
    fi
    return 0
}

stat_of() { sed -n "s/^stat::$1: *//p" "$2" | tail -1; }
cov_of() { grep -o 'cov: [0-9]* ft: [0-9]*' "$1" | tail -1; }

# interrupted LOG RC: the fuzzer was stopped by SIGINT or SIGTERM (libFuzzer's own exit: status
# 72 after its final stats) and reported nothing else
interrupted() {
    [ "$2" -eq 72 ] && grep -q 'libFuzzer: run interrupted' "$1" && checked "$1" 0 >/dev/null
}

# A stop sets $stop; the fuzzing runs in the background (a trap waits for a foreground command
# to end), and the stop is passed on to it.
stop=
trap 'stop=INT' INT
trap 'stop=TERM' TERM

# stoppable LOG CMD...: runs CMD with its output in LOG; its exit status is CMD's own
stoppable() {
    fz_log=$1
    shift
    "$@" >"$fz_log" 2>&1 &
    fz_pid=$!
    while :; do
        if [ -n "$stop" ]; then
            kill -s "$stop" "$fz_pid" 2>/dev/null || true
            reap_interrupted "$fz_log" "$fz_pid" && return 72
        fi
        fz_rc=0
        wait "$fz_pid" || fz_rc=$?
        # a stop makes wait return while CMD still runs: pass it on, and wait again
        kill -0 "$fz_pid" 2>/dev/null || return $fz_rc
    done
}

# reap_interrupted LOG PID: true when the stopped fuzzer PID printed its final stats and then hung,
# killed here. libFuzzer's SIGINT/SIGTERM handler prints them, then removes a scratch directory
# (opendir: malloc) before _Exit; a signal that lands while the fuzzer holds malloc's lock
# deadlocks it there, for good (seen in CI: the main thread in a futex after "run interrupted").
# What it found is already on disk, so the stop goes on as libFuzzer's own exit (72) would.
reap_interrupted() {
    i=0
    while kill -0 "$2" 2>/dev/null; do
        if [ $i -ge 100 ] && grep -q '^stat::peak_rss_mb' "$1"; then
            kill -s KILL "$2" 2>/dev/null || true
            wait "$2" 2>/dev/null || true
            echo "== $(basename "$1" .log): the fuzzer hung after its final stats (libFuzzer's interrupt handler); killed after 10 s" >&2
            return 0
        fi
        if [ $i -ge 300 ]; then
            # hung before its stats (a printf's lock): a failure the summary shows, not a hang
            echo "== $(basename "$1" .log): the fuzzer did not exit within 30 s of the stop; killed" >&2
            kill -s KILL "$2" 2>/dev/null || true
            return 1
        fi
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# minimise T SCRATCH...: rebuilds tests/fuzz/corpus/T from itself and SCRATCH, keeping only inputs
# that add coverage beyond the seeds and regressions (which are replayed and fuzzed from anyway)
minimise() {
    t=$1
    shift
    kept=$KEPT/corpus/$t
    new=$(mktemp -d "${TMPDIR:-/tmp}/echod-fuzz-merge-$t.XXXXXX")
    # the seeds and regressions go in first, so -merge=1 counts their coverage as had...
    for d in seeds regressions; do
        if [ -d "$KEPT/$d/$t" ]; then find "$KEPT/$d/$t" -type f -exec cp {} "$new/" \;; fi
    done
    base=$(ls "$new")
    mkdir -p "$kept"
    rc=0
    # not to be stopped half-way (^C reaches the whole process group): the merge starts with
    # SIGINT and SIGTERM ignored, and libFuzzer leaves them so
    (
        trap '' INT TERM
        exec "$BUILD/tests/fuzz/$t" -merge=1 -handle_int=0 -handle_term=0 $OPTS "$new" "$kept" "$@"
    ) >"$OUT/$t.merge.log" 2>&1 || rc=$?
    if ! checked "$OUT/$t.merge.log" $rc; then
        rm -rf "$new"
        return 1
    fi
    # ...and come out again: the corpus holds only what they do not cover
    for f in $base; do rm -f "$new/$f"; done
    rm -rf "$kept"
    mkdir -p "$kept"
    find "$new" -type f -exec mv {} "$kept/" \;
    rm -rf "$new"
    return 0
}

failed=0
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
for t in $TARGETS; do
    if [ -n "$stop" ]; then break; fi
    bin=$BUILD/tests/fuzz/$t
    kept=$(kept_dirs "$t")
    # shellcheck disable=SC2086
    n_kept=$(files $kept)
    if [ $MODE = merge ]; then
        before="$(files "$KEPT/corpus/$t") files"
        if minimise "$t"; then
            result="ok"
        else
            result=FAILED
            failed=1
        fi
        printf '%-14s %-8s corpus %s -> %s files, %s bytes\n' "$t" "$result" "$before" \
            "$(files "$KEPT/corpus/$t")" "$(bytes "$KEPT/corpus/$t")" >>"$summary"
        continue
    fi

    # 1. replay: every kept input once
    log=$OUT/$t.replay.log
    echo "== $t: replay $n_kept inputs (log: $log)"
    rc=0
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$bin" -runs=0 $OPTS -artifact_prefix="$OUT/$t-" $kept >"$log" 2>&1 || rc=$?
    replay_s=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}')
    if [ -n "$stop" ]; then
        echo "$t: stopped (SIG$stop) during the replay" >>"$summary"
        break
    fi
    if checked "$log" $rc; then
        result="replay ok"
    else
        result="replay FAILED (exit $rc)"
        failed=1
    fi
    line=$(printf '%-14s %-20s %6s inputs %5ss' "$t" "$result" "$n_kept" "$replay_s")
    if [ $MODE = replay ] || [ $rc -ne 0 ]; then
        echo "$line  $(cov_of "$log")" >>"$summary"
        continue
    fi

    # 2. fuzz on, from the kept inputs; new ones go to a scratch directory
    work=$(mktemp -d "${TMPDIR:-/tmp}/echod-fuzz-$t.XXXXXX")
    log=$OUT/$t.log
    if [ $MODE = campaign ]; then
        limit="-runs=$RUNS"
        if [ "$CAMPAIGN_SECONDS" -gt 0 ]; then limit="$limit -max_total_time=$CAMPAIGN_SECONDS"; fi
        echo "== $t: campaign of $RUNS executions (log: $log)"
    else
        limit="-max_total_time=$DURATION"
        echo "== $t: ${DURATION}s (log: $log)"
    fi
    rc=0
    t0=$(date +%s)
    # shellcheck disable=SC2086
    stoppable "$log" "$bin" $limit $OPTS -print_final_stats=1 -artifact_prefix="$OUT/$t-" "$work" $kept || rc=$?
    secs=$(($(date +%s) - t0))
    keep=0
    if interrupted "$log" $rc; then
        result="stopped (${stop:+SIG}${stop:-by a signal to the fuzzer})"
        keep=1
    elif checked "$log" $rc; then
        result="ok"
        keep=1
    else
        result="FAILED (exit $rc)"
        failed=1
    fi
    execs=$(stat_of number_of_executed_units "$log")
    rate=$(stat_of average_exec_per_sec "$log")
    if [ $MODE = campaign ]; then execs="${execs:-?} of $RUNS"; fi
    line="$line | fuzz $result: execs ${execs:-?} in ${secs}s (${rate:-?}/s) $(cov_of "$log"), $(files "$work") new"
    # a campaign keeps what it found, finished, out of time or stopped
    if [ $MODE = campaign ] && [ $keep -eq 1 ]; then
        before=$(files "$KEPT/corpus/$t")
        if minimise "$t" "$work"; then
            line="$line | corpus $before -> $(files "$KEPT/corpus/$t") files, $(bytes "$KEPT/corpus/$t") bytes"
        else
            line="$line | merge FAILED"
            failed=1
        fi
    fi
    echo "$line" >>"$summary"
    echo "== $line"
    rm -rf "$work"
done
echo
echo "== summary ($MODE)"
cat "$summary"
case $stop in
INT) exit 130 ;;
TERM) exit 143 ;;
esac
exit $failed
