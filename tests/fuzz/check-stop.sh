#!/bin/sh
# Shows that a stopped campaign keeps what it found (docs/fuzzing.md). fuzz_timeout's campaign,
# from its seeds alone in a scratch copy of tests/fuzz (ECHOD_FUZZ_KEPT), is stopped three ways:
#   SIGTERM to run.sh alone (kill, a supervisor), which run.sh passes on to the fuzzer;
#   SIGINT to run.sh's whole process group (^C in a terminal, timeout(1));
#   its time limit (ECHOD_FUZZ_CAMPAIGN_SECONDS).
# Each time run.sh must exit 143, 130 or 0, say so in its summary, have folded the inputs the
# fuzzer found into corpus/, and leave neither a fuzzer running nor a scratch directory behind.
# Then a fuzzer that hangs in its own stop handler (hung, below) must be killed, not waited on.
# Uses run.sh's build (build-fuzz/, built when missing); about 25 seconds (22 s here).
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=fuzz_timeout
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/echod-check-stop.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
export ECHOD_FUZZ_KEPT="$SCRATCH/kept" ECHOD_FUZZ_OUT="$SCRATCH/out" TMPDIR="$SCRATCH/tmp"
mkdir -p "$ECHOD_FUZZ_KEPT/seeds" "$TMPDIR"
cp -r "$ROOT/tests/fuzz/seeds/$T" "$ECHOD_FUZZ_KEPT/seeds/"
"$ROOT/tests/fuzz/run.sh" --replay $T >"$SCRATCH/build.log" 2>&1 || {
    cat "$SCRATCH/build.log"
    exit 1
}

failed=0
fail() {
    echo "check-stop: $1: $2" >&2
    sed 's/^/   /' "$SCRATCH/run.log" >&2
    failed=1
}

# campaign HOW SIGNAL WANT_STATUS WANT_SUMMARY: one stopped campaign, from an empty corpus/
# (HOW: process, group, or "time limit" with SIGNAL none)
campaign() {
    rm -rf "$ECHOD_FUZZ_KEPT/corpus" "$ECHOD_FUZZ_OUT"
    # a new session, so that the group can be signalled as a terminal would; the signals at
    # their defaults, as a shell started from a terminal has them (a background job of a
    # script starts with SIGINT ignored, and a shell cannot trap a signal ignored on entry)
    setsid env --default-signal=INT,TERM "$ROOT/tests/fuzz/run.sh" --campaign 1000000000000 $T \
        >"$SCRATCH/run.log" 2>&1 &
    pid=$!
    if [ "$2" != none ]; then
        # stop it once the fuzzing runs, past the replay
        i=0
        until grep -q INITED "$ECHOD_FUZZ_OUT/$T.log" 2>/dev/null || [ $i -ge 600 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        sleep 2
        case $1 in
        process) kill -s "$2" "$pid" ;;
        group) kill -s "$2" -- "-$pid" ;;
        esac
    fi
    status=0
    wait "$pid" || status=$?
    corpus=$(find "$ECHOD_FUZZ_KEPT/corpus/$T" -type f 2>/dev/null | wc -l)
    [ "$status" -eq "$3" ] || fail "$1 $2" "exit status $status, not $3"
    grep -q "$4" "$SCRATCH/run.log" || fail "$1 $2" "the summary does not say '$4'"
    if [ "$corpus" -eq 0 ] || ! grep -q "corpus 0 -> $corpus files" "$SCRATCH/run.log"; then
        fail "$1 $2" "corpus/ holds $corpus inputs, not what the fuzzer found"
    fi
    if kill -0 -- "-$pid" 2>/dev/null; then fail "$1 $2" "a process of the run is still there"; fi
    [ -z "$(ls "$TMPDIR")" ] || fail "$1 $2" "scratch left behind: $(ls "$TMPDIR")"
    echo "check-stop: $1 $2: exit $status, $corpus inputs kept after $(grep -o 'execs [0-9]*' "$SCRATCH/run.log" | tail -1)"
}

# hung: the fourth stop, where libFuzzer's own handler deadlocks after its final stats (run.sh's
# reap_interrupted). That deadlock needs a signal inside malloc and cannot be called up, so the
# fuzzer here is a script that does what the hung one did: its stats, then nothing, with both
# signals ignored. run.sh must kill it after 10 s, say so, and end 143 with a summary.
hung() {
    build=$SCRATCH/hung-build
    mkdir -p "$build/tests/fuzz"
    printf 'build tests/fuzz/%s: phony\n' $T >"$build/build.ninja"
    cat >"$build/tests/fuzz/$T" <<'FUZZER'
#!/bin/sh
for a; do [ "$a" = -runs=0 ] && exit 0; done
trap 'echo "==1== libFuzzer: run interrupted; exiting"; echo "stat::number_of_executed_units: 7"
      echo "stat::peak_rss_mb: 30"; trap "" INT TERM; exec sleep 3600' INT TERM
echo "INFO: seed corpus: files: 1 min: 1b max: 1b total: 1b rss: 30Mb"
echo "#2 INITED cov: 1 ft: 1 corp: 1/1b exec/s: 0 rss: 30Mb"
while :; do sleep 0.1; done
FUZZER
    chmod +x "$build/tests/fuzz/$T"
    rm -rf "$ECHOD_FUZZ_OUT"
    t0=$(date +%s)
    setsid env --default-signal=INT,TERM ECHOD_FUZZ_BUILD="$build" "$ROOT/tests/fuzz/run.sh" 1000 $T \
        >"$SCRATCH/run.log" 2>&1 &
    pid=$!
    i=0
    until grep -q INITED "$ECHOD_FUZZ_OUT/$T.log" 2>/dev/null || [ $i -ge 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -s TERM "$pid"
    # a run.sh that waits on the hung fuzzer would hang this check too: 60 s, then the group is
    # killed. The watchdog holds none of our output (a pipe reader would wait for its sleep), and
    # ends with its sleep (killed, the sleep fails the &&).
    (sleep 60 && kill -s KILL -- "-$pid") >/dev/null 2>&1 &
    watchdog=$!
    status=0
    wait "$pid" || status=$?
    pkill -P "$watchdog" sleep 2>/dev/null || true
    wait "$watchdog" 2>/dev/null || true
    secs=$(($(date +%s) - t0))
    [ "$status" -eq 143 ] || fail "hung fuzzer" "exit status $status, not 143"
    grep -q "hung after its final stats" "$SCRATCH/run.log" || fail "hung fuzzer" "run.sh does not say it killed it"
    grep -q "fuzz stopped (SIGTERM): execs 7" "$SCRATCH/run.log" || fail "hung fuzzer" "no summary of the stopped run"
    if kill -0 -- "-$pid" 2>/dev/null; then fail "hung fuzzer" "a process of the run is still there"; fi
    [ -z "$(ls "$TMPDIR")" ] || fail "hung fuzzer" "scratch left behind: $(ls "$TMPDIR")"
    echo "check-stop: a fuzzer hung after its stats: exit $status after ${secs}s"
}

campaign process TERM 143 "fuzz stopped (SIGTERM)"
campaign group INT 130 "fuzz stopped (SIGINT)"
hung
export ECHOD_FUZZ_CAMPAIGN_SECONDS=3
campaign "time limit" none 0 "fuzz ok"
exit $failed
