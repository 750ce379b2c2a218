//! Per-thread mode: threads that open their own watchpoint events at birth, and the
//! hand-over of those events to the writer thread.
//!
//! Owns: the agent's hand-over table (its protocol, entries and pending count are
//! `strobe_sampler::born`'s, modelled by that crate's `tests/loom.rs`), what each
//! debug-register slot is aimed at now, and whether new threads arm themselves.
//! Runs on the target's threads (the `pthread_create` interposer and the new thread's
//! trampoline): it must never allocate, lock, block or panic there, and never change what
//! the target sees (errno included).
//!
//! # Protocol
//!
//! A thread made with `pthread_create` is counted as pending by its parent before the
//! clone (`coming`), opens one event per slot on itself before its start routine runs
//! (aimed at [`AIM`]), puts the fds in an entry it claimed (`FREE -> CLAIMED` by CAS, then
//! `READY` with Release), and only then leaves the count (AcqRel). The writer thread
//! lists `/proc/self/task`, then reads the count (Acquire), then adopts every `READY`
//! entry (Acquire; it takes the fds and frees the entry). A thread it listed was counted
//! before it existed, so if the writer read 0 that thread's decrement came first in
//! the count's modification order and the writer's Acquire load synchronises with it:
//! its entry is `READY` and adopted in this pass. Only when it read 0 does the writer open
//! events itself for a listed thread it does not know (one made by raw `clone`, or one
//! whose arming failed): so no thread ever gets two sets of events, and no thread that
//! arms itself is missed (`born_hand_over` in strobe-sampler's `tests/loom.rs`).
//!
//! The writer re-aims a slot by storing [`AIM`] before it re-targets the threads it
//! knows; a thread that read the old aim is re-targeted when it is adopted.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

use strobe_sampler::born::BornTable;
pub use strobe_sampler::born::{Adopted, Claim, SLOTS};

/// Entries: threads that armed themselves and are not adopted yet (adoption follows
/// within a millisecond). A thread that finds none free runs on and is armed by the writer.
pub const CAPACITY: usize = 1024;

static TABLE: BornTable<CAPACITY> = BornTable::new();
/// Slots a new thread opens; 0 while the hook is off (not per-thread mode, or stopping).
static ARMING: AtomicU32 = AtomicU32::new(0);
/// The watchpoint each slot is aimed at now.
static AIM: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];

/// Writer: new threads arm `slots` slots from now on (0: not any more).
pub fn set_arming(slots: u32) {
    // Release: a thread that reads `slots` also sees the AIM stores before this.
    ARMING.store(slots.min(SLOTS as u32), Ordering::Release);
}

/// Slots a new thread should open (0: none).
pub fn arming() -> u32 {
    // Acquire: pairs with `set_arming`.
    ARMING.load(Ordering::Acquire)
}

/// Writer: slot `slot` is aimed at watchpoint `wp` (stored before re-targeting the known
/// threads, so a thread that reads the old value is re-targeted at adoption).
pub fn set_aim(slot: u32, wp: usize) {
    if let Some(a) = AIM.get(slot as usize) {
        // Release: pairs with the arming thread's Acquire load.
        a.store(wp as u32, Ordering::Release);
    }
}

/// The watchpoint `slot` is aimed at now.
pub fn aim(slot: u32) -> usize {
    // Acquire: pairs with `set_aim`.
    AIM.get(slot as usize).map_or(0, |a| a.load(Ordering::Acquire) as usize)
}

/// Parent side of `pthread_create`, before the clone: a thread is coming that will arm
/// itself. Balanced by [`done`] in that thread, or in the parent if the create fails.
pub fn coming() {
    TABLE.coming();
}

/// The counted thread finished arming (or was never created).
pub fn done() {
    TABLE.done();
}

/// Writer: counted threads that have not finished arming.
pub fn pending() -> usize {
    TABLE.pending()
}

/// Claims a free entry; `None` when all are taken. Lock-free, allocates nothing.
pub fn claim() -> Option<Claim<'static>> {
    TABLE.claim()
}

/// Writer: takes every published entry (the caller owns the fds from now on) and frees it.
pub fn adopt(f: impl FnMut(Adopted)) {
    TABLE.adopt(f);
}

const _: () = assert!(std::mem::size_of::<RawFd>() == std::mem::size_of::<i32>());
