//! The per-thread debug-register slot table (seed 000).
//!
//! Each thread has [`DEBUG_REGISTERS`] hardware watchpoint slots. Reserving `n` slots for a
//! thread learns which of its slots are taken, picks the lowest `n` free ones and records
//! them, as one atomic step; releasing gives them back. What a reservation computes is the
//! same whatever holds the slots (see [`pick`]); the seed's lesson is all in *how the table
//! finds a thread's slots*, so the table ([`SlotTable`]) is generic over that one piece, a
//! [`ThreadMultiMap`].
//!
//! The map strobe runs is [`RcuHashMap`]: strobe-rcu's [`HashMultiMap`](strobe_rcu::HashMultiMap)
//! keyed by thread (the kernel's `rhltable` after the seed), holding one [`ThreadSlots`]
//! entry per thread. The entry is inserted once, when the thread is first seen, and every
//! reservation after that is a lock-free lookup under a strobe-rcu read section plus one
//! compare-and-swap on the entry's slot mask; a release is a lookup plus one atomic AND.
//! No allocation, no lock, no retirement per reservation: O(1) and flat in the number of
//! threads. [`SlotTable::forget`] removes an exited thread's entry (a grace period later
//! it is freed).
//!
//! The maps it is measured against (the kernel's list before the seed, the same scan over
//! an array, a `HashMap` behind a mutex) exist only to be compared, so they live with the
//! benchmark (`crates/strobe-bench/src/slotmaps.rs`, run by `strobe bench breakpoint`), which plugs
//! them into this same table through [`ThreadMultiMap`].
//!
//! ## Concurrency
//!
//! Counting a thread's slots and taking the free ones must be one atomic step, or two
//! threads reserving for the same thread could both see three slots in use and both take
//! the fourth. A lock-based map holds its lock across both (as the kernel holds
//! `nr_bp_mutex` around `__reserve_bp_slot`); the RCU map makes the step a single CAS on
//! the thread's mask, so reservations for different threads never serialise and the only
//! lock left is the one that inserts a thread's entry the first time it is seen.
//!
//! This module owns the table, the map trait and the RCU map. It must never be called
//! from a signal handler: the first reservation for a thread allocates its entry and takes
//! the insertion lock.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A thread id as the kernel numbers it (`gettid()`).
pub type Tid = i32;

/// Hardware watchpoint slots per thread on x86-64 (DR0-DR3).
pub const DEBUG_REGISTERS: u32 = 4;

/// The most slots per thread a table can track (the slot mask is a `u8`).
pub const MAX_SLOTS: u32 = 8;

/// The lowest `n` slots free in `used` among the first `capacity`, as a mask; `None` when
/// fewer than `n` are free. The one computation every map under the table shares.
///
/// Takes the lowest free bit `n` times, giving up when none is left, rather than counting
/// the free bits first: `count_ones` is no single instruction on baseline x86-64, and this
/// runs inside every reservation's critical step.
#[inline]
pub fn pick(used: u8, n: u32, capacity: u32) -> Option<u8> {
    let all = (1u16 << capacity.min(MAX_SLOTS)) - 1;
    let mut free = !u16::from(used) & all;
    let mut mask = 0u16;
    for _ in 0..n {
        if free == 0 {
            return None;
        }
        // The lowest free slot: the lowest set bit of `free`.
        let low = free & free.wrapping_neg();
        mask |= low;
        free ^= low;
    }
    u8::try_from(mask).ok()
}

/// A multimap from thread to its slots: the one thing the table is generic over
/// ([`RcuHashMap`] here; the benchmark's alternatives implement it too).
///
/// `reserve` must be atomic with respect to every other call on the same thread id: the
/// mask passed to `choose` is exactly the thread's slots at the moment the chosen ones are
/// recorded.
pub trait ThreadMultiMap: Send + Sync {
    /// What `reserve` hands back for `release` to find the slots again (a list node, an
    /// index into a slab, or nothing when the thread id and mask suffice).
    type Handle: Send + Sync + fmt::Debug;

    /// Atomically: reads the slots `tid` holds, calls `choose` with them and, if it returns
    /// a mask, records those slots as held. `Err(used)` when `choose` refused.
    fn reserve(
        &self,
        tid: Tid,
        choose: &mut dyn FnMut(u8) -> Option<u8>,
    ) -> Result<(u8, Self::Handle), u8>;

