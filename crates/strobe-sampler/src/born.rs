//! The hand-over of watchpoint events that threads open on themselves at birth to the
//! writer thread that keeps them (the agent's per-thread watch mode).
//!
//! Owns: a fixed table of hand-over entries (`FREE -> CLAIMED -> READY -> FREE`) and the
//! count of threads between `pthread_create` and the end of their arming. The agent
//! (`agent/src/watch/born.rs`) owns the system calls around it (opening the events,
//! listing `/proc/self/task`, arming the threads nobody armed). Runs on the target's
//! threads: it must never allocate, lock, block or panic.
//!
//! # Protocol
//!
//! A thread made with `pthread_create` is counted by its parent before the clone
//! ([`BornTable::coming`]), opens one event per slot on itself before its start routine
//! runs, puts the fds in an entry it claimed (`FREE -> CLAIMED` by CAS, then `READY` with
//! Release), and only then leaves the count ([`BornTable::done`], AcqRel). The writer
//! thread lists `/proc/self/task`, then reads the count ([`BornTable::pending`], Acquire),
//! then adopts every `READY` entry ([`BornTable::adopt`], Acquire; it takes the fds and
//! frees the entry). A thread it listed was counted before it existed, so if the writer
//! read 0 that thread's decrement came first in the count's modification order and the
//! writer's Acquire load synchronises with it: its entry is `READY` and adopted in this
//! pass. Only when it read 0 does the writer open events itself for a listed thread it
//! does not know (one made by raw `clone`, or one whose arming failed): so no thread ever
//! gets two sets of events, and no thread that arms itself is missed. `tests/loom.rs`
//! (`born_hand_over`) checks both.

use crate::sync::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

/// Debug-register slots per thread (x86).
pub const SLOTS: usize = 4;

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const READY: u32 = 2;

/// One thread's self-opened events, waiting for the writer.
#[derive(Debug)]
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
    #[cfg(not(loom))]
    const fn new() -> Entry {
        Entry {
            state: AtomicU32::new(FREE),
            tid: AtomicI32::new(0),
            opened: AtomicU32::new(0),
            fds: [const { AtomicI32::new(-1) }; SLOTS],
            aim: [const { AtomicU32::new(0) }; SLOTS],
        }
    }

    #[cfg(loom)]
    fn new() -> Entry {
        Entry {
            state: AtomicU32::new(FREE),
            tid: AtomicI32::new(0),
            opened: AtomicU32::new(0),
            fds: core::array::from_fn(|_| AtomicI32::new(-1)),
            aim: core::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

/// `N` hand-over entries and the count of threads still arming. See the module note.
#[derive(Debug)]
pub struct BornTable<const N: usize> {
    entries: [Entry; N],
    /// Where the next claim starts looking (so a claim is O(1) while entries are free).
    cursor: AtomicUsize,
    /// Threads counted by [`BornTable::coming`] whose arming has not finished.
    pending: AtomicUsize,
}

impl<const N: usize> BornTable<N> {
    /// A table of `N` free entries, nobody pending (`const`: the agent's is a `static`).
    #[cfg(not(loom))]
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        BornTable {
            entries: [const { Entry::new() }; N],
            cursor: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
        }
    }

    /// A table of `N` free entries, nobody pending.
    #[cfg(loom)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        BornTable {
            entries: core::array::from_fn(|_| Entry::new()),
            cursor: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
        }
    }

    /// Parent side of `pthread_create`, before the clone: a thread is coming that will arm
    /// itself. Balanced by [`BornTable::done`] in that thread, or in the parent if the
    /// create fails.
    pub fn coming(&self) {
        // Relaxed is enough for the count itself: the writer learns of the thread through
        // /proc, which it can read only after the clone system call that follows this.
        self.pending.fetch_add(1, Ordering::Relaxed);
    }

    /// The counted thread finished arming (or was never created).
    pub fn done(&self) {
        // Release (in AcqRel): the entry's READY store before this is visible to the writer
        // once it reads a count that this decrement produced or that follows it.
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// Writer: counted threads that have not finished arming.
    pub fn pending(&self) -> usize {
        // Acquire: pairs with `done`.
        self.pending.load(Ordering::Acquire)
    }

    /// Claims a free entry; `None` when all are taken. Lock-free, allocates nothing.
    pub fn claim(&self) -> Option<Claim<'_>> {
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        for i in 0..N {
            let e = self.entries.get(start.wrapping_add(i) % N)?;
            // Acquire on success: the writer's FREE store (Release) after taking the
            // previous owner's fds happens before this claim reuses the entry.
            if e.state.compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                e.opened.store(0, Ordering::Relaxed);
                return Some(Claim(e));
            }
        }
        None
    }

    /// Writer: takes every published entry (the caller owns the fds from now on) and frees
    /// it.
    pub fn adopt(&self, mut f: impl FnMut(Adopted)) {
        for e in &self.entries {
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
}

/// A claimed entry, filled by the thread that claimed it.
#[derive(Debug)]
pub struct Claim<'a>(&'a Entry);

