//! The per-thread debug-register slot table (seed 000).
//!
//! Each thread has [`DEBUG_REGISTERS`] hardware watchpoint slots. Reserving `n` slots for a
//! thread learns which of its slots are taken, picks the lowest `n` free ones and records
//! them, as one atomic step; releasing gives them back. What a reservation computes is the
//! same for every variant (see [`pick`]); the seed's lesson is all in *how the table finds
//! a thread's slots*:
//!
//! - [`ListMap`] keeps every reservation of every thread in one list, so learning one
//!   thread's slots walks them all: O(#threads), exactly `task_bp_pinned()` before the
//!   patch, under one lock like the kernel's `nr_bp_mutex`. It is the kernel's structure,
//!   not just its complexity: an intrusive doubly linked list of separately allocated nodes
//!   (`bp_task_head` linking one `perf_event` per breakpoint), appended and unlinked in O(1)
//!   (`list_add_tail` / `list_del` through the reservation's handle) and walked by
//!   following `next` pointers, so the walk is a chain of dependent loads. The seed's
//!   speedup is measured against this one.
//! - [`ArrayMap`] is the same O(#threads) scan over a slab (a `Vec` of entries side by
//!   side): not what the kernel had, but it shows how much of the list's cost is its
//!   layout, since the hardware prefetcher streams a contiguous scan.
//! - [`RcuHashMap`] is strobe-rcu's [`HashMultiMap`](strobe_rcu::HashMultiMap) keyed by
//!   thread (the kernel's `rhltable`), holding one [`ThreadSlots`] entry per thread: the
//!   entry is inserted once, when the thread is first seen, and every reservation after
//!   that is a lock-free lookup under a strobe-rcu read section plus one compare-and-swap
//!   on the entry's slot mask; a release is a lookup plus one atomic AND. No allocation,
//!   no lock, no retirement per reservation: O(1) and flat in the number of threads.
//!   [`SlotTable::forget`] removes an exited thread's entry (a grace period later it is
//!   freed).
//! - [`MutexHashMap`] is the lock-based alternative: a `std` `HashMap` from thread to slot
//!   mask behind one mutex.
//!
//! All four plug into [`SlotTable`] through the small [`ThreadMultiMap`] trait.
//!
//! ## Concurrency
//!
//! Counting a thread's slots and taking the free ones must be one atomic step, or two
//! threads reserving for the same thread could both see three slots in use and both take
//! the fourth. The list and the array and the mutex map hold their lock across both (as the kernel holds
//! `nr_bp_mutex` around `__reserve_bp_slot`); the RCU map makes the step a single CAS on
//! the thread's mask, so reservations for different threads never serialise and the only
//! lock left is the one that inserts a thread's entry the first time it is seen.
//!
//! This module must never be called from a signal handler: the first reservation for a
//! thread allocates its entry, the list allocates a node per reservation, and the list,
//! array and mutex variants lock.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A thread id as the kernel numbers it (`gettid()`).
pub type Tid = i32;

/// Hardware watchpoint slots per thread on x86-64 (DR0-DR3).
pub const DEBUG_REGISTERS: u32 = 4;

/// The most slots per thread a table can track (the slot mask is a `u8`).
pub const MAX_SLOTS: u32 = 8;

/// The lowest `n` slots free in `used` among the first `capacity`, as a mask; `None` when
/// fewer than `n` are free. The one computation every variant of the table shares.
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

/// A multimap from thread to its slots: the one thing the variants of the slot table
/// differ in.
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

    /// How many records the map holds (reservations for the list and the array, threads for
    /// the hash maps).
    fn len(&self) -> usize;

    /// True when the map holds no record.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave the map half-updated (each
    // critical section changes the map only after its last point that can panic: a scan
    // and the caller's `choose`, then pointer, slot or mask writes that cannot), so a
    // poisoned lock is usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One list of every `(thread, reservation)`: finding a thread's slots scans it all.
