//! The life cycle of a slot in a fixed table of per-thread sampling state, and the
//! generation that lets a signal handler find its slot without thread-local storage.
//!
//! Owns: a slot's state and generation, and the encoding of both into the perf event's
//! `sig_data`. Must never let a slot be reused while its old owner or the writer may
//! still touch it, and never hand a late signal of an old owner the new owner's slot.
//!
//! # Design
//!
//! The handler finds its slot from the leader's `sig_data` (delivered in
//! `si_perf_data`): `generation << 16 | index`. A slot goes
//!
//! - `FREE -> CLAIMED`: CAS by the thread setting itself up, Acquire on success: the
//!   writer's Release of the slot (after its last reads of the ring) happens before we
//!   reuse it. The claimer then bumps the generation (Relaxed: published below).
//! - `CLAIMED -> ACTIVE`: the owner, Release: a thread that reads ACTIVE with Acquire sees
//!   the ring, the generation and everything else the owner set up.
//! - `ACTIVE -> CLOSING`: the owner, before it closes its events: its own handler (same
//!   thread, program order) ignores the slot from then on.
//! - `CLOSING -> DEAD`: the owner, Release, after its events are closed: the writer that
//!   reads DEAD with Acquire sees the final head and lost count.
//! - `DEAD -> FREE`: the writer, Release, after draining the ring (which stays with the
//!   slot for its next owner).
//!
//! [`SlotCtl::lookup`] loads the state with Acquire. The owner's own handler would do with
//! Relaxed (it runs on the thread that stored ACTIVE), but a *late* signal of an old owner
//! (one that was blocked and is delivered after its thread released the slot) runs on the
//! old owner's thread. That thread's last store to the state was CLOSING or DEAD, so if it
//! reads ACTIVE, a later owner stored it; the Acquire then makes that owner's generation
//! visible, and the generation check fails. With a Relaxed state load the old thread could
//! read the new ACTIVE with its own stale generation and push into the new owner's ring
//! beside the new owner: two producers on a single-producer ring. `tests/loom.rs`
//! (`slot_reuse_by_a_new_owner`) finds that interleaving.

use crate::sync::{AtomicU32, Ordering};

/// Nobody owns the slot.
pub const FREE: u32 = 0;
/// Being set up by its thread.
pub const CLAIMED: u32 = 1;
/// Sampling.
pub const ACTIVE: u32 = 2;
/// Its thread is closing its events; the handler must ignore it.
pub const CLOSING: u32 = 3;
/// Its thread is gone; the writer drains it and marks it FREE.
pub const DEAD: u32 = 4;

/// Slots a `sig_data` can name.
pub const MAX_INDEX: usize = 1 << 16;

/// The top 16 bits of every `sig_data` strobe's sampler sets: a TRAP_PERF signal
/// without them came from an event that is not strobe's (the program's own, say) and is
/// passed on to the program's handler.
pub const SIG_TAG: u64 = 0x57b0 << 48;

/// The `sig_data` naming slot `index` (below [`MAX_INDEX`]) at `generation`: the tag,
/// the generation (32 bits), the index (16 bits).
pub fn sig_data(index: usize, generation: u32) -> u64 {
    SIG_TAG | (u64::from(generation) << 16) | (index as u64 & 0xffff)
}

/// The slot index and generation a `sig_data` names, or `None` when it does not carry
/// strobe's tag.
pub fn decode(sig_data: u64) -> Option<(usize, u32)> {
    (sig_data & (0xffff << 48) == SIG_TAG)
        .then_some(((sig_data & 0xffff) as usize, (sig_data >> 16) as u32))
}

/// A slot's state and generation. See the module note. `repr(C)`: it lives in memory
/// shared by separately built programs.
#[repr(C)]
#[derive(Debug)]
pub struct SlotCtl {
    state: AtomicU32,
    generation: AtomicU32,
}

impl SlotCtl {
    crate::sync::const_fn! {
        /// A FREE slot at generation 0.
        #[allow(clippy::new_without_default)]
        pub fn new() -> SlotCtl {
            SlotCtl { state: AtomicU32::new(FREE), generation: AtomicU32::new(0) }
        }
    }