impl Claim<'_> {
    /// Records the fd opened for `slot`, aimed at `wp` (slots in order from 0).
    pub fn put(&self, slot: u32, fd: i32, wp: usize) {
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
#[derive(Debug, Clone, Copy)]
pub struct Adopted {
    /// The thread.
    pub tid: i32,
    /// `(fd, watchpoint)` per slot opened, in slot order; the caller owns the fds.
    pub fds: [(i32, usize); SLOTS],
    /// How many of `fds` are valid.
    pub opened: usize,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Real threads: creators count a thread, "clone" it (it becomes listed), claim an
    /// entry, open (count a set of events), publish and finish, through a table smaller
    /// than the threads in flight, with pauses in which none is pending; a writer polls as
    /// the agent does. Every thread ends with exactly one set of events.
    #[test]
    fn stress_every_thread_gets_one_set() {
        const CREATORS: usize = 2;
        // Threads each creator makes: 100,000, or `STROBE_BORN_STRESS_EACH` (ci/san.sh
        // makes fewer under valgrind, where 100,000 takes more than two minutes).
        let each: usize = std::env::var("STROBE_BORN_STRESS_EACH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        struct World {
            table: BornTable<3>,
            /// Threads of each creator listed in /proc so far (ids `c * each ..`).
            listed: [AtomicUsize; CREATORS],
            sets: Vec<AtomicU32>,
            running: AtomicUsize,
        }
        let w = Arc::new(World {
            table: BornTable::new(),
            listed: [const { AtomicUsize::new(0) }; CREATORS],
            sets: (0..CREATORS * each).map(|_| AtomicU32::new(0)).collect(),
            running: AtomicUsize::new(CREATORS),
        });
        let creators: Vec<_> = (0..CREATORS)
            .map(|c| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for k in 0..each {
                        let id = c * each + k;
                        w.table.coming();
                        w.listed[c].store(k + 1, Ordering::Release);
                        // Every third thread fails to open its events after claiming.
                        if let Some(claim) = w.table.claim() {
                            if id % 3 != 0 {
                                w.sets[id].fetch_add(1, Ordering::Relaxed);
                                claim.put(0, id as i32, 0);
                            }
                            claim.publish(id as i32);
                        }
                        w.table.done();
                        if k % 4 == 0 {
                            std::thread::yield_now();
                        }
                    }
                    w.running.fetch_sub(1, Ordering::Release);
                })
            })
            .collect();
        let mut known = vec![false; CREATORS * each];
        let mut armed_known = [0; CREATORS];
        let (mut adopted, mut writer_armed) = (0, 0);
        loop {
            let last = w.running.load(Ordering::Acquire) == 0;
            let listed: Vec<usize> = w.listed.iter().map(|l| l.load(Ordering::Acquire)).collect();
            let pending = w.table.pending();
            w.table.adopt(|a| {
                let id = a.tid as usize;
                if a.opened == 1 {
                    assert_eq!(a.fds[0], (a.tid, 0));
                    assert!(!known[id], "thread {id} handed over twice");
                    known[id] = true;
                    adopted += 1;
                }
            });
            if pending == 0 {
                for (c, &n) in listed.iter().enumerate() {
                    let (from, to) = (c * each + armed_known[c], c * each + n);
                    for (id, k) in known.iter_mut().enumerate().take(to).skip(from) {
                        if !*k {
                            w.sets[id].fetch_add(1, Ordering::Relaxed);
                            *k = true;
                            writer_armed += 1;
                        }
                    }
                    armed_known[c] = n;
                }
            }
            if last {
                break;
            }
        }
        for c in creators {
            c.join().unwrap();
        }
        assert_eq!(w.table.pending(), 0);
        for (id, s) in w.sets.iter().enumerate() {
            assert_eq!(s.load(Ordering::Relaxed), 1, "thread {id}");
        }
        assert!(adopted > 0 && writer_armed > 0, "adopted {adopted}, armed {writer_armed}");
    }
}