    /// Gives back the slots `mask` of `tid` that `handle` names; false if they were not held.
    fn release(&self, tid: Tid, mask: u8, handle: &Self::Handle) -> bool;

    /// The slots `tid` holds now, as a mask.
    fn used(&self, tid: Tid) -> u8;

    /// Drops what the map keeps for `tid` once it holds no slots (a thread that exited).
    /// False, changing nothing, while it still holds some.
    fn forget(&self, tid: Tid) -> bool;

    /// How many records the map holds (threads for a hash map; reservations for a map that
    /// keeps one record per reservation).
    fn len(&self) -> usize;

    /// True when the map holds no record.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the insertion lock cannot leave the map half-updated (the
    // critical section inserts or removes one entry, after its last point that can panic),
    // so a poisoned lock is usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hashes a thread id with a fold and one multiply: thread ids are handed out by the
/// kernel, not chosen by an adversary, so SipHash's flooding resistance buys nothing here
/// and would cost more than the rest of a reservation. Consecutive ids land in distinct
/// buckets (an odd multiplier is a bijection on the low bits the table indexes with).
#[derive(Debug, Clone, Copy, Default)]
pub struct TidHasher;

/// The [`Hasher`] of [`TidHasher`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TidHash(u64);

impl BuildHasher for TidHasher {
    type Hasher = TidHash;
    fn build_hasher(&self) -> TidHash {
        TidHash(0)
    }
}

impl Hasher for TidHash {
    fn finish(&self) -> u64 {
        // The table indexes with the low bits, which after an odd multiply depend only on
        // the low bits of the input: fold the higher bits of the id in first.
        (self.0 ^ (self.0 >> 16)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_i32(&mut self, i: i32) {
        self.0 = self.0.rotate_left(32) ^ u64::from(i as u32);
    }
}

/// The entry the RCU map keeps for one thread: its slot mask, changed only by atomics.
#[derive(Debug)]
pub struct ThreadSlots {
    /// Bits 0-7: slots held. [`DEAD`]: the entry is being removed ([`SlotTable::forget`]);
    /// a reservation that finds it dead looks up (or inserts) the thread's live entry.
    state: AtomicU32,
}

/// [`ThreadSlots::state`] bit of an entry on its way out of the map.
const DEAD: u32 = 1 << 31;

/// strobe-rcu's [`HashMultiMap`](strobe_rcu::HashMultiMap) keyed by thread, one
/// [`ThreadSlots`] entry per thread seen: the `rhltable` of seed 000, with the per-thread
/// counting done in place (see the module note).
pub struct RcuHashMap {
    map: strobe_rcu::HashMultiMap<Tid, ThreadSlots, TidHasher>,
    /// Serialises inserting and removing entries (never taken by a reservation of a thread
    /// already seen), so a thread never gets two live entries.
    entries: Mutex<()>,
}

impl Default for RcuHashMap {
    fn default() -> Self {
        RcuHashMap {
            map: strobe_rcu::HashMultiMap::with_hasher(TidHasher),
            entries: Mutex::new(()),
        }
    }
}

impl fmt::Debug for RcuHashMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RcuHashMap").field("threads", &self.map.len()).finish()
    }
}

impl RcuHashMap {
    /// Runs `f` on `tid`'s live entry, if it has one, inside a read section.
    #[inline]
    fn with_live<R>(&self, tid: Tid, f: impl FnOnce(&ThreadSlots) -> R) -> Option<R> {
        let guard = strobe_rcu::read_lock();
        let mut live = None;
        self.map.for_each(&tid, &guard, |e| {
            // Relaxed: only picks the candidate; the caller's own atomics on `state` decide.
            if live.is_none() && e.state.load(Ordering::Relaxed) & DEAD == 0 {
                live = Some(e);
            }
        });
        live.map(f)
    }

