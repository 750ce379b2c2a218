//! Read-side critical sections: the per-thread reader record and the guard.
//!
//! # Design (the liburcu "memb" flavour, with a per-reader sequence)
//!
//! Every thread that reads owns one [`Reader`] record in its domain's registry.
//! The record holds one word, `ctr`: the low [`NEST_BITS`] bits count how deeply
//! the thread is nested in read sections, the high bits are a sequence number
//! that the thread bumps each time it enters an *outermost* section.
//!
//! Entering is `load ctr; store ctr'` on the thread's own cache line followed by
//! a compiler fence; leaving is `load; store(Release)`. No read-modify-write
//! instruction, no shared cache line: this is what makes the read side cost
//! about as much as two plain memory accesses.
//!
//! A grace period (see `domain.rs`) snapshots every record after a
//! `sys_membarrier` and waits, per record, until the nest count is zero or the
//! sequence moved: either means the section seen in the snapshot has ended.
//! Comparing sequences instead of waiting for "idle" lets a writer finish even
//! if a reader re-enters sections back to back forever.
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
//! writer that reads a *new* sequence also synchronizes with everything the
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
//! as it found them (it may bump the sequence). The interrupted code then
//! stores a value computed from the pre-signal word: the nest count is right,
//! and at worst the sequence repeats the handler's, which only makes a writer
//! wait for one more section. A handler that interrupts an *ending* section
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
/// One step of the outermost-section sequence in `ctr`.
pub(crate) const SEQ_ONE: usize = 1 << NEST_BITS;

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
    /// `SeqCst` fence after entering. Set before the record is handed out.
    pub(crate) heavy: AtomicBool,
    /// Claimed by a thread.
    pub(crate) in_use: AtomicBool,
    /// Next record in the domain's registry (set once before publication).
    pub(crate) next: AtomicPtr<Reader>,
}

impl Reader {
    pub(crate) fn new(heavy: bool) -> Self {
        Self {
            ctr: AtomicUsize::new(0),
            heavy: AtomicBool::new(heavy),
            in_use: AtomicBool::new(true),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Enters a read section. Async-signal-safe.
    #[inline(always)]
    pub(crate) fn enter(&self) {
        // Relaxed: only this thread (or a handler interrupting it, which
        // restores the nest bits before returning) writes `ctr`.
        let v = self.ctr.load(Ordering::Relaxed);
        if v & NEST_MASK == 0 {
            let next = (v & !NEST_MASK).wrapping_add(SEQ_ONE) | 1;
            // Release: see the module note (a writer reading the new sequence
            // must synchronize with the previous section's accesses).
            self.ctr.store(next, Ordering::Release);
            // Relaxed: set once before the record was handed to this thread.
            if self.heavy.load(Ordering::Relaxed) {
                fence(Ordering::SeqCst);
            } else {
                light_fence();
            }
        } else if v & NEST_MASK == NEST_MASK {
            // A million nested sections is unbounded recursion; the counter
            // cannot represent it. abort(3) is async-signal-safe.
            std::process::abort();
        } else {
            // Nested: the outermost entry already published the section.
            self.ctr.store(v + 1, Ordering::Relaxed);
        }
    }

    /// Leaves a read section. Async-signal-safe.
    #[inline(always)]
    pub(crate) fn exit(&self) {
        let v = self.ctr.load(Ordering::Relaxed);
        // Release: orders every load of the section before the store that a
        // writer's Acquire scan reads (module note, "Leaving").
        self.ctr.store(v.wrapping_sub(1), Ordering::Release);
    }

    /// The current nesting depth of the owning thread (call only from it).
    #[inline]
    pub(crate) fn depth(&self) -> usize {
        self.ctr.load(Ordering::Relaxed) & NEST_MASK
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
    /// The thread's TLS was already destroyed and the record was borrowed for
    /// this outermost section only (see `global.rs`).
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
