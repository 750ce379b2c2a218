#!/usr/bin/env bash
# Checkers beyond loom (ci/loom.sh): the stress tests of the lock-free structures on real
# threads under valgrind's memcheck (use after free, uninitialised reads, bad frees) and
# helgrind (lock order, pthread API misuse), and the fuzz targets built with
# AddressSanitizer. Miri is not available here (the nightly toolchain has no miri
# component), so these stand where crossbeam runs ci/miri.sh beside its ci/san.sh.
#
#   SAN_FUZZ_SECONDS  seconds per fuzz target under ASan (default 20; 0 only builds)
#   SAN_STRESS_MS     run time of each strobe-rcu stress test under valgrind (default 1000)
#   SAN_CUSTODY_RECORDS  records per owner in custody_stress under valgrind (default 2000;
#                     20,000 takes more than 6 minutes under memcheck)
#   SAN_SKIP          space-separated parts to skip: memcheck helgrind asan
#
# The stress tests under valgrind:
# - strobe-rcu tests/stress.rs: readers (also in signal handlers) against writers that
#   replace, remove and retire objects, every object checked by a canary at drop;
# - strobe-sampler tests/custody_stress.rs and the ring, born-thread and gate stress tests:
#   the block pool samples leave the target through, the per-thread ring, the hand-over,
#   the seccomp gate;
# - strobe-protocol's arena tests: a child process attaches to the shared arena by path
#   and its records reach the recorder;
# - strobe-unwind tests/stress.rs: dlopen/dlclose churn while other threads walk stacks
#   through the module table strobe-rcu publishes.
# Valgrind runs one thread at a time (--fair-sched=yes switches them often), so these find
# memory errors on the paths the threads take, not races; the loom models cover the
# interleavings. Helgrind does not know that an Acquire load on x86-64 (a plain mov) pairs
# with a Release store, so on lock-free code it reports every such pair as a race (232
# reports on strobe-rcu's stress test, the first inside std's own thread start): its race
# reports are suppressed (ci/helgrind.supp) and it checks what it does model, lock order
# and the pthread API (the test harness, thread creation and joins, the arena's
# cross-process wakeups).
#
# ASan: nightly Rust (`-Zsanitizer=address`) on the fuzz targets, with the coverage flags
# of ci/fuzz.sh, in their own target directory. The standard library is not rebuilt with
# the sanitizer (that needs the rust-src component, which this machine cannot fetch), so
# ASan checks strobe's code and its dependencies, not std's.
set -euo pipefail
cd "$(dirname "$0")/.."

skip=" ${SAN_SKIP:-} "
base_target="${CARGO_TARGET_DIR:-$PWD/target}"
# valgrind comes from ci/setup.sh (apt-get, when absent).
command -v valgrind >/dev/null 2>&1 || bash ci/setup.sh

# The test binaries are those of `cargo test` (the dev profile: debug info for valgrind's
# reports); the runner only changes how they are started.
# Each: cargo's arguments, then libtest's filters after `--`.
stress_tests=(
    "-p strobe-rcu --test stress --"
    "-p strobe-sampler --test custody_stress --"
    "-p strobe-sampler --lib -- stress mpsc:: gate::"
    "-p strobe-protocol --lib -- arena::"
    "-p strobe-unwind --test stress --"
)

run_under() {
    local tool="$1"
    shift
    for t in "${stress_tests[@]}"; do
        echo "== $tool: cargo test $t"
        # shellcheck disable=SC2086
        CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="valgrind --tool=$tool $* --error-exitcode=1 \
--fair-sched=yes --quiet --trace-children=yes" \
            STROBE_RCU_STRESS_MS="${SAN_STRESS_MS:-1000}" \
            STROBE_CUSTODY_STRESS_RECORDS="${SAN_CUSTODY_RECORDS:-2000}" \
            STROBE_BORN_STRESS_EACH=2000 \
            STROBE_UNWIND_STRESS_MS=10000 \
            cargo test --quiet $t --test-threads=1
    done
}

if [[ "$skip" != *" memcheck "* ]]; then
    # Leaks are not errors here: the tests leak on purpose (thread-locals of threads
    # still registered at exit, leaked 'static domains).
    run_under memcheck --leak-check=no --track-origins=yes
fi

if [[ "$skip" != *" helgrind "* ]]; then
    run_under helgrind --suppressions="$PWD/ci/helgrind.supp"
fi

if [[ "$skip" != *" asan "* ]]; then
    echo "== AddressSanitizer: fuzz targets, ${SAN_FUZZ_SECONDS:-20} s each"
    FUZZ_SANITIZER=address FUZZ_SECONDS="${SAN_FUZZ_SECONDS:-20}" CARGO_TARGET_DIR="$base_target" \
        bash ci/fuzz.sh
fi
echo "== san: no errors"
