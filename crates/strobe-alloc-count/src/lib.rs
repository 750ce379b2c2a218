//! A counting global allocator for tests: the tests that prove a hot path allocates
//! nothing (the report's aggregation, the protocol's encoders, a probe's trigger, a stack
//! walk in a signal handler) and that attach/detach cycles leak nothing install it with
//!
//! ```ignore
//! #[global_allocator]
//! static A: strobe_alloc_count::Counting = strobe_alloc_count::Counting;
//! ```
//!
//! and read [`allocations`], [`live`] or [`thread_calls`] around the code they measure.
//!
//! Owns: the counters. Must never allocate or take a lock itself: it runs inside the
//! allocator and, for the unwinder's test, inside a signal handler (the thread's counter
//! is a const-initialised `Cell` with no destructor, which a handler may touch).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Forwards every call to the system allocator unchanged and counts it.
pub struct Counting;

/// Allocations and reallocations in the whole process.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Blocks allocated and not yet freed in the whole process.
static LIVE: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// This thread's allocator calls of every kind.
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

fn note_call() {
    // try_with: a thread being torn down (its thread-locals gone) still frees memory.
    let _ = CALLS.try_with(|c| c.set(c.get() + 1));
}

// Relaxed throughout: each counter is read by the test after the code it measures, on the
// thread that ran it or after joining or synchronising with the threads that did (a
// barrier, a lock); no other memory is published through these counters.

// SAFETY: every call is forwarded to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are this allocator's; the counting touches only atomics and a
// const-initialised thread-local, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE.fetch_add(1, Ordering::Relaxed);
        note_call();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        note_call();
        // SAFETY: `ptr` came from `System` with this layout (every block of the process
        // does, through this allocator).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        note_call();
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations and reallocations so far, in the whole process.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Blocks allocated and not freed, in the whole process.
pub fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// This thread's allocator calls so far (allocations, reallocations and frees): any
/// change across a path means the path used the allocator. Usable in a signal handler.
pub fn thread_calls() -> u64 {
    CALLS.try_with(Cell::get).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static A: Counting = Counting;

    #[test]
    fn every_kind_of_call_is_counted() {
        let (a0, c0) = (allocations(), thread_calls());
        let mut v: Vec<u64> = Vec::with_capacity(4);
        v.extend([1, 2, 3, 4, 5]); // grows: a reallocation
        let live_with = live();
        drop(v);
        // Process-wide: the harness's own threads may allocate meanwhile.
        assert!(allocations() - a0 >= 2, "one allocation, one reallocation");
        assert_eq!(thread_calls() - c0, 3, "an allocation, a reallocation and a free");
        assert!(live_with - live() >= 1, "the block is no longer live");
        let c1 = thread_calls();
        let x = std::hint::black_box(7u64) * 3;
        assert_eq!((thread_calls(), x), (c1, 21), "arithmetic uses no allocator");
    }
}
