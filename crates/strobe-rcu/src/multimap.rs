//! [`HashMultiMap`]: a hash table with several values per key, lock-free
//! lookups under a read section, and resizing that never stops readers (the
//! `rhltable` the kernel's breakpoint slot table uses, seed 000).
//!
//! # Design
//!
//! Buckets are singly linked chains of nodes; every entry (also ones sharing
//! a key) is its own node, found by comparing the stored hash and then the key.
//! Writers are serialised by a mutex; readers take no lock.
//!
//! *Resizing with two link slots.* Each node carries two `next` links and each
//! table says which slot its chains use. A resize builds the new bucket array
//! by relinking every node through the *other* slot, invisible to readers of
//! the current table (they follow only their table's slot, which the resize
//! does not touch), then publishes the new table with one `Release` store.
//! Readers that loaded the old table keep walking intact old chains; readers
//! that load the new table see complete new chains. Nothing is copied, nodes
//! never move, and readers never wait or retry. Before the *next* resize may
//! reuse the old slot, every reader of the old table must be gone: the resize
//! records a grace-period cookie when it publishes, and the next one waits for
//! it (normally long reached; if the writer is itself inside a read section,
//! it skips that resize and retries on a later insert). The old bucket array
//! is retired.
//!
//! *Insert* links a new node at the head of its chain in the current slot
//! (`Release` store publishes the node's contents). *Remove* unlinks one
//! matching node from the current chain (`Release`, so a reader that reads the
//! new link also sees the successor's initialisation, which this writer
//! acquired through the mutex) and retires it through its embedded
//! [`RcuHead`], so removal needs no memory even when record blocks cannot be
//! allocated. A reader standing on the removed node still follows its intact
//! `next` link; old-table readers may still reach it through the old slot,
//! which is why it is freed only after a grace period.
//!
//! The table grows when entries exceed buckets (load factor 1) and shrinks
//! below a quarter, so lookups stay O(1) on average.
//!
//! Must never: lock, allocate or wait in a lookup; modify the slot a live
//! table's readers follow other than by the atomic link stores above.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ptr;

use crate::domain::Domain;
use crate::primitive::{lock, AtomicPtr, AtomicUsize, Mutex, Ordering};
use crate::reader::ReadGuard;
use crate::reclaim::{drop_box, RcuHead};

/// Smallest bucket count (a power of two).
const MIN_BUCKETS: usize = if cfg!(loom) { 2 } else { 16 };

#[repr(C)]
struct Node<K, V> {
    /// First, so the head's address is the node's (the drop function casts).
    head: RcuHead,
    next: [AtomicPtr<Node<K, V>>; 2],
    hash: u64,
    key: K,
    value: V,
}

struct Table<K, V> {
    /// Which of a node's two links this table's chains use.
    slot: usize,
    mask: usize,
    buckets: Box<[AtomicPtr<Node<K, V>>]>,
}

impl<K, V> Table<K, V> {
    fn new(n: usize, slot: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        let buckets = (0..n).map(|_| AtomicPtr::new(ptr::null_mut())).collect();
        Self { slot, mask: n - 1, buckets }
    }
}

struct Writer {
    /// Cookie of the grace period after the last resize's publication.
    last_publish: Option<u64>,
}

/// A hash multimap with lock-free lookups under a read section and
/// non-blocking resizes (see the module note).
///
/// ```
/// use strobe_rcu::{read_lock, HashMultiMap};
/// let m = HashMultiMap::new();
/// m.insert(7u32, "a");
/// m.insert(7u32, "b");
/// let g = read_lock();
/// let mut seen = Vec::new();
/// m.for_each(&7, &g, |v| seen.push(*v));
/// seen.sort();
/// assert_eq!(seen, ["a", "b"]);
/// ```
pub struct HashMultiMap<K, V, S = RandomState> {
    table: AtomicPtr<Table<K, V>>,
    len: AtomicUsize,
    writer: Mutex<Writer>,
    hasher: S,
    domain: &'static Domain,
    _owns: PhantomData<Box<Node<K, V>>>,
}

#[cfg(not(loom))]
impl<K, V> HashMultiMap<K, V, RandomState>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    /// An empty map in the global domain.
    pub fn new() -> Self {
        // SAFETY: `read_lock` only hands out global-domain guards.
        unsafe { Self::with_hasher_in(crate::global::global(), RandomState::new()) }
    }
}

#[cfg(not(loom))]
impl<K, V> Default for HashMultiMap<K, V, RandomState>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, S> HashMultiMap<K, V, S>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    S: BuildHasher,
{
    /// An empty map in the global domain with a custom hasher.
    #[cfg(not(loom))]
    pub fn with_hasher(hasher: S) -> Self {
        // SAFETY: as in `new`.
        unsafe { Self::with_hasher_in(crate::global::global(), hasher) }
    }

