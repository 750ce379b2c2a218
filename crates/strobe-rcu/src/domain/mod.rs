//! A domain: its readers, its grace periods and its garbage.
//!
//! [`Domain`] is defined here with what every part of it shares: its construction, the
//! registries of reader records and of per-thread bags (records and bags are claimed by a
//! thread, released at its exit and reused, never freed), and its figures. The rest of its
//! behaviour is split by concern, each in a child module holding `impl Domain` for it:
//!
//! - `grace.rs`: grace periods (the polling and barrier argument lives there);
//! - `handle.rs`: [`LocalHandle`], a thread's registration, and its retire path;
//! - `collect.rs`: garbage no single thread frees: the orphan queue, taking garbage
//!   out of idle threads' bags, [`Domain::barrier`].
//!
//! The process-wide domain (`global.rs`) adds a background reclaimer thread and
//! per-thread handles in TLS; it hands them in as [`GlobalHooks`], so nothing here names
//! it.
//!
//! Must never: be entered from a read section (grace periods wait for the caller's own
//! section), or be called from a signal handler (it locks, allocates and sleeps); free a
//! reader record or a bag while the domain lives.

mod collect;
mod grace;
mod handle;

pub use grace::LAZY_PATIENCE;
pub use handle::LocalHandle;

use std::ptr;

use crate::primitive::{
    fence, lock, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering,
};
use crate::reader::{Reader, DEPTH_MASK, HEAVY};
use crate::reclaim::{Bag, DropFn, Orphans, RcuHead};
use crate::stats::{Counters, Stats};

/// What the process-wide domain has that a domain made with [`Domain::new`] lacks,
/// supplied by `global.rs` when it builds that domain: a background reclaimer thread, and
/// per-thread handles kept in TLS. Plain function pointers, so this module depends on
/// nothing above it.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct GlobalHooks {
    /// Asks the background reclaimer to complete the grace period named by a cookie.
    pub(crate) request_gp: fn(u64),
    /// Asks the background reclaimer to free orphaned garbage soon.
    pub(crate) kick_reclaimer: fn(),
    /// Retires through the calling thread's own handle (`ptr`, its drop function, and its
    /// embedded head or null), as `retire_raw`/`retire_head` do.
    pub(crate) retire: unsafe fn(*mut (), DropFn, *mut RcuHead),
    /// The calling thread's read-section depth in the global domain.
    pub(crate) read_depth: fn() -> usize,
}

/// How the writer side makes readers' stores visible.
pub(crate) const MODE_UNDECIDED: usize = 0;
/// `sys_membarrier(PRIVATE_EXPEDITED)`; readers use a compiler fence.
pub(crate) const MODE_MEMBARRIER: usize = 1;
/// Readers execute a `SeqCst` fence; writers a `SeqCst` fence.
pub(crate) const MODE_FENCES: usize = 2;

/// An independent RCU domain: its own readers, grace periods and garbage.
///
/// Almost all code uses the process-wide domain through the free functions
/// ([`read_lock`](crate::read_lock), [`synchronize`](crate::synchronize),
/// [`retire`](crate::retire), ...). Separate domains exist for tests and
/// models: a domain created with [`Domain::new_with_fences`] exercises the
/// fallback scheme, and under `--cfg loom` every model builds its own.
/// Domains are leaked (`&'static`), like the global one: reader records and
/// bags must outlive every thread that might touch them.
pub struct Domain {
    /// The reader epoch (`reader.rs`): the only field readers load, alone on
    /// its cache line so that grace-period bookkeeping and statistics never
    /// invalidate it under them.
    reader_epoch: EpochWord,
    pub(crate) readers: AtomicPtr<Reader>,
    pub(crate) bags: AtomicPtr<Bag>,
    gp_seq: AtomicU64,
    gp_lock: Mutex<()>,
    mode: AtomicUsize,
    mode_lock: Mutex<()>,
    /// Serialises whoever takes garbage out of other threads' bags and the
    /// orphan queue (`barrier`, the background reclaimer), for the whole
    /// take-wait-free sequence.
    pub(crate) steal_lock: Mutex<()>,
    /// The last grace period completed by polling, without a barrier: the
    /// next one is likely cheap too, so retiring threads run them inline.
    pub(crate) gp_was_cheap: AtomicBool,
    pub(crate) orphans: Mutex<Orphans>,
    /// The process-wide domain's reclaimer thread and TLS handles; `None` for every
    /// other domain (and always under loom).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) global: Option<&'static GlobalHooks>,
    pub(crate) stats: Counters,
}

