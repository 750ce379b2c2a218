//! [`Registry`]: the published module table and the protocol that replaces
//! it, generic over the module type so that the loom model in
//! `tests/loom.rs` runs this very code with modules whose "unmapping" loom
//! can see.
//!
//! # Design
//!
//! Readers (signal handlers) enter a read section of the registry's own
//! strobe-rcu [`Domain`], load `current` and use the [`Table`] for the rest
//! of the section. Writers serialise on `writer`, build a whole new table,
//! swap it in, wait for a grace period with [`Domain::synchronize`] and only
//! then drop the old table (and with it the last reference to any module no
//! longer listed). Nothing is ever retired for later: grace periods are
//! synchronous, so no reclaimer thread is ever needed (the domain is created
//! without one).
//!
//! The writer state keeps the newest full scan (`latest`, ordered by the
//! scan's `stamp`, the dynamic linker's load plus unload count) and the
//! number of `dlclose` calls in progress (`closing`). Every publication is
//! derived from both: while `closing > 0` only permanent modules are
//! listed, so a scan offered by a concurrent `dlopen` cannot bring back a
//! module that is being unloaded; a scan older than `latest` is ignored, so
//! a slow scan taken before an unload cannot either.
//!
//! *Orderings.* `current` is swapped with `AcqRel` (the release half
//! publishes the table's contents; the acquire half is irrelevant to
//! readers, writers being serialised by the mutex) and loaded by readers
//! with `Acquire`, pairing with it. The grace period orders every reader's
//! use of the old table before its drop (strobe-rcu's argument).
//!
//! Must never: drop a table, or let a module's memory go, before a grace
//! period has passed since it was unpublished; publish a removable module
//! while a `dlclose` is in progress; block readers.

use std::sync::Arc;

use strobe_rcu::{Domain, ReadGuard};

use crate::sync::{AtomicPtr, Mutex, Ordering};

/// What the registry needs to know of a module.
pub trait ModuleRange: Send + Sync + 'static {
    /// The module's code: `[start, end)`.
    fn range(&self) -> (u64, u64);
    /// True when the module can never be unloaded (loaded with the program).
    fn permanent(&self) -> bool;
}

/// An immutable set of modules, sorted by address. Readers get it from
/// [`Registry::load`].
#[derive(Debug)]
pub struct Table<M> {
    /// Distinct for every table a registry publishes (never zero), so that
    /// caches keyed by address can tell when the modules changed.
    pub generation: u64,
    /// The modules' code ranges, contiguous for the search.
    ranges: Box<[(u64, u64)]>,
    modules: Box<[Arc<M>]>,
}

impl<M: ModuleRange> Table<M> {
    /// A table of `modules` outside any registry (another process's modules,
    /// walked from a copy of its stack). Overlapping modules: the later one
    /// in address order is dropped. `generation` must differ from every
    /// other table a [`crate::RuleCache`] it is used with has seen.
    pub fn new(generation: u64, mut modules: Vec<Arc<M>>) -> Table<M> {
        modules.sort_by_key(|m| m.range());
        let mut kept: Vec<Arc<M>> = Vec::with_capacity(modules.len());
        for m in modules {
            if kept.last().is_none_or(|k| k.range().1 <= m.range().0) {
                kept.push(m);
            }
        }
        Table {
            generation,
            ranges: kept.iter().map(|m| m.range()).collect(),
            modules: kept.into_boxed_slice(),
        }
    }

    /// The module whose code contains `addr`. Async-signal-safe.
    #[inline]
    pub fn find(&self, addr: u64) -> Option<&M> {
        // Modules do not overlap: the last one starting at or below `addr`.
        let i = self.ranges.partition_point(|r| r.0 <= addr).checked_sub(1)?;
        (addr < self.ranges[i].1).then(|| &*self.modules[i])
    }

    /// True when `addr` lies in some module's code. Async-signal-safe.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.0 <= addr);
        i > 0 && addr < self.ranges[i - 1].1
    }

    /// The modules, by address.
    pub fn modules(&self) -> &[Arc<M>] {
        &self.modules
    }
}

struct Writer<M> {
    /// The newest full scan and its stamp.
    latest: Vec<Arc<M>>,
    stamp: u64,
    /// `dlclose` calls between [`Registry::begin_close`] and
    /// [`Registry::end_close`].
    closing: usize,
    /// The last generation handed out.
    generation: u64,
}

/// The module table readers see, and its writers' protocol (module note).
pub struct Registry<M: ModuleRange> {
    domain: &'static Domain,
    current: AtomicPtr<Table<M>>,
    writer: Mutex<Writer<M>>,
    /// A forked child: no grace periods (see [`Registry::after_fork_in_child`]).
    forked: std::sync::atomic::AtomicBool,
}

