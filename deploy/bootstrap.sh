#!/usr/bin/env bash
# Set up echod on a fresh Debian 12 machine, as root, from any directory.
#
#   deploy/bootstrap.sh run    install what is missing, build (release), run echod on config/echod.yaml
#   deploy/bootstrap.sh build  install what is missing, build (release) into build/
#   deploy/bootstrap.sh test   install (with the test tools), build, run the whole test suite in
#                              build/ (release), then again in build-asan/ (AddressSanitizer +
#                              UndefinedBehaviorSanitizer) and build-tsan/ (ThreadSanitizer);
#                              tests/lsan.supp and tests/tsan.supp are used when present; then
#                              the libFuzzer targets (tests/fuzz/run.sh), valgrind memcheck
#                              over part of the integration suite (tests/memcheck.sh), and the
#                              container image built with podman and run (tests/image/check.py;
#                              skipped, with the reason, where podman cannot run)
#
# Environment:
#   ECHOD_SUITES   which checks to run, default "release asan tsan fuzz memcheck image"; also
#                  "soak" (bench/soak: 10 minutes on each of direct and fixed, about 21 min)
#   ECHOD_FUZZ_SECONDS  seconds per fuzz target (default 30)
#   MESON_TEST_ARGS extra arguments for every `meson test` (e.g. "--suite integration")
set -euo pipefail

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
}

cd "$(dirname "$(readlink -f "$0")")/.."
ROOT=$PWD

# grpc-proto + protoc: the health, reflection and benchmark protos and the embedded descriptors.
BUILD_PKGS=(meson ninja-build pkg-config gcc libc6-dev libh2o-evloop-dev libnghttp2-dev
            libprotobuf-c-dev protobuf-c-compiler libyaml-dev libssl-dev zlib1g-dev grpc-proto protobuf-compiler python3)
# grpc-tools: test stubs from grpc-proto; matplotlib: deploy/report; valgrind: the callgrind
# regression check; clang + its runtime: the libFuzzer targets; prometheus-client: the text
# format (tools/echodlib/prom.py); prometheus (with promtool): the local Prometheus of
# test_prometheus and bench/study --prometheus, and the rules' unit tests (k8s/monitoring).
TEST_PKGS=(python3 python3-grpcio python3-grpc-tools python3-h2 python3-yaml python3-matplotlib nghttp2-client
           openssl valgrind clang libclang-rt-14-dev python3-prometheus-client prometheus)
# The image check: podman with runc (crun, podman's default, fails on hybrid cgroup hosts),
# mmdebstrap for the local debian:bookworm(-slim) bases, git for the build context.
IMAGE_PKGS=(podman runc mmdebstrap git)

log() { printf '==> %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root to run: $*"
        exit 1
    fi
}

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# Installs the Debian packages that are missing; apt-get update only when something is.
install_packages() {
    local missing=() p
    for p in "$@"; do
        installed "$p" || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "Debian packages: all present"
        return
    fi
    log "installing: ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

install_deps() {
    local pkgs=("${BUILD_PKGS[@]}")
    if [ "$1" = test ]; then
        pkgs+=("${TEST_PKGS[@]}" "${IMAGE_PKGS[@]}")
        # A node that is already on the machine (another distribution of it) is kept.
        if ! command -v node >/dev/null 2>&1; then
            pkgs+=(nodejs npm)
        elif ! command -v npm >/dev/null 2>&1; then
            log "node is installed but npm is not: the grpc-js tests will be skipped"
        fi
    fi
    install_packages "${pkgs[@]}"
}

# setup_build DIR [meson options...]: configure DIR, or reconfigure it with these options.
setup_build() {
    local dir=$1
    shift
    if [ -f "$dir/meson-private/coredata.dat" ]; then
        meson setup --reconfigure "$dir" "$@"
    else
        meson setup "$dir" "$@"
    fi
}

build_release() {
    setup_build build -Dwerror=true --buildtype=release
    ninja -C build
}

# npm ci in each Node test package (the grpc-js tests).
npm_install() {
    if ! command -v npm >/dev/null 2>&1; then
        return
    fi
    local dir i
    for dir in tests/node; do
        log "npm ci in $dir"
        for i in 1 2 3; do
            if (cd "$dir" && npm ci --no-audit --no-fund); then
                continue 2
            fi
            log "npm ci in $dir failed (attempt $i)"
            sleep 5
        done
        log "npm ci failed in $dir"
        exit 1
    done
}

TOTAL_PASSED=0
TOTAL_FAILED=0
TOTAL_SKIPPED=0
FAILED_SUITES=()
SKIPPED_SUITES=()

# count_results DIR NAME: adds DIR's meson test results to the totals and prints them.
count_results() {
    local counts
    counts=$(/usr/bin/python3 - "$1/meson-logs/testlog.json" <<'EOF'
import json, sys
passed = failed = skipped = 0
try:
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line).get("result", "")
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
except OSError:
    failed += 1
print(passed, failed, skipped)
EOF
    )
    local p f s
    read -r p f s <<<"$counts"
    log "$2: $p passed, $f failed, $s skipped"
    TOTAL_PASSED=$((TOTAL_PASSED + p))
    TOTAL_FAILED=$((TOTAL_FAILED + f))
    TOTAL_SKIPPED=$((TOTAL_SKIPPED + s))
}

