//! The walk path allocates nothing: a counting global allocator around walks
//! taken in a signal handler and in normal context, with rule-cache misses
//! (a fresh cache, and a new module table after a rescan) and hits.

use strobe_unwind::{modules, walk_dwarf, walk_fp, walk_fp_in, Regs, StackBounds, ThreadCache};

#[global_allocator]
static A: strobe_alloc_count::Counting = strobe_alloc_count::Counting;

/// This thread's allocator calls (usable in the signal handler).
fn count() -> u64 {
    strobe_alloc_count::thread_calls()
}

static mut STATE: Option<(StackBounds, ThreadCache, [u64; 128], u64, usize)> = None;

extern "C" fn on_usr2(_: libc::c_int, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: the kernel's ucontext; STATE is set up by the test thread before
    // it raises the signal and used by nobody else meanwhile.
    unsafe {
        let regs = Regs::from_ucontext(uc);
        let Some((bounds, cache, out, allocs, frames)) = (*std::ptr::addr_of_mut!(STATE)).as_mut()
        else {
            return;
        };
        let before = count();
        let w = walk_dwarf(&regs, bounds, cache, out);
        walk_fp(&regs, bounds, out);
        walk_fp_in(&regs, bounds, cache, out);
        *allocs += count() - before;
        *frames += w.frames;
    }
}

#[inline(never)]
fn deep(n: u32, f: &mut dyn FnMut()) {
    if n == 0 {
        f()
    } else {
        deep(n - 1, f)
    }
    std::hint::black_box(n);
}

#[test]
fn walks_allocate_nothing() {
    modules::init();
    let bounds = StackBounds::of_current_thread().unwrap();
    // SAFETY: no handler is installed yet.
    unsafe { STATE = Some((bounds, ThreadCache::new(), [0; 128], 0, 0)) };
    // SAFETY: a valid SA_SIGINFO handler.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr2 as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
    for round in 0..3 {
        if round == 1 {
            // A new table: every cached rule is stale, the next walks miss.
            modules::rescan();
        }
        deep(20, &mut || {
            for _ in 0..50 {
                // SAFETY: raising a signal whose handler is installed above.
                unsafe { libc::raise(libc::SIGUSR2) };
            }
        });
    }
    // Normal context too.
    let mut direct = 0;
    deep(20, &mut || {
        // SAFETY: STATE is ours (the handler runs only on raise, on this thread).
        let (bounds, cache, out, _, _) =
            unsafe { (*std::ptr::addr_of_mut!(STATE)).as_mut().unwrap() };
        let before = count();
        for _ in 0..100 {
            walk_dwarf(&Regs::here(), bounds, cache, out);
        }
        direct = count() - before;
    });
    // SAFETY: no signal is pending any more.
    let (_, cache, _, allocs, frames) = unsafe { (*std::ptr::addr_of_mut!(STATE)).take().unwrap() };
    let stats = cache.stats();
    println!("handler walks: {frames} frames, {allocs} allocations; direct: {direct}; {stats:?}");
    assert!(frames >= 150 * 20, "walks too shallow: {frames} frames");
    assert!(stats.misses > 0 && stats.hits > stats.misses);
    assert_eq!(allocs, 0, "allocations on the walk path in the handler");
    assert_eq!(direct, 0, "allocations on the walk path");
}
