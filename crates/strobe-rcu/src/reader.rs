//! Read-side critical sections: the per-thread reader record and the guard.
//!
//! # Design (the liburcu "memb" flavour, with epochs)
//!
//! Every thread that reads owns one [`Reader`] record in its domain's registry.
//! The record holds one word, `ctr`. Its low [`NEST_BITS`] bits are the
//! *low field*: the nesting depth of the thread's read sections
//! ([`DEPTH_MASK`]) and the [`HEAVY`] flag (this thread's sections must
//! fence: the fallback scheme, or the owner is offline). The high bits hold
//! the domain's *reader epoch* as the thread read it when it entered its
//! current (or last) *outermost* section. Every grace period advances the
//! epoch before its barrier.
//!
//! Entering an outermost section is `load ctr`, `load epoch`,
//! `store ctr = epoch | 1` on the thread's own cache line followed by a
//! compiler fence; leaving stores `ctr - 1` (`Release`). No read-modify-write
//! instruction, no shared line written. The one branch of the entry is "low
//! field zero": it is false for a nested section *and* for a heavy record, so
//! both go to the same cold path (a nested entry stores `ctr + 1`; a heavy
//! outermost one stores `epoch | HEAVY | 1` and executes a `SeqCst` fence)
//! and the common entry never loads a separate flag.
//!
//! A grace period (see `domain/grace.rs`) advances the epoch, issues a
//! `sys_membarrier`, then looks at every record and waits, per record, until
//! the depth is zero, the epoch is the one it just set, or the word moved
//! from what it first saw: each means the section seen has ended or began
//! after the epoch advanced. Because sections entered after the advance carry
//! the new epoch, a writer finishes even if a reader re-enters sections back
//! to back forever.
//!
//! # Cost
//!
//! The section's latency chain is what bounds a loop of sections: with a
//! per-reader sequence (`ctr' = ctr + SEQ_ONE`, the previous design) each
//! outermost entry stored a value computed from the load of `ctr`, which the
//! CPU forwards from the previous exit's store, which was itself computed from
//! a load forwarded from the entry's store: two store-to-load forwarding hops
//! per section, carried from one section to the next (2.3 ns per section
//! here). The entry now stores a value computed from the epoch, a line no
//! reader writes, so nothing carries from one section to the next except a
//! predicted branch.
//!
//! With the chain gone, what is left is instruction count and taken branches
//! (on this machine a taken branch costs about a cycle, a probe trigger takes
//! about fifteen): the outermost entry under membarrier is straight-line code,
//! and the nested entry, the fallback scheme's fence and the post-exit record
//! release are cold calls out of line. A trigger loop went from 6.0 to 5.1 ns.
//! Keeping `HEAVY` in `ctr` rather than in a flag of its own took a load, a
//! test and a branch off the entry (`global.rs` folds the registration check
//! into the same branch). `strobe bench readside` prints the floor of the
//! scheme beside it (`memb-floor`: these stores on a thread-local word no
//! writer can see); what still separates a global-domain section from it is
//! the load of the thread's record pointer from TLS and, in `read_lock`
//! (not `try_read_lock`), the test for a record borrowed past thread exit
//! when the guard drops.
//!
//! # Epochs
//!
//! A reader that loads the epoch a grace period set (`Acquire`) synchronizes
//! with that grace period's epoch `fetch_add` (a release), and the caller's
//! unpublish happens-before that `fetch_add`: either the caller runs the grace
//! period itself, or its cookie was taken with a `SeqCst` RMW on `gp_seq`
//! ([`Domain::snapshot`](crate::Domain::snapshot)) that the grace period's own
//! RMW on `gp_seq` reads from (a release sequence). So every load of a section
//! stamped with the new epoch sees the unpublish, and the writer may skip it.
//!
//! # Memory ordering
//!
//! *Entering.* The store that makes the section visible and the loads inside
//! the section form a store→load pair, which x86 (and the C++ model) may
//! reorder. The writer's side pays for the fence instead: `membarrier` forces
//! a full barrier on every CPU running one of our threads, so for each reader
//! either the barrier landed before its `ctr` store (then its later loads see
//! everything the writer published before the membarrier) or after it (then
//! the store is visible to the writer's scan, which waits for the section).
//! The compiler fence stops the compiler from doing the reordering itself.
//! Without membarrier the reader executes a real `SeqCst` fence instead
//! (records with [`HEAVY`] set), which gives the same two cases by the fence
//! rules of the memory model. The entering store is `Release` (free on x86) so that a
//! writer that reads a *new* epoch also synchronizes with everything the
//! previous section did (C++20 release sequences no longer extend through
//! later plain stores of the same thread).
//!
//! *Leaving.* The `Release` store of the decremented counter orders every load
//! of the section before it; the writer's `Acquire` load that reads it (or a
//! later value) therefore happens-after those loads, and freeing afterwards
//! cannot be observed by them.
//!
//! # Signals
//!
//! The update is a load and a store on the thread's own word, not an atomic
//! RMW, yet it is *signal-atomic*: a handler that interrupts between the load
//! and the store runs whole read sections, so it leaves the low field exactly
//! as it found it (it may stamp a newer epoch). The interrupted code then
//! stores a value computed from the pre-signal word (and an epoch it may have
//! loaded before the handler ran): the depth is right, and at worst the
//! epoch goes back to an older one, which only makes a writer wait for one
//! more section (`domain/grace.rs`, "Polling", for why the section is still safe). A handler that interrupts an *ending* section
//! before its store sees itself nested inside it, which is also right: the
//! outer section has not ended yet. `HEAVY` changes only in normal context
//! outside sections ([`Reader::offline`], [`Reader::online`]), and a handler's
//! sections leave it as they found it.
//!
//! Must never: allocate, lock, or make a system call on the enter/leave path.

