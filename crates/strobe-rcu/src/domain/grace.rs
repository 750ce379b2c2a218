//! Grace periods of a domain: waiting until every read section that began before a
//! point has ended, sharing the wait between concurrent callers, and paying the
//! membarrier only when polling the reader records cannot prove it unnecessary.
//!
//! `gp_seq` counts grace-period boundaries: odd while one runs, even when
//! idle. A caller that has unpublished something takes a *cookie*
//! ([`Domain::snapshot`]): a `SeqCst` fence and RMW reading `gp_seq`, then
//! `(gp_seq + 3) & !1`, the value `gp_seq` reaches at the end of the first
//! grace period that *starts* after the RMW (if one is running now, it may
//! have scanned the readers before our unpublish, so the one after it). [`Domain::wait_for`] returns once `gp_seq`
//! has reached the cookie, running grace periods under `gp_lock` if nobody else
//! does. Concurrent callers therefore share grace periods: whoever holds the
//! lock advances `gp_seq` for everyone, and the others find their cookie
//! already reached when they get the lock (N concurrent `synchronize` calls
//! cost at most two grace periods, not N).
//!
//! One grace period is: `gp_seq += 1`, advance the reader epoch
//! (`reader.rs`), a `SeqCst` fence, *poll* the registry until every other
//! claimed record shows the new epoch (or is offline); only if some record
//! stays stale past a short patience, one membarrier (or `SeqCst` fence in
//! the fallback) and the classic scan of the stale records; `gp_seq += 1`.
//! The membarrier is the only expensive step (about 10 us here while the
//! other vCPU runs); busy readers make it unnecessary, and callers amortise
//! it by retiring in batches of thousands of objects per cookie.
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
//! *Lone writers.* The membarrier exists to reach readers on other CPUs. A
//! grace period run by the owner of record `me` (outside its sections) that
//! finds no *other* record claimed skips it: after its epoch advance it
//! executes a `SeqCst` fence and walks the registry; a thread that claims a
//! record (or publishes a new one) executes a `SeqCst` fence after the claim
//! and before its first section. This is the store-buffering pattern with a
//! fence on each side: either the walk sees the claim (and the grace period
//! pays the membarrier) or the claimer's fence follows ours in the `SeqCst`
//! order, so its sections' loads see everything before our fence, including
//! the unpublish. A record released (not claimed) has no section running. A
//! single-threaded retirer thus completes a grace period for the cost of a
//! few RMWs and a fence, and can free a batch while it is still in cache.
//!
//! *Polling.* A record is *proven* for the grace period with epoch `E` when
//! the walk (after the fence that follows the epoch advance) reads, with
//! `Acquire`:
//! - `in_use` false: nobody owns it; a later claim is covered as above;
//! - `ctr` carrying `E` (any depth): the owner stored it after loading
//!   `E` with `Acquire`, which synchronizes with the advance (a release RMW)
//!   that the unpublish happens-before (`reader.rs`, "Epochs"), so the
//!   section that carries `E` and every later one see the unpublish; and the
//!   `Release` store means every earlier section of that thread has ended.
//!   Nested entries and exits keep the epoch, and an outermost entry always
//!   loads the epoch afresh, so the word never carries `E` on behalf of a
//!   section that began before the advance. A signal handler that runs a
//!   whole section between the interrupted entry's epoch load and its store
//!   can make the word show `E` briefly while the interrupted entry then
//!   stores the older epoch: its section's loads still come after the
//!   handler's `Acquire` load of `E` on the same CPU, so they see the
//!   unpublish too;
//! - `ctr == OFFLINE`: the owner is blocked in a grace-period wait, outside
//!   sections; the `Release` store of `OFFLINE` ends its earlier sections,
//!   its handlers' sections fence themselves while it is offline, and it
//!   fences after coming back (`Reader::online`, the same store-buffering
//!   pair as a claim).
//!
//! A proven record stays proven for the rest of the grace period, so after
//! the barrier the scan starts at the first record still stale. The scan
//! waits while a record shows a non-zero depth with an epoch other
//! than `E` and the same word it first read; the epoch changes only at an
//! outermost entry, so a changed word means the section seen has ended.
//! An entry that loaded the old epoch again stores the same word (an ABA
//! the old per-reader sequence did not have): that only makes the scan wait
//! longer, and it cannot last, since an entry whose epoch load follows the
//! barrier loads `E`.
//!
//! The caller's own record (`me`, passed by retiring threads and by the
//! global `synchronize`) is skipped: its owner is running this code, outside
//! its sections, and a handler section on its thread runs after the
//! unpublish in program order.
//!
//! Must never: be entered from a read section (it waits for the caller's own
//! section), or be called from a signal handler (it locks and sleeps).

