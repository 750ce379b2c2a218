//! Read-side critical sections: the per-thread reader record and the guard.
//!
//! # Design (the liburcu "memb" flavour, with epochs)
//!
//! Every thread that reads owns one [`Reader`] record in its domain's registry.
//! The record holds one word, `ctr`: the low [`NEST_BITS`] bits count how deeply
//! the thread is nested in read sections, the high bits hold the domain's
//! *reader epoch* as the thread read it when it entered its current (or last)
//! *outermost* section. Every grace period advances the epoch before its
//! barrier.
//!
//! Entering an outermost section is `load ctr` (for the branch), `load epoch`,
//! `store ctr = epoch | 1` on the thread's own cache line followed by a
//! compiler fence; a nested one stores `ctr + 1`; leaving stores `ctr - 1`
//! (`Release`). No read-modify-write instruction, no shared line written.
//!
//! A grace period (see `domain.rs`) advances the epoch, issues a
//! `sys_membarrier`, then looks at every record and waits, per record, until
//! the nest count is zero, the epoch is the one it just set, or the word moved
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
//! ([`Reader::heavy`]), which gives the same two cases by the fence rules of
//! the memory model. The entering store is `Release` (free on x86) so that a
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
//! and the store runs whole read sections, so it leaves the nest bits exactly
//! as it found them (it may stamp a newer epoch). The interrupted code then
//! stores a value computed from the pre-signal word (and an epoch it may have
//! loaded before the handler ran): the nest count is right, and at worst the
//! epoch goes back to an older one, which only makes a writer wait for one
//! more section (`domain.rs`, "Polling", for why the section is still safe). A handler that interrupts an *ending* section
//! before its store sees itself nested inside it, which is also right: the
//! outer section has not ended yet.
//!
//! Must never: allocate, lock, or make a system call on the enter/leave path.

use std::marker::PhantomData;