impl<M: ModuleRange> Registry<M> {
    /// An empty registry whose readers use `domain` (create one with
    /// [`Domain::new`]: it has no background reclaimer).
    pub fn new(domain: &'static Domain) -> Self {
        Self {
            domain,
            current: AtomicPtr::new(std::ptr::null_mut()),
            writer: Mutex::new(Writer { latest: Vec::new(), stamp: 0, closing: 0, generation: 0 }),
            forked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// In a forked child (one thread, the one that forked): the parent's other threads'
    /// reader records were copied, and one that was inside a walk at the fork stays in
    /// a read section for ever here, so a grace period would never end; and a parent
    /// thread that held the writer lock at the fork left it held. From now on updates
    /// never wait: an old table is leaked instead of freed after a grace period (its
    /// modules' unwind tables are their own copies, so a walk that still reads it reads
    /// valid memory, at worst stale), and an update that finds the writer lock held is
    /// skipped (the table stays stale until the next one). Call it before the child
    /// walks or updates; walks stay correct, as before.
    pub fn after_fork_in_child(&self) {
        // Relaxed: the child has one thread, which calls this before anything else here.
        self.forked.store(true, Ordering::Relaxed);
    }

    fn writer(&self) -> Option<impl std::ops::DerefMut<Target = Writer<M>> + '_> {
        if self.forked.load(Ordering::Relaxed) {
            match self.writer.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        } else {
            Some(self.writer.lock().unwrap_or_else(|e| e.into_inner()))
        }
    }

    /// The domain readers must enter sections of (register each reader
    /// thread with [`Domain::register`]).
    pub fn domain(&self) -> &'static Domain {
        self.domain
    }

    /// The current table, valid for the guard's section. Async-signal-safe.
    ///
    /// The guard must come from this registry's domain.
    #[inline]
    pub fn load<'g>(&'g self, _guard: &'g ReadGuard<'_>) -> Option<&'g Table<M>> {
        // Acquire: pairs with the AcqRel swap in `republish`.
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: a published table is dropped only after a grace period that
        // follows its unpublication, and the guard's section (which began
        // before that grace period ended) keeps it alive meanwhile.
        unsafe { p.as_ref() }
    }

    /// Offers a full scan of the loaded modules taken at `stamp` and
    /// publishes the result (ignored if a newer scan was offered already).
    /// Returns after a grace period, once the previous table is freed. Not
    /// async-signal-safe.
    pub fn publish(&self, stamp: u64, modules: Vec<Arc<M>>) {
        let Some(mut w) = self.writer() else { return };
        Self::offer(&mut w, stamp, modules);
        self.republish(&mut w);
    }

    /// First half of the `dlclose` protocol: publishes a table of the
    /// permanent modules only and waits for a grace period, after which no
    /// reader uses any removable module until [`end_close`](Self::end_close).
    pub fn begin_close(&self) {
        let Some(mut w) = self.writer() else { return };
        w.closing += 1;
        self.republish(&mut w);
    }

    /// Second half: the real `dlclose` has returned and `modules` is a scan
    /// taken after it (at `stamp`).
    pub fn end_close(&self, stamp: u64, modules: Vec<Arc<M>>) {
        let Some(mut w) = self.writer() else { return };
        w.closing = w.closing.saturating_sub(1);
        Self::offer(&mut w, stamp, modules);
        self.republish(&mut w);
    }

    /// The newest full scan (what the table lists once no `dlclose` runs).
    pub fn latest(&self) -> Vec<Arc<M>> {
        self.writer().map(|w| w.latest.clone()).unwrap_or_default()
    }

    fn offer(w: &mut Writer<M>, stamp: u64, modules: Vec<Arc<M>>) {
        if stamp >= w.stamp {
            w.stamp = stamp;
            w.latest = modules;
        }
    }

    fn republish(&self, w: &mut Writer<M>) {
        let mut list: Vec<Arc<M>> =
            w.latest.iter().filter(|m| w.closing == 0 || m.permanent()).cloned().collect();
        list.sort_by_key(|m| m.range().0);
        // Overlapping ranges would make `find` ambiguous; keep the first.
        let mut kept: Vec<Arc<M>> = Vec::with_capacity(list.len());
        for m in list {
            if kept.last().is_none_or(|k| k.range().1 <= m.range().0) {
                kept.push(m);
            }
        }
        w.generation += 1;
        let table = Box::new(Table {
            generation: w.generation,
            ranges: kept.iter().map(|m| m.range()).collect(),
            modules: kept.into_boxed_slice(),
        });
        // AcqRel: see the module note.
        let old = self.current.swap(Box::into_raw(table), Ordering::AcqRel);
        if self.forked.load(Ordering::Relaxed) {
            return; // leaked: see `after_fork_in_child`
        }
        self.domain.synchronize();
        if !old.is_null() {
            // SAFETY: `old` came from Box::into_raw above (an earlier call),
            // is unpublished, and the grace period has ended every section
            // that could have loaded it.
            drop(unsafe { Box::from_raw(old) });
        }
    }
}

impl<M: ModuleRange> Drop for Registry<M> {
    fn drop(&mut self) {
        let p = self.current.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: `&mut self`: no reader can hold a guard-bound reference
            // derived from `self` any more.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