///
/// The kernel's `bp_task_head` before seed 000: an intrusive doubly linked list whose nodes
/// are allocated one by one (each reservation is its own heap node, as each breakpoint is
/// its own `perf_event`), appended with `list_add_tail`, unlinked in O(1) through the
/// reservation's handle with `list_del`, and walked by following `next` pointers, all
/// under one mutex like `nr_bp_mutex`. Only the walk grows with the number of
/// reservations; it is a chain of dependent loads, one per node.
///
/// Released nodes are kept on a free stack and reused (as a slab cache reuses freed
/// `perf_event`s) until the map is dropped, which is what lets a stale or double
/// [`release`](ThreadMultiMap::release) be detected without touching freed memory.
#[derive(Debug)]
pub struct ListMap {
    inner: Mutex<List>,
    /// Unique per map (never reused), stamped into handles so a handle from another map is
    /// refused before its node pointer is looked at.
    map: u64,
}

/// Source of [`ListMap::map`] ids. Relaxed: only uniqueness matters.
static NEXT_LIST_MAP: AtomicU64 = AtomicU64::new(1);

impl Default for ListMap {
    fn default() -> Self {
        ListMap {
            inner: Mutex::new(List::default()),
            map: NEXT_LIST_MAP.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// One reservation in a [`ListMap`]: the links and what `task_bp_pinned()` reads (the
/// owner thread and its slots), nothing else.
#[derive(Debug)]
struct Node {
    next: *mut Node,
    prev: *mut Node,
    tid: Tid,
    mask: u8,
    /// Unique per map while the node is linked; 0 while it sits on the free stack. Ids are
    /// never reused, so a stale handle never releases a later occupant of its node.
    id: u64,
}

/// The list behind [`ListMap`]'s mutex.
///
/// Invariants (kept by every method, all of which run with the mutex held or with `&mut`):
/// `head`..`tail` is a well-formed doubly linked list through `next`/`prev` of `len` nodes
/// with nonzero ids; `free` is a stack linked through `next` of nodes with id 0; every node
/// of both came from `Box::into_raw` in [`List::alloc`], is reachable from exactly one of
/// them, and is freed only in [`ListMap`]'s `Drop`.
#[derive(Debug)]
struct List {
    head: *mut Node,
    tail: *mut Node,
    free: *mut Node,
    len: usize,
    next_id: u64,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            free: ptr::null_mut(),
            len: 0,
            next_id: 0,
        }
    }
}

// SAFETY: a `List` owns its nodes outright (they are reachable only through it; handles hold
// their addresses but dereference them only through the owning map, under its mutex), and
// nothing in a node is tied to the thread that allocated it.
unsafe impl Send for List {}

impl List {
    /// The slots `tid` holds: `task_bp_pinned()`, a walk of the whole list.
    fn used(&self, tid: Tid) -> u8 {
        let mut mask = 0;
        let mut p = self.head;
        // SAFETY: by the invariants every pointer reached from `head` through `next` is a
        // live node of this list or null, and no one else touches the nodes while we hold
        // `&self` under the mutex.
        while let Some(n) = unsafe { p.as_ref() } {
            if n.tid == tid {
                mask |= n.mask;
            }
            p = n.next;
        }
        mask
    }

    /// A node for a new reservation: the top of the free stack, or a fresh allocation.
    fn alloc(&mut self, tid: Tid, mask: u8, id: u64) -> NonNull<Node> {
        let fresh = Node { next: ptr::null_mut(), prev: ptr::null_mut(), tid, mask, id };
        match NonNull::new(self.free) {
            Some(n) => {
                // SAFETY: `free` holds live nodes of this list that nothing else points
                // into except stale handles, which only read `id` under the mutex we hold.
                unsafe {
                    self.free = n.as_ref().next;
                    n.as_ptr().write(fresh);
                }
                n
            }
            None => NonNull::from(Box::leak(Box::new(fresh))),
        }
    }

