//! A domain: the reader registry, grace periods, and the shared reclamation
//! state (bags of exited threads, the background reclaimer's requests).
//!
//! # Grace periods
//!
//! `gp_seq` counts grace-period boundaries: odd while one runs, even when
//! idle. A caller that has unpublished something takes a *cookie*
//! ([`Domain::snapshot`]): a `SeqCst` fence, then `(gp_seq + 3) & !1`, the value
//! `gp_seq` reaches at the end of the first grace period that *starts* after
//! the fence (if one is running now, it may have scanned the readers before our
//! unpublish, so the one after it). [`Domain::wait_for`] returns once `gp_seq`
//! has reached the cookie, running grace periods under `gp_lock` if nobody else
//! does. Concurrent callers therefore share grace periods: whoever holds the
//! lock advances `gp_seq` for everyone, and the others find their cookie
//! already reached when they get the lock (N concurrent `synchronize` calls
//! cost at most two grace periods, not N).
//!
//! One grace period is: `gp_seq += 1`, one membarrier (or `SeqCst` fence in
//! the fallback), a scan of every reader record waiting out the sections it
//! catches, `gp_seq += 1`. The membarrier is the only expensive step (about
//! 10 us here while the other vCPU runs); callers amortise it by retiring in
//! batches of thousands of objects per cookie.
//!
//! *Ordering.* The snapshot's `SeqCst` fence orders the caller's unpublish
//! before its read of `gp_seq`; that read precedes (in `gp_seq`'s modification
//! order) the increment that starts the grace period we wait for, which
//! precedes its membarrier, so the unpublish is visible before the membarrier
//! and the reader argument in `reader.rs` applies. The scan's `Acquire` loads
//! pair with the readers' `Release` exits; the final increment is `SeqCst`
//! (a release) and [`Domain::poll`] loads `gp_seq` with `Acquire`, so a caller
//! that sees its cookie reached happens-after every section the scan waited
//! for.
//!
//! Must never: be entered from a read section (it waits for the caller's own
//! section), or be called from a signal handler (it locks and sleeps).

use std::ptr;

use crate::primitive::{backoff, fence, lock, AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::reader::{Reader, NEST_MASK};
use crate::reclaim::{Bag, Orphans};

/// How the writer side makes readers' stores visible.
const MODE_UNDECIDED: usize = 0;
/// `sys_membarrier(PRIVATE_EXPEDITED)`; readers use a compiler fence.
const MODE_MEMBARRIER: usize = 1;
/// Readers execute a `SeqCst` fence; writers a `SeqCst` fence.
const MODE_FENCES: usize = 2;

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
    pub(crate) orphans: Mutex<Orphans>,
    /// The process-wide domain runs a background reclaimer thread.
    pub(crate) background: bool,
    pub(crate) stats: crate::reclaim::Counters,
}

// SAFETY: every field is an atomic, a mutex, or a raw pointer into the
// registries whose records are themselves Sync and never freed while the
// domain lives (domains are leaked).
unsafe impl Sync for Domain {}
// SAFETY: as above; nothing is tied to the creating thread.
unsafe impl Send for Domain {}

macro_rules! domain_init {
    ($mode:expr, $bg:expr) => {
        Domain {
            readers: AtomicPtr::new(ptr::null_mut()),
            bags: AtomicPtr::new(ptr::null_mut()),
            gp_seq: AtomicU64::new(0),
            gp_lock: Mutex::new(()),
            mode: AtomicUsize::new($mode),
            mode_lock: Mutex::new(()),
            steal_lock: Mutex::new(()),
            orphans: Mutex::new(Orphans::new()),
            background: $bg,
            stats: crate::reclaim::counters_init!(),
        }
    };
}

impl Domain {
    #[cfg(not(loom))]
    pub(crate) const fn global_init() -> Self {
        domain_init!(MODE_UNDECIDED, true)
    }

