//! The fixed-size table of per-thread sampling state.
//!
//! Owns: the table (a static, reachable from the signal handler with no allocation) and
//! the agent's per-thread fields around the structures of `strobe_sampler`: each slot's
//! life cycle and generation ([`SlotCtl`]), its single-producer single-consumer sample
//! ring ([`SampleRing`]) and its period alternation ([`AltCell`]). The protocols and
//! their memory-ordering arguments live with those types (and their loom models) in
//! `crates/strobe-sampler`. Must never allocate or lock on the handler's side, and never
//! let a slot be reused while its old owner or the writer may still touch it.
//!
//! The handler finds its slot without thread-local storage: the leader's `sig_data`
//! (delivered in `si_perf_data`) carries `generation << 16 | index`.

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU8, Ordering};

pub use strobe_sampler::slot::{ACTIVE, CLOSING, DEAD};
pub use strobe_sampler::RECORD_HEAD;
use strobe_sampler::{AltCell, SampleRing, SlotCtl};

/// Slots in the table: threads beyond this many alive at once are not profiled (a note
/// says so).
pub const MAX_SLOTS: usize = 1024;
const _: () = assert!(MAX_SLOTS <= strobe_sampler::slot::MAX_INDEX);
const _: () = assert!(strobe_perf::spec::MAX_GROUP <= strobe_sampler::MAX_COUNTERS);

/// One thread's sampling state. The agent's own fields are atomics so the writer thread
/// may read them while the owner runs; only the owner writes them (Relaxed), and they are
/// published to the writer by the slot's Release of ACTIVE.
pub struct Slot {
    /// FREE, CLAIMED, ACTIVE, CLOSING or DEAD, and the generation.
    pub ctl: SlotCtl,
    /// The samples the owner's handler records; the ring stays with the slot for its
    /// next owner.
    pub ring: SampleRing,
    /// The owner's period alternation and its window statistics.
    pub alt: AltCell,
    /// The owning thread.
    pub tid: AtomicU32,
    /// The group leader's fd (-1 when none).
    pub leader_fd: AtomicI32,
    /// The thread's name was written to the file (writer only).
    pub named: AtomicU8,
    /// The `Box<EventGroup>` of the owner, as a raw pointer (owner only).
    pub group: AtomicPtr<strobe_perf::EventGroup>,
}

impl Slot {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Slot = Slot {
        ctl: SlotCtl::new(),
        ring: SampleRing::new(),
        alt: AltCell::new(),
        tid: AtomicU32::new(0),
        leader_fd: AtomicI32::new(-1),
        named: AtomicU8::new(0),
        group: AtomicPtr::new(std::ptr::null_mut()),
    };
}

/// The table. A plain static: zero-initialised, no allocation, reachable from the handler.
pub static SLOTS: [Slot; MAX_SLOTS] = [Slot::EMPTY; MAX_SLOTS];

/// One past the highest slot index ever claimed, so scans stop early.
pub static HIGH_WATER: AtomicU32 = AtomicU32::new(0);

/// Claims a free slot, returning its index and new generation.
pub fn claim() -> Option<(usize, u32)> {
    for (i, s) in SLOTS.iter().enumerate() {
        if let Some(generation) = s.ctl.try_claim() {
            // Relaxed: only bounds the writer's scan; a slot it misses now is ACTIVE-
            // published and found at the next drain (HIGH_WATER only grows).
            HIGH_WATER.fetch_max(i as u32 + 1, Ordering::Relaxed);
            return Some((i, generation));
        }
    }
    None
}

/// The `sig_data` naming slot `index` at `generation`.
pub fn sig_data(index: usize, generation: u32) -> u64 {
    strobe_sampler::slot::sig_data(index, generation)
}

/// The slot a `sig_data` names, if it is still that generation and active: the signal
/// belongs to the slot's current owner (see `SlotCtl::lookup` for why a late signal of an
/// earlier owner fails). Async-signal-safe.
#[inline]
pub fn lookup(sig_data: u64) -> Option<&'static Slot> {
    let (index, generation) = strobe_sampler::slot::decode(sig_data);
    let slot = SLOTS.get(index)?;
    slot.ctl.lookup(generation).then_some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sig_data_names_slot_and_generation() {
        let (i, g) = claim().expect("a free slot");
        let data = sig_data(i, g);
        assert!(lookup(data).is_none(), "a claimed slot is not active yet");
        SLOTS[i].ctl.activate();
        assert!(std::ptr::eq(lookup(data).unwrap(), &SLOTS[i]));
        assert!(lookup(sig_data(i, g.wrapping_add(1))).is_none(), "stale generation");
        assert!(SLOTS[i].ctl.begin_close());
        SLOTS[i].ctl.finish_close(true);
    }
}
