#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and integration tests, the agent's own
# tests, and the concurrency models. This is what .ci/run and the README run.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/setup.sh

echo "== fmt"
cargo fmt --all -- --check
(cd agent && cargo fmt -- --check)

echo "== clippy"
cargo clippy --workspace --all-targets -- -D warnings
(cd agent && cargo clippy --all-targets -- -D warnings)

echo "== tests"
cargo test --workspace
(cd agent && cargo test)

if [ -f ci/loom.sh ]; then
    echo "== loom models"
    bash ci/loom.sh
fi
echo "== all tests passed"