    /// CAS loop on one entry: `Ok(Some)` taken, `Ok(None)` the entry died under us,
    /// `Err(used)` refused.
    fn try_take(
        e: &ThreadSlots,
        choose: &mut dyn FnMut(u8) -> Option<u8>,
    ) -> Result<Option<u8>, u8> {
        // Acquire: a slot freed by another thread's release (Release AND) is seen free
        // together with everything that thread did before giving it back.
        let mut cur = e.state.load(Ordering::Acquire);
        loop {
            if cur & DEAD != 0 {
                return Ok(None);
            }
            let used = cur as u8;
            let mask = choose(used).ok_or(used)?;
            // AcqRel on success: Acquire as above; Release so a later reservation or
            // release that sees these bits also sees our caller's prior writes. Acquire on
            // failure: the fresh value is re-examined like the first load.
            match e.state.compare_exchange_weak(
                cur,
                cur | u32::from(mask),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(Some(mask)),
                Err(now) => cur = now,
            }
        }
    }
}

impl ThreadMultiMap for RcuHashMap {
    type Handle = ();

    fn reserve(&self, tid: Tid, choose: &mut dyn FnMut(u8) -> Option<u8>) -> Result<(u8, ()), u8> {
        loop {
            // Fast path: the thread was seen before.
            if let Some(r) = self.with_live(tid, |e| Self::try_take(e, &mut *choose)) {
                if let Some(mask) = r? {
                    return Ok((mask, ()));
                }
                // The entry was being forgotten; look again (or insert) below.
            }
            // First sight of the thread (or its entry just died): insert it once.
            let _entries = lock(&self.entries);
            if self.with_live(tid, |_| ()).is_none() {
                self.map.insert(tid, ThreadSlots { state: AtomicU32::new(0) });
            }
        }
    }

    fn release(&self, tid: Tid, mask: u8, _: &()) -> bool {
        // The entry cannot die while it holds `mask` (forget only kills an empty entry),
        // so the live entry found is the one the reservation took its bits from.
        // Release: the slot is seen free only after everything its holder did with it
        // (pairs with the Acquire loads in `try_take`).
        self.with_live(tid, |e| {
            let before = e.state.fetch_and(!u32::from(mask), Ordering::Release);
            before as u8 & mask == mask
        })
        .unwrap_or(false)
    }

    fn used(&self, tid: Tid) -> u8 {
        // Acquire: as in `try_take`.
        self.with_live(tid, |e| e.state.load(Ordering::Acquire) as u8).unwrap_or(0)
    }

