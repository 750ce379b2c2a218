#!/usr/bin/env bash
# The loom models of strobe-rcu (crates/strobe-rcu/tests/loom.rs), strobe-sampler
# (crates/strobe-sampler/tests/loom.rs) and strobe-unwind (crates/strobe-unwind/tests/loom.rs):
# every interleaving
# of the real grace-period, retire hand-off, RcuPtr and multimap code, up to a
# preemption bound. Called by ci/test.sh; takes well under a minute on 2 cores.
#
# The models build with `--cfg loom`, which changes every crate's flags, so they
# get their own target directory and never invalidate the normal build.
# LOOM_DEEP=1 raises the bounds (the retire model at bound 2 then runs for more than 15 minutes
# since grace periods poll readers; run it by hand, not in CI).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/loom"
export RUSTFLAGS="--cfg loom"
export LOOM_LOCATION=1

if [ "${LOOM_DEEP:-0}" = 1 ]; then small=4; retire=2; else small=3; retire=1; fi

# Small models (two or three threads, a few operations each): bound 3.
LOOM_MAX_PREEMPTIONS=$small cargo test -p strobe-rcu --release --test loom -- \
    --skip retire_batching_and_hand_off
# The retire model runs three threads through the whole batching pipeline; its
# state space grows ~30x per extra preemption.
LOOM_MAX_PREEMPTIONS=$retire cargo test -p strobe-rcu --release --test loom -- \
    --exact retire_batching_and_hand_off

# strobe-sampler's models (crates/strobe-sampler/tests/loom.rs): the per-thread
# sample ring (wrap-around, loss counting, the wakeup threshold), slot reuse by a
# new owner against a late signal of the old one, the watchpoint hit ring, and the
# hand-over of events that threads open on themselves at birth (born_hand_over*).
# A few seconds each at bound 3; LOOM_DEEP=1 runs them at 4.
LOOM_MAX_PREEMPTIONS=$small cargo test -p strobe-sampler --release --test loom -- --skip custody_models
# Custody (the shared block pool samples leave the target through): the tagged free
# stack (ABA), two producers against the recorder, a partial drain racing a hand-over and
# reuse, a dead slot drained before it is freed, the wakeup rule. About 10 s at bound 2;
# at bound 3 (LOOM_DEEP=1) several minutes.
if [ "${LOOM_DEEP:-0}" = 1 ]; then custody=3; else custody=2; fi
LOOM_MAX_PREEMPTIONS=$custody cargo test -p strobe-sampler --release --test loom custody_models

# strobe-unwind's module table (crates/strobe-unwind/tests/loom.rs): the dlclose protocol
# (unpublish, grace period, unmap, rescan, publish) against a reader, and a stale dlopen
# rescan that must not bring an unloaded module back. About a second at bound 3.
LOOM_MAX_PREEMPTIONS=$small cargo test -p strobe-unwind --release --test loom