use std::ptr;

use super::Domain;
#[cfg(not(loom))]
use super::MODE_MEMBARRIER;
use crate::primitive::{backoff, fence, lock, Ordering};
use crate::reader::{Reader, DEPTH_MASK, NEST_MASK, OFFLINE, SEQ_ONE};

/// How long a grace period polls for readers to show the new epoch before it
/// pays a barrier: about one expedited membarrier's worth (~10 us here).
#[cfg(not(loom))]
const EXPEDITED_PATIENCE: std::time::Duration = std::time::Duration::from_micros(3);

/// A grace period faster than this is "cheap": retiring threads then run
/// their own right away on small batches (`handle.rs`). A membarrier that
/// reaches no running reader (the other threads are off CPU) is this cheap
/// too; one that interrupts a running reader (~10 us here) is not.
#[cfg(not(loom))]
const CHEAP_GP: std::time::Duration = std::time::Duration::from_micros(8);

/// How long [`Domain::synchronize_lazy`] waits for silent readers before the
/// non-expedited barrier.
pub const LAZY_PATIENCE: std::time::Duration = std::time::Duration::from_millis(20);

#[derive(Clone, Copy, PartialEq, Eq)]
enum GpKind {
    Expedited,
    Lazy,
}

/// The polling budget of one grace period.
struct Patience {
    // Loom models give up after a few rounds whatever the kind.
    #[cfg_attr(loom, allow(dead_code))]
    kind: GpKind,
    step: u32,
    #[cfg(not(loom))]
    start: Option<std::time::Instant>,
}

impl Patience {
    fn new(kind: GpKind) -> Self {
        Self {
            kind,
            step: 0,
            #[cfg(not(loom))]
            start: None,
        }
    }

    /// One polling step (spin, then sleep for lazy ones); true once the
    /// budget is spent.
    fn exhausted(&mut self) -> bool {
        self.step = self.step.saturating_add(1);
        #[cfg(loom)]
        {
            // Loom explores the barrier-free outcome and the barrier path:
            // give up after a few rounds.
            loom::thread::yield_now();
            self.step > 3
        }
        #[cfg(not(loom))]
        {
            let (budget, sleep) = match self.kind {
                GpKind::Expedited => (EXPEDITED_PATIENCE, false),
                GpKind::Lazy => (LAZY_PATIENCE, self.step > 64),
            };
            // The clock only every 16 steps: reading it costs as much as a
            // poll of the registry.
            if self.step % 16 == 1 {
                let start = *self.start.get_or_insert_with(std::time::Instant::now);
                if start.elapsed() >= budget {
                    return true;
                }
            }
            if sleep {
                let us = 1u64 << (self.step - 64).min(10);
                std::thread::sleep(std::time::Duration::from_micros(us));
            } else {
                std::hint::spin_loop();
            }
            false
        }
    }
}