    /// An empty map whose garbage is retired in `domain`.
    ///
    /// # Safety
    /// Every guard later passed to a lookup comes from `domain`.
    pub unsafe fn with_hasher_in(domain: &'static Domain, hasher: S) -> Self {
        let t = Box::into_raw(Box::new(Table::new(MIN_BUCKETS, 0)));
        Self {
            table: AtomicPtr::new(t),
            len: AtomicUsize::new(0),
            writer: Mutex::new(Writer { last_publish: None }),
            hasher,
            domain,
            _owns: PhantomData,
        }
    }

    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Number of entries (a snapshot).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when the map holds no entry (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Current bucket count (a snapshot; for tests and figures).
    pub fn buckets(&self) -> usize {
        // SAFETY: the table pointer is never null and a table lives as long as
        // the map or a grace period after it is replaced; Acquire pairs with
        // the publishing store.
        let table = unsafe { &*self.table.load(Ordering::Acquire) };
        table.buckets.len()
    }

    /// Calls `f` with every value stored under `key`. Lock-free; allocates
    /// nothing; async-signal-safe if `Hash`/`Eq` of the key and `f` are.
    #[inline]
    pub fn for_each<'g, Q>(&'g self, key: &Q, _guard: &'g ReadGuard<'_>, mut f: impl FnMut(&'g V))
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hash(key);
        // Acquire: pairs with the Release publication of a resized table, so
        // its buckets and every node's link in its slot are visible.
        // SAFETY: never null; freed only a grace period after replacement, and
        // our section is protected by the guard.
        let t = unsafe { &*self.table.load(Ordering::Acquire) };
        let Some(bucket) = t.buckets.get((h as usize) & t.mask) else { return };
        let slot = t.slot & 1;
        // Acquire: pairs with the Release link stores of insert/remove.
        let mut p = bucket.load(Ordering::Acquire);
        // SAFETY: reachable nodes are freed only a grace period after being
        // unlinked, which cannot complete while the guard lives.
        while let Some(n) = unsafe { p.as_ref() } {
            if n.hash == h && n.key.borrow() == key {
                f(&n.value);
            }
            p = n.next[slot].load(Ordering::Acquire);
        }
    }

    /// The first value found under `key`, if any.
    pub fn get<'g, Q>(&'g self, key: &Q, guard: &'g ReadGuard<'_>) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut found = None;
        self.for_each(key, guard, |v| {
            if found.is_none() {
                found = Some(v);
            }
        });
        found
    }

    /// How many values are stored under `key`.
    pub fn count<Q>(&self, key: &Q, guard: &ReadGuard<'_>) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut n = 0;
        self.for_each(key, guard, |_| n += 1);
        n
    }

    /// Calls `f` with every entry of the map (a consistent walk of one table;
    /// entries inserted or removed meanwhile may or may not be seen).
    pub fn for_each_entry<'g>(
        &'g self,
        _guard: &'g ReadGuard<'_>,
        mut f: impl FnMut(&'g K, &'g V),
    ) {
        // SAFETY: as in `for_each`.
        let t = unsafe { &*self.table.load(Ordering::Acquire) };
        let slot = t.slot & 1;
        for b in t.buckets.iter() {
            let mut p = b.load(Ordering::Acquire);
            // SAFETY: as in `for_each`.
            while let Some(n) = unsafe { p.as_ref() } {
                f(&n.key, &n.value);
                p = n.next[slot].load(Ordering::Acquire);
            }
        }
    }

    /// Adds an entry (keys may repeat). May resize; never blocks readers.
    pub fn insert(&self, key: K, value: V) {
        let h = self.hash(&key);
        let mut w = lock(&self.writer);
        // Relaxed: only writers store `table`, and we hold their mutex.
        // SAFETY: never null; we are the only writer.
        let t = unsafe { &*self.table.load(Ordering::Relaxed) };
        let node = Box::into_raw(Box::new(Node {
            head: RcuHead::new(),
            next: [AtomicPtr::new(ptr::null_mut()), AtomicPtr::new(ptr::null_mut())],
            hash: h,
            key,
            value,
        }));
        let slot = t.slot & 1;
        let bucket = &t.buckets[(h as usize) & t.mask];
        // SAFETY: `node` is ours until published below.
        unsafe { (*node).next[slot].store(bucket.load(Ordering::Relaxed), Ordering::Relaxed) };
        // Release: publishes the node's fields and link with the pointer.
        bucket.store(node, Ordering::Release);
        let len = self.len.load(Ordering::Relaxed) + 1;
        self.len.store(len, Ordering::Relaxed);
        if len > t.buckets.len() {
            self.resize(&mut w, t.buckets.len() * 2);
        }
    }

    /// Removes one entry under `key` whose value satisfies `pred`; returns
    /// whether one was removed. The value is dropped after a grace period.
    pub fn remove_if<Q>(&self, key: &Q, mut pred: impl FnMut(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hash(key);
        let mut w = lock(&self.writer);
        // SAFETY: as in `insert`.
        let t = unsafe { &*self.table.load(Ordering::Relaxed) };
        let slot = t.slot & 1;
        let mut link = &t.buckets[(h as usize) & t.mask];
        let mut p = link.load(Ordering::Relaxed);
        // SAFETY: nodes linked in the current table are live; we are the only
        // writer.
        while let Some(n) = unsafe { p.as_ref() } {
            if n.hash == h && n.key.borrow() == key && pred(&n.value) {
                // Release: see the module note.
                link.store(n.next[slot].load(Ordering::Relaxed), Ordering::Release);
                let len = self.len.load(Ordering::Relaxed) - 1;
                self.len.store(len, Ordering::Relaxed);
                // SAFETY: the node is unlinked from the current table; old
                // tables' readers are covered by the grace period. The head is
                // at offset 0 of the node (repr(C)), so the retired pointer is
                // the Box pointer `drop_box` expects.
                unsafe {
                    self.domain.retire_any(p.cast(), drop_box::<Node<K, V>>, p.cast::<RcuHead>())
                };
                let n_buckets = t.buckets.len();
                if n_buckets > MIN_BUCKETS && len < n_buckets / 4 {
                    self.resize(&mut w, n_buckets / 2);
                }
                return true;
            }
            link = &n.next[slot];
            p = link.load(Ordering::Relaxed);
        }
        false
    }

    /// Removes one entry `(key, value)`; returns whether one was found.
    pub fn remove<Q>(&self, key: &Q, value: &V) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        V: PartialEq,
    {
        self.remove_if(key, |v| v == value)
    }

    /// Relinks every node into a table of `n` buckets and publishes it.
    /// Caller holds the writer mutex.
    fn resize(&self, w: &mut Writer, n: usize) {
        if let Some(c) = w.last_publish {
            if !self.domain.poll(c) {
                if self.domain.caller_in_section() {
                    return; // cannot wait for our own section; retry later
                }
                self.domain.wait_for(c);
            }
        }
        let old = self.table.load(Ordering::Relaxed);
        // SAFETY: the current table; we are the only writer.
        let o = unsafe { &*old };
        let (os, ns) = (o.slot & 1, (o.slot & 1) ^ 1);
        let new = Table::new(n, ns);
        for b in o.buckets.iter() {
            let mut p = b.load(Ordering::Relaxed);
            // SAFETY: nodes of the current table are live. We write only their
            // `ns` links, which no reader follows: current readers use `os`,
            // and the readers of the table before (which used `ns`) are gone,
            // by the wait above.
            while let Some(node) = unsafe { p.as_ref() } {
                let next = node.next[os].load(Ordering::Relaxed);
                let nb = &new.buckets[(node.hash as usize) & new.mask];
                node.next[ns].store(nb.load(Ordering::Relaxed), Ordering::Relaxed);
                nb.store(p, Ordering::Relaxed);
                p = next;
            }
        }
        let newp = Box::into_raw(Box::new(new));
        // Release: publishes the new buckets and every relinked `ns` link.
        self.table.store(newp, Ordering::Release);
        w.last_publish = Some(self.domain.snapshot());
        // SAFETY: the old table is unpublished; readers still walking it are
        // covered by the grace period.
        unsafe { self.domain.retire_any(old.cast(), drop_box::<Table<K, V>>, ptr::null_mut()) };
    }
}

impl<K, V, S> Drop for HashMultiMap<K, V, S> {
    fn drop(&mut self) {
        let t = self.table.load(Ordering::Relaxed);
        // SAFETY: `&mut self`: no reader holds a reference into the map (they
        // borrow it), and no writer runs. Retired nodes are not linked here.
        unsafe {
            let tb = Box::from_raw(t);
            let slot = tb.slot & 1;
            for b in tb.buckets.iter() {
                let mut p = b.load(Ordering::Relaxed);
                while !p.is_null() {
                    let next = (*p).next[slot].load(Ordering::Relaxed);
                    drop(Box::from_raw(p));
                    p = next;
                }
            }
        }
    }
}

impl<K, V, S> std::fmt::Debug for HashMultiMap<K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashMultiMap")
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