    /// `list_add_tail`.
    ///
    /// # Safety
    /// `n` is a node of this list on neither the list nor the free stack.
    unsafe fn push_back(&mut self, n: NonNull<Node>) {
        let n = n.as_ptr();
        // SAFETY: `n` is live and unlinked (caller); `tail` is null or a live node.
        unsafe {
            (*n).prev = self.tail;
            (*n).next = ptr::null_mut();
            match self.tail.as_mut() {
                Some(t) => t.next = n,
                None => self.head = n,
            }
        }
        self.tail = n;
        self.len += 1;
    }

    /// `list_del`, then onto the free stack with its id cleared.
    ///
    /// # Safety
    /// `n` is a node linked in this list.
    unsafe fn remove(&mut self, n: NonNull<Node>) {
        let n = n.as_ptr();
        // SAFETY: `n` is linked (caller), so its neighbours are live nodes of this list or
        // null, and the head/tail fix-ups keep the list well formed.
        unsafe {
            let (prev, next) = ((*n).prev, (*n).next);
            match prev.as_mut() {
                Some(p) => p.next = next,
                None => self.head = next,
            }
            match next.as_mut() {
                Some(x) => x.prev = prev,
                None => self.tail = prev,
            }
            (*n).id = 0;
            (*n).prev = ptr::null_mut();
            (*n).next = self.free;
        }
        self.free = n;
        self.len -= 1;
    }
}

impl Drop for ListMap {
    fn drop(&mut self) {
        let l = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        for mut p in [l.head, l.free] {
            while !p.is_null() {
                // SAFETY: by the invariants each node is reachable from exactly one of the
                // two chains and came from `Box`; we own the map, so no one else can reach
                // it (handles are refused by id once the map is gone: ids are never reused).
                let node = unsafe { Box::from_raw(p) };
                p = node.next;
            }
        }
        l.head = ptr::null_mut();
        l.tail = ptr::null_mut();
        l.free = ptr::null_mut();
    }
}

/// Where a [`ListMap`] reservation sits: its node, checked against the map and the node's
/// current id before use.
#[derive(Debug, PartialEq, Eq)]
pub struct ListHandle {
    node: NonNull<Node>,
    id: u64,
    map: u64,
}

// SAFETY: a handle is an address plus two numbers; the address is dereferenced only by the
// map whose id it carries, under that map's mutex (see `ListMap::release`).
unsafe impl Send for ListHandle {}
// SAFETY: as for Send; `&ListHandle` offers nothing but reads of those three values.
unsafe impl Sync for ListHandle {}

impl ThreadMultiMap for ListMap {
    type Handle = ListHandle;

    fn reserve(
        &self,
        tid: Tid,
        choose: &mut dyn FnMut(u8) -> Option<u8>,
    ) -> Result<(u8, ListHandle), u8> {
        let mut l = lock(&self.inner);
        let used = l.used(tid);
        let mask = choose(used).ok_or(used)?;
        l.next_id += 1;
        let id = l.next_id;
        let node = l.alloc(tid, mask, id);
        // SAFETY: `alloc` hands out a node on neither chain.
        unsafe { l.push_back(node) };
        Ok((mask, ListHandle { node, id, map: self.map }))
    }

    fn release(&self, _tid: Tid, _mask: u8, h: &ListHandle) -> bool {
        if h.map != self.map {
            return false;
        }
        let mut l = lock(&self.inner);
        // SAFETY: the handle was made by this map (map ids are unique), whose nodes live
        // until it is dropped, which cannot happen while we hold `&self`: the node is live.
        // It is on the list with this id exactly when the reservation is still held (ids
        // are never reused, and a freed node's id is 0); we hold the mutex for the read.
        let linked = unsafe { h.node.as_ref().id } == h.id;
        if linked {
            // SAFETY: just checked that the node is linked in this list.
            unsafe { l.remove(h.node) };
        }
        linked
    }

    fn used(&self, tid: Tid) -> u8 {
        lock(&self.inner).used(tid)
    }

    fn forget(&self, tid: Tid) -> bool {
        // Nothing is kept for a thread beyond its reservations.
        lock(&self.inner).used(tid) == 0
    }

