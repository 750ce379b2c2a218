//! The agent's private per-thread state, beside each thread's shared slot in the arena.
//!
//! Owns: what only this process may touch about a slot: its perf group's descriptors and
//! the thread's stack bounds. The shared half
//! (life cycle, custody, alternation) lives in the arena (`strobe_sampler::custody::
//! SharedSlot`), which forked children share with their parent: nothing private may go
//! there. Must never allocate or lock on the handler's side.
//!
//! The handler finds its slot without thread-local storage: the leader's `sig_data`
//! (delivered in `si_perf_data`) carries `generation << 16 | index`.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

use strobe_perf::spec::MAX_GROUP;

/// Slots this agent can use (the arena may have fewer; the table is a zeroed static).
pub const MAX_SLOTS: usize = 16_384;
const _: () = assert!(MAX_SLOTS <= strobe_sampler::slot::MAX_INDEX);

/// One thread's private state. Atomics so the handler and the owner agree without
/// locks; only the owner stores (Relaxed), its own handler reads on the same thread.
pub struct Local {
    /// The group leader's fd (-1 when none).
    pub leader_fd: AtomicI32,
    /// The group's descriptors, leader first (-1: none), in the agent's band (see
    /// `fds`); only the owner stores, `dup2` onto one may move it (`fds`).
    pub fds: [AtomicI32; MAX_GROUP],
    /// The owner's `Box<ThreadWalker>` (stack bounds, module-table registration), as a
    /// raw pointer (owner only).
    pub walker: AtomicPtr<crate::stack::ThreadWalker>,
    /// The owner's `Box<OverflowRing>` (the group's values at each overflow), as a raw
    /// pointer; null when windows are off or the ring could not be mapped.
    pub ring: AtomicPtr<strobe_perf::overflow::OverflowRing>,
    /// The owner has the sampler's signal blocked (its mask at start, or a later
    /// sigprocmask/pthread_sigmask): its sampling is paused and the kernel floor samples
    /// it until it unblocks the signal.
    pub masked: AtomicBool,
    /// The owner paused its sampling (`sampler::pause`: an exec, or SIGTRAP about to be
    /// blocked): the handler takes an overflow that was already on its way but never
    /// arms the leader again; only `sampler::arm` does.
    pub paused: AtomicBool,
    /// The owner was counted among the threads that block the sampler's signal.
    pub counted_blocked: AtomicBool,
    /// The owner's alternate signal stack (`altstack`).
    pub alt: crate::altstack::AltState,
}

impl Local {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Local = Local {
        leader_fd: AtomicI32::new(-1),
        fds: [const { AtomicI32::new(-1) }; MAX_GROUP],
        walker: AtomicPtr::new(std::ptr::null_mut()),
        ring: AtomicPtr::new(std::ptr::null_mut()),
        masked: AtomicBool::new(false),
        paused: AtomicBool::new(false),
        counted_blocked: AtomicBool::new(false),
        alt: crate::altstack::AltState::empty(),
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

    /// Closes the group's descriptors, if any, and gives them back to the budget. The
    /// owner, or a forked child discarding its copies of the parent's.
    pub fn close_group(&self) {
        self.leader_fd.store(-1, Ordering::Relaxed);
        let mut n = 0;
        for f in &self.fds {
            let fd = f.swap(-1, Ordering::Relaxed);
            if fd >= 0 {
                crate::fds::close_own(fd);
                n += 1;
            }
        }
        crate::fds::give_back(n);
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

/// The slot index and generation a `sig_data` names (`None`: not strobe's).
#[inline]
pub fn decode(sig_data: u64) -> Option<(usize, u32)> {
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
        assert_eq!(decode(d), Some((513, 9)));
        assert_eq!(decode(sig_data(7, u32::MAX)), Some((7, u32::MAX)));
        assert_eq!(decode(513 | (9 << 16)), None, "untagged: not strobe's");
    }
}
