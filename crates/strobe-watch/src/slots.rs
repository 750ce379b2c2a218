//! The per-thread debug-register slot table (seed 000).
//!
//! Each thread has [`DEBUG_REGISTERS`] hardware watchpoint slots. Every reservation is one
//! entry `(thread, slots mask)` in a multimap keyed by thread; reserving `n` slots for a
//! thread first visits that thread's entries to learn which slots are taken, then inserts
//! one entry for the new ones. Releasing removes the entry.
//!
//! The seed's lesson is all in *how the map finds a thread's entries*:
//!
//! - [`ListMap`] keeps every reservation of every thread in one list, so learning one
//!   thread's slots scans them all: O(#threads), exactly `task_bp_pinned()` before the
//!   patch. Insertion and removal are O(1) (a slab with a free list, as `list_add_tail` /
//!   `list_del` are), so the scan is the only cost that grows.
//! - A hash multimap keyed by thread (the kernel's `rhltable`) visits only that thread's
//!   entries: O(1). strobe's is `strobe_rcu::HashMultiMap` (lock-free lookups under a read
//!   guard, serialised writers); [`MutexHashMap`] is the lock-based alternative, a
//!   `std::collections::HashMap` behind a mutex.
//!
//! Both plug into [`SlotTable`] through the small [`ThreadMultiMap`] trait: insert an entry,
//! remove one, visit a thread's entries.
//!
//! ## Concurrency
//!
//! Counting a thread's slots and inserting the new entry must be one atomic step, or two
//! threads reserving for the same thread could both see three slots in use and both take the
//! fourth. As the kernel holds `nr_bp_mutex` around `__reserve_bp_slot`, [`SlotTable`]
//! serialises reserve and release with one mutex; the map's own synchronisation only has to
//! make each single operation safe, and lets [`SlotTable::used`] be answered concurrently
//! (lock-free with the RCU multimap). No lock-free code lives in this module.
//!
//! This module must never be called from a signal handler: reserving allocates.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A thread id as the kernel numbers it (`gettid()`).
pub type Tid = i32;

/// Hardware watchpoint slots per thread on x86-64 (DR0-DR3).
pub const DEBUG_REGISTERS: u32 = 4;

/// The most slots per thread a table can track (the slot mask is a `u8`).
pub const MAX_SLOTS: u32 = 8;

/// One reservation as stored in the map: which slots it holds, and a table-unique id so
/// that two reservations of the same slots (one released, one new) never compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotEntry {
    /// Unique per table, never reused.
    pub id: u64,
    /// Bit `i` set: slot `i` is held by this reservation.
    pub mask: u8,
}

/// A multimap from thread to its reservations: the one thing the two variants of the slot
/// table differ in.
///
/// Implementations make each call safe on its own when called concurrently; [`SlotTable`]
/// serialises the insert/remove calls it makes, so an implementation may assume one writer.
pub trait ThreadMultiMap: Send + Sync {
    /// What `insert` hands back for `remove` to find the entry again (an index into a
    /// slab, or the key and value for a hash map).
    type Handle: Send + Sync + fmt::Debug;

    /// Adds `entry` under `tid` (other entries of `tid` stay).
    fn insert(&self, tid: Tid, entry: SlotEntry) -> Self::Handle;

    /// Removes the entry `handle` names; false if it is not there.
    fn remove(&self, handle: &Self::Handle) -> bool;

    /// Calls `f` on every entry of `tid`, in no particular order.
    fn for_each(&self, tid: Tid, f: &mut dyn FnMut(SlotEntry));

    /// How many entries the map holds, over all threads.
    fn len(&self) -> usize;

    /// True when the map holds no entries.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave the map half-updated (each
    // critical section is a single push, slot write or scan), so a poisoned lock is usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One list of every `(thread, reservation)`: finding a thread's entries scans it all.
///
/// The list is a slab (a `Vec` with a free list) so that insert and remove cost O(1) like
/// the kernel's `list_add_tail`/`list_del`; only the per-thread visit is O(#entries).
#[derive(Debug, Default)]
pub struct ListMap {
    inner: Mutex<Slab>,
}

#[derive(Debug, Default)]
struct Slab {
    entries: Vec<Option<(Tid, SlotEntry)>>,
    free: Vec<usize>,
    len: usize,
}

/// Where a [`ListMap`] entry sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListHandle {
    index: usize,
    id: u64,
}

impl ThreadMultiMap for ListMap {
    type Handle = ListHandle;

    fn insert(&self, tid: Tid, entry: SlotEntry) -> ListHandle {
        let mut s = lock(&self.inner);
        s.len += 1;
        let index = match s.free.pop() {
            Some(i) => {
                s.entries[i] = Some((tid, entry));
                i
            }
            None => {
                s.entries.push(Some((tid, entry)));
                s.entries.len() - 1
            }
        };
        ListHandle { index, id: entry.id }
    }