    fn len(&self) -> usize {
        lock(&self.inner).len
    }
}

/// One array of every `(thread, reservation)`, scanned contiguously: the list's O(#threads)
/// walk over a cache-friendly layout.
///
/// Not the kernel's structure (that is [`ListMap`]): a slab (a `Vec` with a free list) so
/// insert and remove cost O(1), with the entries side by side in memory, so the scan is a
/// stream the hardware prefetcher runs ahead of rather than a chain of dependent loads.
/// Kept beside the list to show how much of the list's cost is the layout.
#[derive(Debug, Default)]
pub struct ArrayMap {
    inner: Mutex<Slab>,
}

#[derive(Debug, Default)]
struct Slab {
    entries: Vec<Option<ArrayEntry>>,
    free: Vec<usize>,
    len: usize,
    next_id: u64,
}

#[derive(Debug, Clone, Copy)]
struct ArrayEntry {
    tid: Tid,
    mask: u8,
    /// Unique per array, never reused, so a stale handle never removes a new occupant.
    id: u64,
}

impl Slab {
    fn used(&self, tid: Tid) -> u8 {
        let mut mask = 0;
        for e in self.entries.iter().flatten() {
            if e.tid == tid {
                mask |= e.mask;
            }
        }
        mask
    }
}

/// Where an [`ArrayMap`] reservation sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayHandle {
    index: usize,
    id: u64,
}

impl ThreadMultiMap for ArrayMap {
    type Handle = ArrayHandle;

    fn reserve(
        &self,
        tid: Tid,
        choose: &mut dyn FnMut(u8) -> Option<u8>,
    ) -> Result<(u8, ArrayHandle), u8> {
        let mut s = lock(&self.inner);
        let used = s.used(tid);
        let mask = choose(used).ok_or(used)?;
        s.next_id += 1;
        let e = ArrayEntry { tid, mask, id: s.next_id };
        s.len += 1;
        let index = match s.free.pop() {
            Some(i) => {
                s.entries[i] = Some(e);
                i
            }
            None => {
                s.entries.push(Some(e));
                s.entries.len() - 1
            }
        };
        Ok((mask, ArrayHandle { index, id: e.id }))
    }

    fn release(&self, _tid: Tid, _mask: u8, h: &ArrayHandle) -> bool {
        let mut s = lock(&self.inner);
        match s.entries.get(h.index) {
            Some(Some(e)) if e.id == h.id => {
                s.entries[h.index] = None;
                s.free.push(h.index);
                s.len -= 1;
                true
            }
            _ => false,
        }
    }

    fn used(&self, tid: Tid) -> u8 {
        lock(&self.inner).used(tid)
    }

    fn forget(&self, tid: Tid) -> bool {
        lock(&self.inner).used(tid) == 0
    }

    fn len(&self) -> usize {
        lock(&self.inner).len
    }
}

/// A `std::collections::HashMap` from thread to its slot mask, behind one mutex: O(1) per
/// thread, but every call takes the lock. The lock-based counterpart of the RCU map.
#[derive(Debug, Default)]
pub struct MutexHashMap {
    inner: Mutex<HashMap<Tid, u8, TidHasher>>,
}

impl ThreadMultiMap for MutexHashMap {
    type Handle = ();

    fn reserve(&self, tid: Tid, choose: &mut dyn FnMut(u8) -> Option<u8>) -> Result<(u8, ()), u8> {
        let mut m = lock(&self.inner);
        let used = m.get(&tid).copied().unwrap_or(0);
        let mask = choose(used).ok_or(used)?;
        m.insert(tid, used | mask);
        Ok((mask, ()))
    }

    fn release(&self, tid: Tid, mask: u8, _: &()) -> bool {
        let mut m = lock(&self.inner);
        let Some(used) = m.get_mut(&tid) else { return false };
        if *used & mask != mask {
            return false;
        }
        *used &= !mask;
        true
    }

    fn used(&self, tid: Tid) -> u8 {
        lock(&self.inner).get(&tid).copied().unwrap_or(0)
    }

