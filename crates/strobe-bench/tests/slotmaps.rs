//! Concurrent reserve/release on a shared slot table over each map the breakpoint
//! benchmark compares (`src/slotmaps.rs`), with strobe-watch's own contract check
//! (`strobe_watch::conformance::stress`): no thread is ever given more slots than it has,
//! and no slot is ever handed out twice.

use strobe_bench::{ArrayMap, ListMap, MutexHashMap};
use strobe_watch::conformance::stress;

#[test]
fn list_table_under_contention() {
    stress::<ListMap>();
}

#[test]
fn mutex_hash_table_under_contention() {
    stress::<MutexHashMap>();
}

#[test]
fn array_table_under_contention() {
    stress::<ArrayMap>();
}