use crate::primitive::{fence, light_fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Bits of `ctr` holding the nesting depth (about a million levels).
pub(crate) const NEST_BITS: u32 = 20;
/// Mask of the nesting depth in `ctr`.
pub(crate) const NEST_MASK: usize = (1 << NEST_BITS) - 1;
/// One step of the domain's reader epoch (the high bits of `ctr`).
pub(crate) const SEQ_ONE: usize = 1 << NEST_BITS;
/// `ctr` of a thread that is *offline*: blocked in a grace-period wait,
/// outside any section. Grace periods treat it as quiescent. Epochs never
/// get this high (2^44 grace periods).
pub(crate) const OFFLINE: usize = !NEST_MASK;

/// One reader thread's record. Records are never freed while their domain
/// lives; a thread that exits releases its record for reuse.
///
/// Aligned to 128 bytes so two readers never share a cache line (or the
/// adjacent-line prefetch pair), which is what lets the read side scale.
#[repr(align(128))]
pub(crate) struct Reader {
    /// Nesting depth (low bits) and outermost-section sequence (high bits).
    /// Written only by the owning thread (and its signal handlers).
    pub(crate) ctr: AtomicUsize,
    /// True when the writer side has no membarrier: the reader then executes a
    /// `SeqCst` fence after entering. Set when the record is claimed, and
    /// raised while the owner is offline (see [`Reader::offline`]).
    pub(crate) heavy: AtomicBool,
    /// `heavy` as it was before the owner went offline; owner only.
    pub(crate) heavy_saved: AtomicBool,
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
    pub(crate) fn new(heavy: bool, epoch: *const AtomicUsize) -> Self {
        Self {
            ctr: AtomicUsize::new(0),
            heavy: AtomicBool::new(heavy),
            heavy_saved: AtomicBool::new(heavy),
            is_offline: AtomicBool::new(false),
            in_use: AtomicBool::new(true),
            next: AtomicPtr::new(std::ptr::null_mut()),
            epoch,
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
        // restores the nest bits before returning) writes `ctr`.
        let v = self.ctr.load(Ordering::Relaxed);
        if v & NEST_MASK == 0 {
            // The stored value comes from the domain's epoch, not from `v`:
            // `v` only steers the (predicted) branch, so back-to-back sections
            // form no load->store->load chain through `ctr` (module note,
            // "Cost").
            // Acquire: pairs with the grace period's RMW that set the epoch
            // (module note, "Epochs").
            let e = epoch.load(Ordering::Acquire);
            // Release: see the module note (a writer reading the new value
            // must synchronize with the previous section's accesses).
            self.ctr.store(e | 1, Ordering::Release);
            // Relaxed: written only by this thread (set when the record is
            // claimed, and raised while the thread is offline).
            if self.heavy.load(Ordering::Relaxed) {
                // Out of line, so the membarrier scheme's entry falls through
                // (see `heavy_fence`). The fence orders the same accesses
                // wherever it executes: after the store above, before the
                // section's loads, which the caller issues after we return.
                heavy_fence();
            } else {
                light_fence();
            }
        } else {
            self.enter_nested(v);
        }
    }

    /// A nested entry (or the abort on overflow), out of line: the outermost
    /// entry is the hot case and falls through (see `heavy_fence`).
    #[cold]
    #[inline(never)]
    fn enter_nested(&self, v: usize) {
        if v & NEST_MASK == NEST_MASK {
            // A million nested sections is unbounded recursion; the counter
            // cannot represent it. abort(3) is async-signal-safe.
            std::process::abort();
        }
        // Relaxed: as the load in `enter_in`. Nested: the outermost entry
        // already published the section.
        self.ctr.store(v + 1, Ordering::Relaxed);
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
        if v & NEST_MASK == 0 {
            // SAFETY: as in `enter`. Acquire/Release: as in `enter`; a store
            // carrying the new epoch comes after this thread read it, so
            // its later sections see what preceded the epoch advance, and
            // its earlier ones have ended.
            let e = unsafe { (*self.epoch).load(Ordering::Acquire) };
            self.ctr.store(e & !NEST_MASK, Ordering::Release);
        }
    }

    /// Goes offline (owner only, outside sections): grace periods stop
    /// waiting for this thread until [`online`](Self::online). For a thread
    /// about to block waiting for a grace period that another thread runs.
    /// Meanwhile a section entered by a signal handler fences itself (the
    /// fallback scheme), because a grace period may have skipped us.
    #[inline]
    pub(crate) fn offline(&self) {
        if self.ctr.load(Ordering::Relaxed) & NEST_MASK != 0 {
            return;
        }
        // Relaxed (all three flags): read and written by this thread only.
        self.heavy_saved.store(self.heavy.load(Ordering::Relaxed), Ordering::Relaxed);
        self.heavy.store(true, Ordering::Relaxed);
        self.is_offline.store(true, Ordering::Relaxed);
        // Keep the compiler from sinking the flag below the store: a handler
        // must see `heavy` before a grace period can see `OFFLINE`.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        // Release: the sections before it have ended (as an exit).
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
    /// signal handlers) still fence themselves.
    #[inline]
    pub(crate) fn online(&self) {
        if !self.is_offline.load(Ordering::Relaxed) {
            return;
        }
        // Relaxed: only the fence below orders it (see above). A handler's
        // sections since `offline` left the nest count at zero.
        self.ctr.store(0, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.is_offline.store(false, Ordering::Relaxed);
        self.heavy.store(self.heavy_saved.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The current nesting depth of the owning thread (call only from it).
    #[inline]
    pub(crate) fn depth(&self) -> usize {
        self.ctr.load(Ordering::Relaxed) & NEST_MASK
    }
}

/// The `SeqCst` fence a reader of the fallback scheme (or one whose owner is
/// offline) executes after publishing its section (module note, "Memory
/// ordering"). Cold and out of line, so that the common entry, under
/// membarrier, is straight-line code: a taken branch costs about as much as
/// the whole entry here.
#[cold]
#[inline(never)]
fn heavy_fence() {
    fence(Ordering::SeqCst);
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
    /// The thread's TLS was already destroyed and the record was borrowed for
    /// this outermost section only (see `global.rs`).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) transient: bool,
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
        #[cfg(not(loom))]
        if self.transient {
            crate::global::release_transient(self.reader);
        }
    }
}

impl std::fmt::Debug for ReadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadGuard").field("depth", &self.depth()).finish()
    }
}