use std::marker::PhantomData;

use crate::primitive::{fence, light_fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Bits of `ctr` below the epoch: the nesting depth and the flags.
pub(crate) const NEST_BITS: u32 = 20;
/// Mask of the low field of `ctr` (depth and flags): an entry takes the fast
/// path only when all of it is zero.
pub(crate) const NEST_MASK: usize = (1 << NEST_BITS) - 1;
/// Flag in `ctr`: outermost entries of this record execute a `SeqCst` fence
/// after their store (the fallback scheme, or the owner is offline).
pub(crate) const HEAVY: usize = 1 << (NEST_BITS - 1);
/// Mask of the nesting depth in `ctr` (about half a million levels).
pub(crate) const DEPTH_MASK: usize = HEAVY - 1;
/// One step of the domain's reader epoch (the high bits of `ctr`).
pub(crate) const SEQ_ONE: usize = 1 << NEST_BITS;
/// `ctr` of a thread that is *offline*: blocked in a grace-period wait,
/// outside any section, its sections fencing themselves. Grace periods treat
/// it as quiescent. Epochs never get this high (2^44 grace periods).
pub(crate) const OFFLINE: usize = !NEST_MASK | HEAVY;

/// One reader thread's record. Records are never freed while their domain
/// lives; a thread that exits releases its record for reuse.
///
/// Aligned to 128 bytes so two readers never share a cache line (or the
/// adjacent-line prefetch pair), which is what lets the read side scale.
#[repr(align(128))]
pub(crate) struct Reader {
    /// Nesting depth and flags (low bits) and outermost-section epoch (high
    /// bits). Written only by the owning thread (and its signal handlers),
    /// and by the claimer of a free record before it uses it.
    pub(crate) ctr: AtomicUsize,
    /// The flags `ctr` carries while the owner is online: [`HEAVY`] when the
    /// writer side has no membarrier, else zero. Set when the record is
    /// claimed; owner only.
    pub(crate) base: AtomicUsize,
    /// The owner is offline; owner only.
    pub(crate) is_offline: AtomicBool,
    /// Claimed by a thread.
    pub(crate) in_use: AtomicBool,
    /// Next record in the domain's registry (set once before publication).
    pub(crate) next: AtomicPtr<Reader>,
    /// The domain's reader epoch (`Domain::reader_epoch`): outermost entries
    /// copy it into `ctr`. Set once at creation; domains are never freed.
    pub(crate) epoch: *const AtomicUsize,
}

impl Reader {
    pub(crate) fn new(base: usize, epoch: *const AtomicUsize) -> Self {
        Self {
            ctr: AtomicUsize::new(base),
            base: AtomicUsize::new(base),
            is_offline: AtomicBool::new(false),
            in_use: AtomicBool::new(true),
            next: AtomicPtr::new(std::ptr::null_mut()),
            epoch,
        }
    }

    /// A record no thread owns, for the global domain's thread-local cell to
    /// point at instead of null (`global.rs`): its `ctr` shows depth zero
    /// with [`HEAVY`] set, so an entry reading it leaves the common path,
    /// and nothing ever writes it.
    #[cfg(not(loom))]
    pub(crate) const fn sentinel() -> Self {
        Self {
            ctr: AtomicUsize::new(HEAVY),
            base: AtomicUsize::new(HEAVY),
            is_offline: AtomicBool::new(false),
            in_use: AtomicBool::new(false),
            next: AtomicPtr::new(std::ptr::null_mut()),
            epoch: std::ptr::null(),
        }
    }

    /// Enters a read section. Async-signal-safe.
    #[inline(always)]
    pub(crate) fn enter(&self) {
        // SAFETY: `epoch` points into the domain, which is never freed.
        self.enter_in(unsafe { &*self.epoch })
    }

    /// [`enter`](Self::enter) given this record's domain epoch word (the
    /// global domain's is at a fixed address: one load fewer).
    #[inline(always)]
    pub(crate) fn enter_in(&self, epoch: &AtomicUsize) {
        // Relaxed: only this thread (or a handler interrupting it, which
        // restores the low field before returning) writes `ctr`.
        let v = self.ctr.load(Ordering::Relaxed);
        if v & NEST_MASK == 0 {
            self.enter_light(epoch);
        } else {
            self.enter_slow(v, epoch);
        }
    }

    /// The common entry: outermost, under membarrier. Only for a `ctr` whose
    /// low field (depth and flags) the caller just read as zero.
    #[inline(always)]
    pub(crate) fn enter_light(&self, epoch: &AtomicUsize) {
        // The stored value comes from the domain's epoch, not from `ctr`:
        // the load of `ctr` only steers the (predicted) branch, so
        // back-to-back sections form no load->store->load chain through
        // `ctr` (module note, "Cost").
        // Acquire: pairs with the grace period's RMW that set the epoch
        // (module note, "Epochs").
        let e = epoch.load(Ordering::Acquire);
        // Release: see the module note (a writer reading the new value
        // must synchronize with the previous section's accesses). The low
        // field was zero, so `| 1` is depth one with no flag.
        self.ctr.store(e | 1, Ordering::Release);
        light_fence();
    }

    /// Every other entry, out of line so that the common one falls through
    /// (a taken branch costs about as much as the whole entry here): a
    /// nested section, an outermost one on a [`HEAVY`] record, or the abort
    /// on overflow. `v` is `ctr` as the caller read it (low field non-zero).
    #[cold]
    #[inline(never)]
    pub(crate) fn enter_slow(&self, v: usize, epoch: &AtomicUsize) {
        let depth = v & DEPTH_MASK;
        if depth == DEPTH_MASK {
            // Half a million nested sections is unbounded recursion; the
            // counter cannot represent it. abort(3) is async-signal-safe.
            std::process::abort();
        }
        if depth != 0 {
            // Relaxed: as the load in `enter_in`. Nested: the outermost entry
            // already published the section. Depth below the mask: `+ 1`
            // stays in the depth bits and keeps the flags.
            self.ctr.store(v + 1, Ordering::Relaxed);
            return;
        }
        // Outermost on a heavy record. Acquire and Release as in
        // `enter_light`; the flags are kept (the epoch has no low bits).
        let e = epoch.load(Ordering::Acquire);
        self.ctr.store(e | (v & NEST_MASK) | 1, Ordering::Release);
        // The fallback scheme's fence (module note, "Memory ordering"):
        // after the store, before the section's loads, which the caller
        // issues after we return.
        fence(Ordering::SeqCst);
    }

    /// Leaves a read section. Async-signal-safe.
    #[inline(always)]
    pub(crate) fn exit(&self) {
        let v = self.ctr.load(Ordering::Relaxed);
        // Release: orders every load of the section before the store that a
        // writer's Acquire scan reads (module note, "Leaving").
        self.ctr.store(v.wrapping_sub(1), Ordering::Release);
    }

    /// Reports a quiescent state: outside any section, stamps `ctr` with the
    /// current epoch so that a polling grace period sees this thread as
    /// done without waiting for its next section. Owner only, outside
    /// sections (a no-op inside one). Async-signal-safe.
    #[inline]
    pub(crate) fn quiesce(&self) {
        let v = self.ctr.load(Ordering::Relaxed);
        if v & DEPTH_MASK == 0 {
            // SAFETY: as in `enter`. Acquire/Release: as in `enter`; a store
            // carrying the new epoch comes after this thread read it, so
            // its later sections see what preceded the epoch advance, and
            // its earlier ones have ended. The flags are kept.
            let e = unsafe { (*self.epoch).load(Ordering::Acquire) };
            self.ctr.store((e & !NEST_MASK) | (v & NEST_MASK), Ordering::Release);
        }
    }

    /// Goes offline (owner only, outside sections): grace periods stop
    /// waiting for this thread until [`online`](Self::online). For a thread
    /// about to block waiting for a grace period that another thread runs.
    /// Meanwhile a section entered by a signal handler fences itself (the
    /// fallback scheme), because a grace period may have skipped us.
    #[inline]
    pub(crate) fn offline(&self) {
        if self.ctr.load(Ordering::Relaxed) & DEPTH_MASK != 0 {
            return;
        }
        // Relaxed: read and written by this thread only.
        self.is_offline.store(true, Ordering::Relaxed);
        // Release: the sections before it have ended (as an exit). One store
        // shows `OFFLINE` and raises `HEAVY` together: a handler's section
        // either runs before it (an ordinary section, which grace periods
        // handle as usual) or after it (it fences itself).
        self.ctr.store(OFFLINE, Ordering::Release);
    }

    /// Comes back online after [`offline`](Self::offline).
    ///
    /// A grace period that read `OFFLINE` skipped this thread. The pattern is
    /// store buffering with a `SeqCst` fence on each side: we store a value
    /// that is not `OFFLINE` then fence; the grace period advances the epoch,
    /// fences, then reads `ctr`. If it read `OFFLINE`, our fence follows its
    /// fence in the `SeqCst` order and every later load of ours sees what
    /// preceded its fence (the unpublish). Until our fence, sections (of
    /// signal handlers) still fence themselves: the value stored before it
    /// keeps `HEAVY` (a store that cleared it first would let a handler's
    /// section run unfenced while a grace period that read `OFFLINE` skips
    /// us), and only a second store, after the fence, restores the record's
    /// own flags.
    #[inline]
    pub(crate) fn online(&self) {
        if !self.is_offline.load(Ordering::Relaxed) {
            return;
        }
        // Relaxed: only the fence below orders it (see above); epoch zero
        // proves nothing to a grace period. A handler's sections since
        // `offline` left the depth at zero.
        self.ctr.store(HEAVY, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.is_offline.store(false, Ordering::Relaxed);
        // Relaxed loads: this thread's own words. A handler between the load
        // and the store runs whole sections (depth back to zero, flags
        // untouched); storing its older epoch only makes a writer wait
        // longer. Release: a handler's section may have stamped the current
        // epoch, and a grace period that reads this store as proof must
        // synchronize with that section's end (as `quiesce`).
        let v = self.ctr.load(Ordering::Relaxed);
        let flags = self.base.load(Ordering::Relaxed);
        self.ctr.store((v & !NEST_MASK) | flags, Ordering::Release);
    }

    /// The current nesting depth of the owning thread (call only from it).
    #[inline]
    pub(crate) fn depth(&self) -> usize {
        self.ctr.load(Ordering::Relaxed) & DEPTH_MASK
    }
}

/// Proof that the current thread is inside a read-side critical section.
///
/// While a `ReadGuard` lives, nothing reachable through an RCU-protected
/// pointer loaded under it is freed. Dropping it leaves the section. Guards
/// nest (each [`read_lock`](crate::read_lock) inside another is cheap), are
/// `!Send` and `!Sync` (a section belongs to the thread that entered it), and
/// references loaded under a guard borrow it, so they cannot escape it.
///
/// Inside a section never call [`synchronize`](crate::synchronize) or
/// [`barrier`](crate::barrier): they wait for the section itself and would
/// deadlock (they panic instead when they can tell).
#[must_use = "the read section ends when the guard is dropped"]
pub struct ReadGuard<'h> {
    pub(crate) reader: *const Reader,
    /// What dropping the guard does after leaving the section, if anything: give
    /// back a record borrowed for this section because the thread's TLS was
    /// already destroyed (`global.rs` sets it; `None` on every other guard, and
    /// where it is `None` as a constant the drop is the exit store alone).
    pub(crate) on_exit: Option<fn(*const Reader)>,
    pub(crate) _not_send: PhantomData<(*mut (), &'h ())>,
}

impl ReadGuard<'_> {
    /// The nesting depth of the current thread including this guard.
    pub fn depth(&self) -> usize {
        // SAFETY: the guard keeps the record claimed by this thread.
        unsafe { (*self.reader).depth() }
    }
}

impl Drop for ReadGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the record stays claimed by this thread at least as long as
        // the guard: handles outlive their guards ('h), and the thread-local
        // record is released only at thread exit, when no guard can be alive
        // on the thread's stack.
        let r = unsafe { &*self.reader };
        r.exit();
        if let Some(f) = self.on_exit {
            f(self.reader);
        }
    }
}

impl std::fmt::Debug for ReadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadGuard").field("depth", &self.depth()).finish()
    }
}
