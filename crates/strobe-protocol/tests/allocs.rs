//! The encoders that run in the target's hot paths allocate nothing: a watch hit encoded
//! by the agent's writer into a buffer with room, and a probe trace line encoded on the
//! probe's trigger path (possibly in a signal handler) into a fixed buffer. Counted with
//! a global allocator that counts every allocation of this test binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use strobe_protocol::probe::{LineBuf, TraceKind, TraceLine};
use strobe_protocol::watch::{CodeAddr, HitRecord, Message, MAX_ADDRS};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One test, so no other test's thread allocates while this one counts.
#[test]
fn hot_path_encoders_allocate_nothing() {
    let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut hit = HitRecord::new(3, 4242, false, Some(1), 2);
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 0..MAX_ADDRS as u64 {
        hit.push(CodeAddr { module: 1, vaddr: 0x1000 + i });
    }
    for _ in 0..1000 {
        Message::Hit(hit).encode(&mut out);
        Message::Lost(7).encode(&mut out);
    }
    let args = [1, 2, u64::MAX];
    for kind in [TraceKind::Fire, TraceKind::Entry, TraceKind::Exit { dur_ns: 99 }] {
        let mut line = LineBuf::<512>::new();
        TraceLine { probe: "a \"name\"\n", tid: 1, ns: 2, kind, args: &args }.encode(&mut line);
        assert!(!line.is_cut());
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations on the hot path");
    assert!(out.len() > 1000 * 20, "the hits were encoded: {} bytes", out.len());
}