# run_suite NAME DIR [env assignments...] -- [meson options...]
run_suite() {
    local name=$1 dir=$2
    shift 2
    local envs=()
    while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
        envs+=("$1")
        shift
    done
    [ "$#" -gt 0 ] && shift
    log "test suite '$name' in $dir"
    local prefix=()
    if [ "$name" = tsan ] && command -v setarch >/dev/null 2>&1; then
        # ThreadSanitizer wants a fixed memory layout; high mmap ASLR entropy breaks it.
        prefix=(setarch "$(uname -m)" -R)
    fi
    local rc=0
    setup_build "$dir" -Dwerror=true "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then
        ninja -C "$dir" || rc=$?
    fi
    if [ "$rc" -eq 0 ]; then
        rm -f "$dir/meson-logs/testlog.json"
        # shellcheck disable=SC2086
        env "${envs[@]}" "${prefix[@]}" meson test -C "$dir" --print-errorlogs \
            --timeout-multiplier "$([ "$name" = release ] && echo 1 || echo 2)" \
            ${MESON_TEST_ARGS:-} || rc=$?
        count_results "$dir" "$name"
    else
        log "$name: build failed"
        TOTAL_FAILED=$((TOTAL_FAILED + 1))
    fi
    if [ "$rc" -ne 0 ]; then
        FAILED_SUITES+=("$name")
    fi
}

# run_script NAME COMMAND...: a check that is a script rather than a meson suite; one result
# (exit 77: skipped, the script says why).
run_script() {
    local name=$1
    shift
    log "check '$name': $*"
    local rc=0
    "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then
        log "$name: passed"
        TOTAL_PASSED=$((TOTAL_PASSED + 1))
    elif [ "$rc" -eq 77 ]; then
        log "$name: skipped"
        TOTAL_SKIPPED=$((TOTAL_SKIPPED + 1))
        SKIPPED_SUITES+=("$name")
    else
        log "$name: FAILED"
        TOTAL_FAILED=$((TOTAL_FAILED + 1))
        FAILED_SUITES+=("$name")
    fi
}

run_tests() {
    local suites=${ECHOD_SUITES:-release asan tsan fuzz memcheck image}
    local s tsan_opts lsan_opts
    for s in $suites; do
        case $s in
        release)
            run_suite release build ECHOD_SANITIZER= -- --buildtype=release
            ;;
        asan)
            lsan_opts="print_suppressions=0"
            if [ -f tests/lsan.supp ]; then
                lsan_opts="$lsan_opts:suppressions=$ROOT/tests/lsan.supp"
            fi
            run_suite asan build-asan ECHOD_SANITIZER=asan \
                ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
                "LSAN_OPTIONS=$lsan_opts" \
                UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
                -- -Db_sanitize=address,undefined -Db_lundef=false
            ;;
        tsan)
            tsan_opts="halt_on_error=1 second_deadlock_stack=1"
            if [ -f tests/tsan.supp ]; then
                tsan_opts="$tsan_opts suppressions=$ROOT/tests/tsan.supp"
            fi
            run_suite tsan build-tsan ECHOD_SANITIZER=tsan "TSAN_OPTIONS=$tsan_opts" \
                -- -Db_sanitize=thread
            ;;
        fuzz)
            # each libFuzzer target for ECHOD_FUZZ_SECONDS against its corpus (clang, ASan+UBSan)
            run_script fuzz tests/fuzz/run.sh "${ECHOD_FUZZ_SECONDS:-30}"
            ;;
        memcheck)
            # the release binary of the first suite, under valgrind, over part of the integration suite
            run_script memcheck env ECHOD_BIN="$ROOT/build/daemon/echod" tests/memcheck.sh
            ;;
        image)
            # deploy/Dockerfile built with podman from this checkout and run (deploy/README.md)
            run_script image /usr/bin/python3 tests/image/check.py
            ;;
        soak)
            # not in the default list: 10 minutes at 80% of the knee on direct, then on fixed
            # (bench/soak; test_soak is its 60 s version in the release suite)
            build_release
            run_script soak env ECHOD_BIN="$ROOT/build/daemon/echod" /usr/bin/python3 bench/soak
            ;;
        *)
            log "unknown suite '$s' in ECHOD_SUITES"
            exit 2
            ;;
        esac
    done
    echo
    if [ "${#FAILED_SUITES[@]}" -gt 0 ]; then
        log "failed: ${FAILED_SUITES[*]}"
    fi
    if [ "${#SKIPPED_SUITES[@]}" -gt 0 ]; then
        log "skipped: ${SKIPPED_SUITES[*]}"
    fi
    echo "$TOTAL_PASSED passed, $TOTAL_FAILED failed, $TOTAL_SKIPPED skipped"
    [ "${#FAILED_SUITES[@]}" -eq 0 ] && [ "$TOTAL_FAILED" -eq 0 ]
}

case "${1:-}" in
run)
    install_deps run
    build_release
    log "starting echod (config/echod.yaml): gRPC on :50051, admin on :8080"
    exec build/daemon/echod --config config/echod.yaml
    ;;
build)
    install_deps build
    build_release
    ;;
test)
    install_deps test
    npm_install
    run_tests
    ;;
*)
    usage
    ;;
esac
