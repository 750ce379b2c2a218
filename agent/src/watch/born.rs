//! Per-thread mode: threads that open their own watchpoint events at birth, and the
//! hand-over of those events to the writer thread.
//!
//! Owns: a fixed table of hand-over entries, what each debug-register slot is aimed at
//! now, and the count of threads between `pthread_create` and the end of their arming.
//! Runs on the target's threads (the `pthread_create` interposer and the new thread's
//! trampoline): it must never allocate, lock, block or panic there, and never change what
//! the target sees (errno included).
//!
//! # Protocol
//!
//! A thread made with `pthread_create` is counted in [`PENDING`] by its parent before the
//! clone (`coming`), opens one event per slot on itself before its start routine runs
//! (aimed at [`AIM`]), puts the fds in an entry it claimed (`FREE -> CLAIMED` by CAS, then
//! `READY` with Release), and only then leaves [`PENDING`] (AcqRel). The writer thread
//! lists `/proc/self/task`, then reads [`PENDING`] (Acquire), then adopts every `READY`
//! entry (Acquire; it takes the fds and frees the entry). A thread it listed was counted
//! before it existed, so if the writer read 0 that thread's decrement came first in
//! `PENDING`'s modification order and the writer's Acquire load synchronises with it:
//! its entry is `READY` and adopted in this pass. Only when it read 0 does the writer open
//! events itself for a listed thread it does not know (one made by raw `clone`, or one
//! whose arming failed): so no thread ever gets two sets of events, and no thread that
//! arms itself is missed.
//!
//! The writer re-aims a slot by storing [`AIM`] before it re-targets the threads it
//! knows; a thread that read the old aim is re-targeted when it is adopted.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

/// Entries: threads that armed themselves and are not adopted yet (adoption follows
/// within a millisecond). A thread that finds none free runs on and is armed by the writer.
pub const CAPACITY: usize = 1024;
/// Debug-register slots per thread (x86).
pub const SLOTS: usize = 4;

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const READY: u32 = 2;

/// One thread's self-opened events, waiting for the writer.
struct Entry {
    state: AtomicU32,
    tid: AtomicI32,
    /// Events opened (the first `opened` slots).
    opened: AtomicU32,
    fds: [AtomicI32; SLOTS],
    /// The watchpoint each fd was opened on.
    aim: [AtomicU32; SLOTS],
}

impl Entry {
    const fn new() -> Entry {
        Entry {
            state: AtomicU32::new(FREE),
            tid: AtomicI32::new(0),
            opened: AtomicU32::new(0),
            fds: [const { AtomicI32::new(-1) }; SLOTS],
            aim: [const { AtomicU32::new(0) }; SLOTS],
        }
    }
}

static ENTRIES: [Entry; CAPACITY] = [const { Entry::new() }; CAPACITY];
/// Where the next claim starts looking (so a claim is O(1) while entries are free).
static CURSOR: AtomicUsize = AtomicUsize::new(0);
/// Slots a new thread opens; 0 while the hook is off (not per-thread mode, or stopping).
static ARMING: AtomicU32 = AtomicU32::new(0);
/// The watchpoint each slot is aimed at now.
static AIM: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
/// Threads counted by [`coming`] whose arming has not finished.
static PENDING: AtomicUsize = AtomicUsize::new(0);

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
    // Relaxed is enough for the count itself: the writer learns of the thread through
    // /proc, which it can read only after the clone system call that follows this.
    PENDING.fetch_add(1, Ordering::Relaxed);
}

/// The counted thread finished arming (or was never created).
pub fn done() {
    // Release (in AcqRel): the entry's READY store before this is visible to the writer
    // once it reads a count that this decrement produced or that follows it.
    PENDING.fetch_sub(1, Ordering::AcqRel);
}

/// Writer: counted threads that have not finished arming.
pub fn pending() -> usize {
    // Acquire: pairs with `done`.
    PENDING.load(Ordering::Acquire)
}

/// A claimed entry, filled by the thread that claimed it.
pub struct Claim(&'static Entry);

/// Claims a free entry; `None` when all are taken. Lock-free, allocates nothing.
pub fn claim() -> Option<Claim> {
    let start = CURSOR.fetch_add(1, Ordering::Relaxed);
    for i in 0..CAPACITY {
        let e = ENTRIES.get(start.wrapping_add(i) % CAPACITY)?;
        // Acquire on success: the writer's FREE store (Release) after taking the previous
        // owner's fds happens before this claim reuses the entry.
        if e.state.compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            e.opened.store(0, Ordering::Relaxed);
            return Some(Claim(e));
        }
    }
    None
}

impl Claim {
    /// Records the fd opened for `slot`, aimed at `wp` (slots in order from 0).
    pub fn put(&self, slot: u32, fd: RawFd, wp: usize) {
        let i = slot as usize;
        if let (Some(f), Some(a)) = (self.0.fds.get(i), self.0.aim.get(i)) {
            // Relaxed: published by `publish`'s Release.
            f.store(fd, Ordering::Relaxed);
            a.store(wp as u32, Ordering::Relaxed);
            self.0.opened.store(slot + 1, Ordering::Relaxed);
        }
    }

    /// Hands the entry to the writer.
    pub fn publish(self, tid: i32) {
        self.0.tid.store(tid, Ordering::Relaxed);
        // Release: the writer's Acquire load of READY sees the fds, aims and tid.
        self.0.state.store(READY, Ordering::Release);
    }
}

/// What the writer takes from one entry.
pub struct Adopted {
    /// The thread.
    pub tid: i32,
    /// `(fd, watchpoint)` per slot opened, in slot order; the caller owns the fds.
    pub fds: [(RawFd, usize); SLOTS],
    /// How many of `fds` are valid.
    pub opened: usize,
}

/// Writer: takes every published entry (the caller owns the fds from now on) and frees it.
pub fn adopt(mut f: impl FnMut(Adopted)) {
    for e in &ENTRIES {
        // Acquire: pairs with `publish`.
        if e.state.load(Ordering::Acquire) != READY {
            continue;
        }
        let mut a =
            Adopted { tid: e.tid.load(Ordering::Relaxed), fds: [(-1, 0); SLOTS], opened: 0 };
        a.opened = (e.opened.load(Ordering::Relaxed) as usize).min(SLOTS);
        for (out, (fd, wp)) in a.fds.iter_mut().zip(e.fds.iter().zip(&e.aim)).take(a.opened) {
            *out = (fd.load(Ordering::Relaxed), wp.load(Ordering::Relaxed) as usize);
        }
        // Release: our reads above happen before the entry's next claim.
        e.state.store(FREE, Ordering::Release);
        f(a);
    }
}