    /// A new domain using membarrier when the kernel offers it (the same
    /// choice the global domain makes), leaked for `'static`.
    pub fn new() -> &'static Domain {
        Box::leak(Box::new(domain_init!(MODE_UNDECIDED, false)))
    }

    /// A new domain that never uses membarrier: readers pay a `SeqCst` fence on
    /// entry. This is the scheme every domain falls back to when the kernel
    /// lacks `MEMBARRIER_CMD_PRIVATE_EXPEDITED`; tests use it to cover that path.
    pub fn new_with_fences() -> &'static Domain {
        Box::leak(Box::new(domain_init!(MODE_FENCES, false)))
    }

    /// True when this domain's readers rely on membarrier (decided at first
    /// use; false before that).
    pub fn uses_membarrier(&self) -> bool {
        self.mode.load(Ordering::Acquire) == MODE_MEMBARRIER
    }

    /// Decides, once, whether the writer side has membarrier. Must run before
    /// any reader record is handed out and before any grace period, so both
    /// sides agree (both call it first; the decision happens-before either via
    /// `mode_lock` / the `Acquire` load).
    fn ensure_mode(&self) -> usize {
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
        let heavy = self.ensure_mode() != MODE_MEMBARRIER;
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
                r.heavy.store(heavy, Ordering::Relaxed);
                return p;
            }
            p = r.next.load(Ordering::Acquire);
        }
        let rec = Box::into_raw(Box::new(Reader::new(heavy)));
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
                Ok(_) => return rec,
                Err(h) => head = h,
            }
        }
    }

    /// Returns a record to the registry. The owner must be outside any section.
    pub(crate) fn release_reader(&self, r: *const Reader) {
        // SAFETY: records are never freed while the domain lives.
        let r = unsafe { &*r };
        debug_assert_eq!(r.ctr.load(Ordering::Relaxed) & NEST_MASK, 0);
        // Release: pairs with the Acquire CAS of the next owner.
        r.in_use.store(false, Ordering::Release);
    }

    /// A cookie for "a full grace period after now" (see the module note).
    pub fn snapshot(&self) -> u64 {
        // SeqCst fence: orders the caller's unpublish before the gp_seq read.
        fence(Ordering::SeqCst);
        let s = self.gp_seq.load(Ordering::SeqCst);
        (s + 3) & !1
    }

    /// True once the grace period named by `cookie` has completed.
    #[inline]
    pub fn poll(&self, cookie: u64) -> bool {
        // Acquire: pairs with the SeqCst increment that ends a grace period.
        self.gp_seq.load(Ordering::Acquire) >= cookie
    }

    /// Waits until the grace period named by `cookie` has completed, running
    /// grace periods itself if nobody else is.
    pub fn wait_for(&self, cookie: u64) {
        if self.poll(cookie) {
            return;
        }
        let _g = lock(&self.gp_lock);
        while !self.poll(cookie) {
            self.run_grace_period();
        }
    }

    /// Waits for a grace period: every read section that began before this
    /// call has ended when it returns. Shares grace periods with concurrent
    /// callers. Must not be called inside a read section.
    pub fn synchronize(&self) {
        self.wait_for(self.snapshot());
    }

    /// One grace period. Caller holds `gp_lock`.
    fn run_grace_period(&self) {
        let mode = self.ensure_mode();
        // SeqCst: starts the grace period; ordered before the barrier below.
        self.gp_seq.fetch_add(1, Ordering::SeqCst);
        self.heavy_barrier(mode);
        let mut p = self.readers.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: registry records are never freed while the domain lives.
            let r = unsafe { &*p };
            // Acquire: pairs with the reader's Release exit (and entry), so a
            // reader seen outside its section has finished its loads.
            let v = r.ctr.load(Ordering::Acquire);
            if v & NEST_MASK != 0 {
                let mut step = 0;
                loop {
                    backoff(&mut step);
                    let w = r.ctr.load(Ordering::Acquire);
                    if w & NEST_MASK == 0 || (w & !NEST_MASK) != (v & !NEST_MASK) {
                        break;
                    }
                }
            }
            p = r.next.load(Ordering::Acquire);
        }
        // SeqCst (a release): publishes the end of the grace period to poll().
        self.gp_seq.fetch_add(1, Ordering::SeqCst);
        self.stats.grace_periods.fetch_add(1, Ordering::Relaxed);
    }

    fn heavy_barrier(&self, mode: usize) {
        #[cfg(not(loom))]
        if mode == MODE_MEMBARRIER {
            // Also a full barrier on this CPU (the kernel issues smp_mb()
            // around the IPIs).
            if crate::sys::private_expedited() {
                return;
            }
            // Registered membarrier cannot fail; if a seccomp filter makes it,
            // readers run without fences and we cannot fix that from here.
            std::process::abort();
        }
        let _ = mode;
        fence(Ordering::SeqCst);
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
