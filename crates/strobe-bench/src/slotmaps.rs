//! The slot maps `strobe bench breakpoint` compares strobe's against (seed 000).
//!
//! [`strobe_watch::SlotTable`] is generic over how it finds a thread's slots (a
//! [`ThreadMultiMap`]); strobe runs it over [`strobe_watch::RcuHashMap`]. The maps here
//! exist only to be measured beside that one, so they live in the benchmark, never in a
//! crate the agent links:
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
//! - [`MutexHashMap`] is the lock-based hash: a `std` `HashMap` from thread to slot mask
//!   behind one mutex.
//!
//! Each holds one lock across counting a thread's slots and recording the chosen ones (as
//! the kernel holds `nr_bp_mutex` around `__reserve_bp_slot`), which makes the two one
//! atomic step as [`ThreadMultiMap::reserve`] requires.
//!
//! This module owns these three maps and nothing else. It must never be linked into the
//! agent or a target, and its maps must never be called from a signal handler (they lock,
//! and the list allocates a node per reservation).

use std::collections::HashMap;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use strobe_watch::slots::{ThreadMultiMap, Tid, TidHasher};

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
/// thread, but every call takes the lock. The lock-based counterpart of
/// [`strobe_watch::RcuHashMap`].
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

#[cfg(test)]
mod tests {
    use strobe_watch::slots::DEBUG_REGISTERS;
    use strobe_watch::{RcuHashMap, SlotError, SlotTable};

    use super::*;

    #[test]
    fn list_reserves_and_releases() {
        strobe_watch::conformance::behaves::<ListMap>();
    }

    #[test]
    fn array_reserves_and_releases() {
        strobe_watch::conformance::behaves::<ArrayMap>();
    }

    #[test]
    fn mutex_hash_reserves_and_releases() {
        strobe_watch::conformance::behaves::<MutexHashMap>();
    }

    /// One pseudo-random sequence of reserves, releases and forgets run on a map and on
    /// strobe's RCU map: every answer must be the same.
    fn agrees_with_strobes_map<M: ThreadMultiMap + Default>() {
        let (ours, theirs): (SlotTable<RcuHashMap>, SlotTable<M>) =
            (SlotTable::default(), SlotTable::default());
        let mut held = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let tid = (x % 5) as Tid;
            match (x >> 8) % 4 {
                0 | 1 => {
                    let n = 1 + (x >> 16) as u32 % DEBUG_REGISTERS;
                    match (ours.reserve(tid, n), theirs.reserve(tid, n)) {
                        (Ok(a), Ok(b)) => {
                            assert_eq!(a.mask(), b.mask());
                            held.push((a, b));
                        }
                        (Err(a), Err(b)) => assert_eq!(a, b),
                        (a, b) => panic!("tid {tid} n {n}: {a:?} vs {b:?}"),
                    }
                }
                2 if !held.is_empty() => {
                    let (a, b) = held.swap_remove((x >> 24) as usize % held.len());
                    ours.release(a);
                    theirs.release(b);
                }
                _ => assert_eq!(ours.forget(tid), theirs.forget(tid), "forget {tid}"),
            }
            assert_eq!(ours.used(tid), theirs.used(tid));
        }
    }

    #[test]
    fn every_map_answers_as_strobes_does() {
        agrees_with_strobes_map::<ListMap>();
        agrees_with_strobes_map::<ArrayMap>();
        agrees_with_strobes_map::<MutexHashMap>();
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
}