    fn remove(&self, h: &ListHandle) -> bool {
        let mut s = lock(&self.inner);
        match s.entries.get(h.index) {
            Some(Some((_, e))) if e.id == h.id => {
                s.entries[h.index] = None;
                s.free.push(h.index);
                s.len -= 1;
                true
            }
            _ => false,
        }
    }

    fn for_each(&self, tid: Tid, f: &mut dyn FnMut(SlotEntry)) {
        let s = lock(&self.inner);
        for (t, e) in s.entries.iter().flatten() {
            if *t == tid {
                f(*e);
            }
        }
    }

    fn len(&self) -> usize {
        lock(&self.inner).len
    }
}

/// A `std::collections::HashMap` from thread to its reservations, behind one mutex: O(1)
/// per thread, but every reader takes the lock. The lock-based counterpart of the RCU
/// multimap.
#[derive(Debug, Default)]
pub struct MutexHashMap {
    inner: Mutex<HashMap<Tid, Vec<SlotEntry>>>,
}

impl ThreadMultiMap for MutexHashMap {
    type Handle = (Tid, SlotEntry);

    fn insert(&self, tid: Tid, entry: SlotEntry) -> (Tid, SlotEntry) {
        lock(&self.inner).entry(tid).or_default().push(entry);
        (tid, entry)
    }

    fn remove(&self, (tid, entry): &(Tid, SlotEntry)) -> bool {
        let mut m = lock(&self.inner);
        let Some(v) = m.get_mut(tid) else { return false };
        let Some(i) = v.iter().position(|e| e == entry) else { return false };
        v.swap_remove(i);
        if v.is_empty() {
            // Like rhltable's automatic shrinking: exited threads leave nothing behind.
            m.remove(tid);
        }
        true
    }

    fn for_each(&self, tid: Tid, f: &mut dyn FnMut(SlotEntry)) {
        if let Some(v) = lock(&self.inner).get(&tid) {
            v.iter().copied().for_each(f);
        }
    }

    fn len(&self) -> usize {
        lock(&self.inner).values().map(Vec::len).sum()
    }
}

/// Why slots could not be reserved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The thread has fewer free slots than asked for.
    #[error(
        "thread {tid} needs {requested} hardware watchpoint slot{} but {in_use} of its \
         {capacity} are in use; watch fewer locations in this thread, or let strobe multiplex \
         them (drop --no-multiplex)",
        if *.requested == 1 { "" } else { "s" }
    )]
    Exhausted {
        /// The thread.
        tid: Tid,
        /// Slots asked for.
        requested: u32,
        /// Slots already held.
        in_use: u32,
        /// Slots per thread.
        capacity: u32,
    },
    /// Zero slots, or more than a thread has at all.
    #[error("cannot reserve {requested} slots: a thread has between 1 and {capacity}")]
    BadCount {
        /// Slots asked for.
        requested: u32,
        /// Slots per thread.
        capacity: u32,
    },
}

/// Slots held by one thread: returned by [`SlotTable::reserve`], given back to
/// [`SlotTable::release`]. Dropping it without releasing leaks the slots until the table
/// is dropped.
#[must_use = "reserved slots stay taken until released"]
#[derive(Debug)]
pub struct Reservation<H> {
    tid: Tid,
    entry: SlotEntry,
    handle: H,
}

impl<H> Reservation<H> {
    /// The thread the slots belong to.
    pub fn tid(&self) -> Tid {
        self.tid
    }

    /// The slot numbers held (0-based debug register indices), lowest first.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        (0..MAX_SLOTS).filter(|i| self.entry.mask & (1 << i) != 0)
    }

    /// The slots held, as a bit mask.
    pub fn mask(&self) -> u8 {
        self.entry.mask
    }
}

/// Per-thread accounting of hardware watchpoint slots over a [`ThreadMultiMap`].
#[derive(Debug)]
pub struct SlotTable<M> {
    map: M,
    capacity: u32,
    writer: Mutex<()>,
    next_id: AtomicU64,
}

impl<M: ThreadMultiMap + Default> Default for SlotTable<M> {
    fn default() -> Self {
        SlotTable::new(M::default(), DEBUG_REGISTERS)
    }
}