// SAFETY: every field is an atomic, a mutex, or a raw pointer into the
// registries whose records are themselves Sync and never freed while the
// domain lives (domains are leaked).
unsafe impl Sync for Domain {}
// SAFETY: as above; nothing is tied to the creating thread.
unsafe impl Send for Domain {}

/// A word on its own cache line (and prefetch pair).
#[repr(align(128))]
struct EpochWord(AtomicUsize);

macro_rules! domain_init {
    ($mode:expr, $global:expr) => {
        Domain {
            reader_epoch: EpochWord(AtomicUsize::new(0)),
            readers: AtomicPtr::new(ptr::null_mut()),
            bags: AtomicPtr::new(ptr::null_mut()),
            gp_seq: AtomicU64::new(0),
            gp_lock: Mutex::new(()),
            mode: AtomicUsize::new($mode),
            mode_lock: Mutex::new(()),
            steal_lock: Mutex::new(()),
            gp_was_cheap: AtomicBool::new(true),
            orphans: Mutex::new(Orphans::new()),
            global: $global,
            stats: crate::stats::counters_init!(),
        }
    };
}

impl Domain {
    /// The process-wide domain, with what only it has (`global.rs`).
    #[cfg(not(loom))]
    pub(crate) const fn global_init(hooks: &'static GlobalHooks) -> Self {
        domain_init!(MODE_UNDECIDED, Some(hooks))
    }

