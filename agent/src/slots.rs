//! The agent's private per-thread state, beside each thread's shared slot in the arena.
//!
//! Owns: what only this process may touch about a slot: its perf group (the fds and the
//! `Box<EventGroup>` that closes them) and the thread's stack bounds. The shared half
//! (life cycle, custody, alternation) lives in the arena (`strobe_sampler::custody::
//! SharedSlot`), which forked children share with their parent: nothing private may go
//! there. Must never allocate or lock on the handler's side.
//!
//! The handler finds its slot without thread-local storage: the leader's `sig_data`
//! (delivered in `si_perf_data`) carries `generation << 16 | index`.

use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

/// Slots this agent can use (the arena may have fewer; the table is a zeroed static).
pub const MAX_SLOTS: usize = 16_384;
const _: () = assert!(MAX_SLOTS <= strobe_sampler::slot::MAX_INDEX);

/// One thread's private state. Atomics so the handler and the owner agree without
/// locks; only the owner stores (Relaxed), its own handler reads on the same thread.
pub struct Local {
    /// The group leader's fd (-1 when none).
    pub leader_fd: AtomicI32,
    /// The owner's `Box<EventGroup>`, as a raw pointer (owner only).
    pub group: AtomicPtr<strobe_perf::EventGroup>,
    /// The owner's `Box<ThreadWalker>` (stack bounds, module-table registration), as a
    /// raw pointer (owner only).
    pub walker: AtomicPtr<crate::stack::ThreadWalker>,
    /// The owner's `Box<OverflowRing>` (the group's values at each overflow), as a raw
    /// pointer; null when windows are off or the ring could not be mapped.
    pub ring: AtomicPtr<strobe_perf::overflow::OverflowRing>,
}

impl Local {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Local = Local {
        leader_fd: AtomicI32::new(-1),
        group: AtomicPtr::new(std::ptr::null_mut()),
        walker: AtomicPtr::new(std::ptr::null_mut()),
        ring: AtomicPtr::new(std::ptr::null_mut()),
    };

    /// The overflow ring, if any (the owner's handler, on the owner's thread).
    #[inline]
    pub fn ring(&self) -> Option<&strobe_perf::overflow::OverflowRing> {
        let r = self.ring.load(Ordering::Relaxed);
        // SAFETY: a pointer from Box::into_raw (sampler::open_slot), freed only by the
        // owner after its events are closed and its handler can no longer run for it.
        (!r.is_null()).then(|| unsafe { &*r })
    }

    /// Unmaps and frees the overflow ring, if any (the owner, its events closed).
    pub fn drop_ring(&self) {
        let r = self.ring.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !r.is_null() {
            // SAFETY: from Box::into_raw, swapped out: freed once; the owner's handler
            // cannot run for it any more (the caller's contract).
            unsafe { Box::from_raw(r).unmap() };
        }
    }

    /// Forgets the overflow ring of a thread that does not exist here: a forked child
    /// has no copy of the parent's ring mappings (the kernel does not copy them).
    pub fn forget_ring(&self) {
        let r = self.ring.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !r.is_null() {
            // SAFETY: from Box::into_raw; the Box's memory was copied by fork and is ours
            // to free, but its mapping is absent in this process: free without unmapping.
            drop(unsafe { Box::from_raw(r) });
        }
    }

    /// Drops the group (closing its fds), if any. The owner, or a forked child
    /// discarding its copies of the parent's fds.
    pub fn close_group(&self) {
        let g = self.group.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !g.is_null() {
            // SAFETY: the pointer came from Box::into_raw (sampler::open_slot) and was
            // swapped out, so it is dropped exactly once.
            drop(unsafe { Box::from_raw(g) });
        }
        self.leader_fd.store(-1, Ordering::Relaxed);
    }

    /// Drops the owner's walker state (on the owning thread: it unregisters the thread
    /// from the module table's read side).
    pub fn drop_walker(&self) {
        let w = self.walker.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !w.is_null() {
            // SAFETY: from Box::into_raw in sampler::open_slot, swapped out: dropped once.
            drop(unsafe { Box::from_raw(w) });
        }
    }

    /// Forgets (leaks) the walker state of a thread that does not exist here (a forked
    /// child's copy of its parent's threads: their read-side records are the parent's).
    pub fn forget_walker(&self) {
        self.walker.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
}

/// The private table, indexed like the arena's slots.
pub static LOCAL: [Local; MAX_SLOTS] = [Local::EMPTY; MAX_SLOTS];

/// The slot index and generation a `sig_data` names.
#[inline]
pub fn decode(sig_data: u64) -> (usize, u32) {
    strobe_sampler::slot::decode(sig_data)
}

/// The `sig_data` naming slot `index` at `generation`.
pub fn sig_data(index: usize, generation: u32) -> u64 {
    strobe_sampler::slot::sig_data(index, generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sig_data_names_slot_and_generation() {
        let d = sig_data(513, 9);
        assert_eq!(decode(d), (513, 9));
    }
}