    fn forget(&self, tid: Tid) -> bool {
        let _entries = lock(&self.entries);
        let killed = self.with_live(tid, |e| {
            // A reservation racing with us either lands first (we fail and keep the entry)
            // or finds DEAD and goes to insert a new entry, which waits for our lock.
            // Relaxed: nothing is published by an empty entry's death.
            e.state.compare_exchange(0, DEAD, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        });
        match killed {
            None => true,
            Some(false) => false,
            Some(true) => {
                // Relaxed: the DEAD bit was set by us, under the lock, and is never cleared.
                let removed =
                    self.map.remove_if(&tid, |e| e.state.load(Ordering::Relaxed) & DEAD != 0);
                debug_assert!(removed, "the dead entry is still in the map");
                true
            }
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Why slots could not be reserved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The thread has fewer free slots than asked for.
    #[error(
        "thread {tid} needs {requested} hardware watchpoint slot{} but {in_use} of its \
         {capacity} are in use; watch fewer locations in this thread, or let strobe multiplex \
         them",
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
    mask: u8,
    handle: H,
}

impl<H> Reservation<H> {
    /// The thread the slots belong to.
    pub fn tid(&self) -> Tid {
        self.tid
    }

    /// The slot numbers held (0-based debug register indices), lowest first.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        (0..MAX_SLOTS).filter(|i| self.mask & (1 << i) != 0)
    }

    /// The slots held, as a bit mask.
    pub fn mask(&self) -> u8 {
        self.mask
    }
}

/// A reservation in a table over the map `M`.
pub type ReservationOf<M> = Reservation<<M as ThreadMultiMap>::Handle>;

/// Per-thread accounting of hardware watchpoint slots over a [`ThreadMultiMap`].
#[derive(Debug)]
pub struct SlotTable<M> {
    map: M,
    capacity: u32,
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
        SlotTable { map, capacity }
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
    /// find `tid`'s slots (everything, for the list).
    pub fn used(&self, tid: Tid) -> u8 {
        self.map.used(tid)
    }

    /// Reserves `n` slots for `tid`, the lowest free ones. Fails, changing nothing, when
    /// fewer than `n` are free.
    pub fn reserve(&self, tid: Tid, n: u32) -> Result<ReservationOf<M>, SlotError> {
        if n == 0 || n > self.capacity {
            return Err(SlotError::BadCount { requested: n, capacity: self.capacity });
        }
        let capacity = self.capacity;
        match self.map.reserve(tid, &mut |used| pick(used, n, capacity)) {
            Ok((mask, handle)) => Ok(Reservation { tid, mask, handle }),
            Err(used) => {
                Err(SlotError::Exhausted { tid, requested: n, in_use: used.count_ones(), capacity })
            }
        }
    }

    /// Gives the slots of `r` back.
    pub fn release(&self, r: ReservationOf<M>) {
        let released = self.map.release(r.tid, r.mask, &r.handle);
        debug_assert!(released, "a reservation is released once, to the table that made it");
    }

    /// Forgets `tid` (a thread that exited) once it holds no slots, so the table does not
    /// keep an entry per thread ever seen. False, changing nothing, while it holds some.
    pub fn forget(&self, tid: Tid) -> bool {
        self.map.forget(tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcu_hash_reserves_and_releases() {
        crate::conformance::behaves::<RcuHashMap>();
    }

    #[test]
    fn rcu_hash_table_under_contention() {
        crate::conformance::stress::<RcuHashMap>();
    }

    #[test]
    fn pick_takes_the_lowest_free_slots() {
        assert_eq!(pick(0, 1, 4), Some(0b0001));
        assert_eq!(pick(0b0101, 2, 4), Some(0b1010));
        assert_eq!(pick(0b0111, 2, 4), None);
        assert_eq!(pick(0b0111, 1, 4), Some(0b1000));
        assert_eq!(pick(0, 3, 2), None);
        assert_eq!(pick(0, 0, 4), Some(0), "nothing asked, nothing taken");
        assert_eq!(pick(0b1111, 1, 4), None);
        assert_eq!(pick(0, 8, 8), Some(0xff));
        assert_eq!(pick(0x7f, 2, 8), None);
        assert_eq!(pick(0, 100, 4), None, "more than there are is refused, not looped on");
        // Agrees with counting first on every mask, count and capacity.
        for capacity in 1..=MAX_SLOTS {
            for used in 0..=u8::MAX {
                for n in 0..=MAX_SLOTS + 1 {
                    let free = !used & ((1u16 << capacity) - 1) as u8;
                    let want = (free.count_ones() >= n).then(|| {
                        (0..MAX_SLOTS)
                            .filter(|i| free & (1 << i) != 0)
                            .take(n as usize)
                            .fold(0u8, |m, i| m | (1 << i))
                    });
                    assert_eq!(pick(used, n, capacity), want, "{used:#b} {n} {capacity}");
                }
            }
        }
    }

    #[test]
    fn the_rcu_map_keeps_one_entry_per_thread() {
        let t: SlotTable<RcuHashMap> = SlotTable::default();
        let rs: Vec<_> = (0..4).map(|_| t.reserve(7, 1).unwrap()).collect();
        assert_eq!(t.map().len(), 1, "reservations update the thread's entry in place");
        for r in rs {
            t.release(r);
        }
        assert_eq!(t.map().len(), 1, "releasing keeps the entry for the thread's next reservation");
    }

    #[test]
    fn a_smaller_capacity_is_honoured() {
        let t = SlotTable::new(RcuHashMap::default(), 2);
        let _a = t.reserve(1, 2).unwrap();
        assert!(matches!(t.reserve(1, 1), Err(SlotError::Exhausted { capacity: 2, .. })));
    }

    #[test]
    fn consecutive_thread_ids_hash_apart() {
        let h = |tid: Tid| TidHasher.hash_one(tid) as usize & 4095;
        let mut seen = std::collections::HashSet::new();
        for tid in 10_000..14_096 {
            seen.insert(h(tid));
        }
        assert_eq!(seen.len(), 4096);
    }
}