impl Domain {
    /// A cookie for "a full grace period after now" (see the module note).
    pub fn snapshot(&self) -> u64 {
        // An RMW rather than a plain load: being a release, it heads a
        // release sequence that the grace period's own `fetch_add` reads
        // from, so the unpublish happens-before that grace period's epoch
        // advance (the "Epochs" note in `reader.rs`).
        // The fence as well: it is what pairs, store-buffering style, with a
        // reader's fence (or the membarrier) when another thread runs the
        // barrier; an RMW on `gp_seq` alone orders nothing for other
        // locations in the language's model.
        fence(Ordering::SeqCst);
        let s = self.gp_seq.fetch_add(0, Ordering::SeqCst);
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
        self.wait_for_as(cookie, ptr::null());
    }

    /// [`wait_for`](Self::wait_for) on behalf of the thread that owns reader
    /// record `me` (null if unknown), which must be outside any section: a
    /// grace period finding no other record in use then skips the membarrier.
    pub(crate) fn wait_for_as(&self, cookie: u64, me: *const Reader) {
        self.wait_for_kind(cookie, me, GpKind::Expedited);
    }

    fn wait_for_kind(&self, cookie: u64, me: *const Reader, kind: GpKind) {
        if self.poll(cookie) {
            return;
        }
        // Offline while we wait (perhaps blocked on the lock): whoever runs
        // the grace period need not wait for us or interrupt us.
        // SAFETY: `me` is the caller's claimed record, outside sections
        // (contract).
        let me_ref = unsafe { me.as_ref() };
        if let Some(r) = me_ref {
            r.offline();
        }
        {
            let _g = lock(&self.gp_lock);
            while !self.poll(cookie) {
                self.run_grace_period(me, kind);
            }
        }
        if let Some(r) = me_ref {
            r.online();
        }
    }

    /// Waits for a grace period like [`synchronize`](Self::synchronize) but
    /// never interrupts a reader's CPU: it waits, sleeping, for every reader
    /// thread to enter a section (or finish one) after the grace period
    /// began, and only for threads that stay silent for [`LAZY_PATIENCE`]
    /// issues the kernel's non-expedited `MEMBARRIER_CMD_GLOBAL`, which waits
    /// for a kernel RCU grace period instead of sending IPIs. Takes from
    /// microseconds (busy readers) to tens of milliseconds (idle ones).
    /// Shares grace periods with concurrent callers of either kind: a
    /// `synchronize` (or a retiring thread) that arrives while a lazy grace
    /// period runs waits for it, so keep lazy ones off paths whose peers
    /// need grace periods fast. Must not be called inside a read section.
    pub fn synchronize_lazy(&self) {
        self.wait_for_kind(self.snapshot(), ptr::null(), GpKind::Lazy);
    }

    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn synchronize_lazy_as(&self, me: *const Reader) {
        self.wait_for_kind(self.snapshot(), me, GpKind::Lazy);
    }

    /// The first record at or after `p` (in registry order) that another
    /// thread has claimed and whose `ctr` does not yet carry `epoch`; null if
    /// none. Such a record may hold a section the grace period must wait for;
    /// every other record is proven safe without a barrier ("Polling" in the
    /// module note).
    fn first_stale(&self, mut p: *mut Reader, me: *const Reader, epoch: usize) -> *mut Reader {
        while !p.is_null() {
            // SAFETY: registry records are never freed while the domain lives.
            let r = unsafe { &*p };
            // Acquire `in_use`: pairs with the Release in `release_reader`,
            // so the sections of a thread that released the record have
            // finished their loads; against a concurrent claim the fences on
            // both sides order it ("Lone writers"). Acquire `ctr`: pairs with
            // the reader's Release stores, so the sections before the store
            // we read have finished their loads.
            if !ptr::eq(p, me) && r.in_use.load(Ordering::Acquire) {
                let v = r.ctr.load(Ordering::Acquire);
                if v & !NEST_MASK != epoch && v != OFFLINE {
                    return p;
                }
            }
            p = r.next.load(Ordering::Acquire);
        }
        ptr::null_mut()
    }

    /// True when some reader record other than `me` is claimed: only then
    /// can a read section run concurrently with the caller.
    pub(crate) fn others_reading(&self, me: *const Reader) -> bool {
        // An epoch no record can carry (the low bits are the depth and flags).
        !self.first_stale(self.readers.load(Ordering::Acquire), me, 1).is_null()
    }

