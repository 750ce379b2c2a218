#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and integration tests, the agent's own
# tests, the concurrency models, the fuzz targets for a bounded time, and the stress tests
# under valgrind and the fuzz targets under AddressSanitizer (ci/san.sh). This is what
# .ci/run and the README run.
set -euo pipefail
cd "$(dirname "$0")/.."
# The fuzz crate is its own workspace (ci/fuzz.sh builds it with coverage flags); its
# lints and unit tests share the workspace's target directory, so the crates both use
# are built once.
fuzz_target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

bash ci/setup.sh

echo "== fmt"
cargo fmt --all -- --check
(cd agent && cargo fmt -- --check)
(cd fuzz && cargo fmt -- --check)

echo "== clippy"
cargo clippy --workspace --all-targets -- -D warnings
# The binary without strobe-bench (the default-on feature `bench` off) builds too.
cargo clippy -p strobe --no-default-features -- -D warnings
(cd agent && cargo clippy --all-targets -- -D warnings)
(cd fuzz && CARGO_TARGET_DIR="$fuzz_target_dir" cargo clippy --all-targets -- -D warnings)

echo "== tests"
cargo test --workspace
(cd agent && cargo test)
(cd fuzz && CARGO_TARGET_DIR="$fuzz_target_dir" cargo test --lib)

if [ -f ci/loom.sh ]; then
    echo "== loom models"
    bash ci/loom.sh
fi

echo "== fuzz targets (${FUZZ_SECONDS:-30} s each)"
bash ci/fuzz.sh

echo "== sanitizers and valgrind"
bash ci/san.sh
echo "== all tests passed"