    /// A new domain using membarrier when the kernel offers it (the same
    /// choice the global domain makes), leaked for `'static`.
    pub fn new() -> &'static Domain {
        Box::leak(Box::new(domain_init!(MODE_UNDECIDED, None)))
    }

    /// A new domain that never uses membarrier: readers pay a `SeqCst` fence on
    /// entry. This is the scheme every domain falls back to when the kernel
    /// lacks `MEMBARRIER_CMD_PRIVATE_EXPEDITED`; tests use it to cover that path.
    pub fn new_with_fences() -> &'static Domain {
        Box::leak(Box::new(domain_init!(MODE_FENCES, None)))
    }

    /// The reader epoch word (`reader.rs`). Used by the global domain's
    /// thread-local entry, which loom models do not build.
    #[inline(always)]
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn epoch_word(&self) -> &AtomicUsize {
        &self.reader_epoch.0
    }

    /// True when this domain's readers rely on membarrier (decided at first
    /// use; false before that).
    pub fn uses_membarrier(&self) -> bool {
        // Acquire: pairs with the Release store in `ensure_mode`.
        self.mode.load(Ordering::Acquire) == MODE_MEMBARRIER
    }

    /// Decides, once, whether the writer side has membarrier. Must run before
    /// any reader record is handed out and before any grace period, so both
    /// sides agree (both call it first; the decision happens-before either via
    /// `mode_lock` / the `Acquire` load).
    pub(crate) fn ensure_mode(&self) -> usize {
        // Acquire: pairs with the Release store below, so a caller that sees
        // the decision also sees the membarrier registration that preceded it.
        let m = self.mode.load(Ordering::Acquire);
        if m != MODE_UNDECIDED {
            return m;
        }
        let _g = lock(&self.mode_lock);
        let m = self.mode.load(Ordering::Acquire);
        if m != MODE_UNDECIDED {
            return m;
        }
        #[cfg(loom)]
        let m = MODE_FENCES;
        #[cfg(not(loom))]
        let m =
            if crate::sys::register_private_expedited() { MODE_MEMBARRIER } else { MODE_FENCES };
        self.mode.store(m, Ordering::Release);
        m
    }

    /// Claims a reader record for the calling thread: a free one from the
    /// registry if any, else a new one pushed on the registry. May allocate.
    pub(crate) fn acquire_reader(&self) -> *const Reader {
        // The flags the record's `ctr` carries while its owner is online.
        let base = if self.ensure_mode() == MODE_MEMBARRIER { 0 } else { HEAVY };
        // Acquire (here and on `next`): pairs with the Release CAS that pushed
        // each record, so its fields are initialised when we look at them.
        let mut p = self.readers.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: registry records are never freed while the domain lives.
            let r = unsafe { &*p };
            // Acquire: the previous owner's release (its final exit) happens
            // before we reuse the record.
            if !r.in_use.load(Ordering::Relaxed)
                && r.in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Relaxed: the record is ours now (claimed by the CAS); only
                // this thread writes `ctr` and reads the others until it
                // releases the record. `ctr` gets depth zero, our flags and
                // epoch zero, which proves nothing to a grace period (every
                // grace period's epoch is above zero); the fence below orders
                // the store before our first section.
                r.base.store(base, Ordering::Relaxed);
                r.is_offline.store(false, Ordering::Relaxed);
                r.ctr.store(base, Ordering::Relaxed);
                // SeqCst: a grace period that found no other record in use
                // skips the membarrier; this fence pairs with its fence after
                // the registry walk ("Lone writers" in the module note).
                fence(Ordering::SeqCst);
                return p;
            }
            p = r.next.load(Ordering::Acquire);
        }
        let rec = Box::into_raw(Box::new(Reader::new(base, &self.reader_epoch.0)));
        let mut head = self.readers.load(Ordering::Relaxed);
        loop {
            // SAFETY: `rec` is ours until the CAS publishes it.
            unsafe { (*rec).next.store(head, Ordering::Relaxed) };
            // Release: publishes the record's initialised fields to scanners.
            match self.readers.compare_exchange_weak(
                head,
                rec,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // SeqCst: as after claiming a free record above.
                    fence(Ordering::SeqCst);
                    return rec;
                }
                Err(h) => head = h,
            }
        }
    }

    /// Returns a record to the registry. The owner must be outside any section.
    pub(crate) fn release_reader(&self, r: *const Reader) {
        // SAFETY: records are never freed while the domain lives.
        let r = unsafe { &*r };
        debug_assert_eq!(r.ctr.load(Ordering::Relaxed) & DEPTH_MASK, 0);
        // Release: pairs with the Acquire CAS of the next owner.
        r.in_use.store(false, Ordering::Release);
    }

    /// Claims a bag for the calling thread: a free one from the registry if
    /// any, else a new one pushed on the registry. May allocate.
    pub(crate) fn acquire_bag(&self) -> *const Bag {
        // Acquire (here and on `next`): pairs with the Release CAS that pushed
        // each bag, so its fields are initialised when we look at them.
        let mut p = self.bags.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: bags are never freed while the domain lives.
            let b = unsafe { &*p };
            // Acquire: the previous owner's release happens-before reuse.
            if !b.in_use.load(Ordering::Relaxed)
                && b.in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return p;
            }
            p = b.next.load(Ordering::Acquire);
        }
        let bag = Box::into_raw(Box::new(Bag::new()));
        let mut head = self.bags.load(Ordering::Relaxed);
        loop {
            // SAFETY: `bag` is ours until the CAS publishes it.
            unsafe { (*bag).next.store(head, Ordering::Relaxed) };
            // Release: publishes the initialised bag to scanners.
            match self.bags.compare_exchange_weak(head, bag, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return bag,
                Err(h) => head = h,
            }
        }
    }

    /// A snapshot of this domain's reclamation figures.
    pub fn stats(&self) -> Stats {
        let c = &self.stats;
        let mut outstanding = lock(&self.orphans).outstanding();
        let mut p = self.bags.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: bags are never freed while the domain lives.
            let b = unsafe { &*p };
            outstanding += b.outstanding.load(Ordering::Relaxed);
            p = b.next.load(Ordering::Acquire);
        }
        Stats {
            grace_periods: c.grace_periods.load(Ordering::Relaxed),
            lone_grace_periods: c.lone_grace_periods.load(Ordering::Relaxed),
            polled_grace_periods: c.polled_grace_periods.load(Ordering::Relaxed),
            outstanding,
            blocks_allocated: c.blocks_allocated.load(Ordering::Relaxed),
            block_alloc_failures: c.block_alloc_failures.load(Ordering::Relaxed),
            emergency: c.emergency.load(Ordering::Relaxed),
            headless_sync: c.headless_sync.load(Ordering::Relaxed),
            backpressure_waits: c.backpressure.load(Ordering::Relaxed),
            freed: c.freed.load(Ordering::Relaxed),
            steals: c.steals.load(Ordering::Relaxed),
        }
    }

    /// Number of completed grace periods in this domain.
    pub fn grace_periods(&self) -> u64 {
        self.stats.grace_periods.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("gp_seq", &self.gp_seq.load(Ordering::Relaxed))
            .field("mode", &self.mode.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
