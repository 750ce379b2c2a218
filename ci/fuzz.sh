#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/*.rs: the parsers of outside input) for a
# bounded time against its committed seeds (fuzz/seeds/NAME/). Called by ci/test.sh.
#
#   FUZZ_SECONDS  seconds per target (default 30; 0 only builds)
#   FUZZ_JOBS     targets run at once (default: the number of CPUs)
#   FUZZ_TARGETS  space-separated names to run (default: all)
#   FUZZ_SANITIZER  a sanitizer to build with as well, e.g. address (nightly Rust; ci/san.sh
#                 sets it); the build goes to its own target directory, fuzz-SANITIZER
#
# The targets are libFuzzer binaries built by stable Rust with LLVM's sanitizer-coverage
# passes (the instrumentation cargo-fuzz adds, without its tool or a nightly toolchain);
# libfuzzer-sys compiles libFuzzer itself, which needs a C++ compiler (ci/setup.sh).
# Inputs the fuzzer finds interesting go to a scratch directory, so a run never changes
# the tree. A crash fails the run and leaves its input in $CARGO_TARGET_DIR/fuzz/crashes;
# make it a regression test in the crate that owns the parser (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${FUZZ_SECONDS:-30}"
jobs="${FUZZ_JOBS:-$(nproc)}"
host="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
# Only the target's code gets the flags (--target): build scripts and proc macros stay
# uninstrumented, as under cargo-fuzz.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares"
cargo=(cargo)
if [ -n "${FUZZ_SANITIZER:-}" ]; then
    cargo=(cargo +nightly)
    export CARGO_TARGET_DIR="$CARGO_TARGET_DIR-$FUZZ_SANITIZER"
    RUSTFLAGS="$RUSTFLAGS -Zsanitizer=$FUZZ_SANITIZER"
fi

targets="${FUZZ_TARGETS:-$(cd fuzz/fuzz_targets && ls -- *.rs | sed 's/\.rs$//')}"
for t in $targets; do
    [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "ci/fuzz.sh: no target '$t' in fuzz/fuzz_targets" >&2; exit 1; }
    [ -d "fuzz/seeds/$t" ] || { echo "ci/fuzz.sh: target '$t' has no seeds in fuzz/seeds/$t" >&2; exit 1; }
done

"${cargo[@]}" build --manifest-path fuzz/Cargo.toml --release --target "$host" --bins
[ "$secs" = 0 ] && exit 0

out="$CARGO_TARGET_DIR/fuzz"
rm -rf "$out/corpus" "$out/logs"
mkdir -p "$out/corpus" "$out/logs" "$out/crashes"

run() {
    local t="$1"
    mkdir -p "$out/corpus/$t"
    # -timeout: one input taking 10 s is a hang; -rss_limit_mb: an input making a parser
    # hold 2 GiB is a bug too.
    "$CARGO_TARGET_DIR/$host/release/$t" "$out/corpus/$t" "fuzz/seeds/$t" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="$out/crashes/$t-" -print_final_stats=1 >"$out/logs/$t" 2>&1
}

declare -A pid_of
failed=()
for t in $targets; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    run "$t" &
    pid_of[$t]=$!
done
for t in $targets; do
    if wait "${pid_of[$t]}"; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/logs/$t")
        cov=$(grep -o 'cov: [0-9]*' "$out/logs/$t" | tail -1)
        echo "fuzz $t: ${runs:-?} inputs in ${secs}s, ${cov:-cov: ?}, no crash"
    else
        failed+=("$t")
        echo "fuzz $t: FAILED; the end of its log:" >&2
        tail -40 "$out/logs/$t" >&2
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "ci/fuzz.sh: ${failed[*]} crashed; inputs in $out/crashes (replay one with" \
        "$CARGO_TARGET_DIR/$host/release/TARGET FILE)" >&2
    exit 1
fi