impl<M: ThreadMultiMap> SlotTable<M> {
    /// A table over `map` giving each thread `capacity` slots (at most [`MAX_SLOTS`]).
    ///
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_SLOTS`]: a programming error, not a user's.
    pub fn new(map: M, capacity: u32) -> Self {
        assert!((1..=MAX_SLOTS).contains(&capacity), "slot capacity {capacity} out of range");
        SlotTable { map, capacity, writer: Mutex::new(()), next_id: AtomicU64::new(1) }
    }

    /// Slots per thread.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The map underneath (for inspection in tests and benchmarks).
    pub fn map(&self) -> &M {
        &self.map
    }

    /// The slots `tid` holds now, as a bit mask. Visits only what the map must visit to
    /// find `tid`'s entries (everything, for the list).
    pub fn used(&self, tid: Tid) -> u8 {
        let mut mask = 0u8;
        self.map.for_each(tid, &mut |e| mask |= e.mask);
        mask
    }

    /// Reserves `n` slots for `tid`, the lowest free ones. Fails, changing nothing, when
    /// fewer than `n` are free.
    pub fn reserve(&self, tid: Tid, n: u32) -> Result<Reservation<M::Handle>, SlotError> {
        if n == 0 || n > self.capacity {
            return Err(SlotError::BadCount { requested: n, capacity: self.capacity });
        }
        let _writer = lock(&self.writer);
        let used = self.used(tid);
        let in_use = used.count_ones();
        if in_use + n > self.capacity {
            return Err(SlotError::Exhausted {
                tid,
                requested: n,
                in_use,
                capacity: self.capacity,
            });
        }
        let mut mask = 0u8;
        for i in 0..self.capacity {
            if mask.count_ones() == n {
                break;
            }
            if used & (1 << i) == 0 {
                mask |= 1 << i;
            }
        }
        // Relaxed: the id only has to be unique, which fetch_add guarantees in any order.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = SlotEntry { id, mask };
        let handle = self.map.insert(tid, entry);
        Ok(Reservation { tid, entry, handle })
    }

    /// Gives the slots of `r` back.
    pub fn release(&self, r: Reservation<M::Handle>) {
        let _writer = lock(&self.writer);
        let removed = self.map.remove(&r.handle);
        debug_assert!(removed, "a reservation is released once, to the table that made it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behaves<M: ThreadMultiMap + Default>() {
        let t: SlotTable<M> = SlotTable::default();
        let a = t.reserve(100, 1).unwrap();
        assert_eq!(a.slots().collect::<Vec<_>>(), [0]);
        let b = t.reserve(100, 2).unwrap();
        assert_eq!(b.slots().collect::<Vec<_>>(), [1, 2]);
        // Another thread has its own four.
        let other = t.reserve(200, 4).unwrap();
        assert_eq!(other.mask(), 0b1111);
        let e = t.reserve(100, 2).unwrap_err();
        assert_eq!(e, SlotError::Exhausted { tid: 100, requested: 2, in_use: 3, capacity: 4 });
        assert!(e.to_string().contains("3 of its 4 are in use"), "{e}");
        let c = t.reserve(100, 1).unwrap();
        assert_eq!(c.slots().collect::<Vec<_>>(), [3]);
        assert_eq!(t.used(100), 0b1111);
        // Releasing the middle reservation frees exactly its slots, which are reused.
        t.release(b);
        assert_eq!(t.used(100), 0b1001);
        let d = t.reserve(100, 2).unwrap();
        assert_eq!(d.mask(), 0b0110);
        assert!(matches!(t.reserve(100, 1), Err(SlotError::Exhausted { .. })));
        assert!(matches!(t.reserve(100, 0), Err(SlotError::BadCount { .. })));
        assert!(matches!(t.reserve(100, 5), Err(SlotError::BadCount { .. })));
        for r in [a, c, d, other] {
            t.release(r);
        }
        assert_eq!((t.used(100), t.used(200)), (0, 0));
        assert!(t.map().is_empty());
    }

    #[test]
    fn list_reserves_and_releases() {
        behaves::<ListMap>();
    }

    #[test]
    fn mutex_hash_reserves_and_releases() {
        behaves::<MutexHashMap>();
    }

    #[test]
    fn list_reuses_freed_entries() {
        let m = ListMap::default();
        let h1 = m.insert(1, SlotEntry { id: 1, mask: 1 });
        let h2 = m.insert(2, SlotEntry { id: 2, mask: 1 });
        assert!(m.remove(&h1));
        assert!(!m.remove(&h1), "a handle removes once");
        let h3 = m.insert(3, SlotEntry { id: 3, mask: 2 });
        assert_eq!(h3.index, h1.index, "the free slot is reused");
        assert!(!m.remove(&h1), "a stale handle does not remove the new occupant");
        assert_eq!(m.len(), 2);
        assert!(m.remove(&h2) && m.remove(&h3));
    }

    #[test]
    fn a_smaller_capacity_is_honoured() {
        let t = SlotTable::new(MutexHashMap::default(), 2);
        let _a = t.reserve(1, 2).unwrap();
        assert!(matches!(t.reserve(1, 1), Err(SlotError::Exhausted { capacity: 2, .. })));
    }
}