    fn forget(&self, tid: Tid) -> bool {
        let mut m = lock(&self.inner);
        match m.get(&tid) {
            Some(0) => {
                m.remove(&tid);
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    fn len(&self) -> usize {
        lock(&self.inner).len()
    }
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
        assert!(!t.forget(100), "a thread holding slots is not forgotten");
        assert_eq!(t.used(100), 0b1111);
        for r in [a, c, d, other] {
            t.release(r);
        }
        assert_eq!((t.used(100), t.used(200)), (0, 0));
        assert!(t.forget(100) && t.forget(200) && t.forget(300));
        assert!(t.map().is_empty());
        // A forgotten thread comes back as a fresh one.
        let again = t.reserve(100, 3).unwrap();
        assert_eq!(again.mask(), 0b0111);
        t.release(again);
        assert!(t.forget(100));
        assert!(t.map().is_empty());
    }

    #[test]
    fn list_reserves_and_releases() {
        behaves::<ListMap>();
    }

    #[test]
    fn rcu_hash_reserves_and_releases() {
        behaves::<RcuHashMap>();
    }

    #[test]
    fn mutex_hash_reserves_and_releases() {
        behaves::<MutexHashMap>();
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
    fn array_reserves_and_releases() {
        behaves::<ArrayMap>();
    }

    #[test]
    fn array_reuses_freed_entries() {
        let m = ArrayMap::default();
        let (_, h1) = m.reserve(1, &mut |_| Some(1)).unwrap();
        let (_, h2) = m.reserve(2, &mut |_| Some(1)).unwrap();
        assert!(m.release(1, 1, &h1));
        assert!(!m.release(1, 1, &h1), "a handle releases once");
        let (_, h3) = m.reserve(3, &mut |_| Some(2)).unwrap();
        assert_eq!(h3.index, h1.index, "the free slot is reused");
        assert!(!m.release(1, 1, &h1), "a stale handle does not remove the new occupant");
        assert_eq!(m.len(), 2);
        assert!(m.release(2, 1, &h2) && m.release(3, 2, &h3));
    }

    impl ListMap {
        /// `(tid, mask)` of every linked node, head to tail, after checking that the
        /// backward walk mirrors the forward one and both agree with `len`.
        fn walk(&self) -> Vec<(Tid, u8)> {
            let l = lock(&self.inner);
            let (mut fwd, mut back) = (Vec::new(), Vec::new());
            let (mut p, mut prev) = (l.head, ptr::null_mut());
            // SAFETY: the list's invariants (we hold the mutex).
            while let Some(n) = unsafe { p.as_ref() } {
                assert_eq!(n.prev, prev, "prev link of node {}", fwd.len());
                assert_ne!(n.id, 0, "a linked node has an id");
                fwd.push((n.tid, n.mask));
                prev = p;
                p = n.next;
            }
            assert_eq!(l.tail, prev, "tail is the last node");
            let mut p = l.tail;
            // SAFETY: as above.
            while let Some(n) = unsafe { p.as_ref() } {
                back.push((n.tid, n.mask));
                p = n.prev;
            }
            back.reverse();
            assert_eq!(fwd, back);
            assert_eq!(fwd.len(), l.len);
            fwd
        }

        fn free_nodes(&self) -> usize {
            let l = lock(&self.inner);
            let (mut n, mut p) = (0, l.free);
            // SAFETY: the free stack's invariants (we hold the mutex).
            while let Some(node) = unsafe { p.as_ref() } {
                assert_eq!(node.id, 0, "a free node has no id");
                n += 1;
                p = node.next;
            }
            n
        }
    }

    #[test]
    fn list_appends_at_the_tail_and_unlinks_from_anywhere() {
        let m = ListMap::default();
        let hs: Vec<_> = [(1, 1), (2, 1), (1, 2), (3, 1), (1, 4)]
            .map(|(tid, mask)| m.reserve(tid, &mut |_| Some(mask)).unwrap().1)
            .into();
        assert_eq!(m.walk(), [(1, 1), (2, 1), (1, 2), (3, 1), (1, 4)]);
        assert_eq!(m.used(1), 0b111);
        // The middle, then the head, then the tail.
        assert!(m.release(1, 2, &hs[2]));
        assert_eq!(m.walk(), [(1, 1), (2, 1), (3, 1), (1, 4)]);
        assert!(m.release(1, 1, &hs[0]));
        assert_eq!(m.walk(), [(2, 1), (3, 1), (1, 4)]);
        assert!(m.release(1, 4, &hs[4]));
        assert_eq!(m.walk(), [(2, 1), (3, 1)]);
        assert_eq!((m.used(1), m.used(2), m.len(), m.free_nodes()), (0, 1, 2, 3));
        // Down to empty and back up: head and tail are reset and set again.
        assert!(m.release(2, 1, &hs[1]) && m.release(3, 1, &hs[3]));
        assert_eq!(m.walk(), []);
        assert!(m.is_empty());
        let (_, h) = m.reserve(9, &mut |_| Some(8)).unwrap();
        assert_eq!(m.walk(), [(9, 8)]);
        assert_eq!(m.free_nodes(), 4, "a freed node was reused");
        assert!(m.release(9, 8, &h));
    }

    #[test]
    fn list_refuses_stale_and_foreign_handles() {
        let m = ListMap::default();
        let (_, h1) = m.reserve(1, &mut |_| Some(1)).unwrap();
        let (_, h2) = m.reserve(2, &mut |_| Some(1)).unwrap();
        assert!(m.release(1, 1, &h1));
        assert!(!m.release(1, 1, &h1), "a handle releases once");
        let (_, h3) = m.reserve(3, &mut |_| Some(2)).unwrap();
        assert_eq!(h3.node, h1.node, "the freed node is reused");
        assert!(!m.release(1, 1, &h1), "a stale handle does not remove the new occupant");
        assert_eq!(m.walk(), [(2, 1), (3, 2)]);
        // A handle from another map, live or dropped, is refused without being followed.
        let other = ListMap::default();
        let (_, foreign) = other.reserve(2, &mut |_| Some(1)).unwrap();
        assert!(!m.release(2, 1, &foreign));
        drop(other);
        assert!(!m.release(2, 1, &foreign));
        assert_eq!(m.walk(), [(2, 1), (3, 2)]);
        assert!(m.release(2, 1, &h2) && m.release(3, 2, &h3));
        assert!(m.is_empty());
    }

    #[test]
    fn list_stays_well_formed_under_concurrent_reserve_and_release() {
        // Small enough for Miri, which then also checks the nodes for data races.
        const THREADS: usize = 3;
        const ROUNDS: usize = if cfg!(miri) { 40 } else { 2_000 };
        let t: SlotTable<ListMap> = SlotTable::default();
        std::thread::scope(|s| {
            for w in 0..THREADS {
                let t = &t;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..ROUNDS {
                        // Two thread ids shared by all workers, so reservations interleave
                        // in the list and some are refused.
                        let tid = ((w + i) % 2) as Tid;
                        if i % 3 == 2 {
                            if let Some(r) = mine.pop() {
                                t.release(r);
                            }
                        } else if let Ok(r) = t.reserve(tid, 1) {
                            mine.push(r);
                        }
                    }
                    for r in mine {
                        t.release(r);
                    }
                });
            }
        });
        assert_eq!(t.map().walk(), []);
        assert!(t.map().free_nodes() > 0);
        assert_eq!((t.used(0), t.used(1)), (0, 0));
    }

    #[test]
    fn list_frees_its_nodes_when_dropped_holding_reservations() {
        // Under Miri this also checks that every node is freed exactly once.
        let m = ListMap::default();
        let hs: Vec<_> = (0..6).map(|tid| m.reserve(tid, &mut |_| Some(1)).unwrap().1).collect();
        assert!(m.release(2, 1, &hs[2]));
        drop(m);
    }

    #[test]
    fn a_smaller_capacity_is_honoured() {
        let t = SlotTable::new(MutexHashMap::default(), 2);
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