    /// Waits for a grace period: every read section that began before this
    /// call has ended when it returns. Shares grace periods with concurrent
    /// callers. Must not be called inside a read section.
    pub fn synchronize(&self) {
        self.wait_for(self.snapshot());
    }

    /// One grace period. Caller holds `gp_lock`; `me` as in `wait_for_as`.
    fn run_grace_period(&self, me: *const Reader, kind: GpKind) {
        #[cfg(not(loom))]
        let t0 = std::time::Instant::now();
        let mode = self.ensure_mode();
        // SeqCst: starts the grace period; ordered before the barrier below.
        self.gp_seq.fetch_add(1, Ordering::SeqCst);
        // SeqCst (a release): sections that load this epoch see everything
        // that happened before it (`reader.rs`, "Epochs").
        let epoch = self.reader_epoch.0.fetch_add(SEQ_ONE, Ordering::SeqCst).wrapping_add(SEQ_ONE);
        // SeqCst fence: orders the epoch advance (and the caller's unpublish)
        // before the registry walks, pairing with the claimers' fence.
        fence(Ordering::SeqCst);
        // Polling: wait for every other claimed record to carry the new epoch.
        let head = self.readers.load(Ordering::Acquire);
        let mut stale = self.first_stale(head, me, epoch);
        if stale.is_null() && !self.others_reading(me) {
            self.stats.lone_grace_periods.fetch_add(1, Ordering::Relaxed);
        }
        let mut waited = Patience::new(kind);
        while !stale.is_null() {
            if waited.exhausted() {
                break;
            }
            stale = self.first_stale(stale, me, epoch);
        }
        if stale.is_null() {
            // Every section that could hold what was unpublished has ended:
            // no barrier, no scan.
            self.stats.polled_grace_periods.fetch_add(1, Ordering::Relaxed);
        } else {
            match kind {
                GpKind::Expedited => self.heavy_barrier(mode),
                GpKind::Lazy => self.lazy_barrier(mode),
            }
            self.scan_after_barrier(stale, epoch);
        }
        #[cfg(not(loom))]
        let cheap = stale.is_null() || t0.elapsed() < CHEAP_GP;
        #[cfg(loom)]
        let cheap = stale.is_null();
        // Relaxed: a hint for choosing how to run the next grace period.
        self.gp_was_cheap.store(cheap, Ordering::Relaxed);
        // SeqCst (a release): publishes the end of the grace period to poll().
        self.gp_seq.fetch_add(1, Ordering::SeqCst);
        self.stats.grace_periods.fetch_add(1, Ordering::Relaxed);
    }

    /// The classic memb-flavour scan, after a barrier, from record `p` on.
    fn scan_after_barrier(&self, mut p: *mut Reader, epoch: usize) {
        while !p.is_null() {
            // SAFETY: registry records are never freed while the domain lives.
            let r = unsafe { &*p };
            // Acquire: pairs with the reader's Release exit (and entry), so a
            // reader seen outside its section has finished its loads.
            let v = r.ctr.load(Ordering::Acquire);
            if v & DEPTH_MASK != 0 && v & !NEST_MASK != epoch {
                let mut step = 0;
                loop {
                    backoff(&mut step);
                    let w = r.ctr.load(Ordering::Acquire);
                    if w & DEPTH_MASK == 0 || (w & !NEST_MASK) != (v & !NEST_MASK) {
                        break;
                    }
                }
            }
            p = r.next.load(Ordering::Acquire);
        }
    }

    /// The barrier of a lazy grace period: `MEMBARRIER_CMD_GLOBAL` (a kernel
    /// RCU grace period, no IPIs) when available, else the expedited one.
    fn lazy_barrier(&self, mode: usize) {
        #[cfg(not(loom))]
        if mode == MODE_MEMBARRIER && crate::sys::global() {
            return;
        }
        self.heavy_barrier(mode);
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
}