    /// Claims the slot if it is FREE, returning its new generation.
    pub fn try_claim(&self) -> Option<u32> {
        // Acquire on success: the writer's release of the slot happens before our reuse.
        self.state.compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed).ok()?;
        // Relaxed: only a claimer writes the generation, and the claim is exclusive; the
        // value is published by `activate`'s Release.
        let generation = self.generation.load(Ordering::Relaxed).wrapping_add(1);
        self.generation.store(generation, Ordering::Relaxed);
        Some(generation)
    }

    /// CLAIMED -> ACTIVE (the owner, once its ring and events are set up).
    pub fn activate(&self) {
        // Release: see the module note.
        self.state.store(ACTIVE, Ordering::Release);
    }

    /// CLAIMED -> FREE: the owner gives up a slot it could not set up.
    pub fn abandon(&self) {
        // Release: nothing we did to the slot is seen out of order by the next claimer.
        self.state.store(FREE, Ordering::Release);
    }

    /// ACTIVE -> CLOSING (the owner, before closing its events). Returns false, doing
    /// nothing, when the slot was not ACTIVE.
    pub fn begin_close(&self) -> bool {
        // Relaxed: only the owner moves an ACTIVE slot, and we are the owner.
        if self.state.load(Ordering::Relaxed) != ACTIVE {
            return false;
        }
        self.mark_closing();
        true
    }

    /// Any state -> CLOSING, unconditionally (a forked child discarding its parent's
    /// slots: only the forking thread exists there).
    pub fn mark_closing(&self) {
        // SeqCst: the owner's own handler must see CLOSING before the events go away; a
        // handler on the same thread observes program order, and SeqCst also keeps the
        // compiler from sinking the store past the close calls that follow.
        self.state.store(CLOSING, Ordering::SeqCst);
    }

    /// CLOSING -> DEAD (the writer drains it and frees it), or straight to FREE with
    /// `free_now` when no writer will come for it (records are discarded).
    pub fn finish_close(&self, free_now: bool) {
        // Release: the writer that sees DEAD sees the final head and lost count; the next
        // owner that claims a FREE slot sees everything we did to it.
        self.state.store(if free_now { FREE } else { DEAD }, Ordering::Release);
    }

    /// DEAD -> FREE (the writer, after its last use of the slot's ring).
    pub fn release(&self) {
        // Release: our reads of the ring happen before a new owner's claim (Acquire).
        self.state.store(FREE, Ordering::Release);
    }

    /// The state, for the writer (Acquire: pairs with `activate` and `finish_close`).
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// The state, on the owner's own thread (Relaxed: it stored it).
    pub fn own_state(&self) -> u32 {
        self.state.load(Ordering::Relaxed)
    }

    /// True if the slot is ACTIVE at `generation`: the signal that carried it belongs to
    /// the slot's current owner. Async-signal-safe.
    #[inline]
    pub fn lookup(&self, generation: u32) -> bool {
        // Acquire: see the module note (a late signal of an old owner).
        self.state.load(Ordering::Acquire) == ACTIVE
            // Relaxed: made fresh enough by the Acquire above.
            && self.generation.load(Ordering::Relaxed) == generation
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sig_data_names_slot_and_generation() {
        assert_eq!(decode(sig_data(513, 7)), Some((513, 7)));
        assert_eq!(decode(sig_data(0xffff, u32::MAX)), Some((0xffff, u32::MAX)));
        assert_eq!(decode(513 | (7 << 16)), None, "untagged: another event's");
    }

    #[test]
    fn a_slot_goes_through_its_life_and_a_stale_generation_is_refused() {
        let s = SlotCtl::new();
        let g = s.try_claim().expect("free");
        assert_eq!(s.try_claim(), None, "claimed once");
        assert!(!s.lookup(g), "a claimed slot is not active yet");
        s.activate();
        assert!(s.lookup(g));
        assert!(!s.lookup(g.wrapping_add(1)), "stale generation");
        assert!(s.begin_close());
        assert!(!s.lookup(g), "closing: the handler ignores it");
        s.finish_close(false);
        assert_eq!(s.state(), DEAD);
        assert_eq!(s.try_claim(), None, "the writer has not drained it yet");
        s.release();
        let g2 = s.try_claim().expect("free again");
        assert_ne!(g, g2);
        s.activate();
        assert!(!s.lookup(g) && s.lookup(g2), "the old owner's signals miss the new owner");
        assert!(s.begin_close());
        assert!(!s.begin_close(), "closing twice does nothing");
    }
}
